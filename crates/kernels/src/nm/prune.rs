//! Magnitude pruning to an N:M pattern: the standard one-shot recipe (keep the largest |w| of
//! every group), made exact and deterministic so a slice's pruned weights never depend on the
//! machine or the thread count.

use std::cmp::Ordering;

/// A copy of `w` (`rows × k`, row-major) with all but the `n` largest-magnitude weights of every
/// group of `m` consecutive weights along K set to zero. Ties go to the lower index; NaN counts
/// as the largest magnitude, so it is kept and shows up in the output instead of hiding.
///
/// A trailing partial group (when `m` does not divide `k`) and degenerate patterns (`n >= m`,
/// `m == 0`) leave the weights unchanged: pruning never invents a shape error, compression
/// reports it.
pub fn prune_magnitude(w: &[f32], rows: usize, k: usize, n: usize, m: usize) -> Vec<f32> {
    let mut out = w.to_vec();
    prune_magnitude_in_place(&mut out, rows, k, n, m);
    out
}

/// [`prune_magnitude`] without the copy, for weights too large to hold twice.
pub fn prune_magnitude_in_place(w: &mut [f32], rows: usize, k: usize, n: usize, m: usize) {
    if m == 0 || n >= m || k == 0 {
        return;
    }
    let mut order: Vec<usize> = Vec::with_capacity(m);
    for row in w.chunks_exact_mut(k).take(rows) {
        for group in row.chunks_exact_mut(m) {
            order.clear();
            order.extend(0..m);
            order.sort_by(|&a, &b| by_magnitude_then_index(group, a, b));
            for &drop in &order[n..] {
                group[drop] = 0.0;
            }
        }
    }
}

fn by_magnitude_then_index(group: &[f32], a: usize, b: usize) -> Ordering {
    group[b].abs().total_cmp(&group[a].abs()).then(a.cmp(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_largest_magnitudes_per_group() {
        let w = [1.0, -4.0, 3.0, 2.0, 0.5, 0.1, -0.2, 0.3];
        assert_eq!(
            prune_magnitude(&w, 1, 8, 2, 4),
            vec![0.0, -4.0, 3.0, 0.0, 0.5, 0.0, 0.0, 0.3]
        );
    }

    #[test]
    fn ties_go_to_the_lower_index() {
        let w = [1.0, -1.0, 1.0, 1.0];
        assert_eq!(prune_magnitude(&w, 1, 4, 2, 4), vec![1.0, -1.0, 0.0, 0.0]);
    }

    #[test]
    fn groups_never_span_rows() {
        let w = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(prune_magnitude(&w, 2, 2, 1, 2), vec![0.0, 2.0, 0.0, 4.0]);
    }
}
