//! The exact null distribution of the Mann–Whitney U statistic (no ties).
//!
//! The number of arrangements of `m` and `n` distinct values giving `U = u` is the
//! coefficient of `q^u` in the Gaussian binomial `[m + n choose m]_q`. It is built by the
//! recurrence `[m+n, m] = [m+n−1, m−1] + q^m·[m+n−1, m]`, which only adds non-negative
//! numbers, so tail probabilities keep full relative precision even far out in the tail
//! (a product/quotient formula would cancel). Cost `O(min(m,n)² · max(m,n)²)` — fine for
//! the sample sizes where an exact test is chosen.

/// Frequencies `f[u]` of `U = u` for samples of sizes `m` and `n`, `u = 0..=m·n`, and their
/// total `C(m + n, m)`.
pub(crate) struct UDistribution {
    freq: Vec<f64>,
    total: f64,
}

impl UDistribution {
    /// The distribution for sizes `m` and `n` (order does not matter).
    pub(crate) fn new(m: usize, n: usize) -> UDistribution {
        let (small, large) = if m <= n { (m, n) } else { (n, m) };
        // polys[i] = [i + j choose i]_q for the current j, i = 0..=small.
        // j = 0: [i choose i]_q = 1 for every i.
        let mut polys: Vec<Vec<f64>> = vec![vec![1.0]; small + 1];
        for _j in 1..=large {
            // Update in increasing i: polys[i-1] already holds the new j, polys[i] the old.
            for i in 1..=small {
                let (lo, hi) = polys.split_at_mut(i);
                let prev_i = &lo[i - 1]; // [i−1 + j choose i−1], new j
                let cur = &mut hi[0]; // [i + j − 1 choose i], old j
                let len = (prev_i.len()).max(cur.len() + i);
                let mut next = vec![0.0; len];
                next[..prev_i.len()].copy_from_slice(prev_i);
                for (u, &c) in cur.iter().enumerate() {
                    next[u + i] += c;
                }
                *cur = next;
            }
        }
        let freq = polys.pop().unwrap_or_else(|| vec![1.0]);
        let total = freq.iter().sum();
        UDistribution { freq, total }
    }

    /// `P(U ≥ u)` under the null.
    pub(crate) fn sf(&self, u: i64) -> f64 {
        if u <= 0 {
            return 1.0;
        }
        let start = u as usize;
        if start >= self.freq.len() {
            return 0.0;
        }
        self.freq[start..].iter().sum::<f64>() / self.total
    }

    /// `P(U ≤ u)` under the null.
    pub(crate) fn cdf(&self, u: i64) -> f64 {
        if u < 0 {
            return 0.0;
        }
        let end = (u as usize).min(self.freq.len() - 1);
        self.freq[..=end].iter().sum::<f64>() / self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_tables_match_hand_counts() {
        // m = n = 2: U ∈ {0,1,2,2,3,4} → freq 1,1,2,1,1 over 6.
        let d = UDistribution::new(2, 2);
        assert_eq!(d.freq, vec![1.0, 1.0, 2.0, 1.0, 1.0]);
        assert_eq!(d.total, 6.0);
        assert_eq!(d.sf(3), 2.0 / 6.0);
        assert_eq!(d.cdf(0), 1.0 / 6.0);
        let d = UDistribution::new(1, 5);
        assert_eq!(d.freq, vec![1.0; 6]);
        let d = UDistribution::new(3, 0);
        assert_eq!(d.freq, vec![1.0]);
        // C(16, 8) arrangements for 8 vs 8.
        assert_eq!(UDistribution::new(8, 8).total, 12870.0);
    }
}
