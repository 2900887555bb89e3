//! int8 block sparsity on AVX-512 VNNI, rows in lanes: `y[N×M] = W · x[K×M]`, i8 × i8 →
//! i32, bit-exact.
//!
//! Why: an int8 block-sparse slice had no sparse kernel at all and fell back to dense (issue
//! 20: "Unstructured and block formats for int8 and bf16 likewise"). Kept entries per row
//! (u32 positions, [`super::int8_vnni::SparseQuads`]) would run it, but a block's rows share
//! their K positions, so one index per block and the dense kernel's operand shape do.
//!
//! * **Shapes.** Block rows of whole panels (`br` a multiple of 16) and block columns of
//!   whole quads (`bc` a multiple of 4): a block is `bc / 4` quads × `br / 16` panels of 64
//!   bytes, each one `vpdpbusd` weight operand (16 rows × four i8), and nothing in a kept
//!   block is padding. Other shapes take the kept-entries kernel ([`fits`] says which).
//! * **Layout.** Per block row, its kept blocks (any non-zero weight) in ascending column
//!   order, each as `[quad][panel]` lines, so a block row is one sequential stream; one u32
//!   block column per block and a pointer per block row, as BSR.
//! * **Kernel.** The activations are packed per 8-token tile as quads of `x + 128` per token
//!   (`[quad][8]` u32), so a block's activations are `bc / 4 · 8` consecutive words of the
//!   tile and each token's quad is one 32-bit broadcast (the unsigned operand). A register
//!   tile is up to three panels × up to eight tokens, its sums in registers across all the
//!   row's blocks, started from `-128 · Σ w` per row (undoing the shift) and scattered into
//!   `y`; one to three tokens keep several copies of the sums to cover `vpdpbusd`'s latency.
//!   Wrapping i32 arithmetic, exact for `K ≤ INT8_MAX_K` like the other int8 kernels.
//!
//! The driver (packing, tasks, the walk over a block row) is `block_rows`, shared with the
//! bf16 block kernel.

use super::block_rows::{
    self, BlockRow, LANES, Line, StoredBlocks, TOKENS, over_blocks, pick_block_tile, scatter,
};
use super::int8_vnni::row_correction;
use super::shared_output::trivial_product;
use rayon::prelude::*;
use std::arch::x86_64::*;
use std::cell::RefCell;

thread_local! {
    /// The packed activations, reused across calls on the same thread.
    static QUADS: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// Whether blocks of `br × bc` run here: whole panels of rows, whole quads of K.
pub(super) fn fits(br: usize, bc: usize) -> bool {
    br > 0 && bc > 0 && br.is_multiple_of(LANES) && bc.is_multiple_of(4)
}

/// int8 weights of a block-sparse matrix as `vpdpbusd` operands (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct BlocksI8 {
    blocks: StoredBlocks,
    /// `-128 · Σ w` per row, undoing the `x + 128` shift.
    bias: Vec<i32>,
}

impl BlocksI8 {
    /// Keep the `br × bc` blocks of the row-major `n × k` weights that hold a non-zero
    /// ([`fits`], `br` divides `n`, `bc` divides `k`, and `k` fits a u32: the caller's).
    pub(super) fn compress(w: &[i8], n: usize, k: usize, br: usize, bc: usize) -> BlocksI8 {
        debug_assert!(fits(br, bc) && n.is_multiple_of(br) && k.is_multiple_of(bc) && w.len() == n * k);
        let kept_in = |brow: usize| -> Vec<u32> {
            (0..k / bc)
                .filter(|&c| (0..br).any(|r| w[(brow * br + r) * k + c * bc..][..bc].iter().any(|&v| v != 0)))
                .map(|c| c as u32)
                .collect()
        };
        let per_row: Vec<Vec<u32>> = (0..n / br).into_par_iter().map(kept_in).collect();
        let mut block_ptr = vec![0u32];
        let mut block_cols = Vec::new();
        let mut brow_of = Vec::new();
        for (brow, cols) in per_row.iter().enumerate() {
            block_cols.extend_from_slice(cols);
            brow_of.extend(std::iter::repeat_n(brow, cols.len()));
            block_ptr.push(block_cols.len() as u32);
        }
        let cols = block_cols.clone();
        let line = |b: usize, q: usize, p: usize| {
            Line(std::array::from_fn(|lane| {
                let at = (brow_of[b] * br + p * LANES + lane) * k + cols[b] as usize * bc + 4 * q;
                u32::from_le_bytes(std::array::from_fn(|i| w[at + i] as u8))
            }))
        };
        BlocksI8 {
            blocks: StoredBlocks::new((n, k), (br, bc / 4), (block_ptr, block_cols), line),
            bias: w.chunks_exact(k.max(1)).take(n).map(row_correction).collect(),
        }
    }

    /// `y[n × m] = W · x[k × m]`, exact in i32, on `threads` workers of the current rayon
    /// pool (1 runs on the calling thread).
    ///
    /// # Safety
    /// [`super::int8_vnni::available`] returned true; `x.len() == k·m`, `y.len() == n·m`;
    /// `k ≤ INT8_MAX_K`.
    pub(super) unsafe fn spmm(&self, threads: usize, x: &[i8], y: &mut [i32], m: usize) {
        let (n, k) = self.blocks.shape();
        debug_assert!(x.len() == k * m && y.len() == n * m);
        if trivial_product(y, n, k, m) {
            return;
        }
        let pack = |(t, out): (usize, &mut [u32])| pack_quads(x, m, t, out);
        let pick = |panels, tokens| pick_block_tile!(tile, i32, panels, tokens);
        // SAFETY: the caller checked the features and the lengths; a correction per row.
        unsafe {
            block_rows::product(
                &self.blocks,
                Some(&self.bias),
                (threads, m, k / 4),
                y,
                (&QUADS, &pack),
                pick,
            )
        }
    }

    /// Bytes of stored values (i8), the zeros inside kept blocks included.
    pub(super) fn value_bytes(&self) -> usize {
        self.blocks.value_bytes()
    }

    /// Bytes of index metadata: a u32 block column per block plus the block-row pointers.
    pub(super) fn metadata_bytes(&self) -> usize {
        self.blocks.metadata_bytes()
    }
}

/// Tile `tile` of the `k × m` activations as `[quad][TOKENS]` words of `x + 128` (zero past
/// `m`; `k` is a multiple of four).
fn pack_quads(x: &[i8], m: usize, tile: usize, out: &mut [u32]) {
    let t0 = tile * TOKENS;
    for (q, dst) in out.chunks_exact_mut(TOKENS).enumerate() {
        for (j, d) in dst.iter_mut().enumerate() {
            let tok = t0 + j;
            *d = if tok < m {
                u32::from_le_bytes(std::array::from_fn(|b| (x[(4 * q + b) * m + tok] as u8) ^ 0x80))
            } else {
                0
            };
        }
    }
}

/// `P` panels × `T` tokens of one block row over all its blocks, K quads into `U` copies of
/// the sums, then corrected and written to `y`.
///
/// # Safety
/// AVX-512F/BW/VNNI; as for a [`block_rows::TileFn`], with a correction per row.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<const P: usize, const T: usize, const U: usize>(row: BlockRow, x: *const u32, y: *mut i32) {
    let mut a = [[[_mm512_setzero_si512(); T]; P]; U];
    let step = |a: &mut [[__m512i; T]; P], w: *const Line, xq: *const u32| {
        // SAFETY: `P` lines of one quad and `T` tokens of its packed activations (contract).
        let wv: [__m512i; P] = std::array::from_fn(|p| unsafe { _mm512_load_si512(w.add(p).cast()) });
        for t in 0..T {
            // SAFETY: as above.
            let xb = _mm512_set1_epi32(unsafe { xq.add(t).read() } as i32);
            for (ap, &wp) in a.iter_mut().zip(&wv) {
                ap[t] = _mm512_dpbusd_epi32(ap[t], xb, wp);
            }
        }
    };
    // SAFETY: the contract is the helper's.
    unsafe { over_blocks(&row, x, &mut a, step) };
    let (total, rest) = a.split_first_mut().expect("U >= 1");
    for au in rest.iter() {
        for (tp, up) in total.iter_mut().zip(au) {
            for (tv, &uv) in tp.iter_mut().zip(up) {
                *tv = _mm512_add_epi32(*tv, uv);
            }
        }
    }
    let bias = row.bias.expect("int8 blocks carry their corrections");
    let mut sums = [0i32; LANES];
    for (p, tp) in total.iter().enumerate() {
        // SAFETY: the group's 16·P corrections (contract).
        let start = unsafe { _mm512_loadu_si512(bias.add(p * LANES).cast()) };
        for (t, &v) in tp.iter().enumerate() {
            // SAFETY: 16 writable i32; panel p's rows of `y`, token t (contract).
            unsafe {
                _mm512_storeu_si512(sums.as_mut_ptr().cast(), _mm512_add_epi32(v, start));
                scatter(&sums, y.add(p * LANES * row.m), row.m, t);
            }
        }
    }
}
