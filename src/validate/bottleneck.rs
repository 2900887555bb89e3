//! The bottleneck class of a slice: a cheap, explainable heuristic from the plan and the
//! counters, not a profiler. It answers the memo's question "where would a fix go?".

use crate::execute::SliceEvidence;
use crate::verdict::Bottleneck;

/// Machine balance in FLOP per byte of DRAM traffic, the ridge point of the roofline.
///
/// Why 10: current server CPUs sustain roughly 1–3 TFLOP/s of f32 FMA against 100–300 GB/s
/// of memory bandwidth, i.e. about 5–15 FLOP/byte, and this build's kernels are CPU
/// kernels. A workload whose arithmetic intensity is below the ridge cannot keep the ALUs
/// busy however good its kernel is, so it is memory-bandwidth bound.
pub const MACHINE_BALANCE_FLOP_PER_BYTE: f64 = 10.0;

/// Metadata overhead (metadata bytes / value bytes) above which sparse index handling is
/// named as the bottleneck: at 25% the index stream is a sizeable fraction of the value
/// stream it is meant to shrink (2:4 with 2-bit indices on f32 values is 6.25%).
pub const METADATA_OVERHEAD_LIMIT: f64 = 0.25;

/// Classify where a slice spends its time, in order of what explains it most directly:
/// 1. `fallback` when any op took the dense fallback (the sparse speedup was never there),
/// 2. `metadata` when the metadata overhead exceeds [`METADATA_OVERHEAD_LIMIT`],
/// 3. else `compute` or `memory_bandwidth` by the workload's dense arithmetic intensity,
///    `Σ 2·M·N·K / Σ 4·(M·K + N·K + M·N)` (f32 operands read once, output written once),
///    against [`MACHINE_BALANCE_FLOP_PER_BYTE`].
///
/// `None` for a slice with no ops.
pub fn classify(ev: &SliceEvidence) -> Option<Bottleneck> {
    let fallback = ev
        .counters
        .get("fallback_rate")
        .copied()
        .unwrap_or(0.0)
        .max(ev.plan.fallback_rate());
    if fallback > 0.0 {
        return Some(Bottleneck::Fallback);
    }
    if let Some(class) = simulated(ev) {
        return Some(class);
    }
    if ev
        .counters
        .get("metadata_overhead")
        .is_some_and(|&m| m > METADATA_OVERHEAD_LIMIT)
    {
        return Some(Bottleneck::Metadata);
    }
    let (flops, bytes) = ev.plan.ops.iter().fold((0.0, 0.0), |(f, b), p| {
        let (m, n, k) = (p.op.m as f64, p.op.n as f64, p.op.k as f64);
        (f + p.op.dense_flops(), b + 4.0 * (m * k + n * k + m * n))
    });
    if bytes <= 0.0 {
        return None;
    }
    Some(if flops / bytes >= MACHINE_BALANCE_FLOP_PER_BYTE {
        Bottleneck::Compute
    } else {
        Bottleneck::MemoryBandwidth
    })
}

/// The simulator's own classes, by the counter `sim_time_<class>_s` it records for each.
const SIM_CLASSES: &[(Bottleneck, &str)] = &[
    (Bottleneck::Compute, "sim_time_compute_s"),
    (Bottleneck::MemoryBandwidth, "sim_time_memory_bandwidth_s"),
    (Bottleneck::Occupancy, "sim_time_occupancy_s"),
    (Bottleneck::Metadata, "sim_time_metadata_s"),
    (Bottleneck::Fallback, "sim_time_fallback_s"),
    (Bottleneck::Synchronization, "sim_time_synchronization_s"),
    (Bottleneck::Thermal, "sim_time_thermal_s"),
];

/// For a `sim` slice: the class that holds most of the simulated time, as the accelerator
/// model classified each op (its roofline, occupancy and throttling, not the CPU ridge
/// point above). Ties go to the earlier class in vocabulary order.
fn simulated(ev: &SliceEvidence) -> Option<Bottleneck> {
    let mut best: Option<(Bottleneck, f64)> = None;
    for &(class, key) in SIM_CLASSES {
        if let Some(&t) = ev.counters.get(key)
            && t > 0.0
            && best.is_none_or(|(_, b)| t > b)
        {
            best = Some((class, t));
        }
    }
    best.map(|(c, _)| c)
}

/// The counter name under which the simulator records time spent bound by `class`.
pub fn sim_time_counter(class: Bottleneck) -> &'static str {
    SIM_CLASSES
        .iter()
        .find(|(c, _)| *c == class)
        .map_or("sim_time_compute_s", |(_, k)| k)
}
