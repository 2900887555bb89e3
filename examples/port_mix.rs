//! Which instruction mixes keep both FMA pipes busy on this CPU: FMA chains alone, FMA + an
//! L1 load per FMA (the token-vectorised sparse loops), FMA + a broadcast load, and FMA + a
//! variable-control permute per FMA (`vpermilps` is the 2:4 feature-lane loop's selection;
//! `vpermps`, `vpshufb` and `vpermt2ps` are the alternatives). Single thread,
//! registers only apart from a 4 KiB buffer; best of several trials. Issue 3 uses the ratios
//! (FMA + permute ÷ FMA alone) to bound what a 2:4 kernel can gain over dense.
//!
//! `cargo run --release --example port_mix`

#![allow(clippy::needless_range_loop)]
// A SIMD experiment outside the kernels crate: the package denies unsafe, this opts out.
#![allow(unsafe_code)]

use std::time::Instant;

const ITERS: usize = 2_000_000;
const CHAINS: usize = 12;
const TRIALS: usize = 40;

fn main() {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw") {
        let buf = vec![0.5f32; 64 * 16 + 256 + 16];
        let mut best = [0.0f64; 7];
        for _ in 0..TRIALS {
            for (mix, b) in best.iter_mut().enumerate() {
                let start = Instant::now();
                // SAFETY: AVX-512F and BW were detected; every load lies inside `buf` (see `run`).
                let sink = unsafe {
                    match mix {
                        0 => avx512::run::<0>(&buf),
                        1 => avx512::run::<1>(&buf),
                        2 => avx512::run::<2>(&buf),
                        3 => avx512::run::<3>(&buf),
                        4 => avx512::run::<4>(&buf),
                        5 => avx512::run::<5>(&buf),
                        _ => avx512::run::<6>(&buf),
                    }
                };
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
            "FMA + vpermps",
            "FMA + vpshufb",
            "FMA + vpermt2ps",
        ]
        .iter()
        .zip(best)
        {
            println!("  {name:<22} {rate:6.2}  ({:.2} of FMA alone)", rate / best[0]);
        }
        return;
    }
    println!("needs AVX-512F and BW");
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{CHAINS, ITERS};
    use std::arch::x86_64::*;

    /// Runs mix `MIX` (0: FMA, 1: + load, 2: + broadcast load, 3–6: + a permute).
    ///
    /// # Safety
    /// AVX-512F and BW; `buf` holds at least 64·16 + 256 floats.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn run<const MIX: usize>(buf: &[f32]) -> f32 {
        assert!(buf.len() >= 64 * 16 + 256 + 16);
        let mut acc = [_mm512_set1_ps(1.0); CHAINS];
        let w = _mm512_set1_ps(0.999);
        let mut xb = [_mm512_set1_ps(0.001); 4];
        let mut sel = [0, 1, 2].map(|i| _mm512_set1_epi32(i));
        for c in &mut sel {
            // SAFETY: as below; the selectors become run-time values (variable-control permutes).
            unsafe { std::arch::asm!("/* {0} */", inout(zmm_reg) * c, options(pure, nomem, nostack)) };
        }
        // Start on a cache line: a 64-byte load that straddles two lines costs two.
        let p = buf.as_ptr().wrapping_add(buf.as_ptr().align_offset(64));
        for it in 0..ITERS {
            // Hide the values from the optimiser each iteration (no instruction is emitted), so
            // the 12 permutes below are distinct and none is hoisted or merged.
            for x in &mut xb {
                // SAFETY: an empty asm block that only claims to change a register.
                unsafe { std::arch::asm!("/* {0} */", inout(zmm_reg) * x, options(pure, nomem, nostack)) };
            }
            let o = (it & 63) * 16;
            for i in 0..CHAINS {
                let x = match MIX {
                    // SAFETY: `o + 16·7 + 16 <= 64·16 + 256`.
                    1 => unsafe { _mm512_loadu_ps(p.add(o + 16 * (i % 8))) },
                    // SAFETY: `o + i < buf.len()`.
                    2 => _mm512_set1_ps(unsafe { *p.add(o + i) }),
                    3 => _mm512_permutevar_ps(xb[i % 4], sel[i / 4]),
                    4 => _mm512_permutexvar_ps(sel[i / 4], xb[i % 4]),
                    5 => _mm512_castsi512_ps(_mm512_shuffle_epi8(_mm512_castps_si512(xb[i % 4]), sel[i / 4])),
                    6 => _mm512_permutex2var_ps(xb[i % 4], sel[i / 4], xb[(i + 1) % 4]),
                    _ => xb[i % 4],
                };
                acc[i] = _mm512_fmadd_ps(w, x, acc[i]);
            }
        }
        let mut s = _mm512_setzero_ps();
        for a in acc {
            s = _mm512_add_ps(s, a);
        }
        _mm512_reduce_add_ps(s)
    }
}
