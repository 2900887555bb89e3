//! The AVX-512 2:4 kernel vectorised along output features instead of tokens.
//!
//! Why a second layout: the token-vectorised kernels (`token_lanes.rs`, `two_of_four.rs`)
//! broadcast each kept weight for a strip of 16 tokens or more per output row; with fewer
//! tokens the broadcasts are a larger share of the loads and part of the strip is padding.
//! Here the vector runs along output rows instead, which any token count fills. The
//! product picks this kernel below 12, 16 or 24 tokens, by K (`token_lanes_min_cols` in `spmm.rs`).
//!
//! Here a zmm holds 16 *output rows* for one token. For each group of 4 along K, the token's
//! 4 activations are broadcast into every 128-bit lane of a register (one 16-byte load), and
//! `vpermilps` picks, per output row, the activation its kept weight sits at, using that row's
//! 2-bit index as the in-lane selector. So a kept weight costs one permute and one FMA, the
//! weights and selectors stay in registers across a tile of tokens, and one activation load
//! feeds `2 · R` FMAs. No gathers, and the only work per FMA is on the vector ports.
//!
//! Layout ([`LaneLayout`]), built once per matrix from the compressed form: rows in *panels*
//! of 16 (the last padded with zero weights), and per panel, per index byte (two groups,
//! four kept weights per row), 4 × 16 values and the 16 rows' index bytes, unchanged. So the
//! execution-time copy carries exactly the stored 2 bits per kept weight, transposed; the
//! metadata counters still report the stored format.
//!
//! Measured limit (this 2-core Zen 5, `examples/port_mix.rs`): FMAs each with a
//! variable-control permute (`vpermilps`, `vpermps`, `vpshufb`) run at 0.70 of the rate of
//! FMAs alone, so this loop cannot gain more than ~1.4× over dense; measured 0.8–1.15× at
//! BERT-base shapes with 32–128 tokens.
//!
//! Blocking, per task of [`PANELS_PER_TASK`] panels (a contiguous block of output rows, so
//! tasks write disjoint chunks of `y`): token blocks of [`TOKEN_BLOCK`] → K blocks of
//! [`PAIRS_PER_K_BLOCK`] index bytes → [`PANELS_PER_TILE`] panels → token tiles of [`TILE`].
//! Those panels' weights for one K block (24 KiB) stay in L1 over the token block; the activations are a
//! token-major copy (`xt`), so a tile's K block is contiguous per token; the task's output
//! block is accumulated token-major in a scratch buffer that stays in L2 and is transposed
//! into `y` once per token block.

use crate::execute::kernels::sparse_rows::lane_kernel_prologue;
use rayon::prelude::*;

/// Output rows per zmm register.
const LANES: usize = 16;
/// Panels (of 16 rows) per parallel task: 240 rows (five register tiles of 3 panels), whose
/// weights for one K block (120 KiB) and scratch output stay in L2.
const PANELS_PER_TASK: usize = 15;
/// Panels per register tile: 3 panels × 6 tokens = 18 accumulators and 12 registers of
/// weights and selectors, 15% faster than 2 × 6 in a single-tile measurement (the permutes,
/// not the registers, bound this loop, and more panels per activation load help).
const PANELS_PER_TILE: usize = 3;
/// Tokens whose K blocks one task keeps in L2 while sweeping its panels.
const TOKEN_BLOCK: usize = 192;
/// Index bytes (8 K positions each) per K block: 256 K positions, so a tile's 3 panels'
/// weights for the block are 24 KiB of L1.
const PAIRS_PER_K_BLOCK: usize = 32;
/// Tokens per register tile.
const TILE: usize = 6;

/// A 2:4 matrix rearranged for the feature-lane kernel (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct LaneLayout {
    rows: usize,
    k: usize,
    panels: usize,
    /// Index bytes per row: `ceil(k / 8)`.
    pairs: usize,
    /// `[panel][pair][4][16]`: for each pair, group 0 slots 0 and 1, then group 1's.
    values: Vec<f32>,
    /// `[panel][pair][16]`: row `16·panel + lane`'s index byte for the pair.
    idx: Vec<u8>,
}

impl LaneLayout {
    /// Rearrange a 2:4 matrix given as its row-major kept `values` (2 per group) and packed
    /// 2-bit `indices` (`row_bytes` per row, 4 per byte, the layout of `indices.rs`).
    pub(crate) fn new(rows: usize, k: usize, values: &[f32], indices: &[u8], row_bytes: usize) -> LaneLayout {
        let panels = rows.div_ceil(LANES);
        let pairs = k.div_ceil(8);
        let kept = k / 2;
        let mut lv = vec![0.0f32; panels * pairs * 4 * LANES];
        let mut li = vec![0u8; panels * pairs * LANES];
        for row in 0..rows {
            let (p, lane) = (row / LANES, row % LANES);
            for j in 0..pairs {
                li[(p * pairs + j) * LANES + lane] = indices[row * row_bytes + j];
                for e in 0..4 {
                    if 4 * j + e < kept {
                        lv[((p * pairs + j) * 4 + e) * LANES + lane] = values[row * kept + 4 * j + e];
                    }
                }
            }
        }
        LaneLayout {
            rows,
            k,
            panels,
            pairs,
            values: lv,
            idx: li,
        }
    }

    /// Bytes of the execution-time copy (values and index bytes, padding included).
    pub(crate) fn resident_bytes(&self) -> usize {
        self.values.len() * 4 + self.idx.len()
    }
}

/// `y[rows × cols] = W · x`, where row `r` of `x` starts at `x[r · xs]` (`xs ≥ cols`).
///
/// Panics unless AVX-512F was detected (the caller dispatches on `Isa::Avx512`) or the
/// buffers are shorter than the shapes.
pub(crate) fn spmm(l: &LaneLayout, threads: usize, (x, xs): (&[f32], usize), y: &mut [f32], cols: usize) {
    if !lane_kernel_prologue("feature-lane kernel", (l.rows, l.k), (x, xs), y, cols) {
        return;
    }
    let kpad = l.pairs * 8;
    let xt = transpose_x(x, xs, l.k, cols, kpad, threads);
    // At most PANELS_PER_TASK panels a task, and a multiple of `threads` tasks of near-equal
    // size: 128 panels on 2 threads as 9 tasks would leave one thread a task behind.
    let tasks = l.panels.div_ceil(PANELS_PER_TASK).div_ceil(threads.max(1)) * threads.max(1);
    let per_task = l.panels.div_ceil(tasks).max(1);
    let task_rows = per_task * LANES;
    let task = |(t, y_rows): (usize, &mut [f32])| {
        let p0 = t * per_task;
        let p1 = (p0 + per_task).min(l.panels);
        rows_task(l, (p0, p1), &xt, kpad, y_rows, cols);
    };
    if threads > 1 {
        y.par_chunks_mut(task_rows * cols).enumerate().for_each(task);
    } else {
        y.chunks_mut(task_rows * cols).enumerate().for_each(task);
    }
}

/// The token-major copy of the activations, `cols × kpad`, zero past `k`.
fn transpose_x(x: &[f32], xs: usize, k: usize, cols: usize, kpad: usize, threads: usize) -> Vec<f32> {
    const B: usize = 16;
    let mut xt = vec![0.0f32; cols * kpad];
    let copy = |(b, dst): (usize, &mut [f32])| {
        let t0 = b * B;
        let tn = dst.len() / kpad;
        for k0 in (0..k).step_by(B) {
            for kk in k0..(k0 + B).min(k) {
                let src = &x[kk * xs + t0..kk * xs + t0 + tn];
                for (t, &v) in src.iter().enumerate() {
                    dst[t * kpad + kk] = v;
                }
            }
        }
    };
    if threads > 1 && cols * k > 1 << 16 {
        xt.par_chunks_mut(B * kpad).enumerate().for_each(copy);
    } else {
        xt.chunks_mut(B * kpad).enumerate().for_each(copy);
    }
    xt
}

/// One task: panels `p0..p1`, whose rows are `y_rows` (`(rows in the task) × cols`).
fn rows_task(
    l: &LaneLayout,
    (p0, p1): (usize, usize),
    xt: &[f32],
    kpad: usize,
    y_rows: &mut [f32],
    cols: usize,
) {
    let ldy = (p1 - p0) * LANES;
    let task_rows = y_rows.len() / cols;
    let mut yt = vec![0.0f32; TOKEN_BLOCK.min(cols) * ldy];
    for m0 in (0..cols).step_by(TOKEN_BLOCK) {
        let mc = TOKEN_BLOCK.min(cols - m0);
        let xt_block = &xt[m0 * kpad..(m0 + mc) * kpad];
        for j0 in (0..l.pairs).step_by(PAIRS_PER_K_BLOCK) {
            let pairs = (j0, (j0 + PAIRS_PER_K_BLOCK).min(l.pairs));
            let mut p = p0;
            while p < p1 {
                let r = PANELS_PER_TILE.min(p1 - p);
                token_tiles(l, r, p, p0, pairs, xt_block, kpad, &mut yt[..mc * ldy], ldy);
                p += r;
            }
        }
        // Token-major scratch → rows of y.
        for (r, y_row) in y_rows.chunks_exact_mut(cols).enumerate().take(task_rows) {
            for (t, out) in y_row[m0..m0 + mc].iter_mut().enumerate() {
                *out = yt[t * ldy + r];
            }
        }
    }
}

/// Every token of the block for `r` (1 to 3) panels from `p`, over index bytes `j0..j1`,
/// accumulating into `yt` (token-major, `ldy` apart, columns from panel `p_base`) after the
/// first K block.
#[allow(clippy::too_many_arguments)]
fn token_tiles(
    l: &LaneLayout,
    r: usize,
    p: usize,
    p_base: usize,
    (j0, j1): (usize, usize),
    xt: &[f32],
    kpad: usize,
    yt: &mut [f32],
    ldy: usize,
) {
    let mc = xt.len() / kpad;
    assert!(yt.len() >= mc * ldy && (p - p_base + r) * LANES <= ldy && p + r <= l.panels && j1 <= l.pairs);
    let tile = Tile {
        l,
        p,
        pairs: (j0, j1),
        kpad,
        ldy,
        accumulate: j0 > 0,
    };
    let col = (p - p_base) * LANES;
    let mut t = 0;
    while t < mc {
        let left = mc - t;
        let xp = xt[t * kpad..].as_ptr();
        let yp = yt[t * ldy + col..].as_mut_ptr();
        // SAFETY: AVX-512F was asserted by `spmm`; the tile reads tokens `t .. t + T <= mc` of
        // `xt` (each `kpad ≥ 8·j1` long) and writes their `16·r` columns of `yt`, inside it by
        // the assert above; the weights read are panels `p .. p + r`, pairs `j0..j1`.
        let done = unsafe {
            match (r, left) {
                (3, TILE..) => tile.run::<3, TILE>(xp, yp),
                (3, 4..) => tile.run::<3, 4>(xp, yp),
                (3, 2..) => tile.run::<3, 2>(xp, yp),
                (3, _) => tile.run::<3, 1>(xp, yp),
                (2, TILE..) => tile.run::<2, TILE>(xp, yp),
                (2, 4..) => tile.run::<2, 4>(xp, yp),
                (2, 2..) => tile.run::<2, 2>(xp, yp),
                (2, _) => tile.run::<2, 1>(xp, yp),
                (_, 12..) => tile.run::<1, 12>(xp, yp),
                (_, 4..) => tile.run::<1, 4>(xp, yp),
                (_, 2..) => tile.run::<1, 2>(xp, yp),
                (_, _) => tile.run::<1, 1>(xp, yp),
            }
        };
        t += done;
    }
}

/// What one register tile needs besides its pointers.
struct Tile<'a> {
    l: &'a LaneLayout,
    p: usize,
    pairs: (usize, usize),
    kpad: usize,
    ldy: usize,
    accumulate: bool,
}

impl Tile<'_> {
    /// `R` panels × `T` tokens; returns `T`.
    ///
    /// # Safety
    /// AVX-512F is available; `xp` points at `T` tokens of `kpad` activations; `yp` at `T`
    /// token rows of `ldy` floats, each with `16·R` writable columns; panels `p .. p + R`
    /// and pairs `j0..j1` exist in the layout.
    #[inline(always)]
    unsafe fn run<const R: usize, const T: usize>(&self, xp: *const f32, yp: *mut f32) -> usize {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's contract.
        unsafe {
            avx512::tile::<R, T>(self, xp, yp)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (xp, yp);
        T
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{LANES, Tile};
    use std::arch::x86_64::*;

    /// See [`Tile::run`].
    ///
    /// # Safety
    /// As [`Tile::run`].
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile<const R: usize, const T: usize>(s: &Tile<'_>, xp: *const f32, yp: *mut f32) {
        let l = s.l;
        let (j0, j1) = s.pairs;
        let mut acc = [[_mm512_setzero_ps(); T]; R];
        if s.accumulate {
            for (r, row) in acc.iter_mut().enumerate() {
                for (t, a) in row.iter_mut().enumerate() {
                    // SAFETY: token `t < T`, columns `16r .. 16r + 16 <= 16R` (contract).
                    *a = unsafe { _mm512_loadu_ps(yp.add(t * s.ldy + LANES * r)) };
                }
            }
        }
        let (values, idx) = (l.values.as_ptr(), l.idx.as_ptr());
        for j in j0..j1 {
            let mut sel = [_mm512_setzero_si512(); R];
            for (r, sel) in sel.iter_mut().enumerate() {
                // SAFETY: panel `p + r`, pair `j` exist (contract): 16 index bytes.
                *sel = _mm512_cvtepu8_epi32(unsafe {
                    _mm_loadu_si128(idx.add(((s.p + r) * l.pairs + j) * LANES).cast())
                });
            }
            for h in 0..2 {
                let mut w = [[_mm512_setzero_ps(); 2]; R];
                let mut c = [[_mm512_setzero_si512(); 2]; R];
                for r in 0..R {
                    // SAFETY: as above, 64 values per pair.
                    let base = unsafe { values.add(((s.p + r) * l.pairs + j) * 4 * LANES + 2 * LANES * h) };
                    // SAFETY: inside the pair's 64 values.
                    w[r] = unsafe { [_mm512_loadu_ps(base), _mm512_loadu_ps(base.add(LANES))] };
                    // `vpermilps` reads the low 2 bits of each lane: shifting brings the
                    // wanted index down, the higher bits are ignored.
                    c[r] = if h == 0 {
                        [sel[r], _mm512_srli_epi32::<2>(sel[r])]
                    } else {
                        [_mm512_srli_epi32::<4>(sel[r]), _mm512_srli_epi32::<6>(sel[r])]
                    };
                }
                #[allow(clippy::needless_range_loop)]
                for t in 0..T {
                    // SAFETY: token `t < T`, activations `8j + 4h .. + 4 <= 8·j1 <= kpad`.
                    let xb =
                        _mm512_broadcast_f32x4(unsafe { _mm_loadu_ps(xp.add(t * s.kpad + 8 * j + 4 * h)) });
                    for r in 0..R {
                        for q in 0..2 {
                            acc[r][t] =
                                _mm512_fmadd_ps(w[r][q], _mm512_permutevar_ps(xb, c[r][q]), acc[r][t]);
                        }
                    }
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (t, a) in row.iter().enumerate() {
                // SAFETY: as for the loads.
                unsafe { _mm512_storeu_ps(yp.add(t * s.ldy + LANES * r), *a) };
            }
        }
    }
}
