//! Measure this machine's f32 FMA peak with the same routine the gate uses for its roofline
//! (`sparsegate::execute::roofs::fma_peak`): every thread runs independent FMA chains on
//! registers only, with the widest vectors the CPU has; peak = FLOPs over the wall time,
//! best of many trials (on a shared machine the peak is what a trial gets when it has the
//! cores to itself).
//!
//! It also prints the peaks of the bf16 and int8 dot-product instructions where the CPU has
//! them, as ratios to the FMA's: where `vdpbf16ps` is no faster than f32 FMA, widening bf16
//! in registers is the faster dense path (issue 20).
//!
//! `cargo run --release --example fma_peak -- [threads]` (default: every logical CPU).

/// More trials than the gate takes (it keeps its measurement under a few tenths of a
/// second): a standalone peak measurement can afford to wait for a quiet moment.
const TRIALS: usize = 200;

fn main() {
    let threads = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let (best, isa) = sparsegate::execute::roofs::fma_peak(threads, TRIALS);
    println!(
        "{isa}, {threads} thread(s): FMA peak {best:.1} GFLOP/s ({:.1} per thread)",
        best / threads as f64
    );
    for (kind, label) in [
        (sparsegate_kernels::roofs::DotPeak::Bf16, "bf16"),
        (sparsegate_kernels::roofs::DotPeak::Int8, "int8"),
    ] {
        match sparsegate_kernels::roofs::dot_peak(kind, threads, TRIALS) {
            Some((peak, name)) => println!(
                "{label} {name}: {peak:.1} G(FL)OP/s, {:.2}x the FMA peak",
                peak / best
            ),
            None => println!("{label}: no dot-product instruction on this CPU"),
        }
    }
}
