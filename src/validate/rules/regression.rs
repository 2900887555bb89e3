//! Baseline-relative rules (`regress_at_most`): the candidate/baseline ratio of the
//! metric's statistic against `1 ± margin`, in the metric's "worse" direction.

use super::{Judgement, read_interval};
use crate::domain::metric::{Better, Metric};
use crate::domain::verdict::Verdict;
use crate::stats::{
    self, Bootstrap, MwuMethod, TwoSample, flag_outliers, group_by_run, hodges_lehmann, mann_whitney_u,
    quantile, quantile_ci_ranks,
};
use crate::validate::describe::{num, p_value, percent, range, signed_with_unit, with_unit_named};
use crate::validate::observe::Observed;

/// What a baseline rule compares: a metric of the gate, or the numbers of two files for
/// `stats compare`, which judges them with this same rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quantity<'a> {
    /// Its name in messages.
    pub name: &'a str,
    /// Its unit (`s`, `x`, `GFLOP/s`, …; empty for plain numbers).
    pub unit: &'a str,
    /// Which direction is an improvement.
    pub better: Better,
}

impl From<Metric> for Quantity<'static> {
    fn from(m: Metric) -> Self {
        Quantity {
            name: m.name(),
            unit: m.unit(),
            better: m.better(),
        }
    }
}

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
/// half-width and the minimum detectable regression at 80% power (DESIGN.md §6), which
/// tells a reader whether an inconclusive verdict needs more runs or a wider margin, and
/// the outliers flagged on each side (dropped first only when `drop_outliers`).
///
/// `p_value` of the judgement is the bootstrap p-value of "the regression is within the
/// margin" (`2·share of replicates on the good side of the limit`): the test whose
/// rejection is a `fail`, so that `assess` can correct it across guardrails.
pub(crate) fn regression(
    metric: Quantity<'_>,
    candidate: &Observed,
    baseline: &Observed,
    margin: f64,
    confidence: f64,
    boot: Bootstrap,
    drop_outliers: bool,
) -> Judgement {
    let lower_better = metric.better == Better::Lower;
    let limit = Limit {
        ratio: if lower_better { 1.0 + margin } else { 1.0 - margin },
        lower_better,
    };
    match (candidate, baseline) {
        (Observed::Point(c), Observed::Point(b)) => points(metric, *c, *b, &limit),
        (Observed::Sampled { .. }, Observed::Sampled { .. }) => sampled(
            metric,
            candidate,
            baseline,
            &limit,
            confidence,
            boot,
            drop_outliers,
        ),
        _ => Judgement::inconclusive(format!(
            "`{}` is sampled on one side and a counter on the other; cannot compare: inconclusive",
            metric.name
        )),
    }
}

/// Two counters: the ratio is exact, so the verdict is pass or fail.
fn points(metric: Quantity<'_>, c: f64, b: f64, limit: &Limit) -> Judgement {
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
        undecided_by: None,
        verdict,
        value: Some(c),
        baseline: Some(b),
        ci: ratio.map(|r| (r, r)),
        p_value: None,
        samples: 1,
        detail: format!(
            "{} vs baseline {} (counters): {ratio_s}, allowed {}: {verdict}",
            with_unit_named(c, metric.unit),
            with_unit_named(b, metric.unit),
            limit.describe()
        ),
    }
}

/// Two samples: bootstrap interval of the ratio of their `q`-quantiles.
fn sampled(
    metric: Quantity<'_>,
    candidate: &Observed,
    baseline: &Observed,
    limit: &Limit,
    confidence: f64,
    boot: Bootstrap,
    drop_outliers: bool,
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
    // Flag outliers on both sides; drop them only when the pack says so.
    let flags = (
        flag_outliers(cs).unwrap_or_default(),
        flag_outliers(bs).unwrap_or_default(),
    );
    let outliers_s = format!(
        "; outliers{}: candidate {}, baseline {}",
        if drop_outliers { " (dropped)" } else { "" },
        flags.0.describe(),
        flags.1.describe()
    );
    let keep = |xs: &[f64], runs: &[u32], drop: Vec<usize>| -> (Vec<f64>, Vec<u32>) {
        if !drop_outliers {
            return (xs.to_vec(), runs.to_vec());
        }
        let xs2 = stats::without(xs, &drop);
        let runs2 = if runs.len() == xs.len() {
            runs.iter()
                .enumerate()
                .filter(|(i, _)| drop.binary_search(i).is_err())
                .map(|(_, r)| *r)
                .collect()
        } else {
            vec![]
        };
        (xs2, runs2)
    };
    let (cs, cr) = keep(cs, cr, flags.0.to_drop());
    let (bs, br) = keep(bs, br, flags.1.to_drop());
    let (cs, cr, bs, br) = (&cs[..], &cr[..], &bs[..], &br[..]);
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
        let min_n = crate::stats::quantile_ci_min_n(q, confidence);
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
            "`{}` has non-positive samples, so a candidate/baseline ratio is meaningless: inconclusive",
            metric.name
        )));
    }
    // Run-aware when every sample carries its run id (DESIGN.md §6); plain otherwise.
    let groups = |xs: &[f64], runs: &[u32]| -> Vec<Vec<f64>> {
        if runs.len() == xs.len() {
            group_by_run("x", xs, runs).unwrap_or_else(|_| vec![xs.to_vec()])
        } else {
            vec![xs.to_vec()]
        }
    };
    let (gb, gc) = (groups(bs, br), groups(cs, cr));
    let runs_s = if gb.len() >= 2 || gc.len() >= 2 {
        format!(
            "; run-aware: {} candidate and {} baseline runs, bootstrap resamples runs then samples within runs",
            gc.len(),
            gb.len()
        )
    } else {
        String::new()
    };
    let dist = match boot.distribution(&gb, &gc, TwoSample::RatioOfQuantiles { q }) {
        Ok(d) => d,
        Err(e) => {
            return with_numbers(Judgement::inconclusive(format!(
                "no ratio to the baseline: {e}: inconclusive"
            )));
        }
    };
    let boot_ci = dist.percentile(confidence);
    // The decision reads the most efficient valid interval: for the median of single-run
    // samples, the Hodges–Lehmann interval of the shift of log times (rank inversion of
    // Mann–Whitney: exact under "no change" whatever the distribution, ~95% of the
    // t-test's efficiency under normality, where the bootstrap of a ratio of medians has
    // ~64%). Run-aware comparisons and other quantiles keep the bootstrap interval.
    let by_ranks = (gb.len() == 1 && gc.len() == 1 && q == 0.5)
        .then(|| log_shift(bs, cs, limit, confidence))
        .flatten();
    let (estimate, ci, p_fail, method_s, alongside_s) = match by_ranks {
        Some(r) => (
            r.estimate,
            r.ci,
            r.p_fail,
            "Hodges–Lehmann interval of the log-time shift".to_owned(),
            format!(
                "; Mann–Whitney p(within margin) = {}; bootstrap ratio of medians {} ({} CI {}, ×{})",
                num(r.p_fail),
                num(dist.estimate),
                percent(confidence),
                range(boot_ci.0, boot_ci.1),
                boot.resamples
            ),
        ),
        None => {
            // p of "within the margin": replicates on the good side of the limit, both
            // tails' worth.
            let p_fail = (2.0
                * if limit.lower_better {
                    dist.share_at_most(limit.ratio)
                } else {
                    dist.share_at_least(limit.ratio)
                })
            .min(1.0);
            (
                dist.estimate,
                boot_ci,
                p_fail,
                format!("bootstrap ×{}", boot.resamples),
                format!("; bootstrap p(within margin) = {}", num(p_fail)),
            )
        }
    };
    let verdict = read_interval(ci, limit.ratio, limit.lower_better);
    let mde_s = stats::se_from_interval(ci.0, ci.1, confidence).map_or_else(String::new, |se| {
        // The mirror of the ratio for higher-is-better metrics: a drop to 1/(1+x).
        let m = if limit.lower_better {
            limit.ratio - 1.0
        } else {
            1.0 / limit.ratio - 1.0
        };
        let mde = stats::mde(se, m, confidence, stats::DEFAULT_POWER);
        format!(
            "; smallest regression detectable with 80% power: {}{}%",
            if limit.lower_better { "+" } else { "−" },
            num(if limit.lower_better {
                mde
            } else {
                1.0 - 1.0 / (1.0 + mde)
            } * 100.0)
        )
    });

    let p_mwu = mann_whitney_u(cs, bs, MwuMethod::Auto)
        .ok()
        .map(|m| if limit.lower_better { m.p_greater } else { m.p_less });
    let hl_s = match hodges_lehmann(bs, cs, confidence) {
        Ok(h) => match h.ci {
            Some((lo, hi)) => format!(
                "; Hodges–Lehmann shift {} ({} CI {})",
                signed_with_unit(h.shift, metric.unit),
                percent(confidence),
                range(lo, hi)
            ),
            None => format!(
                "; Hodges–Lehmann shift {}",
                signed_with_unit(h.shift, metric.unit)
            ),
        },
        Err(_) => String::new(),
    };
    let p_s = p_mwu.map_or_else(String::new, |p| {
        format!("; Mann–Whitney one-sided {} (no change vs worse)", p_value(p))
    });
    let show = |v: Option<f64>| v.map_or_else(|| "?".into(), |v| with_unit_named(v, metric.unit));
    with_numbers(Judgement {
        undecided_by: None,
        verdict,
        ci: Some(ci),
        p_value: Some(p_fail),
        detail: format!(
            "{stat} {} vs baseline {}: ratio {} ({} CI {}, half-width {}%, {method_s}, n = {nc}/{nb}), \
             allowed {}: {verdict}{alongside_s}{runs_s}{mde_s}{hl_s}{p_s}{outliers_s}",
            show(value),
            show(base),
            num(estimate),
            percent(confidence),
            range(ci.0, ci.1),
            num((ci.1 - ci.0) / 2.0 * 100.0),
            limit.describe(),
        ),
        ..Judgement::inconclusive(String::new())
    })
}

/// The rank-based reading of a median ratio (see `sampled`).
struct LogShift {
    /// `exp` of the Hodges–Lehmann shift of log(candidate) − log(baseline).
    estimate: f64,
    /// `exp` of its confidence interval.
    ci: (f64, f64),
    /// Two-sided-equivalent p of "within the margin": twice the one-sided Mann–Whitney p of
    /// the candidate, moved back by the limit, being worse than the baseline.
    p_fail: f64,
}

/// Hodges–Lehmann on log times: `None` when the samples are too small for an interval at
/// `confidence` (or too large for the pairwise differences), so the caller falls back.
fn log_shift(baseline: &[f64], candidate: &[f64], limit: &Limit, confidence: f64) -> Option<LogShift> {
    let lb: Vec<f64> = baseline.iter().map(|v| v.ln()).collect();
    let lc: Vec<f64> = candidate.iter().map(|v| v.ln()).collect();
    let hl = hodges_lehmann(&lb, &lc, confidence).ok()?;
    let (lo, hi) = hl.ci?;
    let moved: Vec<f64> = lc.iter().map(|v| v - limit.ratio.ln()).collect();
    let mwu = mann_whitney_u(&moved, &lb, MwuMethod::Auto).ok()?;
    let p_one = if limit.lower_better {
        mwu.p_greater
    } else {
        mwu.p_less
    };
    Some(LogShift {
        estimate: hl.shift.exp(),
        ci: (lo.exp(), hi.exp()),
        p_fail: (2.0 * p_one).min(1.0),
    })
}
