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

/// For each row `r`: `y_r[..w] (+)= Σ kept w · x[k, c0..c0+w]` over K rows `kb0..kb1` (whole
/// groups of 4, `kb0` a multiple of 8), where `w` is the largest multiple of the vector width
/// that fits the (equal-length) strips. Returns `w`; the caller finishes the remaining columns
/// with the generic path. `R` should not exceed [`Isa::rows_per_pass`] (registers spill beyond it).
///
/// Panics (before touching memory) if the K block or a strip is outside `x` (`k × cols`) or a
/// row's values or indices are short.
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
    let values = rows.each_ref().map(|r| r.values);
    let idx = rows.each_ref().map(|r| &r.idx[kb0 / 8..]);
    let y = rows.each_mut().map(|r| r.y.as_mut_ptr());
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F was detected; every row read is `kb0 + 8j + t < kb1` (t < 8, see the
        // module doc) and every column `< c0 + width <= cols`, inside `x` by the asserts; the
        // `y` pointers come from `R` distinct `&mut` strips of `width` elements.
        Isa::Avx512 => unsafe { avx512::rows_strip(values, idx, groups, xp, cols, y, width, accumulate) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 and FMA were detected; bounds as above.
        Isa::Avx2Fma => unsafe { avx2::rows_strip(values, idx, groups, xp, cols, y, width, accumulate) },
        Isa::Portable => 0,
    }
}

/// Generates the 2:4 strip loop for one vector ISA; `$max_v` accumulators per row at most.
macro_rules! strip_loop {
    ($isa:ident, $feature:literal, $vec:ty, $lanes:literal, $max_v:literal, $zero:ident, $set1:ident,
     $load:ident, $store:ident, $fmadd:ident) => {
        #[cfg(target_arch = "x86_64")]
        mod $isa {
            use std::arch::x86_64::*;

            /// # Safety
            /// The CPU supports the module's features; `xp` points at `x[kb0, c0]`; rows
            /// `kb0 .. kb0 + 4·groups`, columns `c0 .. c0 + width` of `x` (row stride `cols`) are
            /// readable; each `y[r]` is writable for `width` elements and they do not overlap.
            #[target_feature(enable = $feature)]
            #[allow(clippy::too_many_arguments)]
            pub(super) unsafe fn rows_strip<const R: usize>(
                values: [&[f32]; R],
                idx: [&[u8]; R],
                groups: usize,
                xp: *const f32,
                cols: usize,
                y: [*mut f32; R],
                width: usize,
                accumulate: bool,
            ) -> usize {
                let mut col = 0;
                while width - col >= $max_v * $lanes {
                    let (xs, ys) = (xp.wrapping_add(col), y.map(|p| p.wrapping_add(col)));
                    // SAFETY: the block covers columns `col .. col + lanes·V <= width` (the loop
                    // condition) of the caller's strips; the CPU has the features (contract).
                    unsafe { block::<R, $max_v>(values, idx, groups, xs, cols, ys, accumulate) };
                    col += $max_v * $lanes;
                }
                for v in [4, 2, 1] {
                    if v < $max_v && width - col >= v * $lanes {
                        let (xs, ys) = (xp.wrapping_add(col), y.map(|p| p.wrapping_add(col)));
                        // SAFETY: as above, with `col + lanes·v <= width` (the condition).
                        unsafe {
                            match v {
                                4 => block::<R, 4>(values, idx, groups, xs, cols, ys, accumulate),
                                2 => block::<R, 2>(values, idx, groups, xs, cols, ys, accumulate),
                                _ => block::<R, 1>(values, idx, groups, xs, cols, ys, accumulate),
                            }
                        }
                        col += v * $lanes;
                    }
                }
                col
            }

            /// `R × V` accumulators held in registers across the whole K block.
            ///
            /// # Safety
            /// As [`rows_strip`], for columns `0 .. lanes·V` of `xp` and every `y[r]`.
            #[target_feature(enable = $feature)]
            #[inline]
            unsafe fn block<const R: usize, const V: usize>(
                values: [&[f32]; R],
                idx: [&[u8]; R],
                groups: usize,
                xp: *const f32,
                cols: usize,
                y: [*mut f32; R],
                accumulate: bool,
            ) {
                let mut acc: [[$vec; V]; R] = [[$zero(); V]; R];
                if accumulate {
                    for (row, y) in acc.iter_mut().zip(y) {
                        for (v, a) in row.iter_mut().enumerate() {
                            // SAFETY: inside the caller's strip of `y`.
                            *a = unsafe { $load(y.add($lanes * v)) };
                        }
                    }
                }
                // One kept weight: broadcast it, FMA it against its row of the x strip.
                macro_rules! fma {
                    ($acc:expr, $w:expr, $row:expr) => {{
                        let (wb, row): ($vec, *const f32) = ($set1($w), $row);
                        for (v, a) in $acc.iter_mut().enumerate() {
                            // SAFETY: `row` is a row of the K block (see the call sites) and the
                            // columns `lanes·v ..` lie inside the strip: the caller's contract.
                            *a = $fmadd(wb, unsafe { $load(row.add($lanes * v)) }, *a);
                        }
                    }};
                }
                let pairs = groups / 2;
                for j in 0..pairs {
                    // Rows `8j .. 8j + 8` of the block, all `< 4·groups`.
                    let base = xp.wrapping_add(8 * j * cols);
                    for r in 0..R {
                        let b = usize::from(idx[r][j]);
                        let w = &values[r][4 * j..4 * j + 4];
                        // Each row is `base + t·cols` with `t < 8` (module doc): inside the block.
                        {
                            fma!(acc[r], w[0], base.wrapping_add((b & 3) * cols));
                            fma!(acc[r], w[1], base.wrapping_add((b >> 2 & 3) * cols));
                            fma!(acc[r], w[2], base.wrapping_add((4 + (b >> 4 & 3)) * cols));
                            fma!(acc[r], w[3], base.wrapping_add((4 + (b >> 6)) * cols));
                        }
                    }
                }
                if groups % 2 == 1 {
                    // The last group, rows `8·pairs .. 8·pairs + 4 <= 4·groups`.
                    let base = xp.wrapping_add(8 * pairs * cols);
                    for r in 0..R {
                        let b = usize::from(idx[r][pairs]);
                        // As above, `t < 4`.
                        {
                            fma!(
                                acc[r],
                                values[r][4 * pairs],
                                base.wrapping_add((b & 3) * cols)
                            );
                            fma!(
                                acc[r],
                                values[r][4 * pairs + 1],
                                base.wrapping_add((b >> 2 & 3) * cols)
                            );
                        }
                    }
                }
                for (row, y) in acc.iter().zip(y) {
                    for (v, a) in row.iter().enumerate() {
                        // SAFETY: inside the caller's strip of `y`.
                        unsafe { $store(y.add($lanes * v), *a) };
                    }
                }
            }
        }
    };
}

strip_loop!(
    avx512,
    "avx512f",
    __m512,
    16,
    8,
    _mm512_setzero_ps,
    _mm512_set1_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_fmadd_ps
);
strip_loop!(
    avx2,
    "avx2,fma",
    __m256,
    8,
    8,
    _mm256_setzero_ps,
    _mm256_set1_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_fmadd_ps
);
