//! The built-in CPU kernels: the dense comparator and the sparse kernels under test.
//!
//! Every kernel computes `Yᵀ[N×M] = W[N×K] · Xᵀ[K×M]` on row-major f32 buffers: `w` has N rows
//! of K weights, `x` holds the activations transposed (row `k` is feature `k` of every token)
//! and `y` has N rows of M outputs. Keeping tokens contiguous lets the sparse kernels vectorise
//! along M and broadcast each kept weight, so they never need a gather.
//!
//! Formats: [`nm::NmMatrix`] (N:M structured), [`csr::CsrMatrix`] (unstructured),
//! [`bsr::BsrMatrix`] (block). [`SparseWeights`] is any of them, as the execution stage and
//! the micro-benchmark hold them.

pub mod bsr;
mod bsr_few_tokens;
pub mod csr;
mod csr_blocks;
mod csr_gather;
pub mod dense;
mod dense_lanes;
mod error;
#[cfg(target_arch = "x86_64")]
mod int8_vnni;
mod lanes;
pub mod nm;
pub mod precision;
pub mod prune;
pub mod reference;
mod shared_output;
mod sparse_rows;
#[cfg(test)]
pub(crate) mod testing;

pub use error::KernelError;

use crate::ingress::Sparsity;
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
    /// Prune the row-major `rows × k` weights `w` in place to `sparsity` by magnitude (N:M per
    /// group, unstructured per row, blocks by L2 norm) and compress them. `Ok(None)` for a
    /// dense pattern. Afterwards `w` is exactly what the compressed form decompresses to, so a
    /// dense kernel on `w` is the fair comparator.
    pub fn prune_and_compress(
        w: &mut [f32],
        rows: usize,
        k: usize,
        sparsity: Sparsity,
    ) -> Result<Option<SparseWeights>, KernelError> {
        Ok(Some(match sparsity {
            Sparsity::Dense => return Ok(None),
            Sparsity::NOfM { n, m } => {
                let (n, m) = (n as usize, m as usize);
                nm::prune_magnitude_in_place(w, rows, k, n, m);
                SparseWeights::Nm(nm::NmMatrix::compress(w, rows, k, n, m)?)
            }
            Sparsity::Unstructured { density } => {
                prune::prune_unstructured_per_row(w, rows, k, density);
                SparseWeights::Csr(csr::CsrMatrix::compress(w, rows, k)?)
            }
            Sparsity::Block {
                rows: br,
                cols: bc,
                density,
            } => {
                let (br, bc) = (br as usize, bc as usize);
                prune::prune_blocks(w, rows, k, br, bc, density);
                SparseWeights::Bsr(bsr::BsrMatrix::compress(w, rows, k, br, bc)?)
            }
        }))
    }

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
