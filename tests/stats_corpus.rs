//! Issues 5 and 9: the run-aware comparison holds its false-alarm rate on *real* machine
//! noise. `tests/data/stats/aa-corpus-ac.json` is the A/A corpus of
//! `shared/data/aa-noise` (150 fresh-process runs × 30 timings of two workloads on a shared
//! 2-vCPU VM; every pair of runs is an A/A comparison). For each workload and k = 5, 10
//! runs per side, 100 seeded random disjoint splits are compared with `stats compare`'s
//! library function, run-aware (per-run arrays), at margin 0: any regression the interval
//! shows is a false alarm. Side by side on the same splits: the naive sample-level rule
//! (Mann–Whitney on all samples pooled, one-sided p < 0.05), which treats the 30 samples of
//! a run as independent. 500 bootstrap resamples per comparison to stay fast.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use sparsegate::validate::compare::{CompareOptions, Samples, compare};
use sparsegate::validate::stats::{MwuMethod, mann_whitney_u, wilson};
use sparsegate::verdict::Verdict;

fn corpus() -> Vec<(String, Vec<Vec<f64>>)> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/stats/aa-corpus-ac.json"
    ))
    .expect("corpus");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v["kernels"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, k)| {
            let runs = k["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    r.as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_f64().unwrap())
                        .collect()
                })
                .collect();
            (name.clone(), runs)
        })
        .collect()
}

#[test]
fn issue_5_run_aware_comparison_holds_its_false_alarm_rate_on_real_noise() {
    let splits: usize = 100;
    let opts = CompareOptions {
        margin: 0.0,
        resamples: 500,
        ..CompareOptions::default()
    };
    let mut report = Vec::new();
    for (name, runs) in corpus() {
        for k in [5usize, 10] {
            let mut rng = ChaCha8Rng::seed_from_u64(k as u64);
            let (mut ours, mut run_mwu, mut naive) = (0, 0, 0);
            for s in 0..splits {
                let mut idx: Vec<usize> = (0..runs.len()).collect();
                idx.shuffle(&mut rng);
                let pick = |r: &[usize]| Samples {
                    path: "corpus".into(),
                    runs: r.iter().map(|&i| runs[i].clone()).collect(),
                    grouped: true,
                };
                let (base, cand) = (pick(&idx[..k]), pick(&idx[k..2 * k]));
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
                run_mwu += usize::from(c.mann_whitney.p_greater < 0.05);
                let flat = mann_whitney_u(&cand.values(), &base.values(), MwuMethod::Auto).unwrap();
                naive += usize::from(flat.p_greater < 0.05);
            }
            let rate = |c: usize| {
                let (lo, hi) = wilson(c as u64, splits as u64, 0.95).unwrap();
                (c as f64 / splits as f64, lo, hi)
            };
            let (r, lo, hi) = rate(ours);
            let (m, _, _) = rate(run_mwu);
            let (nv, nlo, nhi) = rate(naive);
            report.push(format!(
                "{name} k={k}: run-aware bootstrap {r:.3} ({lo:.3}–{hi:.3}), run-level MWU {m:.3}, \
                 naive sample-level MWU {nv:.3} ({nlo:.3}–{nhi:.3})"
            ));
            assert!(lo <= 0.05, "{name} k={k}: run-aware false alarms {r}");
        }
    }
    eprintln!("{}", report.join("\n"));
}

/// Issue 9 power on real noise (ignored: a report, ~10 s): scale the candidate's runs by
/// 1.05 or 1.10 and count how often the run-aware comparison fails them at margin 0, for
/// k = 5, 10, 20 runs per side (50 splits each), beside the naive sample-level rule.
///
///     cargo test --release --test stats_corpus -- --ignored --nocapture
#[test]
#[ignore]
fn issue_9_detection_rate_on_real_noise() {
    let splits: usize = 50;
    let opts = CompareOptions {
        margin: 0.0,
        resamples: 300,
        ..CompareOptions::default()
    };
    for (name, runs) in corpus() {
        for slowdown in [1.05, 1.10] {
            for k in [5usize, 10, 20] {
                let mut rng = ChaCha8Rng::seed_from_u64(100 + k as u64);
                let (mut ours, mut naive) = (0, 0);
                for s in 0..splits {
                    let mut idx: Vec<usize> = (0..runs.len()).collect();
                    idx.shuffle(&mut rng);
                    let pick = |r: &[usize], f: f64| Samples {
                        path: "corpus".into(),
                        runs: r
                            .iter()
                            .map(|&i| runs[i].iter().map(|v| v * f).collect())
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
                    naive += usize::from(flat.p_greater < 0.05);
                }
                eprintln!(
                    "{name} +{:.0}% k={k}: run-aware detects {:.2}, naive sample-level {:.2}",
                    (slowdown - 1.0) * 100.0,
                    ours as f64 / splits as f64,
                    naive as f64 / splits as f64
                );
            }
        }
    }
}
