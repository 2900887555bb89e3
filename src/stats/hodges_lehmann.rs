//! The Hodges–Lehmann shift: the location difference that goes with the Mann–Whitney test.
//!
//! The estimate is the median of all `n₁·n₂` pairwise differences `y_j − x_i` (so a
//! positive shift means `y` is larger), and its confidence interval is found by inverting
//! the rank test: `(d_(k), d_(N+1−k))` where `k − 1` is the lower critical value of U. This
//! is what R's `wilcox.test(conf.int = TRUE)` and Kayenta report. It needs no assumption on
//! the shape of the distributions beyond a common shape, and is robust to outliers that
//! would move a difference of means.

use super::error::{StatsError, check_probability, check_sample};
use super::quantile::quantile_sorted;
use super::u_distribution::UDistribution;
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};

/// Largest `n₁·n₂` for which the interval uses the exact U distribution; above it the
/// normal approximation is within a rank of exact and much cheaper.
pub const EXACT_CI_MAX_PAIRS: usize = 2_500;

/// Largest `n₁·n₂` accepted: the differences are materialised (8 bytes each).
pub const MAX_PAIRS: usize = 10_000_000;

/// A shift estimate with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HodgesLehmann {
    /// Median of the pairwise differences `y − x`.
    pub shift: f64,
    /// The interval's ends, `None` when the samples are too small for the confidence asked
    /// (the smallest attainable p-value is above `1 − confidence`).
    pub ci: Option<(f64, f64)>,
    /// Confidence of `ci`.
    pub confidence: f64,
    /// Whether the critical value came from the exact U distribution.
    pub exact: bool,
}

/// Hodges–Lehmann shift of `y` relative to `x` with a `confidence` interval.
///
/// Errors on empty or non-finite samples, a confidence outside (0, 1), or more than
/// [`MAX_PAIRS`] pairs.
pub fn hodges_lehmann(x: &[f64], y: &[f64], confidence: f64) -> Result<HodgesLehmann, StatsError> {
    check_sample("x", x, 1)?;
    check_sample("y", y, 1)?;
    check_probability("confidence", confidence, true)?;
    let pairs = x
        .len()
        .checked_mul(y.len())
        .filter(|&p| p <= MAX_PAIRS)
        .ok_or_else(|| {
            StatsError::InvalidArgument(format!(
                "{} × {} pairs exceed the limit of {MAX_PAIRS}",
                x.len(),
                y.len()
            ))
        })?;
    let mut d = Vec::with_capacity(pairs);
    for &yj in y {
        d.extend(x.iter().map(|&xi| yj - xi));
    }
    let exact = pairs <= EXACT_CI_MAX_PAIRS;
    let k = critical_rank(x.len(), y.len(), confidence, exact);
    // Only four order statistics are needed (the two middle ones and the interval ends):
    // selection is O(N) where a sort of 10⁶ differences would be O(N log N).
    let mid = (pairs - 1) / 2;
    let mut wanted = vec![mid, (mid + 1).min(pairs - 1)];
    if let Some(k) = k {
        wanted.extend([k - 1, pairs - k]);
    }
    let order = order_statistics(&mut d, wanted);
    let at = |i: usize| order.iter().find(|(j, _)| *j == i).map_or(f64::NAN, |(_, v)| *v);
    let shift = if pairs % 2 == 1 {
        at(mid)
    } else {
        let (lo, hi) = (at(mid), at(mid + 1));
        quantile_sorted(&[lo, hi], 0.5)
    };
    let ci = k.map(|k| (at(k - 1), at(pairs - k)));
    Ok(HodgesLehmann {
        shift,
        ci,
        confidence,
        exact,
    })
}

/// The values at the 0-based ranks `wanted` of `d` (reordering `d`), as (rank, value):
/// select the largest rank on the whole slice, then each smaller one on the prefix below
/// the previous pivot, which holds exactly the smaller values.
fn order_statistics(d: &mut [f64], mut wanted: Vec<usize>) -> Vec<(usize, f64)> {
    wanted.sort_unstable();
    wanted.dedup();
    let mut out = Vec::with_capacity(wanted.len());
    let mut end = d.len();
    for &i in wanted.iter().rev() {
        let (_, v, _) = d[..end].select_nth_unstable_by(i, f64::total_cmp);
        out.push((i, *v));
        end = i;
    }
    out
}

/// The 1-based rank `k` of the lower interval end: the largest `k ≥ 1` with
/// `P(U ≤ k − 1) ≤ α/2`, from the exact distribution or its normal approximation
/// (`k = ⌊N/2 − z·σ + ½⌋`, continuity-corrected, with σ² = n₁n₂(n₁+n₂+1)/12). `None` when no `k` qualifies.
fn critical_rank(n1: usize, n2: usize, confidence: f64, exact: bool) -> Option<usize> {
    let alpha_half = (1.0 - confidence) / 2.0;
    let pairs = n1 * n2;
    let k = if exact {
        let dist = UDistribution::new(n1, n2, pairs / 2);
        // Largest c with cdf(c) ≤ α/2, then k = c + 1.
        let mut c = -1i64;
        while dist.cdf(c + 1) <= alpha_half {
            c += 1;
        }
        (c + 1) as usize
    } else {
        let (a, b) = (n1 as f64, n2 as f64);
        let sigma = (a * b * (a + b + 1.0) / 12.0).sqrt();
        let z = Normal::standard().inverse_cdf(1.0 - alpha_half);
        // P(U ≤ c) ≈ Φ((c + ½ − N/2)/σ) ≤ α/2  ⇔  c ≤ N/2 − zσ − ½; k = c + 1.
        let k = (a * b / 2.0 - z * sigma + 0.5).floor();
        if k < 1.0 { 0 } else { k as usize }
    };
    (k >= 1 && 2 * k <= pairs + 1).then_some(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shift_of_a_translated_sample_is_the_translation() {
        let x: Vec<f64> = (0..20).map(|i| f64::from(i) * 0.37 + 1.0).collect();
        let y: Vec<f64> = x.iter().map(|v| v + 2.5).collect();
        let hl = hodges_lehmann(&x, &y, 0.95).unwrap();
        assert!((hl.shift - 2.5).abs() < 1e-12);
        let (lo, hi) = hl.ci.unwrap();
        assert!(lo < 2.5 && hi > 2.5, "{lo} {hi}");
    }

    #[test]
    fn exact_critical_value_matches_tables() {
        // n1 = n2 = 10, two-sided 5%: lower critical U = 23, so k = 24.
        assert_eq!(critical_rank(10, 10, 0.95, true), Some(24));
        // The normal approximation lands within one rank of it.
        let k = critical_rank(10, 10, 0.95, false).unwrap();
        assert!((23..=25).contains(&k), "{k}");
        // Too small: 2 vs 2 cannot reach 95%.
        assert_eq!(critical_rank(2, 2, 0.95, true), None);
    }

    #[test]
    fn large_inputs_are_fast_enough() {
        let x: Vec<f64> = (0..1000).map(|i| f64::from(i).sin()).collect();
        let y: Vec<f64> = (0..1000).map(|i| f64::from(i).cos() + 0.1).collect();
        let hl = hodges_lehmann(&x, &y, 0.95).unwrap();
        assert!(hl.ci.is_some());
        assert!(!hl.exact);
    }
}
