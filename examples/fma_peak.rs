//! Measure this machine's f32 FMA peak: every thread runs a loop of independent FMAs on
//! registers only (no memory traffic), 16 accumulator chains so the FMA latency is covered
//! on two pipes, with the widest vectors the CPU has. Peak = FLOPs (2 per lane per FMA) over
//! the wall time of the slowest thread; best of several trials.
//!
//! `cargo run --release --example fma_peak -- [threads]` (default: every logical CPU).

use std::time::Instant;

const ITERS: u64 = 50_000_000;
const CHAINS: usize = 16;

fn main() {
    let threads = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let (lanes, isa) = lanes();
    let mut best = 0.0f64;
    for _ in 0..5 {
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
        let mut acc = [_mm512_set1_ps(1.0); CHAINS];
        for _ in 0..ITERS {
            for a in &mut acc {
                *a = _mm512_fmadd_ps(*a, m, c);
            }
        }
        acc.iter().map(|&a| _mm512_reduce_add_ps(a)).sum()
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
