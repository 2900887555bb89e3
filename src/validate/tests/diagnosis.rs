//! Issue 6: the bottleneck numbers, the roofline point and the fallback impact.

use super::{assert_says, evidence, op, plan, slice, slice_ev};
use crate::domain::verdict::Bottleneck;
use crate::domain::{Counter, Metric};
use crate::execute::OpCost;
use crate::ingress::MachineRoofs;
use crate::lower::{KernelPath, OpPlan, Plan};
use crate::validate::diagnosis::{diagnose, diagnose_all};

fn roofs(peak_gflops: f64, bandwidth_gbps: f64) -> MachineRoofs {
    MachineRoofs {
        peak_gflops,
        bandwidth_gbps,
        isa: "avx512f".into(),
        threads: 2,
        triad_bytes: 1 << 27,
        measured_s: 0.1,
        precision_peaks: vec![],
    }
}

/// A CPU slice doing 2e9 useful FLOPs over 1e8 bytes (20 FLOP/B) in 20 ms: 100 GFLOP/s.
fn cpu_ev() -> crate::execute::SliceEvidence {
    slice_ev(
        "s",
        vec![("latency", vec![0.019, 0.020, 0.021])],
        vec![
            ("useful_flops", 2e9),
            ("dense_flops", 4e9),
            ("bytes_moved", 1e8),
            ("metadata_overhead", 0.0625),
        ],
        plan(vec![op(512, 512, 512)], KernelPath::Sparse),
    )
}

#[test]
fn issue_6_cpu_class_follows_the_measured_ridge_with_its_numbers() {
    let s = slice("s", vec![]);
    // Ridge 400/10 = 40 FLOP/B > 20: memory-bandwidth bound; the roofs allow 10·20 = 200.
    let d = diagnose(&s, &cpu_ev(), Some(&roofs(400.0, 10.0)));
    assert_eq!(d.class, Some(Bottleneck::MemoryBandwidth), "{}", d.rule);
    let r = d.roofline.as_ref().unwrap();
    assert!((r.intensity_flop_per_byte - 20.0).abs() < 1e-12);
    assert!((r.ridge_flop_per_byte - 40.0).abs() < 1e-12);
    assert!((r.achieved_gflops_useful - 100.0).abs() < 1e-9);
    assert!((r.achieved_gflops_dense_equivalent - 200.0).abs() < 1e-9);
    assert!((r.attainable_gflops - 200.0).abs() < 1e-9);
    assert!((r.share_of_attainable - 0.5).abs() < 1e-12);
    assert_eq!(r.machine, "cpu");
    assert!(
        d.rule.contains("intensity 20.00 FLOP/B < ridge 40.00 FLOP/B"),
        "{}",
        d.rule
    );
    assert!(d.rule.contains("50.0% of the 200.0"), "{}", d.rule);
    // Ridge 100/10 = 10 ≤ 20: compute bound.
    let d = diagnose(&s, &cpu_ev(), Some(&roofs(100.0, 10.0)));
    assert_eq!(d.class, Some(Bottleneck::Compute), "{}", d.rule);
    assert!(d.rule.contains("≥ ridge 10.00"), "{}", d.rule);
}

#[test]
fn issue_20_a_bf16_slice_is_placed_against_the_bf16_roof() {
    let mut r = roofs(100.0, 10.0);
    r.precision_peaks.push(crate::ingress::PrecisionPeak {
        precision: crate::domain::Precision::Bf16,
        peak_gops: 400.0,
        instruction: "vdpbf16ps".into(),
    });
    // fp32: ridge 100/10 = 10 ≤ 20 FLOP/B, compute bound on the FMA roof.
    let d = diagnose(&slice("s", vec![]), &cpu_ev(), Some(&r));
    assert_eq!(d.class, Some(Bottleneck::Compute), "{}", d.rule);
    assert!(d.roofline.unwrap().roofs_source.contains("f32 FMA peak"));
    // bf16: ridge 400/10 = 40 > 20, memory bound on its own roof, which it names.
    let mut s = slice("s", vec![]);
    s.precision = crate::domain::Precision::Bf16;
    let d = diagnose(&s, &cpu_ev(), Some(&r));
    assert_eq!(d.class, Some(Bottleneck::MemoryBandwidth), "{}", d.rule);
    let point = d.roofline.unwrap();
    assert_eq!(point.peak_gflops, 400.0);
    assert!(
        point.roofs_source.contains("bf16 peak, vdpbf16ps"),
        "{}",
        point.roofs_source
    );
}

#[test]
fn issue_6_without_roofs_the_fixed_machine_balance_decides_and_says_so() {
    let d = diagnose(&slice("s", vec![]), &cpu_ev(), None);
    assert!(d.roofline.is_none());
    assert_eq!(d.class, Some(Bottleneck::Compute));
    assert!(d.rule.contains("no roofs measured"), "{}", d.rule);
}

#[test]
fn issue_6_metadata_class_quotes_the_overhead() {
    let mut ev = cpu_ev();
    ev.counters.insert(Metric::MetadataOverhead, 0.5);
    let d = diagnose(&slice("s", vec![]), &ev, Some(&roofs(100.0, 10.0)));
    assert_eq!(d.class, Some(Bottleneck::Metadata));
    assert!(d.rule.contains("0.500 > 0.25"), "{}", d.rule);
}

fn two_op_plan() -> Plan {
    Plan {
        ops: vec![
            OpPlan {
                op: op(64, 512, 512),
                path: KernelPath::Sparse,
                reason: "2:4".into(),
            },
            OpPlan {
                op: op(64, 512, 510),
                path: KernelPath::DenseFallback,
                reason: "K not a multiple of 4".into(),
            },
        ],
        graph: vec![],
    }
}

fn cost(candidate_s: f64, comparator_s: f64, energy: Option<(f64, f64)>) -> OpCost {
    OpCost {
        op: "x".into(),
        candidate_s,
        comparator_s,
        passes: if energy.is_some() { 0 } else { 5 },
        candidate_energy_j: energy.map(|e| e.0),
        comparator_energy_j: energy.map(|e| e.1),
        fidelity: None,
        speedup_range: None,
    }
}

#[test]
fn issue_6_fallback_impact_is_the_fallen_back_share_and_the_sparse_ops_rate() {
    let mut ev = cpu_ev();
    ev.plan = two_op_plan();
    // Sparse op: 1 ms vs 2 ms dense (2x). Fallback op: 3 ms. Total 4 ms; 75% in the fallback;
    // at 2x it would take 1.5 ms, saving 1.5 of 4 ms = 37.5%.
    ev.op_costs = vec![cost(1e-3, 2e-3, None), cost(3e-3, 3e-3, None)];
    let d = diagnose(&slice("s", vec![]), &ev, Some(&roofs(100.0, 10.0)));
    assert_eq!(d.class, Some(Bottleneck::Fallback));
    let f = &d.fallback;
    assert_eq!(f.fallback_ops, vec!["g64x512x510".to_owned()]);
    assert!((f.latency_share.unwrap() - 0.75).abs() < 1e-12, "{f:?}");
    assert!((f.sparse_ops_speedup.unwrap() - 2.0).abs() < 1e-12, "{f:?}");
    assert!((f.latency_gain.unwrap() - 0.375).abs() < 1e-12, "{f:?}");
    assert_eq!(f.energy_share, None);
    assert!(f.note.contains("energy not measured on CPU"), "{}", f.note);
    assert_says(&d.rule, &["1 of 2 ops fell back", "75.0%"]);
}

#[test]
fn issue_6_simulated_fallback_impact_covers_energy() {
    let mut ev = cpu_ev();
    ev.plan = two_op_plan();
    ev.op_costs = vec![
        cost(1e-3, 2e-3, Some((1.0, 3.0))),
        cost(3e-3, 3e-3, Some((3.0, 3.0))),
    ];
    let mut s = slice("s", vec![]);
    s.backend = sim_backend();
    let d = diagnose(&s, &ev, None);
    let f = &d.fallback;
    // Energy: 3 of 4 J in the fallback; at the sparse op's 3x ratio it would spend 1 J.
    assert!((f.energy_share.unwrap() - 0.75).abs() < 1e-12, "{f:?}");
    assert!((f.energy_gain.unwrap() - 0.5).abs() < 1e-12, "{f:?}");
    assert!(f.note.contains("accelerator model"), "{}", f.note);
}

#[test]
fn issue_6_no_gain_is_guessed_without_a_sparse_op_to_learn_from() {
    let mut ev = cpu_ev();
    ev.plan = plan(vec![op(64, 512, 510)], KernelPath::DenseFallback);
    ev.op_costs = vec![cost(3e-3, 3e-3, None)];
    let d = diagnose(&slice("s", vec![]), &ev, None);
    assert_eq!(d.fallback.latency_share, Some(1.0));
    assert_eq!(d.fallback.latency_gain, None);
    assert!(
        d.fallback.note.contains("no op of this slice ran sparse"),
        "{}",
        d.fallback.note
    );
}

#[test]
fn issue_6_sim_roofs_come_from_the_preset_counters() {
    let mut ev = cpu_ev();
    ev.metrics.clear();
    ev.counters.insert(Metric::Latency, 0.02);
    ev.counters.insert(Counter::RoofPeakGflops, 1000.0);
    ev.counters.insert(Counter::RoofBandwidthGbps, 100.0);
    ev.counters.insert(Counter::SimTime(Bottleneck::Compute), 0.015);
    ev.counters
        .insert(Counter::SimTime(Bottleneck::MemoryBandwidth), 0.005);
    let mut s = slice("s", vec![]);
    s.backend = sim_backend();
    let d = diagnose(&s, &ev, Some(&roofs(1.0, 1.0)));
    let r = d.roofline.unwrap();
    assert_eq!((r.peak_gflops, r.bandwidth_gbps), (1000.0, 100.0));
    assert_eq!(d.class, Some(Bottleneck::Compute));
    assert_eq!(
        d.rule,
        "simulated time by class: compute 75.0%, memory_bandwidth 25.0%"
    );
}

#[test]
fn issue_6_assessment_carries_a_diagnosis_per_slice_and_uses_its_class() {
    let ev = evidence(vec![cpu_ev()]);
    let slices = vec![slice("s", vec![])];
    let d = diagnose_all(&slices, &ev.slices, None);
    assert_eq!(d.len(), 1);
    let a = super::assess(&slices, &ev, &Default::default());
    assert_eq!(a.diagnoses, d);
}

/// A simulated slice's backend, on a built-in preset.
fn sim_backend() -> crate::ingress::SliceBackend {
    let preset = crate::sim::Preset::resolve(crate::sim::preset::BUILTIN[0].0).expect("built-in preset");
    crate::ingress::SliceBackend::Sim(Box::new(preset))
}
