//! From the gate's [`Sparsity`] vocabulary to a kernel weight format: the one place that
//! maps a pattern of a pack to the kernels crate's pruning and compression.

use super::kernels::{KernelError, SparseWeights, bsr, csr, nm, prune};
use crate::ingress::Sparsity;

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
