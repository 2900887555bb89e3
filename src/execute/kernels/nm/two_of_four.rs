//! The 2:4 fast path: the microkernel loop with the packed indices decoded inline.
//!
//! One index byte covers two groups (8 rows of `x`) and four kept weights. Each 2-bit index
//! is `< 4 = m` whatever its value, so every decoded row stays inside its own group: the bound
//! of all loads follows from the K block alone, and no offsets buffer, maximum or per-weight
//! check is needed. Decoding is a shift, a mask and a multiply-add on integer ports, which run
//! beside the FMA and load ports instead of in a separate pass.

use super::microkernel::Isa;

/// `y[..w] (+)= Σ kept w · x[k, c0..c0+w]` over K rows `kb0..kb1` (whole groups of 4, `kb0` a
/// multiple of 8) for the row whose values and index bytes (starting at group `kb0/4`) are
/// given, where `w` is the largest multiple of the vector width that fits `y`. Returns `w`;
/// the caller finishes the remaining columns with the generic path.
///
/// Panics (before touching memory) if the K block or the strip is outside `x` (`k × cols`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn row_strip(
    isa: Isa,
    values: &[f32],
    idx: &[u8],
    x: &[f32],
    cols: usize,
    (kb0, kb1): (usize, usize),
    c0: usize,
    y: &mut [f32],
    accumulate: bool,
) -> usize {
    let groups = (kb1 - kb0) / 4;
    assert!(
        kb0 % 8 == 0 && (kb1 - kb0) % 4 == 0,
        "2:4 block must be whole groups from a byte boundary"
    );
    assert!(
        values.len() >= groups * 2 && idx.len() >= groups.div_ceil(2),
        "2:4 block: short values or indices"
    );
    assert!(
        kb1 * cols <= x.len() && c0 + y.len() <= cols,
        "2:4 block: outside x"
    );
    let xp = x[kb0 * cols..].as_ptr().wrapping_add(c0);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F was detected; every row read is `kb0 + 8j + t < kb1` (t < 8, see the
        // module doc) and every column `< c0 + y.len() <= cols`, inside `x` by the asserts.
        Isa::Avx512 => unsafe { avx512::row_strip(values, idx, groups, xp, cols, y, accumulate) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 and FMA were detected; bounds as above.
        Isa::Avx2Fma => unsafe { avx2::row_strip(values, idx, groups, xp, cols, y, accumulate) },
        Isa::Portable => 0,
    }
}

/// Generates the 2:4 strip loop for one vector ISA.
macro_rules! strip_loop {
    ($isa:ident, $feature:literal, $vec:ty, $lanes:literal, $zero:ident, $set1:ident, $load:ident,
     $store:ident, $fmadd:ident) => {
        #[cfg(target_arch = "x86_64")]
        mod $isa {
            use std::arch::x86_64::*;

            /// # Safety
            /// The CPU supports the module's features; `xp` points at `x[kb0, c0]` and rows
            /// `kb0 .. kb0 + 4·groups`, columns `c0 .. c0 + y.len()` of `x` (row stride `cols`)
            /// are readable.
            #[target_feature(enable = $feature)]
            pub(super) unsafe fn row_strip(
                values: &[f32],
                idx: &[u8],
                groups: usize,
                xp: *const f32,
                cols: usize,
                y: &mut [f32],
                accumulate: bool,
            ) -> usize {
                let (width, mut col) = (y.len(), 0);
                // SAFETY (all calls): each block covers columns `col .. col + lanes·V <= width`.
                while width - col >= 8 * $lanes {
                    unsafe {
                        block::<8>(
                            values,
                            idx,
                            groups,
                            xp.add(col),
                            cols,
                            y[col..].as_mut_ptr(),
                            accumulate,
                        )
                    };
                    col += 8 * $lanes;
                }
                for v in [4, 2, 1] {
                    if width - col >= v * $lanes {
                        let (xs, ys) = (unsafe { xp.add(col) }, y[col..].as_mut_ptr());
                        match v {
                            4 => unsafe { block::<4>(values, idx, groups, xs, cols, ys, accumulate) },
                            2 => unsafe { block::<2>(values, idx, groups, xs, cols, ys, accumulate) },
                            _ => unsafe { block::<1>(values, idx, groups, xs, cols, ys, accumulate) },
                        }
                        col += v * $lanes;
                    }
                }
                col
            }

            /// `V` accumulators held in registers across the whole K block.
            ///
            /// # Safety
            /// As [`row_strip`], for columns `0 .. lanes·V` of `xp` and `y`.
            #[target_feature(enable = $feature)]
            #[inline]
            unsafe fn block<const V: usize>(
                values: &[f32],
                idx: &[u8],
                groups: usize,
                xp: *const f32,
                cols: usize,
                y: *mut f32,
                accumulate: bool,
            ) {
                let mut acc: [$vec; V] = [$zero(); V];
                if accumulate {
                    for (v, a) in acc.iter_mut().enumerate() {
                        // SAFETY: inside the caller's strip of `y`.
                        *a = unsafe { $load(y.add($lanes * v)) };
                    }
                }
                // One kept weight: broadcast it, FMA it against its row of the x strip.
                let mut fma = |w: f32, row: *const f32| {
                    let wb = $set1(w);
                    for (v, a) in acc.iter_mut().enumerate() {
                        // SAFETY: `row` is a row of the K block, columns inside the strip.
                        *a = $fmadd(wb, unsafe { $load(row.add($lanes * v)) }, *a);
                    }
                };
                let pairs = groups / 2;
                for (j, (&b, w)) in idx[..pairs].iter().zip(values.chunks_exact(4)).enumerate() {
                    let b = usize::from(b);
                    // SAFETY: rows `8j .. 8j + 8` of the block, all `< 4·groups`.
                    let base = unsafe { xp.add(8 * j * cols) };
                    unsafe {
                        fma(w[0], base.add((b & 3) * cols));
                        fma(w[1], base.add((b >> 2 & 3) * cols));
                        fma(w[2], base.add((4 + (b >> 4 & 3)) * cols));
                        fma(w[3], base.add((4 + (b >> 6)) * cols));
                    }
                }
                if groups % 2 == 1 {
                    let b = usize::from(idx[pairs]);
                    // SAFETY: the last group, rows `8·pairs .. 8·pairs + 4 <= 4·groups`.
                    let base = unsafe { xp.add(8 * pairs * cols) };
                    unsafe {
                        fma(values[4 * pairs], base.add((b & 3) * cols));
                        fma(values[4 * pairs + 1], base.add((b >> 2 & 3) * cols));
                    }
                }
                for (v, a) in acc.iter().enumerate() {
                    // SAFETY: inside the caller's strip of `y`.
                    unsafe { $store(y.add($lanes * v), *a) };
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
    _mm256_setzero_ps,
    _mm256_set1_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_fmadd_ps
);
