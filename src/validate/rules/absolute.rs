//! Absolute bounds (`at_most`, `at_least`): the interval of the metric's statistic
//! against a fixed number.

use super::{Judgement, read_interval};
use crate::domain::metric::Metric;
use crate::domain::verdict::Verdict;
use crate::stats::{quantile, quantile_ci};
use crate::validate::describe::{percent, range, with_unit};
use crate::validate::observe::Observed;

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
                undecided_by: None,
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
                undecided_by: None,
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
