//! Unstructured bf16 and f16 weights as they ship: CSR with 16-bit values and u16 columns,
//! read by the f32 CSR kernels (`csr_gather.rs` at 1–8 tokens, `csr_blocks.rs` past that),
//! which widen sixteen values at a time in registers (`kept::Values`).
//!
//! Why (issue 20): before, a bf16 or f16 unstructured slice was stored as f32 CSR, 8 bytes a
//! kept weight (an f32 and a u32 column) where the shipped checkpoint holds 2 and the
//! columns need 2 (K ≤ 65536 covers every projection of today's LLMs): at few tokens the
//! weight bytes decide the time, so the candidate ran on twice the bytes it ships with, and
//! its reported value bytes were an f32 model's. The products and their numerics are the f32
//! kernels' (a product of two 16-bit values is exact in f32; the sums are f32).

use super::csr::CsrMatrix;
#[cfg(target_arch = "x86_64")]
use super::csr::{BLOCKS_MIN_COLS, BlocksCache};
#[cfg(target_arch = "x86_64")]
use super::csr_blocks::CsrBlocks;
#[cfg(target_arch = "x86_64")]
use super::csr_gather::{self, GATHER_MAX_COLS};
use super::error::{KernelError, check_len};
use super::isa::IsaPath;
#[cfg(target_arch = "x86_64")]
use super::precision::widened;
use super::precision::{Half, Storage16};
use super::shared_output::trivial_product;
use std::marker::PhantomData;

/// Unstructured `rows × k` weights stored as 16-bit values (`T`) and u16 column indices.
/// Built by [`CsrHalf::from_csr`] only where the CPU runs its kernels; elsewhere the slice
/// keeps the f32 form ([`CsrMatrix`]).
#[derive(Debug, Clone)]
pub struct CsrHalf<T> {
    rows: usize,
    k: usize,
    row_ptr: Vec<u32>,
    cols: Vec<u16>,
    /// The values' bits.
    bits: Vec<u16>,
    /// The K-blocked execution copy, built on the first product with many tokens.
    #[cfg(target_arch = "x86_64")]
    blocks: Copy16,
    #[cfg(not(target_arch = "x86_64"))]
    never: std::convert::Infallible,
    _storage: PhantomData<T>,
}

/// Unstructured bf16 weights.
pub type CsrBf16 = CsrHalf<half::bf16>;
/// Unstructured f16 weights.
pub type CsrF16 = CsrHalf<half::f16>;

/// The execution copy of each 16-bit type: its values are the same bits, widened by that
/// type's conversion.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone)]
enum Copy16 {
    Bf16(BlocksCache<super::half_dot::Bf16>),
    F16(BlocksCache<super::half_dot::F16>),
}

/// Largest K whose columns fit the u16 indices.
const MAX_K: usize = u16::MAX as usize + 1;

/// Whether [`CsrHalf`] runs products of reduction length `k` on this CPU (AVX-512F, BW, VL
/// and F16C detected; `k ≤ 65536`).
pub(crate) fn runs(k: usize) -> bool {
    k <= MAX_K && super::kept::available()
}

impl<T: Storage16> CsrHalf<T> {
    /// The 16-bit form of `a`, whose values are `T` already (a bf16 or f16 slice's are;
    /// others are rounded): `None` where the CPU lacks AVX-512F, BW, VL or F16C, or K exceeds
    /// 65536 (u16 columns).
    pub fn from_csr(a: &CsrMatrix) -> Option<CsrHalf<T>> {
        if !runs(a.k()) {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let (row_ptr, cols, values) = a.parts();
            let values: Vec<T> = values.iter().map(|&v| T::from_f32(v)).collect();
            Some(CsrHalf {
                rows: a.rows(),
                k: a.k(),
                row_ptr: row_ptr.to_vec(),
                // Every column is below K ≤ 65536 (checked above).
                cols: cols.iter().map(|&c| c as u16).collect(),
                bits: T::bits(&values).to_vec(),
                blocks: match T::KIND {
                    Half::Bf16 => Copy16::Bf16(BlocksCache::default()),
                    Half::F16 => Copy16::F16(BlocksCache::default()),
                },
                _storage: PhantomData,
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    }

    /// `y[rows × m] = W · x[k × m]`, f32 sums, on `threads` workers of the current rayon pool
    /// (1 runs on the calling thread). The activations are widened once per call.
    pub fn spmm(&self, threads: usize, x: &[T], y: &mut [f32], m: usize) -> Result<(), KernelError> {
        check_len("x", x.len(), self.k, m)?;
        check_len("y", y.len(), self.rows, m)?;
        if trivial_product(y, self.rows, self.k, m) {
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        widened(x, |x| match &self.blocks {
            Copy16::Bf16(copy) => self.product::<super::half_dot::Bf16>(copy, threads, x, y, m),
            Copy16::F16(copy) => self.product::<super::half_dot::F16>(copy, threads, x, y, m),
        });
        #[cfg(not(target_arch = "x86_64"))]
        match self.never {}
        #[cfg(target_arch = "x86_64")]
        Ok(())
    }

    /// The product on widened activations, with values widened as `W` widens them.
    #[cfg(target_arch = "x86_64")]
    fn product<W: super::half_dot::Widen>(
        &self,
        copy: &BlocksCache<W>,
        threads: usize,
        x: &[f32],
        y: &mut [f32],
        m: usize,
    ) {
        if m <= GATHER_MAX_COLS {
            let kernel = csr_gather::Loop::for_tokens(m, self.k);
            let csr = (&self.row_ptr[..], &self.cols[..], &self.bits[..]);
            csr_gather::spmm::<W, u16>(kernel, csr, self.k, threads, (x, m), y, m);
        } else {
            debug_assert!(m >= BLOCKS_MIN_COLS);
            let blocks =
                copy.get_or_init(|| CsrBlocks::new(self.rows, self.k, &self.row_ptr, &self.cols, &self.bits));
            super::csr_blocks::spmm(blocks, threads, (x, m), y, m);
        }
    }

    /// Output rows (N of the GEMM).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Reduction length (K of the GEMM).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Which instruction-set path its products take: the weights streamed as 16-bit values
    /// and widened in registers for f32 FMA on zmm.
    pub fn isa_path(&self) -> IsaPath {
        match T::KIND {
            Half::Bf16 => IsaPath::Avx512Bf16Widen,
            Half::F16 => IsaPath::Avx512F16Widen,
        }
    }

    /// Bytes of stored values (16-bit).
    pub fn value_bytes(&self) -> usize {
        self.bits.len() * 2
    }

    /// Bytes of index metadata: a u16 column per value plus `rows + 1` u32 row pointers.
    pub fn metadata_bytes(&self) -> usize {
        self.cols.len() * 2 + self.row_ptr.len() * 4
    }

    /// Bytes of the K-blocked execution copy (the same 16-bit values, a row byte per value,
    /// a start per K block and row), 0 until the first product with many tokens.
    pub fn execution_copy_bytes(&self) -> usize {
        #[cfg(target_arch = "x86_64")]
        return match &self.blocks {
            Copy16::Bf16(c) => c.resident_bytes(),
            Copy16::F16(c) => c.resident_bytes(),
        };
        #[cfg(not(target_arch = "x86_64"))]
        match self.never {}
    }
}
