//! Sample quantiles and their distribution-free confidence intervals.
//!
//! The point estimate is Hyndman–Fan **type 7** (linear interpolation between order
//! statistics, `h = (n − 1)·q`), the default of numpy (`percentile(..., method="linear")`),
//! R and Excel, so a number printed in a memo can be reproduced with one line of Python.
//! The interval comes from order statistics and the binomial distribution, which assumes
//! nothing about the shape of the timing distribution (timings are skewed and often
//! multi-modal, so normal-theory intervals would mislead).

use super::error::{StatsError, check_probability, check_sample, sorted};
use statrs::function::factorial::ln_binomial;

/// The `q`-quantile of `xs` (any order), Hyndman–Fan type 7 — numpy's default.
///
/// Errors on an empty sample, a non-finite value, or `q` outside [0, 1].
pub fn quantile(xs: &[f64], q: f64) -> Result<f64, StatsError> {
    check_sample("x", xs, 1)?;
    check_probability("q", q, false)?;
    Ok(quantile_sorted(&sorted(xs), q))
}

/// The median (type 7, i.e. the mean of the two middle values for even `n`).
pub fn median(xs: &[f64]) -> Result<f64, StatsError> {
    quantile(xs, 0.5)
}

/// Type-7 quantile of an already sorted, finite slice (NaN when empty). Internal fast path
/// for resampling loops, where validation has been done once up front.
pub(crate) fn quantile_sorted(s: &[f64], q: f64) -> f64 {
    let n = s.len();
    match n {
        0 => return f64::NAN,
        1 => return s[0],
        _ => {}
    }
    let h = (n - 1) as f64 * q;
    let lo = h.floor();
    let i = lo as usize;
    if i + 1 >= n {
        return s[n - 1];
    }
    lerp(s[i], s[i + 1], h - lo)
}

/// numpy's `_lerp`: `a + (b − a)·t`, switched to `b − (b − a)·(1 − t)` for `t ≥ ½` so that
/// the result is exact at both ends and bit-identical to numpy. Infinite neighbours (only
/// bootstrap replicates of a ratio can be infinite) give the nearer one instead of NaN.
pub(crate) fn lerp(a: f64, b: f64, frac: f64) -> f64 {
    if !(a.is_finite() && b.is_finite()) {
        return if frac < 0.5 { a } else { b };
    }
    let diff = b - a;
    if frac >= 0.5 {
        b - diff * (1.0 - frac)
    } else {
        a + diff * frac
    }
}

/// A distribution-free confidence interval for the `q`-quantile of the population `xs`
/// was drawn from: `(x_(r), x_(s))`, the order statistics chosen so that
/// `P(r ≤ K ≤ s − 1) ≥ confidence` for `K ~ Binomial(n, q)` (the number of values below
/// the true quantile), with each tail at most `(1 − confidence)/2`. This is the interval
/// asv reports for medians.
///
/// Returns `None` when `n` is too small for any such pair to exist (e.g. fewer than 6
/// values for a 95% interval of the median, or fewer than ~60 for the p95): then the
/// sample simply cannot bound the quantile, and a verdict read from it must be
/// inconclusive. Bad input (empty, non-finite, probabilities out of range) also gives
/// `None`; use [`quantile`] first to get a typed error.
pub fn quantile_ci(xs: &[f64], q: f64, confidence: f64) -> Option<(f64, f64)> {
    let (r, s) = quantile_ci_ranks(xs.len(), q, confidence)?;
    if check_sample("x", xs, 1).is_err() {
        return None;
    }
    let v = sorted(xs);
    Some((v[r - 1], v[s - 1]))
}

/// The 1-based ranks `(r, s)` of the order statistics bounding the `q`-quantile of `n`
/// values at `confidence`, or `None` when no such pair exists.
pub fn quantile_ci_ranks(n: usize, q: f64, confidence: f64) -> Option<(usize, usize)> {
    if n == 0 || !(q > 0.0 && q < 1.0) || !(confidence > 0.0 && confidence < 1.0) {
        return None;
    }
    let tail = (1.0 - confidence) / 2.0;
    // cdf[k] = P(K ≤ k), accumulated from log-space pmfs (stable for large n).
    let (ln_q, ln_1q) = (q.ln(), (1.0 - q).ln());
    let mut lower: Option<usize> = None;
    let mut upper: Option<usize> = None;
    let mut cdf = 0.0;
    for k in 0..n {
        let ln_pmf = ln_binomial(n as u64, k as u64) + k as f64 * ln_q + (n - k) as f64 * ln_1q;
        cdf += ln_pmf.exp();
        // x_(r) lies below the quantile unless K ≤ r − 1: P(miss low) = P(K ≤ r − 1).
        if cdf <= tail {
            lower = Some(k + 1);
        }
        // x_(s) lies above it unless K ≥ s: P(miss high) = 1 − P(K ≤ s − 1).
        if 1.0 - cdf <= tail {
            upper = Some(k + 1);
            break;
        }
    }
    match (lower, upper) {
        (Some(r), Some(s)) if r <= s => Some((r, s)),
        _ => None,
    }
}

/// The fewest values for which [`quantile_ci_ranks`] bounds the `q`-quantile at
/// `confidence`: both tails need `P(miss) ≤ (1 − confidence)/2`, i.e. `(1 − q)ⁿ` and `qⁿ` at
/// most that, so `n = max(⌈ln t / ln q⌉, ⌈ln t / ln(1 − q)⌉)`, confirmed against the ranks
/// themselves. `None` for `q` or `confidence` outside (0, 1).
///
/// One helper for every "is the budget big enough" question (issue 24): the validate-time
/// refusal of a p95/p99 guardrail with too small a sample budget (or too few load
/// requests) and the run-time "needs at least n per side" of the regression rule.
/// E.g. at 95%: 6 for the median, 72 for the p95, 368 for the p99.
pub fn quantile_ci_min_n(q: f64, confidence: f64) -> Option<usize> {
    if !(q > 0.0 && q < 1.0 && confidence > 0.0 && confidence < 1.0) {
        return None;
    }
    let tail = (1.0 - confidence) / 2.0;
    let need = |p: f64| (tail.ln() / p.ln()).ceil().max(1.0);
    let guess = need(q).max(need(1.0 - q));
    if !guess.is_finite() || guess > 1e9 {
        return None;
    }
    // The closed form can be off by one either way where rounding meets the tail; step to
    // the exact answer (a handful of iterations at most).
    let mut n = (guess as usize).saturating_sub(2).max(1);
    while quantile_ci_ranks(n, q, confidence).is_none() {
        n += 1;
        if n as f64 > guess + 64.0 {
            return None;
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 24: the minimal n is the first n the ranks accept, found without a linear scan.
    #[test]
    fn the_minimal_n_is_the_first_size_that_bounds_the_quantile() {
        for (q, c) in [
            (0.5, 0.95),
            (0.95, 0.95),
            (0.99, 0.95),
            (0.99, 0.99),
            (0.9, 0.9),
            (0.5, 0.999),
        ] {
            let n = quantile_ci_min_n(q, c).unwrap();
            assert!(quantile_ci_ranks(n, q, c).is_some(), "q={q} c={c} n={n}");
            assert!(quantile_ci_ranks(n - 1, q, c).is_none(), "q={q} c={c} n={n}");
        }
        assert_eq!(quantile_ci_min_n(0.5, 0.95), Some(6));
        assert_eq!(quantile_ci_min_n(1.0, 0.95), None);
    }

    #[test]
    fn type7_matches_hand_values() {
        let xs = [3.0, 1.0, 4.0, 1.0, 5.0];
        assert_eq!(median(&xs).unwrap(), 3.0);
        assert_eq!(quantile(&xs, 0.25).unwrap(), 1.0);
        assert_eq!(quantile(&xs, 0.9).unwrap(), 4.6);
        assert_eq!(quantile(&[1.0, 2.0], 0.5).unwrap(), 1.5);
        assert_eq!(quantile(&[7.0], 0.99).unwrap(), 7.0);
        assert_eq!(quantile(&xs, 1.0).unwrap(), 5.0);
        assert_eq!(quantile(&xs, 0.0).unwrap(), 1.0);
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        assert!(matches!(median(&[]), Err(StatsError::TooFew { .. })));
        assert!(matches!(
            median(&[1.0, f64::NAN]),
            Err(StatsError::NonFinite { index: 1, .. })
        ));
        assert!(matches!(
            quantile(&[1.0], 1.5),
            Err(StatsError::InvalidArgument(_))
        ));
        assert_eq!(
            quantile_ci(&[1.0, f64::INFINITY, 2.0, 3.0, 4.0, 5.0, 6.0], 0.5, 0.9),
            None
        );
    }

    #[test]
    fn median_ci_uses_the_textbook_ranks() {
        // n = 6 at 95%: (x_(1), x_(6)), coverage 1 − 2/64 = 0.969.
        assert_eq!(quantile_ci_ranks(6, 0.5, 0.95), Some((1, 6)));
        assert_eq!(quantile_ci_ranks(5, 0.5, 0.95), None);
        // n = 20 at 95%: (x_(6), x_(15)) (P(K ≤ 5) = 0.0207).
        assert_eq!(quantile_ci_ranks(20, 0.5, 0.95), Some((6, 15)));
        // p99 with 30 values cannot be bounded above.
        assert_eq!(quantile_ci_ranks(30, 0.99, 0.95), None);
        let xs: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(quantile_ci(&xs, 0.5, 0.95), Some((6.0, 15.0)));
    }

    #[test]
    fn ci_coverage_is_at_least_nominal() {
        for n in [6usize, 11, 30, 100, 250] {
            for q in [0.5, 0.9, 0.95] {
                if let Some((r, s)) = quantile_ci_ranks(n, q, 0.95) {
                    let dist = |k: usize| -> f64 {
                        (0..=k)
                            .map(|j| {
                                (ln_binomial(n as u64, j as u64)
                                    + j as f64 * q.ln()
                                    + (n - j) as f64 * (1.0 - q).ln())
                                .exp()
                            })
                            .sum()
                    };
                    let coverage = dist(s - 1) - dist(r - 1);
                    assert!(coverage >= 0.95 - 1e-12, "n={n} q={q} coverage {coverage}");
                }
            }
        }
    }
}
