//! The three-valued reading of one rule (DESIGN.md §4): pass when the whole interval lies on
//! the good side, fail when it lies wholly on the bad side, inconclusive otherwise.

use super::describe::{num, p_value, percent, range, signed_with_unit, with_unit};
use super::observe::Observed;
use super::stats::{
    Bootstrap, MwuMethod, hodges_lehmann, mann_whitney_u, quantile, quantile_ci, quantile_ci_ranks,
};
use crate::metric::{Better, Metric};
use crate::verdict::Verdict;

/// What a rule concluded, before severity and stage attribution.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Judgement {
    pub verdict: Verdict,
    pub value: Option<f64>,
    pub baseline: Option<f64>,
    pub ci: Option<(f64, f64)>,
    pub p_value: Option<f64>,
    pub samples: usize,
    pub detail: String,
}

impl Judgement {
    /// An inconclusive reading with a reason and no numbers.
    pub(crate) fn inconclusive(detail: String) -> Judgement {
        Judgement {
            verdict: Verdict::Inconclusive,
            value: None,
            baseline: None,
            ci: None,
            p_value: None,
            samples: 0,
            detail,
        }
    }
}

/// Three-valued comparison of an interval with a bound: `at_most` when `upper`, else
/// `at_least`.
fn read_interval((lo, hi): (f64, f64), bound: f64, upper: bool) -> Verdict {
    let (good, bad) = if upper {
        (hi <= bound, lo > bound)
    } else {
        (lo >= bound, hi < bound)
    };
    if good {
        Verdict::Pass
    } else if bad {
        Verdict::Fail
    } else {
        Verdict::Inconclusive
    }
}

/// `at_most` (`upper`) or `at_least` a `bound`: the interval is the distribution-free
/// order-statistic interval of the statistic (median or tail quantile); a counter is a
/// point and is compared directly.
pub(crate) fn absolute(
    metric: Metric,
    obs: &Observed,
    bound: f64,
    upper: bool,
    confidence: f64,
) -> Judgement {
    let (ok_op, bad_op) = if upper { ("≤", ">") } else { ("≥", "<") };
    let bound_s = with_unit(bound, metric);
    match obs {
        Observed::Point(v) => {
            let verdict = read_interval((*v, *v), bound, upper);
            let op = if verdict == Verdict::Pass { ok_op } else { bad_op };
            Judgement {
                verdict,
                value: Some(*v),
                baseline: None,
                ci: Some((*v, *v)),
                p_value: None,
                samples: 1,
                detail: format!("{} (counter) {op} {bound_s}: {verdict}", with_unit(*v, metric)),
            }
        }
        Observed::Sampled { samples, q, .. } => {
            let stat = obs.statistic();
            let n = samples.len();
            let value = quantile(samples, *q).ok();
            let value_s = value.map_or_else(|| "?".into(), |v| with_unit(v, metric));
            let Some(ci) = quantile_ci(samples, *q, confidence) else {
                return Judgement {
                    value,
                    samples: n,
                    ..Judgement::inconclusive(format!(
                        "{stat} {value_s} from {n} samples: too few for a {} order-statistic interval of the \
                         {stat}; cannot judge {} {bound_s}: inconclusive",
                        percent(confidence),
                        if upper { "at_most" } else { "at_least" },
                    ))
                };
            };
            let verdict = read_interval(ci, bound, upper);
            let relation = match verdict {
                Verdict::Pass => format!("{ok_op} {bound_s}"),
                Verdict::Fail => format!("{bad_op} {bound_s}"),
                _ => format!("straddles {bound_s}"),
            };
            Judgement {
                verdict,
                value,
                baseline: None,
                ci: Some(ci),
                p_value: None,
                samples: n,
                detail: format!(
                    "{stat} {value_s} ({} CI {}, order statistics, n = {n}) {relation}: {verdict}",
                    percent(confidence),
                    range(ci.0, ci.1),
                ),
            }
        }
    }
}

/// `regress_at_most margin` against a golden baseline: the ratio candidate/baseline of the
/// statistic, with a seeded (run-aware) bootstrap interval, read against `1 ± margin` in
/// the metric's "worse" direction. The one-sided Mann–Whitney p-value (candidate worse)
/// and the Hodges–Lehmann shift are reported alongside; the verdict is the interval's.
pub(crate) fn regression(
    metric: Metric,
    candidate: &Observed,
    baseline: &Observed,
    margin: f64,
    confidence: f64,
    boot: Bootstrap,
) -> Judgement {
    let lower_better = metric.better() == Better::Lower;
    let limit = if lower_better { 1.0 + margin } else { 1.0 - margin };
    let limit_s = format!("{} {}", if lower_better { "≤" } else { "≥" }, num(limit));
    match (candidate, baseline) {
        (Observed::Point(c), Observed::Point(b)) => {
            let (verdict, ratio_s, ratio) = if *b != 0.0 {
                let r = c / b;
                (
                    read_interval((r, r), limit, lower_better),
                    format!("ratio {}", num(r)),
                    Some(r),
                )
            } else {
                // No ratio against zero: any move in the worse direction is a regression.
                let worse = if lower_better { *c > 0.0 } else { *c < 0.0 };
                (
                    if worse { Verdict::Fail } else { Verdict::Pass },
                    "baseline is 0".into(),
                    None,
                )
            };
            Judgement {
                verdict,
                value: Some(*c),
                baseline: Some(*b),
                ci: ratio.map(|r| (r, r)),
                p_value: None,
                samples: 1,
                detail: format!(
                    "{} vs baseline {} (counters): {ratio_s}, allowed {limit_s}: {verdict}",
                    with_unit(*c, metric),
                    with_unit(*b, metric)
                ),
            }
        }
        (
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
        ) => {
            let stat = candidate.statistic();
            let (nc, nb) = (cs.len(), bs.len());
            let value = quantile(cs, *q).ok();
            let base = quantile(bs, *q).ok();
            let numbers = |j: Judgement| Judgement {
                value,
                baseline: base,
                samples: nc,
                ..j
            };
            if quantile_ci_ranks(nc, *q, confidence).is_none()
                || quantile_ci_ranks(nb, *q, confidence).is_none()
            {
                let min_n = (1..=100_000).find(|&n| quantile_ci_ranks(n, *q, confidence).is_some());
                return numbers(Judgement::inconclusive(format!(
                    "{nc} candidate and {nb} baseline samples: a {} interval of the {stat} needs at least {} \
                     per side: inconclusive",
                    percent(confidence),
                    min_n.map_or_else(|| "more".into(), |n| n.to_string()),
                )));
            }
            let ratio = if cr.len() == nc && br.len() == nb {
                boot.ratio_of_quantiles_by_run((bs, br), (cs, cr), *q, confidence)
            } else {
                boot.ratio_of_quantiles(bs, cs, *q, confidence)
            };
            let ratio = match ratio {
                Ok(r) => r,
                Err(e) => {
                    return numbers(Judgement::inconclusive(format!(
                        "no ratio to the baseline: {e}: inconclusive"
                    )));
                }
            };
            let ci = (ratio.low, ratio.high);
            let verdict = read_interval(ci, limit, lower_better);
            let mwu = mann_whitney_u(cs, bs, MwuMethod::Auto).ok();
            let p = mwu.map(|m| if lower_better { m.p_greater } else { m.p_less });
            let hl = hodges_lehmann(bs, cs, confidence).ok();
            let hl_s = match hl {
                Some(h) => match h.ci {
                    Some((lo, hi)) => format!(
                        "; Hodges–Lehmann shift {} ({} CI {})",
                        signed_with_unit(h.shift, metric),
                        percent(confidence),
                        range(lo, hi)
                    ),
                    None => format!("; Hodges–Lehmann shift {}", signed_with_unit(h.shift, metric)),
                },
                None => String::new(),
            };
            let p_s = p.map_or_else(String::new, |p| {
                format!("; Mann–Whitney one-sided {}", p_value(p))
            });
            Judgement {
                verdict,
                ci: Some(ci),
                p_value: p,
                detail: format!(
                    "{stat} {} vs baseline {}: ratio {} ({} CI {}, bootstrap ×{}, n = {nc}/{nb}), allowed \
                     {limit_s}: {verdict}{hl_s}{p_s}",
                    value.map_or_else(|| "?".into(), |v| with_unit(v, metric)),
                    base.map_or_else(|| "?".into(), |v| with_unit(v, metric)),
                    num(ratio.estimate),
                    percent(confidence),
                    range(ratio.low, ratio.high),
                    ratio.resamples,
                ),
                ..numbers(Judgement::inconclusive(String::new()))
            }
        }
        _ => Judgement::inconclusive(format!(
            "`{metric}` is sampled on one side and a counter on the other; cannot compare: inconclusive"
        )),
    }
}
