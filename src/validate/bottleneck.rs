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
