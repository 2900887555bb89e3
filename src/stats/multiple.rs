//! Multiple-comparison corrections across the guardrails of one gate.
//!
//! Why: a gate with twenty blocking guardrails, each tested at 5%, cries wolf on most
//! unchanged releases. Holm controls the family-wise error rate (the chance of *any* false
//! failure) without assuming independence and is uniformly more powerful than Bonferroni;
//! Benjamini–Hochberg controls the expected share of false discoveries and suits advisory
//! dashboards. Both return adjusted p-values as `statsmodels.stats.multitest.multipletests`
//! (`holm`, `fdr_bh`), so a verdict is "adjusted p < α" and the adjusted p can be shown.

use super::error::StatsError;

fn check(ps: &[f64]) -> Result<(), StatsError> {
    match ps.iter().position(|p| !(0.0..=1.0).contains(p)) {
        Some(i) => Err(StatsError::InvalidArgument(format!(
            "p-value #{i} = {} is not a probability",
            ps[i]
        ))),
        None => Ok(()),
    }
}

/// The count of checked p-values and their indices in ascending order of p: where both
/// adjustments start.
fn ascending(ps: &[f64]) -> Result<(usize, Vec<usize>), StatsError> {
    check(ps)?;
    let mut order: Vec<usize> = (0..ps.len()).collect();
    order.sort_by(|&a, &b| ps[a].total_cmp(&ps[b]));
    Ok((ps.len(), order))
}

/// Holm's step-down adjusted p-values, in input order: sort ascending, `p̃₍ᵢ₎ =
/// max_{j ≤ i} min(1, (m − j + 1)·p₍ⱼ₎)`.
pub fn holm(ps: &[f64]) -> Result<Vec<f64>, StatsError> {
    let (m, order) = ascending(ps)?;
    let mut out = vec![0.0; m];
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * ps[i]).min(1.0));
        out[i] = running;
    }
    Ok(out)
}

/// Benjamini–Hochberg step-up adjusted p-values (FDR), in input order: sort ascending,
/// `p̃₍ᵢ₎ = min_{j ≥ i} min(1, m·p₍ⱼ₎/j)`.
pub fn benjamini_hochberg(ps: &[f64]) -> Result<Vec<f64>, StatsError> {
    let (m, order) = ascending(ps)?;
    let mut out = vec![0.0; m];
    let mut running: f64 = 1.0;
    for (rank, &i) in order.iter().enumerate().rev() {
        running = running.min((m as f64 * ps[i] / (rank + 1) as f64).min(1.0));
        out[i] = running;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_values() {
        let ps = [0.01, 0.04, 0.03, 0.5];
        let h = holm(&ps).unwrap();
        let want = [0.04, 0.09, 0.09, 0.5];
        for (a, b) in h.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{h:?}");
        }
        let bh = benjamini_hochberg(&ps).unwrap();
        let want = [0.04, 0.16 / 3.0, 0.16 / 3.0, 0.5];
        for (a, b) in bh.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{bh:?}");
        }
        assert!(holm(&[]).unwrap().is_empty());
        assert!(holm(&[1.5]).is_err());
    }
}
