//! The general N:M path: the microkernel loop with indices decoded inline, for any pattern,
//! one or two output rows at a time.
//!
//! The same loop as the 2:4 path (`two_of_four.rs`), with the pattern known only at run time:
//! entry `e` of a row sits at bit `e·bits` of its index bytes, and its row of `x` is
//! `group·m + index`. Every index is clamped to `m - 1` as it is decoded, so a load can never
//! leave its group whatever the bytes hold; for a valid matrix the clamp never changes a value.
//!
//! Its strip walker and entry points stay here rather than on `register_blocks.rs` (which
//! 2:4 uses): generated from there, 2:128 on AVX2 measured 4–10% slower (that file says more).

use super::microkernel::{Isa, RowBlock};
#[cfg(target_arch = "x86_64")]
use crate::lanes::Vector;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{__m256, __m512};

/// The pattern and the block of groups a pass covers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pattern {
    /// Kept per group.
    pub n: usize,
    /// Group size.
    pub m: usize,
    /// Bits per stored index (1, 2, 4 or 8).
    pub bits: usize,
}

/// For each row: `y[..w] (+)= Σ kept w · x[k, c0..c0+w]` over groups `g0..g1`, where `w` is the
/// largest multiple of the vector width that fits the (equal-length) strips. Returns `w`; the
/// caller finishes the remaining columns. Returns 0 on the portable ISA.
///
/// Panics (before touching memory) if the groups or a strip are outside `x` (`k × cols`) or a
/// row's values or indices are short.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rows_strip<const R: usize>(
    isa: Isa,
    p: Pattern,
    rows: &mut [RowBlock<'_>; R],
    x: &[f32],
    cols: usize,
    (g0, g1): (usize, usize),
    c0: usize,
    accumulate: bool,
) -> usize {
    let width = rows.first().map_or(0, |r| r.y.len());
    assert!(
        p.n >= 1 && p.m > p.n && matches!(p.bits, 1 | 2 | 4 | 8),
        "invalid pattern {p:?}"
    );
    assert!(
        g1 >= g0 && g1 * p.m * cols <= x.len() && c0 + width <= cols,
        "N:M block: outside x"
    );
    for r in rows.iter() {
        assert!(r.y.len() == width, "N:M block: strips of different widths");
        assert!(r.values.len() >= (g1 - g0) * p.n, "N:M block: short values");
        assert!(r.idx.len() * 8 >= g1 * p.n * p.bits, "N:M block: short indices");
    }
    debug_assert!(R <= isa.rows_per_pass());
    let xp = x[g0 * p.m * cols..].as_ptr().wrapping_add(c0);
    let values = rows.each_ref().map(|r| r.values);
    let idx = rows.each_ref().map(|r| r.idx);
    let y = rows.each_mut().map(|r| r.y.as_mut_ptr());
    let block = (g0, g1 - g0);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F was detected; every row read is `(g0 + g)·m + index` with `g < g1 - g0`
        // and `index <= m - 1` (clamped), so `< g1·m <= k`; every column `< c0 + width <= cols`;
        // the `y` pointers come from `R` distinct `&mut` strips of `width` elements.
        Isa::Avx512 => unsafe { avx512(p, values, idx, block, xp, cols, y, width, accumulate) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 and FMA were detected; bounds as above.
        Isa::Avx2Fma => unsafe { avx2(p, values, idx, block, xp, cols, y, width, accumulate) },
        Isa::Portable => 0,
    }
}

/// Accumulator vectors per row in the widest block: 8 (64 tokens on AVX2, 128 on AVX-512).
#[cfg(target_arch = "x86_64")]
const MAX_V: usize = 8;

/// One entry point per instruction set: [`strip`] on that ISA's vector type, compiled with
/// its features enabled (the same shape as `register_blocks::entry_point!`; this loop keeps
/// its own walker, see the module docs).
#[cfg(target_arch = "x86_64")]
macro_rules! entry_point {
    ($(#[$doc:meta])* $name:ident, $features:literal, $vector:ty) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name<const R: usize>(
            p: Pattern,
            values: [&[f32]; R],
            idx: [&[u8]; R],
            block: (usize, usize),
            xp: *const f32,
            cols: usize,
            y: [*mut f32; R],
            width: usize,
            accumulate: bool,
        ) -> usize {
            // SAFETY: the caller's contract; the vector type's features are enabled here.
            unsafe { strip::<$vector, R>(p, values, idx, block, (xp, cols), y, width, accumulate) }
        }
    };
}

#[cfg(target_arch = "x86_64")]
entry_point!(
    /// [`strip`] on zmm registers.
    ///
    /// # Safety
    /// AVX-512F; as [`strip`].
    avx512,
    "avx512f",
    __m512
);

#[cfg(target_arch = "x86_64")]
entry_point!(
    /// [`strip`] on ymm registers.
    ///
    /// # Safety
    /// AVX2 and FMA; as [`strip`].
    avx2,
    "avx2,fma",
    __m256
);

/// The columns of a strip in blocks of `8, 4, 2, 1` vectors; returns how many it did (a
/// multiple of the vector width).
///
/// # Safety
/// `V`'s instruction set (inlined into the `#[target_feature]` wrappers above); `xp` points at
/// `x[g0·m, c0]`; rows `g0·m .. (g0 + groups)·m`, columns `c0 .. c0 + width` of `x` (row
/// stride `cols`) are readable; each `y[r]` is writable for `width` elements, without overlap.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn strip<V: Vector, const R: usize>(
    p: Pattern,
    values: [&[f32]; R],
    idx: [&[u8]; R],
    block: (usize, usize),
    x: (*const f32, usize),
    y: [*mut f32; R],
    width: usize,
    accumulate: bool,
) -> usize {
    let mut col = 0;
    while width - col >= MAX_V * V::LANES {
        let (xs, ys) = ((x.0.wrapping_add(col), x.1), y.map(|q| q.wrapping_add(col)));
        // SAFETY: the block covers columns `col .. col + LANES·V <= width` (the loop
        // condition) of the caller's strips; the ISA is the caller's.
        unsafe { run::<V, R, MAX_V>(p, values, idx, block, xs, ys, accumulate) };
        col += MAX_V * V::LANES;
    }
    for v in [4, 2, 1] {
        if width - col >= v * V::LANES {
            let (xs, ys) = ((x.0.wrapping_add(col), x.1), y.map(|q| q.wrapping_add(col)));
            // SAFETY: as above, with `col + LANES·v <= width` (the condition).
            unsafe {
                match v {
                    4 => run::<V, R, 4>(p, values, idx, block, xs, ys, accumulate),
                    2 => run::<V, R, 2>(p, values, idx, block, xs, ys, accumulate),
                    _ => run::<V, R, 1>(p, values, idx, block, xs, ys, accumulate),
                }
            }
            col += v * V::LANES;
        }
    }
    col
}

/// `R × N` accumulators held in registers across the whole block of groups.
///
/// # Safety
/// As [`strip`], for columns `0 .. LANES·N` of `x` and every `y[r]`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn run<V: Vector, const R: usize, const N: usize>(
    p: Pattern,
    values: [&[f32]; R],
    idx: [&[u8]; R],
    (g0, groups): (usize, usize),
    (xp, cols): (*const f32, usize),
    y: [*mut f32; R],
    accumulate: bool,
) {
    // SAFETY: `V`'s instruction set and the block of `y`: the caller's contract.
    let mut acc: [[V; N]; R] = unsafe { crate::register_blocks::load_block(y, accumulate) };
    let (mask, last) = ((1usize << p.bits) - 1, p.m - 1);
    for g in 0..groups {
        // The group's first row of x; every index below is clamped into the group.
        let base = xp.wrapping_add(g * p.m * cols);
        for t in 0..p.n {
            let (e, pos) = (g * p.n + t, ((g0 + g) * p.n + t) * p.bits);
            for r in 0..R {
                let index = (usize::from(idx[r][pos / 8] >> (pos % 8)) & mask).min(last);
                let row = base.wrapping_add(index * cols);
                // SAFETY: `row` is a row of the block and the columns `LANES·v ..` lie inside
                // the strip: the caller's contract; `V`'s instruction set likewise.
                unsafe {
                    let wb = V::splat(values[r][e]);
                    for (v, a) in acc[r].iter_mut().enumerate() {
                        *a = V::mul_add(wb, V::load(row.add(V::LANES * v)), *a);
                    }
                }
            }
        }
    }
    // SAFETY: as for the load.
    unsafe { crate::register_blocks::store_block(&acc, y) };
}
