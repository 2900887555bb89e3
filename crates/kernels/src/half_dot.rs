//! 16-bit products with f32 sums, rows in lanes: `y[N×M] = w[N×K] · x[K×M]`. bf16 on
//! AVX-512 BF16, dense ([`DensePairs`]) and 2:4 compact ([`TwoOfFourPairs`]), here; f16 on
//! the same driver with in-register widening in [`f16`] (its doc says why not AVX-512 FP16).
//!
//! Why dedicated kernels: widening bf16 to f32 panels and running the f32 kernel does one
//! multiply per f32 lane, while `vdpbf16ps` multiplies a *pair* of bf16 per lane and adds
//! both products into an f32 accumulator, at the same instruction rate as an f32 FMA on
//! this Zen 5 (two a cycle). A bf16 dense comparator without it is half of what the CPU
//! can do, and every bf16 sparse speedup measured against it twice too kind (issue 20).
//!
//! How it works, for both kernels:
//! * **Lanes are output rows.** A zmm holds 16 rows (a *panel*) of one token's f32 sums;
//!   the weights are the vector operand (packed once, weight-stationary), each token's
//!   activations the broadcast one. A register tile is `P` panels × `T` tokens
//!   (`T ≤ TOKENS`), so one token costs no padding beyond the rows of the last panel, and
//!   the same tile serves 1 token and 512.
//! * **Dense.** The weights are packed per block of [`DENSE_PANELS`] panels as K-pairs
//!   interleaved per row (`[block][k/2][48 rows][2]`, K padded to even with zeros, rows past
//!   N zero), so a block's K-pair is three zmm in one contiguous stream. The activations are
//!   packed per call as K-pairs per token (`[8-token tile][k/2][8][2]`); each token's pair is
//!   a 32-bit broadcast. 3 × 8 = 24 accumulators, 3 weight loads and 8 broadcasts per 24
//!   `vdpbf16ps`.
//! * **2:4.** Every group of four keeps two weights, which is exactly one bf16 pair: the
//!   values are stored as one pair per row and group (`[block][k/4][32 rows][2]`), and the
//!   two 2-bit in-group indices of a pair as one nibble (`ia | ib << 2`), 16 rows' nibbles
//!   one u64 per panel and group (2 bits per kept value, the stored 2:4 format's). The
//!   activations are packed per call as each group's four values per token
//!   (`[8-token tile][k/4][8][4]`). Per panel and group, `vpmultishiftqb` copies each row's
//!   nibble into its lane and a `vpternlogd` turns it into a `vpshufb` control (bytes
//!   `2ia, 2ia+1, 2ib, 2ib+1`); per token, the group's four activations are broadcast and
//!   one `vpshufb` hands every row its own pair, then one `vpdpbf16ps` does the two kept
//!   products. Nothing is widened; the kernel does half the `vdpbf16ps` of the dense one
//!   and one shuffle per `vdpbf16ps`, which is what bounds it where the weights do not
//!   stream from memory. [`SPARSE_PANELS`] = 2 panels × 8 tokens: 16 accumulators, room
//!   for the controls.
//! * **Blocking.** K blocks of [`KC_PAIRS`] pairs (dense) or [`KC_GROUPS`] groups (2:4):
//!   a block's weights for one K block (12 KiB / 9 KiB) stay in L1 while every token tile
//!   of a task passes over them, the partial sums of a task's tiles parked in a
//!   token-major scratch (`[token][block rows]`) between K blocks. Tasks are (block chunk
//!   × tile group) tiles of the output, on rayon like the other kernels; each task writes
//!   its rows × tokens of `y` once, at the end, transposing from the scratch.
//! * **Prefetch.** The weights are one stream per task (K blocks, then blocks, follow each
//!   other in memory). The token tiles of a pass share its prefetches, the next K block
//!   into L1 and the one [`FAR`] blocks ahead into L2, so the stream flows while the tiles
//!   compute; without them the weights came in bursts between the tiles' compute. Measured
//!   on one core (thread CPU time, 4096², machine shared): 16 tokens dense 1.65–2.1 → 1.35–1.5
//!   ms, 2:4 1.2–1.3 → 1.03 ms, K blocks of 128 instead of 64 slower at 16 tokens.
//!
//! Numerics: products of two bf16 (8-bit significands) are exact in f32, so the only error
//! is that of the f32 sums: `|ŷ − y| ≤ γ_K · Σ_k |w·x|` with `γ_K ≈ K·2⁻²⁴` in the worst
//! case, the bound of any f32 dot product of K terms (the bf16 inputs themselves are what
//! they are; no rounding to bf16 happens here). `vdpbf16ps` treats bf16 subnormal inputs
//! (below 2⁻¹²⁶) as zero and flushes subnormal results, which adds at most `K · 2⁻¹²⁶` and
//! never changes a normal-range product.
//!
//! Scratch (packed activations, partial sums) is kept per thread between calls, so a
//! repeated product does not page-fault fresh buffers on every call.

/// One 64-byte line: 16 rows' bf16 pairs (or f16 values), as the block kernels store theirs.
use super::block_rows::Line;
use super::schedule::TaskGrid;
use super::scratch::line_aligned;
use super::shared_output::{SharedOutput, trivial_product};
use rayon::prelude::*;
use std::arch::x86_64::*;
use std::cell::RefCell;
use std::thread::LocalKey;

/// Output rows per zmm of f32 sums (a panel).
const LANES: usize = 16;
/// Panels per dense block: 3 × 8 tokens = 24 accumulators.
pub(super) const DENSE_PANELS: usize = 3;
/// Panels per 2:4 block: 2 × 8 tokens = 16 accumulators, leaving registers for the values,
/// the shuffle controls and their constants.
pub(super) const SPARSE_PANELS: usize = 2;
/// Tokens per packed activation tile, and the most per register tile.
const TOKENS: usize = 8;
/// K blocks ahead the second prefetch (into L2) runs: a DRAM latency's worth of stream and
/// more at one token (4 was faster than 1 at 1–8 tokens, 8 level with 4).
const FAR: usize = 4;
/// K-pairs per dense K block: the block's weights (`KC_PAIRS · 192` bytes, 12 KiB) and a
/// tile's activations (2 KiB) stay in Zen 5's 48 KiB L1d across a task's token tiles, beside
/// the next K block coming in.
pub(super) const KC_PAIRS: usize = 64;
/// Groups of four per 2:4 K block: values and nibbles `KC_GROUPS · 144` bytes (9 KiB), a
/// tile's activations 4 KiB.
pub(super) const KC_GROUPS: usize = 64;

thread_local! {
    /// Dense activations packed as K-pairs per token, per calling thread.
    static PAIRS: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    /// 2:4 activations packed as groups of four per token, per calling thread.
    static QUADS: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// A task's partial sums, `[token][block rows]`, per worker thread.
    static SUMS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Whether this CPU runs the kernels: AVX-512F, BW, BF16 and VBMI (`vpmultishiftqb`, for the
/// 2:4 controls), detected at run time.
pub(super) fn available() -> bool {
    crate::cpu::has!("avx512f")
        && crate::cpu::has!("avx512bw")
        && crate::cpu::has!("avx512bf16")
        && crate::cpu::has!("avx512vbmi")
}

/// Two bf16 (their bits) as one pair, `lo` in the even half as `vdpbf16ps` pairs them.
fn pair(lo: u16, hi: u16) -> u32 {
    u32::from(lo) | (u32::from(hi) << 16)
}

/// The bf16 view of a vector of bf16 pairs.
#[inline(always)]
fn bh(v: __m512i) -> __m512bh {
    // SAFETY: both are 64-byte vectors of plain bits with no invalid values.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(v) }
}

/// Dense bf16 weights packed as K-pairs per row, [`DENSE_PANELS`] panels per block.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct DensePairs {
    n: usize,
    k: usize,
    /// `[block][pair][panel]` lines.
    w: Vec<Line>,
}

impl DensePairs {
    /// Pack the row-major `n × k` bf16 weights (their bits).
    pub(super) fn new(w: &[u16], n: usize, k: usize) -> DensePairs {
        let w = pack_dense(w, n, k, |lo, hi| {
            Line(std::array::from_fn(|r| pair(lo[r], hi[r])))
        });
        DensePairs { n, k, w }
    }

    /// `y[n × m] = W · x[k × m]`, f32 sums, on `threads` workers of the current rayon pool
    /// (1 runs on the calling thread).
    ///
    /// # Safety
    /// [`available`] returned true; `x.len() == k·m` and `y.len() == n·m`.
    pub(super) unsafe fn gemm(&self, threads: usize, x: &[u16], y: &mut [f32], m: usize) {
        debug_assert!(x.len() == self.k * m && y.len() == self.n * m);
        // SAFETY: the caller's contract.
        unsafe { product(self, threads, x, y, m) }
    }
}

/// 2:4 bf16 weights: one kept pair and one nibble per row and group of four, packed per
/// block of [`SPARSE_PANELS`] panels.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TwoOfFourPairs {
    n: usize,
    k: usize,
    /// `[block][group][panel]` lines of kept pairs.
    values: Vec<Line>,
    /// `[block][group][panel]`: row `r` of the panel's nibble `ia | ib << 2` in bits `4r..`.
    nibbles: Vec<u64>,
}

impl TwoOfFourPairs {
    /// Pack `n` rows of 2:4 weights given as the stored format holds them: per row,
    /// `values` has two kept bf16 (bits) per group in ascending position, `indices` the
    /// 2-bit positions four to a byte (`row_bytes` per row; a group's two are one nibble).
    pub(super) fn new(
        n: usize,
        k: usize,
        values: &[u16],
        indices: &[u8],
        row_bytes: usize,
    ) -> TwoOfFourPairs {
        let line = |first: &[u16; LANES], second: &[u16; LANES]| {
            Line(std::array::from_fn(|r| pair(first[r], second[r])))
        };
        let (values, nibbles) = pack_two_of_four(n, k, (values, indices, row_bytes), line);
        TwoOfFourPairs {
            n,
            k,
            values,
            nibbles,
        }
    }

    /// `y[n × m] = W · x[k × m]`, f32 sums, on `threads` workers of the current rayon pool
    /// (1 runs on the calling thread).
    ///
    /// # Safety
    /// [`available`] returned true; `x.len() == k·m` and `y.len() == n·m`.
    pub(super) unsafe fn spmm(&self, threads: usize, x: &[u16], y: &mut [f32], m: usize) {
        debug_assert!(x.len() == self.k * m && y.len() == self.n * m);
        // SAFETY: the caller's contract.
        unsafe { product(self, threads, x, y, m) }
    }
}

/// Pack row-major `n × k` 16-bit weights (their bits) as `[block][pair][panel]` lines of
/// [`DENSE_PANELS`] panels a block: `line(lo, hi)` makes a panel's line from its 16 rows'
/// values at K `2q` and `2q + 1` (zero past `n` and `k`).
fn pack_dense(w: &[u16], n: usize, k: usize, line: fn(&[u16; LANES], &[u16; LANES]) -> Line) -> Vec<Line> {
    debug_assert_eq!(w.len(), n * k);
    let pairs = k.div_ceil(2);
    let block_rows = DENSE_PANELS * LANES;
    let mut lines = vec![Line::default(); n.div_ceil(block_rows) * pairs * DENSE_PANELS];
    if pairs > 0 {
        lines
            .par_chunks_mut(pairs * DENSE_PANELS)
            .enumerate()
            .for_each(|(b, block)| {
                for (i, out) in block.iter_mut().enumerate() {
                    let (q, p) = (i / DENSE_PANELS, i % DENSE_PANELS);
                    let at = |lane: usize, kk: usize| {
                        let row = b * block_rows + p * LANES + lane;
                        if row < n && kk < k { w[row * k + kk] } else { 0 }
                    };
                    let lo = std::array::from_fn(|lane| at(lane, 2 * q));
                    let hi = std::array::from_fn(|lane| at(lane, 2 * q + 1));
                    *out = line(&lo, &hi);
                }
            });
    }
    lines
}

/// Pack `n` rows of 2:4 weights as the stored format holds them (per row, two kept values
/// per group in ascending position; 2-bit positions four to a byte, `row_bytes` per row) as
/// `[block][group][panel]` lines of [`SPARSE_PANELS`] panels a block and as many nibble words
/// (row `r`'s nibble `ia | ib << 2` in bits `4r..`): `line(first, second)` makes a panel's
/// line from its 16 rows' kept values of a group (zero past `n`).
fn pack_two_of_four(
    n: usize,
    k: usize,
    (values, indices, row_bytes): (&[u16], &[u8], usize),
    line: impl Fn(&[u16; LANES], &[u16; LANES]) -> Line + Sync,
) -> (Vec<Line>, Vec<u64>) {
    debug_assert!(k.is_multiple_of(4) && values.len() == n * k / 2 && indices.len() == n * row_bytes);
    let groups = k / 4;
    let block_rows = SPARSE_PANELS * LANES;
    let blocks = n.div_ceil(block_rows);
    let mut lines = vec![Line::default(); blocks * groups * SPARSE_PANELS];
    let mut nibbles = vec![0u64; blocks * groups * SPARSE_PANELS];
    if groups > 0 {
        lines
            .par_chunks_mut(groups * SPARSE_PANELS)
            .zip(nibbles.par_chunks_mut(groups * SPARSE_PANELS))
            .enumerate()
            .for_each(|(b, (block, nib))| {
                for (i, (out, word)) in block.iter_mut().zip(nib.iter_mut()).enumerate() {
                    let (g, p) = (i / SPARSE_PANELS, i % SPARSE_PANELS);
                    let (mut first, mut second) = ([0u16; LANES], [0u16; LANES]);
                    for lane in 0..LANES {
                        let row = b * block_rows + p * LANES + lane;
                        if row < n {
                            let at = row * (k / 2) + 2 * g;
                            (first[lane], second[lane]) = (values[at], values[at + 1]);
                            let byte = indices[row * row_bytes + g / 2] >> (4 * (g % 2));
                            *word |= u64::from(byte & 0xF) << (4 * lane);
                        }
                    }
                    *out = line(&first, &second);
                }
            });
    }
    (lines, nibbles)
}

/// What the shared driver needs of a packed weight layout: its shape, how it packs the
/// activations, and its register tile.
trait Packed: Sync {
    /// One token's activations for one K step (a pair, or a group of four).
    type Step: Copy + Default + Send + Sync + 'static;
    /// Panels per block.
    const PANELS: usize;
    /// K steps per K block.
    const KC: usize;
    /// `(n, k)`.
    fn shape(&self) -> (usize, usize);
    /// K steps over all of K.
    fn steps(&self) -> usize;
    /// The per-thread buffer the activations are packed into.
    fn scratch() -> &'static LocalKey<RefCell<Vec<Self::Step>>>;
    /// Pack tile `tile` (tokens `8·tile ..`, zero past `m`) of the `k × m` activations as
    /// `[step][TOKENS]` into `out`.
    fn pack_tile(x: &[u16], k: usize, m: usize, tile: usize, out: &mut [Self::Step]);
    /// Accumulate K steps `s0..s1` of block `b` against the packed tile `x` (at step `s0`)
    /// into the register tile of `panels` × `tokens`, its sums at `acc` (`[token][block
    /// rows]`), as `pass` says.
    ///
    /// # Safety
    /// [`available`] returned true; `b` is a block, `s0 < s1 ≤ steps`, `1 ≤ panels ≤
    /// PANELS`, `1 ≤ tokens ≤ TOKENS`; `x` holds `(s1 - s0) · TOKENS` steps; `acc` holds
    /// `tokens` rows of `PANELS · 16` floats, written by no one else meanwhile.
    unsafe fn tile(
        &self,
        shape: (usize, usize),
        b: usize,
        steps: (usize, usize),
        x: *const Self::Step,
        acc: *mut f32,
        pass: Pass,
    );
}

/// How one register tile's pass over a K block starts and what it fetches ahead.
#[derive(Clone, Copy)]
struct Pass {
    /// Start from the sums in the scratch (every K block but the first).
    load: bool,
    /// Which K steps' weights this tile prefetches (one K block ahead into L1, [`FAR`]
    /// ahead into L2): steps `first, first + every, ..`. The next K block, or the next
    /// block's first, is the one that follows in memory; the `every` token tiles of a pass
    /// over a K block share its prefetches evenly, so the stream flows while all of them
    /// compute instead of in a burst during the first.
    prefetch: (usize, usize),
}

/// The product both layouts share: pack the activations per 8-token tile, then tasks of
/// (block chunk × tile group) run every block's K blocks over their tiles and transpose
/// their sums into `y`.
///
/// # Safety
/// [`available`] returned true; `x.len() == k·m` and `y.len() == n·m` for the layout's shape.
unsafe fn product<L: Packed>(layout: &L, threads: usize, x: &[u16], y: &mut [f32], m: usize) {
    let (n, k) = layout.shape();
    if trivial_product(y, n, k, m) {
        return;
    }
    let steps = layout.steps();
    let block_rows = L::PANELS * LANES;
    let blocks = n.div_ceil(block_rows);
    let tiles = m.div_ceil(TOKENS);
    let tile_len = steps * TOKENS;
    let parallel = threads > 1;
    let mut packed = L::scratch().with(|s| std::mem::take(&mut *s.borrow_mut()));
    let packed_s = line_aligned(&mut packed, tiles * tile_len);
    let pack = |(t, out): (usize, &mut [L::Step])| L::pack_tile(x, k, m, t, out);
    if parallel {
        packed_s.par_chunks_mut(tile_len).enumerate().for_each(pack);
    } else {
        packed_s.chunks_mut(tile_len).enumerate().for_each(pack);
    }
    let xp = &*packed_s;

    // Tasks: block chunks × tile groups.
    let grid = TaskGrid::new(blocks, tiles, threads, usize::MAX);
    // Each task writes its own rows × tokens of `y`; the tasks join before this returns.
    let out = SharedOutput(y.as_mut_ptr());
    let task = |t: usize| {
        let (block_range, tile_range) = grid.task(t);
        let (t0, t1) = (tile_range.start * TOKENS, (tile_range.end * TOKENS).min(m));
        let mut sums = SUMS.with(|s| std::mem::take(&mut *s.borrow_mut()));
        sums.resize(tile_range.len() * TOKENS * block_rows, 0.0);
        for b in block_range.clone() {
            let rows = (n - b * block_rows).min(block_rows);
            let panels = rows.div_ceil(LANES);
            for s0 in (0..steps).step_by(L::KC) {
                let s1 = (s0 + L::KC).min(steps);
                for tile in tile_range.clone() {
                    let tokens = (m - tile * TOKENS).min(TOKENS);
                    let at = (tile - tile_range.start) * TOKENS * block_rows;
                    let xt = &xp[tile * tile_len + s0 * TOKENS..tile * tile_len + s1 * TOKENS];
                    // SAFETY: the features were checked (caller); `b`, the steps, panels and
                    // tokens are in range; `xt` is the tile's steps `s0..s1`; the sums of
                    // this tile (`tokens` rows of `block_rows`) are this task's scratch.
                    unsafe {
                        layout.tile(
                            (panels, tokens),
                            b,
                            (s0, s1),
                            xt.as_ptr(),
                            sums[at..].as_mut_ptr(),
                            Pass {
                                load: s0 > 0,
                                prefetch: (tile - tile_range.start, tile_range.len()),
                            },
                        )
                    };
                }
            }
            for r in 0..rows {
                let dst = out.at((b * block_rows + r) * m + t0);
                for (t, src) in sums.chunks_exact(block_rows).take(t1 - t0).enumerate() {
                    // SAFETY: row `b·48 + r < n`, token `t0 + t < t1 ≤ m`: inside `y`, and
                    // in this task's rows × tokens.
                    unsafe { dst.add(t).write(src[r]) };
                }
            }
        }
        SUMS.with(|s| *s.borrow_mut() = sums);
    };
    if parallel {
        (0..grid.tasks()).into_par_iter().for_each(task);
    } else {
        (0..grid.tasks()).for_each(task);
    }
    L::scratch().with(|s| *s.borrow_mut() = packed);
}

/// The register-tile function of `P` panels × `T` tokens for a runtime `(panels, tokens)`,
/// with `U` copies of the sums: a tile of 1–3 tokens has too few independent `vdpbf16ps`
/// chains (2–9) to cover the instruction's latency at two a cycle, so consecutive K steps go
/// to `U` copies, added at the end.
macro_rules! pick_tile {
    ($tile:ident, $panels:expr, $tokens:expr, [$($p:literal),+]) => {
        pick_tile!($tile [], $panels, $tokens, [$($p),+])
    };
    // `$g` is `[]` or `[W]`: a widening format the tile is generic over, ahead of the shape.
    ($tile:ident $g:tt, $panels:expr, $tokens:expr, [$($p:literal),+]) => {
        match $panels {
            $($p => pick_tile!(@tokens $tile $g, $p, $tokens),)+
            _ => unreachable!("panels out of range"),
        }
    };
    (@tokens $tile:ident [$($w:ty)?], $p:literal, $tokens:expr) => {
        match $tokens {
            1 => $tile::<$($w,)? $p, 1, 4> as TileFn<_>,
            2 => $tile::<$($w,)? $p, 2, 2>,
            3 => $tile::<$($w,)? $p, 3, 2>,
            4 => $tile::<$($w,)? $p, 4, 1>,
            5 => $tile::<$($w,)? $p, 5, 1>,
            6 => $tile::<$($w,)? $p, 6, 1>,
            7 => $tile::<$($w,)? $p, 7, 1>,
            _ => $tile::<$($w,)? $p, 8, 1>,
        }
    };
}

/// A register tile: weights (and nibbles) at the block's first step, activations, steps,
/// sums, pass.
type TileFn<W> = unsafe fn(W, *const u32, usize, *mut f32, Pass);

mod blocks;
mod f16;
pub(super) use blocks::{BlockPairs, fits as blocks_fit};
pub(super) use f16::{Bf16, DenseHalves, F16, TwoOfFourHalves, Widen};

/// Whether this CPU runs the widening kernels ([`DenseHalves`], [`TwoOfFourHalves`]).
pub(super) fn f16_available() -> bool {
    f16::available()
}

/// How much faster than the f32 FMA, in FLOPs, `vdpbf16ps` must run for its kernels to be
/// chosen: widening costs a conversion per weight vector, amortised over a tile's tokens,
/// so near parity the two are level, and a margin keeps a noisy probe from flipping the
/// choice between runs (the two machines measured sit at 0.49× and about 2×).
const DOT_OVER_FMA: f64 = 1.15;

/// Alternating rounds of the FMA and dot-product probes behind [`bf16_widens`].
const PROBE_ROUNDS: usize = 8;

/// Whether bf16 products widen in registers for f32 FMA ([`DenseHalves`] /
/// [`TwoOfFourHalves`] of [`Bf16`]) instead of running `vdpbf16ps` ([`DensePairs`],
/// [`TwoOfFourPairs`]) (issue 20): true where the widening kernels run and the CPU lacks
/// AVX-512 BF16, or where its dot-product peak is not clearly above the FMA's. Measured once
/// per process on one thread unless [`BF16_KERNEL_ENV`](crate::isa::BF16_KERNEL_ENV) pins it
/// (the gate pins it for its child runs: `isa::bf16_kernel_pin`) or [`pin_bf16`] set it
/// first (a gate pinning its golden baseline's pick, issue 22).
pub(super) fn bf16_widens() -> bool {
    bf16_choice().0
}

/// This process's bf16 choice (widen or not) and how it was made; see [`bf16_widens`].
pub(super) fn bf16_choice() -> (bool, crate::isa::Bf16Source) {
    *BF16_CHOICE.get_or_init(choose_bf16)
}

/// Set this process's bf16 choice before anything measured it: `Err` with the choice in
/// force when one was already made (measured, read from the environment, or pinned).
pub(super) fn pin_bf16(widen: bool) -> Result<(), (bool, crate::isa::Bf16Source)> {
    let pinned = (widen, crate::isa::Bf16Source::Pinned);
    match BF16_CHOICE.set(pinned) {
        Ok(()) => Ok(()),
        Err(_) => {
            let now = bf16_choice();
            if now.0 == widen { Ok(()) } else { Err(now) }
        }
    }
}

/// Once per process: see [`bf16_widens`].
static BF16_CHOICE: std::sync::OnceLock<(bool, crate::isa::Bf16Source)> = std::sync::OnceLock::new();

fn choose_bf16() -> (bool, crate::isa::Bf16Source) {
    use crate::isa::Bf16Source;
    if !f16::available() {
        return (false, Bf16Source::Only);
    }
    if !available() {
        return (true, Bf16Source::Only);
    }
    match crate::isa::bf16_kernel_requested() {
        Some(crate::isa::Bf16Kernel::Dot) => return (false, Bf16Source::Requested),
        Some(crate::isa::Bf16Kernel::Widen) => return (true, Bf16Source::Requested),
        None => {}
    }
    // Trials alternate, so that load on a shared machine slows both probes alike, and
    // the best of each counts (about 25 ms in all).
    let (mut fma, mut dot) = (0.0f64, 0.0f64);
    for _ in 0..PROBE_ROUNDS {
        fma = fma.max(super::roofs::fma_peak(1, 1).0);
        dot = dot.max(super::roofs::dot_peak(super::roofs::DotPeak::Bf16, 1, 1).map_or(0.0, |(g, _)| g));
    }
    (dot < DOT_OVER_FMA * fma, Bf16Source::Measured)
}

impl Packed for DensePairs {
    type Step = u32;
    const PANELS: usize = DENSE_PANELS;
    const KC: usize = KC_PAIRS;

    fn shape(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    fn steps(&self) -> usize {
        self.k.div_ceil(2)
    }

    fn scratch() -> &'static LocalKey<RefCell<Vec<u32>>> {
        &PAIRS
    }

    fn pack_tile(x: &[u16], k: usize, m: usize, tile: usize, out: &mut [u32]) {
        // SAFETY: SSE2 is part of x86-64.
        unsafe { pack_pairs(x, k, m, tile, out) }
    }

    unsafe fn tile(
        &self,
        (panels, tokens): (usize, usize),
        b: usize,
        (s0, s1): (usize, usize),
        x: *const u32,
        acc: *mut f32,
        pass: Pass,
    ) {
        let f = pick_tile!(dense_tile, panels, tokens, [1, 2, 3]);
        let w = self.w[(b * self.steps() + s0) * DENSE_PANELS..].as_ptr();
        // SAFETY: the trait's contract: block `b` holds `steps` pairs of `DENSE_PANELS`
        // lines from `w`'s start, and `f` reads `s1 - s0` of them.
        unsafe { f(w, x, s1 - s0, acc, pass) }
    }
}

/// Tile `tile` of the `k × m` activations as `[pair][TOKENS]` pairs (zero past `k` and `m`).
///
/// # Safety
/// SSE2; `x.len() == k·m`; `out` holds `⌈k/2⌉ · TOKENS` pairs.
#[target_feature(enable = "sse2")]
unsafe fn pack_pairs(x: &[u16], k: usize, m: usize, tile: usize, out: &mut [u32]) {
    let t0 = tile * TOKENS;
    for (q, dst) in out.chunks_exact_mut(TOKENS).enumerate() {
        let (k0, k1) = (2 * q, 2 * q + 1);
        if k1 < k && t0 + TOKENS <= m {
            // Two rows of 8 tokens → 8 tokens of a pair, by one round of unpacking.
            let row = |kk: usize| {
                let s = &x[kk * m + t0..kk * m + t0 + TOKENS];
                // SAFETY: `s` is 8 readable u16 (16 bytes).
                unsafe { _mm_loadu_si128(s.as_ptr().cast()) }
            };
            let (a, c) = (row(k0), row(k1));
            // SAFETY: `dst` is 8 writable u32 (32 bytes).
            unsafe {
                _mm_storeu_si128(dst.as_mut_ptr().cast(), _mm_unpacklo_epi16(a, c));
                _mm_storeu_si128(dst[4..].as_mut_ptr().cast(), _mm_unpackhi_epi16(a, c));
            }
        } else {
            for (j, d) in dst.iter_mut().enumerate() {
                let tok = t0 + j;
                let at = |kk: usize| if kk < k && tok < m { x[kk * m + tok] } else { 0 };
                *d = pair(at(k0), at(k1));
            }
        }
    }
}

/// `P` panels × `T` tokens of dense sums over `pairs` K-pairs, in `U` copies.
///
/// # Safety
/// AVX-512F/BW/BF16 are available; `w` addresses `pairs · DENSE_PANELS` lines and `x`
/// `pairs · TOKENS` pairs; `acc` has `T` rows of `DENSE_PANELS · 16` floats (read when
/// `pass.load`), written by no one else meanwhile.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn dense_tile<const P: usize, const T: usize, const U: usize>(
    w: *const Line,
    x: *const u32,
    pairs: usize,
    acc: *mut f32,
    pass: Pass,
) {
    let mut next = pass.prefetch.0;
    let step = |a: &mut [[__m512; T]; P], q: usize| {
        if q == next {
            next += pass.prefetch.1;
            for p in 0..P {
                // A hint: an address past the weights fetches nothing that matters.
                let ahead = w.wrapping_add((q + KC_PAIRS) * DENSE_PANELS + p);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                let far = w.wrapping_add((q + FAR * KC_PAIRS) * DENSE_PANELS + p);
                _mm_prefetch::<_MM_HINT_T1>(far.cast());
            }
        }
        // SAFETY: pair q < pairs of the block's lines.
        let wv: [__m512bh; P] =
            std::array::from_fn(|p| bh(unsafe { _mm512_load_si512(w.add(q * DENSE_PANELS + p).cast()) }));
        for t in 0..T {
            // SAFETY: pair q, token t < TOKENS of the packed tile.
            let xb = bh(_mm512_set1_epi32(unsafe { x.add(q * TOKENS + t).read() } as i32));
            for (ap, &wp) in a.iter_mut().zip(&wv) {
                ap[t] = _mm512_dpbf16_ps(ap[t], wp, xb);
            }
        }
    };
    // SAFETY: the contract is the helper's.
    unsafe { copies::<P, T, U>(pairs, acc, DENSE_PANELS * LANES, pass.load, step) };
}

/// Run `step` over K steps `0..steps`, step `q` into copy `q % U` of the tile's sums, which
/// start from the scratch (copy 0, when `load`) or zero, and store their total.
///
/// # Safety
/// AVX-512F; `acc` has `T` rows of `stride ≥ 16·P` floats (read when `load`), written by no
/// one else meanwhile.
#[inline(always)]
unsafe fn copies<const P: usize, const T: usize, const U: usize>(
    steps: usize,
    acc: *mut f32,
    stride: usize,
    load: bool,
    mut step: impl FnMut(&mut [[__m512; T]; P], usize),
) {
    // SAFETY: the scratch rows (contract).
    let first = unsafe { load_sums::<P, T>(acc, stride, load) };
    // SAFETY: AVX-512F (contract).
    let mut a = [[[unsafe { _mm512_setzero_ps() }; T]; P]; U];
    a[0] = first;
    let mut q = 0;
    while q + U <= steps {
        for (u, au) in a.iter_mut().enumerate() {
            step(au, q + u);
        }
        q += U;
    }
    for q in q..steps {
        step(&mut a[0], q);
    }
    let (total, rest) = a.split_first_mut().expect("U >= 1");
    for au in rest.iter() {
        for (tp, up) in total.iter_mut().zip(au) {
            for (tv, &uv) in tp.iter_mut().zip(up) {
                // SAFETY: AVX-512F (contract).
                *tv = unsafe { _mm512_add_ps(*tv, uv) };
            }
        }
    }
    // SAFETY: as for the load.
    unsafe { store_sums(total, acc, stride) };
}

impl Packed for TwoOfFourPairs {
    type Step = u64;
    const PANELS: usize = SPARSE_PANELS;
    const KC: usize = KC_GROUPS;

    fn shape(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    fn steps(&self) -> usize {
        self.k / 4
    }

    fn scratch() -> &'static LocalKey<RefCell<Vec<u64>>> {
        &QUADS
    }

    fn pack_tile(x: &[u16], _k: usize, m: usize, tile: usize, out: &mut [u64]) {
        // SAFETY: SSE2 is part of x86-64.
        unsafe { pack_quads(x, m, tile, out) }
    }

    unsafe fn tile(
        &self,
        (panels, tokens): (usize, usize),
        b: usize,
        (s0, s1): (usize, usize),
        x: *const u64,
        acc: *mut f32,
        pass: Pass,
    ) {
        let f = pick_tile!(two_of_four_tile, panels, tokens, [1, 2]);
        let at = (b * self.steps() + s0) * SPARSE_PANELS;
        let (v, nib) = (self.values[at..].as_ptr(), self.nibbles[at..].as_ptr());
        // SAFETY: the trait's contract: block `b` holds `steps` groups of `SPARSE_PANELS`
        // lines and nibble words from `at`, and `f` reads `s1 - s0` of them.
        unsafe { f((v, nib), x.cast(), s1 - s0, acc, pass) }
    }
}

/// Tile `tile` of the `k × m` activations as `[group][TOKENS]` groups of four (zero past `m`).
///
/// # Safety
/// SSE2; `x.len() == k·m` with `k` a multiple of 4; `out` holds `k/4 · TOKENS` groups.
#[target_feature(enable = "sse2")]
unsafe fn pack_quads(x: &[u16], m: usize, tile: usize, out: &mut [u64]) {
    let t0 = tile * TOKENS;
    for (g, dst) in out.chunks_exact_mut(TOKENS).enumerate() {
        let k0 = 4 * g;
        if t0 + TOKENS <= m {
            // Four rows of 8 tokens → 8 tokens of four k, by two rounds of unpacking.
            let row = |j: usize| {
                let s = &x[(k0 + j) * m + t0..(k0 + j) * m + t0 + TOKENS];
                // SAFETY: `s` is 8 readable u16 (16 bytes).
                unsafe { _mm_loadu_si128(s.as_ptr().cast()) }
            };
            let (a, b, c, d) = (row(0), row(1), row(2), row(3));
            let (ab_lo, ab_hi) = (_mm_unpacklo_epi16(a, b), _mm_unpackhi_epi16(a, b));
            let (cd_lo, cd_hi) = (_mm_unpacklo_epi16(c, d), _mm_unpackhi_epi16(c, d));
            let quarters = [
                _mm_unpacklo_epi32(ab_lo, cd_lo),
                _mm_unpackhi_epi32(ab_lo, cd_lo),
                _mm_unpacklo_epi32(ab_hi, cd_hi),
                _mm_unpackhi_epi32(ab_hi, cd_hi),
            ];
            for (v, two) in quarters.into_iter().zip(dst.chunks_exact_mut(2)) {
                // SAFETY: `two` is 2 writable u64 (16 bytes).
                unsafe { _mm_storeu_si128(two.as_mut_ptr().cast(), v) };
            }
        } else {
            for (j, d) in dst.iter_mut().enumerate() {
                let tok = t0 + j;
                *d = if tok < m {
                    (0..4).fold(0u64, |acc, i| acc | u64::from(x[(k0 + i) * m + tok]) << (16 * i))
                } else {
                    0
                };
            }
        }
    }
}

/// Bit offsets for `vpmultishiftqb` that put row `r`'s nibble (bits `4r..4r+4` of the panel
/// word) into lane `r` as `2ia` (bytes 0, 1: from bit `4r − 1`, the low bit masked off) and
/// `2ib` (bytes 2, 3: from bit `4r + 1`).
const NIBBLE_SHIFTS: [u8; 64] = {
    let mut s = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        let lane = i / 4;
        let from = if i % 4 < 2 { 4 * lane + 63 } else { 4 * lane + 1 };
        s[i] = (from % 64) as u8;
        i += 1;
    }
    s
};

/// `P` panels × `T` tokens of 2:4 sums over `groups` groups of four, in `U` copies.
///
/// # Safety
/// AVX-512F/BW/BF16/VBMI are available; `vn.0` addresses `groups · SPARSE_PANELS` lines,
/// `vn.1` as many nibble words, `x` `groups · TOKENS` u64; `acc` has `T` rows of
/// `SPARSE_PANELS · 16` floats (read when `pass.load`), written by no one else meanwhile.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx512vbmi")]
unsafe fn two_of_four_tile<const P: usize, const T: usize, const U: usize>(
    (v, nib): (*const Line, *const u64),
    x: *const u32,
    groups: usize,
    acc: *mut f32,
    pass: Pass,
) {
    let x = x.cast::<u64>();
    // SAFETY: 64 readable bytes.
    let shifts = unsafe { _mm512_loadu_si512(NIBBLE_SHIFTS.as_ptr().cast()) };
    let (keep, odd) = (_mm512_set1_epi8(0b110), _mm512_set1_epi32(0x0100_0100));
    let mut next = pass.prefetch.0;
    let step = |a: &mut [[__m512; T]; P], g: usize| {
        let at = g * SPARSE_PANELS;
        if g == next {
            next += pass.prefetch.1;
            // Hints, as in the dense tile. A line holds the nibble words of four groups: the
            // tile that takes a group `g ≡ 0 (mod 4)` fetches them (each such group is some
            // tile's), which at one token saves two instructions of a dozen per group.
            for p in 0..P {
                _mm_prefetch::<_MM_HINT_T0>(v.wrapping_add(at + KC_GROUPS * SPARSE_PANELS + p).cast());
                _mm_prefetch::<_MM_HINT_T1>(v.wrapping_add(at + FAR * KC_GROUPS * SPARSE_PANELS + p).cast());
            }
            if g.is_multiple_of(4) {
                _mm_prefetch::<_MM_HINT_T0>(nib.wrapping_add(at + KC_GROUPS * SPARSE_PANELS).cast());
                _mm_prefetch::<_MM_HINT_T1>(nib.wrapping_add(at + FAR * KC_GROUPS * SPARSE_PANELS).cast());
            }
        }
        // SAFETY: group g < groups of the block's lines.
        let wv: [__m512bh; P] =
            std::array::from_fn(|p| bh(unsafe { _mm512_load_si512(v.add(at + p).cast()) }));
        let ctrl: [__m512i; P] = std::array::from_fn(|p| {
            // SAFETY: as above, for the nibble words.
            let word = _mm512_set1_epi64(unsafe { nib.add(at + p).read() } as i64);
            // (bits & 0b110) | odd: bytes 2ia, 2ia + 1, 2ib, 2ib + 1 of each lane.
            _mm512_ternarylogic_epi32::<0xEA>(_mm512_multishift_epi64_epi8(shifts, word), keep, odd)
        });
        for t in 0..T {
            // SAFETY: group g, token t < TOKENS of the packed tile.
            let xb = _mm512_set1_epi64(unsafe { x.add(g * TOKENS + t).read() } as i64);
            for ((ap, &wp), &c) in a.iter_mut().zip(&wv).zip(&ctrl) {
                ap[t] = _mm512_dpbf16_ps(ap[t], wp, bh(_mm512_shuffle_epi8(xb, c)));
            }
        }
    };
    // SAFETY: the contract is the helper's.
    unsafe { copies::<P, T, U>(groups, acc, SPARSE_PANELS * LANES, pass.load, step) };
}

/// A register tile's sums: the scratch's (`T` rows of `stride` floats) when `load`, else zero.
///
/// # Safety
/// AVX-512F; `acc` has `T` rows of `stride ≥ 16·P` readable floats when `load`.
#[inline(always)]
unsafe fn load_sums<const P: usize, const T: usize>(
    acc: *const f32,
    stride: usize,
    load: bool,
) -> [[__m512; T]; P] {
    // SAFETY: AVX-512F (contract).
    let mut a = [[unsafe { _mm512_setzero_ps() }; T]; P];
    if load {
        for (p, ap) in a.iter_mut().enumerate() {
            for (t, v) in ap.iter_mut().enumerate() {
                // SAFETY: row t < T, panel p < P of the scratch (contract).
                *v = unsafe { _mm512_loadu_ps(acc.add(t * stride + p * LANES)) };
            }
        }
    }
    a
}

/// Store a register tile's sums into the scratch.
///
/// # Safety
/// AVX-512F; `acc` has `T` rows of `stride ≥ 16·P` writable floats.
#[inline(always)]
unsafe fn store_sums<const P: usize, const T: usize>(a: &[[__m512; T]; P], acc: *mut f32, stride: usize) {
    for (p, ap) in a.iter().enumerate() {
        for (t, v) in ap.iter().enumerate() {
            // SAFETY: row t < T, panel p < P of the scratch (contract).
            unsafe { _mm512_storeu_ps(acc.add(t * stride + p * LANES), *v) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_20_nibble_shifts_select_each_lanes_two_indices() {
        // Emulate vpmultishiftqb + the ternary logic on every nibble value in every lane.
        for nibble in 0u64..16 {
            for lane in 0..16 {
                // Every other lane's nibble all ones: the masking must drop them.
                let word = !(0xF << (4 * lane)) | nibble << (4 * lane);
                let ctrl: Vec<u8> = (0..4)
                    .map(|j| {
                        let from = u32::from(NIBBLE_SHIFTS[lane * 4 + j]);
                        let byte = word.rotate_right(from) as u8;
                        (byte & 0b110) | (j as u8 & 1)
                    })
                    .collect();
                let (ia, ib) = ((nibble & 3) as u8, (nibble >> 2) as u8);
                assert_eq!(
                    ctrl,
                    vec![2 * ia, 2 * ia + 1, 2 * ib, 2 * ib + 1],
                    "nibble {nibble} lane {lane}"
                );
            }
        }
    }
}
