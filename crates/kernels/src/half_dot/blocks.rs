//! bf16 block sparsity (BSR) on `vdpbf16ps`, rows in lanes: `y[N×M] = W · x[K×M]`.
//!
//! Why: a bf16 block-sparse slice had widened its kept blocks to f32 and run the f32 BSR
//! kernel, one multiply per f32 lane, against a dense comparator doing two per lane with
//! `vdpbf16ps`: the sparse side ran at half the CPU's bf16 rate, and its speedup said so
//! (issue 20: "Unstructured and block formats for int8 and bf16 likewise").
//!
//! * **Shapes.** Block rows that are whole panels (`br` a multiple of 16) and block columns
//!   of whole K-pairs (`bc` even): a block is then `bc / 2` pairs × `br / 16` panels of
//!   [`Line`]s, exactly the dense kernel's operand, and nothing in a kept block is padding.
//!   Other shapes keep the f32 kernel ([`fits`] says which).
//! * **Layout.** Per block row, its kept blocks in ascending column order, each as
//!   `[pair][panel]` lines (`[block][pair][panel]` over the matrix), so a block row is one
//!   sequential stream for the hardware prefetcher; one u32 block column per block and a
//!   pointer per block row, as in [`crate::bsr::BsrMatrix`].
//! * **Kernel.** The activations are packed per 8-token tile as K-pairs per token (the dense
//!   kernel's `[pair][8]`), so a block's activations are `bc / 2 · 8` consecutive pairs of
//!   the tile. A register tile is up to three panels of a block row × up to eight tokens,
//!   its sums in registers across all the row's blocks (no K blocking: the row's weights
//!   for one panel group are `blocks · bc · 64` bytes, in L1/L2 while the task's token tiles
//!   pass over them), then scattered into `y`. One to three tokens keep several copies of
//!   the sums, as the dense tile does, so `vdpbf16ps`'s latency stays covered.
//!
//! Numerics as the dense bf16 kernel (see the parent module): products exact in f32, the
//! error that of f32 sums over the kept K positions.

use super::{LANES, Line, PAIRS, TOKENS, bh, pack_pairs, pair};
use crate::schedule::TaskGrid;
use crate::shared_output::{SharedOutput, trivial_product};
use rayon::prelude::*;
use std::arch::x86_64::*;

/// Panels per register tile at most: 3 × 8 tokens = 24 accumulators, as the dense tile.
const MAX_PANELS: usize = 3;

/// Whether blocks of `br × bc` run here: whole panels of rows, whole pairs of K.
pub(crate) fn fits(br: usize, bc: usize) -> bool {
    br > 0 && bc > 0 && br.is_multiple_of(LANES) && bc.is_multiple_of(2)
}

/// bf16 weights of a block-sparse matrix as `vdpbf16ps` operands (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BlockPairs {
    n: usize,
    k: usize,
    br: usize,
    bc: usize,
    /// First block of each block row, and one past the last.
    block_ptr: Vec<u32>,
    /// Block column of each block.
    block_cols: Vec<u32>,
    /// `[block][pair][panel]` lines.
    lines: Vec<Line>,
}

impl BlockPairs {
    /// Pack a BSR matrix given as its parts: `n × k` in `br × bc` blocks ([`fits`]), the
    /// blocks' bf16 values (bits) row-major inside each block, `br · bc` per block.
    pub(crate) fn new(
        (n, k): (usize, usize),
        (br, bc): (usize, usize),
        block_ptr: &[u32],
        block_cols: &[u32],
        values: &[u16],
    ) -> BlockPairs {
        debug_assert!(fits(br, bc) && n.is_multiple_of(br) && k.is_multiple_of(bc));
        debug_assert_eq!(values.len(), block_cols.len() * br * bc);
        let (pairs, panels) = (bc / 2, br / LANES);
        let mut lines = vec![Line::default(); block_cols.len() * pairs * panels];
        if !lines.is_empty() {
            lines
                .par_chunks_mut(pairs * panels)
                .zip(values.par_chunks(br * bc))
                .for_each(|(out, block)| {
                    for (i, line) in out.iter_mut().enumerate() {
                        let (q, p) = (i / panels, i % panels);
                        let at = |lane: usize, c: usize| block[(p * LANES + lane) * bc + c];
                        *line = Line(std::array::from_fn(|lane| {
                            pair(at(lane, 2 * q), at(lane, 2 * q + 1))
                        }));
                    }
                });
        }
        BlockPairs {
            n,
            k,
            br,
            bc,
            block_ptr: block_ptr.to_vec(),
            block_cols: block_cols.to_vec(),
            lines,
        }
    }

    /// `y[n × m] = W · x[k × m]`, f32 sums, on `threads` workers of the current rayon pool
    /// (1 runs on the calling thread).
    ///
    /// # Safety
    /// [`super::available`] returned true; `x.len() == k·m` and `y.len() == n·m`.
    pub(crate) unsafe fn spmm(&self, threads: usize, x: &[u16], y: &mut [f32], m: usize) {
        debug_assert!(x.len() == self.k * m && y.len() == self.n * m);
        if trivial_product(y, self.n, self.k, m) {
            return;
        }
        let (pairs, panels) = (self.bc / 2, self.br / LANES);
        let tiles = m.div_ceil(TOKENS);
        let tile_len = self.k / 2 * TOKENS;
        let mut packed = PAIRS.with(|s| std::mem::take(&mut *s.borrow_mut()));
        packed.resize(tiles * tile_len, 0);
        let pack = |(t, out): (usize, &mut [u32])| {
            // SAFETY: SSE2 is part of x86-64; `out` holds the tile's `k/2 · 8` pairs.
            unsafe { pack_pairs(x, self.k, m, t, out) }
        };
        let packed_s = &mut packed[..tiles * tile_len];
        if threads > 1 {
            packed_s.par_chunks_mut(tile_len).enumerate().for_each(pack);
        } else {
            packed_s.chunks_mut(tile_len).enumerate().for_each(pack);
        }
        let xp = &*packed_s;

        let block_rows = self.n / self.br;
        let grid = TaskGrid::new(block_rows, tiles, threads, usize::MAX);
        // Each task writes its own block rows × tokens of `y`; the tasks join before this
        // returns.
        let out = SharedOutput(y.as_mut_ptr());
        let task = |t: usize| {
            let (row_range, tile_range) = grid.task(t);
            for brow in row_range {
                let (b0, b1) = (self.block_ptr[brow] as usize, self.block_ptr[brow + 1] as usize);
                for p0 in (0..panels).step_by(MAX_PANELS) {
                    let group = (panels - p0).min(MAX_PANELS);
                    let row = BlockRow {
                        lines: self.lines[(b0 * pairs * panels).min(self.lines.len())..]
                            .as_ptr()
                            .wrapping_add(p0),
                        cols: self.block_cols[b0..b1].as_ptr(),
                        blocks: b1 - b0,
                        pairs,
                        stride: panels,
                        m,
                    };
                    for tile in tile_range.clone() {
                        let tokens = (m - tile * TOKENS).min(TOKENS);
                        let f = pick_block_tile(group, tokens);
                        let y_at = out.at((brow * self.br + p0 * LANES) * m + tile * TOKENS);
                        // SAFETY: the features were checked (caller); the row's `blocks`
                        // blocks have `pairs · panels` lines from `lines` (offset by the
                        // panel group, `group ≤ panels - p0`) and their columns index pairs
                        // of the packed tile; `y_at` starts this task's `group · 16` rows ×
                        // `tokens` tokens, inside `y`.
                        unsafe { f(row, xp[tile * tile_len..].as_ptr(), y_at) };
                    }
                }
            }
        };
        if threads > 1 {
            (0..grid.tasks()).into_par_iter().for_each(task);
        } else {
            (0..grid.tasks()).for_each(task);
        }
        PAIRS.with(|s| *s.borrow_mut() = packed);
    }

    /// Bytes of stored values (bf16), the zeros inside kept blocks included.
    pub(crate) fn value_bytes(&self) -> usize {
        self.lines.len() * 64
    }
}

/// One block row's kept blocks for one panel group.
#[derive(Clone, Copy)]
struct BlockRow {
    /// The row's first block's first line, offset by the group's first panel.
    lines: *const Line,
    cols: *const u32,
    blocks: usize,
    /// Pairs per block (`bc / 2`).
    pairs: usize,
    /// Lines per pair: the block row's panels.
    stride: usize,
    /// Tokens of the product: the row stride of `y`.
    m: usize,
}

type BlockTileFn = unsafe fn(BlockRow, *const u32, *mut f32);

/// The register tile for `panels` × `tokens`, with the sums in `U` copies at 1–3 tokens.
fn pick_block_tile(panels: usize, tokens: usize) -> BlockTileFn {
    macro_rules! by_tokens {
        ($p:literal) => {
            match tokens {
                1 => block_tile::<$p, 1, 4> as BlockTileFn,
                2 => block_tile::<$p, 2, 2>,
                3 => block_tile::<$p, 3, 2>,
                4 => block_tile::<$p, 4, 1>,
                5 => block_tile::<$p, 5, 1>,
                6 => block_tile::<$p, 6, 1>,
                7 => block_tile::<$p, 7, 1>,
                _ => block_tile::<$p, 8, 1>,
            }
        };
    }
    match panels {
        1 => by_tokens!(1),
        2 => by_tokens!(2),
        _ => by_tokens!(3),
    }
}

/// `P` panels × `T` tokens of one block row over all its blocks, K steps into `U` copies
/// of the sums, then written to `y` (row `r`, token `t` at `y[r·m + t]`).
///
/// # Safety
/// AVX-512F/BW/BF16; `row` as [`BlockRow`] says, with `P ≤ stride` lines a pair; `x` is a
/// packed tile holding every pair the blocks' columns name; `y` has `16·P` rows of `m`
/// floats from its start, `T` tokens each, written by no one else meanwhile.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn block_tile<const P: usize, const T: usize, const U: usize>(
    row: BlockRow,
    x: *const u32,
    y: *mut f32,
) {
    let mut a = [[[_mm512_setzero_ps(); T]; P]; U];
    let step = |a: &mut [[__m512; T]; P], w: *const Line, xq: *const u32| {
        // SAFETY: `P` lines of one pair and `T` tokens of its packed activations (contract).
        let wv: [__m512bh; P] = std::array::from_fn(|p| bh(unsafe { _mm512_load_si512(w.add(p).cast()) }));
        for t in 0..T {
            // SAFETY: as above.
            let xb = bh(_mm512_set1_epi32(unsafe { xq.add(t).read() } as i32));
            for (ap, &wp) in a.iter_mut().zip(&wv) {
                ap[t] = _mm512_dpbf16_ps(ap[t], wp, xb);
            }
        }
    };
    for b in 0..row.blocks {
        // SAFETY: block b < blocks of the row (contract).
        let (w, xb) = unsafe {
            let col = row.cols.add(b).read() as usize;
            (
                row.lines.add(b * row.pairs * row.stride),
                x.add(col * row.pairs * TOKENS),
            )
        };
        let mut q = 0;
        while q + U <= row.pairs {
            for (u, au) in a.iter_mut().enumerate() {
                step(
                    au,
                    w.wrapping_add((q + u) * row.stride),
                    xb.wrapping_add((q + u) * TOKENS),
                );
            }
            q += U;
        }
        for q in q..row.pairs {
            step(
                &mut a[0],
                w.wrapping_add(q * row.stride),
                xb.wrapping_add(q * TOKENS),
            );
        }
    }
    let (total, rest) = a.split_first_mut().expect("U >= 1");
    for au in rest.iter() {
        for (tp, up) in total.iter_mut().zip(au) {
            for (tv, &uv) in tp.iter_mut().zip(up) {
                *tv = _mm512_add_ps(*tv, uv);
            }
        }
    }
    let mut lanes = [0.0f32; LANES];
    for (p, tp) in total.iter().enumerate() {
        for (t, &v) in tp.iter().enumerate() {
            // SAFETY: 16 writable floats.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), v) };
            for (lane, &s) in lanes.iter().enumerate() {
                // SAFETY: row `16p + lane < 16·P`, token `t < T` (contract).
                unsafe { y.add((p * LANES + lane) * row.m + t).write(s) };
            }
        }
    }
}
