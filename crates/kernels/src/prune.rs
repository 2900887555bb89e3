//! Magnitude pruning for the unstructured and block formats, and the gradual (cubic) sparsity
//! schedule. N:M pruning lives with its format in `nm/prune.rs`.
//!
//! Every function keeps exactly `round(density · candidates)` survivors, chosen by magnitude
//! with ties going to the lower index and NaN counting as the largest magnitude (so a NaN is
//! kept and shows up in the output instead of hiding). The result therefore never depends on
//! the machine, the thread count or the sort algorithm, which golden baselines need.

use std::cmp::Ordering;

/// How many of `total` candidates a `density` keeps: `round(density · total)`, with the
/// density clamped to `[0, 1]` and NaN keeping everything (pruning never invents an error;
/// ingress validates densities).
pub fn kept_count(total: usize, density: f64) -> usize {
    if density.is_nan() {
        return total;
    }
    ((density.clamp(0.0, 1.0) * total as f64).round() as usize).min(total)
}

/// Zero all but the `kept_count(k, density)` largest-magnitude weights of every row of the
/// row-major `rows × k` matrix `w`: every output feature keeps the same share of its inputs,
/// the load-balanced form of unstructured sparsity.
pub fn prune_unstructured_per_row(w: &mut [f32], rows: usize, k: usize, density: f64) {
    if k == 0 {
        return;
    }
    let keep = kept_count(k, density);
    for row in w.chunks_exact_mut(k).take(rows) {
        keep_largest(row, keep);
    }
}

/// Zero all but the `kept_count(w.len(), density)` largest-magnitude weights of the whole
/// matrix: the classic global magnitude pruning, where rows end up with uneven counts.
pub fn prune_unstructured_global(w: &mut [f32], density: f64) {
    let keep = kept_count(w.len(), density);
    keep_largest(w, keep);
}

/// Zero whole `br × bc` blocks of the row-major `rows × k` matrix `w`, keeping the
/// `kept_count(blocks, density)` blocks of largest L2 norm (blocks numbered row-major).
///
/// Edge blocks, when `br` or `bc` does not divide the shape, are scored on the weights they
/// have; the BSR format refuses such shapes, lowering sends them to dense.
pub fn prune_blocks(w: &mut [f32], rows: usize, k: usize, br: usize, bc: usize, density: f64) {
    if br == 0 || bc == 0 || rows == 0 || k == 0 || w.len() < rows * k {
        return;
    }
    let (block_rows, block_cols) = (rows.div_ceil(br), k.div_ceil(bc));
    let mut scores = vec![0.0f64; block_rows * block_cols];
    for (r, row) in w.chunks_exact(k).take(rows).enumerate() {
        for (c, &v) in row.iter().enumerate() {
            scores[r / br * block_cols + c / bc] += f64::from(v) * f64::from(v);
        }
    }
    let keep = kept_count(scores.len(), density);
    let mut survives = Survivors::new(&scores, keep, f64::total_cmp);
    let kept: Vec<bool> = scores.iter().map(|&s| survives.admit(s)).collect();
    for (r, row) in w.chunks_exact_mut(k).take(rows).enumerate() {
        for (c, v) in row.iter_mut().enumerate() {
            if !kept[r / br * block_cols + c / bc] {
                *v = 0.0;
            }
        }
    }
}

/// The sparsity (fraction pruned) at `step` of the gradual pruning schedule of Zhu & Gupta
/// ("To prune, or not to prune", 2017): `s_f + (s_i − s_f)·(1 − t/T)³` between `begin` and
/// `end`, constant outside. It prunes fast while many redundant weights remain and slowly
/// near the target, which is what lets accuracy recover between steps.
///
/// `begin >= end` jumps straight to `final_sparsity` at `begin`.
pub fn cubic_sparsity(step: u64, begin: u64, end: u64, initial_sparsity: f64, final_sparsity: f64) -> f64 {
    if step < begin {
        return initial_sparsity;
    }
    if step >= end {
        return final_sparsity;
    }
    let t = (step - begin) as f64 / (end - begin) as f64;
    final_sparsity + (initial_sparsity - final_sparsity) * (1.0 - t).powi(3)
}

/// Keep the `keep` largest magnitudes of `v` (ties to the lower index), zero the rest.
fn keep_largest(v: &mut [f32], keep: usize) {
    if keep >= v.len() {
        return;
    }
    let mags: Vec<f32> = v.iter().map(|x| x.abs()).collect();
    let mut survives = Survivors::new(&mags, keep, f32::total_cmp);
    for (x, &m) in v.iter_mut().zip(&mags) {
        if !survives.admit(m) {
            *x = 0.0;
        }
    }
}

/// Decides, in index order, which scores survive: everything above the `keep`-th largest,
/// and as many ties with it as still fit. Linear time (a selection, not a sort).
struct Survivors<T> {
    threshold: Option<T>,
    ties_left: usize,
    cmp: fn(&T, &T) -> Ordering,
}

impl<T: Copy> Survivors<T> {
    fn new(scores: &[T], keep: usize, cmp: fn(&T, &T) -> Ordering) -> Survivors<T> {
        if keep == 0 || scores.is_empty() {
            return Survivors {
                threshold: None,
                ties_left: 0,
                cmp,
            };
        }
        let keep = keep.min(scores.len());
        let mut sorted = scores.to_vec();
        let (_, &mut t, _) = sorted.select_nth_unstable_by(scores.len() - keep, cmp);
        let above = scores.iter().filter(|s| cmp(s, &t) == Ordering::Greater).count();
        Survivors {
            threshold: Some(t),
            ties_left: keep - above,
            cmp,
        }
    }

    /// Whether the next score (in index order) survives.
    fn admit(&mut self, s: T) -> bool {
        let Some(t) = self.threshold else {
            return false;
        };
        match (self.cmp)(&s, &t) {
            Ordering::Greater => true,
            Ordering::Equal if self.ties_left > 0 => {
                self.ties_left -= 1;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn nonzeros(w: &[f32]) -> usize {
        w.iter().filter(|&&v| v != 0.0).count()
    }

    #[test]
    fn issue_3_per_row_keeps_the_largest_of_each_row() {
        let mut w = vec![1.0, -4.0, 3.0, 2.0, 0.5, 0.1, -0.2, 0.3];
        prune_unstructured_per_row(&mut w, 2, 4, 0.5);
        assert_eq!(w, vec![0.0, -4.0, 3.0, 0.0, 0.5, 0.0, 0.0, 0.3]);
    }

    #[test]
    fn issue_3_global_keeps_the_largest_overall() {
        let mut w = vec![1.0, -4.0, 3.0, 2.0, 0.5, 0.1, -0.2, 0.3];
        prune_unstructured_global(&mut w, 0.25);
        assert_eq!(w, vec![0.0, -4.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn issue_3_ties_go_to_the_lower_index_and_nan_is_kept() {
        let mut w = vec![1.0, -1.0, 1.0, 1.0];
        prune_unstructured_global(&mut w, 0.5);
        assert_eq!(w, vec![1.0, -1.0, 0.0, 0.0]);
        let mut w = vec![1.0, f32::NAN, 2.0, 0.5];
        prune_unstructured_global(&mut w, 0.25);
        assert!(w[1].is_nan() && w[0] == 0.0 && w[2] == 0.0);
    }

    #[test]
    fn issue_3_block_pruning_drops_whole_blocks() {
        // 2×4 matrix, 2×2 blocks: the right block has the larger norm.
        let mut w = vec![1.0, 1.0, 0.0, 3.0, 1.0, 1.0, 2.0, 0.0];
        prune_blocks(&mut w, 2, 4, 2, 2, 0.5);
        assert_eq!(w, vec![0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 2.0, 0.0]);
    }

    #[test]
    fn issue_3_cubic_schedule_ramps_from_initial_to_final() {
        assert_eq!(cubic_sparsity(0, 10, 110, 0.0, 0.9), 0.0);
        assert_eq!(cubic_sparsity(10, 10, 110, 0.0, 0.9), 0.0);
        assert_eq!(cubic_sparsity(110, 10, 110, 0.0, 0.9), 0.9);
        assert_eq!(cubic_sparsity(500, 10, 110, 0.0, 0.9), 0.9);
        // Halfway: 0.9·(1 − 0.5³).
        assert!((cubic_sparsity(60, 10, 110, 0.0, 0.9) - 0.9 * 0.875).abs() < 1e-12);
        let ramp: Vec<f64> = (10..=110).map(|s| cubic_sparsity(s, 10, 110, 0.0, 0.9)).collect();
        assert!(ramp.windows(2).all(|p| p[1] >= p[0]), "monotone");
        // Steps shrink: front-loaded.
        assert!(ramp[1] - ramp[0] > ramp[100] - ramp[99]);
        assert_eq!(cubic_sparsity(5, 7, 7, 0.1, 0.5), 0.1);
        assert_eq!(cubic_sparsity(7, 7, 7, 0.1, 0.5), 0.5);
    }

    proptest! {
        #[test]
        fn issue_3_pruning_keeps_exact_counts(
            w in prop::collection::vec(-3i8..=3, 1..200),
            density in 0.0f64..=1.0,
        ) {
            // Small integers: many ties, which is where counts go wrong.
            let w: Vec<f32> = w.into_iter().map(f32::from).collect();
            let mut g = w.clone();
            prune_unstructured_global(&mut g, density);
            let nz = nonzeros(&w);
            prop_assert_eq!(nonzeros(&g), kept_count(w.len(), density).min(nz));
            // Survivors are unchanged, and no dropped weight beats a kept one.
            let min_kept = g.iter().filter(|v| **v != 0.0).map(|v| v.abs()).fold(f32::INFINITY, f32::min);
            for (a, b) in w.iter().zip(&g) {
                prop_assert!(*b == 0.0 || a == b);
                if *b == 0.0 { prop_assert!(a.abs() <= min_kept); }
            }
        }
    }
}
