//! The dense int8 comparator on AVX-512 VNNI: `y[N×M] = w[N×K] · x[K×M]`, i8 × i8 → i32,
//! bit-exact.
//!
//! Why a dedicated kernel: the widening axpy loop in [`super::precision`] multiplies one
//! byte pair per i32 lane, while `vpdpbusd` multiplies four byte pairs per lane and adds them
//! into the accumulator in one instruction. A dense comparator that skips it is several
//! times slower than this CPU allows, and every int8 sparse speedup measured against it is
//! inflated by the same factor (issue 3).
//!
//! How it works:
//! * **Packing.** The activations are packed per panel of [`TOKENS`] tokens as K-quads
//!   interleaved per token (`[panel][k/4][token][4]` bytes, K padded to a multiple of 4), so
//!   one zmm holds 16 tokens × 4 consecutive k. The weights stay row-major: each K-quad of a
//!   row (4 consecutive k) is broadcast as one i32 straight from `w`; the rows are copied with
//!   a zero-padded last quad only when K is not a multiple of 4, and a zero row stands in for
//!   the rows past N of the last [`MR`]-row block.
//! * **Signedness.** `vpdpbusd` multiplies *unsigned* by signed bytes, so the activations are
//!   shifted to `x + 128` (an XOR with `0x80`) when packed, and the accumulators start at
//!   `-128 · Σ_k w[n, k]` instead of zero, which removes the shift again.
//! * **Exactness.** `vpdpbusd` (unlike `vpdpbusds`) wraps modulo 2^32, and so does the
//!   correction, so the shifted partial sums may leave the i32 range (with `x + 128 ≤ 255`
//!   they reach `K · 255 · 128`) without harm: the final value is the true sum modulo 2^32,
//!   and the true sum itself fits in i32 for `K ≤ INT8_MAX_K`, so it is exact.
//! * **Blocking.** An [`MR`]×[`NR`]-zmm micro-tile (6 rows × 64 tokens, 24 accumulators in
//!   registers) runs over a K block of [`KC`] quads, whose packed activation micro-panel
//!   (32 KiB) stays in L1 while the row blocks of a task stream their weights past it.
//!   Tasks are (row chunk × panel group) tiles of the output, on rayon like the f32 kernels.
//!   Tails in N, M and K are zero-padded in the packed buffers and masked on store.
//! * **Few tokens** (up to [`FEW_TOKENS`]). A 64-token panel would be mostly padding (at one
//!   token, 63/64 of the `vpdpbusd` lanes), and the `-128 · Σ w` corrections would read all of
//!   W a second time; so K is in the lanes instead: each `vpdpbusd` multiplies 64 consecutive
//!   weights of a row, shifted to `w + 128`, by the same 64 activations of one token (signed),
//!   read straight from the row-major weights, and the correction `-128 · Σ_k x[k, t]` comes
//!   from the activations. One horizontal sum per (row, token). Measured on Zen 5, 4096 ×
//!   4096, one thread: 4.0 ms → 0.24–0.26 ms at one token run alone (~65 GB/s of weights),
//!   4.0 → 1.3–1.5 ms at 16; the 64-token panels take over above [`FEW_TOKENS`].
//! * **Sparse.** [`SparseQuads`] is the same idea for pruned weights (`SparseI8`): kept
//!   entries four at a time, their four activation rows interleaved per tile by shuffles.
//!
//! The packing buffers are kept per calling thread between calls (thread-local scratch).

use super::shared_output::{SharedOutput, for_each_chunk, trivial_product};
use rayon::prelude::*;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Weight rows per micro-tile.
const MR: usize = 6;
/// zmm registers of tokens per micro-tile (16 tokens each).
const NR: usize = 4;
/// Tokens per packed activation panel (one micro-tile wide).
const TOKENS: usize = NR * 16;
/// K-quads per K block: the micro-panel `KC · TOKENS · 4` bytes (32 KiB) fits Zen 5's L1d.
const KC: usize = 128;
/// Most row blocks per task, so a task's weights for one K block (≤ 192 rows × 512 bytes)
/// stay in L2 while the task walks its token panels.
const MAX_CHUNK_BLOCKS: usize = 32;
/// Up to this many tokens the feature-lane kernel runs (see the module doc): on Zen 5 it beat
/// the 64-token panels up to 48 tokens (4096 × 4096: 3.2 against 3.9 ms) and lost at 64.
pub(super) const FEW_TOKENS: usize = 48;

thread_local! {
    /// Packing buffers reused across calls on the same thread (padded weight rows, row
    /// corrections, packed activations), so a repeated product does not page-fault fresh
    /// megabytes of scratch on every call.
    static SCRATCH: RefCell<(Vec<u8>, Vec<i32>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// Whether this CPU runs the kernel: AVX-512F, BW and VNNI, detected at run time.
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
}

/// `y[N×M] = w[N×K] · x[K×M]`, exact in i32, on `threads` workers of the current rayon pool
/// (1 runs on the calling thread).
///
/// # Safety
/// [`available`] returned true, `w.len() == n·k`, `x.len() == k·m`, `y.len() == n·m`, and
/// `k ≤ INT8_MAX_K` (so the true sums fit in i32).
pub(super) unsafe fn gemm(threads: usize, w: &[i8], x: &[i8], y: &mut [i32], n: usize, k: usize, m: usize) {
    debug_assert!(w.len() == n * k && x.len() == k * m && y.len() == n * m);
    if trivial_product(y, n, k, m) {
        return;
    }
    if m <= FEW_TOKENS {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            // Tiles measured fastest on Zen 5 (4096 × 4096, 1–16 tokens): one token 8 rows ×
            // 2 chunk chains, two tokens 8 × 2, more 6 rows × 4 tokens.
            match m {
                1 => few_tokens::<8, 1, 2>(threads, w, x, y, (n, k, m)),
                2 => few_tokens::<8, 2, 1>(threads, w, x, y, (n, k, m)),
                _ => few_tokens::<6, 4, 1>(threads, w, x, y, (n, k, m)),
            }
        }
        return;
    }
    let quads = k.div_ceil(4);
    let blocks = n.div_ceil(MR);
    let panels = m.div_ceil(TOKENS);
    let parallel = threads > 1;
    let (mut padded, mut bias, mut xp) = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    // Weights stay row-major: where K is a multiple of 4 the micro-tile broadcasts each K-quad
    // straight from `w`; otherwise the rows are copied once with their last quad zero-padded.
    // One zero row after them stands in for the rows past `n` of the last block.
    let stride = quads * 4;
    let rows_held = if k == stride { 1 } else { n + 1 };
    padded.resize(rows_held * stride, 0);
    let padded_s = &mut padded[..rows_held * stride];
    bias.resize(n, 0);
    let bias_s = &mut bias[..n];
    xp.resize(panels * quads * TOKENS * 4, 0);
    let xp_s = &mut xp[..panels * quads * TOKENS * 4];

    let copy_row = |(dst, src): (&mut [u8], &[i8])| {
        dst.iter_mut().zip(src).for_each(|(d, &s)| *d = s as u8);
        dst[k..].fill(0);
    };
    let row_sum = |(b, row): (&mut i32, &[i8])| *b = row_correction(row);
    let pack_x = |(p, out): (usize, &mut [u8])| {
        // SAFETY: SSE2 is part of x86-64; `out` is one panel; the caller checked the shapes.
        unsafe { pack_activations(x, k, m, p, out) }
    };
    let (zero_row, rows_copy) = padded_s.split_at_mut(stride);
    zero_row.fill(0);
    if parallel {
        bias_s.par_iter_mut().zip(w.par_chunks(k)).for_each(row_sum);
        if k != stride {
            rows_copy
                .par_chunks_mut(stride)
                .zip(w.par_chunks(k))
                .for_each(copy_row);
        }
        xp_s.par_chunks_mut(quads * TOKENS * 4)
            .enumerate()
            .for_each(pack_x);
    } else {
        bias_s.iter_mut().zip(w.chunks(k)).for_each(row_sum);
        if k != stride {
            rows_copy.chunks_mut(stride).zip(w.chunks(k)).for_each(copy_row);
        }
        xp_s.chunks_mut(quads * TOKENS * 4).enumerate().for_each(pack_x);
    }
    let (zero_row, rows_copy) = (&*zero_row, &*rows_copy);
    let w_row = |row: usize| -> &[u8] {
        if row >= n {
            zero_row
        } else if k == stride {
            // SAFETY: i8 and u8 have the same layout; the bytes are reinterpreted.
            unsafe { std::slice::from_raw_parts(w[row * k..].as_ptr().cast::<u8>(), k) }
        } else {
            &rows_copy[row * stride..(row + 1) * stride]
        }
    };

    // Tasks: row chunks × panel groups, at least four per worker where the shape allows.
    let want = threads.max(1) * 4;
    let chunk_blocks = blocks.div_ceil(want).clamp(1, MAX_CHUNK_BLOCKS);
    let row_chunks = blocks.div_ceil(chunk_blocks);
    let per_group = panels.div_ceil(want.div_ceil(row_chunks).min(panels));
    let panel_groups = panels.div_ceil(per_group);
    // Each task writes its own row chunk × panel group; the tasks join before `gemm` returns.
    let out = SharedOutput(y.as_mut_ptr());
    let (bias_r, xp_r) = (&*bias_s, &*xp_s);
    let task = |t: usize| {
        let (chunk, group) = (t / panel_groups, t % panel_groups);
        let block_range = chunk * chunk_blocks..((chunk + 1) * chunk_blocks).min(blocks);
        let panel_range = group * per_group..((group + 1) * per_group).min(panels);
        for p in panel_range {
            let masks = token_masks(m, p);
            let panel = &xp_r[p * quads * TOKENS * 4..(p + 1) * quads * TOKENS * 4];
            for q0 in (0..quads).step_by(KC) {
                let q1 = (q0 + KC).min(quads);
                for b in block_range.clone() {
                    let w_rows: [&[u8]; MR] = std::array::from_fn(|r| &w_row(b * MR + r)[q0 * 4..q1 * 4]);
                    let rows = (n - b * MR).min(MR);
                    let init = if q0 == 0 {
                        Init::Bias(&bias_r[b * MR..b * MR + rows])
                    } else {
                        Init::Load
                    };
                    // SAFETY: the tile (rows b·MR.., tokens p·TOKENS..) is inside `y` where
                    // the masks and `rows` say so, and only this task writes it; the weight
                    // rows and the panel hold `q1 - q0` quads; the CPU features are checked.
                    unsafe {
                        let y_tile = out.at(b * MR * m + p * TOKENS);
                        micro_tile(
                            w_rows,
                            &panel[q0 * TOKENS * 4..q1 * TOKENS * 4],
                            y_tile,
                            m,
                            rows,
                            masks,
                            init,
                        );
                    }
                }
            }
        }
    };
    if parallel {
        (0..row_chunks * panel_groups).into_par_iter().for_each(task);
    } else {
        (0..row_chunks * panel_groups).for_each(task);
    }
    SCRATCH.with(|s| *s.borrow_mut() = (padded, bias, xp));
}

/// [`gemm()`] for `m ≤ FEW_TOKENS` in feature lanes, with `R`-row × `T`-token register tiles
/// that hold `U` accumulators per (row, token), for `U` consecutive 64-byte chunks.
///
/// # Safety
/// As for [`gemm()`].
unsafe fn few_tokens<const R: usize, const T: usize, const U: usize>(
    threads: usize,
    w: &[i8],
    x: &[i8],
    y: &mut [i32],
    (n, k, m): (usize, usize, usize),
) {
    // Whole chunks, zero past `k`.
    let stride = k.div_ceil(64) * 64;
    let mut xt = SCRATCH.with(|s| std::mem::take(&mut s.borrow_mut().2));
    xt.resize(m * stride, 0);
    pack_token_major(x, k, m, stride, 0, &mut xt[..m * stride]);
    let xt_s = &xt[..m * stride];
    // `-128 · Σ_k x[k, t]` per token: the products are `(w + 128) · x`.
    let mut correction = [0i32; FEW_TOKENS];
    for (c, row) in correction.iter_mut().zip(xt_s.chunks_exact(stride)) {
        *c = row
            .iter()
            .map(|&b| i32::from(b as i8))
            .sum::<i32>()
            .wrapping_mul(-128);
    }
    let chunk_rows = n.div_ceil(threads.max(1) * 4).next_multiple_of(R);
    let task = |(c, y_chunk): (usize, &mut [i32])| {
        for (i, y_tile) in y_chunk.chunks_mut(R * m).enumerate() {
            let r0 = c * chunk_rows + i * R;
            let live = y_tile.len() / m;
            // Rows past the last repeat it (never stored).
            let w_rows: [*const i8; R] = std::array::from_fn(|r| w[(r0 + r.min(live - 1)) * k..].as_ptr());
            for t0 in (0..m).step_by(T) {
                let valid = (m - t0).min(T);
                let x_rows: [*const u8; T] =
                    std::array::from_fn(|t| xt_s[(t0 + t.min(valid - 1)) * stride..].as_ptr());
                // SAFETY: each weight row has `k` bytes and each token row `stride ≥ k`
                // (whole 64-byte chunks); the features were detected by the caller.
                let sums = unsafe { few_tokens_tile::<R, T, U>(w_rows, x_rows, k) };
                for (r, row_sums) in sums.iter().enumerate().take(live) {
                    for (t, &v) in row_sums.iter().enumerate().take(valid) {
                        y_tile[r * m + t0 + t] = v.wrapping_add(correction[t0 + t]);
                    }
                }
            }
        }
    };
    for_each_chunk(y, chunk_rows * m, threads > 1, task);
    SCRATCH.with(|s| s.borrow_mut().2 = xt);
}

/// One `R`-row × `T`-token tile over all of K in 64-byte chunks, `U` at a time into separate
/// accumulators (so one row is a sequential stream with `U` independent chains; several rows
/// would be as many streams): `w + 128` (unsigned) times `x` (signed). The chunks past the
/// last whole group of `U` go into the first accumulators, their weights past K loaded under
/// a mask (zero, shifted to 128, meeting zero activations). Returns the sums without the
/// tokens' corrections.
///
/// # Safety
/// AVX-512F/BW/VNNI are available; each weight pointer has `k` readable bytes, each token
/// pointer `⌈k / 64⌉ · 64`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn few_tokens_tile<const R: usize, const T: usize, const U: usize>(
    w: [*const i8; R],
    x: [*const u8; T],
    k: usize,
) -> [[i32; T]; R] {
    let flip = _mm512_set1_epi8(i8::MIN);
    let mut acc = [[[_mm512_setzero_si512(); U]; T]; R];
    // One chunk `c` into accumulator `u`, its weights under `mask`.
    let chunk = |acc: &mut [[[__m512i; U]; T]; R], c: usize, u: usize, mask: u64| {
        // SAFETY: the masked bytes are inside each row, chunk c inside each token row (caller).
        let wv: [__m512i; R] = std::array::from_fn(|r| unsafe {
            let at = w[r].add(64 * c);
            // The row's bytes 1 KiB ahead: the rows are separate streams, and the hardware
            // prefetchers alone left 5-15% (one to eight tokens) on the table.
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(64 * 16).cast());
            // Whole chunks unmasked: a masked load measured slower in the streaming loop.
            let v = if mask == u64::MAX {
                _mm512_loadu_si512(at.cast())
            } else {
                _mm512_maskz_loadu_epi8(mask, at)
            };
            _mm512_xor_si512(v, flip)
        });
        for (t, &xt) in x.iter().enumerate() {
            // SAFETY: as above.
            let xv = unsafe { _mm512_loadu_si512(xt.add(64 * c).cast()) };
            for (acc_row, &wr) in acc.iter_mut().zip(&wv) {
                acc_row[t][u] = _mm512_dpbusd_epi32(acc_row[t][u], wr, xv);
            }
        }
    };
    let groups = k / (64 * U);
    for g in 0..groups {
        for u in 0..U {
            chunk(&mut acc, g * U + u, u, u64::MAX);
        }
    }
    for c in groups * U..k.div_ceil(64) {
        chunk(&mut acc, c, 0, u64::MAX >> (64 - (k - 64 * c).min(64)));
    }
    acc.map(|row| {
        row.map(|a| {
            _mm512_reduce_add_epi32(
                a.into_iter()
                    .fold(_mm512_setzero_si512(), |s, v| _mm512_add_epi32(s, v)),
            )
        })
    })
}

/// Token-major copy of `x` (`k × m`) for the feature-lane kernels: row `t` of `out` (`stride`
/// bytes each) holds token `t`'s `k` activations XOR `flip` (0 keeps them signed, `0x80`
/// shifts them to `x + 128`), then zeros.
pub(super) fn pack_token_major(x: &[i8], k: usize, m: usize, stride: usize, flip: u8, out: &mut [u8]) {
    for (t, row) in out.chunks_exact_mut(stride).enumerate().take(m) {
        row.iter_mut()
            .zip(x.iter().skip(t).step_by(m))
            .for_each(|(d, &s)| *d = (s as u8) ^ flip);
        row[k..].fill(0);
    }
}

/// `-128 · Σ w` over a weight row: the start of its accumulators, which removes the `+128`
/// shift of the activations (wrapping, like the sums it corrects).
pub(super) fn row_correction(row: &[i8]) -> i32 {
    row.iter().map(|&v| i32::from(v)).sum::<i32>().wrapping_mul(-128)
}

/// Pack token panel `p` of `x` as `[k/4][token][4]` bytes of `x + 128` (zero past `k` and
/// past `m`; a zero activation byte meets a zero weight in the K padding, and padded tokens
/// are never stored).
///
/// # Safety
/// The CPU supports SSE2; `x.len() == k·m`; `out` holds `⌈k/4⌉ · TOKENS · 4` bytes.
#[target_feature(enable = "sse2")]
unsafe fn pack_activations(x: &[i8], k: usize, m: usize, p: usize, out: &mut [u8]) {
    let flip = _mm_set1_epi8(i8::MIN);
    for (q, dst) in out.chunks_exact_mut(TOKENS * 4).enumerate() {
        let k0 = q * 4;
        for (g, d) in dst.chunks_exact_mut(64).enumerate() {
            let t0 = p * TOKENS + g * 16;
            if k0 + 4 <= k && t0 + 16 <= m {
                // Four rows of 16 tokens → 16 tokens of four k, by two rounds of unpacking.
                let row = |j: usize| {
                    let s = &x[(k0 + j) * m + t0..(k0 + j) * m + t0 + 16];
                    // SAFETY: `s` is 16 readable bytes.
                    _mm_xor_si128(unsafe { _mm_loadu_si128(s.as_ptr().cast()) }, flip)
                };
                let (a, b, c, e) = (row(0), row(1), row(2), row(3));
                let (ab_lo, ab_hi) = (_mm_unpacklo_epi8(a, b), _mm_unpackhi_epi8(a, b));
                let (ce_lo, ce_hi) = (_mm_unpacklo_epi8(c, e), _mm_unpackhi_epi8(c, e));
                let quarters = [
                    _mm_unpacklo_epi16(ab_lo, ce_lo),
                    _mm_unpackhi_epi16(ab_lo, ce_lo),
                    _mm_unpacklo_epi16(ab_hi, ce_hi),
                    _mm_unpackhi_epi16(ab_hi, ce_hi),
                ];
                for (v, chunk) in quarters.into_iter().zip(d.chunks_exact_mut(16)) {
                    // SAFETY: `chunk` is 16 writable bytes.
                    unsafe { _mm_storeu_si128(chunk.as_mut_ptr().cast(), v) };
                }
            } else {
                for (t, cell) in d.chunks_exact_mut(4).enumerate() {
                    for (j, byte) in cell.iter_mut().enumerate() {
                        let (kk, tok) = (k0 + j, t0 + t);
                        *byte = if kk < k && tok < m {
                            (x[kk * m + tok] as u8) ^ 0x80
                        } else {
                            0
                        };
                    }
                }
            }
        }
    }
}

/// Store masks of panel `p`'s four 16-token groups (all clear past `m`).
fn token_masks(m: usize, p: usize) -> [__mmask16; NR] {
    std::array::from_fn(|c| {
        let valid = m.saturating_sub(p * TOKENS + c * 16).min(16);
        ((1u32 << valid) - 1) as __mmask16
    })
}

/// How a micro-tile's accumulators start.
#[derive(Clone, Copy)]
pub(super) enum Init<'a> {
    /// First K block: the rows' corrections for the `+128` shift.
    Bias(&'a [i32]),
    /// Later K blocks: the partial sums already in `y`.
    Load,
}

/// One MR × (NR·16) tile over the K-quads in `w_rows` / `x`: accumulate in registers, store
/// into `y` (row stride `ldy`) for the first `rows` rows and the masked tokens.
///
/// # Safety
/// AVX-512F/BW/VNNI are available; each of `w_rows` holds `4 · quads` bytes and `x`
/// `quads · TOKENS · 4` for the same quads; `y` addresses a tile whose first `rows` rows and
/// masked tokens are in bounds and written by no one else meanwhile.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn micro_tile(
    w_rows: [&[u8]; MR],
    x: &[u8],
    y: *mut i32,
    ldy: usize,
    rows: usize,
    masks: [__mmask16; NR],
    init: Init<'_>,
) {
    let quads = x.len() / (TOKENS * 4);
    debug_assert!(w_rows.iter().all(|w| w.len() == quads * 4));
    // SAFETY: the tile's first `rows` rows and masked tokens are in bounds (caller).
    let mut acc: [[__m512i; NR]; MR] = unsafe { start_tile(y, ldy, rows, masks, init) };
    let (wq, xq): ([*const u8; MR], _) = (w_rows.map(<[u8]>::as_ptr), x.as_ptr());
    for q in 0..quads {
        // SAFETY: quad q < quads is inside both packed slices.
        let xv: [__m512i; NR] =
            std::array::from_fn(|c| unsafe { _mm512_loadu_si512(xq.add((q * TOKENS + c * 16) * 4).cast()) });
        for (r, acc_row) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let wv = _mm512_set1_epi32(unsafe { wq[r].add(q * 4).cast::<i32>().read_unaligned() });
            for (a, &xc) in acc_row.iter_mut().zip(&xv) {
                *a = _mm512_dpbusd_epi32(*a, xc, wv);
            }
        }
    }
    // SAFETY: as for the start.
    unsafe { store_tile(&acc, y, ldy, rows, masks) };
}

/// The accumulators of an `R`-row × `V`-zmm tile of 16-token groups as `init` says: the rows'
/// corrections, or the partial sums in `y` (row stride `ldy`) under the token masks. Rows
/// past `rows` (padding of the last row block) start at zero and are never stored. Shared by
/// every VNNI kernel that vectorises along tokens.
///
/// # Safety
/// AVX-512F is available; for [`Init::Load`] the first `rows` rows of `y` are readable under
/// the masks; for [`Init::Bias`] the slice holds `rows` corrections.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn start_tile<const R: usize, const V: usize>(
    y: *const i32,
    ldy: usize,
    rows: usize,
    masks: [__mmask16; V],
    init: Init<'_>,
) -> [[__m512i; V]; R] {
    let mut acc = [[_mm512_setzero_si512(); V]; R];
    for (r, acc_row) in acc.iter_mut().enumerate().take(rows) {
        for (c, a) in acc_row.iter_mut().enumerate() {
            *a = match init {
                Init::Bias(bias) => _mm512_set1_epi32(bias[r]),
                // SAFETY: row r < rows and the masked tokens are in bounds (caller).
                Init::Load => unsafe { _mm512_maskz_loadu_epi32(masks[c], y.wrapping_add(r * ldy + c * 16)) },
            };
        }
    }
    acc
}

/// Store the first `rows` rows of a tile started by [`start_tile`] under the token masks.
///
/// # Safety
/// AVX-512F is available; the first `rows` rows of `y` (stride `ldy`) are writable under the
/// masks and written by no one else meanwhile.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn store_tile<const R: usize, const V: usize>(
    acc: &[[__m512i; V]; R],
    y: *mut i32,
    ldy: usize,
    rows: usize,
    masks: [__mmask16; V],
) {
    for (r, acc_row) in acc.iter().enumerate().take(rows) {
        for (c, &a) in acc_row.iter().enumerate() {
            // SAFETY: row r < rows and the masked tokens are in bounds (caller).
            unsafe { _mm512_mask_storeu_epi32(y.wrapping_add(r * ldy + c * 16), masks[c], a) };
        }
    }
}

/// Columns per K block of the sparse kernel: a block's activations for the two 64-token
/// tiles a pass covers (`2 · SPARSE_KB · 64` bytes, 32 KiB) stay in L1 while a task's rows
/// visit them.
const SPARSE_KB: usize = 256;
/// Most rows per sparse task, so their partial sums (256 bytes a row) stay beside the
/// activation block in L1.
const SPARSE_CHUNK_ROWS: usize = 32;

/// Kept int8 weights regrouped for `vpdpbusd`: per row and [`SPARSE_KB`]-column block, the
/// kept entries four at a time (a quad: four columns, four weights as one i32), the last quad
/// of a block padded with zero weights at the block's first column.
///
/// Why: the axpy loop spends a widening multiply per kept weight and token; a quad instead
/// gathers four activation rows into K-quads per token with two rounds of byte unpacking and
/// multiplies all four in one instruction. It works for any pattern, since the columns come
/// from the kept entries themselves.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SparseQuads {
    blocks_per_row: usize,
    /// Quad index where (row, block) starts; `rows · blocks_per_row + 1` entries.
    seg_start: Vec<usize>,
    cols: Vec<[u32; 4]>,
    weights: Vec<i32>,
    /// `-128 · Σ kept w` per row, undoing the `x + 128` shift.
    bias: Vec<i32>,
}

impl SparseQuads {
    /// Regroup kept entries given per row (`row_start`, columns ascending within a row).
    pub(super) fn from_rows(rows: usize, k: usize, row_start: &[usize], cols: &[u32], values: &[i8]) -> Self {
        let blocks_per_row = k.div_ceil(SPARSE_KB).max(1);
        let mut seg_start = Vec::with_capacity(rows * blocks_per_row + 1);
        let (mut quad_cols, mut weights, mut bias) = (Vec::new(), Vec::new(), Vec::with_capacity(rows));
        seg_start.push(0);
        for r in 0..rows {
            let span = row_start[r]..row_start[r + 1];
            let (rc, rv) = (&cols[span.clone()], &values[span]);
            bias.push(rv.iter().map(|&v| i32::from(v)).sum::<i32>().wrapping_mul(-128));
            let mut at = 0;
            for b in 0..blocks_per_row {
                let end = (b + 1) * SPARSE_KB;
                let len = rc[at..].iter().take_while(|&&c| (c as usize) < end).count();
                for (qc, qv) in rc[at..at + len].chunks(4).zip(rv[at..at + len].chunks(4)) {
                    let mut c4 = [(b * SPARSE_KB) as u32; 4];
                    let mut v4 = [0u8; 4];
                    c4.iter_mut().zip(qc).for_each(|(d, &s)| *d = s);
                    v4.iter_mut().zip(qv).for_each(|(d, &s)| *d = s as u8);
                    quad_cols.push(c4);
                    weights.push(i32::from_le_bytes(v4));
                }
                at += len;
                seg_start.push(quad_cols.len());
            }
        }
        SparseQuads {
            blocks_per_row,
            seg_start,
            cols: quad_cols,
            weights,
            bias,
        }
    }

    /// `y[rows × m] = W · x[k × m]`, exact in i32, on `threads` workers (1 = calling thread).
    ///
    /// # Safety
    /// [`available`] returned true; `x.len() == k·m` and `y.len() == rows·m` for the `k` and
    /// `rows` this was built with; `k ≤ INT8_MAX_K`.
    pub(super) unsafe fn spmm(&self, threads: usize, x: &[i8], y: &mut [i32], m: usize) {
        let rows = self.bias.len();
        if rows == 0 || m == 0 {
            return;
        }
        // The activations, shifted to `x + 128` and laid out tile by tile (`[tile][k][64]`,
        // zero past `m`), so a K block of one tile is contiguous in L1 instead of 64 bytes
        // every `m` (which maps to a handful of L1 sets for power-of-two `m`).
        let k = x.len() / m;
        let tiles = m.div_ceil(64);
        let mut shifted = SCRATCH.with(|s| std::mem::take(&mut s.borrow_mut().2));
        shifted.resize(tiles * k * 64, 0);
        let xs = &mut shifted[..tiles * k * 64];
        let lay_out = |(t, tile): (usize, &mut [u8])| {
            let (t0, valid) = (t * 64, (m - t * 64).min(64));
            for (kk, dst) in tile.chunks_exact_mut(64).enumerate() {
                let src = &x[kk * m + t0..kk * m + t0 + valid];
                dst.iter_mut().zip(src).for_each(|(d, &s)| *d = (s as u8) ^ 0x80);
                dst[valid..].fill(0);
            }
        };
        for_each_chunk(&mut *xs, k * 64, threads > 1, lay_out);
        let chunk = (rows.div_ceil(threads.max(1) * 8)).clamp(1, SPARSE_CHUNK_ROWS);
        let xs = &*xs;
        let task = |(c, y_chunk): (usize, &mut [i32])| {
            // SAFETY: the caller guarantees the features and shapes; `y_chunk` is this
            // task's rows.
            unsafe { self.rows_chunk(c * chunk, xs, y_chunk, m) }
        };
        for_each_chunk(y, chunk * m, threads > 1, task);
        SCRATCH.with(|s| s.borrow_mut().2 = shifted);
    }

    /// Rows `first..` (as many as `y` holds) over every 64-token tile: per tile, per K block,
    /// per row, the row's quads in that block, with the partial sums parked in `acc` between
    /// blocks; then each row's sums are put back in token order and stored.
    ///
    /// # Safety
    /// AVX-512F/BW/VNNI are available; `xs` is the shifted `k × m` activations; `y` holds
    /// whole rows of `m`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn rows_chunk(&self, first: usize, xs: &[u8], y: &mut [i32], m: usize) {
        let tiles = m.div_ceil(64);
        let mut tile = 0;
        while tile < tiles {
            // Two tiles at once where there are two: eight independent accumulator chains
            // per row instead of four, and each quad's columns and weights read once for both.
            if tile + 1 < tiles {
                // SAFETY: as for this function.
                unsafe { self.rows_tiles::<2>(first, xs, y, m, tile) };
                tile += 2;
            } else {
                // SAFETY: as for this function.
                unsafe { self.rows_tiles::<1>(first, xs, y, m, tile) };
                tile += 1;
            }
        }
    }

    /// [`Self::rows_chunk`] for the `T` tiles from `first_tile`.
    ///
    /// # Safety
    /// As for [`Self::rows_chunk`]; tiles `first_tile .. first_tile + T` exist.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn rows_tiles<const T: usize>(
        &self,
        first: usize,
        xs: &[u8],
        y: &mut [i32],
        m: usize,
        first_tile: usize,
    ) {
        let rows = y.len() / m;
        let k = xs.len() / m.div_ceil(64) / 64;
        let x_tiles: [&[u8]; T] = std::array::from_fn(|i| {
            let t = first_tile + i;
            &xs[t * k * 64..(t + 1) * k * 64]
        });
        let mut acc: Vec<[[__m512i; 4]; T]> = (0..rows)
            .map(|r| [[_mm512_set1_epi32(self.bias[first + r]); 4]; T])
            .collect();
        for b in 0..self.blocks_per_row {
            for (r, a) in acc.iter_mut().enumerate() {
                let seg = (first + r) * self.blocks_per_row + b;
                let quads = self.seg_start[seg]..self.seg_start[seg + 1];
                // SAFETY: every quad column is < k, so each 64-byte load is inside its tile.
                unsafe { quads_tiles(&self.cols[quads.clone()], &self.weights[quads], x_tiles, a) };
            }
        }
        for (r, a) in acc.iter().enumerate() {
            for (i, tile_acc) in a.iter().enumerate() {
                let t0 = (first_tile + i) * 64;
                let valid = (m - t0).min(64);
                for (g, v) in in_token_order(tile_acc).iter().enumerate() {
                    let lanes = valid.saturating_sub(g * 16).min(16);
                    let mask = ((1u32 << lanes) - 1) as __mmask16;
                    let dst = y[r * m..].as_mut_ptr().wrapping_add(t0 + g * 16);
                    // SAFETY: the masked lanes are tokens < m of row r.
                    unsafe { _mm512_mask_storeu_epi32(dst, mask, *v) };
                }
            }
        }
    }
}

/// Accumulate one row's quads over `T` 64-token tiles into `acc` (lane order of the
/// unpacking, see [`in_token_order`]).
///
/// # Safety
/// AVX-512F/BW/VNNI are available; every column `c` has `64·c + 64 ≤ tile.len()` for each
/// tile.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn quads_tiles<const T: usize>(
    cols: &[[u32; 4]],
    weights: &[i32],
    tiles: [&[u8]; T],
    acc: &mut [[__m512i; 4]; T],
) {
    let mut a4 = *acc;
    for (c, &w) in cols.iter().zip(weights) {
        let wv = _mm512_set1_epi32(w);
        for (tile, a) in tiles.iter().zip(a4.iter_mut()) {
            let base = tile.as_ptr();
            // SAFETY: the caller guarantees the 64 bytes are inside the tile.
            let row = |j: usize| unsafe { _mm512_loadu_si512(base.add(c[j] as usize * 64).cast()) };
            let (ra, rb, rc, rd) = (row(0), row(1), row(2), row(3));
            let (ab_lo, ab_hi) = (_mm512_unpacklo_epi8(ra, rb), _mm512_unpackhi_epi8(ra, rb));
            let (cd_lo, cd_hi) = (_mm512_unpacklo_epi8(rc, rd), _mm512_unpackhi_epi8(rc, rd));
            a[0] = _mm512_dpbusd_epi32(a[0], _mm512_unpacklo_epi16(ab_lo, cd_lo), wv);
            a[1] = _mm512_dpbusd_epi32(a[1], _mm512_unpackhi_epi16(ab_lo, cd_lo), wv);
            a[2] = _mm512_dpbusd_epi32(a[2], _mm512_unpacklo_epi16(ab_hi, cd_hi), wv);
            a[3] = _mm512_dpbusd_epi32(a[3], _mm512_unpackhi_epi16(ab_hi, cd_hi), wv);
        }
    }
    *acc = a4;
}

/// The unpacking leaves token `16·L + 4·j + s` in lane `4·L + s` of accumulator `j` (`L` the
/// 128-bit lane); a 4 × 4 transpose of 128-bit lanes returns tokens `16·g ..` in output `g`.
#[target_feature(enable = "avx512f")]
fn in_token_order(acc: &[__m512i; 4]) -> [__m512i; 4] {
    let t0 = _mm512_shuffle_i32x4::<0x44>(acc[0], acc[1]);
    let t1 = _mm512_shuffle_i32x4::<0x44>(acc[2], acc[3]);
    let t2 = _mm512_shuffle_i32x4::<0xEE>(acc[0], acc[1]);
    let t3 = _mm512_shuffle_i32x4::<0xEE>(acc[2], acc[3]);
    [
        _mm512_shuffle_i32x4::<0x88>(t0, t1),
        _mm512_shuffle_i32x4::<0xDD>(t0, t1),
        _mm512_shuffle_i32x4::<0x88>(t2, t3),
        _mm512_shuffle_i32x4::<0xDD>(t2, t3),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_3_sparse_lane_order_is_undone_by_the_transpose() {
        if !available() {
            return;
        }
        // Label lane `4·L + s` of accumulator `j` with the token the unpacking put there.
        let acc: [__m512i; 4] = std::array::from_fn(|j| {
            let lanes: [i32; 16] = std::array::from_fn(|i| (16 * (i / 4) + 4 * j + i % 4) as i32);
            // SAFETY: 16 readable i32.
            unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) }
        });
        // SAFETY: AVX-512F was detected.
        let out = unsafe { in_token_order(&acc) };
        for (g, v) in out.iter().enumerate() {
            let mut got = [0i32; 16];
            // SAFETY: 16 writable i32.
            unsafe { _mm512_storeu_si512(got.as_mut_ptr().cast(), *v) };
            let want: Vec<i32> = (0..16).map(|t| (16 * g + t) as i32).collect();
            assert_eq!(got.to_vec(), want, "output {g}");
        }
    }

    #[test]
    fn issue_3_sparse_quads_pad_each_k_block_with_zero_weights_inside_it() {
        // Row 0 keeps 5 entries in block 0 and 1 in block 1; row 1 keeps none.
        let cols = [0u32, 3, 7, 8, 100, SPARSE_KB as u32 + 2];
        let values = [1i8, -2, 3, -4, 5, 6];
        let q = SparseQuads::from_rows(2, SPARSE_KB + 10, &[0, 6, 6], &cols, &values);
        assert_eq!(q.seg_start, vec![0, 2, 3, 3, 3]);
        assert_eq!(q.cols[1], [100, 0, 0, 0]);
        assert_eq!(q.weights[1], i32::from_le_bytes([5, 0, 0, 0]));
        assert_eq!(
            q.cols[2],
            [
                SPARSE_KB as u32 + 2,
                SPARSE_KB as u32,
                SPARSE_KB as u32,
                SPARSE_KB as u32
            ]
        );
        assert_eq!(q.bias, vec![-128 * 9, 0]);
    }
}
