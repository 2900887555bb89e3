//! The bottleneck class of a slice: a cheap, explainable heuristic from the plan and the
//! counters, not a profiler. It answers the memo's question "where would a fix go?".

use crate::domain::Counter;
use crate::domain::verdict::Bottleneck;
use crate::execute::SliceEvidence;

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

/// For a `sim` slice: each class's share of the simulated time, as the accelerator model
/// classified each op (its roofline, occupancy and throttling, not the CPU ridge point
/// above), largest first; ties keep vocabulary order. Empty for a CPU slice.
pub fn simulated_shares(ev: &SliceEvidence) -> Vec<(Bottleneck, f64)> {
    let mut times: Vec<(Bottleneck, f64)> = Bottleneck::ALL
        .iter()
        .filter_map(|&class| ev.counters.value(Counter::SimTime(class)).map(|t| (class, t)))
        .filter(|(_, t)| *t > 0.0)
        .collect();
    let total: f64 = times.iter().map(|(_, t)| t).sum();
    times.iter_mut().for_each(|(_, t)| *t /= total);
    // A stable sort keeps vocabulary order among equal shares.
    times.sort_by(|a, b| b.1.total_cmp(&a.1));
    times
}
