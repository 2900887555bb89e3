//! Proportions: Wilson intervals and McNemar's test for paired classifier outcomes.
//!
//! Why Wilson: the textbook (Wald) interval collapses to zero width at 0 or n successes
//! and under-covers for small n; Wilson keeps nominal coverage and is what
//! `statsmodels.stats.proportion.proportion_confint(method="wilson")` returns. Why McNemar:
//! when a sparse and a dense model classify the *same* inputs, only the discordant pairs
//! carry information about which is better; an unpaired two-proportion test would waste
//! the pairing. Both match statsmodels on the committed fixtures.

use super::error::{StatsError, check_probability};
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};
use statrs::function::erf::erfc;
use statrs::function::factorial::ln_binomial;

/// Wilson score interval for `successes` out of `n` at `confidence`.
///
/// Errors when `n` is 0, `successes > n`, or the confidence is outside (0, 1).
pub fn wilson(successes: u64, n: u64, confidence: f64) -> Result<(f64, f64), StatsError> {
    check_probability("confidence", confidence, true)?;
    if n == 0 || successes > n {
        return Err(StatsError::InvalidArgument(format!(
            "{successes} successes out of {n} trials"
        )));
    }
    let z = Normal::standard().inverse_cdf(1.0 - (1.0 - confidence) / 2.0);
    let (k, nf) = (successes as f64, n as f64);
    let p = k / nf;
    let z2 = z * z;
    let denom = 1.0 + z2 / nf;
    let center = (p + z2 / (2.0 * nf)) / denom;
    let half = z * (p * (1.0 - p) / nf + z2 / (4.0 * nf * nf)).sqrt() / denom;
    Ok((center - half, center + half))
}

/// Newcombe's interval for the difference of two *paired* proportions (method 10 of
/// Newcombe 1998, "Improved confidence intervals for the difference between binomial
/// proportions based on paired data", Stat. Med. 17:2635): the square-and-add combination
/// of the two marginal Wilson intervals, corrected for the pairs' correlation φ.
///
/// The table counts pairs by outcome: `both` right, `only_first` right, `only_second`
/// right, `neither`. The difference is first − second = (only_first − only_second) / n.
/// Why this interval: it keeps near-nominal coverage for proportions near 1 (accuracies
/// of good classifiers) and never leaves [−1, 1], where the Wald interval of the paired
/// difference collapses when there are few discordant pairs.
pub fn newcombe_paired(
    both: u64,
    only_first: u64,
    only_second: u64,
    neither: u64,
    confidence: f64,
) -> Result<(f64, f64), StatsError> {
    let n = both + only_first + only_second + neither;
    let first = both + only_first;
    let second = both + only_second;
    let (l1, u1) = wilson(first, n, confidence)?;
    let (l2, u2) = wilson(second, n, confidence)?;
    let nf = n as f64;
    let (p1, p2) = (first as f64 / nf, second as f64 / nf);
    let (a, b, c, d) = (both as f64, only_first as f64, only_second as f64, neither as f64);
    let margins = (a + b) * (c + d) * (a + c) * (b + d);
    let phi = if margins > 0.0 {
        (a * d - b * c) / margins.sqrt()
    } else {
        0.0
    };
    let delta = p1 - p2;
    let lower = ((p1 - l1).powi(2) - 2.0 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2).powi(2)).max(0.0);
    let upper = ((u1 - p1).powi(2) - 2.0 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2).powi(2)).max(0.0);
    Ok(((delta - lower.sqrt()).max(-1.0), (delta + upper.sqrt()).min(1.0)))
}

/// McNemar's test on the discordant counts of a paired 2×2 table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct McNemar {
    /// Exact: `min(b, c)`; chi-square: `(|b − c| − 1)² / (b + c)`.
    pub statistic: f64,
    /// Two-sided p-value.
    pub p_value: f64,
    /// Whether the exact binomial test was used.
    pub exact: bool,
}

/// McNemar's test with `b` = pairs where only the first classifier was right, `c` = only
/// the second. `exact`: the two-sided binomial test `min(1, 2·P(Bin(b + c, ½) ≤ min(b, c)))`
/// (statsmodels `mcnemar(exact=True)`); otherwise the chi-square with continuity correction
/// (`exact=False, correction=True`). With no discordant pairs there is no evidence either
/// way and p = 1 (statsmodels' chi-square divides by zero there).
pub fn mcnemar(b: u64, c: u64, exact: bool) -> McNemar {
    let n = b + c;
    if exact {
        let k = b.min(c);
        let ln_half = -(n as f64) * std::f64::consts::LN_2;
        let cdf: f64 = (0..=k).map(|j| (ln_binomial(n, j) + ln_half).exp()).sum();
        return McNemar {
            statistic: k as f64,
            p_value: (2.0 * cdf).min(1.0),
            exact: true,
        };
    }
    if n == 0 {
        return McNemar {
            statistic: 0.0,
            p_value: 1.0,
            exact: false,
        };
    }
    let d = (b as f64 - c as f64).abs() - 1.0;
    let statistic = d * d / n as f64;
    // χ²₁ survival function: P(X > s) = erfc(√(s/2)).
    McNemar {
        statistic,
        p_value: erfc((statistic / 2.0).sqrt()),
        exact: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_hand_values() {
        let (lo, hi) = wilson(0, 10, 0.95).unwrap();
        assert!(lo.abs() < 1e-15, "{lo}");
        assert!((hi - 0.277_532_799_862_889_5).abs() < 1e-9, "{hi}");
        assert!(wilson(1, 0, 0.95).is_err());
        assert!(wilson(3, 2, 0.95).is_err());
    }

    /// Values from `scripts/gen_paired_quality_fixtures.py` (statsmodels 0.14 Wilson and
    /// McNemar; the φ = 0 row equals statsmodels' independent-samples Newcombe interval).
    #[test]
    fn issue_7_newcombe_paired_matches_statsmodels() {
        let close = |got: (f64, f64), want: (f64, f64)| {
            assert!(
                (got.0 - want.0).abs() < 1e-12 && (got.1 - want.1).abs() < 1e-12,
                "{got:?} vs {want:?}"
            );
        };
        close(
            newcombe_paired(20, 10, 20, 10, 0.95).unwrap(),
            (-0.328_801_169_257_215_03, 0.009_241_460_435_526_65),
        );
        close(
            newcombe_paired(340, 6, 12, 1, 0.95).unwrap(),
            (-0.042_656_382_120_971_45, 0.007_416_394_991_161_434),
        );
        close(
            newcombe_paired(330, 2, 9, 18, 0.95).unwrap(),
            (-0.040_892_867_154_853_41, -0.000_753_634_897_605_982_2),
        );
        close(
            newcombe_paired(12, 9, 2, 21, 0.95).unwrap(),
            (0.018_210_226_243_591_92, 0.289_156_659_588_272_4),
        );
        assert!((mcnemar(6, 12, true).p_value - 0.237_884_521_484_375).abs() < 1e-12);
        assert!((mcnemar(2, 9, true).p_value - 0.065_429_687_5).abs() < 1e-12);
        assert!(newcombe_paired(0, 0, 0, 0, 0.95).is_err());
    }

    #[test]
    fn mcnemar_hand_values() {
        let m = mcnemar(0, 0, true);
        assert_eq!(m.p_value, 1.0);
        assert_eq!(mcnemar(0, 0, false).p_value, 1.0);
        // 1 vs 9 discordant: 2·P(Bin(10, ½) ≤ 1) = 2·11/1024.
        assert!((mcnemar(1, 9, true).p_value - 22.0 / 1024.0).abs() < 1e-15);
        let chi = mcnemar(1, 9, false);
        assert!((chi.statistic - 4.9).abs() < 1e-12);
    }
}
