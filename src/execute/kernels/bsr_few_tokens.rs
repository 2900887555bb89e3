//! The BSR kernel for products with 1–8 tokens (decode-time batches), on AVX2 + FMA.
//!
//! Why: the shared token-lane loop (`sparse_rows.rs`) puts tokens in vector lanes and pads
//! them to 16, so at 1–8 tokens most of every FMA is padding, and block sparsity at 90% ran
//! only 1.3–2.7× dense where its weight stream is a tenth of dense's. Here the activations
//! are copied token-minor (one K row = 8 floats = one ymm: every token at once), and each
//! kept weight of a block is broadcast and FMA'd against the K row its block column names:
//! one activation load feeds a whole register tile of block rows, so a weight costs a
//! broadcast and an FMA.

use super::sparse_rows::{TOKEN_MINOR, token_minor_copy};
use rayon::prelude::*;

/// Most tokens the kernel takes: the token-minor copy's K row is one ymm.
pub(crate) const MAX_COLS: usize = TOKEN_MINOR;

/// Block rows a parallel task takes: enough weights that scheduling costs nothing
/// measurable, few enough that the two threads balance.
const BLOCK_ROWS_PER_TASK: usize = 4;

/// A BSR matrix as the kernel reads it: `br × bc` blocks, row-major inside a block,
/// `block_ptr` per block row into `block_cols` (block column indices) and `values`.
pub(crate) struct Blocks<'a> {
    pub br: usize,
    pub bc: usize,
    pub block_ptr: &'a [u32],
    pub block_cols: &'a [u32],
    pub values: &'a [f32],
}

/// `y[rows × cols] = W · x`, where row `r` of `x` starts at `x[r · xs]` (`xs ≥ cols`).
///
/// Panics unless AVX2 and FMA were detected (the caller dispatches on them), `cols` is
/// `1 ..= MAX_COLS`, or a buffer is shorter than its shape.
pub(crate) fn spmm(
    b: &Blocks<'_>,
    k: usize,
    threads: usize,
    (x, xs): (&[f32], usize),
    y: &mut [f32],
    cols: usize,
) {
    #[cfg(target_arch = "x86_64")]
    assert!(
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
        "the BSR few-token kernel needs AVX2 and FMA"
    );
    let block_rows = b.block_ptr.len() - 1;
    assert!(
        (1..=MAX_COLS).contains(&cols),
        "BSR few-token kernel: {cols} tokens"
    );
    assert!(y.len() == block_rows * b.br * cols && (k == 0 || (k - 1) * xs + cols <= x.len()));
    assert!(b.values.len() == b.block_cols.len() * b.br * b.bc);
    assert!(b.block_ptr[block_rows] as usize == b.block_cols.len());
    assert!(
        b.block_cols.iter().all(|&c| (c as usize + 1) * b.bc <= k),
        "BSR few-token kernel: block column outside K"
    );
    let xm = token_minor_copy((x, xs), k, cols);
    let task = |(t, y_part): (usize, &mut [f32])| {
        let brow0 = t * BLOCK_ROWS_PER_TASK;
        for (i, y_brow) in y_part.chunks_exact_mut(b.br * cols).enumerate() {
            // SAFETY: AVX2 and FMA were asserted; the block row's blocks lie inside `values`
            // and their columns inside `xm` (asserted above), and `y_brow` holds its `br`
            // rows of `cols` floats.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                block_row(b, brow0 + i, &xm, y_brow, cols)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (y_brow, &xm);
        }
    };
    if threads > 1 {
        y.par_chunks_mut(BLOCK_ROWS_PER_TASK * b.br * cols)
            .enumerate()
            .for_each(task);
    } else {
        y.chunks_mut(BLOCK_ROWS_PER_TASK * b.br * cols)
            .enumerate()
            .for_each(task);
    }
}

/// One block row, its rows in register tiles of up to 8 (8 ymm sums, 8 independent chains).
///
/// # Safety
/// As [`avx2::rows`] for every tile.
#[cfg(target_arch = "x86_64")]
unsafe fn block_row(b: &Blocks<'_>, brow: usize, xm: &[f32], y: &mut [f32], cols: usize) {
    let (e0, e1) = (b.block_ptr[brow] as usize, b.block_ptr[brow + 1] as usize);
    let tile = (
        &b.block_cols[e0..e1],
        &b.values[e0 * b.br * b.bc..e1 * b.br * b.bc],
    );
    let mut r0 = 0;
    while r0 < b.br {
        let left = b.br - r0;
        let y_rows = &mut y[r0 * cols..];
        // SAFETY: the caller's contract, rows `r0 .. r0 + R <= br`.
        let done = unsafe {
            match left {
                8.. => avx2::rows::<8>(b, tile, r0, xm, y_rows, cols),
                4.. => avx2::rows::<4>(b, tile, r0, xm, y_rows, cols),
                2.. => avx2::rows::<2>(b, tile, r0, xm, y_rows, cols),
                _ => avx2::rows::<1>(b, tile, r0, xm, y_rows, cols),
            }
        };
        r0 += done;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Blocks, MAX_COLS};
    use std::arch::x86_64::*;

    /// Rows `r0 .. r0 + R` of a block row (`cols`, `values`: its blocks): for each token
    /// `c < cols`, `y[i · cols + c] = Σ_blocks Σ_j block[r0 + i][j] · xm[8 · (bcol · bc + j) + c]`.
    /// Returns `R`.
    ///
    /// # Safety
    /// AVX2 and FMA; `values` holds `br · bc` floats per block of `block_cols`, every block
    /// column's `bc` K rows lie inside `xm` (8 floats each); `r0 + R <= br`; `y` holds `R`
    /// rows of `cols <= 8` floats.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rows<const R: usize>(
        b: &Blocks<'_>,
        (block_cols, values): (&[u32], &[f32]),
        r0: usize,
        xm: &[f32],
        y: &mut [f32],
        cols: usize,
    ) -> usize {
        let (br, bc) = (b.br, b.bc);
        let mut acc = [_mm256_setzero_ps(); R];
        for (block, &bcol) in values.chunks_exact(br * bc).zip(block_cols) {
            let w = block[r0 * bc..].as_ptr();
            let x = xm[bcol as usize * bc * MAX_COLS..].as_ptr();
            for j in 0..bc {
                // SAFETY: K row `bcol · bc + j` of `xm` and value `(r0 + i) · bc + j` of the
                // block (contract).
                unsafe {
                    let xv = _mm256_loadu_ps(x.add(j * MAX_COLS));
                    for (i, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(_mm256_set1_ps(*w.add(i * bc + j)), xv, *a);
                    }
                }
            }
        }
        for (i, a) in acc.iter().enumerate() {
            let mut out = [0.0f32; MAX_COLS];
            // SAFETY: `out` holds 8 floats.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), *a) };
            y[i * cols..(i + 1) * cols].copy_from_slice(&out[..cols]);
        }
        R
    }
}
