//! E-divisive means change-point detection (Matteson & James 2014, "A Nonparametric Approach
//! for Multiple Change Point Analysis of Multivariate Data", JASA 109(505)), in the form
//! MongoDB's `signal-processing-algorithms` package implements and its CI (and Hunter) use
//! on performance histories.
//!
//! Why this method for run history: it assumes no distribution and no number of changes,
//! finds a shift in any moment (a latency that becomes bimodal, not only one whose mean
//! moves), and its significance comes from a permutation test, so a noisy flat history
//! stays flat. Our permutations come from a seeded ChaCha8 stream: the same history always
//! gives the same change points.
//!
//! The statistic for a split of `Z[a..b)` at `tau` into `X = Z[a..tau)` and `Y = Z[tau..b)`
//! (distances `|Zi - Zj|`, exponent α = 1) is
//! `q = n·m/(n+m) · (2/(n·m) Σ|Xi−Yj| − 1/n² Σ|Xi−Xj| − 1/m² Σ|Yi−Yj|)`,
//! the package's V-statistic form; `tests/stats/edivisive.rs` checks every candidate `q` and
//! the change points against the package on `tests/data/stats/edivisive_cases.json`.

use super::error::{StatsError, check_probability, check_sample};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// Settings of the significance test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EDivisiveOptions {
    /// A change point is accepted when the permutation p-value is at most this.
    pub pvalue: f64,
    /// Permutations per candidate.
    pub permutations: usize,
    /// Seed of the permutation stream.
    pub seed: u64,
}

impl Default for EDivisiveOptions {
    /// The package's defaults (p ≤ 0.05, 100 permutations) and a fixed seed.
    fn default() -> Self {
        EDivisiveOptions {
            pvalue: 0.05,
            permutations: 100,
            seed: 0x5eed,
        }
    }
}

/// One accepted change point.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ChangePoint {
    /// Index of the first value after the change (the series' `index`-th run is the first
    /// one of the new regime).
    pub index: usize,
    /// The candidate statistic `q` at that split, within its window.
    pub q: f64,
    /// Permutation p-value: permutations whose best `q` reached this one, over
    /// `permutations + 1`.
    pub p_value: f64,
    /// The window `[start, end)` of the series it was found in.
    pub window: (usize, usize),
}

/// The E-statistic, test statistic and coefficient of inhomogeneity of two samples
/// (the package's `get_energy_statistics`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EnergyStatistics {
    /// E-statistic: `2·E|X−Y| − E|X−X'| − E|Y−Y'|`.
    pub e: f64,
    /// Test statistic: `n·m/(n+m) · e`.
    pub t: f64,
    /// Coefficient of inhomogeneity: `e / (2·E|X−Y|)`, in [0, 1].
    pub h: f64,
}

fn stats_from_sums(x: f64, y: f64, xy: f64, n: usize, m: usize) -> EnergyStatistics {
    let (nf, mf) = (n as f64, m as f64);
    let xy_avg = if n > 0 && m > 0 { xy / (nf * mf) } else { 0.0 };
    let x_avg = if n > 0 { x / (nf * nf) } else { 0.0 };
    let y_avg = if m > 0 { y / (mf * mf) } else { 0.0 };
    let e = 2.0 * xy_avg - x_avg - y_avg;
    let t = if n + m > 0 { nf * mf / (nf + mf) * e } else { 0.0 };
    let h = if xy_avg > 0.0 { e / (2.0 * xy_avg) } else { 0.0 };
    EnergyStatistics { e, t, h }
}

/// Energy statistics of `x` against `y`.
pub fn energy_statistics(x: &[f64], y: &[f64]) -> Result<EnergyStatistics, StatsError> {
    check_sample("x", x, 1)?;
    check_sample("y", y, 1)?;
    let within = |s: &[f64]| -> f64 {
        s.iter()
            .map(|a| s.iter().map(|b| (a - b).abs()).sum::<f64>())
            .sum()
    };
    let between: f64 = x
        .iter()
        .map(|a| y.iter().map(|b| (a - b).abs()).sum::<f64>())
        .sum();
    Ok(stats_from_sums(within(x), within(y), between, x.len(), y.len()))
}

/// `q(tau)` for every split `tau` in `0..order.len()` of the values `z[order[i]]`: entry
/// `tau` splits into `order[..tau]` and `order[tau..]` (entry 0 is always 0). Running sums
/// make it O(len²).
fn candidate_statistics(z: &[f64], order: &[usize]) -> Vec<f64> {
    let len = order.len();
    let d = |i: usize, j: usize| (z[order[i]] - z[order[j]]).abs();
    let mut stats = vec![0.0; len];
    // x: Σ over i<j<tau; y: Σ over tau<=i<j; xy: Σ over i<tau<=j.
    let (mut x, mut xy) = (0.0, 0.0);
    let mut y: f64 = (0..len).map(|r| (r..len).map(|c| d(r, c)).sum::<f64>()).sum();
    for (tau, stat) in stats.iter_mut().enumerate() {
        *stat = stats_from_sums(2.0 * x, 2.0 * y, xy, tau, len - tau).t;
        let column: f64 = (0..tau).map(|r| d(r, tau)).sum();
        let row: f64 = (tau..len).map(|c| d(tau, c)).sum();
        xy += row - column;
        x += column;
        y -= row;
    }
    stats
}

/// Every candidate `q(tau)` of the whole series (for charts and for checking against the
/// reference implementation).
pub fn e_divisive_statistics(series: &[f64]) -> Result<Vec<f64>, StatsError> {
    check_sample("series", series, 1)?;
    let order: Vec<usize> = (0..series.len()).collect();
    Ok(candidate_statistics(series, &order))
}

/// First index of the maximum (numpy's `argmax`), with its value.
fn argmax(values: &[f64]) -> (usize, f64) {
    values.iter().copied().enumerate().fold(
        (0, f64::NEG_INFINITY),
        |best, (i, v)| if v > best.1 { (i, v) } else { best },
    )
}

/// Find the change points of `series` by E-divisive means: bisect the window holding the
/// strongest candidate while a permutation test says it is significant. Returned in the
/// order found (most significant first); sort by `index` for the series' order.
pub fn e_divisive(series: &[f64], options: &EDivisiveOptions) -> Result<Vec<ChangePoint>, StatsError> {
    check_sample("series", series, 1)?;
    check_probability("pvalue", options.pvalue, false)?;
    if options.permutations == 0 {
        return Err(StatsError::InvalidArgument(
            "permutations must be at least 1".into(),
        ));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let mut found: Vec<ChangePoint> = Vec::new();
    let mut best_in_window = std::collections::BTreeMap::<(usize, usize), (usize, f64)>::new();
    loop {
        let mut bounds: Vec<usize> = found.iter().map(|c| c.index).collect();
        bounds.push(0);
        bounds.push(series.len());
        bounds.sort_unstable();
        bounds.dedup();
        let windows: Vec<(usize, usize)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();
        let mut best: Option<((usize, usize), usize, f64)> = None;
        for &(a, b) in &windows {
            let (tau, q) = *best_in_window.entry((a, b)).or_insert_with(|| {
                let order: Vec<usize> = (a..b).collect();
                let (i, q) = argmax(&candidate_statistics(series, &order));
                (a + i, q)
            });
            if best.is_none_or(|(_, _, bq)| q > bq) {
                best = Some(((a, b), tau, q));
            }
        }
        let Some((window, index, q)) = best else { break };
        let mut at_least_as_good = 0usize;
        for _ in 0..options.permutations {
            let mut permuted_best = f64::NEG_INFINITY;
            for &(a, b) in &windows {
                let mut order: Vec<usize> = (a..b).collect();
                order.shuffle(&mut rng);
                permuted_best = permuted_best.max(argmax(&candidate_statistics(series, &order)).1);
            }
            if permuted_best >= q {
                at_least_as_good += 1;
            }
        }
        let p_value = at_least_as_good as f64 / (options.permutations + 1) as f64;
        // Index 0 is no change (the package's loop stops on it too).
        if p_value > options.pvalue || index == 0 {
            break;
        }
        found.push(ChangePoint {
            index,
            q,
            p_value,
            window,
        });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn indices(series: &[f64], seed: u64) -> Vec<usize> {
        let options = EDivisiveOptions {
            seed,
            ..Default::default()
        };
        let mut v: Vec<usize> = e_divisive(series, &options)
            .unwrap()
            .iter()
            .map(|c| c.index)
            .collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn a_clear_step_is_found_where_it_is() {
        let series: Vec<f64> = (0..20)
            .map(|i| if i < 12 { 1.0 } else { 2.0 } + (i % 3) as f64 * 0.01)
            .collect();
        assert_eq!(indices(&series, 1), [12]);
    }

    #[test]
    fn a_constant_series_has_no_change_point() {
        assert!(indices(&[4.0; 30], 7).is_empty());
    }

    #[test]
    fn same_seed_same_answer() {
        let series: Vec<f64> = (0..40)
            .map(|i| ((i * 7919) % 13) as f64 * 0.1 + if i >= 25 { 6.0 } else { 0.0 })
            .collect();
        let a = e_divisive(&series, &EDivisiveOptions::default()).unwrap();
        let b = e_divisive(&series, &EDivisiveOptions::default()).unwrap();
        assert_eq!(a, b);
        assert_eq!(a[0].index, 25);
    }

    #[test]
    fn incremental_statistics_equal_the_direct_energy_statistic() {
        let series = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0];
        let q = e_divisive_statistics(&series).unwrap();
        for tau in 1..series.len() {
            let direct = energy_statistics(&series[..tau], &series[tau..]).unwrap().t;
            assert!(
                (q[tau] - direct).abs() < 1e-12,
                "tau {tau}: {} vs {direct}",
                q[tau]
            );
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(e_divisive(&[], &EDivisiveOptions::default()).is_err());
        assert!(e_divisive(&[1.0, f64::NAN], &EDivisiveOptions::default()).is_err());
        let none = EDivisiveOptions {
            permutations: 0,
            ..Default::default()
        };
        assert!(e_divisive(&[1.0, 2.0], &none).is_err());
    }
}
