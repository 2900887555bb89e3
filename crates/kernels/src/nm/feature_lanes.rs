//! The AVX-512 N:M kernel vectorised along output features instead of tokens, for 2:4 and
//! every other pattern with groups of up to 16.
//!
//! Why a second layout: the token-vectorised kernels (`token_lanes.rs`, `two_of_four.rs`)
//! broadcast each kept weight for a strip of 16 tokens or more per output row; with fewer
//! tokens the broadcasts are a larger share of the loads and part of the strip is padding
//! (one token runs on 1/16 of the lanes). Here the vector runs along output rows instead,
//! which any token count fills. The product picks this kernel below 16–32 tokens, by K and
//! pattern (`token_lanes_min_cols` in `spmm.rs`).
//!
//! Here a zmm holds 16 *output rows* for one token, and a permute gives every row the
//! activation its kept weight sits at, with that row's index as the selector. So a kept
//! weight costs one permute and one FMA, the weights and selectors stay in registers across
//! a tile of tokens, and one activation load feeds several FMAs. No gathers, and the only
//! work per FMA is on the vector ports. Two forms ([`Meta`]):
//!
//! * **2:4**: for each group of 4 along K, the token's 4 activations are broadcast into every
//!   128-bit lane (one 16-byte load) and `vpermilps` picks with the stored 2-bit index.
//!   Per panel of 16 rows and index byte (two groups, four kept weights a row): 4 × 16 values
//!   and the 16 rows' index bytes, unchanged, so the copy carries exactly the stored 2 bits
//!   per kept weight, transposed.
//! * **Other patterns** (`m ≤ 16`): for each group, a window of 16 activations from the
//!   group's first K position (one unaligned load a token), and `vpermps` picks with the
//!   in-group index, held as a nibble (two kept weights a byte, as stored for groups of
//!   5–16; the stored form of smaller groups has 1 or 2 bits). Per panel and group: `n` × 16
//!   values and `⌈n/2⌉` × 16 selector bytes.
//!
//! Either way the metadata counters still report the stored format.
//!
//! Measured limit (this 2-core Zen 5, `examples/port_mix.rs`): FMAs each with a
//! variable-control permute (`vpermilps`, `vpermps`, `vpshufb`) run at 0.70 of the rate of
//! FMAs alone, so this loop cannot gain more than ~1.4× over dense; measured 0.8–1.15× at
//! BERT-base shapes with 32–128 tokens.
//!
//! Blocking, per task of [`PANELS_PER_TASK`] panels (a contiguous block of output rows, so
//! tasks write disjoint chunks of `y`): token blocks of [`TOKEN_BLOCK`] → [`PANELS_PER_TILE`]
//! panels → token tiles of [`TILE`] → all of K, the sums in registers throughout. So each
//! panel's weights are one sequential stream, read once per token tile (from memory for the
//! first, mostly from L2 after). The activations are a token-major copy (`xt`), so a tile's
//! K is contiguous per token; the task's outputs are gathered token-major in a scratch buffer
//! and transposed into `y` once per token block.
//!
//! K blocks of 256 positions (the panels' weights for a block staying in L1 across the token
//! tiles, the sums going through the scratch between blocks) were 1.5–1.7× slower on 4096² at
//! 2–12 tokens, where one sequential stream per panel is what the prefetchers follow best,
//! and 5–30% slower from 16 to 32 tokens (`sparsegate bench`, 2 threads, 4096², 11008×4096,
//! 4096×11008, 2048²); level at K = 768.

use crate::shared_output::for_each_chunk;
use crate::sparse_rows::{lane_kernel_prologue, token_major_copy};

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
/// Tokens per register tile.
const TILE: usize = 6;
/// Floats a window of activations holds (one zmm), which bounds the group size of the
/// general patterns: a group's activations must fit one window.
const WINDOW: usize = 16;

/// How the layout names each kept weight's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meta {
    /// 2:4's stored index bytes, transposed: a unit is one index byte (two groups, 8 K
    /// positions, 4 kept weights a row), and `vpermilps` picks from the 4 activations of a
    /// group broadcast into every 128-bit lane.
    TwoBit,
    /// Any other pattern with groups of at most [`WINDOW`]: a unit is one group, and each
    /// kept weight's in-group index is a nibble (two kept weights a byte), which `vpermps`
    /// reads to pick from a window of 16 activations starting at the group.
    Nibbles,
}

/// An N:M matrix rearranged for the feature-lane kernel (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct LaneLayout {
    rows: usize,
    k: usize,
    panels: usize,
    meta: Meta,
    /// K units a row holds (index bytes for 2:4, groups otherwise), and K positions each.
    units: usize,
    unit_k: usize,
    /// Kept values and selector vectors (16 bytes each) per unit and panel.
    slots: usize,
    sels: usize,
    /// `[panel][unit][slot][16]`: row `16·panel + lane`'s kept value in each slot.
    values: Vec<f32>,
    /// `[panel][unit][sel][16]`: row `16·panel + lane`'s index byte for the unit (2:4), or
    /// the in-group indices of slots `2·sel` (low nibble) and `2·sel + 1` (high nibble).
    idx: Vec<u8>,
}

impl LaneLayout {
    /// Whether a pattern other than 2:4 can take the kernel: its groups fit one window.
    pub(crate) fn supports(m: usize) -> bool {
        m <= WINDOW
    }

    /// Rearrange a 2:4 matrix given as its row-major kept `values` (2 per group) and packed
    /// 2-bit `indices` (`row_bytes` per row, 4 per byte, the layout of `indices.rs`).
    pub(crate) fn new(rows: usize, k: usize, values: &[f32], indices: &[u8], row_bytes: usize) -> LaneLayout {
        let mut l = LaneLayout::empty((rows, k), Meta::TwoBit, (k.div_ceil(8), 8), (4, 1));
        let kept = k / 2;
        for row in 0..rows {
            for j in 0..l.units {
                let at = l.sel_at(row, j, 0);
                l.idx[at] = indices[row * row_bytes + j];
                for e in 0..4 {
                    if 4 * j + e < kept {
                        let at = l.value_at(row, j, e);
                        l.values[at] = values[row * kept + 4 * j + e];
                    }
                }
            }
        }
        l
    }

    /// Rearrange any `n:m` matrix with `m ≤ 16` ([`Self::supports`]): row-major kept `values`
    /// (`n` per group) and packed in-group `indices` (`row_bytes` per row, `bits` each).
    pub(crate) fn any_pattern(
        (rows, k): (usize, usize),
        (n, m): (usize, usize),
        values: &[f32],
        (indices, row_bytes, bits): (&[u8], usize, usize),
    ) -> LaneLayout {
        assert!(
            Self::supports(m) && n < m && k.is_multiple_of(m),
            "unsupported {n}:{m}"
        );
        let mut l = LaneLayout::empty((rows, k), Meta::Nibbles, (k / m, m), (n, n.div_ceil(2)));
        let kept = k / m * n;
        for row in 0..rows {
            let row_idx = &indices[row * row_bytes..(row + 1) * row_bytes];
            for e in 0..kept {
                let (g, slot) = (e / n, e % n);
                let at = l.value_at(row, g, slot);
                l.values[at] = values[row * kept + e];
                let nibble = super::indices::get(row_idx, e, bits) as u8;
                let at = l.sel_at(row, g, slot / 2);
                l.idx[at] |= nibble << (4 * (slot % 2));
            }
        }
        l
    }

    fn empty(
        (rows, k): (usize, usize),
        meta: Meta,
        (units, unit_k): (usize, usize),
        (slots, sels): (usize, usize),
    ) -> LaneLayout {
        let panels = rows.div_ceil(LANES);
        LaneLayout {
            rows,
            k,
            panels,
            meta,
            units,
            unit_k,
            slots,
            sels,
            values: vec![0.0; panels * units * slots * LANES],
            idx: vec![0; panels * units * sels * LANES],
        }
    }

    fn value_at(&self, row: usize, unit: usize, slot: usize) -> usize {
        (((row / LANES) * self.units + unit) * self.slots + slot) * LANES + row % LANES
    }

    fn sel_at(&self, row: usize, unit: usize, sel: usize) -> usize {
        (((row / LANES) * self.units + unit) * self.sels + sel) * LANES + row % LANES
    }

    /// Activations a token's row of the token-major copy holds: the units' K positions, and
    /// for [`Meta::Nibbles`] room for the last group's window (zeros past `k`).
    fn kpad(&self) -> usize {
        self.units * self.unit_k
            + match self.meta {
                Meta::TwoBit => 0,
                Meta::Nibbles => WINDOW - self.unit_k,
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
    let kpad = l.kpad();
    let xt = token_major_copy((x, xs), l.k, cols, kpad, threads);
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
    for_each_chunk(y, task_rows * cols, threads > 1, task);
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
        let mut p = p0;
        while p < p1 {
            let r = PANELS_PER_TILE.min(p1 - p);
            token_tiles(l, r, p, p0, xt_block, kpad, &mut yt[..mc * ldy], ldy);
            p += r;
        }
        // Token-major scratch → rows of y.
        for (r, y_row) in y_rows.chunks_exact_mut(cols).enumerate().take(task_rows) {
            for (t, out) in y_row[m0..m0 + mc].iter_mut().enumerate() {
                *out = yt[t * ldy + r];
            }
        }
    }
}

/// Every token of the block for `r` (1 to 3) panels from `p`, into `yt` (token-major, `ldy`
/// apart, columns from panel `p_base`).
#[allow(clippy::too_many_arguments)]
fn token_tiles(
    l: &LaneLayout,
    r: usize,
    p: usize,
    p_base: usize,
    xt: &[f32],
    kpad: usize,
    yt: &mut [f32],
    ldy: usize,
) {
    let mc = xt.len() / kpad;
    assert!(yt.len() >= mc * ldy && (p - p_base + r) * LANES <= ldy && p + r <= l.panels);
    let tile = Tile { l, p, kpad, ldy };
    let col = (p - p_base) * LANES;
    let mut t = 0;
    while t < mc {
        let left = mc - t;
        let xp = xt[t * kpad..].as_ptr();
        let yp = yt[t * ldy + col..].as_mut_ptr();
        // SAFETY: AVX-512F was asserted by `spmm`; the tile reads tokens `t .. t + T <= mc` of
        // `xt` (each `kpad` long, `LaneLayout::kpad`) and writes their `16·r` columns of `yt`, inside it by
        // the assert above; the weights read are panels `p .. p + r`.
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
    kpad: usize,
    ldy: usize,
}

impl Tile<'_> {
    /// `R` panels × `T` tokens; returns `T`.
    ///
    /// # Safety
    /// AVX-512F is available; `xp` points at `T` tokens of `kpad` activations; `yp` at `T`
    /// token rows of `ldy` floats, each with `16·R` writable columns; panels `p .. p + R`
    /// exist in the layout.
    #[inline(always)]
    unsafe fn run<const R: usize, const T: usize>(&self, xp: *const f32, yp: *mut f32) -> usize {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's contract.
        unsafe {
            match self.l.meta {
                Meta::TwoBit => avx512::two_bit::<R, T>(self, xp, yp),
                Meta::Nibbles => avx512::nibbles::<R, T>(self, xp, yp),
            }
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

    /// [`Tile::run`] for [`super::Meta::TwoBit`].
    ///
    /// # Safety
    /// As [`Tile::run`].
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn two_bit<const R: usize, const T: usize>(s: &Tile<'_>, xp: *const f32, yp: *mut f32) {
        let l = s.l;
        let mut acc = [[_mm512_setzero_ps(); T]; R];
        let (values, idx) = (l.values.as_ptr(), l.idx.as_ptr());
        for j in 0..l.units {
            let mut sel = [_mm512_setzero_si512(); R];
            for (r, sel) in sel.iter_mut().enumerate() {
                // SAFETY: panel `p + r`, pair `j` exist (contract): 16 index bytes.
                *sel = _mm512_cvtepu8_epi32(unsafe {
                    _mm_loadu_si128(idx.add(((s.p + r) * l.units + j) * LANES).cast())
                });
            }
            for h in 0..2 {
                let mut w = [[_mm512_setzero_ps(); 2]; R];
                let mut c = [[_mm512_setzero_si512(); 2]; R];
                for r in 0..R {
                    // SAFETY: as above, 64 values per pair.
                    let base = unsafe { values.add(((s.p + r) * l.units + j) * 4 * LANES + 2 * LANES * h) };
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
                    // SAFETY: token `t < T`, activations `8j + 4h .. + 4 <= 8·units = kpad`.
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
        // SAFETY: the caller's contract.
        unsafe { finish(s, &acc, yp) }
    }

    /// [`Tile::run`] for [`super::Meta::Nibbles`]: per group, one window of 16 activations a
    /// token (an unaligned load from the group's first K position), then per kept weight a
    /// `vpermps` that gives every row the activation its nibble names, and an FMA.
    ///
    /// # Safety
    /// As [`Tile::run`].
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn nibbles<const R: usize, const T: usize>(s: &Tile<'_>, xp: *const f32, yp: *mut f32) {
        let l = s.l;
        let mut acc = [[_mm512_setzero_ps(); T]; R];
        let (values, idx) = (l.values.as_ptr(), l.idx.as_ptr());
        for g in 0..l.units {
            // SAFETY: token `t < T`; activations `m·g .. m·g + 16 <= kpad` (`LaneLayout::kpad`).
            let xw: [__m512; T] =
                std::array::from_fn(|t| unsafe { _mm512_loadu_ps(xp.add(t * s.kpad + l.unit_k * g)) });
            for q in 0..l.sels {
                let sel: [__m512i; R] = std::array::from_fn(|r| {
                    // SAFETY: panel `p + r`, group `g`, selector `q < sels` exist (contract).
                    _mm512_cvtepu8_epi32(unsafe {
                        _mm_loadu_si128(idx.add((((s.p + r) * l.units + g) * l.sels + q) * LANES).cast())
                    })
                });
                for h in 0..2.min(l.slots - 2 * q) {
                    for r in 0..R {
                        // SAFETY: slot `2q + h < slots` of panel `p + r`, group `g`.
                        let w = unsafe {
                            _mm512_loadu_ps(
                                values.add((((s.p + r) * l.units + g) * l.slots + 2 * q + h) * LANES),
                            )
                        };
                        // `vpermps` reads the low 4 bits of each lane: the low nibble as it is,
                        // the high one shifted down.
                        let c = if h == 0 {
                            sel[r]
                        } else {
                            _mm512_srli_epi32::<4>(sel[r])
                        };
                        for (a, x) in acc[r].iter_mut().zip(&xw) {
                            *a = _mm512_fmadd_ps(w, _mm512_permutexvar_ps(c, *x), *a);
                        }
                    }
                }
            }
        }
        // SAFETY: the caller's contract.
        unsafe { finish(s, &acc, yp) }
    }

    /// Store the tile's sums into `yt`.
    ///
    /// # Safety
    /// As [`Tile::run`].
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn finish<const R: usize, const T: usize>(s: &Tile<'_>, acc: &[[__m512; T]; R], yp: *mut f32) {
        for (r, row) in acc.iter().enumerate() {
            for (t, a) in row.iter().enumerate() {
                // SAFETY: token `t < T`, columns `16r .. 16r + 16 <= 16R` (contract).
                unsafe { _mm512_storeu_ps(yp.add(t * s.ldy + LANES * r), *a) };
            }
        }
    }
}
