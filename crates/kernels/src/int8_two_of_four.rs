//! int8 2:4 in its compact form, read directly by AVX-512 VNNI kernels: `y[N×M] = W · x[K×M]`,
//! i8 × i8 → i32, bit-exact.
//!
//! Why: the kept-entries form (`SparseI8`, [`super::int8_vnni::SparseQuads`]) stores a u32
//! column per kept byte, four times the values, and interleaves four activation rows per
//! `vpdpbusd` with two rounds of unpacking; 2:4 ran at 0.57–0.65× dense int8 on it.
//!
//! * **Format** ([`TwoOfFourI8`]). K is cut into *octets*, eight positions = two groups of
//!   four. Each octet of a row stores its four kept values (two per group, ascending, explicit
//!   zeros where a group keeps fewer) as one little-endian i32, which is exactly one
//!   `vpdpbusd` weight operand, and one index byte: bits `2e..2e+2` hold kept value `e`'s
//!   position in its group (`e` = 0, 1 the first group, 2, 3 the second), the bit order of
//!   the f32 2:4 format (`nm/indices.rs`). Per dense weight byte that is 0.5 B of values and
//!   0.125 B of indices.
//! * **Storage order** is the kernels' reading order: blocks of [`RB`] rows × *chunks* of 16
//!   octets (128 K positions), and inside a chunk each row's 64 values (then, separately, its
//!   16 index bytes) contiguous. A register tile of one block then reads one sequential
//!   stream of values and one of indices, with the rows at fixed offsets (a row-major layout
//!   had every row as its own stream and ran the few-token case at ~12 GB/s), and the
//!   feature-lane kernel loads a row's chunk as one zmm. K is padded to whole chunks and N to
//!   whole blocks with zero weights (padded positions meet zero activations; padded rows are
//!   never stored), and the padding is counted in the byte totals.
//! * **Selecting the activations.** One `vpdpbusd` covers an octet (four kept weights, eight
//!   K positions) where dense needs two. Its unsigned operand must hold, per i32 lane, the
//!   four activations at the row's kept positions, so every (row, octet) needs its own byte
//!   selection: one `vpermt2b` (VBMI) per `vpdpbusd`, which is what bounds these kernels
//!   wherever they are not bandwidth-bound. Measured on Zen 5: `vpermt2b` → `vpdpbusd` pairs
//!   issue at ~0.76 cycles against ~0.54 for one `vpdpbusd` (they share a pipe), so the
//!   instruction-level limit is ~1.4× dense, not 2×; with the control and weight loads the
//!   token-lane loop runs at ~1.0 cycle a pair, 1.03–1.2× dense at 128–512 tokens.
//!   (`vpmultishiftqb`, which selects bytes within a qword, issues on the `vpdpbusd` pipes:
//!   0.98 a pair. Folding the weight broadcast into `vpdpbusd`'s memory operand did not help.)
//! * **Token lanes** (more than 48 tokens). The activations are packed per
//!   panel of `V` 16-token tiles as `[octet][tile][token][8]` bytes of `x + 128`, so two zmm
//!   hold one octet of 16 tokens and a panel's K block is contiguous; the index byte picks a
//!   precomputed `vpermt2b` control ([`CONTROLS`], 16 KiB of which a matrix touches the ≤ 36
//!   valid lines) that gathers each token's four kept bytes into its lane. Register tiles of
//!   8 rows × 2 tiles (× 1 in a last panel of up to 16 tokens) run over K blocks of [`KC`]
//!   chunks, the weights streaming past the packed activations, tasks as in the dense kernel.
//! * **Rows in lanes** (2 to 48 tokens, in groups of up to 12):
//!   `super::int8_row_lanes`, on an execution copy laid out by 16-row panel and octet, one
//!   `vpshufb` per `vpdpbusd`.
//! * **Feature lanes** (one token). Token lanes would be mostly padding, so
//!   K is in the lanes instead: one zmm is 64 kept values of a row (16 octets, 128 K
//!   positions), its control decoded from the row's 16 index bytes (`vpmovzxwq`,
//!   `vpmultishiftqb`, `vpternlogd`, shared by the tokens) and applied to each token's 128
//!   activation bytes; one horizontal sum per (row, token) at the end.
//! * **Expanded lines** (on Intel, at one token and from 49): `super::int8_expand`, an
//!   execution copy rebuilt into the dense kernel's lines by `vpexpandb`, run by the dense
//!   kernel's tiles.
//! * **Exactness and signedness** as in `int8_vnni`: activations shifted to `x + 128`,
//!   accumulators started at `-128 · Σ w` (precomputed per row at compression), wrapping i32
//!   arithmetic, exact for `K ≤ INT8_MAX_K`.
//!
//! Weight-stationary: compressed once; the activations are packed per call into thread-local
//! scratch, and that time counts.

use super::error::KernelError;
use super::int8_row_lanes::RowLanes;
use super::int8_vnni::{Init, pack_token_major, row_correction, start_tile, store_tile};
use super::precision::Epilogue;
use super::schedule::TaskGrid;
use super::scratch::line_aligned;
use super::shared_output::{SharedOutput, for_each_chunk, trivial_product};
use rayon::prelude::*;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Rows per block of the stored layout (and of every register tile's rows).
const RB: usize = 8;
/// Octets per chunk: 64 kept values, 128 K positions, one zmm of a row's values.
const CHUNK_OCTETS: usize = 16;
/// Tokens per packed tile (one zmm of i32 lanes).
const TILE: usize = 16;
/// Bytes of one packed octet of a tile: 16 tokens × 8 positions.
const OCTET_BYTES: usize = TILE * 8;
/// Chunks per K block of the token-lane kernel (4096 K positions). A two-tile panel's block
/// (128 KiB) sits in L2, not L1: its loads are a quarter of a pair's, and fewer blocks mean
/// fewer accumulator round trips through `y`. Measured on Zen 5 at 128–512 tokens, one thread,
/// alternated: 32 chunks 2–10% faster than 4, 8 or 16.
const KC: usize = 32;
/// Most row blocks per token-lane task, so a task's weights for one K block (≤ 256 rows ×
/// 2.5 KiB) stay in L2 while it walks its token panels.
const MAX_CHUNK_BLOCKS: usize = 32;
/// From 2 up to this many tokens the rows-in-lanes kernel runs, past its own
/// `int8_row_lanes::MAX_TOKENS` in groups of that many, each panel's weights meeting every
/// group from L1/L2. Against the compact token lanes (× int8 dense, 2 threads, alternated):
/// on Zen 5 (AMD EPYC family 26, 2026-12-07, 2–3 rounds) at 16 / 24 / 40 / 48 tokens 4096²
/// level / 0.96–1.08 vs 0.84 / 0.94–1.00 vs 0.71–0.73 / 0.89–1.07 vs 0.85–0.92, 11008 × 4096
/// 0.96–1.07 vs 0.77–0.79 / 1.01–1.04 vs 0.71–0.75 / 0.98–1.06 vs 0.60–0.65 / 1.06–1.07 vs
/// 0.73–0.76, 4096 × 11008 0.95–1.00 vs 0.77–0.78 / 1.03–1.08 vs 0.67 / 1.01–1.03 vs
/// 0.61–0.62 / 1.02–1.05 vs 0.73–0.74; groups up to 128 tokens lost to the token lanes at
/// 56–128 on 4096² (0.92–1.09 vs 1.16–1.25 at 56–64). On Emerald Rapids (AMX withheld, three
/// rounds) against the expanded lines' feature lanes at 16 / 24 / 48 tokens: 4096²
/// 0.89–0.92 / 0.88–0.97 / 0.89–0.90 vs 0.85–0.91 / 0.88–0.90 / 0.78–0.87, 4096 × 11008
/// 0.89–0.99 / 0.98–1.00 / 0.98–1.00 vs 0.92 / 0.94–0.96 / 0.91–0.94, level on 11008 × 4096.
/// Past it the token lanes: the expanded lines' on Intel (0.84–1.05 at 64–512 tokens), the
/// compact ones elsewhere.
const ROW_LANE_GROUPS_TO: usize = 48;
/// K positions of one chunk.
const CHUNK: usize = CHUNK_OCTETS * 8;

thread_local! {
    /// The packed activations, reused across calls on the same thread.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Whether this CPU runs the compact kernels: AVX-512F/BW/VL, VNNI and VBMI (`vpermt2b`,
/// `vpmultishiftqb`), detected at run time. (Cascade Lake has VNNI but not VBMI.)
pub(super) fn available() -> bool {
    super::int8_vnni::available() && crate::cpu::has!("avx512vl") && crate::cpu::has!("avx512vbmi")
}

/// int8 weights in the compact 2:4 form, stored in blocks (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TwoOfFourI8 {
    rows: usize,
    k: usize,
    /// Chunks per row, `⌈k / 128⌉`.
    chunks: usize,
    /// `[block][chunk][RB rows][64]` kept values, four per octet in K order.
    values: Vec<i8>,
    /// `[block][chunk][RB rows][16]` index bytes, one per octet.
    idx: Vec<u8>,
    /// `-128 · Σ w` per row, undoing the `x + 128` shift.
    bias: Vec<i32>,
    /// The rows-in-lanes copy for 2–12 tokens, built on the first such product (an
    /// execution copy: 1.25 bytes a kept weight more while it lives).
    row_lanes: std::sync::OnceLock<RowLanes>,
    /// The masked dense lines (`int8_expand`), built on the first product that runs them
    /// (an execution copy of 0.625 bytes a dense weight).
    expanded: std::sync::OnceLock<super::int8_expand::ExpandedLines>,
}

/// The index byte of a group pair that keeps nothing: positions 0 and 1 in both groups (the
/// lowest free positions, as for any group with fewer than two non-zeros).
const EMPTY_OCTET: u8 = 0b01_00_01_00;

impl TwoOfFourI8 {
    /// Compress row-major `rows × k` weights in which every group of four consecutive K
    /// positions (the last one possibly shorter) holds at most two non-zeros; a group with
    /// more is refused as [`KernelError::Overfull`]. The caller checked `w.len()`.
    pub(super) fn compress(w: &[i8], rows: usize, k: usize) -> Result<TwoOfFourI8, KernelError> {
        let chunks = k.div_ceil(CHUNK);
        let blocks = rows.div_ceil(RB);
        let mut values = vec![0i8; blocks * chunks * RB * CHUNK_OCTETS * 4];
        let mut idx = vec![EMPTY_OCTET; blocks * chunks * RB * CHUNK_OCTETS];
        let mut bias = Vec::with_capacity(rows);
        for row in 0..rows {
            let wr = &w[row * k..(row + 1) * k];
            for o in 0..k.div_ceil(8) {
                let (c, oo) = (o / CHUNK_OCTETS, o % CHUNK_OCTETS);
                let at = ((row / RB * chunks + c) * RB + row % RB) * CHUNK_OCTETS + oo;
                let mut byte = 0u8;
                for half in 0..2 {
                    let group = 2 * o + half;
                    let weight = |p: usize| wr.get(4 * group + p).copied().unwrap_or(0);
                    let nonzeros = (0..4).filter(|&p| weight(p) != 0).count();
                    if nonzeros > 2 {
                        return Err(KernelError::Overfull {
                            row,
                            group,
                            nonzeros,
                            n: 2,
                            m: 4,
                        });
                    }
                    // The non-zeros, then the lowest zero positions, so every group stores
                    // two distinct ascending positions.
                    let mut keep: Vec<usize> = (0..4).filter(|&p| weight(p) != 0).collect();
                    keep.extend((0..4).filter(|&p| weight(p) == 0).take(2 - nonzeros));
                    keep.sort_unstable();
                    for (slot, &p) in keep.iter().enumerate() {
                        values[4 * at + 2 * half + slot] = weight(p);
                        byte |= (p as u8) << (2 * (2 * half + slot));
                    }
                }
                idx[at] = byte;
            }
            bias.push(row_correction(wr));
        }
        Ok(TwoOfFourI8 {
            rows,
            k,
            chunks,
            values,
            idx,
            bias,
            row_lanes: std::sync::OnceLock::new(),
            expanded: std::sync::OnceLock::new(),
        })
    }

    /// Bytes of stored values (padding zeros included).
    pub(super) fn value_bytes(&self) -> usize {
        self.values.len()
    }

    /// Bytes of metadata the kernels stream: the index bytes (padding included) and the
    /// per-row corrections.
    pub(super) fn metadata_bytes(&self) -> usize {
        self.idx.len() + self.bias.len() * std::mem::size_of::<i32>()
    }

    /// Bytes of the execution copies built so far (rows in lanes, expanded lines): 0 until
    /// the first product that needs one.
    pub(super) fn execution_copy_bytes(&self) -> usize {
        self.row_lanes.get().map_or(0, RowLanes::bytes)
            + self
                .expanded
                .get()
                .map_or(0, super::int8_expand::ExpandedLines::bytes)
    }

    /// Block `b`'s values and index bytes from chunk `c` on (rows `RB` apart at 64 and 16
    /// bytes).
    fn block_at(&self, b: usize, c: usize) -> (*const u8, *const u8) {
        let at = (b * self.chunks + c) * RB * CHUNK_OCTETS;
        (self.values[at * 4..].as_ptr().cast(), self.idx[at..].as_ptr())
    }

    /// `y[rows × m] = W · x[k × m]`, exact in i32, on `threads` workers of the current rayon
    /// pool (1 = the calling thread), stored through `epilogue` where the path taken can
    /// (the expanded lines and rows in lanes); returns whether it was.
    ///
    /// # Safety
    /// [`available`] returned true; `x.len() == k·m` and `y.len() == rows·m` for the `k` and
    /// `rows` this was built with; `k ≤ INT8_MAX_K`.
    pub(super) unsafe fn spmm(
        &self,
        threads: usize,
        x: &[i8],
        y: &mut [i32],
        m: usize,
        epilogue: Epilogue<'_>,
    ) -> bool {
        debug_assert!(x.len() == self.k * m && y.len() == self.rows * m);
        if trivial_product(y, self.rows, self.k, m) {
            return true;
        }
        let mut scratch = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
        // SAFETY: the caller's contract, passed on.
        unsafe {
            // One token: feature lanes, 8 rows (measured fastest on Zen 5, 4096 × 4096, one
            // thread, alternated in one process). 2–12 tokens: rows in lanes
            // (`int8_row_lanes`), on Zen 4 (2 threads, three alternated rounds, × int8
            // dense, against the feature lanes' 8 × 2 and 4 × 4 tiles) 1.08–1.19 vs
            // 0.74–0.84 at 2 tokens, 0.96–1.13 vs 0.56–0.72 at 4, 1.08–1.21 vs 0.57 at 8 on
            // 4096², 1.13–1.27 vs 0.63–0.67 at 8 on 11008 × 4096; at one token it lost
            // (1.02–1.11 vs 1.18–1.43 on 11008 × 4096, before its prefetch). In groups of 12
            // up to `ROW_LANE_GROUPS_TO`, then token lanes of 8 rows × two 16-token tiles.
            // On Intel (`int8_expand::pays` says why) the expanded lines at one token and
            // past `ROW_LANE_GROUPS_TO`.
            let expand = super::int8_expand::pays();
            let fused = match m {
                1 if expand => {
                    let lines = self.expanded();
                    super::int8_dense::feature_lanes(lines, threads, (x, y, m), &mut scratch, epilogue);
                    true
                }
                _ if expand && m > ROW_LANE_GROUPS_TO => {
                    self.expanded()
                        .token_lanes(threads, x, y, m, &mut scratch, epilogue);
                    true
                }
                1 => {
                    self.few_tokens::<8, 1, 0>(threads, x, y, m, &mut scratch);
                    false
                }
                _ if m <= ROW_LANE_GROUPS_TO => {
                    self.row_lanes().spmm(threads, x, y, m, &mut scratch, epilogue);
                    true
                }
                _ => {
                    self.token_lanes::<2>(threads, x, y, m, &mut scratch);
                    false
                }
            };
            SCRATCH.with(|s| *s.borrow_mut() = scratch);
            fused
        }
    }

    /// The octet `o` of row `r`: its four kept values and index byte.
    fn octet(&self, r: usize, o: usize) -> ([i8; 4], u8) {
        let (c, oo) = (o / CHUNK_OCTETS, o % CHUNK_OCTETS);
        let at = ((r / RB * self.chunks + c) * RB + r % RB) * CHUNK_OCTETS + oo;
        let v = &self.values[at * 4..at * 4 + 4];
        ([v[0], v[1], v[2], v[3]], self.idx[at])
    }

    /// The masked dense lines (`int8_expand`), built on first use.
    fn expanded(&self) -> &super::int8_expand::ExpandedLines {
        self.expanded.get_or_init(|| {
            super::int8_expand::ExpandedLines::new((self.rows, self.k), |r, o| self.octet(r, o))
        })
    }

    /// The rows-in-lanes copy (`int8_row_lanes`), built on first use.
    fn row_lanes(&self) -> &RowLanes {
        self.row_lanes
            .get_or_init(|| RowLanes::new((self.rows, self.k), |r, o| self.octet(r, o), &self.bias))
    }

    /// The token-lane kernel with one block (`RB` rows) × `V`-tile register tiles. Two blocks
    /// × one tile (16 rows) ran 0.71–0.91× int8 dense at 64–2048 tokens on Zen 5 where these
    /// ran 0.84–1.20 (2 threads, alternated).
    ///
    /// # Safety
    /// As for [`Self::spmm`].
    unsafe fn token_lanes<const V: usize>(
        &self,
        threads: usize,
        x: &[i8],
        y: &mut [i32],
        m: usize,
        scratch: &mut Vec<u8>,
    ) {
        let (rows, k, chunks) = (self.rows, self.k, self.chunks);
        let panels = m.div_ceil(V * TILE);
        // `[panel][octet][V tiles][128]`: a panel's K block is one contiguous run (tiles packed
        // apart put both tiles' blocks in the same L1 sets).
        let panel_bytes = chunks * CHUNK_OCTETS * V * OCTET_BYTES;
        let len = panels * panel_bytes;
        let xp = line_aligned(scratch, len);
        // The tiles of panel `p` that hold tokens: the last panel may have fewer than `V`,
        // and is packed and run with as many (72 tokens cost five tiles of work, not six).
        let tiles_of = |p: usize| (m - p * V * TILE).div_ceil(TILE).min(V);
        let pack = |(p, out): (usize, &mut [u8])| {
            let tiles = tiles_of(p);
            let out = &mut out[..panel_bytes / V * tiles];
            for v in 0..tiles {
                // SAFETY: SSE2 is part of x86-64; `out` is panel `p`, its octets
                // `tiles · 128` bytes apart; shapes checked by the caller.
                unsafe {
                    pack_octets(
                        x,
                        k,
                        m,
                        p * V + v,
                        &mut out[v * OCTET_BYTES..],
                        tiles * OCTET_BYTES,
                    )
                }
            }
        };
        for_each_chunk(xp, panel_bytes, threads > 1, pack);
        let xp = &*xp;

        let grid = TaskGrid::new(rows.div_ceil(RB), panels, threads, MAX_CHUNK_BLOCKS);
        // Each task writes its own row chunk × panel group; the tasks join before returning.
        let out = SharedOutput(y.as_mut_ptr());
        let task = |t: usize| {
            let (block_range, panel_range) = grid.task(t);
            for p in panel_range {
                let masks: [__mmask16; V] = std::array::from_fn(|v| {
                    let valid = m.saturating_sub((p * V + v) * TILE).min(TILE);
                    ((1u32 << valid) - 1) as __mmask16
                });
                let tiles = tiles_of(p);
                for c0 in (0..chunks).step_by(KC) {
                    let c1 = (c0 + KC).min(chunks);
                    let panel_at = xp[p * panel_bytes + c0 * CHUNK_OCTETS * tiles * OCTET_BYTES..].as_ptr();
                    for b in block_range.clone() {
                        let live = (rows - b * RB).min(RB);
                        let stored = self.block_at(b, c0);
                        let init = if c0 == 0 {
                            Init::Bias(&self.bias[b * RB..b * RB + live])
                        } else {
                            Init::Load
                        };
                        // SAFETY: the tile (rows b·RB.., tokens p·V·16..) is inside `y` where
                        // `live` and the masks say so, and only this task writes it; the block
                        // pair has `c1 - c0` chunks from `c0`, the panel pointer as many
                        // packed chunks; the features were checked by the caller.
                        unsafe {
                            let y_tile = (out.at(b * RB * m + p * V * TILE), m);
                            let chunks = c1 - c0;
                            if tiles == V {
                                token_tile::<V>(stored, panel_at, chunks, y_tile, live, masks, init);
                            } else {
                                token_tile::<1>(stored, panel_at, chunks, y_tile, live, [masks[0]], init);
                            }
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

    /// The feature-lane kernel with `R`-row × `T`-token register tiles (`R` divides `RB`;
    /// `m ≤ 8`; it takes one token now), prefetching the weights `PF` chunks ahead (0: none).
    ///
    /// # Safety
    /// As for [`Self::spmm`].
    unsafe fn few_tokens<const R: usize, const T: usize, const PF: usize>(
        &self,
        threads: usize,
        x: &[i8],
        y: &mut [i32],
        m: usize,
        scratch: &mut Vec<u8>,
    ) {
        let (rows, k, chunks) = (self.rows, self.k, self.chunks);
        // Token-major `x + 128`, each token's row padded with zeros to whole chunks.
        let stride = chunks * CHUNK;
        scratch.resize(m * stride, 0);
        pack_token_major(x, k, m, stride, 0x80, &mut scratch[..m * stride]);
        let xt = &scratch[..m * stride];
        let chunk_rows = rows.div_ceil(threads.max(1) * 4).next_multiple_of(RB);
        let task = |(c, y_chunk): (usize, &mut [i32])| {
            for (i, y_tile) in y_chunk.chunks_mut(R * m).enumerate() {
                let r0 = c * chunk_rows + i * R;
                let live = y_tile.len() / m;
                let (values, idx) = self.block_at(r0 / RB, 0);
                let sub = r0 % RB;
                let rows_at = (values.wrapping_add(sub * 64), idx.wrapping_add(sub * 16));
                for t0 in (0..m).step_by(T) {
                    let valid = (m - t0).min(T);
                    // Token slots past `m` repeat the last token (never stored).
                    let x_rows: [*const u8; T] =
                        std::array::from_fn(|t| xt[(t0 + t.min(valid - 1)) * stride..].as_ptr());
                    // SAFETY: rows `sub .. sub + R` of the block exist (R divides RB) with
                    // `chunks` chunks, every token row has `chunks` chunks; the features
                    // were checked by the caller.
                    let sums = unsafe { feature_tile::<R, T, PF>(rows_at, x_rows, chunks) };
                    for (r, row_sums) in sums.iter().enumerate().take(live) {
                        let bias = self.bias[r0 + r];
                        for (t, &s) in row_sums.iter().enumerate().take(valid) {
                            y_tile[r * m + t0 + t] = s.wrapping_add(bias);
                        }
                    }
                }
            }
        };
        for_each_chunk(y, chunk_rows * m, threads > 1, task);
    }
}

/// Bytes between chunks of a stored block: values and index bytes.
const CHUNK_VALUES: usize = RB * CHUNK_OCTETS * 4;
/// See [`CHUNK_VALUES`].
const CHUNK_INDICES: usize = RB * CHUNK_OCTETS;

/// The `vpermt2b` control per index byte for the token-lane kernel: lane `4t + s` (token `t`,
/// kept slot `s`) takes byte `8t + 4·⌊s/2⌋ + position` of the two zmm holding one octet of 16
/// tokens (`[token][8]`; bit 6 of the control picks the second).
#[repr(align(64))]
struct Controls([[u8; 64]; 256]);

/// See [`Controls`].
static CONTROLS: Controls = Controls(controls());

const fn controls() -> [[u8; 64]; 256] {
    let mut table = [[0u8; 64]; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut lane = 0;
        while lane < 64 {
            let (token, slot) = (lane / 4, lane % 4);
            table[byte][lane] = (8 * token + 4 * (slot / 2) + ((byte >> (2 * slot)) & 3)) as u8;
            lane += 1;
        }
        byte += 1;
    }
    table
}

/// Pack tile `t` of `x` (tokens `16t ..`) as `[token][8]` bytes of `x + 128` per octet, the
/// octets `stride` bytes apart in `out` (as many as it holds), zero past `k` and past `m` (a
/// zero byte meets a zero weight in the K padding; padded tokens are never stored).
///
/// # Safety
/// The CPU supports SSE2; `x.len() == k·m`; `stride ≥ 128`.
#[target_feature(enable = "sse2")]
unsafe fn pack_octets(x: &[i8], k: usize, m: usize, t: usize, out: &mut [u8], stride: usize) {
    let flip = _mm_set1_epi8(i8::MIN);
    let t0 = t * TILE;
    for o in 0..out.len().div_ceil(stride) {
        let dst = &mut out[o * stride..o * stride + OCTET_BYTES];
        let k0 = o * 8;
        if k0 + 8 <= k && t0 + TILE <= m {
            // Eight rows of 16 tokens → 16 tokens of eight k, by three rounds of unpacking.
            let a: [__m128i; 8] = std::array::from_fn(|j| {
                let s = &x[(k0 + j) * m + t0..(k0 + j) * m + t0 + TILE];
                // SAFETY: `s` is 16 readable bytes.
                _mm_xor_si128(unsafe { _mm_loadu_si128(s.as_ptr().cast()) }, flip)
            });
            // Pairs of k: tokens 0-7 (lo) and 8-15 (hi) of rows (0,1), (2,3), (4,5), (6,7).
            let p: [__m128i; 8] = std::array::from_fn(|i| {
                let (u, v) = (a[2 * (i / 2)], a[2 * (i / 2) + 1]);
                if i % 2 == 0 {
                    _mm_unpacklo_epi8(u, v)
                } else {
                    _mm_unpackhi_epi8(u, v)
                }
            });
            // Quads of k for tokens 4i..4i+4: k0-3 in q[i], k4-7 in q[4 + i].
            let q: [__m128i; 8] = std::array::from_fn(|i| {
                let (lo, hi) = (4 * (i / 4), 4 * (i / 4) + 2);
                let half = (i % 4) / 2;
                let (u, v) = (p[lo + half], p[hi + half]);
                if i % 2 == 0 {
                    _mm_unpacklo_epi16(u, v)
                } else {
                    _mm_unpackhi_epi16(u, v)
                }
            });
            for i in 0..4 {
                let pair = [
                    _mm_unpacklo_epi32(q[i], q[4 + i]),
                    _mm_unpackhi_epi32(q[i], q[4 + i]),
                ];
                for (h, v) in pair.into_iter().enumerate() {
                    let d = &mut dst[(4 * i + 2 * h) * 8..(4 * i + 2 * h + 2) * 8];
                    // SAFETY: `d` is 16 writable bytes.
                    unsafe { _mm_storeu_si128(d.as_mut_ptr().cast(), v) };
                }
            }
        } else {
            for (tok, cell) in dst.chunks_exact_mut(8).enumerate() {
                for (j, byte) in cell.iter_mut().enumerate() {
                    let (kk, tt) = (k0 + j, t0 + tok);
                    *byte = if kk < k && tt < m {
                        (x[kk * m + tt] as u8) ^ 0x80
                    } else {
                        0
                    };
                }
            }
        }
    }
}

/// One block (`RB` rows) × `V`-tile register tile over `chunks` chunks: per octet, the `V`
/// tiles' activations once, then per row its control (by index byte) and broadcast weights,
/// one `vpermt2b` and one `vpdpbusd` per tile; stored into `y` (row stride `ldy`) for the
/// first `rows` rows and the masked tokens.
///
/// # Safety
/// AVX-512F/BW/VNNI/VBMI are available; the block pointer pair has `chunks` chunks, the panel
/// pointer `chunks · 16 · V · 128` packed bytes; `y` addresses a tile whose first `rows` rows
/// and masked tokens are in bounds and written by no one else meanwhile.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi")]
unsafe fn token_tile<const V: usize>(
    block: (*const u8, *const u8),
    x: *const u8,
    chunks: usize,
    (y, ldy): (*mut i32, usize),
    rows: usize,
    masks: [__mmask16; V],
    init: Init<'_>,
) {
    // SAFETY: the tile's first `rows` rows and masked tokens are in bounds (caller).
    let mut acc: [[__m512i; V]; RB] = unsafe { start_tile(y, ldy, rows.min(RB), masks, init) };
    for c in 0..chunks {
        for oo in 0..CHUNK_OCTETS {
            let o = c * CHUNK_OCTETS + oo;
            // SAFETY: octet o < 16 · chunks of the panel (caller).
            let xs: [(__m512i, __m512i); V] = std::array::from_fn(|v| unsafe {
                let at = x.add((o * V + v) * OCTET_BYTES);
                (
                    _mm512_loadu_si512(at.cast()),
                    _mm512_loadu_si512(at.add(64).cast()),
                )
            });
            // SAFETY: chunk c and octet oo are inside the block (caller).
            unsafe { block_step(&mut acc, &xs, block, c, oo) };
        }
    }
    // SAFETY: as for the start.
    unsafe { store_tile(&acc, y, ldy, rows.min(RB), masks) };
}

/// One octet of one stored block's `RB` rows against `V` tiles' activations (see
/// [`token_tile`]).
///
/// # Safety
/// AVX-512F/BW/VNNI/VBMI (inlined into [`token_tile`]); chunk `c` and octet `oo` are inside
/// the block.
#[inline(always)]
unsafe fn block_step<const V: usize>(
    acc: &mut [[__m512i; V]; RB],
    xs: &[(__m512i, __m512i); V],
    (values, idx): (*const u8, *const u8),
    c: usize,
    oo: usize,
) {
    for (row, acc_row) in acc.iter_mut().enumerate() {
        // SAFETY: chunk c, row < RB and octet oo < 16 are inside the block (caller); the
        // control table has a line for every byte; the ISA is the caller's.
        unsafe {
            let byte = *idx.add(c * CHUNK_INDICES + row * CHUNK_OCTETS + oo);
            let ctl = _mm512_load_si512(CONTROLS.0[usize::from(byte)].as_ptr().cast());
            let w4 = values.add(c * CHUNK_VALUES + row * CHUNK_OCTETS * 4 + oo * 4);
            let wv = _mm512_set1_epi32(w4.cast::<i32>().read_unaligned());
            for (a, &(lo, hi)) in acc_row.iter_mut().zip(xs) {
                *a = _mm512_dpbusd_epi32(*a, _mm512_permutex2var_epi8(lo, ctl, hi), wv);
            }
        }
    }
}

/// Bit offset of each byte's 2-bit index inside a qword holding two index bytes (octets
/// `2j`, `2j + 1`): kept value `8j + b` sits at bits `2b ..`.
const INDEX_SHIFTS: i64 = 0x0E0C_0A08_0604_0200;

/// Per kept value `e` of a 128-position chunk, the offset of its group's pair in the chunk:
/// `8·⌊e/4⌋ + 4·⌊(e mod 4)/2⌋`; adding the 2-bit index gives its K position.
#[repr(align(64))]
struct GroupBases([u8; 64]);

/// See [`GroupBases`].
static GROUP_BASES: GroupBases = GroupBases(group_bases());

const fn group_bases() -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut e = 0;
    while e < 64 {
        b[e] = (8 * (e / 4) + 4 * ((e % 4) / 2)) as u8;
        e += 1;
    }
    b
}

/// One `R`-row × `T`-token register tile over whole rows (`chunks` chunks): per chunk and row
/// the 64 kept values and their decoded control; per token its 128 activation bytes, one
/// `vpermt2b` and one `vpdpbusd` per row. Returns the sums without the rows' corrections.
/// With `PF > 0` the rows' values and indices `PF` chunks ahead are prefetched (a hint: the
/// addresses past the block are never read).
///
/// # Safety
/// AVX-512F/BW/VNNI/VBMI are available; `rows` points at the first of `R` rows of a stored
/// block (`R` ≤ rows left in the block) with `chunks` chunks; each token pointer has
/// `chunks · 128` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi")]
unsafe fn feature_tile<const R: usize, const T: usize, const PF: usize>(
    (values, idx): (*const u8, *const u8),
    x: [*const u8; T],
    chunks: usize,
) -> [[i32; T]; R] {
    let shifts = _mm512_set1_epi64(INDEX_SHIFTS);
    // SAFETY: the table is 64 aligned bytes.
    let bases = unsafe { _mm512_load_si512(GROUP_BASES.0.as_ptr().cast()) };
    let three = _mm512_set1_epi8(3);
    let mut acc = [[_mm512_setzero_si512(); T]; R];
    for c in 0..chunks {
        if PF > 0 {
            for r in 0..R {
                _mm_prefetch::<_MM_HINT_T0>(values.wrapping_add((c + PF) * CHUNK_VALUES + r * 64).cast());
            }
            _mm_prefetch::<_MM_HINT_T0>(idx.wrapping_add((c + PF) * CHUNK_INDICES).cast());
        }
        let rows: [(__m512i, __m512i); R] = std::array::from_fn(|r| {
            // SAFETY: row r's chunk c is inside the block (caller).
            let (wv, packed) = unsafe {
                (
                    _mm512_loadu_si512(values.add(c * CHUNK_VALUES + r * CHUNK_OCTETS * 4).cast()),
                    _mm_loadu_si128(idx.add(c * CHUNK_INDICES + r * CHUNK_OCTETS).cast()),
                )
            };
            let positions = _mm512_multishift_epi64_epi8(shifts, _mm512_cvtepu16_epi64(packed));
            // (positions & 3) | bases: each kept value's K position inside the chunk.
            (wv, _mm512_ternarylogic_epi32::<0xEA>(positions, three, bases))
        });
        for (t, &xt) in x.iter().enumerate() {
            // SAFETY: chunk c < chunks of the token row (caller).
            let (lo, hi) = unsafe {
                let at = xt.add(CHUNK * c);
                (
                    _mm512_loadu_si512(at.cast()),
                    _mm512_loadu_si512(at.add(64).cast()),
                )
            };
            for (acc_row, &(wv, ctl)) in acc.iter_mut().zip(&rows) {
                acc_row[t] = _mm512_dpbusd_epi32(acc_row[t], _mm512_permutex2var_epi8(lo, ctl, hi), wv);
            }
        }
    }
    acc.map(|row| row.map(|a| _mm512_reduce_add_epi32(a)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_20_compact_stores_two_ascending_positions_per_group_and_pads_the_tail() {
        // K = 10: groups [0..4), [4..8), [8..10) + an all-padding fourth group.
        let w: [i8; 10] = [0, 5, 0, -3, 7, 0, 0, 0, 0, -128];
        let a = TwoOfFourI8::compress(&w, 1, 10).unwrap();
        // One chunk, one block of RB rows (row 0 real, the rest padding).
        assert_eq!(a.chunks, 1);
        assert_eq!(a.values.len(), RB * 64);
        assert_eq!(&a.values[..8], &[5, -3, 7, 0, 0, -128, 0, 0]);
        assert!(a.values[8..].iter().all(|&v| v == 0));
        // Octet 0: group 0 keeps 1, 3; group 1 keeps 0 and pads 1.
        assert_eq!(a.idx[0], 0b01_00_11_01);
        // Octet 1: group 2 keeps 1 and pads 0; group 3 pads 0, 1.
        assert_eq!(a.idx[1], 0b01_00_01_00);
        assert!(a.idx[2..].iter().all(|&b| b == EMPTY_OCTET));
        assert_eq!(a.bias, vec![-128 * (5 - 3 + 7 - 128)]);
        assert_eq!(a.metadata_bytes(), RB * 16 + 4);
        // Row 9 of 10 is row 1 of block 1: its first octet after block 0's chunk.
        let mut w = vec![0i8; 10 * 130];
        w[9 * 130 + 129] = 3;
        let a = TwoOfFourI8::compress(&w, 10, 130).unwrap();
        assert_eq!(a.chunks, 2);
        // Block 1 starts after block 0's two chunks; row 1 of its chunk 1 is 64·RB + 64 in,
        // and position 129 is slot 1 of that chunk's first octet (group 32 keeps 0 and 1).
        let block1 = 2 * RB * 64;
        assert_eq!(a.values[block1 + RB * 64 + 64..][..2], [0, 3]);
        let overfull = TwoOfFourI8::compress(&[1, 1, 1, 0], 1, 4).unwrap_err();
        assert!(matches!(
            overfull,
            KernelError::Overfull {
                group: 0,
                nonzeros: 3,
                ..
            }
        ));
    }

    #[test]
    fn issue_20_rows_in_lanes_take_any_token_count_in_groups_of_twelve() {
        if !available() {
            return;
        }
        // 37 rows (a partial panel), K = 300 (a partial octet), 29 tokens: groups of 10, 10, 9.
        let (rows, k, m) = (37, 300, 29);
        let mut seed = 0x2545_f491_u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        // Two kept positions per group of four, the values spanning i8.
        let mut w = vec![0i8; rows * k];
        for (g, group) in w.chunks_mut(4).enumerate() {
            let (a, b) = ((g * 7) % 4, (g * 7 + 1 + g % 3) % 4);
            group[a.min(group.len() - 1)] = next() as i8;
            group[b.min(group.len() - 1)] = next() as i8;
        }
        let x: Vec<i8> = (0..k * m).map(|_| next() as i8).collect();
        let a = TwoOfFourI8::compress(&w, rows, k).unwrap();
        for threads in [1, 2] {
            let mut y = vec![7i32; rows * m];
            let mut scratch = Vec::new();
            // SAFETY: the features were detected; the shapes match.
            unsafe {
                a.row_lanes()
                    .spmm(threads, &x, &mut y, m, &mut scratch, Epilogue::Sums)
            };
            for r in 0..rows {
                for t in 0..m {
                    let want: i32 = (0..k)
                        .map(|kk| i32::from(w[r * k + kk]) * i32::from(x[kk * m + t]))
                        .sum();
                    assert_eq!(y[r * m + t], want, "row {r} token {t} on {threads} threads");
                }
            }
        }
    }

    #[test]
    fn issue_20_controls_gather_each_tokens_kept_bytes() {
        // Index byte: group 0 keeps 0, 2; group 1 keeps 1, 3.
        let byte = 0b11_01_10_00usize;
        let line = &CONTROLS.0[byte];
        for token in 0..16 {
            assert_eq!(
                &line[4 * token..4 * token + 4],
                &[8 * token, 8 * token + 2, 8 * token + 5, 8 * token + 7].map(|v| v as u8)
            );
        }
    }

    #[test]
    fn issue_20_decoded_positions_match_the_index_bytes() {
        if !available() {
            return;
        }
        // 16 index bytes with every position pattern; decode and compare with scalar.
        let idx: [u8; 16] = std::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ 0x5a);
        let want: Vec<u8> = (0..64)
            .map(|e| GROUP_BASES.0[e] + ((idx[e / 4] >> (2 * (e % 4))) & 3))
            .collect();
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
        fn decode(idx: &[u8; 16]) -> [u8; 64] {
            // SAFETY: 16 readable bytes; 64 aligned table bytes; 64 writable bytes.
            unsafe {
                let packed = _mm_loadu_si128(idx.as_ptr().cast());
                let p = _mm512_multishift_epi64_epi8(
                    _mm512_set1_epi64(INDEX_SHIFTS),
                    _mm512_cvtepu16_epi64(packed),
                );
                let bases = _mm512_load_si512(GROUP_BASES.0.as_ptr().cast());
                let v = _mm512_ternarylogic_epi32::<0xEA>(p, _mm512_set1_epi8(3), bases);
                let mut out = [0u8; 64];
                _mm512_storeu_si512(out.as_mut_ptr().cast(), v);
                out
            }
        }
        // SAFETY: the features were detected.
        let got = unsafe { decode(&idx) };
        assert_eq!(got.to_vec(), want);
    }
}
