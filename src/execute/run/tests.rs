use super::*;
use crate::domain::{Counter, Metric};
use crate::domain::{GemmOp, Precision, Sparsity};
use crate::execute::StderrTail;
use crate::ingress::SliceBackend;
use crate::ingress::pack::SamplePolicy;
use crate::lower::{KernelPath, lower};

fn slice(sparsity: Sparsity, ops: &[(usize, usize, usize)]) -> Slice {
    Slice {
        pack: "p".into(),
        id: "tiny".into(),
        ops: ops
            .iter()
            .enumerate()
            .map(|(i, &(m, n, k))| GemmOp {
                name: format!("op{i}"),
                m,
                n,
                k,
            })
            .collect(),
        sparsity,
        precision: Precision::Fp32,
        backend: SliceBackend::Kernels {
            weights: Default::default(),
        },
        guardrails: vec![],
        not_applicable: vec![],
        samples: SamplePolicy {
            warmup: 2,
            min: 3,
            max: 20,
            time_budget_s: 0.01,
            ..Default::default()
        },
        seed: 7,
        threads: 2,
        checkpoint: None,
        load: None,
    }
}

#[test]
fn tiny_sparse_slice_yields_paired_positive_samples() {
    let s = slice(Sparsity::NOfM { n: 2, m: 4 }, &[(16, 24, 32), (9, 8, 18)]);
    let plan = lower(&s);
    assert_eq!(plan.ops[1].path, KernelPath::DenseFallback);
    let ev = execute_slice(&s, &plan);
    assert_eq!(ev.failure, None);
    let n = ev.metrics[Metric::Latency].samples.len();
    assert!((3..=20).contains(&n), "{n}");
    for name in [
        Metric::Latency,
        Metric::EffectiveSpeedup,
        Metric::ThroughputGflops,
    ] {
        let m = &ev.metrics[name];
        assert_eq!((m.samples.len(), m.runs.len()), (n, n), "{name}");
        assert!(
            m.samples.iter().all(|&v| v > 0.0 && v.is_finite()),
            "{name}: {:?}",
            m.samples
        );
    }
    assert_eq!(ev.comparator.as_ref().map(|c| c.samples.len()), Some(n));
    assert!(ev.warmup_iterations >= 2);
    assert_eq!(ev.counters[Counter::Samples], n as f64);
    assert_eq!(ev.counters[Metric::FallbackRate], 0.5);
    assert_eq!(ev.counters[Counter::ValueBytes], (24 * 16 * 4) as f64);
    assert_eq!(ev.counters[Counter::MetadataBytes], (24 * 16 / 4) as f64);
    assert_eq!(ev.counters[Metric::MetadataOverhead], 1.0 / 16.0);
    assert_eq!(
        ev.counters[Counter::DenseFlops],
        2.0 * (16.0 * 24.0 * 32.0 + 9.0 * 8.0 * 18.0)
    );
    assert_eq!(ev.sparsity, "2:4");
    assert!(ev.wall_time_s > 0.0);
}

#[test]
fn dense_slice_has_no_metadata() {
    let s = slice(Sparsity::Dense, &[(5, 7, 3)]);
    let ev = execute_slice(&s, &lower(&s));
    assert_eq!(ev.failure, None);
    assert_eq!(ev.counters[Metric::MetadataOverhead], 0.0);
    assert_eq!(ev.counters[Counter::ValueBytes], 0.0);
    assert_eq!(ev.counters[Counter::WeightBytes], (7 * 3 * 4) as f64);
}

#[test]
fn degenerate_shapes_fail_or_measure_but_never_panic() {
    for ops in [vec![], vec![(0, 0, 0)], vec![(1, 1, 0)], vec![(0, 4, 8)]] {
        let s = slice(Sparsity::NOfM { n: 1, m: 4 }, &ops);
        let ev = execute_slice(&s, &lower(&s));
        if ops.is_empty() {
            assert_eq!(ev.failure.as_ref().map(|f| f.stage), Some(Stage::Execution));
        }
    }
}

#[test]
fn a_sparse_plan_without_a_sparse_pattern_is_an_execution_failure() {
    let s = slice(Sparsity::Dense, &[(4, 4, 4)]);
    let mut plan = lower(&s);
    plan.ops[0].path = KernelPath::Sparse;
    let ev = execute_slice(&s, &plan);
    let failure = ev.failure.expect("failure");
    assert_eq!(failure.stage, Stage::Execution);
    assert!(failure.message.contains("none for dense"), "{}", failure.message);
}

#[test]
fn issue_3_unstructured_slice_runs_the_csr_kernel() {
    let s = slice(Sparsity::Unstructured { density: 0.1 }, &[(16, 24, 40)]);
    let plan = lower(&s);
    assert_eq!(plan.ops[0].path, KernelPath::Sparse);
    let ev = execute_slice(&s, &plan);
    assert_eq!(ev.failure, None);
    assert_eq!(ev.counters[Metric::FallbackRate], 0.0);
    // 4 of 40 kept per row (per-row pruning), u32 index per value plus 25 row pointers.
    assert_eq!(ev.counters[Counter::ValueBytes], (24 * 4 * 4) as f64);
    assert_eq!(ev.counters[Counter::MetadataBytes], ((24 * 4 + 25) * 4) as f64);
}

#[test]
fn issue_3_block_slice_runs_bsr_or_falls_back_when_blocks_do_not_tile() {
    let block = Sparsity::Block {
        rows: 16,
        cols: 16,
        density: 0.1,
    };
    // 32×160 weight: 2×10 blocks of which 2 kept; 24×40 does not tile.
    let s = slice(block, &[(16, 32, 160), (9, 24, 40)]);
    let plan = lower(&s);
    assert_eq!(plan.ops[0].path, KernelPath::Sparse);
    assert_eq!(plan.ops[1].path, KernelPath::DenseFallback);
    let ev = execute_slice(&s, &plan);
    assert_eq!(ev.failure, None);
    assert_eq!(ev.counters[Metric::FallbackRate], 0.5);
    assert_eq!(ev.counters[Counter::ValueBytes], (2 * 256 * 4) as f64);
    assert_eq!(ev.counters[Counter::MetadataBytes], ((2 + 3) * 4) as f64);
}

#[test]
fn stability_needs_three_close_timings() {
    assert!(!is_stable(&[1.0, 1.0]));
    assert!(is_stable(&[5.0, 1.0, 1.02, 0.99]));
    assert!(!is_stable(&[1.0, 1.2, 1.0]));
}

/// The product path on BERT-base shapes: prints the median same-run speedup per op set.
/// Ignored because it takes seconds and its numbers belong to a report, not an assertion:
/// `cargo test --release -- --ignored --nocapture bert_base`.
#[test]
#[ignore]
fn bert_base_two_of_four_report() {
    let shapes = [
        (128, 2304, 768),
        (128, 768, 768),
        (128, 3072, 768),
        (128, 768, 3072),
    ];
    for threads in [1, 2] {
        let mut s = slice(Sparsity::NOfM { n: 2, m: 4 }, &shapes);
        s.threads = threads;
        s.samples = SamplePolicy {
            warmup: 3,
            min: 10,
            max: 200,
            time_budget_s: 2.0,
            ..Default::default()
        };
        let ev = execute_slice(&s, &lower(&s));
        assert_eq!(ev.failure, None);
        let median = |metric: Metric| {
            let mut v = ev.metrics[metric].samples.clone();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "threads {threads}: {} samples, {} warm-up, speedup median {:.2}x, latency {:.2} ms, {:.0} GFLOP/s \
             dense-equivalent, metadata overhead {:.4}",
            ev.counters[Counter::Samples],
            ev.warmup_iterations,
            median(Metric::EffectiveSpeedup),
            median(Metric::Latency) * 1e3,
            median(Metric::ThroughputGflops),
            ev.counters[Metric::MetadataOverhead],
        );
    }
}

#[test]
fn issue_9_runs_tag_every_sample_and_keep_per_run_summaries() {
    let mut s = slice(Sparsity::NOfM { n: 2, m: 4 }, &[(16, 24, 32)]);
    s.samples.runs = 3;
    let ev = execute_slice(&s, &lower(&s));
    assert_eq!(ev.failure, None);
    assert_eq!(ev.runs.len(), 3);
    assert_eq!(ev.run_mode, Some(crate::ingress::pack::RunMode::InProcess));
    let n = ev.metrics[Metric::Latency].samples.len();
    assert_eq!(ev.runs.iter().map(|r| r.samples).sum::<usize>(), n);
    for name in [
        Metric::Latency.into(),
        Metric::EffectiveSpeedup.into(),
        Metric::ThroughputGflops.into(),
        Series::Calibration,
    ] {
        let m = &ev.metrics[name];
        assert_eq!(m.samples.len(), n, "{name}");
        let groups = m.by_run().expect("run ids match samples");
        assert_eq!(groups.len(), 3, "{name}");
        assert!(groups.iter().all(|g| g.len() >= 3), "{name}");
    }
    for (i, r) in ev.runs.iter().enumerate() {
        assert_eq!(r.run, i as u32);
        for v in [r.latency_s, r.comparator_s, r.calibration_s, r.speedup] {
            assert!(v > 0.0 && v.is_finite(), "{r:?}");
        }
        assert!(r.warmup_iterations >= 2);
    }
    assert_eq!(ev.counters[Counter::Runs], 3.0);
}

#[test]
fn issue_9_one_run_is_todays_protocol() {
    let s = slice(Sparsity::NOfM { n: 2, m: 4 }, &[(16, 24, 32)]);
    let ev = execute_slice(&s, &lower(&s));
    assert_eq!(ev.runs.len(), 1);
    assert!(ev.metrics[Metric::Latency].runs.iter().all(|&r| r == 0));
}

/// Stands in for a child process: each "run" measured on a fresh workload, with a fake pid.
fn fake_child(s: &Slice) -> impl Fn(u32) -> Result<RunRecord, ChildError> + '_ {
    move |run| {
        let mut record = measure_run(s, &lower(s)).expect("a fresh workload measures");
        record.pid = Some(1000 + run);
        Ok(record)
    }
}

#[test]
fn issue_9_process_runs_merge_child_records_with_their_pids() {
    let mut s = slice(Sparsity::NOfM { n: 2, m: 4 }, &[(16, 24, 32)]);
    s.samples.runs = 3;
    assert_eq!(s.samples.effective_run_mode(), RunMode::Process);
    let launch = fake_child(&s);
    let ev = execute_slice_with(&s, &lower(&s), Some(&launch), None);
    assert_eq!(ev.failure, None);
    assert_eq!(ev.run_mode, Some(RunMode::Process));
    assert_eq!(
        ev.runs.iter().map(|r| (r.run, r.pid)).collect::<Vec<_>>(),
        [(0, Some(1000)), (1, Some(1001)), (2, Some(1002))]
    );
    let latency = &ev.metrics[Metric::Latency];
    assert_eq!(latency.runs.len(), latency.samples.len());
    assert_eq!(
        ev.runs.iter().map(|r| r.samples).sum::<usize>(),
        latency.samples.len()
    );
    assert_eq!(ev.counters[Counter::Runs], 3.0);
    assert_eq!(ev.counters[Counter::ValueBytes], (24 * 16 * 4) as f64);
}

#[test]
fn issue_9_in_process_mode_ignores_the_launcher_and_says_so() {
    let mut s = slice(Sparsity::NOfM { n: 2, m: 4 }, &[(16, 24, 32)]);
    s.samples.runs = 2;
    s.samples.run_mode = Some(RunMode::InProcess);
    let launch = |_run: u32| -> Result<RunRecord, ChildError> { panic!("must not be called") };
    let ev = execute_slice_with(&s, &lower(&s), Some(&launch), None);
    assert_eq!(ev.failure, None);
    assert_eq!(ev.run_mode, Some(RunMode::InProcess));
    assert!(ev.runs.iter().all(|r| r.pid.is_none()));
}

#[test]
fn issue_9_a_failed_child_run_fails_the_slice_at_execution() {
    let mut s = slice(Sparsity::NOfM { n: 2, m: 4 }, &[(16, 24, 32)]);
    s.samples.runs = 2;
    let launch = |run: u32| -> Result<RunRecord, ChildError> {
        if run == 1 {
            Err(ChildError::Failed {
                status: std::os::unix::process::ExitStatusExt::from_raw(11),
                stderr: StderrTail("boom".into()),
            })
        } else {
            Ok(measure_run(&s, &lower(&s)).expect("a fresh workload measures"))
        }
    };
    let ev = execute_slice_with(&s, &lower(&s), Some(&launch), None);
    let failure = ev.failure.expect("the slice must fail");
    assert_eq!(failure.stage, Stage::Execution);
    assert!(
        failure.message.contains("run 1") && failure.message.contains("boom"),
        "{}",
        failure.message
    );
    assert!(ev.metrics.is_empty());
}

#[test]
fn issue_9_ragged_or_non_positive_child_records_are_refused() {
    let mut s = slice(Sparsity::NOfM { n: 2, m: 4 }, &[(16, 24, 32)]);
    s.samples.runs = 2;
    for bad in [
        RunRecord {
            pid: Some(1),
            warmup_iterations: 1,
            candidate: vec![1.0, 1.0],
            comparator: vec![1.0],
            calibration: vec![1.0, 1.0],
            counters: Default::default(),
            op_costs: vec![],
            cpu_share: None,
        },
        RunRecord {
            pid: Some(1),
            warmup_iterations: 1,
            candidate: vec![1.0, -1.0],
            comparator: vec![1.0, 1.0],
            calibration: vec![1.0, 1.0],
            counters: Default::default(),
            op_costs: vec![],
            cpu_share: None,
        },
    ] {
        let launch = |_run: u32| -> Result<RunRecord, ChildError> { Ok(bad.clone()) };
        let ev = execute_slice_with(&s, &lower(&s), Some(&launch), None);
        let failure = ev.failure.expect("the slice must fail");
        assert_eq!(failure.stage, Stage::Execution);
        assert!(ev.runs.is_empty() && ev.metrics.is_empty());
    }
}

#[test]
fn issue_5_sequential_runs_stop_when_the_rule_says_decided_and_record_the_looks() {
    let mut s = slice(Sparsity::NOfM { n: 2, m: 4 }, &[(16, 24, 32)]);
    s.samples.runs = 2;
    s.samples.max_runs = Some(6);
    s.samples.sequential = true;
    s.samples.run_mode = Some(RunMode::InProcess);
    // Decided once 4 runs are in; the rule sees the earlier looks.
    let decide_at_4 = |ev: &SliceEvidence| {
        assert_eq!(ev.looks.len() + 2, ev.runs.len());
        StopDecision {
            decided: ev.runs.len() >= 4,
            alpha: 0.01,
        }
    };
    let ev = execute_slice_with(&s, &lower(&s), None, Some(&decide_at_4));
    assert_eq!(ev.failure, None);
    assert_eq!(ev.runs.len(), 4);
    assert_eq!(
        ev.looks.iter().map(|l| (l.runs, l.decided)).collect::<Vec<_>>(),
        [(2, false), (3, false), (4, true)]
    );
    assert_eq!(ev.looks[2].samples, ev.metrics[Metric::Latency].samples.len());
    // Never decided: all 6 runs, 5 looks.
    let never = |_: &SliceEvidence| StopDecision {
        decided: false,
        alpha: 0.0,
    };
    let ev = execute_slice_with(&s, &lower(&s), None, Some(&never));
    assert_eq!((ev.runs.len(), ev.looks.len()), (6, 5));
    // Without `sequential` the rule is not consulted: exactly `runs` runs.
    s.samples.sequential = false;
    let ev = execute_slice_with(&s, &lower(&s), None, Some(&never));
    assert_eq!((ev.runs.len(), ev.looks.len()), (2, 0));
}

#[test]
fn issue_22_a_slice_past_the_last_level_cache_is_calibrated_by_a_stream_probe() {
    let llc = 1 << 20;
    // In cache: the FMA probe.
    assert_eq!(Calibration::for_regime(llc / 2, llc).stream_bytes(), 0);
    assert_eq!(Calibration::for_regime(llc, llc).stream_bytes(), 0);
    // Past it: a read of at least 1.5 × the cache, of the slice's own size when larger,
    // capped.
    let past = Calibration::for_regime(llc + 1, llc).stream_bytes();
    assert_eq!(past, llc * 3 / 2);
    let big = Calibration::for_regime(5 * llc, llc).stream_bytes();
    assert_eq!(big, 5 * llc);
    assert_eq!(
        Calibration::for_regime(usize::MAX / 2, llc).stream_bytes(),
        STREAM_MAX_BYTES
    );
    // Both probes run and take time.
    let mut probe = Calibration::for_regime(2 * llc, llc);
    probe.run();
    Calibration::new().run();
}

#[test]
fn issue_22_the_evidence_records_which_calibration_probe_ran() {
    // A tiny slice: in cache, so the FMA probe, and the counter says 0.
    let s = slice(Sparsity::NOfM { n: 2, m: 4 }, &[(8, 64, 64)]);
    let plan = crate::lower::lower(&s);
    let runs = InProcessRuns::prepare(&s, &plan).expect("prepare");
    assert_eq!(runs.counters.get(Counter::CalibrationStreamBytes), Some(&0.0));
}

#[test]
fn issue_22_every_run_records_the_share_of_its_cores_it_got() {
    let mut s = slice(Sparsity::NOfM { n: 2, m: 4 }, &[(16, 24, 32)]);
    s.samples.runs = 3;
    let ev = execute_slice(&s, &lower(&s));
    let shares: Vec<f64> = ev.runs.iter().filter_map(|r| r.cpu_share).collect();
    assert_eq!(shares.len(), 3, "{:?}", ev.runs);
    assert!(shares.iter().all(|s| *s > 0.0 && *s <= 1.0), "{shares:?}");
    // The slice's counter is their median.
    let mut sorted = shares.clone();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(ev.counters.get(Counter::CpuShare), Some(&sorted[1]));
}

#[test]
fn issue_22_cpu_share_is_cpu_time_over_wall_time_and_threads() {
    assert_eq!(cpu_share(1.0, 1.0, 2), Some(0.5));
    assert_eq!(cpu_share(2.0, 1.0, 2), Some(1.0));
    // Clock granularity can put CPU time a hair above wall time: capped at the whole.
    assert_eq!(cpu_share(2.1, 1.0, 2), Some(1.0));
    assert_eq!(cpu_share(1.0, 0.0, 2), None);
}
