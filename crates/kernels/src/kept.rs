//! How the CSR kernels (`csr_gather.rs`, `csr_blocks.rs`) read the kept weights they stream:
//! values as f32, or as bf16/f16 bits widened in registers; column indices as u32, or as u16
//! where K allows.
//!
//! Why: an unstructured bf16 or f16 slice is shipped with 16-bit values, and at few tokens the
//! weight bytes decide the time. f32 values and u32 columns stream 8 bytes a kept weight;
//! 16-bit values and u16 columns stream 4, and widening sixteen values costs one conversion
//! (issue 20: "unstructured … for bf16 likewise", read directly rather than widened to f32
//! first).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Whether this CPU runs the kernels that read kept weights through these traits: AVX-512F,
/// BW and VL (the 16-bit masked loads) and F16C (one f16 widened), detected at run time.
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return crate::cpu::has!("avx512f")
        && crate::cpu::has!("avx512bw")
        && crate::cpu::has!("avx512vl")
        && crate::cpu::has!("f16c");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The stored form of the kept values and how a kernel widens them to f32.
pub(crate) trait Values: Copy + Send + Sync + 'static {
    /// One stored value.
    type Stored: Copy + Default + PartialEq + Send + Sync + std::fmt::Debug + 'static;
    /// One value as f32 (exact).
    fn one(v: Self::Stored) -> f32;
    /// The `n ≤ 16` values at `p` as f32, lanes from `n` on zero.
    ///
    /// # Safety
    /// AVX-512F, BW and VL; `n` values are readable at `p`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn zmm(p: *const Self::Stored, n: usize) -> __m512;
    /// One value as f32 in every lane (for f32 a broadcast load, as before 16-bit values
    /// existed: no store and reload of a widened chunk, which cost 20% at 16 tokens).
    ///
    /// # Safety
    /// AVX-512F and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn splat(v: Self::Stored) -> __m512;
}

/// f32 values, read as they are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct F32;

impl Values for F32 {
    type Stored = f32;

    #[inline(always)]
    fn one(v: f32) -> f32 {
        v
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn zmm(p: *const f32, n: usize) -> __m512 {
        // SAFETY: `n` floats at `p` (contract); masked-off lanes are not read.
        unsafe { _mm512_maskz_loadu_ps(lanes(n), p) }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn splat(v: f32) -> __m512 {
        // SAFETY: AVX-512F (contract).
        unsafe { _mm512_set1_ps(v) }
    }
}

/// 16-bit values (their bits), widened in registers as the dense 16-bit kernels widen theirs.
#[cfg(target_arch = "x86_64")]
impl<W: crate::half_dot::Widen> Values for W {
    type Stored = u16;

    #[inline(always)]
    fn one(v: u16) -> f32 {
        W::one(v)
    }

    #[inline(always)]
    unsafe fn zmm(p: *const u16, n: usize) -> __m512 {
        // SAFETY: `n` values at `p` (contract); masked-off lanes are not read; AVX-512F.
        unsafe { W::zmm(_mm256_maskz_loadu_epi16(lanes(n), p.cast())) }
    }

    #[inline(always)]
    unsafe fn splat(v: u16) -> __m512 {
        // SAFETY: AVX-512F and F16C (contract); the widening of one value in the low lane.
        unsafe { _mm512_broadcastss_ps(W::xmm(_mm_cvtsi32_si128(i32::from(v)))) }
    }
}

/// The mask of the first `n ≤ 16` lanes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn lanes(n: usize) -> __mmask16 {
    debug_assert!(n <= 16);
    ((1u32 << n) - 1) as __mmask16
}

/// A stored column index.
pub(crate) trait Column: Copy + Send + Sync + std::fmt::Debug + 'static {
    /// The index.
    fn at(self) -> usize;
    /// Sixteen indices at `p` as i32 lanes.
    ///
    /// # Safety
    /// AVX-512F; 16 indices are readable at `p`, each below 2³¹.
    #[cfg(target_arch = "x86_64")]
    unsafe fn zmm(p: *const Self) -> __m512i;
}

impl Column for u32 {
    #[inline(always)]
    fn at(self) -> usize {
        self as usize
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn zmm(p: *const u32) -> __m512i {
        // SAFETY: 16 indices at `p` (contract).
        unsafe { _mm512_loadu_epi32(p.cast()) }
    }
}

impl Column for u16 {
    #[inline(always)]
    fn at(self) -> usize {
        usize::from(self)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn zmm(p: *const u16) -> __m512i {
        // SAFETY: 16 indices (32 bytes) at `p` (contract).
        unsafe { _mm512_cvtepu16_epi32(_mm256_loadu_si256(p.cast())) }
    }
}
