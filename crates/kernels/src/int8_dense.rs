//! The dense int8 comparator on AVX-512 VNNI, weight-stationary: `y[N×M] = w[N×K] · x[K×M]`,
//! i8 × i8 → i32, bit-exact, with the weights packed once (issue 20).
//!
//! Why packed once: the vendor libraries the comparator is measured against (oneDNN's
//! matmul with its weights reordered to `format_tag_any`, MKL's packed GEMM) lay the weights
//! out once and time only the products, as the sparse kernels compress theirs once. The
//! raw-weights kernel this replaces re-read W per call for its row sums and XOR-shifted every
//! weight vector in the few-token loop; on Zen 4 it ran at 0.58–0.89× oneDNN 3.2.
//!
//! * **Layout** ([`DenseBlocks`]). Blocks of [`LANES`] rows; per block and K-quad (four
//!   consecutive k) one 64-byte line holds the 16 rows' four weights, shifted to `w + 128`
//!   (unsigned: `vpdpbusd` multiplies unsigned by signed bytes). A block is one sequential,
//!   line-aligned stream; K is padded to whole quads and N to whole blocks with zero bytes
//!   (padded k meets zero activations; padded rows are never stored).
//! * **Signedness and exactness.** The activations stay signed and the shift is removed per
//!   token: `Σ (w + 128) · x = w · x + 128 · Σ x`, so every output of token `t` is corrected
//!   by `-128 · Σ_k x[k, t]`, computed per call from the activations (M·K bytes, not N·K).
//!   `vpdpbusd` wraps modulo 2^32 and so does the correction; the true sum fits i32 for
//!   `K ≤ INT8_MAX_K`, so the result is exact.
//! * **Feature lanes** (up to [`FEW_TOKENS`] tokens): a zmm of accumulators is 16 rows of one
//!   token; a register tile of `R` blocks × `T` tokens loads each weight line once and meets
//!   it with each token's quad broadcast from memory (oneDNN's brgemm does the same). No
//!   horizontal sums; the tile is transposed once into `y`'s token-contiguous rows at the
//!   end of K. Above [`GROUP`] tokens they go in equal groups of at most [`GROUP`] (the
//!   last one padded by repeating a token), each tile of blocks meeting every group while
//!   its weights are in L2. The driver ([`feature_lanes`]) is generic over where the lines
//!   come from ([`Lines`]): the int8 2:4 kernel of `int8_expand` rebuilds them in registers.
//! * **Token lanes** (more tokens): a zmm is 16 tokens of one row, as in the sparse kernels;
//!   the activations are packed per 64-token panel as `[k/4][token][4]` signed bytes, each
//!   row's weight quad is broadcast from its line, [`MR`] rows × 64 tokens per register tile
//!   over K blocks of [`KC`] quads (the micro-panel, up to 256 KiB, streamed from L2; chosen
//!   by measurement, see [`KC`]).

use super::precision::Epilogue;
use super::schedule::TaskGrid;
use super::scratch::line_aligned;
use super::shared_output::{SharedOutput, for_each_chunk, trivial_product};
use rayon::prelude::*;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Rows per block: one zmm of i32 lanes.
const LANES: usize = 16;
/// Up to this many tokens the feature-lane kernel runs (see the module doc).
pub(super) const FEW_TOKENS: usize = 48;
/// Tokens a feature-lane group holds at most: at 16 tokens two groups of 8 (3-block tiles)
/// ran 0.74 ms where one of 16 (1-block tiles) ran 1.66 (4096², Zen 4, 2 threads).
const GROUP: usize = 8;
/// Rows per token-lane register tile.
pub(super) const MR: usize = 6;
/// zmm registers of tokens per token-lane register tile (16 tokens each).
pub(super) const NR: usize = 4;
/// Tokens per packed activation panel (one token-lane tile wide).
pub(super) const TOKENS: usize = NR * 16;
/// K-quads per K block of the token-lane kernel: its micro-panel is `KC · TOKENS · 4` bytes
/// (256 KiB), streamed from L2 (the tile's four 64-byte loads a quad keep up from there).
/// Fewer K blocks mean fewer round trips of each tile's sums through `y`. Measured on Zen 4
/// (2 threads): 96 → 128 → 192 gained 2–3% each, 48 lost 5–7%; 192 → 1024 (one block up to
/// K = 4096) ran 2048³ 23.1 → 22.8 ms, 128 × 11008 × 4096 14.9 → 14.6, 128 × 4096² 5.85 →
/// 5.61, 512 × 4096² 21.5 → 21.2 (medians of 6, alternating, on a noisy machine; 512 quads
/// was between). A C model of this loop, both cores busy, agreed: 512 × 4096² (one core's
/// half) 20.0 → 19.3 ms, 2048³ 20.4 → 19.8 at 512 quads.
const KC: usize = 1024;
/// Most row blocks (of [`MR`] rows) per token-lane task, so its weights for one K block stay
/// in L2 while it walks its token panels.
const MAX_CHUNK_TILES: usize = 32;

/// One K-quad of a block: 16 rows × 4 bytes of `w + 128`, a cache line.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
pub(super) struct Line(pub(super) [u8; 64]);

thread_local! {
    /// Per-call activation scratch reused on the calling thread (packed activations), so a
    /// repeated product does not page-fault fresh memory every call.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Whether this CPU runs these kernels: AVX-512F, BW and VNNI, detected at run time.
pub(super) fn available() -> bool {
    super::int8_vnni::available()
}

/// Dense int8 weights packed for `vpdpbusd` (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct DenseBlocks {
    n: usize,
    k: usize,
    quads: usize,
    /// `[block][quad]` lines.
    lines: Vec<Line>,
}

impl DenseBlocks {
    /// Pack the row-major `n × k` weights `w` (`w.len() == n · k`).
    pub(super) fn new(w: &[i8], n: usize, k: usize) -> DenseBlocks {
        debug_assert_eq!(w.len(), n * k);
        let quads = k.div_ceil(4);
        let blocks = n.div_ceil(LANES);
        let mut lines = vec![Line([0; 64]); blocks * quads];
        if k > 0 {
            for (block, rows) in lines.chunks_exact_mut(quads.max(1)).zip(w.chunks(LANES * k)) {
                for (lane, row) in rows.chunks_exact(k).enumerate() {
                    for (line, quad) in block.iter_mut().zip(row.chunks(4)) {
                        let cell = &mut line.0[lane * 4..lane * 4 + 4];
                        cell.iter_mut()
                            .zip(quad)
                            .for_each(|(d, &s)| *d = (s as u8) ^ 0x80);
                    }
                }
            }
        }
        DenseBlocks { n, k, quads, lines }
    }

    /// Bytes of the packed weights (with the padding).
    pub(super) fn packed_bytes(&self) -> usize {
        self.lines.len() * 64
    }

    /// Block `b`'s first line.
    fn block(&self, b: usize) -> *const Line {
        self.lines[b * self.quads..].as_ptr()
    }

    /// `y[n × m] = W · x[k × m]`, exact in i32, on `threads` workers of the current rayon
    /// pool (1 runs on the calling thread), stored through `epilogue`; returns whether it
    /// was (an empty product leaves zeros, whose bits are 0.0 as well).
    ///
    /// # Safety
    /// [`available`] returned true, `x.len() == k·m`, `y.len() == n·m`, and
    /// `k ≤ INT8_MAX_K` (so the true sums fit in i32).
    pub(super) unsafe fn gemm(
        &self,
        threads: usize,
        x: &[i8],
        y: &mut [i32],
        m: usize,
        epilogue: Epilogue<'_>,
    ) -> bool {
        debug_assert!(x.len() == self.k * m && y.len() == self.n * m);
        if trivial_product(y, self.n, self.k, m) {
            return true;
        }
        let mut scratch = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
        // SAFETY: the caller's contract, passed on.
        unsafe {
            if m <= FEW_TOKENS {
                feature_lanes(self, threads, (x, y, m), &mut scratch, epilogue);
            } else {
                self.token_lanes(threads, x, y, m, &mut scratch, epilogue);
            }
        }
        SCRATCH.with(|s| *s.borrow_mut() = scratch);
        true
    }

    /// [`Self::gemm`] with 16 tokens of one row per zmm.
    ///
    /// # Safety
    /// As for [`Self::gemm`], and `m ≥ 1`.
    unsafe fn token_lanes(
        &self,
        threads: usize,
        x: &[i8],
        y: &mut [i32],
        m: usize,
        scratch: &mut Vec<u8>,
        epilogue: Epilogue<'_>,
    ) {
        let (n, k, quads) = (self.n, self.k, self.quads);
        let panels = m.div_ceil(TOKENS);
        let panel_bytes = quads * TOKENS * 4;
        let xp = line_aligned(scratch, panels * panel_bytes);
        let corrections = pack_token_panels(threads, (x, k, m), quads, xp);
        let (xp, corrections) = (&*xp, &corrections[..]);

        let grid = TaskGrid::new(n.div_ceil(MR), panels, threads, MAX_CHUNK_TILES);
        let out = SharedOutput(y.as_mut_ptr());
        let task = |t: usize| {
            let (tile_range, panel_range) = grid.task(t);
            for p in panel_range {
                let masks = token_masks(m, p);
                let panel = &xp[p * panel_bytes..(p + 1) * panel_bytes];
                let corr = &corrections[p * TOKENS..(p + 1) * TOKENS];
                for q0 in (0..quads).step_by(KC) {
                    let q1 = (q0 + KC).min(quads);
                    for tile in tile_range.clone() {
                        let row0 = tile * MR;
                        let rows = (n - row0).min(MR);
                        // Each row's quad q is the i32 at lane (row % 16) of its block's line q.
                        let w_rows: [*const u8; MR] = std::array::from_fn(|r| {
                            let row = (row0 + r).min(n - 1);
                            let line = self.block(row / LANES).wrapping_add(q0);
                            line.cast::<u8>().wrapping_add((row % LANES) * 4)
                        });
                        let ends = (q1 == quads).then(|| tile_scales(epilogue, row0)).flatten();
                        let at = out.at(row0 * m + p * TOKENS);
                        prefetch_tile_output(at, m, rows);
                        // SAFETY: the tile (rows row0.., tokens p·TOKENS..) is inside `y` where
                        // `rows` and the masks say so, and only this task writes it; the
                        // weight lines and the panel hold quads q0..q1; features checked.
                        unsafe {
                            token_tile(
                                w_rows,
                                &panel[q0 * TOKENS * 4..q1 * TOKENS * 4],
                                (at, m),
                                rows,
                                masks,
                                ((q0 == 0).then_some(corr), ends),
                            );
                        }
                    }
                }
            }
        };
        if threads > 1 {
            (0..grid.tasks()).into_par_iter().for_each(task);
        } else {
            (0..grid.tasks()).for_each(task);
        }
    }
}

/// Where the feature-lane tiles read their weight lines: each line is 16 rows × one K-quad of
/// `w + 128`, `vpdpbusd`'s unsigned operand. [`DenseBlocks`] stores them whole;
/// `int8_expand` rebuilds them from 2:4 in registers, and so runs at dense's instruction
/// count on fewer bytes, sharing everything else here (groups, tiles, corrections).
pub(super) trait Lines: Sync {
    /// Output rows.
    fn rows(&self) -> usize;
    /// K-quads per block, K padded as the source pads it: each token row holds this many.
    fn quads(&self) -> usize;
    /// The start of block `b`'s stream.
    fn block_at(&self, b: usize) -> *const u8;
    /// One `R`-block × `T`-token tile over all quads: the sums without the tokens'
    /// corrections.
    ///
    /// # Safety
    /// The source's features were detected; each block pointer is a [`Self::block_at`] and
    /// each token pointer has `4 · quads` bytes.
    unsafe fn tile<const R: usize, const T: usize>(
        w: [*const u8; R],
        x: [*const u8; T],
        quads: usize,
    ) -> [[__m512i; T]; R];
}

impl Lines for DenseBlocks {
    fn rows(&self) -> usize {
        self.n
    }

    fn quads(&self) -> usize {
        self.quads
    }

    fn block_at(&self, b: usize) -> *const u8 {
        self.block(b).cast()
    }

    unsafe fn tile<const R: usize, const T: usize>(
        w: [*const u8; R],
        x: [*const u8; T],
        quads: usize,
    ) -> [[__m512i; T]; R] {
        // SAFETY: the caller's contract; dense blocks exist only where VNNI was detected.
        unsafe { lanes_tile::<R, T>(w.map(|p| p.cast()), x, quads) }
    }
}

/// `y[rows × m] = W · x[k × m]` with 16 rows of one token per zmm, the lines from `src`.
///
/// # Safety
/// As for [`DenseBlocks::gemm`] (with `src`'s features), `1 ≤ m ≤ FEW_TOKENS`, and `x` holds
/// `k ≤ 4 · src.quads()` rows.
pub(super) unsafe fn feature_lanes<L: Lines>(
    src: &L,
    threads: usize,
    (x, y, m): (&[i8], &mut [i32], usize),
    scratch: &mut Vec<u8>,
    epilogue: Epilogue<'_>,
) {
    let (n, stride) = (src.rows(), src.quads() * 4);
    let k = x.len() / m;
    // Token-major, signed, zero past k: token t's quad q is the i32 at t·stride + 4q.
    scratch.resize(m * stride, 0);
    let xt = &mut scratch[..m * stride];
    super::int8_vnni::pack_token_major(x, k, m, stride, 0, xt);
    let xt = &*xt;
    let mut correction = [0i32; FEW_TOKENS];
    for (c, row) in correction.iter_mut().zip(xt.chunks_exact(stride)) {
        *c = row
            .iter()
            .map(|&b| i32::from(b as i8))
            .sum::<i32>()
            .wrapping_mul(-128);
    }
    // Groups of `len` tokens (the last one may hold fewer), at most GROUP each.
    let len = m.div_ceil(m.div_ceil(GROUP));
    let blocks = n.div_ceil(LANES);
    let r = tile_blocks(len);
    let chunk_blocks = blocks.div_ceil(threads.max(1) * 4).next_multiple_of(r);
    let task = |(c, y_chunk): (usize, &mut [i32])| {
        let out = Out {
            rows: y_chunk.len() / m,
            y: y_chunk,
            m,
            correction: &correction[..m],
            epilogue: epilogue.rows_from(c * chunk_blocks * LANES),
        };
        // SAFETY: the features are the caller's; each token row holds `stride` bytes and
        // each block `quads` lines.
        unsafe { groups(src, c * chunk_blocks, xt, stride, len, out) };
    };
    for_each_chunk(y, chunk_blocks * LANES * m, threads > 1, task);
}

/// The blocks of one task (from block `first`, as many as `out` has rows for) against every
/// group of `len ≤ GROUP` tokens, in register tiles of the size [`tile_blocks`] picks.
///
/// # Safety
/// As for [`feature_lanes`]; `xt` holds the tokens' rows of `stride = quads · 4` bytes.
unsafe fn groups<L: Lines>(src: &L, first: usize, xt: &[u8], stride: usize, len: usize, out: Out<'_>) {
    macro_rules! tiles {
        ($($t:literal => $r:literal),* $(,)?) => {
            match len {
                // SAFETY: as for this function.
                $($t => unsafe { tiles::<L, $r, $t>(src, first, xt, stride, out) },)*
                _ => unreachable!("a feature-lane group holds 1 to GROUP = 8 tokens"),
            }
        };
    }
    tiles!(1 => 8, 2 => 8, 3 => 6, 4 => 5, 5 => 4, 6 => 4, 7 => 3, 8 => 3);
}

/// `R`-block × `T`-token register tiles over the task's blocks: each tile of blocks meets
/// every group of `T` tokens in turn, so its weights come from L2 after the first group
/// (group after group over all the task's blocks had re-read them from L3 or DRAM).
/// A last group with fewer tokens repeats its last one (computed, never stored).
///
/// # Safety
/// As for [`groups`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tiles<L: Lines, const R: usize, const T: usize>(
    src: &L,
    first: usize,
    xt: &[u8],
    stride: usize,
    out: Out<'_>,
) {
    let blocks = out.rows.div_ceil(LANES);
    let last = src.rows().div_ceil(LANES) - 1;
    for b0 in (0..blocks).step_by(R) {
        // Blocks past the task's last repeat it (computed, never stored).
        let w: [*const u8; R] =
            std::array::from_fn(|i| src.block_at((first + b0 + i).min(first + blocks - 1).min(last)));
        for t0 in (0..out.m).step_by(T) {
            let valid = (out.m - t0).min(T);
            let x: [*const u8; T] = std::array::from_fn(|t| xt[(t0 + t.min(valid - 1)) * stride..].as_ptr());
            // SAFETY: each block holds `quads` lines and each token `quads` quads (caller).
            let acc = unsafe { L::tile::<R, T>(w, x, src.quads()) };
            let mut lanes = [[0i32; LANES]; T];
            for (i, acc_block) in acc.iter().enumerate() {
                let row0 = (b0 + i) * LANES;
                if row0 >= out.rows {
                    break;
                }
                for (dst, &a) in lanes.iter_mut().zip(acc_block) {
                    // SAFETY: `dst` is 16 writable i32.
                    unsafe { _mm512_storeu_si512(dst.as_mut_ptr().cast(), a) };
                }
                for lane in 0..LANES.min(out.rows - row0) {
                    let y_row = &mut out.y[(row0 + lane) * out.m + t0..][..valid];
                    let correction = &out.correction[t0..t0 + valid];
                    let scale = out.epilogue.row_scale(row0 + lane);
                    for ((d, l), &c) in y_row.iter_mut().zip(&lanes).zip(correction) {
                        *d = Epilogue::value(l[lane].wrapping_add(c), scale);
                    }
                }
            }
        }
    }
}

/// Pack `x` (`k × m`) into 64-token panels of `quads` quads each (`[panel][k/4][token][4]`,
/// zero past `k` and `m`) into `xp` (exactly that long), and return every token's correction
/// `-128 · Σ_k x` (zero past `m`), the packing split over `threads` workers.
pub(super) fn pack_token_panels(
    threads: usize,
    (x, k, m): (&[i8], usize, usize),
    quads: usize,
    xp: &mut [u8],
) -> Vec<i32> {
    let panels = m.div_ceil(TOKENS);
    let panel_bytes = quads * TOKENS * 4;
    debug_assert_eq!(xp.len(), panels * panel_bytes);
    // -128 · Σ_k x[k, t] per token, zero past m (|Σ x| ≤ 128 · K fits i32).
    let mut corrections = vec![0i32; panels * TOKENS];
    // One run of consecutive panels per worker.
    let run = panels.div_ceil(threads.max(1));
    let pack = |(r, (out, corr)): (usize, (&mut [u8], &mut [i32]))| {
        // SAFETY: the token-lane kernels run only where VNNI was detected; `out` holds the
        // run's panels and `corr` their corrections; `x.len() == k · m` (their callers).
        unsafe { pack_panels(x, k, m, r * run, out, corr) }
    };
    let (run_bytes, run_tokens) = (run * panel_bytes, run * TOKENS);
    if threads > 1 {
        xp.par_chunks_mut(run_bytes)
            .zip(corrections.par_chunks_mut(run_tokens))
            .enumerate()
            .for_each(pack);
    } else {
        xp.chunks_mut(run_bytes)
            .zip(corrections.chunks_mut(run_tokens))
            .enumerate()
            .for_each(pack);
    }
    corrections
}

/// Where a feature-lane task's results go: its rows of `y` (`rows` of `m` tokens), each
/// token corrected by its `correction`, stored through `epilogue` (from the task's first row).
struct Out<'a> {
    y: &'a mut [i32],
    rows: usize,
    m: usize,
    correction: &'a [i32],
    epilogue: Epilogue<'a>,
}

/// A token tile's weight scales from its first row on, and the activations'.
pub(super) type TileScales<'a> = (&'a [f32], f32);

/// The weight scales of a token tile from `row0` on, and the activations' (`None` for sums).
///
/// Why a slice of the scales and not the tile's products of them: an array built per call
/// in the caller's frame with 4-byte stores and read whole by the tile could not be
/// forwarded from the store buffer, so each call waited for the previous tile's output
/// stores (cache misses) to reach L1 — ~220 ns a call in `perf` on 2048³, which ate the
/// fused epilogue's gain. A slice is two 8-byte words, stored and loaded alike.
pub(super) fn tile_scales<'a>(epilogue: Epilogue<'a>, row0: usize) -> Option<TileScales<'a>> {
    match epilogue {
        Epilogue::Sums => None,
        Epilogue::Scaled(s) => Some((&s.w_scale[row0.min(s.w_scale.len())..], s.x_scale)),
    }
}

/// Blocks per feature-lane register tile for a group of `tokens`: as many as leave the
/// `R · T` accumulators and `R` weight vectors in the 32 zmm (what [`groups`] instantiates).
fn tile_blocks(tokens: usize) -> usize {
    match tokens {
        1 | 2 => 8,
        3 => 6,
        4 => 5,
        5 | 6 => 4,
        _ => 3,
    }
}

/// Lines ahead the feature-lane tile prefetches each block's stream. Measured on Zen 4
/// (2 threads, dense int8 medians of five alternated rounds), 8 against 16: 1×4096×11008
/// 0.735 against 0.899 ms (a second set: 0.892 against 0.930), 1×11008×4096 0.964 against
/// 1.169, 8×4096×11008 1.052 against 1.178, level at 1–32 tokens on 4096² (in L3); against
/// oneDNN at one token on the FFN shapes 0.72–0.90× became 0.91–0.99×. With eight streams
/// a thread, 16 lines ahead keeps more misses in flight than the core tracks.
const PREFETCH_LINES: usize = 8;

/// One `R`-block × `T`-token feature-lane tile over all quads: per quad, each block's line
/// meets each token's quad (broadcast); returns the sums without the tokens' corrections.
///
/// # Safety
/// AVX-512F/BW/VNNI are available; each block pointer has `quads` lines, each token pointer
/// `4 · quads` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn lanes_tile<const R: usize, const T: usize>(
    w: [*const Line; R],
    x: [*const u8; T],
    quads: usize,
) -> [[__m512i; T]; R] {
    let mut acc = [[_mm512_setzero_si512(); T]; R];
    for q in 0..quads {
        // SAFETY: line q < quads of each block (caller); the prefetch may point past the
        // end, which a prefetch does not fault on.
        let wv: [__m512i; R] = std::array::from_fn(|r| unsafe {
            let at = w[r].add(q);
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH_LINES).cast());
            _mm512_load_si512(at.cast())
        });
        for (t, &xt) in x.iter().enumerate() {
            // SAFETY: quad q of each token is inside its row (caller).
            let xv = _mm512_set1_epi32(unsafe { xt.add(4 * q).cast::<i32>().read_unaligned() });
            for (acc_block, &wb) in acc.iter_mut().zip(&wv) {
                acc_block[t] = _mm512_dpbusd_epi32(acc_block[t], wb, xv);
            }
        }
    }
    acc
}

/// Pack the run of token panels from `p0` (as many as `corr` has room for, [`TOKENS`] each)
/// as `[k/4][token][4]` signed bytes (zero past `k` and past `m`), and set `corr` to their
/// tokens' corrections `-128 · Σ_k x`. Per quad and panel: four masked 64-token row loads
/// (the masks zero the tokens past `m`), two rounds of byte unpacking and a transpose of
/// 128-bit lanes; the sums come from `vpdpbusd` against ones on the packed quads.
///
/// Why: the corrections had been a serial pass over `x` after an SSE2 pack (16 tokens at a
/// time, scalar at the tails), together ~7% of a 2048³ product in `perf` on Zen 4; packed
/// this way the product ran 21.2 ms where it ran 22.0 (medians of 6, 2 threads). Walking
/// the run quad by quad across its panels (reading each row of `x` in one stretch) lost
/// ~2% to the run's many write streams; panel by panel writes one.
///
/// # Safety
/// AVX-512F/BW/VNNI are available; `x.len() == k·m`; the run's panels start below `m`;
/// `out` holds `corr.len() / TOKENS` panels of `⌈k/4⌉ · TOKENS · 4` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn pack_panels(x: &[i8], k: usize, m: usize, p0: usize, out: &mut [u8], corr: &mut [i32]) {
    let count = corr.len() / TOKENS;
    let panel_bytes = out.len() / count;
    let ones = _mm512_set1_epi8(1);
    corr.fill(0);
    for p in 0..count {
        let t0 = (p0 + p) * TOKENS;
        let valid = (m - t0).min(TOKENS);
        let mask: __mmask64 = if valid == 64 { !0 } else { (1 << valid) - 1 };
        for q in 0..panel_bytes / (TOKENS * 4) {
            let k0 = q * 4;
            let row = |j: usize| {
                if k0 + j < k {
                    // SAFETY: row k0 + j from token t0 < m starts inside `x`; the masked-off
                    // bytes (past m) are neither read nor faulted on.
                    unsafe { _mm512_maskz_loadu_epi8(mask, x.as_ptr().add((k0 + j) * m + t0).cast()) }
                } else {
                    _mm512_setzero_si512()
                }
            };
            let (a, b, c, e) = (row(0), row(1), row(2), row(3));
            let (ab_lo, ab_hi) = (_mm512_unpacklo_epi8(a, b), _mm512_unpackhi_epi8(a, b));
            let (ce_lo, ce_hi) = (_mm512_unpacklo_epi8(c, e), _mm512_unpackhi_epi8(c, e));
            // Lane i of r0..r3 holds tokens 16i + 0..4, 4..8, 8..12, 12..16.
            let r0 = _mm512_unpacklo_epi16(ab_lo, ce_lo);
            let r1 = _mm512_unpackhi_epi16(ab_lo, ce_lo);
            let r2 = _mm512_unpacklo_epi16(ab_hi, ce_hi);
            let r3 = _mm512_unpackhi_epi16(ab_hi, ce_hi);
            let (t01, t23) = (
                _mm512_shuffle_i32x4::<0x44>(r0, r1),
                _mm512_shuffle_i32x4::<0x44>(r2, r3),
            );
            let (u01, u23) = (
                _mm512_shuffle_i32x4::<0xEE>(r0, r1),
                _mm512_shuffle_i32x4::<0xEE>(r2, r3),
            );
            let groups = [
                _mm512_shuffle_i32x4::<0x88>(t01, t23),
                _mm512_shuffle_i32x4::<0xDD>(t01, t23),
                _mm512_shuffle_i32x4::<0x88>(u01, u23),
                _mm512_shuffle_i32x4::<0xDD>(u01, u23),
            ];
            let dst = &mut out[p * panel_bytes + q * TOKENS * 4..][..TOKENS * 4];
            let sums = &mut corr[p * TOKENS..(p + 1) * TOKENS];
            for ((v, d), s) in groups
                .into_iter()
                .zip(dst.chunks_exact_mut(64))
                .zip(sums.chunks_exact_mut(16))
            {
                // SAFETY: `d` is 64 writable bytes, `s` 16 i32.
                unsafe {
                    _mm512_storeu_si512(d.as_mut_ptr().cast(), v);
                    let acc = _mm512_loadu_si512(s.as_ptr().cast());
                    _mm512_storeu_si512(s.as_mut_ptr().cast(), _mm512_dpbusd_epi32(acc, ones, v));
                }
            }
        }
    }
    corr.iter_mut().for_each(|c| *c = c.wrapping_mul(-128));
}

/// Ask for the lines of a token tile's outputs (`rows` rows of 64 tokens, `ldy` apart) to
/// write, before the tile runs: the tile's stores at the end of K then find them in cache
/// rather than each waiting for its line from memory. In `perf` (2048³, one thread) ~100 ns
/// a tile had gone to returning from the tile; with the lines asked for first, 2048³
/// against MKL went 0.93–0.96 → 0.93–1.02 (4 alternated rounds each, 2 threads).
pub(super) fn prefetch_tile_output(y: *mut i32, ldy: usize, rows: usize) {
    for r in 0..rows {
        for c in 0..NR {
            // SAFETY: a prefetch does not fault, wherever it points.
            unsafe { _mm_prefetch::<_MM_HINT_ET0>(y.wrapping_add(r * ldy + c * 16).cast()) };
        }
    }
}

/// Store masks of panel `p`'s four 16-token groups (all clear past `m`).
pub(super) fn token_masks(m: usize, p: usize) -> [__mmask16; NR] {
    std::array::from_fn(|c| {
        let valid = m.saturating_sub(p * TOKENS + c * 16).min(16);
        ((1u32 << valid) - 1) as __mmask16
    })
}

/// One MR × (up to) 64-token tile over the quads of `x`: each row's weight quad (unsigned, in its
/// line at `w_rows[r] + 64 q`) broadcast against 16 tokens' signed quads per zmm. Starts from
/// the tokens' corrections (`first`: the first K block) or from the partial sums in `y` (row
/// stride `ldy`), and stores the first `rows` rows under the masks: the sums, or on the last
/// K block with `ends` (the rows' weight scales from the tile's first, and the activations')
/// their f32 values `sum · (w_scale[r] · x_scale)` (bit for bit `Epilogue::value`:
/// `vcvtdq2ps` rounds to nearest as `as f32` does).
///
/// # Safety
/// AVX-512F/BW/VNNI are available; each of `w_rows` is readable at `64 q .. 64 q + 4` for
/// every quad of `x` (`x.len() / 256` of them); `y` addresses a tile whose first `rows` rows
/// and masked tokens are in bounds and written by no one else meanwhile.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn token_tile(
    w_rows: [*const u8; MR],
    x: &[u8],
    (y, ldy): (*mut i32, usize),
    rows: usize,
    masks: [__mmask16; NR],
    (first, ends): (Option<&[i32]>, Option<TileScales<'_>>),
) {
    // A panel's last groups of 16 tokens past `m` hold no token: the tile skips them, so a
    // product of 72 tokens costs five vectors of work, not the eight of two full panels.
    let args = (w_rows, x, (y, ldy), rows, masks, (first, ends));
    // SAFETY: the caller's contract, passed on.
    unsafe {
        match masks.iter().take_while(|&&mask| mask != 0).count() {
            1 => token_tile_of::<1>(args),
            2 => token_tile_of::<2>(args),
            3 => token_tile_of::<3>(args),
            _ => token_tile_of::<4>(args),
        }
    }
}

/// Arguments of [`token_tile`], passed on whole.
type TileArgs<'a> = (
    [*const u8; MR],
    &'a [u8],
    (*mut i32, usize),
    usize,
    [__mmask16; NR],
    (Option<&'a [i32]>, Option<TileScales<'a>>),
);

/// [`token_tile`] over the first `V` of the panel's four groups of 16 tokens.
///
/// # Safety
/// As for [`token_tile`], and the groups from `V` on are masked off.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn token_tile_of<const V: usize>((w_rows, x, (y, ldy), rows, masks, (first, ends)): TileArgs<'_>) {
    let quads = x.len() / (TOKENS * 4);
    let mut acc = [[_mm512_setzero_si512(); V]; MR];
    for (r, acc_row) in acc.iter_mut().enumerate().take(rows) {
        for (c, a) in acc_row.iter_mut().enumerate() {
            *a = match first {
                // SAFETY: 16 corrections per group of the panel's 64.
                Some(corr) => unsafe { _mm512_loadu_si512(corr[c * 16..].as_ptr().cast()) },
                // SAFETY: row r < rows and the masked tokens are in bounds (caller).
                None => unsafe { _mm512_maskz_loadu_epi32(masks[c], y.wrapping_add(r * ldy + c * 16)) },
            };
        }
    }
    let xq = x.as_ptr();
    for q in 0..quads {
        // SAFETY: quad q < quads is inside the panel slice.
        let xv: [__m512i; V] =
            std::array::from_fn(|c| unsafe { _mm512_loadu_si512(xq.add((q * TOKENS + c * 16) * 4).cast()) });
        for (r, acc_row) in acc.iter_mut().enumerate() {
            // SAFETY: the row's quad q is in its line (caller).
            let wv = _mm512_set1_epi32(unsafe { w_rows[r].add(64 * q).cast::<i32>().read_unaligned() });
            for (a, &xc) in acc_row.iter_mut().zip(&xv) {
                *a = _mm512_dpbusd_epi32(*a, wv, xc);
            }
        }
    }
    for (r, acc_row) in acc.iter().enumerate().take(rows) {
        for (c, &a) in acc_row.iter().enumerate() {
            let at = y.wrapping_add(r * ldy + c * 16);
            // SAFETY: row r < rows and the masked tokens are in bounds (caller).
            unsafe {
                match ends {
                    None => _mm512_mask_storeu_epi32(at, masks[c], a),
                    Some((w_scale, x_scale)) => {
                        let v = _mm512_mul_ps(_mm512_cvtepi32_ps(a), _mm512_set1_ps(w_scale[r] * x_scale));
                        _mm512_mask_storeu_ps(at.cast(), masks[c], v)
                    }
                }
            };
        }
    }
}
