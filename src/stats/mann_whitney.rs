//! The Mann–Whitney U test (Wilcoxon rank-sum), following scipy ≥ 1.9 exactly so that any
//! p-value in a memo can be reproduced with `scipy.stats.mannwhitneyu`.
//!
//! - `U` is the statistic of the **first** sample: `U₁ = R₁ − n₁(n₁+1)/2` with mid-ranks.
//! - `method = auto` (scipy's `_mwu_choose_method`): **exact** when at least one sample has
//!   at most 8 values and there are no ties; the **normal approximation** otherwise.
//! - The normal approximation uses the tie-corrected variance
//!   `n₁n₂/12 · ((n+1) − Σ(t³ − t)/(n(n−1)))` and a continuity correction of ½.
//! - One deliberate difference: when the exact distribution would take more than
//!   [`EXACT_MAX_WORK`] additions (e.g. 8 values against tens of thousands), the normal
//!   approximation is used instead and `method` says so; scipy would grind for minutes, and
//!   at those sizes the two agree closely.
//! - One-sided p-values: `greater` (the first sample tends to be larger) is `P(U ≥ U₁)`,
//!   `less` is `P(U ≥ U₂)`; two-sided is `2·P(U ≥ max(U₁, U₂))`, clipped to 1.

use super::error::{StatsError, check_sample};
use super::ranks::midranks;
use super::u_distribution::{UDistribution, exact_work};
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};

/// Budget (in additions, ~0.5 s) for building the exact U distribution.
pub const EXACT_MAX_WORK: f64 = 5e8;

/// How the p-values are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MwuMethod {
    /// scipy's rule: exact for small samples without ties, asymptotic otherwise.
    Auto,
    /// The exact permutation distribution of U. Only valid without ties; with ties U is
    /// truncated to an integer, as scipy does.
    Exact,
    /// Normal approximation with tie and continuity correction.
    Asymptotic,
}

/// The result of one Mann–Whitney U test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MannWhitney {
    /// U of the first sample (`x`).
    pub u: f64,
    /// p-value against "the two distributions differ".
    pub p_two_sided: f64,
    /// p-value against "`x` tends to be smaller than `y`".
    pub p_less: f64,
    /// p-value against "`x` tends to be larger than `y`".
    pub p_greater: f64,
    /// The method actually used (never `Auto`).
    pub method: MwuMethod,
    /// Whether the pooled sample had ties.
    pub ties: bool,
}

/// Mann–Whitney U test of `x` against `y` (continuity correction on, as scipy's default).
///
/// Errors on an empty sample or a non-finite value.
pub fn mann_whitney_u(x: &[f64], y: &[f64], method: MwuMethod) -> Result<MannWhitney, StatsError> {
    check_sample("x", x, 1)?;
    check_sample("y", y, 1)?;
    let (n1, n2) = (x.len(), y.len());
    let pooled: Vec<f64> = x.iter().chain(y).copied().collect();
    let (ranks, groups) = midranks(&pooled);
    let r1: f64 = ranks[..n1].iter().sum();
    let n1f = n1 as f64;
    let n2f = n2 as f64;
    let u1 = r1 - n1f * (n1f + 1.0) / 2.0;
    let u2 = n1f * n2f - u1;
    let ties = groups.iter().any(|&g| g > 1);
    // Every p-value needs P(U ≥ u) for u ∈ {U₁, U₂, max}: the shorter tail reaches min(U₁, U₂).
    let max_u = u1.min(u2).max(0.0).trunc() as usize;
    let method = match method {
        MwuMethod::Auto if (n1 > 8 && n2 > 8) || ties => MwuMethod::Asymptotic,
        MwuMethod::Auto | MwuMethod::Exact if exact_work(n1, n2, max_u) > EXACT_MAX_WORK => {
            MwuMethod::Asymptotic
        }
        MwuMethod::Auto => MwuMethod::Exact,
        m => m,
    };
    let sf: Box<dyn Fn(f64) -> f64> = match method {
        MwuMethod::Exact => {
            let dist = UDistribution::new(n1, n2, max_u);
            // scipy casts U to int64 (truncation) before the exact lookup.
            Box::new(move |u: f64| dist.sf(u.trunc() as i64))
        }
        _ => {
            let n = n1f + n2f;
            let tie_term: f64 = groups.iter().map(|&t| (t as f64).powi(3) - t as f64).sum();
            let s = (n1f * n2f / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)))).sqrt();
            let mu = n1f * n2f / 2.0;
            let normal = Normal::standard();
            Box::new(move |u: f64| {
                let z = (u - mu - 0.5) / s;
                // s = 0 (one value overall): z = −∞ or NaN; scipy's ndtr(−z) gives 1 for −∞.
                if z.is_nan() { 1.0 } else { normal.cdf(-z) }
            })
        }
    };
    Ok(MannWhitney {
        u: u1,
        p_two_sided: (2.0 * sf(u1.max(u2))).clamp(0.0, 1.0),
        p_less: sf(u2).clamp(0.0, 1.0),
        p_greater: sf(u1).clamp(0.0, 1.0),
        method,
        ties,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separated_small_samples_use_the_exact_tail() {
        let r = mann_whitney_u(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0], MwuMethod::Auto).unwrap();
        assert_eq!(r.method, MwuMethod::Exact);
        assert_eq!(r.u, 0.0);
        assert!((r.p_less - 1.0 / 20.0).abs() < 1e-15);
        assert!((r.p_two_sided - 0.1).abs() < 1e-15);
        assert_eq!(r.p_greater, 1.0);
    }

    #[test]
    fn ties_force_the_normal_approximation() {
        let r = mann_whitney_u(&[1.0, 1.0, 2.0], &[1.0, 3.0, 3.0], MwuMethod::Auto).unwrap();
        assert_eq!(r.method, MwuMethod::Asymptotic);
        assert!(r.ties);
    }

    #[test]
    fn one_value_overall_gives_p_one() {
        let r = mann_whitney_u(&[2.0, 2.0], &[2.0, 2.0, 2.0], MwuMethod::Auto).unwrap();
        assert_eq!((r.p_two_sided, r.p_less, r.p_greater), (1.0, 1.0, 1.0));
    }

    #[test]
    fn huge_unbalanced_samples_stay_fast() {
        let x: Vec<f64> = (0..8).map(|i| f64::from(i) * 0.5 + 0.25).collect();
        let y: Vec<f64> = (0..50_000).map(|i| f64::from(i) * 1e-4 + 3e-8).collect();
        let r = mann_whitney_u(&x, &y, MwuMethod::Auto).unwrap();
        assert_eq!(r.method, MwuMethod::Asymptotic);
        let y: Vec<f64> = (0..2_000).map(|i| f64::from(i) * 1e-3 + 1e-7).collect();
        let r = mann_whitney_u(&x, &y, MwuMethod::Auto).unwrap();
        assert_eq!(r.method, MwuMethod::Exact);
    }

    #[test]
    fn empty_or_nan_is_an_error() {
        assert!(mann_whitney_u(&[], &[1.0], MwuMethod::Auto).is_err());
        assert!(mann_whitney_u(&[1.0], &[f64::NAN], MwuMethod::Auto).is_err());
    }
}
