//! Which instruction mixes keep both FMA pipes busy on this CPU: FMA chains alone, FMA + an
//! L1 load per FMA (the token-vectorised sparse loops), FMA + a broadcast load, and FMA + a
//! `vpermilps` per FMA (the 2:4 feature-lane loop's in-register selection). Single thread,
//! registers only apart from a 4 KiB buffer; best of several trials. Issue 3 uses the ratios
//! (FMA + permute ÷ FMA alone) to bound what a 2:4 kernel can gain over dense.
//!
//! `cargo run --release --example port_mix`

#![allow(clippy::needless_range_loop)]

use std::time::Instant;

const ITERS: usize = 10_000_000;
const CHAINS: usize = 12;
const TRIALS: usize = 5;

fn main() {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        let buf = vec![0.5f32; 64 * 16 + 256];
        let mut best = [0.0f64; 4];
        for _ in 0..TRIALS {
            for (mix, b) in best.iter_mut().enumerate() {
                let start = Instant::now();
                // SAFETY: AVX-512F was detected; every load lies inside `buf` (see `run`).
                let sink = unsafe { avx512::run(mix, &buf) };
                std::hint::black_box(sink);
                let rate = (ITERS * CHAINS) as f64 / start.elapsed().as_secs_f64() / 1e9;
                *b = b.max(rate);
            }
        }
        println!("zmm FMAs per ns, 1 thread (best of {TRIALS}):");
        for (name, rate) in [
            "FMA alone",
            "FMA + load",
            "FMA + broadcast load",
            "FMA + vpermilps",
        ]
        .iter()
        .zip(best)
        {
            println!("  {name:<22} {rate:6.2}  ({:.2} of FMA alone)", rate / best[0]);
        }
        return;
    }
    println!("needs AVX-512F");
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{CHAINS, ITERS};
    use std::arch::x86_64::*;

    /// Runs mix `mix` (0: FMA, 1: + load, 2: + broadcast load, 3: + permute).
    ///
    /// # Safety
    /// AVX-512F; `buf` holds at least 64·16 + 256 floats.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn run(mix: usize, buf: &[f32]) -> f32 {
        assert!(buf.len() >= 64 * 16 + 256);
        let mut acc = [_mm512_set1_ps(1.0); CHAINS];
        let w = _mm512_set1_ps(0.999);
        let mut xb = _mm512_set1_ps(0.001);
        let sel = [0, 1, 2, 3].map(|i| _mm512_set1_epi32(i));
        let p = buf.as_ptr();
        for it in 0..ITERS {
            let o = (it & 63) * 16;
            for i in 0..CHAINS {
                let x = match mix {
                    // SAFETY: `o + 16·7 + 16 <= 64·16 + 256`.
                    1 => unsafe { _mm512_loadu_ps(p.add(o + 16 * (i % 8))) },
                    // SAFETY: `o + i < buf.len()`.
                    2 => _mm512_set1_ps(unsafe { *p.add(o + i) }),
                    3 => _mm512_permutevar_ps(xb, sel[i % 4]),
                    _ => xb,
                };
                acc[i] = _mm512_fmadd_ps(w, x, acc[i]);
            }
            xb = std::hint::black_box(xb);
        }
        let mut s = _mm512_setzero_ps();
        for a in acc {
            s = _mm512_add_ps(s, a);
        }
        _mm512_reduce_add_ps(s)
    }
}
