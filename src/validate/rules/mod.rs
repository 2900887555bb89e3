//! The three-valued reading of one rule (DESIGN.md §4): pass when the whole interval lies on
//! the good side, fail when it lies wholly on the bad side, inconclusive otherwise.

mod absolute;
mod paired;
mod quality;
mod regression;
mod runs;

pub(crate) use absolute::absolute;
pub(crate) use paired::{paired_regression, pairs_decide};
pub(crate) use quality::quality;
pub(crate) use regression::{Quantity, regression};
pub(crate) use runs::{absolute_by_run, normalise_by_calibration};

use crate::domain::verdict::Verdict;

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
    /// Set where drift or contention, not the sample size, left it undecided.
    pub undecided_by: Option<crate::validate::Undecided>,
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
            undecided_by: None,
        }
    }
}

/// Three-valued comparison of an interval with a bound: `at_most` when `upper`, else
/// `at_least`.
pub(super) fn read_interval((lo, hi): (f64, f64), bound: f64, upper: bool) -> Verdict {
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
