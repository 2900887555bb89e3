//! `accuracy` and `quality_delta` bounds, read from the quality evidence's intervals (the
//! Wilson interval of the accuracy; Newcombe's paired interval of the difference from the
//! dense reference, with McNemar's p), never from the point estimate.

use super::{Judgement, read_interval};
use crate::domain::metric::Metric;
use crate::domain::verdict::Verdict;
use crate::execute::QualityEvidence;
use crate::validate::describe::{num, percent, range};
use crate::validate::quality::versus_dense;

/// Judge an `at_most` (`upper`) or `at_least` bound on `accuracy` or `quality_delta`.
pub(crate) fn quality(
    metric: Metric,
    q: &QualityEvidence,
    bound: f64,
    upper: bool,
    confidence: f64,
) -> Judgement {
    let r = match versus_dense(q, confidence) {
        Ok(r) => r,
        Err(why) => return Judgement::inconclusive(format!("{why}: inconclusive")),
    };
    let n = r.table.total() as usize;
    let (value, ci, p_value, what) = match metric {
        Metric::Accuracy => (
            r.accuracy,
            r.accuracy_ci,
            None,
            format!(
                "test accuracy {} ({}/{n}, {} Wilson CI {})",
                num(r.accuracy),
                r.table.both + r.table.only_candidate,
                percent(confidence),
                range(r.accuracy_ci.0, r.accuracy_ci.1)
            ),
        ),
        _ => (
            r.delta,
            r.delta_ci,
            Some(r.mcnemar_p),
            format!(
                "accuracy − dense accuracy = {} − {} = {} ({} Newcombe paired CI {}; {} vs {} discordant \
                 samples, exact McNemar p = {})",
                num(r.accuracy),
                num(r.reference_accuracy),
                num(r.delta),
                percent(confidence),
                range(r.delta_ci.0, r.delta_ci.1),
                r.table.only_candidate,
                r.table.only_reference,
                num(r.mcnemar_p)
            ),
        ),
    };
    let verdict = read_interval(ci, bound, upper);
    let relation = match (verdict, upper) {
        (Verdict::Pass, true) => "≤",
        (Verdict::Pass, false) => "≥",
        (Verdict::Fail, true) => ">",
        (Verdict::Fail, false) => "<",
        _ => "straddles",
    };
    Judgement {
        undecided_by: None,
        verdict,
        value: Some(value),
        baseline: None,
        ci: Some(ci),
        p_value,
        samples: n,
        detail: if verdict == Verdict::Inconclusive {
            format!(
                "{what} {relation} {}: inconclusive (the {n} test samples give an interval {} wide; a \
                 margin this close needs a larger test split)",
                num(bound),
                num(ci.1 - ci.0)
            )
        } else {
            format!("{what} {relation} {}: {verdict}", num(bound))
        },
    }
}
