//! This machine's roofline roofs, measured at gate time (issue 6): the peak f32 FMA rate,
//! the bf16 and int8 dot-product peaks where the CPU has those instructions (issue 20), and
//! the memory bandwidth of a STREAM-like triad, with the gate's worker threads.
//!
//! Why measure instead of reading a spec sheet: CPU slices run on whatever machine CI gives
//! them (often a shared VM with a few cores of a large part), so only a measurement says what
//! *this* run could have reached. Both loops are short (about 0.1–0.2 s together) and take the
//! best of several trials, because on a shared machine the roof is what a trial gets when it
//! has the cores to itself. The numbers vary run to run, so they are recorded in the
//! environment, never in the lock.

use crate::domain::Precision;
use crate::ingress::MachineRoofs;
use crate::ingress::PrecisionPeak;
use sparsegate_kernels::isa::{Form, IsaPath, Operands, isa_path};
pub use sparsegate_kernels::roofs::fma_peak;
use sparsegate_kernels::roofs::{DotPeak, dot_peak, last_level_cache_bytes, triad_bandwidth};
use std::time::Instant;

/// FMA trials; the best counts.
const FMA_TRIALS: usize = 6;
/// Triad buffer bytes (all three arrays): at least this much…
const TRIAD_MIN_BYTES: u64 = 64 << 20;
/// …and at least this many times the last-level cache, so no pass is served from cache…
const TRIAD_LLC_FACTOR: u64 = 4;
/// …but never more than this, to bound the measurement's time and memory.
const TRIAD_MAX_BYTES: u64 = 256 << 20;

/// Measure both roofs with `threads` worker threads.
pub fn measure_roofs(threads: usize) -> MachineRoofs {
    let threads = threads.max(1);
    let start = Instant::now();
    let (peak_gflops, isa) = fma_peak(threads, FMA_TRIALS);
    // bf16 and int8 have roofs of their own where their dense comparators run on AMX tiles
    // or the AVX-512 dot products, f16 where it runs on the bf16 tiles (three products each);
    // kernels that widen in registers multiply on the f32 FMA, and that is their roof.
    let bf16_widens = matches!(
        isa_path(Operands::Bf16, Form::Dense),
        IsaPath::Avx512Bf16Widen | IsaPath::WidenF32
    );
    let precision_peaks = [
        (Precision::Bf16, Operands::Bf16),
        (Precision::Fp16, Operands::F16),
        (Precision::Int8, Operands::I8),
    ]
    .into_iter()
    .filter(|(p, _)| *p != Precision::Bf16 || !bf16_widens)
    .filter_map(|(p, operands)| Some((p, DotPeak::for_comparator(operands)?)))
    .filter_map(|(precision, kind)| {
        dot_peak(kind, threads, FMA_TRIALS).map(|(peak_gops, instruction)| PrecisionPeak {
            precision,
            peak_gops,
            instruction: instruction.to_owned(),
        })
    })
    .collect();
    let llc = last_level_cache_bytes().unwrap_or(32 << 20);
    let triad_bytes = (llc * TRIAD_LLC_FACTOR).clamp(TRIAD_MIN_BYTES, TRIAD_MAX_BYTES);
    let (bandwidth_gbps, triad_bytes) = triad_bandwidth(threads, triad_bytes);
    MachineRoofs {
        peak_gflops,
        bandwidth_gbps,
        isa: isa.to_owned(),
        threads,
        triad_bytes,
        measured_s: start.elapsed().as_secs_f64(),
        precision_peaks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 6: both roofs come back positive and finite, the triad buffer is beyond the
    /// minimum, and the ridge point follows from them. (No timed assertion: the values are
    /// whatever this machine gives.)
    #[test]
    fn issue_6_roofs_are_measured() {
        let r = measure_roofs(1);
        assert!(r.peak_gflops.is_finite() && r.peak_gflops > 0.0, "{r:?}");
        assert!(r.bandwidth_gbps.is_finite() && r.bandwidth_gbps > 0.0, "{r:?}");
        assert!(r.triad_bytes >= TRIAD_MIN_BYTES - 12, "{r:?}");
        assert_eq!(r.threads, 1);
        assert!((r.ridge_flop_per_byte() - r.peak_gflops / r.bandwidth_gbps).abs() < 1e-12);
    }
}
