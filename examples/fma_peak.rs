//! Measure this machine's f32 FMA peak: every thread runs a loop of independent FMAs on
//! registers only (no memory traffic), 16 accumulator chains so the FMA latency is covered
//! on two pipes, with the widest vectors the CPU has. Peak = FLOPs (2 per lane per FMA) over
//! the wall time of the slowest thread; best of several trials.
//!
//! `cargo run --release --example fma_peak -- [threads]` (default: every logical CPU).

use std::time::Instant;

const ITERS: u64 = 10_000_000;
const CHAINS: usize = 16;
/// Best of many short trials: on a shared machine the peak is what a trial gets when it has
/// the cores to itself.
const TRIALS: usize = 40;

fn main() {
    let threads = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let (lanes, isa) = lanes();
    let mut best = 0.0f64;
    for _ in 0..TRIALS {
        let start = Instant::now();
        let sink: f32 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|_| s.spawn(run)).collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        let secs = start.elapsed().as_secs_f64();
        let flops = (threads as u64 * ITERS * CHAINS as u64 * lanes as u64 * 2) as f64;
        best = best.max(flops / secs / 1e9);
        std::hint::black_box(sink);
    }
    println!(
        "{isa}, {threads} thread(s): FMA peak {best:.1} GFLOP/s ({:.1} per thread)",
        best / threads as f64
    );
}

fn lanes() -> (usize, &'static str) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return (16, "avx512f");
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            return (8, "avx2+fma");
        }
    }
    (1, "scalar")
}

fn run() -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F was detected just above.
            return unsafe { x86::avx512() };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: AVX2 and FMA were detected just above.
            return unsafe { x86::avx2() };
        }
    }
    let mut acc = [1.0f32; CHAINS];
    for _ in 0..ITERS {
        for a in &mut acc {
            *a = a.mul_add(0.999_999, 1e-7);
        }
    }
    acc.iter().sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{CHAINS, ITERS};
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn avx512() -> f32 {
        let (m, c) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
        let one = _mm512_set1_ps(1.0);
        // Sixteen named accumulators, so they live in registers (an array may be kept in
        // memory, and then the loop measures store forwarding, not the FMA pipes).
        let (mut a0, mut a1, mut a2, mut a3, mut a4, mut a5, mut a6, mut a7) =
            (one, one, one, one, one, one, one, one);
        let (mut b0, mut b1, mut b2, mut b3, mut b4, mut b5, mut b6, mut b7) =
            (one, one, one, one, one, one, one, one);
        for _ in 0..ITERS {
            a0 = _mm512_fmadd_ps(a0, m, c);
            a1 = _mm512_fmadd_ps(a1, m, c);
            a2 = _mm512_fmadd_ps(a2, m, c);
            a3 = _mm512_fmadd_ps(a3, m, c);
            a4 = _mm512_fmadd_ps(a4, m, c);
            a5 = _mm512_fmadd_ps(a5, m, c);
            a6 = _mm512_fmadd_ps(a6, m, c);
            a7 = _mm512_fmadd_ps(a7, m, c);
            b0 = _mm512_fmadd_ps(b0, m, c);
            b1 = _mm512_fmadd_ps(b1, m, c);
            b2 = _mm512_fmadd_ps(b2, m, c);
            b3 = _mm512_fmadd_ps(b3, m, c);
            b4 = _mm512_fmadd_ps(b4, m, c);
            b5 = _mm512_fmadd_ps(b5, m, c);
            b6 = _mm512_fmadd_ps(b6, m, c);
            b7 = _mm512_fmadd_ps(b7, m, c);
        }
        let all = [a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7];
        debug_assert_eq!(all.len(), CHAINS);
        all.iter().map(|&a| _mm512_reduce_add_ps(a)).sum()
    }

    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn avx2() -> f32 {
        let (m, c) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
        let mut acc = [_mm256_set1_ps(1.0); CHAINS];
        for _ in 0..ITERS {
            for a in &mut acc {
                *a = _mm256_fmadd_ps(*a, m, c);
            }
        }
        let mut out = [0.0f32; 8];
        acc.iter().for_each(|&a| {
            // SAFETY: `out` holds 8 f32.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(a, _mm256_loadu_ps(out.as_ptr()))) }
        });
        out.iter().sum()
    }
}
