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
use crate::register_blocks::{self, Body};

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
            if crate::cpu::has!("avx2") && crate::cpu::has!("fma") {
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
        if crate::cpu::has!("avx512f") && crate::cpu::has!("avx2") && crate::cpu::has!("fma") {
            return Isa::Avx512;
        }
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::has!("avx2") && crate::cpu::has!("fma") {
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

/// On ymm registers ([`register_blocks::avx2`]), the last `< 8` tokens on the portable path.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `offsets[j] + c0 + y.len() <= x.len()` for all j.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2(values: &[f32], offsets: &[usize], x: &[f32], c0: usize, y: &mut [f32], accumulate: bool) {
    let body = Decoded { values, offsets };
    let xp = (x.as_ptr().wrapping_add(c0), 1);
    // SAFETY: the caller's contract: the features, and every block's loads
    // `x[off + c0 + col ..][..LANES·N]` with `col + LANES·N <= y.len()` inside `x`.
    let col = unsafe { register_blocks::avx2(body, xp, [y.as_mut_ptr()], y.len(), accumulate) };
    if col < y.len() {
        portable(values, offsets, x, c0 + col, &mut y[col..], accumulate);
    }
}

/// On zmm registers ([`register_blocks::avx512`]), the last `< 16` tokens on the AVX2 path.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA, and `offsets[j] + c0 + y.len() <= x.len()`
/// for all j.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn avx512(values: &[f32], offsets: &[usize], x: &[f32], c0: usize, y: &mut [f32], accumulate: bool) {
    let body = Decoded { values, offsets };
    let xp = (x.as_ptr().wrapping_add(c0), 1);
    // SAFETY: as for `avx2`, with AVX-512F.
    let col = unsafe { register_blocks::avx512(body, xp, [y.as_mut_ptr()], y.len(), accumulate) };
    if col < y.len() {
        // SAFETY: AVX2 and FMA were detected with AVX-512F; the tail is inside the bound.
        unsafe { avx2(values, offsets, x, c0 + col, &mut y[col..], accumulate) };
    }
}

/// One row's kept weights with their activation offsets, as a register-block body: the
/// offsets name elements of `x`, so the body reads `xp + off` and the row stride is unused
/// (the entry points pass 1).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Decoded<'a> {
    values: &'a [f32],
    offsets: &'a [usize],
}

#[cfg(target_arch = "x86_64")]
impl Body<1> for Decoded<'_> {
    #[inline(always)]
    unsafe fn accumulate<V: Vector, const N: usize>(self, acc: &mut [[V; N]; 1], xp: *const f32, _: usize) {
        for (&w, &off) in self.values.iter().zip(self.offsets) {
            // SAFETY: `off + c0 + col + LANES·N <= x.len()` by the entry point's bound, so
            // every load of `v < N` is inside `x`; `V`'s instruction set (contract).
            unsafe {
                let (wb, p) = (V::splat(w), xp.add(off));
                for (v, a) in acc[0].iter_mut().enumerate() {
                    *a = V::mul_add(wb, V::load(p.add(V::LANES * v)), *a);
                }
            }
        }
    }
}
