//! The ceiling of the 2:4 token-lane loop (`nm/token_lanes.rs`): one register tile (2 output
//! rows × 8 zmm of tokens) swept over many rows' kept weights against a 32 KiB activation
//! tile that stays in L1, single thread, best of several trials. Nothing else intrudes (no
//! output traffic, no weights from L3), so the ratio to the FMA peak is what the loop itself
//! allows; issue 3 uses it to bound what the whole product can gain over dense (≈ 2 × this
//! ratio ÷ the dense kernel's fraction of peak).
//!
//! Two loops, side by side: the kernel's (a row's 8 index bytes of the block read as one
//! `u64` up front) and the first one (each index byte read where it is needed).
//!
//! `cargo run --release --example token_lane_tile`

// A SIMD experiment outside the kernels crate: the package denies unsafe, this opts out.
#![allow(unsafe_code)]

use sparsegate::execute::roofs::fma_peak;
use std::time::Instant;

/// K rows of the tile (one K block of the kernel) and tokens per row.
const K_BLOCK: usize = 64;
const WIDTH: usize = 128;
/// Output rows whose weights the tile is swept with.
const ROWS: usize = 1024;
const TRIALS: usize = 9;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

fn main() {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        let tile = vec![Line([0.5; 16]); K_BLOCK * WIDTH / 16];
        let values = vec![0.25f32; ROWS * K_BLOCK / 2];
        // Every 2:4 pattern, in a fixed pseudo-random order.
        let patterns = [0b0100u8, 0b1000, 0b1100, 0b1001, 0b1101, 0b1110];
        let idx: Vec<u8> = (0..ROWS * K_BLOCK / 8)
            .map(|i| patterns[i * 7 % 6] | patterns[(i * 5 + 3) % 6] << 4)
            .collect();
        let mut out = vec![Line([0.0; 16]); 2 * WIDTH / 16];
        let reps = 300;
        let mut best = [f64::MAX; 2];
        for _ in 0..TRIALS {
            for (loop_, best) in best.iter_mut().enumerate() {
                let start = Instant::now();
                for _ in 0..reps {
                    let (tile, out) = (tile.as_ptr().cast(), out.as_mut_ptr().cast());
                    // SAFETY: AVX-512F was detected; the buffers have the sizes `sweep` documents.
                    unsafe {
                        match loop_ {
                            0 => avx512::sweep::<true>(&values, &idx, tile, out),
                            _ => avx512::sweep::<false>(&values, &idx, tile, out),
                        }
                    }
                }
                *best = best.min(start.elapsed().as_secs_f64());
            }
        }
        std::hint::black_box(&out);
        let fmas = (reps * ROWS * K_BLOCK / 2 * WIDTH / 16) as f64;
        let (peak, _) = fma_peak(1, 40);
        println!("2:4 token-lane tile, 1 thread, FMA peak {peak:.1} GFLOP/s:");
        for (name, best) in ["kernel's loop", "first loop"].iter().zip(best) {
            let rate = fmas * 32.0 / best / 1e9;
            println!(
                "  {name:<14} {rate:6.1} GFLOP/s of useful work = {:.2} of the FMA peak",
                rate / peak
            );
        }
        return;
    }
    println!("needs AVX-512F");
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{K_BLOCK, ROWS, WIDTH};
    use std::arch::x86_64::*;

    /// Every row pair's 32 kept weights of the block against the tile, into `out` (2 rows):
    /// with `KERNEL`, the loop of `two_bit_block` in `nm/token_lanes.rs`; without, each
    /// index byte loaded where it is needed.
    ///
    /// # Safety
    /// AVX-512F; `values` holds `ROWS · K_BLOCK / 2` floats, `idx` `ROWS · K_BLOCK / 8` bytes;
    /// `tile` is 64-byte aligned with `K_BLOCK × WIDTH` floats; `out` 64-byte aligned with
    /// `2 × WIDTH` floats.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn sweep<const KERNEL: bool>(
        values: &[f32],
        idx: &[u8],
        tile: *const f32,
        out: *mut f32,
    ) {
        assert!(values.len() >= ROWS * K_BLOCK / 2 && idx.len() >= ROWS * K_BLOCK / 8);
        for pair in 0..ROWS / 2 {
            let mut acc = [[_mm512_setzero_ps(); 8]; 2];
            let bits: [u64; 2] = std::array::from_fn(|r| {
                let at = (2 * pair + r) * K_BLOCK / 8;
                u64::from_le_bytes(idx[at..at + 8].try_into().expect("8 index bytes"))
            });
            for j in 0..K_BLOCK / 8 {
                // SAFETY: K rows `8j .. 8j + 8` of the tile.
                let base = unsafe { tile.add(8 * j * WIDTH) };
                for (r, acc) in acc.iter_mut().enumerate() {
                    let row = 2 * pair + r;
                    let b = if KERNEL {
                        (bits[r] >> (8 * j)) as usize & 0xFF
                    } else {
                        usize::from(idx[row * K_BLOCK / 8 + j])
                    };
                    let w = &values[row * K_BLOCK / 2 + 4 * j..][..4];
                    for (t, k) in [b & 3, b >> 2 & 3, 4 + (b >> 4 & 3), 4 + (b >> 6)]
                        .into_iter()
                        .enumerate()
                    {
                        let wb = _mm512_set1_ps(w[t]);
                        // SAFETY: each 2-bit index is < 4, so the row is inside the tile.
                        let x = unsafe { base.add(k * WIDTH) };
                        for (v, a) in acc.iter_mut().enumerate() {
                            // SAFETY: columns `16v .. 16v + 16 <= WIDTH` of an aligned row.
                            *a = _mm512_fmadd_ps(wb, unsafe { _mm512_load_ps(x.add(16 * v)) }, *a);
                        }
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                for (v, a) in acc.iter().enumerate() {
                    // SAFETY: row `r < 2`, columns inside `WIDTH` of the aligned output.
                    unsafe { _mm512_store_ps(out.add(r * WIDTH + 16 * v), *a) };
                }
            }
        }
    }
}
