//! Baseline-relative rules (`regress_at_most`): the candidate/baseline ratio of the
//! metric's statistic against `1 ± margin`, in the metric's "worse" direction.

use super::{Judgement, read_interval};
use crate::metric::{Better, Metric};
use crate::validate::describe::{num, p_value, percent, range, signed_with_unit, with_unit};
use crate::validate::observe::Observed;
use crate::validate::stats::{
    Bootstrap, BootstrapCi, MwuMethod, hodges_lehmann, mann_whitney_u, quantile, quantile_ci_ranks,
};
use crate::verdict::Verdict;

/// The tolerated ratio and the direction of "worse" for one rule.
struct Limit {
    /// `1 + margin` (lower is better) or `1 − margin` (higher is better).
    ratio: f64,
    /// Whether a larger value is worse.
    lower_better: bool,
}

impl Limit {
    fn describe(&self) -> String {
        format!(
            "{} {}",
            if self.lower_better { "≤" } else { "≥" },
            num(self.ratio)
        )
    }
}

/// `regress_at_most margin` against a golden baseline: the ratio candidate/baseline of the
/// statistic, with a seeded (run-aware) bootstrap interval, read against `1 ± margin` in
/// the metric's "worse" direction: fail when the whole interval is beyond the limit, pass
/// when it is wholly within (non-inferiority shown), inconclusive otherwise. The one-sided
/// Mann–Whitney p-value (candidate worse) and the Hodges–Lehmann shift are reported
/// alongside; the verdict is the interval's. The detail also gives the interval's
/// half-width: the smallest change this evidence can resolve (DESIGN.md §6), which tells a
/// reader whether an inconclusive verdict needs more runs or a wider margin.
pub(crate) fn regression(
    metric: Metric,
    candidate: &Observed,
    baseline: &Observed,
    margin: f64,
    confidence: f64,
    boot: Bootstrap,
) -> Judgement {
    let lower_better = metric.better() == Better::Lower;
    let limit = Limit {
        ratio: if lower_better { 1.0 + margin } else { 1.0 - margin },
        lower_better,
    };
    match (candidate, baseline) {
        (Observed::Point(c), Observed::Point(b)) => points(metric, *c, *b, &limit),
        (Observed::Sampled { .. }, Observed::Sampled { .. }) => {
            sampled(metric, candidate, baseline, &limit, confidence, boot)
        }
        _ => Judgement::inconclusive(format!(
            "`{metric}` is sampled on one side and a counter on the other; cannot compare: inconclusive"
        )),
    }
}

/// Two counters: the ratio is exact, so the verdict is pass or fail.
fn points(metric: Metric, c: f64, b: f64, limit: &Limit) -> Judgement {
    let (verdict, ratio) = if b != 0.0 {
        let r = c / b;
        (read_interval((r, r), limit.ratio, limit.lower_better), Some(r))
    } else {
        // No ratio against zero: any move in the worse direction is a regression.
        let worse = if limit.lower_better { c > 0.0 } else { c < 0.0 };
        (if worse { Verdict::Fail } else { Verdict::Pass }, None)
    };
    let ratio_s = ratio.map_or_else(|| "baseline is 0".into(), |r| format!("ratio {}", num(r)));
    Judgement {
        verdict,
        value: Some(c),
        baseline: Some(b),
        ci: ratio.map(|r| (r, r)),
        p_value: None,
        samples: 1,
        detail: format!(
            "{} vs baseline {} (counters): {ratio_s}, allowed {}: {verdict}",
            with_unit(c, metric),
            with_unit(b, metric),
            limit.describe()
        ),
    }
}

/// Two samples: bootstrap interval of the ratio of their `q`-quantiles.
fn sampled(
    metric: Metric,
    candidate: &Observed,
    baseline: &Observed,
    limit: &Limit,
    confidence: f64,
    boot: Bootstrap,
) -> Judgement {
    let (
        Observed::Sampled {
            samples: cs,
            runs: cr,
            q,
        },
        Observed::Sampled {
            samples: bs,
            runs: br,
            ..
        },
    ) = (candidate, baseline)
    else {
        return Judgement::inconclusive("internal: not two samples: inconclusive".into());
    };
    let q = *q;
    let stat = candidate.statistic();
    let (nc, nb) = (cs.len(), bs.len());
    let value = quantile(cs, q).ok();
    let base = quantile(bs, q).ok();
    let with_numbers = |j: Judgement| Judgement {
        value,
        baseline: base,
        samples: nc,
        ..j
    };

    // The same sample-size floor as the absolute rules: a side too small to bound its own
    // statistic cannot bound a ratio either (a bootstrap would pretend it could).
    if quantile_ci_ranks(nc, q, confidence).is_none() || quantile_ci_ranks(nb, q, confidence).is_none() {
        let min_n = (1..=100_000).find(|&n| quantile_ci_ranks(n, q, confidence).is_some());
        return with_numbers(Judgement::inconclusive(format!(
            "{nc} candidate and {nb} baseline samples: a {} interval of the {stat} needs at least {} per \
             side: inconclusive",
            percent(confidence),
            min_n.map_or_else(|| "more".into(), |n| n.to_string()),
        )));
    }
    // A ratio of statistics only means "x% slower" for positive quantities (times, rates).
    if cs.iter().chain(bs.iter()).any(|&v| v <= 0.0) {
        return with_numbers(Judgement::inconclusive(format!(
            "`{metric}` has non-positive samples, so a candidate/baseline ratio is meaningless: inconclusive"
        )));
    }
    // Run-aware when every sample carries its run id (DESIGN.md §6); plain otherwise.
    let ratio = if cr.len() == nc && br.len() == nb {
        boot.ratio_of_quantiles_by_run((bs, br), (cs, cr), q, confidence)
    } else {
        boot.ratio_of_quantiles(bs, cs, q, confidence)
    };
    let ratio: BootstrapCi = match ratio {
        Ok(r) => r,
        Err(e) => {
            return with_numbers(Judgement::inconclusive(format!(
                "no ratio to the baseline: {e}: inconclusive"
            )));
        }
    };
    let ci = (ratio.low, ratio.high);
    let verdict = read_interval(ci, limit.ratio, limit.lower_better);

    let p = mann_whitney_u(cs, bs, MwuMethod::Auto)
        .ok()
        .map(|m| if limit.lower_better { m.p_greater } else { m.p_less });
    let hl_s = match hodges_lehmann(bs, cs, confidence) {
        Ok(h) => match h.ci {
            Some((lo, hi)) => format!(
                "; Hodges–Lehmann shift {} ({} CI {})",
                signed_with_unit(h.shift, metric),
                percent(confidence),
                range(lo, hi)
            ),
            None => format!("; Hodges–Lehmann shift {}", signed_with_unit(h.shift, metric)),
        },
        Err(_) => String::new(),
    };
    let p_s = p.map_or_else(String::new, |p| {
        format!("; Mann–Whitney one-sided {}", p_value(p))
    });
    let show = |v: Option<f64>| v.map_or_else(|| "?".into(), |v| with_unit(v, metric));
    with_numbers(Judgement {
        verdict,
        ci: Some(ci),
        p_value: p,
        detail: format!(
            "{stat} {} vs baseline {}: ratio {} ({} CI {}, half-width {}%, bootstrap ×{}, n = {nc}/{nb}), \
             allowed {}: {verdict}{hl_s}{p_s}",
            show(value),
            show(base),
            num(ratio.estimate),
            percent(confidence),
            range(ratio.low, ratio.high),
            num((ratio.high - ratio.low) / 2.0 * 100.0),
            ratio.resamples,
            limit.describe(),
        ),
        ..Judgement::inconclusive(String::new())
    })
}
