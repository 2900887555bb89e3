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
