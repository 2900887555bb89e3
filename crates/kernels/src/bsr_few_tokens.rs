//! The BSR kernel for products with few tokens (decode-time batches): AVX2 + FMA up to 8
//! tokens, AVX-512 for 9–48.
//!
//! Why: the shared token-lane loop (`sparse_rows.rs`) puts tokens in vector lanes and pads
//! them to 16, so at 1–8 tokens most of every FMA is padding, and block sparsity at 90% ran
//! only 1.3–2.7× dense where its weight stream is a tenth of dense's; from 9 to 48 tokens
//! that loop, which takes two rows a pass, ran 1.8–3.0× the dense comparator on 4096². Here
//! the activations are copied token-minor (one K row = every token at once: one ymm of 8
//! floats, or one to three zmm of 16), and each kept weight of a block is broadcast and
//! FMA'd against the K row its block column names: one activation load feeds a whole
//! register tile of block rows (8 on AVX2's 16 registers, 16 or 8 on AVX-512's 32), so a
//! weight costs a broadcast and an FMA per vector. The next blocks' weights and activation rows are prefetched: their
//! block columns are known in advance, and the activation rows they name are scattered.

#[cfg(target_arch = "x86_64")]
use super::lanes::Vector;
use super::nm::Isa;
use super::sparse_rows::{prefetch, token_minor_copy};
use crate::shared_output::for_each_chunk;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{__m256, __m512};

/// Tokens the AVX2 form takes at most: one ymm.
const YMM_TOKENS: usize = 8;
/// f32 lanes of a zmm.
const ZMM_LANES: usize = 16;
/// Tokens the AVX-512 form takes at most: 3 zmm a K row. At 64 tokens (4 zmm, register
/// tiles of 4 rows) 16×16 blocks at 90% on 4096² ran 3.4× dense against the shared loop's
/// 4.2×; at 48 5.3× against 2.9×.
const ZMM_TOKENS: usize = 3 * ZMM_LANES;

/// Block rows a parallel task takes: enough weights that scheduling costs nothing
/// measurable, few enough that the two threads balance.
const BLOCK_ROWS_PER_TASK: usize = 4;

/// Blocks ahead whose weights and activation rows are prefetched. At 2, 16×16 blocks at 90%
/// on 4096² went from 0.36 to 0.31–0.32 ms at 8 tokens and from 0.38–0.39 to 0.33 at one
/// (`sparsegate bench`, 2 threads).
const PREFETCH_BLOCKS_AHEAD: usize = 2;
/// Values a block needs for the prefetch to pay: 8×1 blocks at 50% on 4096² ran at half
/// speed with it (4 tokens 0.63 → 0.33× dense), a prefetch or two for every FMA or two.
const PREFETCH_MIN_BLOCK: usize = 64;

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
        crate::cpu::has!("avx2")
            && crate::cpu::has!("fma")
            && (cols <= YMM_TOKENS || crate::cpu::has!("avx512f")),
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
    // Vectors a K row: one ymm, or 1–3 zmm.
    let (lanes, zmm) = if cols <= YMM_TOKENS {
        (YMM_TOKENS, 0)
    } else {
        let zmm = cols.div_ceil(ZMM_LANES);
        (zmm * ZMM_LANES, zmm)
    };
    let xm = token_minor_copy((x, xs), k, cols, lanes);
    let task = |(t, y_part): (usize, &mut [f32])| {
        let brow0 = t * BLOCK_ROWS_PER_TASK;
        for (i, y_brow) in y_part.chunks_exact_mut(b.br * cols).enumerate() {
            // SAFETY: AVX2 and FMA, and AVX-512F for zmm, were asserted; the block row's
            // blocks lie inside `values` and their columns inside `xm` (`lanes` floats a K
            // row; asserted above), and `y_brow` holds its `br` rows of `cols ≤ lanes` floats.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                match zmm {
                    0 => block_row_ymm(b, brow0 + i, &xm, y_brow, cols),
                    1 => block_row_zmm::<1>(b, brow0 + i, &xm, y_brow, cols),
                    2 => block_row_zmm::<2>(b, brow0 + i, &xm, y_brow, cols),
                    _ => block_row_zmm::<3>(b, brow0 + i, &xm, y_brow, cols),
                }
            };
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (y_brow, &xm);
        }
    };
    for_each_chunk(y, BLOCK_ROWS_PER_TASK * b.br * cols, threads > 1, task);
}

/// One block row with 8-token ymm vectors, its rows in register tiles of up to 8 (8 sums,
/// 8 independent FMA chains, of AVX2's 16 registers).
///
/// # Safety
/// AVX2 and FMA; as [`block_row`], with `xm` 8 floats a K row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_row_ymm(b: &Blocks<'_>, brow: usize, xm: &[f32], y: &mut [f32], cols: usize) {
    // SAFETY: the caller's contract.
    unsafe { block_row::<__m256, 1>(b, brow, (xm, y, cols), 8) }
}

/// One block row with `W` zmm vectors of 16 tokens a row, its rows in register tiles of up
/// to 16 rows at 1 vector (16 sums: a 16-row block reads each activation row once) and 8 at
/// 2–3 (16–24 sums, of AVX-512's 32 registers).
///
/// # Safety
/// AVX-512F; as [`block_row`], with `xm` `16·W` floats a K row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn block_row_zmm<const W: usize>(b: &Blocks<'_>, brow: usize, xm: &[f32], y: &mut [f32], cols: usize) {
    let widest = if W == 1 { 16 } else { 8 };
    // SAFETY: the caller's contract.
    unsafe { block_row::<__m512, W>(b, brow, (xm, y, cols), widest) }
}

/// Block row `brow` in register tiles of up to `widest` rows (16 or 8), then 4, 2 and 1.
///
/// # Safety
/// `V`'s instruction set (inlined into the wrappers above); as [`rows`] for every tile.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn block_row<V: Vector, const W: usize>(
    b: &Blocks<'_>,
    brow: usize,
    (xm, y, cols): (&[f32], &mut [f32], usize),
    widest: usize,
) {
    let blocks = block_row_blocks(b, brow);
    let mut r0 = 0;
    while r0 < b.br {
        let y_rows = &mut y[r0 * cols..];
        // SAFETY: the caller's contract, rows `r0 .. r0 + R <= br`.
        r0 += unsafe {
            match b.br - r0 {
                16.. if widest >= 16 => rows::<V, 16, W>(b, blocks, r0, xm, y_rows, cols),
                8.. => rows::<V, 8, W>(b, blocks, r0, xm, y_rows, cols),
                4.. => rows::<V, 4, W>(b, blocks, r0, xm, y_rows, cols),
                2.. => rows::<V, 2, W>(b, blocks, r0, xm, y_rows, cols),
                _ => rows::<V, 1, W>(b, blocks, r0, xm, y_rows, cols),
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

/// Rows `r0 .. r0 + R` of a block row (`block_cols`, `values`: its blocks), `W` vectors of
/// tokens a row: for each token `c < cols`,
/// `y[i · cols + c] = Σ_blocks Σ_j block[r0 + i][j] · xm[L · (bcol · bc + j) + c]` with
/// `L = W · V::LANES`. Returns `R`.
///
/// # Safety
/// `V`'s instruction set (inlined into the `#[target_feature]` wrappers above); `values`
/// holds `br · bc` floats per block of `block_cols`, every block column's `bc` K rows lie
/// inside `xm` (`L` floats each); `r0 + R <= br`; `y` holds `R` rows of `cols <= L` floats.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn rows<V: Vector, const R: usize, const W: usize>(
    b: &Blocks<'_>,
    (block_cols, values): (&[u32], &[f32]),
    r0: usize,
    xm: &[f32],
    y: &mut [f32],
    cols: usize,
) -> usize {
    let (br, bc, lanes) = (b.br, b.bc, W * V::LANES);
    // SAFETY: `V`'s instruction set (contract).
    let mut acc = [[unsafe { V::zero() }; W]; R];
    let blocks = values.chunks_exact(br * bc).zip(block_cols);
    if br * bc < PREFETCH_MIN_BLOCK {
        for (block, &bcol) in blocks {
            // SAFETY: the block's K rows lie inside `xm`, the tile's rows inside the block
            // (contract).
            unsafe {
                block_fmas::<V, R, W>(&mut acc, &block[r0 * bc..], &xm[bcol as usize * bc * lanes..], bc)
            };
        }
    } else {
        for (n, (block, &bcol)) in blocks.enumerate() {
            if let Some(&next) = block_cols.get(n + PREFETCH_BLOCKS_AHEAD) {
                // The tile's rows of that block are one run of `R · bc` values.
                let rows = &values[(n + PREFETCH_BLOCKS_AHEAD) * br * bc..][r0 * bc..(r0 + R) * bc];
                rows.chunks(16).for_each(|line| prefetch(line.as_ptr().cast()));
                let x_rows = &xm[next as usize * bc * lanes..][..bc * lanes];
                x_rows.chunks(16).for_each(|line| prefetch(line.as_ptr().cast()));
            }
            // SAFETY: as above.
            unsafe {
                block_fmas::<V, R, W>(&mut acc, &block[r0 * bc..], &xm[bcol as usize * bc * lanes..], bc)
            };
        }
    }
    for (i, row) in acc.iter().enumerate() {
        let mut out = [0.0f32; ZMM_TOKENS];
        for (v, a) in row.iter().enumerate() {
            // SAFETY: `out` holds `L <= 48` floats.
            unsafe { a.store(out.as_mut_ptr().add(v * V::LANES)) };
        }
        y[i * cols..(i + 1) * cols].copy_from_slice(&out[..cols]);
    }
    R
}

/// One block into the register tile: `acc[i] += Σ_j w[i · bc + j] · x[j · L ..]` for the
/// tile's `R` rows (`w` from the tile's first row in the block) and the block's `bc` K rows
/// of `x`, `L = W · V::LANES` floats each.
///
/// A function rather than a closure in [`rows`]: closures do not inherit the target features
/// of the function they are written in, and the vector methods would not inline (16×16
/// blocks ran at a twentieth of the speed).
///
/// # Safety
/// `V`'s instruction set; `w` holds `(R - 1) · bc + bc` floats and `x` `bc · L`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn block_fmas<V: Vector, const R: usize, const W: usize>(
    acc: &mut [[V; W]; R],
    w: &[f32],
    x: &[f32],
    bc: usize,
) {
    let lanes = W * V::LANES;
    let (w, x) = (w.as_ptr(), x.as_ptr());
    for j in 0..bc {
        // SAFETY: K row `j < bc` of `x` and value `i · bc + j` of `w` (contract).
        unsafe {
            let xv: [V; W] = std::array::from_fn(|v| V::load(x.add(j * lanes + v * V::LANES)));
            for (i, row) in acc.iter_mut().enumerate() {
                let wv = V::splat(*w.add(i * bc + j));
                for (a, &xv) in row.iter_mut().zip(&xv) {
                    *a = V::mul_add(wv, xv, *a);
                }
            }
        }
    }
}
