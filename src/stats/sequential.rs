//! Sequential sampling: how much error rate each interim look may spend.
//!
//! A slice that keeps sampling while its guardrail is undecided looks at the data several
//! times; reading every look at the full α inflates the false-alarm rate (five looks at 5%
//! fail an A/A comparison ~14% of the time). The Lan–DeMets spending function of
//! O'Brien–Fleming type, `α(t) = 2 − 2Φ(z_{1−α/2}/√t)` for information fraction
//! `t = n/n_max`, spends almost nothing early and nearly all of α at the last look. Each
//! look here is read at its *increment* `α(t_k) − α(t_{k−1})`; by the union bound the
//! chance of any false decision over all looks stays at most α, whatever the correlation
//! between looks (conservative, but needs no recursive integration and no assumption on
//! the statistic). The execution loop uses it through `validate::interim_look` for slices
//! with `samples.sequential`, with runs as the looks.

use super::error::{StatsError, check_probability};
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};

/// Cumulative α spent by information fraction `t ∈ (0, 1]` (O'Brien–Fleming type).
pub fn obrien_fleming_alpha(alpha: f64, t: f64) -> f64 {
    if t <= 0.0 {
        return 0.0;
    }
    let n = Normal::standard();
    let z = n.inverse_cdf(1.0 - alpha / 2.0);
    (2.0 - 2.0 * n.cdf(z / t.min(1.0).sqrt())).min(alpha)
}

/// The error rate one interim look may use.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SequentialLook {
    /// Samples (or runs) per side at this look.
    pub n: usize,
    /// `n / n_max`.
    pub information: f64,
    /// α spent up to and including this look.
    pub cumulative_alpha: f64,
    /// α of this look alone (the increment).
    pub alpha: f64,
    /// Confidence of the two-sided interval to read at this look: each side of it is a
    /// one-sided test at `alpha / 2`, matching the rule's tails.
    pub confidence: f64,
}

impl SequentialLook {
    /// The looks of a schedule that samples up to `n_max` per side and looks at each of
    /// `ns` (ascending, the last one should be `n_max`), for an overall `alpha` (the
    /// `1 − confidence` of the guardrail).
    pub fn schedule(alpha: f64, ns: &[usize], n_max: usize) -> Result<Vec<SequentialLook>, StatsError> {
        check_probability("alpha", alpha, true)?;
        if n_max == 0 || ns.windows(2).any(|w| w[0] >= w[1]) || ns.iter().any(|&n| n == 0 || n > n_max) {
            return Err(StatsError::InvalidArgument(format!(
                "looks {ns:?} are not strictly increasing within 1..={n_max}"
            )));
        }
        let mut spent = 0.0;
        Ok(ns
            .iter()
            .map(|&n| {
                let t = n as f64 / n_max as f64;
                let cumulative = obrien_fleming_alpha(alpha, t);
                let look = (cumulative - spent).max(0.0);
                spent = cumulative;
                SequentialLook {
                    n,
                    information: t,
                    cumulative_alpha: cumulative,
                    alpha: look,
                    confidence: 1.0 - look,
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_looks_spend_exactly_alpha() {
        let looks = SequentialLook::schedule(0.05, &[10, 20, 30, 40, 50], 50).unwrap();
        let total: f64 = looks.iter().map(|l| l.alpha).sum();
        assert!((total - 0.05).abs() < 1e-9, "{total}");
        assert!(looks[0].alpha < 1e-4, "{:?}", looks[0]);
        assert!(looks.windows(2).all(|w| w[0].alpha < w[1].alpha));
        assert!(SequentialLook::schedule(0.05, &[20, 10], 50).is_err());
    }
}
