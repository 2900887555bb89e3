//! The AVX-512 dense f32 kernel: weights packed once into row panels, tokens in vector lanes.
//!
//! Why a hand-written dense kernel when the `gemm` crate exists: the dense comparator is the
//! denominator of every sparse speedup the gate reports, so it has to be as fast as the best
//! dense code on the machine, and on this Zen 5 the `gemm` crate ran 2–3% *behind*
//! numpy/OpenBLAS at 2048³ (0.97–0.99× over three script runs). The sparse kernels get their
//! weights laid out once, outside the timed region (the compressed formats, the token-lane
//! re-blocking); a fair comparator gets the same, as inference libraries do with pre-packed
//! weights (MKL's `sgemm_pack`, oneDNN's weight reorders). Packed, with the weight stream
//! prefetched, this kernel runs 1.04–1.16× OpenBLAS at 1024³ and 1.08–1.10× at 2048³ (see
//! `docs/architecture.md`); the `gemm` crate stays the dense path off AVX-512 and for a
//! single token on weights that fit in L3 ([`takes`]).
//!
//! * **Layout.** [`PanelWeights`] stores `W` as panels of [`ROWS`] rows, `[panel][k][row]`, so
//!   the micro-kernel's six broadcasts per K step are one contiguous 24-byte run and a whole
//!   panel streams through memory front to back.
//! * **Micro-kernel.** [`ROWS`] rows × up to 4 vectors of 16 tokens: 24 zmm accumulators, one
//!   load per vector of activations and one broadcast per weight for 24 FMAs a K step. A
//!   2048³ product on one thread runs at 97% of one core's FMA peak (249 of 257 GFLOP/s:
//!   `sparsegate bench --threads 1` against `examples/fma_peak.rs 1`).
//! * **Blocking.** A task takes its tokens 64 at a time; for each K block it packs that tile
//!   of `x` ([`TileX`]: all of K while the tile fits in 768 KiB, else blocks of 512 KiB, in
//!   L2; see [`WHOLE_K_TILE_BYTES`]) and runs every panel of its rows over it, the weights
//!   streaming from L3 or memory with a software prefetch ([`PREFETCH_STEPS`]; without it
//!   the loop ran 5–8% slower at 2048³). Outputs are written once per K block. A first
//!   version packed 512 tokens at a time for weights too large for L3 and ran each panel over
//!   all of them while it was in L1 (GotoBLAS's order): it read every weight from memory once
//!   instead of once per tile, but took the outputs back from L3 for every K block of 256,
//!   and ran 6–12% slower on the LLaMA FFN up shape (436–439 vs 475–479 GFLOP/s) and level
//!   on FFN down.
//! * **Threads.** When the weights fit in half of L3 (2048² is 16 MiB) and every thread has a
//!   tile of its own, the threads split the tokens, so each packs only its own. Otherwise
//!   they split the rows, so each weight is read from memory by one thread only (on the FFN
//!   shapes 475–479 vs 464–467 GFLOP/s split by tokens).

use crate::shared_output::SharedOutput;
use crate::shared_output::for_each_chunk;
use crate::sparse_rows::{AlignedFloats, TileX, lane_kernel_prologue, strip_plan};
use rayon::prelude::*;

/// f32 per zmm register.
const LANES: usize = 16;
/// Output rows per register tile: 6 rows × 4 vectors = 24 accumulators of 32 registers.
const ROWS: usize = 6;
/// Tokens per register tile (4 vectors).
const TILE: usize = 64;
/// K steps ahead a full register tile (4 vectors) prefetches the weight stream: 128 × 24
/// bytes = 48 lines. At 32 steps, products whose weights stream from DRAM (4096² with 64
/// tokens) ran 0.74–0.95× the `gemm` crate; at 128 they run 1.0–1.2×
/// (`examples/dense_vs_gemm_crate.rs`). Narrower tiles take a K step in less time and look
/// as far ahead in time ([`prefetch_steps`]).
const PREFETCH_STEPS: usize = 128;
/// Bytes of activation tile up to which a task takes all of K in one block: three quarters of
/// this machine's 1 MiB L2. One block makes every panel's weights one run, the panels one
/// after another, so the prefetch runs straight across them; K blocks cut each panel into
/// pieces a panel apart, and the stream restarted at every piece. At 16 tokens on 4096² a
/// 2-block K took 2.1 ms and one block 1.9 (1.5 with [`prefetch_steps`]); on 4096×11008
/// (a 704 KiB tile) 5.2 → 4.2 ms.
const WHOLE_K_TILE_BYTES: usize = 768 << 10;
/// Bytes of a K block's tile past [`WHOLE_K_TILE_BYTES`]: half of L2 (2048 K rows at 64
/// tokens, 8192 at 16).
const BLOCK_TILE_BYTES: usize = 512 << 10;
/// Weight bytes up to which the threads split the tokens and each streams all the weights
/// from L3: half of this machine's 32 MiB L3, leaving room for the activations and outputs.
const SPLIT_TOKENS_WEIGHT_BYTES: usize = 16 << 20;

/// Dense weights packed in panels of [`ROWS`] rows for [`gemm`] (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct PanelWeights {
    rows: usize,
    k: usize,
    /// `[panel][k][ROWS]`; rows past `rows` in the last panel are zero.
    values: AlignedFloats,
}

impl PanelWeights {
    /// Pack the row-major `rows × k` weights `w` (length checked by the caller).
    pub(crate) fn new(w: &[f32], rows: usize, k: usize) -> PanelWeights {
        debug_assert_eq!(w.len(), rows * k);
        let panels = rows.div_ceil(ROWS);
        let mut values = AlignedFloats::zeroed(panels * k * ROWS);
        if k > 0 {
            for (p, panel) in values.chunks_exact_mut(k * ROWS).enumerate() {
                for (r, row) in w.chunks_exact(k).skip(p * ROWS).take(ROWS).enumerate() {
                    for (step, &v) in panel.chunks_exact_mut(ROWS).zip(row) {
                        step[r] = v;
                    }
                }
            }
        }
        PanelWeights { rows, k, values }
    }

    /// Bytes of the packed copy (padding rows included): what the packing test checks.
    #[cfg(test)]
    fn resident_bytes(&self) -> usize {
        self.values.len() * 4
    }

    fn panels(&self) -> usize {
        self.rows.div_ceil(ROWS)
    }

    /// Panel `p`'s weights from K row `k0` on.
    fn panel_from(&self, p: usize, k0: usize) -> &[f32] {
        &self.values[(p * self.k + k0) * ROWS..(p + 1) * self.k * ROWS]
    }
}

/// Whether the threads split the tokens (else the rows) of a `rows × k` by `k × cols`
/// product (see the module doc).
fn split_tokens(rows: usize, k: usize, cols: usize, threads: usize) -> bool {
    threads > 1 && rows * k * 4 <= SPLIT_TOKENS_WEIGHT_BYTES && cols >= threads * TILE
}

/// Weight bytes from which a single-token product runs here rather than on the `gemm`
/// crate's matrix-vector path: weights that do not stay in L3 (this machine has 32 MiB) and
/// stream from memory, where reading them straight from the panels is 1.4–1.75× the crate
/// at 4096² and level at 2048². With weights in L3 the crate was 1.3–2.5× faster (768²,
/// 3072×768) than the first single-token loop here, which read a spread copy of the
/// activation per weight; against [`few_tokens`] it is 1.1× faster at 768² (0.025 vs 0.028
/// ms) and level to within run-to-run noise at 3072×768, 768×3072 and 2048².
const SINGLE_TOKEN_MIN_WEIGHT_BYTES: usize = 16 << 20;

/// Whether [`gemm`] is the faster dense kernel for a `rows × k` by `k × cols` product (see
/// [`SINGLE_TOKEN_MIN_WEIGHT_BYTES`]; from 2 tokens it always is).
pub(crate) fn takes(rows: usize, k: usize, cols: usize) -> bool {
    cols >= 2 || rows * k * 4 >= SINGLE_TOKEN_MIN_WEIGHT_BYTES
}

/// Whether this CPU runs the kernel (AVX-512F, detected at run time).
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return crate::cpu::has!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `y[rows × cols] = W · x[k × cols]`, row-major, on `threads` workers of the current rayon
/// pool (1 runs on the calling thread).
///
/// Panics unless [`available`], or if `x` is shorter than `k × cols` or `y` is not
/// `rows × cols` (`lane_kernel_prologue`; the caller checks the lengths and returns a typed
/// error first).
pub(crate) fn gemm(w: &PanelWeights, threads: usize, x: &[f32], y: &mut [f32], cols: usize) {
    let (rows, k) = (w.rows, w.k);
    if !lane_kernel_prologue("dense lane kernel", (rows, k), (x, cols), y, cols) {
        return;
    }
    let threads = threads.max(1);
    if takes_few_tokens(rows, k, cols) {
        return few_tokens(w, threads, x, y, cols);
    }
    let panels = w.panels();
    // Each task writes its own (panels × tokens) rectangle; the tasks join before returning.
    let out = SharedOutput(y.as_mut_ptr());
    // Tasks: (panels, tokens) ranges, one per thread.
    let tasks: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)> = if split_tokens(rows, k, cols, threads)
    {
        let per = cols.div_ceil(threads).div_ceil(LANES) * LANES;
        (0..cols)
            .step_by(per)
            .map(|c0| (0..panels, c0..(c0 + per).min(cols)))
            .collect()
    } else {
        let per = panels.div_ceil(threads);
        (0..panels)
            .step_by(per)
            .map(|p0| (p0..(p0 + per).min(panels), 0..cols))
            .collect()
    };
    let task = |(p, c): &(std::ops::Range<usize>, std::ops::Range<usize>)| {
        // SAFETY: the tasks' (panels × tokens) rectangles are disjoint and inside `y`.
        unsafe { run_task(w, x, out, cols, p.clone(), c.clone()) }
    };
    if threads > 1 && tasks.len() > 1 {
        tasks.par_iter().for_each(task);
    } else {
        tasks.iter().for_each(task);
    }
}

/// K steps ahead a register tile of `v` vectors prefetches its weights: [`PREFETCH_STEPS`]
/// at 4 vectors, as far ahead in time at fewer. With 128 at every width, 16 tokens on 4096²
/// took 1.9 ms and 32 tokens 2.3; at 512 and 256 steps 1.5 and 2.1 (32 tokens at the FMA
/// peak), and 1024–2048 steps were no faster.
const fn prefetch_steps(v: usize) -> usize {
    PREFETCH_STEPS * 4 / v
}

/// K rows of each block of a tile `width` tokens wide (see [`WHOLE_K_TILE_BYTES`]).
fn k_block(k: usize, width: usize) -> usize {
    let row_bytes = 4 * width;
    if k * row_bytes <= WHOLE_K_TILE_BYTES {
        k.max(1)
    } else {
        BLOCK_TILE_BYTES / row_bytes
    }
}

/// Token counts up to which [`few_tokens`] takes the product. Measured against the 64-token
/// tile (`sparsegate bench`, 2 threads, dense comparator times): 4096² 3 tokens 1.47 → 1.19
/// ms, 4 tokens 1.96–2.01 → 1.33–1.41, 5 tokens 2.13–2.19 → 1.44–1.49, 6 tokens 2.19 →
/// 1.65, 8 tokens 2.12 → 1.91; 11008×4096 and 4096×11008 at 5 tokens 6.2 → 4.2 and 7.0 →
/// 4.9 ms, at 8 tokens 6.2 → 5.1 and 6.7 → 5.4 ms; 768² at 5 and 8 tokens 0.112 → 0.055
/// and 0.110 → 0.087 ms; 3072×768 level within run-to-run noise. More tokens would not
/// leave registers for the 3·T sums. One token runs level with the single-token loop it
/// replaced (a spread copy of the activations).
const FEW_TOKENS: usize = 8;

/// Most tokens at which [`few_tokens`] runs two panels in lockstep (from 2): 3·T·2 sums stay
/// in the 32 registers up to 4. Two weight streams a thread instead of one, measured on the
/// 2-vCPU AMX Xeon (2 threads, huge pages, dense ms one / two): 11008×4096 at 2 tokens
/// 6.17–6.18 / 5.78–5.80, 4096×11008 at 4 tokens 7.16–7.23 / 5.44–5.45; at 1 token
/// 5.33–5.44 / 5.53–5.89, so one token keeps one.
const PAIRED_PANELS_MAX_TOKENS: usize = 4;

/// Token counts from which the tile beats [`few_tokens`] on weights that stream from memory
/// (over [`SPLIT_TOKENS_WEIGHT_BYTES`]), once a tile runs all of K in one block with the
/// prefetch [`prefetch_steps`] sets. Measured side by side (dense comparator ms, few tokens
/// vs tile): at 6 and 8 tokens 4096² 1.66 vs 1.50 and 1.81 vs 1.50, 11008×4096 4.75 vs 3.88
/// and 5.01 vs 3.93, 4096×11008 4.52 vs 4.37 and 5.02 vs 4.69; at 4–5 tokens the shapes
/// disagree (4096² level, 11008×4096 4.1–4.4 vs 3.9, 4096×11008 3.7–4.2 vs 4.3–4.6), and at
/// 2–3 [`few_tokens`] leads on all three. On weights that fit in L3 it leads up to 8 tokens
/// (2048² 0.33 vs 0.39 ms at 8, 768² 0.088 vs 0.115).
const STREAMING_TILE_MIN_TOKENS: usize = 6;

/// Whether [`few_tokens`] takes a `rows × k` by `k × cols` product (else the tile).
fn takes_few_tokens(rows: usize, k: usize, cols: usize) -> bool {
    let streams = rows * k * 4 > SPLIT_TOKENS_WEIGHT_BYTES;
    cols <= FEW_TOKENS && !(streams && cols >= STREAMING_TILE_MIN_TOKENS)
}

/// Up to [`FEW_TOKENS`] tokens straight from the panels, every weight read once: the 64-token
/// tile would be mostly padding (at 2–16 tokens it does the work of 16). Per 16 K steps of a
/// panel (96 weights, 6 vectors, lane `i` of vector `j` holding row `(16j + i) mod 6` at K
/// step `(16j + i) / 6`), each token's 16 activations are loaded once and spread to the six
/// lane patterns by `vpermps`; vectors `j` and `j + 3` share a row pattern, so 3
/// accumulators a token suffice, folded into rows at the end. Every weight line and every
/// token's activations are prefetched a few chunks ahead: with the hardware prefetchers
/// alone, 4 tokens on 4096² ran 2.0 ms instead of 1.4 (the activations, 16 KiB a token, no
/// longer stay in L1 beside the weight stream). Each thread takes a contiguous run of panels,
/// from 2 tokens two at a time in lockstep ([`PAIRED_PANELS_MAX_TOKENS`]).
fn few_tokens(w: &PanelWeights, threads: usize, x: &[f32], y: &mut [f32], cols: usize) {
    let k = w.k;
    // Token-major activations, zero past `k` up to a whole chunk of 16 K steps.
    let kpad = k.div_ceil(LANES) * LANES;
    let mut xt = AlignedFloats::zeroed(cols * kpad);
    for (kk, row) in x.chunks_exact(cols).enumerate() {
        for (t, &v) in row.iter().enumerate() {
            xt[t * kpad + kk] = v;
        }
    }
    let per_task = w.panels().div_ceil(threads);
    let task = |(t, y_part): (usize, &mut [f32])| {
        let first = t * per_task;
        let mut panels = y_part.chunks_mut(ROWS * cols).enumerate();
        // Two panels in lockstep from 2 tokens to as many as their sums fit the registers
        // for, so two weight streams are in flight; a last odd panel alone.
        let pairs = (2..=PAIRED_PANELS_MAX_TOKENS).contains(&cols);
        while let Some((i, y_panel)) = panels.next() {
            let panel = w.panel_from(first + i, 0);
            let second = if pairs { panels.next() } else { None };
            // SAFETY: AVX-512F (the caller's contract); each panel holds `k × ROWS` floats,
            // `xt` `cols` rows of `kpad` (a multiple of 16, ≥ k), each `y` part the panel's
            // real rows × `cols`.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                use avx512::panel_tokens as run;
                if let Some((j, y_next)) = second {
                    let two = [panel, w.panel_from(first + j, 0)];
                    let y = [y_panel, y_next];
                    // `pairs` holds only from 2 tokens.
                    match cols {
                        2 => run::<2, 2>(two, &xt, kpad, k, y),
                        3 => run::<2, 3>(two, &xt, kpad, k, y),
                        _ => run::<2, 4>(two, &xt, kpad, k, y),
                    }
                    continue;
                }
                let y = [y_panel];
                match cols {
                    1 => run::<1, 1>([panel], &xt, kpad, k, y),
                    2 => run::<1, 2>([panel], &xt, kpad, k, y),
                    3 => run::<1, 3>([panel], &xt, kpad, k, y),
                    4 => run::<1, 4>([panel], &xt, kpad, k, y),
                    5 => run::<1, 5>([panel], &xt, kpad, k, y),
                    6 => run::<1, 6>([panel], &xt, kpad, k, y),
                    7 => run::<1, 7>([panel], &xt, kpad, k, y),
                    _ => run::<1, 8>([panel], &xt, kpad, k, y),
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (panel, y_panel, second);
        }
    };
    for_each_chunk(y, per_task * ROWS * cols, threads > 1, task);
}

/// One task: panels `panels` × tokens `tokens` of the output.
///
/// # Safety
/// AVX-512F; `out` is the `rows × cols` output of `w`, and no other task writes this task's
/// rectangle while it runs.
unsafe fn run_task(
    w: &PanelWeights,
    x: &[f32],
    out: SharedOutput<f32>,
    cols: usize,
    panels: std::ops::Range<usize>,
    tokens: std::ops::Range<usize>,
) {
    let k = w.k;
    let strips = strip_plan(tokens.len(), (TILE, LANES));
    let tile_floats = strips.iter().map(|&(_, width)| k_block(k, width).min(k) * width);
    let mut packed = TileX::new(tile_floats.max().unwrap_or(0).div_ceil(TILE), TILE);
    for (t0, width) in strips {
        let c0 = tokens.start + t0;
        let k_block = k_block(k, width);
        for k0 in (0..k).step_by(k_block) {
            let k_rows = k_block.min(k - k0);
            let tile = packed.fill((x, cols), (k0, k_rows, k), (c0, width, cols));
            for p in panels.clone() {
                let dst = Dst {
                    y: out.at(p * ROWS * cols + c0),
                    stride: cols,
                    rows: ROWS.min(w.rows - p * ROWS),
                    cols: width.min(tokens.end - c0),
                };
                let weights = w.panel_from(p, k0);
                // SAFETY: AVX-512F (the caller's contract); `weights` holds the panel's
                // `k_rows × ROWS` values from `k0` on; `tile` holds `k_rows × width` floats,
                // 64-byte aligned; `dst` is this task's own part of `y`.
                #[cfg(target_arch = "x86_64")]
                unsafe {
                    avx512::tile(weights, tile, k_rows, width, dst, k0 > 0)
                };
                #[cfg(not(target_arch = "x86_64"))]
                let _ = (weights, tile, dst);
            }
        }
    }
}

/// Where a register tile's outputs go: `rows × cols` of `y` from `y`, rows `stride` apart.
#[derive(Clone, Copy)]
struct Dst {
    y: *mut f32,
    stride: usize,
    rows: usize,
    cols: usize,
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Dst, LANES, PREFETCH_STEPS, ROWS, TILE};
    use crate::sparse_rows::{Line, prefetch};
    use std::arch::x86_64::*;

    /// One register tile over a K block, `width` tokens (a multiple of 16, at most [`TILE`]):
    /// `y = (accumulate ? y : 0) + W_panel · tile` for the `dst.rows × dst.cols` outputs.
    /// A full tile runs straight on `y`; a partial one (the last rows of `W` or the last
    /// tokens) through an aligned scratch tile, copying in and out only what is real.
    ///
    /// # Safety
    /// AVX-512F; `weights` holds `k_rows × ROWS` floats; `tile` is 64-byte aligned with
    /// `k_rows × width` floats; `dst` names writable memory.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile(
        weights: &[f32],
        tile: &[f32],
        k_rows: usize,
        width: usize,
        dst: Dst,
        accumulate: bool,
    ) {
        debug_assert!(weights.len() >= k_rows * ROWS && tile.len() >= k_rows * width);
        let full = dst.rows == ROWS && dst.cols == width;
        let mut scratch = [Line([0.0; LANES]); ROWS * TILE / LANES];
        let (y, stride) = if full {
            (dst.y, dst.stride)
        } else {
            let s = scratch.as_mut_ptr().cast::<f32>();
            if accumulate {
                for r in 0..dst.rows {
                    // SAFETY: `dst` row `r` holds `dst.cols ≤ width` floats; scratch rows hold `width`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(dst.y.add(r * dst.stride), s.add(r * width), dst.cols)
                    };
                }
            }
            (s, width)
        };
        let (w, x) = (weights.as_ptr(), tile.as_ptr());
        // SAFETY: as the function requires; `y` is `dst` itself or the scratch, `ROWS` rows
        // of `width` floats `stride` apart either way.
        unsafe {
            match width / LANES {
                4 => micro::<4>(w, x, k_rows, (y, stride), accumulate),
                3 => micro::<3>(w, x, k_rows, (y, stride), accumulate),
                2 => micro::<2>(w, x, k_rows, (y, stride), accumulate),
                _ => micro::<1>(w, x, k_rows, (y, stride), accumulate),
            }
        }
        if !full {
            let s = scratch.as_ptr().cast::<f32>();
            for r in 0..dst.rows {
                // SAFETY: as above, in the other direction.
                unsafe {
                    std::ptr::copy_nonoverlapping(s.add(r * width), dst.y.add(r * dst.stride), dst.cols)
                };
            }
        }
    }

    /// `P` panels' dot products with `T` tokens (see [`super::few_tokens`]), panel `p`'s
    /// written to `y[p]` (its real rows × `T`, row-major). The panels advance chunk by chunk
    /// in lockstep, so a thread keeps `P` weight streams in flight.
    ///
    /// # Safety
    /// AVX-512F; every panel holds `k × ROWS` floats; `xt` (64-byte aligned) holds `T` rows of
    /// `kpad` floats, `kpad` a multiple of 16 and at least `k`; every `y[p].len()` is a
    /// multiple of `T` of at most `ROWS · T`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn panel_tokens<const P: usize, const T: usize>(
        panels: [&[f32]; P],
        xt: &[f32],
        kpad: usize,
        k: usize,
        y: [&mut [f32]; P],
    ) {
        const CHUNK: usize = ROWS * LANES;
        debug_assert!(panels.iter().all(|p| p.len() >= k * ROWS) && xt.len() >= T * kpad && kpad >= k);
        // Lane `i` of vector `j < 3` takes the activation of K step `(16j + i) / 6 < 8` of the
        // chunk, and of vector `j + 3` the one 8 steps on: the same pattern plus 8.
        let patterns: [[i32; 16]; 3] =
            std::array::from_fn(|j| std::array::from_fn(|i| ((LANES * j + i) / ROWS) as i32));
        let eight = _mm512_set1_epi32(8);
        let (w, a) = (panels.map(|p| p.as_ptr()), xt.as_ptr());
        let whole = k / LANES;
        let mut acc = [[[_mm512_setzero_ps(); 3]; T]; P];
        // SAFETY: chunk `c < whole` reads weights `96c .. 96c + 96 ≤ k · ROWS` of each panel
        // and activations `t · kpad + 16c .. + 16 ≤ t · kpad + kpad`; the prefetch addresses
        // are formed with `wrapping_add`, and a prefetch never faults.
        unsafe {
            for c in 0..whole {
                let at = c * CHUNK;
                for w in w {
                    for line in 0..ROWS {
                        prefetch(w.wrapping_add(at + PREFETCH_STEPS * ROWS + line * LANES).cast());
                    }
                }
                for t in 0..T {
                    prefetch(a.wrapping_add(t * kpad + (c + 4) * LANES).cast());
                }
                // One pattern pair at a time, read from memory: the registers hold the
                // 3·T·P sums, and the patterns and weights in use.
                for (j, pattern) in patterns.iter().enumerate() {
                    let low = _mm512_loadu_si512(pattern.as_ptr().cast());
                    let high = _mm512_add_epi32(low, eight);
                    for (w, acc) in w.iter().zip(acc.iter_mut()) {
                        let (wl, wh) = (
                            _mm512_loadu_ps(w.add(at + j * LANES)),
                            _mm512_loadu_ps(w.add(at + (j + 3) * LANES)),
                        );
                        for (t, acc) in acc.iter_mut().enumerate() {
                            let xv = _mm512_load_ps(a.add(t * kpad + c * LANES));
                            let sum = _mm512_fmadd_ps(wl, _mm512_permutexvar_ps(low, xv), acc[j]);
                            acc[j] = _mm512_fmadd_ps(wh, _mm512_permutexvar_ps(high, xv), sum);
                        }
                    }
                }
            }
        }
        // Lane `i` of accumulator `j` (and of pattern `j + 3`) holds row `(16j + i) mod 6`.
        for ((panel, y_panel), acc) in panels.iter().zip(y).zip(acc.iter()) {
            let rows = y_panel.len() / T;
            for (t, acc) in acc.iter().enumerate() {
                let mut lanes = [0.0f32; 3 * LANES];
                for (j, acc) in acc.iter().enumerate() {
                    // SAFETY: `lanes` holds 3 vectors.
                    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr().add(j * LANES), *acc) };
                }
                let mut sums = [0.0f32; ROWS];
                for (i, v) in lanes.iter().enumerate() {
                    sums[i % ROWS] += v;
                }
                for kk in whole * LANES..k {
                    for (r, sum) in sums.iter_mut().enumerate() {
                        *sum += panel[kk * ROWS + r] * xt[t * kpad + kk];
                    }
                }
                for (r, sum) in sums.iter().enumerate().take(rows) {
                    y_panel[r * T + t] = *sum;
                }
            }
        }
    }

    /// `ROWS × V` vectors of accumulators over `k_rows` K steps: per step, `V` aligned loads
    /// of activations, `ROWS` broadcast weights, `ROWS · V` FMAs, and a prefetch of the
    /// weights [`super::prefetch_steps`] ahead.
    ///
    /// # Safety
    /// AVX-512F; `w` holds `k_rows × ROWS` floats, `x` `k_rows × 16V` (64-byte aligned), `y`
    /// `ROWS` rows of `16V` floats `stride` apart.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn micro<const V: usize>(
        w: *const f32,
        x: *const f32,
        k_rows: usize,
        (y, stride): (*mut f32, usize),
        accumulate: bool,
    ) {
        // SAFETY: every access is inside the buffers the contract names; the prefetch address
        // is formed with `wrapping_add`, and a prefetch never faults.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); V]; ROWS];
            if accumulate {
                for (r, row) in acc.iter_mut().enumerate() {
                    for (v, a) in row.iter_mut().enumerate() {
                        *a = _mm512_loadu_ps(y.add(r * stride + v * LANES));
                    }
                }
            }
            let (mut w, mut x) = (w, x);
            for _ in 0..k_rows {
                prefetch(w.wrapping_add(super::prefetch_steps(V) * ROWS).cast());
                let xv: [__m512; V] = std::array::from_fn(|v| _mm512_load_ps(x.add(v * LANES)));
                for (r, row) in acc.iter_mut().enumerate() {
                    let b = _mm512_set1_ps(*w.add(r));
                    for (a, &xv) in row.iter_mut().zip(&xv) {
                        *a = _mm512_fmadd_ps(b, xv, *a);
                    }
                }
                w = w.add(ROWS);
                x = x.add(V * LANES);
            }
            for (r, row) in acc.iter().enumerate() {
                for (v, &a) in row.iter().enumerate() {
                    _mm512_storeu_ps(y.add(r * stride + v * LANES), a);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::gemm_naive;
    use crate::testing::{assert_close, data, has_avx512};
    use proptest::prelude::*;

    fn check(rows: usize, k: usize, cols: usize, threads: usize) {
        let (w, x) = (data(rows * k, 3), data(k * cols, 11));
        let mut want = vec![0.0; rows * cols];
        gemm_naive(&w, &x, &mut want, rows, k, cols);
        let packed = PanelWeights::new(&w, rows, k);
        let mut y = vec![f32::NAN; rows * cols];
        gemm(&packed, threads, &x, &mut y, cols);
        assert_close(&y, &want, k, &format!("{rows}×{k}×{cols}, {threads} threads"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any shape, including partial panels (rows not a multiple of 6), partial tiles
        /// (tokens not a multiple of 16 or 64) and both thread splits.
        #[test]
        fn issue_3_dense_lanes_match_the_naive_oracle(rows in 1usize..40, k in 1usize..150, cols in 1usize..200, threads in 1usize..4) {
            // Skipped by detection, as every AVX-512 test: `prop_assume!` would reject every
            // case on a CPU without it, and proptest fails a run that rejects them all.
            if has_avx512() {
                check(rows, k, cols, threads);
            }
        }
    }

    #[test]
    fn issue_3_dense_lanes_cover_every_blocking() {
        if !has_avx512() {
            return;
        }
        // K longer than one block at 64 tokens (so later blocks accumulate) and in one block
        // at 16 (the last strip), on one thread, with the tokens split and with the rows
        // split (too few tokens for a tile per thread).
        let k = WHOLE_K_TILE_BYTES / (4 * TILE) + 37;
        assert!(k_block(k, TILE) < k && k_block(k, 16) == k);
        check(13, k, 70, 1);
        check(13, k, 150, 2);
        check(20, k, 100, 2);
        // K past one block at 16 tokens too.
        let k = WHOLE_K_TILE_BYTES / (4 * 16) + 1;
        assert!(k_block(k, 16) < k);
        check(7, k, 9, 1);
        // 1–8 tokens (`few_tokens`): panels with padding rows, K with and without a tail of
        // steps past the last chunk of 16, one to three threads.
        for cols in 1..=FEW_TOKENS {
            check(1, 1, cols, 1);
            check(13, 1000, cols, 2);
            check(20, 96, cols, 3);
            check(7, 23, cols, 1);
        }
        // One past: the tile.
        check(13, 1000, FEW_TOKENS + 1, 2);
        // Weights past the token-split budget: the rows split whatever the token count.
        let big_rows = SPLIT_TOKENS_WEIGHT_BYTES / (4 * 64) + 5;
        for (cols, threads) in [(150, 2), (40, 1), (300, 3), (6, 2), (8, 1)] {
            check(big_rows, 64, cols, threads);
        }
    }

    #[test]
    fn issue_3_streaming_weights_take_the_tile_from_six_tokens() {
        // 4096²: 64 MiB of weights stream from memory; 2048²: 16 MiB stay in L3.
        assert!(takes_few_tokens(4096, 4096, 5));
        assert!(!takes_few_tokens(4096, 4096, STREAMING_TILE_MIN_TOKENS));
        assert!(!takes_few_tokens(4096, 4096, FEW_TOKENS));
        assert!(takes_few_tokens(2048, 2048, FEW_TOKENS));
        assert!(!takes_few_tokens(2048, 2048, FEW_TOKENS + 1));
    }

    #[test]
    fn threads_split_tokens_only_when_the_weights_fit_in_l3() {
        // 2048²: 16 MiB of weights, a tile for each thread.
        assert!(split_tokens(2048, 2048, 2048, 2));
        // LLaMA FFN up (11008 × 4096 weights, 180 MiB): rows.
        assert!(!split_tokens(11008, 4096, 512, 2));
        // Fewer tokens than a tile per thread, or one thread: rows.
        assert!(!split_tokens(2048, 2048, 100, 2));
        assert!(!split_tokens(2048, 2048, 2048, 1));
    }

    #[test]
    fn one_token_runs_here_only_on_weights_past_l3() {
        assert!(takes(4096, 4096, 1));
        assert!(!takes(768, 768, 1));
        assert!(takes(768, 768, 2));
    }

    #[test]
    fn packing_pads_the_last_panel_with_zeros() {
        let w: Vec<f32> = (0..7 * 3).map(|i| i as f32 + 1.0).collect();
        let p = PanelWeights::new(&w, 7, 3);
        assert_eq!(p.resident_bytes(), 2 * 3 * ROWS * 4);
        // Panel 0, K step 1: rows 0..6 at column 1.
        assert_eq!(&p.values[ROWS..2 * ROWS], &[2.0, 5.0, 8.0, 11.0, 14.0, 17.0]);
        // Panel 1: row 6 only.
        assert_eq!(&p.values[3 * ROWS..3 * ROWS + 2], &[19.0, 0.0]);
    }
}
