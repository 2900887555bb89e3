//! Power and the minimum detectable effect (MDE) of a ratio rule.
//!
//! The gate decides on the interval of `log(candidate/baseline)` (a ratio of medians or
//! tail quantiles). With a standard error `se` of that log-ratio and a two-sided `c`
//! interval (`z = Φ⁻¹(1 − (1 − c)/2)`):
//! - a true regression `r` is *failed* with probability `Φ((log r − log(1 + m))/se − z)`,
//!   so the smallest regression caught with power `π` is
//!   `MDE = exp(log(1 + m) + (z + Φ⁻¹(π))·se) − 1`;
//! - an unchanged candidate is *passed* with probability `Φ(log(1 + m)/se − z)`, so the
//!   margin is resolvable (an A/A run passes with power `π`) when
//!   `(z + Φ⁻¹(π))·se ≤ log(1 + m)`.
//!
//! `se` comes either from an interval that was measured ([`se_from_interval`]: "what could
//! this evidence detect") or, before running, from the baseline's own spread
//! ([`plan_from_baseline`]: "can `samples.max` resolve this margin at all"). The normal
//! approximation on the log scale is the usual one for ratios of positive quantities.

use super::bootstrap::{Bootstrap, TwoSample};
use super::error::{StatsError, check_probability};
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};

/// Power at which the MDE is stated, the usual 80%.
pub const DEFAULT_POWER: f64 = 0.8;

fn z(p: f64) -> f64 {
    Normal::standard().inverse_cdf(p)
}

/// The standard error of `log(ratio)` implied by a ratio interval `(low, high)` at
/// `confidence` (both ends positive), assuming normality on the log scale.
pub fn se_from_interval(low: f64, high: f64, confidence: f64) -> Option<f64> {
    if !(low > 0.0 && high >= low && high.is_finite()) {
        return None;
    }
    Some((high.ln() - low.ln()) / (2.0 * z(1.0 - (1.0 - confidence) / 2.0)))
}

/// Smallest true regression (as a fraction, 0.07 = 7%) that the rule "fail when the lower
/// end of the `confidence` interval is beyond `1 + margin`" catches with probability
/// `power`, given `se` of the log-ratio.
pub fn mde(se: f64, margin: f64, confidence: f64, power: f64) -> f64 {
    let k = z(1.0 - (1.0 - confidence) / 2.0) + z(power);
    ((1.0 + margin).ln() + k * se).exp() - 1.0
}

/// Probability that an unchanged candidate is shown within `margin` (a pass).
pub fn pass_probability(se: f64, margin: f64, confidence: f64) -> f64 {
    if se <= 0.0 {
        return 1.0;
    }
    Normal::standard().cdf((1.0 + margin).ln() / se - z(1.0 - (1.0 - confidence) / 2.0))
}

/// The smallest `regress_at_most` margin (a fraction) that `runs` runs per side resolve
/// when the log of a run's statistic varies between runs with standard deviation `cv`
/// (a prior, e.g. the between-run CV of `shared/data/aa-noise`): the margin `m` with
/// `(z + z_π)·cv·√(2/runs) = log(1 + m)` — the same criterion as
/// [`PowerPlan::margin_resolvable`], with the spread assumed instead of measured.
pub fn min_resolvable_margin(cv: f64, runs: u32, confidence: f64) -> f64 {
    let k = z(1.0 - (1.0 - confidence) / 2.0) + z(DEFAULT_POWER);
    (k * cv * (2.0 / f64::from(runs.max(1))).sqrt()).exp() - 1.0
}

/// Runs per side that resolve `margin` (a fraction) under the prior `cv`: the smallest `R`
/// with [`min_resolvable_margin`]`(cv, R, confidence) ≤ margin`.
pub fn runs_to_resolve(cv: f64, margin: f64, confidence: f64) -> u64 {
    let k = z(1.0 - (1.0 - confidence) / 2.0) + z(DEFAULT_POWER);
    let log_m = (1.0 + margin).ln();
    if log_m.is_nan() || log_m <= 0.0 {
        return u64::MAX;
    }
    let r = (2.0 * (k * cv / log_m).powi(2)).ceil();
    if r.is_finite() {
        (r as u64).max(1)
    } else {
        u64::MAX
    }
}

/// What a sample budget can resolve, planned from a baseline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PowerPlan {
    /// Samples per side the plan is for.
    pub per_side: usize,
    /// Standard error of the log-ratio at `per_side` samples per side.
    pub se: f64,
    /// Smallest regression failed with [`DEFAULT_POWER`].
    pub mde: f64,
    /// Probability that an unchanged candidate passes.
    pub pass_probability: f64,
    /// Whether an unchanged candidate passes with at least [`DEFAULT_POWER`].
    pub margin_resolvable: bool,
    /// Samples per side needed for that, when finite.
    pub needed_per_side: Option<usize>,
}

/// Plan from a baseline sample (grouped by run; one group when runs are unknown): the
/// bootstrap standard error of `log` of its `q`-quantile at its own size, scaled by
/// `√(n_baseline / per_side)` and by `√2` for two independent sides. With several runs
/// the unit is the run and `per_side` counts runs.
///
/// Errors on an empty or non-positive baseline, or bad probabilities.
pub fn plan_from_baseline(
    baseline: &[Vec<f64>],
    q: f64,
    margin: f64,
    confidence: f64,
    per_side: usize,
    seed: u64,
) -> Result<PowerPlan, StatsError> {
    check_probability("confidence", confidence, true)?;
    check_probability("q", q, false)?;
    if per_side == 0 || margin.is_nan() || margin <= -1.0 {
        return Err(StatsError::InvalidArgument(format!(
            "per_side = {per_side}, margin = {margin}"
        )));
    }
    let groups: Vec<Vec<f64>> = baseline.iter().filter(|g| !g.is_empty()).cloned().collect();
    if groups.iter().flatten().any(|&v| v <= 0.0) {
        return Err(StatsError::Degenerate("non-positive baseline values".into()));
    }
    let units = if groups.len() > 1 {
        groups.len()
    } else {
        groups.first().map_or(0, Vec::len)
    };
    // Same sample on both sides: the replicates are two independent resamples, so the
    // spread of log(ratio) already has both sides' variance (the √2).
    let logs: Vec<Vec<f64>> = groups
        .iter()
        .map(|g| g.iter().map(|v| v.ln()).collect())
        .collect();
    let dist = Bootstrap::new(200, seed).distribution(&logs, &logs, TwoSample::DiffOfQuantiles { q })?;
    let r = &dist.replicates;
    let mean = r.iter().sum::<f64>() / r.len() as f64;
    let se_own = (r.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (r.len() - 1) as f64).sqrt();
    let se = se_own * (units as f64 / per_side as f64).sqrt();
    let k = z(1.0 - (1.0 - confidence) / 2.0) + z(DEFAULT_POWER);
    let log_m = (1.0 + margin).ln();
    let needed = if log_m > 0.0 && se_own > 0.0 {
        Some(((units as f64) * (se_own * k / log_m).powi(2)).ceil() as usize)
    } else if se_own == 0.0 {
        Some(1)
    } else {
        None
    };
    Ok(PowerPlan {
        per_side,
        se,
        mde: mde(se, margin, confidence, DEFAULT_POWER),
        pass_probability: pass_probability(se, margin, confidence),
        margin_resolvable: k * se <= log_m,
        needed_per_side: needed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 24: the validate-time prior. At a 2.4% between-run CV and 95% confidence one
    // run per side resolves ≈ 10%, four runs 5%.
    #[test]
    fn the_prior_margin_shrinks_with_runs_and_round_trips_through_the_run_count() {
        let one = min_resolvable_margin(0.024, 1, 0.95);
        assert!((one - 0.0998).abs() < 5e-4, "{one}");
        assert_eq!(runs_to_resolve(0.024, 0.05, 0.95), 4);
        for margin in [0.02, 0.05, 0.1] {
            let r = runs_to_resolve(0.024, margin, 0.95);
            let r = u32::try_from(r).unwrap();
            assert!(min_resolvable_margin(0.024, r, 0.95) <= margin + 1e-12);
            assert!(r == 1 || min_resolvable_margin(0.024, r - 1, 0.95) > margin);
        }
        assert_eq!(runs_to_resolve(0.024, 0.0, 0.95), u64::MAX);
    }

    #[test]
    fn mde_grows_with_noise_and_round_trips_through_an_interval() {
        assert!(mde(0.01, 0.05, 0.95, 0.8) < mde(0.02, 0.05, 0.95, 0.8));
        assert!((mde(0.0, 0.05, 0.95, 0.8) - 0.05).abs() < 1e-12);
        let se = se_from_interval(0.98, 1.02, 0.95).unwrap();
        assert!((se - (1.02f64.ln() - 0.98f64.ln()) / (2.0 * 1.959_963_984_540_054)).abs() < 1e-12);
        assert_eq!(se_from_interval(0.0, 1.0, 0.95), None);
    }

    #[test]
    fn a_noisy_baseline_cannot_resolve_a_tight_margin_with_few_samples() {
        let noisy: Vec<f64> = (0..30).map(|i| 1.0 + 0.3 * f64::from(i % 5)).collect();
        let p = plan_from_baseline(std::slice::from_ref(&noisy), 0.5, 0.01, 0.95, 10, 1).unwrap();
        assert!(!p.margin_resolvable, "{p:?}");
        assert!(p.needed_per_side.unwrap() > 10);
        let p = plan_from_baseline(&[noisy], 0.5, 1.0, 0.95, 30, 1).unwrap();
        assert!(p.margin_resolvable, "{p:?}");
    }
}
