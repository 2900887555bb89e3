//! Welch's unequal-variance t test, as `scipy.stats.ttest_ind(x, y, equal_var=False)`.
//!
//! Kept next to the rank tests because it answers a different question (a difference of
//! *means*, which outliers move) and users coming from criterion or hyperfine expect it; the
//! gate itself reads medians and ranks.

use super::error::{StatsError, check_sample};
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Result of a Welch t test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Welch {
    /// `(mean(x) − mean(y)) / sqrt(s²ₓ/nₓ + s²ᵧ/nᵧ)`.
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value from Student's t with `df` degrees of freedom.
    pub p_two_sided: f64,
}

/// Welch's t test of `x` against `y`.
///
/// Errors when a sample has fewer than two values, holds a non-finite value, or both
/// samples are constant (the statistic is 0/0).
pub fn welch_t(x: &[f64], y: &[f64]) -> Result<Welch, StatsError> {
    check_sample("x", x, 2)?;
    check_sample("y", y, 2)?;
    let WelchParts { diff, se, df, dist } = welch_parts(x, y)?;
    let t = diff / se;
    // 2·P(T ≤ −|t|) keeps precision in the far tail (1 − cdf would cancel).
    let p_two_sided = (2.0 * dist.cdf(-t.abs())).min(1.0);
    Ok(Welch { t, df, p_two_sided })
}

/// What Welch's test and TOST share: the difference of means, its standard error with
/// unpooled variances, and Student's t on the Welch–Satterthwaite degrees of freedom.
pub(super) struct WelchParts {
    pub diff: f64,
    pub se: f64,
    pub df: f64,
    pub dist: StudentsT,
}

/// [`WelchParts`] of two checked samples; errors when both are constant.
pub(super) fn welch_parts(x: &[f64], y: &[f64]) -> Result<WelchParts, StatsError> {
    let (mx, vx) = mean_var(x);
    let (my, vy) = mean_var(y);
    let (nx, ny) = (x.len() as f64, y.len() as f64);
    let (ax, ay) = (vx / nx, vy / ny);
    let se2 = ax + ay;
    if se2 <= 0.0 {
        return Err(StatsError::Degenerate("both samples are constant".into()));
    }
    let df = se2 * se2 / (ax * ax / (nx - 1.0) + ay * ay / (ny - 1.0));
    let dist = StudentsT::new(0.0, 1.0, df).map_err(|e| StatsError::Degenerate(format!("Student t: {e}")))?;
    Ok(WelchParts {
        diff: mx - my,
        se: se2.sqrt(),
        df,
        dist,
    })
}

/// Mean and unbiased variance, two-pass (numerically stable for timings with a large
/// common offset).
fn mean_var(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let ss: f64 = xs.iter().map(|v| (v - mean) * (v - mean)).sum();
    (mean, ss / (n - 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_samples_give_t_zero() {
        let w = welch_t(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(w.t, 0.0);
        assert!((w.p_two_sided - 1.0).abs() < 1e-12);
        assert!((w.df - 4.0).abs() < 1e-12);
    }

    #[test]
    fn degenerate_inputs_are_errors() {
        assert!(matches!(
            welch_t(&[1.0], &[1.0, 2.0]),
            Err(StatsError::TooFew { .. })
        ));
        assert!(matches!(
            welch_t(&[1.0, 1.0], &[2.0, 2.0]),
            Err(StatsError::Degenerate(_))
        ));
    }
}
