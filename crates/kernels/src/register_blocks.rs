//! The strip walker of every broadcast-and-FMA loop that vectorises along tokens: `R` output
//! rows × a strip of tokens, cut into register blocks of 8, 4, 2 and 1 vectors, each block's
//! `R × V` accumulators held in registers across all kept weights of a K block, so the output
//! is loaded and stored once per block.
//!
//! The loops differ only in how a block finds its kept weights and their activation rows (a
//! [`Body`]): the 2:4 loop decodes its index bytes inline (`nm/two_of_four.rs`) and the
//! decoded N:M microkernel reads precomputed offsets (`nm/microkernel.rs`); each held its own
//! copy of this walker before.
//!
//! Why a trait and not closures: the body is an `#[inline(always)]` generic method, so each
//! `(ISA, rows, body)` instantiation of [`avx512`] / [`avx2`] inlines the body's loop into the
//! block and into the entry point's instruction set (the same reasoning as `lanes.rs`).
//! Measured on a Zen 5 against the build before (one thread, 1024 × 1024 weights, three to
//! five alternated rounds, bit-identical outputs): 2:4 on AVX2 at 128 tokens 1.00–1.01× the
//! time, at 100 tokens (with decoded tails) 0.96–0.98×, 2:8 at 100 tokens 0.99×.
//!
//! Two loops of the same shape keep their own walker because on this walker they measured
//! slower, with the same instruction count and the same inner loop but different register
//! allocation around it: the any-pattern N:M loop (`nm/any_pattern.rs`: 2:128 on AVX2
//! 1.04–1.10× the time, 2:8 1.01–1.03×) and the CSR/BSR loop (`sparse_rows.rs`: CSR 10% on
//! AVX2 1.09×, BSR 8×8 on AVX2 1.09×, on AVX-512 1.06–1.11×).

use crate::lanes::Vector;
use std::arch::x86_64::{__m256, __m512};

/// What one register block computes: the products of every kept weight of the block added
/// into its accumulators.
pub(crate) trait Body<const R: usize>: Copy {
    /// `acc[r][v] += Σ w_r · x[row, LANES·v ..][..LANES]` over the body's kept weights of row
    /// `r`, where `xp` points at the block's first token of activation row 0, rows `cols`
    /// floats apart (how a body names a row, by index or by offset, is its own).
    ///
    /// # Safety
    /// `V`'s instruction set; every activation the body reads, `LANES·N` floats from its row's
    /// start, is readable: what the caller of [`avx512`] / [`avx2`] promised for the strip.
    unsafe fn accumulate<V: Vector, const N: usize>(self, acc: &mut [[V; N]; R], xp: *const f32, cols: usize);
}

/// One entry point per instruction set: [`strip`] on that ISA's vector type, compiled with
/// its features enabled so the walker and the body inline into it.
macro_rules! entry_point {
    ($(#[$doc:meta])* $name:ident, $features:literal, $vector:ty) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name<const R: usize, B: Body<R>>(
            body: B,
            (xp, cols): (*const f32, usize),
            y: [*mut f32; R],
            width: usize,
            accumulate: bool,
        ) -> usize {
            // SAFETY: the caller's contract; the vector type's features are enabled here.
            unsafe { strip::<$vector, R, B>(body, (xp, cols), y, width, accumulate) }
        }
    };
}

entry_point!(
    /// [`strip`] on zmm registers.
    ///
    /// # Safety
    /// AVX-512F; as [`strip`].
    avx512,
    "avx512f",
    __m512
);

entry_point!(
    /// [`strip`] on ymm registers.
    ///
    /// # Safety
    /// AVX2 and FMA; as [`strip`].
    avx2,
    "avx2,fma",
    __m256
);

/// The columns `0 .. width` of the `R` strips in blocks of `8, 4, 2, 1` vectors (`4, 2, 1`
/// where `R · 8` accumulators would take more than half the ISA's registers: spilling them
/// would cost more than the shorter blocks); overwrites `y` unless `accumulate`. Returns how
/// many columns it did, a multiple of the vector width; the caller finishes the rest.
///
/// # Safety
/// `V`'s instruction set (inlined into the `#[target_feature]` entry points above); `xp`
/// points at the strip's first token of activation row 0, rows `cols` apart, and columns
/// `0 .. width` of every row the body reads are readable; each `y[r]` is writable for `width`
/// elements and they do not overlap.
#[inline(always)]
unsafe fn strip<V: Vector, const R: usize, B: Body<R>>(
    body: B,
    (xp, cols): (*const f32, usize),
    y: [*mut f32; R],
    width: usize,
    accumulate: bool,
) -> usize {
    let top = const { if R * 8 <= V::REGISTERS / 2 { 8 } else { 4 } };
    let mut col = 0;
    while width - col >= top * V::LANES {
        let (xs, ys) = (xp.wrapping_add(col), y.map(|p| p.wrapping_add(col)));
        // SAFETY: the block covers columns `col .. col + LANES·top <= width` (the loop
        // condition) of the caller's strips; the ISA is the caller's.
        unsafe {
            if top == 8 {
                block::<V, R, 8, B>(body, (xs, cols), ys, accumulate);
            } else {
                block::<V, R, 4, B>(body, (xs, cols), ys, accumulate);
            }
        }
        col += top * V::LANES;
    }
    for v in [4, 2, 1] {
        if v < top && width - col >= v * V::LANES {
            let (xs, ys) = (xp.wrapping_add(col), y.map(|p| p.wrapping_add(col)));
            // SAFETY: as above, with `col + LANES·v <= width` (the condition).
            unsafe {
                match v {
                    4 => block::<V, R, 4, B>(body, (xs, cols), ys, accumulate),
                    2 => block::<V, R, 2, B>(body, (xs, cols), ys, accumulate),
                    _ => block::<V, R, 1, B>(body, (xs, cols), ys, accumulate),
                }
            }
            col += v * V::LANES;
        }
    }
    col
}

/// `R × N` accumulators held in registers across the body's kept weights.
///
/// # Safety
/// A register block's `R × N` accumulators: the block of `y` when `accumulate`, else zero.
///
/// # Safety
/// `V`'s instruction set; each `y[r]` has `LANES·N` readable floats.
#[inline(always)]
pub(crate) unsafe fn load_block<V: Vector, const R: usize, const N: usize>(
    y: [*mut f32; R],
    accumulate: bool,
) -> [[V; N]; R] {
    // SAFETY: `V`'s instruction set (contract).
    let mut acc: [[V; N]; R] = [[unsafe { V::zero() }; N]; R];
    if accumulate {
        for (row, y) in acc.iter_mut().zip(y) {
            for (v, a) in row.iter_mut().enumerate() {
                // SAFETY: inside the caller's block of `y`.
                *a = unsafe { V::load(y.add(V::LANES * v)) };
            }
        }
    }
    acc
}

/// Store a register block's accumulators into the block of `y`.
///
/// # Safety
/// `V`'s instruction set; each `y[r]` has `LANES·N` writable floats.
#[inline(always)]
pub(crate) unsafe fn store_block<V: Vector, const R: usize, const N: usize>(
    acc: &[[V; N]; R],
    y: [*mut f32; R],
) {
    for (row, y) in acc.iter().zip(y) {
        for (v, a) in row.iter().enumerate() {
            // SAFETY: inside the caller's block of `y`.
            unsafe { a.store(y.add(V::LANES * v)) };
        }
    }
}

/// As [`strip`], for columns `0 .. LANES·N` of `xp`'s rows and of every `y[r]`.
#[inline(always)]
unsafe fn block<V: Vector, const R: usize, const N: usize, B: Body<R>>(
    body: B,
    (xp, cols): (*const f32, usize),
    y: [*mut f32; R],
    accumulate: bool,
) {
    // SAFETY: `V`'s instruction set and the block of `y`: the caller's contract.
    let mut acc: [[V; N]; R] = unsafe { load_block(y, accumulate) };
    // SAFETY: the ISA and the activations' bounds are this function's contract, which is the
    // body's.
    unsafe { body.accumulate::<V, N>(&mut acc, xp, cols) };
    // SAFETY: as for the load.
    unsafe { store_block(&acc, y) };
}
