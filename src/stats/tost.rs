//! Equivalence and non-inferiority: showing that a change is *small*, not merely that it
//! was not detected.
//!
//! Why: "no significant difference" passes every under-powered, noisy run. A release gate
//! must instead show that the regression is below a margin (non-inferiority, one bound) or
//! that the difference lies within `(low, high)` (equivalence, two one-sided tests). The
//! interval reading ([`non_inferiority`]) is what the gate uses; [`tost_welch`] is the
//! classical test on means, as `statsmodels.stats.weightstats.ttost_ind(usevar="unequal")`.

use super::error::{StatsError, check_sample};
use super::welch::{WelchParts, welch_parts};
use serde::{Deserialize, Serialize};
use statrs::distribution::ContinuousCDF;

/// What an interval says about a margin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The whole interval is on the good side of the limit: non-inferiority shown.
    Shown,
    /// The whole interval is beyond the limit: the regression exceeds the margin.
    Refuted,
    /// The interval straddles the limit: more data or a wider margin is needed.
    Undecided,
}

/// Read an interval `(low, high)` against `limit`: when `larger_is_worse`, shown means
/// `high ≤ limit` and refuted `low > limit`; mirrored otherwise. Each side of a `c`
/// two-sided interval is a one-sided test at `(1 − c)/2`.
pub fn non_inferiority((low, high): (f64, f64), limit: f64, larger_is_worse: bool) -> Decision {
    let (shown, refuted) = if larger_is_worse {
        (high <= limit, low > limit)
    } else {
        (low >= limit, high < limit)
    };
    if shown {
        Decision::Shown
    } else if refuted {
        Decision::Refuted
    } else {
        Decision::Undecided
    }
}

/// Two one-sided Welch tests of `mean(x) − mean(y)` against `(low, high)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tost {
    /// `max(p_low, p_high)`: equivalence is shown at level α when `p < α`.
    pub p: f64,
    /// t of H₀: difference ≤ low.
    pub t_low: f64,
    /// p of H₀: difference ≤ low (upper tail).
    pub p_low: f64,
    /// t of H₀: difference ≥ high.
    pub t_high: f64,
    /// p of H₀: difference ≥ high (lower tail).
    pub p_high: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
}

/// TOST for equivalence of means within `(low, high)` (Welch variances).
///
/// Errors when a side has fewer than two values, a value is non-finite, both sides are
/// constant, or `low ≥ high`.
pub fn tost_welch(x: &[f64], y: &[f64], low: f64, high: f64) -> Result<Tost, StatsError> {
    check_sample("x", x, 2)?;
    check_sample("y", y, 2)?;
    if low.partial_cmp(&high) != Some(std::cmp::Ordering::Less) {
        return Err(StatsError::InvalidArgument(format!(
            "equivalence bounds ({low}, {high}) are not increasing"
        )));
    }
    let WelchParts {
        diff: d,
        se,
        df,
        dist,
    } = welch_parts(x, y)?;
    let t_low = (d - low) / se;
    let t_high = (d - high) / se;
    let p_low = dist.cdf(-t_low);
    let p_high = dist.cdf(t_high);
    Ok(Tost {
        p: p_low.max(p_high),
        t_low,
        p_low,
        t_high,
        p_high,
        df,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_an_interval() {
        assert_eq!(non_inferiority((0.98, 1.03), 1.05, true), Decision::Shown);
        assert_eq!(non_inferiority((1.06, 1.2), 1.05, true), Decision::Refuted);
        assert_eq!(non_inferiority((1.0, 1.1), 1.05, true), Decision::Undecided);
        assert_eq!(non_inferiority((0.96, 1.0), 0.95, false), Decision::Shown);
    }

    #[test]
    fn identical_samples_are_equivalent_within_wide_bounds() {
        let x: Vec<f64> = (0..30).map(|i| f64::from(i % 7)).collect();
        let t = tost_welch(&x, &x, -2.0, 2.0).unwrap();
        assert!(t.p < 0.001, "{t:?}");
        assert!((t.p_low - t.p_high).abs() < 1e-12);
        assert!(tost_welch(&x, &x, 1.0, -1.0).is_err());
    }
}
