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
//! The driver (packing, tasks, the walk over a block row) is `block_rows`, shared with the
//! int8 block kernel.
//!
//! Numerics as the dense bf16 kernel (see the parent module): products exact in f32, the
//! error that of f32 sums over the kept K positions.

use super::{PAIRS, bh, pack_pairs, pair};
use crate::block_rows::{self, BlockRow, LANES, Line, StoredBlocks, over_blocks, pick_block_tile, scatter};
use crate::shared_output::trivial_product;
use std::arch::x86_64::*;

/// Whether blocks of `br × bc` run here: whole panels of rows, whole pairs of K.
pub(crate) fn fits(br: usize, bc: usize) -> bool {
    br > 0 && bc > 0 && br.is_multiple_of(LANES) && bc.is_multiple_of(2)
}

/// bf16 weights of a block-sparse matrix as `vdpbf16ps` operands (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BlockPairs(StoredBlocks);

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
        let line = |b: usize, q: usize, p: usize| {
            let at = |lane: usize, c: usize| values[b * br * bc + (p * LANES + lane) * bc + c];
            Line(std::array::from_fn(|lane| {
                pair(at(lane, 2 * q), at(lane, 2 * q + 1))
            }))
        };
        let blocks = (block_ptr.to_vec(), block_cols.to_vec());
        BlockPairs(StoredBlocks::new((n, k), (br, bc / 2), blocks, line))
    }

    /// `y[n × m] = W · x[k × m]`, f32 sums, on `threads` workers of the current rayon pool
    /// (1 runs on the calling thread).
    ///
    /// # Safety
    /// [`super::available`] returned true; `x.len() == k·m` and `y.len() == n·m`.
    pub(crate) unsafe fn spmm(&self, threads: usize, x: &[u16], y: &mut [f32], m: usize) {
        let (n, k) = self.0.shape();
        debug_assert!(x.len() == k * m && y.len() == n * m);
        if trivial_product(y, n, k, m) {
            return;
        }
        // SAFETY: SSE2 is part of x86-64; `out` holds the tile's `k/2 · 8` pairs.
        let pack = |(t, out): (usize, &mut [u32])| unsafe { pack_pairs(x, k, m, t, out) };
        let pick = |panels, tokens| pick_block_tile!(tile, f32, panels, tokens);
        // SAFETY: the caller checked the features and the lengths.
        unsafe { block_rows::product(&self.0, None, (threads, m, k / 2), y, (&PAIRS, &pack), pick) }
    }

    /// Bytes of stored values (bf16), the zeros inside kept blocks included.
    pub(crate) fn value_bytes(&self) -> usize {
        self.0.value_bytes()
    }
}

/// `P` panels × `T` tokens of one block row over all its blocks, K pairs into `U` copies of
/// the sums, then written to `y`.
///
/// # Safety
/// AVX-512F/BW/BF16; as for a [`block_rows::TileFn`].
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn tile<const P: usize, const T: usize, const U: usize>(row: BlockRow, x: *const u32, y: *mut f32) {
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
    // SAFETY: the contract is the helper's.
    unsafe { over_blocks(&row, x, &mut a, step) };
    let (total, rest) = a.split_first_mut().expect("U >= 1");
    for au in rest.iter() {
        for (tp, up) in total.iter_mut().zip(au) {
            for (tv, &uv) in tp.iter_mut().zip(up) {
                *tv = _mm512_add_ps(*tv, uv);
            }
        }
    }
    let mut sums = [0.0f32; LANES];
    for (p, tp) in total.iter().enumerate() {
        for (t, &v) in tp.iter().enumerate() {
            // SAFETY: 16 writable floats; panel p's rows of `y`, token t (contract).
            unsafe {
                _mm512_storeu_ps(sums.as_mut_ptr(), v);
                scatter(&sums, y.add(p * LANES * row.m), row.m, t);
            }
        }
    }
}
