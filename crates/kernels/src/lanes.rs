//! One f32 vector of tokens behind a trait, so that a kernel body written once runs as
//! AVX2 (a ymm: 8 tokens) and as AVX-512 (a zmm: 16 tokens).
//!
//! Why a trait and not two copies: the few-token kernels differ between the two instruction
//! sets only in register width. The body is an `#[inline(always)]` generic function, called
//! from one `#[target_feature]` wrapper per width; the methods here carry no target feature
//! of their own, so they inline into whichever wrapper calls them and compile to that
//! wrapper's instructions.
//!
//! Bodies written this way: the BSR few-token kernel (`bsr_few_tokens.rs`), the N:M strip
//! loops (`nm/any_pattern.rs`, and through the shared walker of `register_blocks.rs`
//! `nm/two_of_four.rs` and `nm/microkernel.rs`) and the FMA roof probe (`roofs.rs`). The N:M loops were two macro-generated copies per ISA before; as
//! generic bodies, single-thread timings on a Zen 5 (1024 × 1024 weights, 128 tokens, best
//! of 150, five interleaved runs against the macro build) came out at 0.96–1.01 of the
//! macro version, within the ±1.5% an unchanged CSR kernel moved in the same runs.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// An f32 vector of [`Vector::LANES`] tokens.
///
/// # Safety
/// Every method needs the instruction set of its type (AVX2 + FMA for `__m256`, AVX-512F
/// for `__m512`) enabled in the function it inlines into, and pointers valid for `LANES`
/// floats.
#[cfg(target_arch = "x86_64")]
pub(crate) trait Vector: Copy {
    /// f32 lanes.
    const LANES: usize;
    /// Architectural registers of this width (16 ymm, 32 zmm): what bounds a register tile.
    const REGISTERS: usize;
    /// Every lane zero.
    unsafe fn zero() -> Self;
    /// `LANES` floats from `p` (any alignment).
    unsafe fn load(p: *const f32) -> Self;
    /// `v` in every lane.
    unsafe fn splat(v: f32) -> Self;
    /// `a · b + c`, fused.
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self;
    /// The lanes to `p` (any alignment).
    unsafe fn store(self, p: *mut f32);
}

#[cfg(target_arch = "x86_64")]
impl Vector for __m256 {
    const LANES: usize = 8;
    const REGISTERS: usize = 16;
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: AVX (the trait's contract).
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: AVX (the trait's contract).
        unsafe { _mm256_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: FMA (the trait's contract).
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the trait's contract.
        unsafe { _mm256_storeu_ps(p, self) }
    }
}

#[cfg(target_arch = "x86_64")]
impl Vector for __m512 {
    const LANES: usize = 16;
    const REGISTERS: usize = 32;
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: AVX-512F (the trait's contract).
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: AVX-512F (the trait's contract).
        unsafe { _mm512_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: AVX-512F (the trait's contract).
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the trait's contract.
        unsafe { _mm512_storeu_ps(p, self) }
    }
}
