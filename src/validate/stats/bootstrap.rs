//! Seeded percentile-bootstrap intervals for medians, quantiles and ratios of medians.
//!
//! Why a bootstrap: the ratio of two medians (candidate / baseline) has no usable closed-form
//! interval, and it is the quantity a release manager reads ("3% slower"). Why seeded
//! (ChaCha8 from a `u64`): the same evidence must always give the same verdict, so a gate
//! can be re-run and audited. The interval is the plain percentile interval of the
//! resampled statistic (type-7 quantiles at `α/2` and `1 − α/2`).
//!
//! [`Bootstrap::ratio_of_quantiles_by_run`] resamples hierarchically (runs, then samples
//! within each chosen run) because the run, not the sample, is the unit of replication on
//! a noisy machine (DESIGN.md §6); with a single run it is the ordinary bootstrap.

use super::error::{StatsError, check_probability, check_sample, sorted};
use super::quantile::{lerp, quantile_sorted};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Default number of resamples: enough for stable 95% percentile ends (Monte-Carlo error
/// of a 2.5% quantile from 2000 draws is about 0.35 percentile points).
pub const DEFAULT_RESAMPLES: usize = 2000;

/// Settings of a bootstrap: how many resamples, from which seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bootstrap {
    /// Number of resamples (at least 10).
    pub resamples: usize,
    /// Seed of the ChaCha8 stream; same seed, same data → same interval.
    pub seed: u64,
}

/// A percentile-bootstrap interval around a point estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BootstrapCi {
    /// The statistic on the original data.
    pub estimate: f64,
    /// Lower end.
    pub low: f64,
    /// Upper end.
    pub high: f64,
    /// Confidence of the interval.
    pub confidence: f64,
    /// Resamples drawn.
    pub resamples: usize,
}

impl Bootstrap {
    /// `resamples` draws from `seed`.
    pub fn new(resamples: usize, seed: u64) -> Bootstrap {
        Bootstrap { resamples, seed }
    }

    /// [`DEFAULT_RESAMPLES`] draws from `seed`.
    pub fn seeded(seed: u64) -> Bootstrap {
        Bootstrap::new(DEFAULT_RESAMPLES, seed)
    }

    /// Interval for the median of one sample.
    pub fn median(&self, x: &[f64], confidence: f64) -> Result<BootstrapCi, StatsError> {
        self.quantile(x, 0.5, confidence)
    }

    /// Interval for the `q`-quantile (type 7) of one sample, e.g. a p95 latency.
    pub fn quantile(&self, x: &[f64], q: f64, confidence: f64) -> Result<BootstrapCi, StatsError> {
        self.check(confidence)?;
        check_probability("q", q, false)?;
        check_sample("x", x, 1)?;
        let estimate = quantile_sorted(&sorted(x), q);
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut buf = vec![0.0; x.len()];
        let stats: Vec<f64> = (0..self.resamples)
            .map(|_| {
                resample_into(&mut rng, x, &mut buf);
                select_quantile(&mut buf, q)
            })
            .collect();
        Ok(self.interval(estimate, stats, confidence))
    }

    /// Interval for `median(b) / median(a)` of two independent samples: for a baseline `a`
    /// and a candidate `b` of a latency, a value of 1.05 means "5% slower".
    pub fn ratio_of_medians(&self, a: &[f64], b: &[f64], confidence: f64) -> Result<BootstrapCi, StatsError> {
        self.ratio_of_quantiles(a, b, 0.5, confidence)
    }

    /// Interval for `quantile(b, q) / quantile(a, q)` of two independent samples.
    ///
    /// Errors when `quantile(a, q)` is zero (the ratio is undefined).
    pub fn ratio_of_quantiles(
        &self,
        a: &[f64],
        b: &[f64],
        q: f64,
        confidence: f64,
    ) -> Result<BootstrapCi, StatsError> {
        let groups_a = vec![a.to_vec()];
        let groups_b = vec![b.to_vec()];
        self.ratio_grouped(&groups_a, &groups_b, q, confidence)
    }

    /// Like [`Bootstrap::ratio_of_quantiles`], but samples carry the run they came from
    /// (`runs_a[i]` for `a[i]`): each resample draws runs with replacement, then samples
    /// with replacement within each drawn run. Between-run variation then widens the
    /// interval as it should, instead of being mistaken for signal.
    pub fn ratio_of_quantiles_by_run(
        &self,
        (a, runs_a): (&[f64], &[u32]),
        (b, runs_b): (&[f64], &[u32]),
        q: f64,
        confidence: f64,
    ) -> Result<BootstrapCi, StatsError> {
        let ga = group_by_run("a", a, runs_a)?;
        let gb = group_by_run("b", b, runs_b)?;
        self.ratio_grouped(&ga, &gb, q, confidence)
    }

    fn ratio_grouped(
        &self,
        a: &[Vec<f64>],
        b: &[Vec<f64>],
        q: f64,
        confidence: f64,
    ) -> Result<BootstrapCi, StatsError> {
        self.check(confidence)?;
        check_probability("q", q, false)?;
        let flat_a: Vec<f64> = a.concat();
        let flat_b: Vec<f64> = b.concat();
        check_sample("a", &flat_a, 1)?;
        check_sample("b", &flat_b, 1)?;
        let qa = quantile_sorted(&sorted(&flat_a), q);
        let qb = quantile_sorted(&sorted(&flat_b), q);
        if qa == 0.0 {
            return Err(StatsError::Degenerate(
                "the denominator sample's quantile is zero".into(),
            ));
        }
        let estimate = qb / qa;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let (mut buf_a, mut buf_b) = (Vec::with_capacity(flat_a.len()), Vec::with_capacity(flat_b.len()));
        let mut stats = Vec::with_capacity(self.resamples);
        for _ in 0..self.resamples {
            resample_groups_into(&mut rng, a, &mut buf_a);
            resample_groups_into(&mut rng, b, &mut buf_b);
            let ra = select_quantile(&mut buf_a, q);
            let rb = select_quantile(&mut buf_b, q);
            // A resample whose denominator is zero has an infinite ratio; the percentile
            // interval handles ±∞ (total order) and the caller sees an unbounded end.
            stats.push(if ra == 0.0 {
                f64::INFINITY.copysign(rb)
            } else {
                rb / ra
            });
        }
        Ok(self.interval(estimate, stats, confidence))
    }

    fn check(&self, confidence: f64) -> Result<(), StatsError> {
        check_probability("confidence", confidence, true)?;
        if self.resamples < 10 {
            return Err(StatsError::InvalidArgument(format!(
                "{} resamples is too few",
                self.resamples
            )));
        }
        Ok(())
    }

    fn interval(&self, estimate: f64, mut stats: Vec<f64>, confidence: f64) -> BootstrapCi {
        stats.sort_unstable_by(f64::total_cmp);
        let tail = (1.0 - confidence) / 2.0;
        BootstrapCi {
            estimate,
            low: quantile_sorted(&stats, tail),
            high: quantile_sorted(&stats, 1.0 - tail),
            confidence,
            resamples: self.resamples,
        }
    }
}

fn group_by_run(what: &'static str, xs: &[f64], runs: &[u32]) -> Result<Vec<Vec<f64>>, StatsError> {
    if xs.len() != runs.len() {
        return Err(StatsError::InvalidArgument(format!(
            "sample `{what}` has {} values but {} run ids",
            xs.len(),
            runs.len()
        )));
    }
    let mut groups: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for (&x, &r) in xs.iter().zip(runs) {
        groups.entry(r).or_default().push(x);
    }
    Ok(groups.into_values().collect())
}

fn resample_into(rng: &mut ChaCha8Rng, x: &[f64], out: &mut [f64]) {
    for slot in out.iter_mut() {
        *slot = x[rng.random_range(0..x.len())];
    }
}

/// Draw `groups.len()` groups with replacement, then each drawn group's size in values with
/// replacement from it. With one group this is the ordinary bootstrap.
fn resample_groups_into(rng: &mut ChaCha8Rng, groups: &[Vec<f64>], out: &mut Vec<f64>) {
    out.clear();
    if let [only] = groups {
        out.extend((0..only.len()).map(|_| only[rng.random_range(0..only.len())]));
        return;
    }
    for _ in 0..groups.len() {
        let g = &groups[rng.random_range(0..groups.len())];
        out.extend((0..g.len()).map(|_| g[rng.random_range(0..g.len())]));
    }
}

/// Type-7 quantile of `buf` by selection (O(n)), reordering `buf`.
fn select_quantile(buf: &mut [f64], q: f64) -> f64 {
    let n = buf.len();
    if n == 1 {
        return buf[0];
    }
    let h = (n - 1) as f64 * q;
    let i = (h.floor() as usize).min(n - 1);
    let frac = h - h.floor();
    let (_, &mut a, rest) = buf.select_nth_unstable_by(i, f64::total_cmp);
    if frac == 0.0 || rest.is_empty() {
        return a;
    }
    let b = rest.iter().copied().min_by(f64::total_cmp).unwrap_or(a);
    lerp(a, b, frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_interval_and_seed_matters() {
        let a: Vec<f64> = (0..40).map(|i| 1.0 + f64::from(i % 7) * 0.01).collect();
        let b: Vec<f64> = (0..40).map(|i| 1.1 + f64::from(i % 5) * 0.01).collect();
        let x = Bootstrap::seeded(7).ratio_of_medians(&a, &b, 0.95).unwrap();
        let y = Bootstrap::seeded(7).ratio_of_medians(&a, &b, 0.95).unwrap();
        assert_eq!(x, y);
        assert!(x.low <= x.estimate && x.estimate <= x.high);
        assert!(x.low > 1.0);
        let m = Bootstrap::new(500, 1).median(&a, 0.9).unwrap();
        assert!(m.low <= m.estimate && m.estimate <= m.high);
    }

    #[test]
    fn selection_agrees_with_sorting() {
        let xs = [5.0, 1.0, 4.0, 2.0, 3.0, 9.0];
        for q in [0.0, 0.1, 0.5, 0.77, 0.95, 1.0] {
            let mut buf = xs.to_vec();
            assert_eq!(
                select_quantile(&mut buf, q),
                quantile_sorted(&sorted(&xs), q),
                "q={q}"
            );
        }
    }

    #[test]
    fn runs_widen_the_interval() {
        // Two runs at different speeds: the by-run interval must be wider.
        let a: Vec<f64> = (0..40)
            .map(|i| if i < 20 { 1.0 } else { 1.2 } + f64::from(i % 3) * 0.001)
            .collect();
        let runs: Vec<u32> = (0..40).map(|i| u32::from(i >= 20)).collect();
        let b = a.clone();
        let boot = Bootstrap::new(1000, 3);
        let flat = boot.ratio_of_medians(&a, &b, 0.95).unwrap();
        let by_run = boot
            .ratio_of_quantiles_by_run((&a, &runs), (&b, &runs), 0.5, 0.95)
            .unwrap();
        assert!(by_run.high - by_run.low >= flat.high - flat.low);
    }

    #[test]
    fn zero_denominator_is_an_error_not_a_panic() {
        let err = Bootstrap::seeded(1).ratio_of_medians(&[0.0, 0.0, 0.0], &[1.0], 0.95);
        assert!(matches!(err, Err(StatsError::Degenerate(_))));
        assert!(Bootstrap::seeded(1).median(&[], 0.95).is_err());
        assert!(Bootstrap::new(3, 1).median(&[1.0], 0.95).is_err());
    }
}
