//! Helpers shared by the integration tests outside `tests/cli`: the committed fixtures under
//! `tests/data/`, agreement with a reference implementation, and the A/A split study that
//! `stats_corpus` and `stats_paired_power` run on real runs.
//!
//! Each test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde_json::Value;
use sparsegate::validate::compare::{CompareOptions, Samples, compare};
use sparsegate::validate::stats::{MwuMethod, mann_whitney_u, wilson};
use sparsegate::verdict::Verdict;

/// The JSON fixture at `tests/data/<path>`.
pub fn fixture(path: &str) -> Value {
    let full = format!("{}/tests/data/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// A JSON array of numbers.
pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
}

/// Agreement to 1e-9 relative, or 1e-12 absolute near zero.
#[track_caller]
pub fn close(ours: f64, theirs: f64, what: &str) {
    close_to(ours, theirs, 1e-9, what);
}

/// Agreement to `rel` relative, or 1e-12 absolute near zero.
#[track_caller]
pub fn close_to(ours: f64, theirs: f64, rel: f64, what: &str) {
    let diff = (ours - theirs).abs();
    assert!(
        diff <= 1e-12 || diff <= rel * theirs.abs(),
        "{what}: ours {ours:e} vs reference {theirs:e}"
    );
}

/// Comparison options at margin 0, where any regression the interval shows fails, with
/// `resamples` bootstrap resamples (a regression is a higher value unless changed).
pub fn at_margin_0(resamples: usize) -> CompareOptions {
    CompareOptions {
        margin: 0.0,
        resamples,
        ..CompareOptions::default()
    }
}

/// What an A/A split study counted over its `splits` comparisons.
pub struct SplitCounts {
    pub splits: usize,
    /// The run-aware comparison's verdict was `fail`.
    pub run_aware_fails: usize,
    /// The run-level Mann–Whitney of the comparison found the candidate greater (p < 0.05).
    pub run_mwu_greater: usize,
    /// The naive Mann–Whitney on all samples pooled found the candidate greater (p < 0.05).
    pub naive_greater: usize,
    /// The naive Mann–Whitney on all samples pooled found the candidate less (p < 0.05).
    pub naive_less: usize,
}

/// `splits` seeded random disjoint splits of `runs` (RNG seeded with `rng_seed`) into `k`
/// baseline runs and `k` candidate runs whose values pass through `candidate` (the identity
/// for an A/A comparison, a scaling to inject a change). Each split is compared run-aware
/// with `opts` under the split's index as bootstrap seed, and beside it with the naive
/// sample-level Mann–Whitney, which treats every sample as independent.
pub fn split_study(
    runs: &[Vec<f64>],
    k: usize,
    splits: usize,
    rng_seed: u64,
    opts: CompareOptions,
    candidate: impl Fn(f64) -> f64,
) -> SplitCounts {
    let mut rng = ChaCha8Rng::seed_from_u64(rng_seed);
    let mut counts = SplitCounts {
        splits,
        run_aware_fails: 0,
        run_mwu_greater: 0,
        naive_greater: 0,
        naive_less: 0,
    };
    for s in 0..splits {
        let mut idx: Vec<usize> = (0..runs.len()).collect();
        idx.shuffle(&mut rng);
        let pick = |r: &[usize], f: &dyn Fn(f64) -> f64| Samples {
            path: "split".into(),
            runs: r
                .iter()
                .map(|&i| runs[i].iter().map(|&v| f(v)).collect())
                .collect(),
            grouped: true,
        };
        let (base, cand) = (pick(&idx[..k], &|v| v), pick(&idx[k..2 * k], &candidate));
        let c = compare(
            &base,
            &cand,
            &CompareOptions {
                seed: s as u64,
                ..opts
            },
        )
        .unwrap();
        counts.run_aware_fails += usize::from(c.verdict == Verdict::Fail);
        counts.run_mwu_greater += usize::from(c.mann_whitney.p_greater < 0.05);
        let flat = mann_whitney_u(&cand.values(), &base.values(), MwuMethod::Auto).unwrap();
        counts.naive_greater += usize::from(flat.p_greater < 0.05);
        counts.naive_less += usize::from(flat.p_less < 0.05);
    }
    counts
}

impl SplitCounts {
    /// The share of splits `count` stands for, with its 95% Wilson interval.
    pub fn rate(&self, count: usize) -> (f64, f64, f64) {
        let (lo, hi) = wilson(count as u64, self.splits as u64, 0.95).unwrap();
        (count as f64 / self.splits as f64, lo, hi)
    }
}
