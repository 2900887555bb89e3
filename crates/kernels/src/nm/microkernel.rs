//! The inner loop of the N:M kernel: one output row × one strip of tokens, over the kept
//! weights of one K block.
//!
//! For each kept weight `w` at reduction index `k` it does `y[strip] += w · x[k, strip]`: a
//! broadcast, a contiguous load and an FMA per 8 tokens, no gathers. The strip is held in
//! registers for the whole K block (up to 8 ymm accumulators = 64 tokens), so the output is
//! loaded and stored once per block, and 8 independent FMA chains cover the FMA latency.
//!
//! Where AVX-512 is present the same loop runs on zmm registers (up to 128 tokens per block),
//! which halves the instructions per FLOP; on cores with full-width 512-bit FMA units it also
//! doubles the FMA rate.
//!
//! This file holds the *decoded* form of the loop (indices turned into activation offsets
//! first), which serves the portable build and the last few tokens of a strip narrower than
//! one vector. The vector paths decode inline instead: `two_of_four.rs` for 2:4,
//! `any_pattern.rs` for every other pattern.

#[cfg(target_arch = "x86_64")]
use crate::lanes::Vector;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{__m256, __m512};

/// One output row's share of a K block, as the inline-decoding loops take it.
pub(crate) struct RowBlock<'a> {
    /// The row's kept values for the block's groups.
    pub values: &'a [f32],
    /// All of the row's index bytes.
    pub idx: &'a [u8],
    /// The row's output strip.
    pub y: &'a mut [f32],
}

impl RowBlock<'_> {
    /// The same block, borrowed for a shorter time (to pass by value into a pass).
    pub(crate) fn reborrow(&mut self) -> RowBlock<'_> {
        RowBlock {
            values: self.values,
            idx: self.idx,
            y: self.y,
        }
    }
}

/// Which instruction set the microkernel runs with; detected once per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isa {
    /// AVX-512F, 512-bit registers (tails of fewer than 16 tokens use AVX2).
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// AVX2 + FMA, 256-bit registers.
    #[cfg(target_arch = "x86_64")]
    Avx2Fma,
    /// Plain Rust that the compiler autovectorises for the build's baseline target.
    Portable,
}

impl Isa {
    /// Output rows one pass of the inline-decoding loops takes together: two with AVX-512's 32
    /// registers (2 × 8 accumulators, 16 independent FMA chains), one with AVX2's 16.
    pub(crate) fn rows_per_pass(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => 2,
            _ => 1,
        }
    }

    /// Every instruction set this machine can run, best first.
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Isa> {
        let mut all = vec![Isa::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                all.insert(0, Isa::Avx2Fma);
            }
            if Isa::detect() == Isa::Avx512 {
                all.insert(0, Isa::Avx512);
            }
        }
        all
    }

    pub(crate) fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            return Isa::Avx512;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            return Isa::Avx2Fma;
        }
        Isa::Portable
    }
}

/// Element offsets into `x` of the activation rows one row's kept weights touch, with their
/// maximum tracked on push: the bound the vector loads rely on, checked once per strip instead
/// of once per load.
#[derive(Debug, Default)]
pub(crate) struct Offsets {
    offsets: Vec<usize>,
    max: usize,
}

impl Offsets {
    pub(crate) fn with_capacity(cap: usize) -> Offsets {
        Offsets {
            offsets: Vec::with_capacity(cap),
            max: 0,
        }
    }

    pub(crate) fn clear(&mut self) {
        self.offsets.clear();
        self.max = 0;
    }

    #[inline(always)]
    pub(crate) fn push(&mut self, offset: usize) {
        self.offsets.push(offset);
        self.max = self.max.max(offset);
    }
}

/// `y[..] (+)= Σ_j values[j] · x[offsets[j] + c0 ..][..y.len()]`; overwrites `y` when
/// `accumulate` is false.
///
/// Panics (before touching memory) if an offset would read past `x`.
pub(crate) fn row_strip(
    isa: Isa,
    values: &[f32],
    offsets: &Offsets,
    x: &[f32],
    c0: usize,
    y: &mut [f32],
    accumulate: bool,
) {
    assert_eq!(values.len(), offsets.offsets.len());
    assert!(
        offsets.max + c0 + y.len() <= x.len(),
        "row_strip: offset out of bounds"
    );
    let offsets = offsets.offsets.as_slice();
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` is only constructed after runtime detection of AVX-512F, AVX2
        // and FMA; the bounds of every load were checked above.
        Isa::Avx512 => unsafe { avx512(values, offsets, x, c0, y, accumulate) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2Fma` is only constructed after runtime detection of AVX2 and FMA;
        // the bounds of every load were checked above.
        Isa::Avx2Fma => unsafe { avx2(values, offsets, x, c0, y, accumulate) },
        Isa::Portable => portable(values, offsets, x, c0, y, accumulate),
    }
}

/// Portable path, blocked by 16 so the compiler keeps the accumulators in vector registers.
pub(crate) fn portable(
    values: &[f32],
    offsets: &[usize],
    x: &[f32],
    c0: usize,
    y: &mut [f32],
    accumulate: bool,
) {
    const B: usize = 16;
    let mut start = 0;
    for chunk in y.chunks_mut(B) {
        let width = chunk.len();
        let mut acc = [0.0f32; B];
        if accumulate {
            acc[..width].copy_from_slice(chunk);
        }
        for (&w, &off) in values.iter().zip(offsets) {
            let xs = &x[off + c0 + start..][..width];
            for (a, &xv) in acc.iter_mut().zip(xs) {
                *a += w * xv;
            }
        }
        chunk.copy_from_slice(&acc[..width]);
        start += width;
    }
}

/// [`strip`] on ymm registers, the last `< 8` tokens on the portable path.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `offsets[j] + c0 + y.len() <= x.len()` for all j.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2(values: &[f32], offsets: &[usize], x: &[f32], c0: usize, y: &mut [f32], accumulate: bool) {
    // SAFETY: the caller's contract; AVX2 and FMA are enabled here for `__m256`.
    let col = unsafe { strip::<__m256>(values, offsets, x, c0, y, accumulate) };
    if col < y.len() {
        portable(values, offsets, x, c0 + col, &mut y[col..], accumulate);
    }
}

/// [`strip`] on zmm registers, the last `< 16` tokens on the AVX2 path.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA, and `offsets[j] + c0 + y.len() <= x.len()`
/// for all j.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn avx512(values: &[f32], offsets: &[usize], x: &[f32], c0: usize, y: &mut [f32], accumulate: bool) {
    // SAFETY: the caller's contract; AVX-512F is enabled here for `__m512`.
    let col = unsafe { strip::<__m512>(values, offsets, x, c0, y, accumulate) };
    if col < y.len() {
        // SAFETY: AVX2 and FMA were detected with AVX-512F; the tail is inside the bound.
        unsafe { avx2(values, offsets, x, c0 + col, &mut y[col..], accumulate) };
    }
}

/// The tokens of `y` in blocks of `8, 4, 2, 1` vectors; returns how many it did (a multiple
/// of the vector width).
///
/// # Safety
/// `V`'s instruction set (inlined into the `#[target_feature]` wrappers above), and
/// `offsets[j] + c0 + y.len() <= x.len()` for all j.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn strip<V: Vector>(
    values: &[f32],
    offsets: &[usize],
    x: &[f32],
    c0: usize,
    y: &mut [f32],
    accumulate: bool,
) -> usize {
    let mut col = 0;
    let width = y.len();
    // Each block reads `x[off + c0 + col ..][..LANES·N]` with `col + LANES·N <= width`, inside
    // `x` by the caller's bound, and writes `y[col..][..LANES·N]`.
    while width - col >= 8 * V::LANES {
        // SAFETY: the ISA as the contract; the condition gives the bound above.
        unsafe { block::<V, 8>(values, offsets, x, c0 + col, y[col..].as_mut_ptr(), accumulate) };
        col += 8 * V::LANES;
    }
    for n in [4, 2, 1] {
        if width - col >= n * V::LANES {
            let yp = y[col..].as_mut_ptr();
            // SAFETY: as above, for `n` vectors.
            unsafe {
                match n {
                    4 => block::<V, 4>(values, offsets, x, c0 + col, yp, accumulate),
                    2 => block::<V, 2>(values, offsets, x, c0 + col, yp, accumulate),
                    _ => block::<V, 1>(values, offsets, x, c0 + col, yp, accumulate),
                }
            }
            col += n * V::LANES;
        }
    }
    col
}

/// `N` accumulators (`LANES·N` tokens) held in registers over all kept weights.
///
/// # Safety
/// `V`'s instruction set; `x[off + c0 ..][..LANES·N]` in bounds for every offset;
/// `y[..LANES·N]` writable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn block<V: Vector, const N: usize>(
    values: &[f32],
    offsets: &[usize],
    x: &[f32],
    c0: usize,
    y: *mut f32,
    accumulate: bool,
) {
    // SAFETY: `V`'s instruction set (contract).
    let mut acc = [unsafe { V::zero() }; N];
    if accumulate {
        for (v, a) in acc.iter_mut().enumerate() {
            // SAFETY: `y[LANES·v ..][..LANES]` is inside the caller's `LANES·N`-wide strip.
            *a = unsafe { V::load(y.add(V::LANES * v)) };
        }
    }
    let xb = x.as_ptr();
    for (&w, &off) in values.iter().zip(offsets) {
        // SAFETY: `off + c0 + LANES·N <= x.len()` by the caller's bound, so every load of
        // `v < N` is inside `x`; `V`'s instruction set (contract).
        unsafe {
            let (wb, xp) = (V::splat(w), xb.add(off + c0));
            for (v, a) in acc.iter_mut().enumerate() {
                *a = V::mul_add(wb, V::load(xp.add(V::LANES * v)), *a);
            }
        }
    }
    for (v, a) in acc.iter().enumerate() {
        // SAFETY: `y[LANES·v ..][..LANES]` is inside the caller's strip.
        unsafe { a.store(y.add(V::LANES * v)) };
    }
}
