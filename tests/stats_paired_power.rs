//! Issue 9 power on *paired* data: the built-in kernels (dense vs 16x16 block sparsity at
//! 25% density, small shapes, one process) measured in many in-process runs give real
//! per-pair speedup ratios grouped by run. Two disjoint sets of k runs per side are an A/A
//! comparison; dividing one side's ratios by 1.05 or 1.10 injects a 5% or 10% slowdown of
//! the sparse kernel. Reported: how often the run-aware comparison (margin 0, lower speedup
//! is worse) flags it, next to the naive sample-level Mann–Whitney, for k = 5, 10, 20.
//!
//!     cargo test --release --test stats_paired_power -- --ignored --nocapture

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use sparsegate::execute::execute_slice;
use sparsegate::ingress::pack::SamplePolicy;
use sparsegate::ingress::{GemmOp, Precision, Slice, SliceBackend, Sparsity};
use sparsegate::lower::lower;
use sparsegate::validate::compare::{CompareOptions, Samples, Worse, compare};
use sparsegate::validate::stats::{MwuMethod, mann_whitney_u, wilson};
use sparsegate::verdict::Verdict;

fn paired_runs(runs: u32) -> Vec<Vec<f64>> {
    let slice = Slice {
        pack: "power".into(),
        id: "block".into(),
        ops: vec![GemmOp {
            name: "w".into(),
            m: 32,
            n: 128,
            k: 128,
        }],
        sparsity: Sparsity::Block {
            rows: 16,
            cols: 16,
            density: 0.25,
        },
        precision: Precision::Fp32,
        backend: SliceBackend::Kernels {
            weights: Default::default(),
        },
        guardrails: vec![],
        samples: SamplePolicy {
            warmup: 3,
            min: 20,
            max: 20,
            time_budget_s: 0.001,
            runs,
            ..Default::default()
        },
        seed: 9,
        threads: 1,
    };
    let ev = execute_slice(&slice, &lower(&slice));
    assert_eq!(ev.failure, None);
    ev.metrics["effective_speedup"].by_run().expect("runs tagged")
}

#[test]
#[ignore]
fn issue_9_detection_rate_on_paired_kernel_ratios() {
    let runs = paired_runs(80);
    let splits = 100usize;
    let opts = CompareOptions {
        margin: 0.0,
        resamples: 300,
        worse: Worse::Lower,
        ..CompareOptions::default()
    };
    for slowdown in [1.0, 1.05, 1.10] {
        for k in [5usize, 10, 20] {
            let mut rng = ChaCha8Rng::seed_from_u64(200 + k as u64);
            let (mut ours, mut naive) = (0, 0);
            for s in 0..splits {
                let mut idx: Vec<usize> = (0..runs.len()).collect();
                idx.shuffle(&mut rng);
                let pick = |r: &[usize], f: f64| Samples {
                    path: "paired".into(),
                    runs: r
                        .iter()
                        .map(|&i| runs[i].iter().map(|v| v / f).collect())
                        .collect(),
                    grouped: true,
                };
                let (base, cand) = (pick(&idx[..k], 1.0), pick(&idx[k..2 * k], slowdown));
                let c = compare(
                    &base,
                    &cand,
                    &CompareOptions {
                        seed: s as u64,
                        ..opts
                    },
                )
                .unwrap();
                ours += usize::from(c.verdict == Verdict::Fail);
                let flat = mann_whitney_u(&cand.values(), &base.values(), MwuMethod::Auto).unwrap();
                naive += usize::from(flat.p_less < 0.05);
            }
            let (lo, hi) = wilson(ours as u64, splits as u64, 0.95).unwrap();
            eprintln!(
                "paired speedup, slowdown {:+.0}% k={k}: run-aware flags {:.2} [{:.2}, {:.2}], naive sample-level {:.2}",
                (slowdown - 1.0) * 100.0,
                ours as f64 / splits as f64,
                lo,
                hi,
                naive as f64 / splits as f64
            );
        }
    }
}

/// Fast: a few in-process runs of real kernels give one group of paired ratios per run,
/// each positive and finite, so the power report above has what it needs.
#[test]
fn issue_9_in_process_runs_give_grouped_paired_ratios() {
    let runs = paired_runs(4);
    assert_eq!(runs.len(), 4);
    assert!(
        runs.iter()
            .all(|r| r.len() == 20 && r.iter().all(|v| v.is_finite() && *v > 0.0))
    );
}
