//! Unit tests of the assessment on synthetic evidence: one per rule and verdict path.

mod calibration;
mod diagnosis;
mod planning;
mod sequential;

use super::golden::{BASELINE_SCHEMA_VERSION, Baseline, Baselines};
use super::{AssessOptions, Assessment, assess, assess_with};
use crate::domain::metric::Metric;
use crate::domain::stage::Stage;
use crate::domain::verdict::{Bottleneck, Verdict};
use crate::domain::{Counter, GemmOp, KeyedMap, Precision, Series, Sparsity};
use crate::execute::{EVIDENCE_SCHEMA_VERSION, Evidence, MetricSamples, SliceEvidence, SliceFailure};
use crate::ingress::pack::SamplePolicy;
use crate::ingress::{Environment, GuardrailSpec, Rule, Severity, Slice, SliceBackend};
use crate::lower::{KernelPath, OpPlan, Plan};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

pub(super) fn env() -> Environment {
    Environment {
        tool_version: "0".into(),
        rustc: "rustc".into(),
        kernel_libs: BTreeMap::new(),
        cpu_model: "cpu".into(),
        cpu_features: vec![],
        kernel_paths: BTreeMap::new(),
        bf16_pick: None,
        logical_cpus: 1,
        threads: 1,
        os: "linux-x86_64".into(),
        os_release: "6".into(),
        git: None,
        roofs: None,
        stack: Default::default(),
    }
}

pub(super) fn op(m: usize, n: usize, k: usize) -> GemmOp {
    GemmOp {
        name: format!("g{m}x{n}x{k}"),
        m,
        n,
        k,
    }
}

pub(super) fn guard(metric: Metric, rule: Rule, severity: Severity) -> GuardrailSpec {
    GuardrailSpec {
        id: None,
        metric,
        rule,
        confidence: 0.95,
        severity,
        location: None,
    }
}

pub(super) fn slice(id: &str, guardrails: Vec<GuardrailSpec>) -> Slice {
    Slice {
        pack: "p".into(),
        id: id.into(),
        ops: vec![op(512, 512, 512)],
        sparsity: Sparsity::NOfM { n: 2, m: 4 },
        precision: Precision::Fp32,
        backend: SliceBackend::Kernels {
            weights: Default::default(),
        },
        guardrails,
        not_applicable: vec![],
        samples: SamplePolicy::default(),
        seed: 42,
        threads: 1,
        checkpoint: None,
        load: None,
    }
}

pub(super) fn plan(ops: Vec<GemmOp>, path: KernelPath) -> Plan {
    Plan {
        ops: ops
            .into_iter()
            .map(|op| OpPlan {
                op,
                path,
                reason: "test".into(),
            })
            .collect(),
        graph: vec![],
    }
}

/// `n` lognormal values with median `median` and log-sd `sigma`, seeded.
pub(super) fn lognormal(n: usize, median: f64, sigma: f64, seed: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let (u1, u2): (f64, f64) = (rng.random::<f64>().max(f64::MIN_POSITIVE), rng.random());
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            median * (sigma * z).exp()
        })
        .collect()
}

pub(super) fn slice_ev(
    id: &str,
    metrics: Vec<(&str, Vec<f64>)>,
    counters: Vec<(&str, f64)>,
    plan: Plan,
) -> SliceEvidence {
    SliceEvidence {
        metrics: metrics
            .into_iter()
            .map(|(k, v)| (k.parse().unwrap(), MetricSamples::single_run("u", v)))
            .collect(),
        counters: counters
            .into_iter()
            .map(|(k, v)| (k.parse().unwrap(), v))
            .collect(),
        warmup_iterations: 3,
        wall_time_s: 1.0,
        // Pack `p`, slice `id`, 2:4 in fp32: what `slice(id, ..)` declares.
        ..SliceEvidence::empty(&slice(id, vec![]), &plan)
    }
}

pub(super) fn evidence(slices: Vec<SliceEvidence>) -> Evidence {
    Evidence {
        schema_version: EVIDENCE_SCHEMA_VERSION,
        environment: env(),
        packs: vec![],
        slices,
    }
}

pub(super) fn baseline(id: &str, metrics: Vec<(&str, Vec<f64>)>) -> Baselines {
    let b = Baseline {
        schema_version: BASELINE_SCHEMA_VERSION,
        pack: "p".into(),
        slice: id.into(),
        pack_digest: "sha256:0".into(),
        blessed_at: "2026-01-01T00:00:00Z".into(),
        blessed_by: "test".into(),
        environment: env(),
        metrics: metrics
            .into_iter()
            .map(|(k, v)| (k.parse().unwrap(), MetricSamples::single_run("s", v)))
            .collect(),
        counters: Default::default(),
        expires_at: None,
        artifacts: vec![],
        digest: "sha256:0".into(),
        session_drift: None,
        runner_class: None,
    };
    BTreeMap::from([(crate::domain::SliceKey::new("p", id), b)])
}

pub(super) fn sparse_plan() -> Plan {
    plan(vec![op(512, 512, 512)], KernelPath::Sparse)
}

/// Asserts that `text` (an outcome's detail, a diagnosis rule) says every one of `needles`.
#[track_caller]
pub(super) fn assert_says(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "expected {needle:?} in: {text}");
    }
}

/// Asserts an outcome's verdict, and that its detail says every one of `says`.
#[track_caller]
fn assert_outcome(o: &super::GuardrailOutcome, verdict: Verdict, says: &[&str]) {
    assert_eq!(o.verdict, verdict, "{}", o.detail);
    assert_says(&o.detail, says);
}

/// Two ops planned on the dense fallback (the second's k = 510 is no multiple of 4).
fn fallback_plan() -> Plan {
    plan(
        vec![op(512, 512, 512), op(512, 512, 510)],
        KernelPath::DenseFallback,
    )
}

/// A blocking guardrail.
pub(super) fn blocking(metric: Metric, rule: Rule) -> GuardrailSpec {
    guard(metric, rule, Severity::Block)
}

/// One slice, one guardrail, evidence with `metrics`: the single outcome.
fn one(
    g: GuardrailSpec,
    metrics: Vec<(&str, Vec<f64>)>,
    plan: Plan,
    baselines: &Baselines,
) -> super::GuardrailOutcome {
    let a: Assessment = assess_with(
        &[slice("s", vec![g])],
        &evidence(vec![slice_ev("s", metrics, vec![], plan)]),
        baselines,
        &AssessOptions { resamples: 500 },
    );
    assert_eq!(a.outcomes.len(), 1);
    a.outcomes.into_iter().next().unwrap()
}

/// `one` on `samples` of `metric` from a sparse plan, with no baseline.
fn fresh(g: GuardrailSpec, metric: &str, samples: Vec<f64>) -> super::GuardrailOutcome {
    one(g, vec![(metric, samples)], sparse_plan(), &Baselines::new())
}

/// `one` on `samples` of `metric` from a sparse plan, against `baselines`.
fn against(
    g: GuardrailSpec,
    baselines: &Baselines,
    metric: &str,
    samples: Vec<f64>,
) -> super::GuardrailOutcome {
    one(g, vec![(metric, samples)], sparse_plan(), baselines)
}

#[test]
fn speedup_clearly_above_bound_passes() {
    let g = blocking(Metric::EffectiveSpeedup, Rule::AtLeast { bound: 1.2 });
    let o = fresh(g, "effective_speedup", lognormal(30, 1.5, 0.02, 1));
    assert_eq!(o.verdict, Verdict::Pass, "{}", o.detail);
    assert_eq!(o.stage, Stage::Validation);
    assert_eq!(o.samples, 30);
    assert!(o.ci_low.unwrap() >= 1.2 && o.ci_low <= o.value && o.value <= o.ci_high);
    assert!(
        o.detail.starts_with("median 1.") && o.detail.ends_with("≥ 1.2x: pass"),
        "{}",
        o.detail
    );
    assert_eq!(o.bottleneck, Some(Bottleneck::Compute));
}

#[test]
fn speedup_clearly_below_bound_fails() {
    let g = blocking(Metric::EffectiveSpeedup, Rule::AtLeast { bound: 1.2 });
    let o = fresh(g, "effective_speedup", lognormal(30, 1.0, 0.02, 2));
    assert_outcome(&o, Verdict::Fail, &["< 1.2x: fail"]);
    assert_eq!(o.stage, Stage::Validation);
}

#[test]
fn interval_straddling_the_bound_is_inconclusive() {
    let g = blocking(Metric::EffectiveSpeedup, Rule::AtLeast { bound: 1.2 });
    let o = fresh(g, "effective_speedup", lognormal(30, 1.2, 0.1, 3));
    assert_outcome(&o, Verdict::Inconclusive, &["straddles"]);
}

#[test]
fn too_few_samples_are_inconclusive_not_a_guess() {
    let g = blocking(Metric::Latency, Rule::AtMost { bound: 1.0 });
    let o = fresh(g, "latency", vec![0.1, 0.1, 0.1, 0.1]);
    assert_eq!(o.verdict, Verdict::Inconclusive, "{}", o.detail);
    assert_eq!(o.value, Some(0.1));
    // A p99 needs far more than 30 samples.
    let g = blocking(Metric::LatencyP99, Rule::AtMost { bound: 1.0 });
    let o = fresh(g, "latency", lognormal(30, 0.1, 0.05, 4));
    assert_outcome(&o, Verdict::Inconclusive, &["p99"]);
}

#[test]
fn tail_latency_uses_the_quantile_of_latency_samples() {
    let g = blocking(Metric::LatencyP95, Rule::AtMost { bound: 0.2 });
    let o = fresh(g, "latency", lognormal(200, 0.1, 0.05, 5));
    assert_eq!(o.verdict, Verdict::Pass, "{}", o.detail);
    assert!(
        o.value.unwrap() > 0.1 && o.detail.starts_with("p95"),
        "{}",
        o.detail
    );
}

#[test]
fn warn_severity_turns_a_failure_into_a_warning_and_keeps_the_numbers() {
    let g = guard(
        Metric::EffectiveSpeedup,
        Rule::AtLeast { bound: 1.2 },
        Severity::Warn,
    );
    let o = fresh(g, "effective_speedup", lognormal(30, 1.0, 0.02, 2));
    assert_outcome(&o, Verdict::Warn, &["fail", "advisory guardrail"]);
    assert!(o.value.is_some() && o.ci_low.is_some());
}

#[test]
fn missing_or_failed_evidence_fails_in_execution() {
    let g = blocking(Metric::Latency, Rule::AtMost { bound: 1.0 });
    let w = guard(Metric::Latency, Rule::AtMost { bound: 1.0 }, Severity::Warn);
    let a = assess(
        &[slice("gone", vec![g.clone(), w])],
        &evidence(vec![]),
        &Baselines::new(),
    );
    assert_eq!(a.outcomes[0].verdict, Verdict::Fail);
    assert_eq!(a.outcomes[0].stage, Stage::Execution);
    assert!(a.outcomes[0].detail.contains("no evidence"));
    assert_eq!(a.outcomes[1].verdict, Verdict::Warn);

    let mut ev = slice_ev("s", vec![], vec![], sparse_plan());
    ev.failure = Some(SliceFailure {
        stage: Stage::Execution,
        message: "kernel panicked".into(),
    });
    let a = assess(&[slice("s", vec![g])], &evidence(vec![ev]), &Baselines::new());
    assert_eq!(a.outcomes[0].verdict, Verdict::Fail);
    assert_eq!(a.outcomes[0].stage, Stage::Execution);
    assert!(a.outcomes[0].detail.contains("kernel panicked"));
}

#[test]
fn missing_metric_is_inconclusive() {
    let g = blocking(Metric::ThroughputGflops, Rule::AtLeast { bound: 1.0 });
    let o = fresh(g, "latency", vec![1.0; 10]);
    assert_eq!(o.verdict, Verdict::Inconclusive, "{}", o.detail);
    let g = blocking(Metric::Latency, Rule::AtMost { bound: 1.0 });
    let o = fresh(g, "latency", vec![1.0, f64::NAN, 1.0, 1.0, 1.0, 1.0]);
    assert_eq!(o.verdict, Verdict::Inconclusive, "{}", o.detail);
}

#[test]
fn speed_lost_to_fallbacks_is_attributed_to_lowering() {
    let g = blocking(Metric::EffectiveSpeedup, Rule::AtLeast { bound: 1.2 });
    let fallback = fallback_plan();
    let o = one(
        g,
        vec![("effective_speedup", lognormal(30, 1.0, 0.02, 6))],
        fallback,
        &Baselines::new(),
    );
    assert_eq!(o.verdict, Verdict::Fail);
    assert_eq!(o.stage, Stage::Lowering);
    assert_eq!(o.bottleneck, Some(Bottleneck::Fallback));
}

/// Issue 2: a failing fallback guardrail names lowering, where the fallback was decided.
#[test]
fn issue_2_failed_fallback_guardrail_is_attributed_to_lowering() {
    let g = blocking(Metric::FallbackRate, Rule::AtMost { bound: 0.0 });
    let fallback = fallback_plan();
    let a = assess_with(
        &[slice("s", vec![g])],
        &evidence(vec![slice_ev(
            "s",
            vec![],
            vec![("fallback_rate", 0.5)],
            fallback,
        )]),
        &Baselines::new(),
        &AssessOptions { resamples: 100 },
    );
    let o = &a.outcomes[0];
    assert_eq!(
        (o.verdict, o.stage),
        (Verdict::Fail, Stage::Lowering),
        "{}",
        o.detail
    );
}

#[test]
fn counters_are_points() {
    let slices = [slice(
        "s",
        vec![
            blocking(Metric::FallbackRate, Rule::AtMost { bound: 0.0 }),
            blocking(Metric::MetadataOverhead, Rule::AtMost { bound: 0.1 }),
        ],
    )];
    let ev = slice_ev("s", vec![], vec![("metadata_overhead", 0.3)], sparse_plan());
    let a = assess(&slices, &evidence(vec![ev]), &Baselines::new());
    assert_eq!(a.outcomes[0].verdict, Verdict::Pass, "{}", a.outcomes[0].detail);
    assert_eq!(
        (a.outcomes[0].ci_low, a.outcomes[0].ci_high),
        (Some(0.0), Some(0.0))
    );
    assert_eq!(a.outcomes[1].verdict, Verdict::Fail, "{}", a.outcomes[1].detail);
    assert_eq!(a.outcomes[1].bottleneck, Some(Bottleneck::Metadata));
}

#[test]
fn a_twenty_percent_slowdown_against_the_baseline_fails() {
    let g = blocking(Metric::Latency, Rule::RegressAtMost { margin: 0.05 });
    let base = baseline("s", vec![("latency", lognormal(30, 1e-3, 0.05, 7))]);
    let o = against(g, &base, "latency", lognormal(30, 1.2e-3, 0.05, 8));
    assert_eq!(o.verdict, Verdict::Fail, "{}", o.detail);
    assert!(o.ci_low.unwrap() > 1.05);
    assert!(o.p_value.unwrap() < 1e-6, "{:?}", o.p_value);
    assert!(o.baseline.unwrap() < o.value.unwrap());
    assert_says(&o.detail, &["Hodges–Lehmann", "Mann–Whitney"]);
}

#[test]
fn an_identical_tight_distribution_passes() {
    let g = blocking(Metric::Latency, Rule::RegressAtMost { margin: 0.05 });
    let base = baseline("s", vec![("latency", lognormal(30, 1e-3, 0.01, 9))]);
    let o = against(g, &base, "latency", lognormal(30, 1e-3, 0.01, 10));
    assert_eq!(o.verdict, Verdict::Pass, "{}", o.detail);
    assert!(o.ci_high.unwrap() <= 1.05);
}

#[test]
fn higher_is_better_metrics_regress_downwards() {
    let g = blocking(Metric::ThroughputGflops, Rule::RegressAtMost { margin: 0.05 });
    let base = baseline("s", vec![("throughput_gflops", lognormal(30, 100.0, 0.02, 11))]);
    let o = against(
        g.clone(),
        &base,
        "throughput_gflops",
        lognormal(30, 80.0, 0.02, 12),
    );
    assert_eq!(o.verdict, Verdict::Fail, "{}", o.detail);
    // Faster than the baseline is never a regression.
    let o = against(g, &base, "throughput_gflops", lognormal(30, 130.0, 0.02, 13));
    assert_eq!(o.verdict, Verdict::Pass, "{}", o.detail);
}

#[test]
fn missing_baseline_is_inconclusive() {
    let g = blocking(Metric::Latency, Rule::RegressAtMost { margin: 0.05 });
    let o = fresh(g, "latency", lognormal(30, 1e-3, 0.01, 14));
    assert_outcome(&o, Verdict::Inconclusive, &["no baseline"]);
}

#[test]
fn the_assessment_is_deterministic() {
    let g = blocking(Metric::Latency, Rule::RegressAtMost { margin: 0.05 });
    let base = baseline("s", vec![("latency", lognormal(30, 1e-3, 0.07, 15))]);
    let a = against(g.clone(), &base, "latency", lognormal(30, 1.05e-3, 0.07, 16));
    let b = against(g, &base, "latency", lognormal(30, 1.05e-3, 0.07, 16));
    assert_eq!(a, b);
}

#[test]
fn bottleneck_follows_arithmetic_intensity() {
    use super::diagnosis::classify;
    let big = slice_ev(
        "s",
        vec![],
        vec![],
        plan(vec![op(1024, 1024, 1024)], KernelPath::Sparse),
    );
    assert_eq!(classify(&big), Some(Bottleneck::Compute));
    let gemv = slice_ev(
        "s",
        vec![],
        vec![],
        plan(vec![op(1, 4096, 4096)], KernelPath::Sparse),
    );
    assert_eq!(classify(&gemv), Some(Bottleneck::MemoryBandwidth));
    let empty = slice_ev("s", vec![], vec![], plan(vec![], KernelPath::Sparse));
    assert_eq!(classify(&empty), None);
}

/// Tag every metric of `ev` (and the baseline `b`, if given) with `k` equal runs.
fn into_runs(metrics: &mut KeyedMap<Series, MetricSamples>, k: usize) {
    for m in metrics.values_mut() {
        let per = m.samples.len().div_ceil(k);
        m.runs = (0..m.samples.len()).map(|i| (i / per) as u32).collect();
    }
}

#[test]
fn issue_9_speedup_bound_with_runs_uses_per_run_medians_and_states_the_mde() {
    let g = blocking(Metric::EffectiveSpeedup, Rule::AtLeast { bound: 1.2 });
    // Five runs whose speed modes differ (1.5, 1.6, …): the run-level interval holds them.
    let samples: Vec<f64> = (0..5)
        .flat_map(|r| lognormal(10, 1.5 + 0.1 * r as f64, 0.02, r as u64))
        .collect();
    let mut ev = slice_ev("s", vec![("effective_speedup", samples)], vec![], sparse_plan());
    into_runs(&mut ev.metrics, 5);
    let a = assess_with(
        &[slice("s", vec![g])],
        &evidence(vec![ev]),
        &Baselines::new(),
        &AssessOptions { resamples: 200 },
    );
    let o = &a.outcomes[0];
    assert_outcome(
        o,
        Verdict::Pass,
        &["5 per-run medians", "detectable with 80% power from 5 runs"],
    );
    assert!((o.value.unwrap() - 1.7).abs() < 0.05, "{:?}", o.value);
    // The interval comes from 5 runs, not 50 samples: wider than the sample-level one.
    assert!(
        o.ci_high.unwrap() - o.ci_low.unwrap() > 0.1,
        "{:?}",
        (o.ci_low, o.ci_high)
    );
}

#[test]
fn issue_9_latency_regression_is_judged_on_calibration_normalised_times() {
    // The candidate's machine is 20% slower across the board: its calibration GEMM is too,
    // so the normalised latency is unchanged while the raw one regresses.
    let o = slower_machine_with_probes((0.0, 0.0));
    assert_outcome(
        &o,
        Verdict::Pass,
        &[
            "calibration-normalised",
            "in-cache 48³ FMA GEMM",
            "raw, not normalised: fail",
        ],
    );
}

/// The issue-9 set-up (the candidate's machine 20% slower across the board, its probe too),
/// with each side's calibration probe recorded as `probes` (stream bytes; 0 = the GEMM).
fn slower_machine_with_probes(probes: (f64, f64)) -> super::GuardrailOutcome {
    let g = blocking(Metric::Latency, Rule::RegressAtMost { margin: 0.05 });
    let mut base = baseline(
        "s",
        vec![
            ("latency", lognormal(40, 1e-3, 0.01, 1)),
            ("calibration", lognormal(40, 1e-4, 0.01, 2)),
        ],
    );
    for b in base.values_mut() {
        into_runs(&mut b.metrics, 4);
        b.counters.insert(Counter::CalibrationStreamBytes, probes.1);
    }
    let mut ev = slice_ev(
        "s",
        vec![
            ("latency", lognormal(40, 1.2e-3, 0.01, 3)),
            ("calibration", lognormal(40, 1.2e-4, 0.01, 4)),
        ],
        vec![],
        sparse_plan(),
    );
    into_runs(&mut ev.metrics, 4);
    ev.counters.insert(Counter::CalibrationStreamBytes, probes.0);
    let a = assess_with(
        &[slice("s", vec![g])],
        &evidence(vec![ev]),
        &base,
        &AssessOptions { resamples: 300 },
    );
    a.outcomes[0].clone()
}

#[test]
fn issue_22_a_memory_bound_slice_is_normalised_by_its_stream_probe_and_the_memo_says_so() {
    let o = slower_machine_with_probes((48.0 * 1048576.0, 48.0 * 1048576.0));
    assert_outcome(
        &o,
        Verdict::Pass,
        &[
            "calibration-normalised",
            "a 48 MiB read past the last-level cache",
            "raw, not normalised: fail",
        ],
    );
}

#[test]
fn issue_22_latency_is_not_normalised_across_different_calibration_probes() {
    // A baseline taken with the GEMM probe says nothing about the memory bandwidth a
    // stream-probed run saw: the raw comparison decides, and the detail says why.
    let o = slower_machine_with_probes((48.0 * 1048576.0, 0.0));
    assert_outcome(
        &o,
        Verdict::Fail,
        &["not calibration-normalised", "in-cache 48³ FMA GEMM"],
    );
}
