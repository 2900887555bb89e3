//! sparsegate's built-in CPU kernels: the dense comparator and the sparse kernels under test.
//!
//! Every kernel computes `Yᵀ[N×M] = W[N×K] · Xᵀ[K×M]` on row-major f32 buffers: `w` has N rows
//! of K weights, `x` holds the activations transposed (row `k` is feature `k` of every token)
//! and `y` has N rows of M outputs. Keeping tokens contiguous lets the sparse kernels vectorise
//! along M and broadcast each kept weight, so they never need a gather.
//!
//! Formats: [`nm::NmMatrix`] (N:M structured), [`csr::CsrMatrix`] (unstructured),
//! [`bsr::BsrMatrix`] (block). [`SparseWeights`] is any of them, as the execution stage and
//! the micro-benchmark hold them.
//!
//! The crate knows nothing of the gate: shapes are plain dimensions, blocking is a
//! [`schedule::CpuSchedule`], and every refusal is a [`KernelError`]. All of sparsegate's SIMD
//! and `unsafe` lives here (the gate itself forbids `unsafe`), under the lints in this crate's
//! `Cargo.toml`: each unsafe block says why it is sound and each unsafe function its contract.

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod block_rows;
pub mod bsr;
mod bsr_few_tokens;
pub mod cpu;
pub mod csr;
mod csr_blocks;
mod csr_gather;
mod csr_half;
pub mod dense;
mod dense_lanes;
mod error;
#[cfg(target_arch = "x86_64")]
mod half_dot;
pub mod huge_pages;
#[cfg(target_arch = "x86_64")]
mod int8_blocks;
#[cfg(target_arch = "x86_64")]
mod int8_dense;
#[cfg(target_arch = "x86_64")]
mod int8_expand;
#[cfg(target_arch = "x86_64")]
mod int8_gather;
#[cfg(target_arch = "x86_64")]
mod int8_row_lanes;
#[cfg(target_arch = "x86_64")]
mod int8_two_of_four;
#[cfg(target_arch = "x86_64")]
mod int8_vnni;
pub mod isa;
mod kept;
mod lanes;
pub mod nm;
pub mod precision;
pub mod prune;
pub mod reference;
#[cfg(target_arch = "x86_64")]
mod register_blocks;
pub mod roofs;
pub mod schedule;
#[cfg(target_arch = "x86_64")]
mod scratch;
mod shared_output;
mod sparse_rows;
#[cfg(test)]
pub(crate) mod testing;

pub use error::KernelError;

use crate::schedule::CpuSchedule;

/// Pruned, compressed weights in the format a sparsity pattern calls for.
#[derive(Debug, Clone, PartialEq)]
pub enum SparseWeights {
    /// N:M structured.
    Nm(nm::NmMatrix),
    /// Unstructured, CSR.
    Csr(csr::CsrMatrix),
    /// Block-sparse, BSR.
    Bsr(bsr::BsrMatrix),
}

impl SparseWeights {
    /// `y[rows × cols] = W · x[k × cols]` with the format's kernel.
    pub fn spmm_scheduled(
        &self,
        schedule: &CpuSchedule,
        x: &[f32],
        y: &mut [f32],
        cols: usize,
    ) -> Result<(), KernelError> {
        match self {
            SparseWeights::Nm(a) => a.spmm_scheduled(schedule, x, y, cols),
            SparseWeights::Csr(a) => a.spmm_scheduled(schedule, x, y, cols),
            SparseWeights::Bsr(a) => a.spmm_scheduled(schedule, x, y, cols),
        }
    }

    /// Bytes of stored values.
    pub fn value_bytes(&self) -> usize {
        match self {
            SparseWeights::Nm(a) => a.value_bytes(),
            SparseWeights::Csr(a) => a.value_bytes(),
            SparseWeights::Bsr(a) => a.value_bytes(),
        }
    }

    /// Bytes of index metadata.
    pub fn metadata_bytes(&self) -> usize {
        match self {
            SparseWeights::Nm(a) => a.metadata_bytes(),
            SparseWeights::Csr(a) => a.metadata_bytes(),
            SparseWeights::Bsr(a) => a.metadata_bytes(),
        }
    }
}
