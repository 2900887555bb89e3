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

/// Classify where a slice spends its time without measured roofs: the rule of
/// [`super::diagnosis::diagnose`] (fallback, the simulator's own class, metadata, then the
/// dense f32 arithmetic intensity `Σ 2·M·N·K / Σ 4·(M·K + N·K + M·N)` against
/// [`MACHINE_BALANCE_FLOP_PER_BYTE`]). The gate itself uses the diagnosis, which places CPU
/// slices against the roofs measured at gate time.
///
/// `None` for a slice with no ops.
pub fn classify(ev: &SliceEvidence) -> Option<Bottleneck> {
    super::diagnosis::class_without_roofs(ev)
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

/// For a `sim` slice: each class's share of the simulated time, as the accelerator model
/// classified each op (its roofline, occupancy and throttling, not the CPU ridge point
/// above), largest first; ties keep vocabulary order. Empty for a CPU slice.
pub fn simulated_shares(ev: &SliceEvidence) -> Vec<(Bottleneck, f64)> {
    let mut times: Vec<(Bottleneck, f64)> = SIM_CLASSES
        .iter()
        .filter_map(|&(class, key)| ev.counters.get(key).map(|&t| (class, t)))
        .filter(|(_, t)| *t > 0.0)
        .collect();
    let total: f64 = times.iter().map(|(_, t)| t).sum();
    times.iter_mut().for_each(|(_, t)| *t /= total);
    // A stable sort keeps vocabulary order among equal shares.
    times.sort_by(|a, b| b.1.total_cmp(&a.1));
    times
}

/// The counter name under which the simulator records time spent bound by `class`.
pub fn sim_time_counter(class: Bottleneck) -> &'static str {
    SIM_CLASSES
        .iter()
        .find(|(c, _)| *c == class)
        .map_or("sim_time_compute_s", |(_, k)| k)
}
