//! The 2:4 fast path on AVX2: the microkernel loop with the packed indices decoded inline, for
//! one or two output rows at a time, reading the caller's row-major activations. On AVX-512 a
//! 2:4 product takes `token_lanes.rs` (the same loop on re-blocked weights and packed
//! activation tiles; its module doc says why that is faster) or `feature_lanes.rs` instead,
//! so the AVX-512 instantiation below is not reached by the product.
//!
//! One index byte covers two groups (8 rows of `x`) and four kept weights. Each 2-bit index
//! is `< 4 = m` whatever its value, so every decoded row stays inside its own group: the bound
//! of all loads follows from the K block alone, and no offsets buffer, maximum or per-weight
//! check is needed. Decoding is a shift, a mask and a multiply-add on integer ports, which run
//! beside the FMA and load ports instead of in a separate pass.
//!
//! With AVX-512 (32 registers) two output rows share one pass: 16 independent accumulator
//! chains instead of 8, which keeps both FMA pipes busy through load latency.

use super::microkernel::{Isa, RowBlock};
#[cfg(target_arch = "x86_64")]
use crate::lanes::Vector;
#[cfg(target_arch = "x86_64")]
use crate::register_blocks::{self, Body};

/// For each row `r`: `y_r[..w] (+)= Σ kept w · x[k, c0..c0+w]` over K rows `kb0..kb1` (whole
/// groups of 4, `kb0` a multiple of 8), where `w` is the largest multiple of the vector width
/// that fits the (equal-length) strips. Returns `w`; the caller finishes the remaining columns
/// with the generic path. `R` should not exceed [`Isa::rows_per_pass`] (registers spill beyond it).
///
/// Panics (before touching memory) if the K block or a strip is outside `x` (`k × cols`) or a
/// row's values or indices are short.
///
/// `#[inline]`: once the ISA loops became generic bodies the compiler stopped inlining this
/// dispatcher into its caller unasked, and 2:4 on AVX2 ran 3% slower (1.77 against 1.72 ms,
/// 1024 × 1024 weights, 128 tokens, one thread).
#[inline]
pub(crate) fn rows_strip<const R: usize>(
    isa: Isa,
    rows: &mut [RowBlock<'_>; R],
    x: &[f32],
    cols: usize,
    (kb0, kb1): (usize, usize),
    c0: usize,
    accumulate: bool,
) -> usize {
    let groups = (kb1 - kb0) / 4;
    let width = rows.first().map_or(0, |r| r.y.len());
    assert!(
        kb0 % 8 == 0 && (kb1 - kb0) % 4 == 0,
        "2:4 block must be whole groups from a byte boundary"
    );
    assert!(
        kb1 * cols <= x.len() && c0 + width <= cols,
        "2:4 block: outside x"
    );
    for r in rows.iter() {
        assert!(r.y.len() == width, "2:4 block: strips of different widths");
        assert!(
            r.values.len() >= groups * 2 && r.idx.len() >= kb0 / 8 + groups.div_ceil(2),
            "2:4 block: short row"
        );
    }
    let xp = x[kb0 * cols..].as_ptr().wrapping_add(c0);
    #[cfg(target_arch = "x86_64")]
    let body = TwoOfFour {
        values: rows.each_ref().map(|r| r.values),
        idx: rows.each_ref().map(|r| &r.idx[kb0 / 8..]),
        groups,
    };
    let y = rows.each_mut().map(|r| r.y.as_mut_ptr());
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F was detected; every row read is `kb0 + 8j + t < kb1` (t < 8, see the
        // module doc) and every column `< c0 + width <= cols`, inside `x` by the asserts; the
        // `y` pointers come from `R` distinct `&mut` strips of `width` elements.
        Isa::Avx512 => unsafe { register_blocks::avx512(body, (xp, cols), y, width, accumulate) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 and FMA were detected; bounds as above.
        Isa::Avx2Fma => unsafe { register_blocks::avx2(body, (xp, cols), y, width, accumulate) },
        Isa::Portable => 0,
    }
}

/// A block's kept weights for `R` rows: `groups` 2:4 groups of 4 activation rows, two values
/// per group and one index byte per two groups a row.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct TwoOfFour<'a, const R: usize> {
    values: [&'a [f32]; R],
    idx: [&'a [u8]; R],
    groups: usize,
}

#[cfg(target_arch = "x86_64")]
impl<const R: usize> Body<R> for TwoOfFour<'_, R> {
    /// Rows `kb0 .. kb0 + 4·groups` of the block (`xp` at row `kb0`), an index byte decoded
    /// into four rows per pair of groups.
    #[inline(always)]
    unsafe fn accumulate<V: Vector, const N: usize>(
        self,
        acc: &mut [[V; N]; R],
        xp: *const f32,
        cols: usize,
    ) {
        let (values, idx, groups) = (self.values, self.idx, self.groups);
        let pairs = groups / 2;
        for j in 0..pairs {
            // Rows `8j .. 8j + 8` of the block, all `< 4·groups`.
            let base = xp.wrapping_add(8 * j * cols);
            for r in 0..R {
                let b = usize::from(idx[r][j]);
                let w = &values[r][4 * j..4 * j + 4];
                // SAFETY: each row is `base + t·cols` with `t < 8` (module doc): inside the block.
                unsafe {
                    fma(&mut acc[r], w[0], base.wrapping_add((b & 3) * cols));
                    fma(&mut acc[r], w[1], base.wrapping_add((b >> 2 & 3) * cols));
                    fma(&mut acc[r], w[2], base.wrapping_add((4 + (b >> 4 & 3)) * cols));
                    fma(&mut acc[r], w[3], base.wrapping_add((4 + (b >> 6)) * cols));
                }
            }
        }
        if groups % 2 == 1 {
            // The last group, rows `8·pairs .. 8·pairs + 4 <= 4·groups`.
            let base = xp.wrapping_add(8 * pairs * cols);
            for r in 0..R {
                let b = usize::from(idx[r][pairs]);
                // SAFETY: as above, `t < 4`.
                unsafe {
                    fma(
                        &mut acc[r],
                        values[r][4 * pairs],
                        base.wrapping_add((b & 3) * cols),
                    );
                    fma(
                        &mut acc[r],
                        values[r][4 * pairs + 1],
                        base.wrapping_add((b >> 2 & 3) * cols),
                    );
                }
            }
        }
    }
}

/// One kept weight: broadcast it, FMA it against its row of the x strip.
///
/// # Safety
/// `V`'s instruction set; `row` is readable for `LANES·N` floats.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn fma<V: Vector, const N: usize>(acc: &mut [V; N], w: f32, row: *const f32) {
    // SAFETY: the contract.
    unsafe {
        let wb = V::splat(w);
        for (v, a) in acc.iter_mut().enumerate() {
            *a = V::mul_add(wb, V::load(row.add(V::LANES * v)), *a);
        }
    }
}
