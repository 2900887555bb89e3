//! Mid-ranks with tie groups: the input of every rank test here.

/// Ranks (1-based; ties get the average of the ranks they span, scipy's `'average'`) of
/// `xs`, in input order, and the sizes of the tie groups (groups of one included), which
/// the tie correction of the normal approximation needs.
pub(crate) fn midranks(xs: &[f64]) -> (Vec<f64>, Vec<usize>) {
    let mut order: Vec<usize> = (0..xs.len()).collect();
    order.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
    let mut ranks = vec![0.0; xs.len()];
    let mut groups = Vec::new();
    let mut i = 0;
    while i < order.len() {
        let mut j = i + 1;
        while j < order.len() && xs[order[j]] == xs[order[i]] {
            j += 1;
        }
        // Positions i..j (0-based) share ranks i+1..=j: their mean is (i + 1 + j) / 2.
        let rank = (i + 1 + j) as f64 / 2.0;
        for &k in &order[i..j] {
            ranks[k] = rank;
        }
        groups.push(j - i);
        i = j;
    }
    (ranks, groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_share_the_average_rank() {
        let (r, g) = midranks(&[10.0, 20.0, 10.0, 30.0, 10.0]);
        assert_eq!(r, vec![2.0, 4.0, 2.0, 5.0, 2.0]);
        assert_eq!(g, vec![3, 1, 1]);
    }
}
