//! The BSR kernel for products with 1–16 tokens (decode-time batches): AVX2 + FMA up to 8
//! tokens, AVX-512 for 9–16.
//!
//! Why: the shared token-lane loop (`sparse_rows.rs`) puts tokens in vector lanes and pads
//! them to 16, so at 1–8 tokens most of every FMA is padding, and block sparsity at 90% ran
//! only 1.3–2.7× dense where its weight stream is a tenth of dense's; from 9 to 16 tokens
//! that loop, which takes two rows a pass, ran 1.9–2.2× the dense comparator on 4096². Here
//! the activations are copied token-minor (one K row = one vector: every token at once, 8
//! floats for a ymm or 16 for a zmm), and each kept weight of a block is broadcast and FMA'd
//! against the K row its block column names: one activation load feeds a whole register tile
//! of block rows (8 on AVX2's 16 registers, 16 on AVX-512's 32), so a weight costs a
//! broadcast and an FMA. The next blocks' weights and activation rows are prefetched: their
//! block columns are known in advance, and the activation rows they name are scattered.

#[cfg(target_arch = "x86_64")]
use super::lanes::Vector;
use super::nm::Isa;
use super::sparse_rows::{prefetch, token_minor_copy};
use rayon::prelude::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{__m256, __m512};

/// Tokens the AVX2 form takes at most: one ymm.
const YMM_TOKENS: usize = 8;
/// Tokens the AVX-512 form takes at most: one zmm.
const ZMM_TOKENS: usize = 16;

/// Block rows a parallel task takes: enough weights that scheduling costs nothing
/// measurable, few enough that the two threads balance.
const BLOCK_ROWS_PER_TASK: usize = 4;

/// Blocks ahead whose weights and activation rows are prefetched. At 2, 16×16 blocks at 90%
/// on 4096² went from 0.36 to 0.31–0.32 ms at 8 tokens and from 0.38–0.39 to 0.33 at one
/// (`sparsegate bench`, 2 threads).
const PREFETCH_BLOCKS_AHEAD: usize = 2;

/// Most tokens the kernel takes on `isa`: 0 on the portable build, which has no vectors to
/// put them in.
pub(crate) fn max_cols(isa: Isa) -> usize {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => ZMM_TOKENS,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => YMM_TOKENS,
        Isa::Portable => 0,
    }
}

/// A BSR matrix as the kernel reads it: `br × bc` blocks, row-major inside a block,
/// `block_ptr` per block row into `block_cols` (block column indices) and `values`.
pub(crate) struct Blocks<'a> {
    pub br: usize,
    pub bc: usize,
    pub block_ptr: &'a [u32],
    pub block_cols: &'a [u32],
    pub values: &'a [f32],
}

/// `y[rows × cols] = W · x`, where row `r` of `x` starts at `x[r · xs]` (`xs ≥ cols`): ymm
/// vectors up to 8 tokens, zmm from 9.
///
/// Panics unless `cols` is `1 ..= max_cols(isa)` and `isa` was detected (the caller
/// dispatches on it), or if a buffer is shorter than its shape.
pub(crate) fn spmm(
    b: &Blocks<'_>,
    (k, isa): (usize, Isa),
    threads: usize,
    (x, xs): (&[f32], usize),
    y: &mut [f32],
    cols: usize,
) {
    assert!(
        (1..=max_cols(isa)).contains(&cols),
        "BSR few-token kernel: {cols} tokens on {isa:?}"
    );
    #[cfg(target_arch = "x86_64")]
    assert!(
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && (cols <= YMM_TOKENS || is_x86_feature_detected!("avx512f")),
        "the BSR few-token kernel needs AVX2 and FMA, and AVX-512F past 8 tokens"
    );
    let block_rows = b.block_ptr.len() - 1;
    assert!(y.len() == block_rows * b.br * cols && (k == 0 || (k - 1) * xs + cols <= x.len()));
    assert!(b.values.len() == b.block_cols.len() * b.br * b.bc);
    assert!(b.block_ptr[block_rows] as usize == b.block_cols.len());
    assert!(
        b.block_cols.iter().all(|&c| (c as usize + 1) * b.bc <= k),
        "BSR few-token kernel: block column outside K"
    );
    let lanes = if cols <= YMM_TOKENS { YMM_TOKENS } else { ZMM_TOKENS };
    let xm = token_minor_copy((x, xs), k, cols, lanes);
    let task = |(t, y_part): (usize, &mut [f32])| {
        let brow0 = t * BLOCK_ROWS_PER_TASK;
        for (i, y_brow) in y_part.chunks_exact_mut(b.br * cols).enumerate() {
            // SAFETY: AVX2 and FMA, and AVX-512F for zmm, were asserted; the block row's
            // blocks lie inside `values` and their columns inside `xm` (`lanes` floats a K
            // row; asserted above), and `y_brow` holds its `br` rows of `cols ≤ lanes` floats.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                if lanes == YMM_TOKENS {
                    block_row_ymm(b, brow0 + i, &xm, y_brow, cols)
                } else {
                    block_row_zmm(b, brow0 + i, &xm, y_brow, cols)
                }
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

/// One block row with 8-token ymm vectors, its rows in register tiles of up to 8 (8 sums,
/// 8 independent FMA chains, of AVX2's 16 registers).
///
/// # Safety
/// AVX2 and FMA; as [`rows`] for every tile, with `xm` 8 floats a K row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_row_ymm(b: &Blocks<'_>, brow: usize, xm: &[f32], y: &mut [f32], cols: usize) {
    let blocks = block_row_blocks(b, brow);
    let mut r0 = 0;
    while r0 < b.br {
        let y_rows = &mut y[r0 * cols..];
        // SAFETY: the caller's contract, rows `r0 .. r0 + R <= br`.
        r0 += unsafe {
            match b.br - r0 {
                8.. => rows::<__m256, 8>(b, blocks, r0, xm, y_rows, cols),
                4.. => rows::<__m256, 4>(b, blocks, r0, xm, y_rows, cols),
                2.. => rows::<__m256, 2>(b, blocks, r0, xm, y_rows, cols),
                _ => rows::<__m256, 1>(b, blocks, r0, xm, y_rows, cols),
            }
        };
    }
}

/// One block row with 16-token zmm vectors, its rows in register tiles of up to 16 (of
/// AVX-512's 32 registers: a 16-row block reads each activation row once).
///
/// # Safety
/// AVX-512F; as [`rows`] for every tile, with `xm` 16 floats a K row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn block_row_zmm(b: &Blocks<'_>, brow: usize, xm: &[f32], y: &mut [f32], cols: usize) {
    let blocks = block_row_blocks(b, brow);
    let mut r0 = 0;
    while r0 < b.br {
        let y_rows = &mut y[r0 * cols..];
        // SAFETY: the caller's contract, rows `r0 .. r0 + R <= br`.
        r0 += unsafe {
            match b.br - r0 {
                16.. => rows::<__m512, 16>(b, blocks, r0, xm, y_rows, cols),
                8.. => rows::<__m512, 8>(b, blocks, r0, xm, y_rows, cols),
                4.. => rows::<__m512, 4>(b, blocks, r0, xm, y_rows, cols),
                2.. => rows::<__m512, 2>(b, blocks, r0, xm, y_rows, cols),
                _ => rows::<__m512, 1>(b, blocks, r0, xm, y_rows, cols),
            }
        };
    }
}

/// Block row `brow`'s block columns and values.
fn block_row_blocks<'a>(b: &Blocks<'a>, brow: usize) -> (&'a [u32], &'a [f32]) {
    let (e0, e1) = (b.block_ptr[brow] as usize, b.block_ptr[brow + 1] as usize);
    (
        &b.block_cols[e0..e1],
        &b.values[e0 * b.br * b.bc..e1 * b.br * b.bc],
    )
}

/// Rows `r0 .. r0 + R` of a block row (`block_cols`, `values`: its blocks): for each token
/// `c < cols`, `y[i · cols + c] = Σ_blocks Σ_j block[r0 + i][j] · xm[L · (bcol · bc + j) + c]`
/// with `L = V::LANES`. Returns `R`.
///
/// # Safety
/// `V`'s instruction set (inlined into the `#[target_feature]` wrappers above); `values`
/// holds `br · bc` floats per block of `block_cols`, every block column's `bc` K rows lie
/// inside `xm` (`L` floats each); `r0 + R <= br`; `y` holds `R` rows of `cols <= L` floats.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn rows<V: Vector, const R: usize>(
    b: &Blocks<'_>,
    (block_cols, values): (&[u32], &[f32]),
    r0: usize,
    xm: &[f32],
    y: &mut [f32],
    cols: usize,
) -> usize {
    let (br, bc, lanes) = (b.br, b.bc, V::LANES);
    // SAFETY: `V`'s instruction set (contract).
    let mut acc = [unsafe { V::zero() }; R];
    for (n, (block, &bcol)) in values.chunks_exact(br * bc).zip(block_cols).enumerate() {
        if let Some(&next) = block_cols.get(n + PREFETCH_BLOCKS_AHEAD) {
            let rows = &values[(n + PREFETCH_BLOCKS_AHEAD) * br * bc..][r0 * bc..(r0 + R) * bc];
            for row in rows.chunks(bc) {
                row.chunks(16).for_each(|line| prefetch(line.as_ptr().cast()));
            }
            let x_rows = &xm[next as usize * bc * lanes..][..bc * lanes];
            x_rows.chunks(16).for_each(|line| prefetch(line.as_ptr().cast()));
        }
        let w = block[r0 * bc..].as_ptr();
        let x = xm[bcol as usize * bc * lanes..].as_ptr();
        for j in 0..bc {
            // SAFETY: K row `bcol · bc + j` of `xm` and value `(r0 + i) · bc + j` of the
            // block (contract).
            unsafe {
                let xv = V::load(x.add(j * lanes));
                for (i, a) in acc.iter_mut().enumerate() {
                    *a = V::mul_add(V::splat(*w.add(i * bc + j)), xv, *a);
                }
            }
        }
    }
    for (i, a) in acc.iter().enumerate() {
        let mut out = [0.0f32; ZMM_TOKENS];
        // SAFETY: `out` holds `L <= 16` floats.
        unsafe { a.store(out.as_mut_ptr()) };
        y[i * cols..(i + 1) * cols].copy_from_slice(&out[..cols]);
    }
    R
}
