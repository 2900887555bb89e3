//! int8 2:4 as the dense comparator's own lines, rebuilt in registers: per 16-row block and
//! K-quad the 32 kept bytes (`w + 128`) and a 64-bit mask of their lanes, one `vpexpandb`
//! (VBMI2) per line filling the dropped weights with `0x80` (a zero weight, shifted), then
//! the dense kernel's tiles unchanged: its feature lanes at one token
//! (`int8_dense::feature_lanes`), its token-lane tile on staged K blocks from 49 tokens.
//!
//! Why: without AMX the compact kernels select activations per (row, octet) — `vpermt2b` or
//! `vpshufb` beside every `vpdpbusd` — and on a Xeon with the tiles withheld ran 2:4 at
//! 0.63–0.79× dense int8 from 16 tokens. Expanding the weights instead costs one shuffle per
//! line, shared by every token of a tile, and streams 40 bytes where dense streams 64, the
//! 0.625 bytes a weight of the compact form.
//!
//! Layout ([`ExpandedLines`]): per block, groups of eight quads of 320 bytes (five cache
//! lines): eight times 32 values in lane order (rows ascending, each row's two kept
//! positions ascending), then the eight lines' masks (bit `4r + p`: row `r` keeps position
//! `p`). Every row keeps exactly two positions, a group with fewer non-zeros padding with its
//! lowest free positions (value `0x80`), so each line's 32 values start at a fixed offset.
//! K is padded to whole groups (all-zero lines), N to whole blocks (padding rows are zero
//! weights, never stored). The `+128` shift is undone per token, as for dense.

use super::int8_dense::{
    Line, Lines, MR, TOKENS, pack_token_panels, prefetch_tile_output, tile_scales, token_masks, token_tile,
};
use super::precision::Epilogue;
use super::schedule::TaskGrid;
use super::scratch::line_aligned;
use super::shared_output::SharedOutput;
use rayon::prelude::*;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Rows per block: the i32 lanes of a zmm, as in `int8_dense`.
const LANES: usize = 16;
/// Quads per stored group.
const GROUP_QUADS: usize = 8;
/// Groups ahead the tile prefetches each block's stream (five lines a group).
const PREFETCH_GROUPS: usize = 2;
/// Most blocks of a token-lane task, all expanded together for one K block: 192 rows, as
/// dense's `MAX_CHUNK_TILES` (32 tiles of [`MR`]), so the task walks its token panels over
/// staged lines as dense walks them over its weights. Stages of 48 rows, each walking every
/// panel, re-read the whole activation per stage: on Emerald Rapids (2 threads, × int8
/// dense, two alternated rounds) 2:4 at 2048³ went 0.87–0.92 → 0.96–0.99, 128 × 4096²
/// 0.86–0.90 → 0.90–0.91, level at 512 tokens and on the FFN shapes.
const STAGE_BLOCKS: usize = 12;
/// K-quads per K block of the token-lane kernel, dense's `KC`: the staged lines
/// (`STAGE_BLOCKS · KC` lines, 768 KiB) stay in L2 while every token panel of the task
/// passes over them.
const KC: usize = 1024;

thread_local! {
    /// The token-lane kernel's expanded lines, reused across calls on the same thread.
    static STAGE: RefCell<Vec<Line>> = const { RefCell::new(Vec::new()) };
}

/// Eight lines of one block: their kept values, then their masks.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
struct Group {
    values: [[u8; 32]; GROUP_QUADS],
    masks: [u64; GROUP_QUADS],
}

/// A line that keeps positions 0 and 1 of every row, all zero weights.
const EMPTY: Group = Group {
    values: [[0x80; 32]; GROUP_QUADS],
    masks: [0x3333_3333_3333_3333; GROUP_QUADS],
};

/// Whether this CPU runs the expansion: the VNNI kernels' features and VBMI2 (`vpexpandb`).
pub(super) fn available() -> bool {
    super::int8_dense::available() && crate::cpu::has!("avx512vbmi2")
}

/// Whether int8 2:4 runs on expanded lines here (at one token and from 49; the rows-in-lanes
/// kernel, in groups of 12, stays ahead between): on Intel parts with VBMI2. There
/// `vpermt2b` and `vpshufb` issue on port 5 only, one of the two ports of `vpdpbusd`, so the
/// compact kernels' selection per `vpdpbusd` halves their rate: on Emerald Rapids with AMX
/// withheld (2 threads, × int8 dense, 4096²) the compact kernels ran 1.37–1.44 at one token
/// and 0.49–0.66 at 16–512, the expanded lines 1.47–1.61 and 0.84–1.05 at 64–512 (at 16–48
/// their feature lanes ran 0.83–0.92, and the rows-in-lanes groups level to 0.1 ahead). On Zen 4/5 the compact kernels were measured
/// at 1.03–1.2 at 128–512 tokens and the expansion has not been, so other vendors keep them.
pub(super) fn pays() -> bool {
    available() && crate::cpu::intel()
}

/// 2:4 int8 weights as masked dense lines (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ExpandedLines {
    rows: usize,
    /// Quads per block, padded to whole groups.
    quads: usize,
    /// `[block][group]`.
    groups: Vec<Group>,
}

impl ExpandedLines {
    /// Lay out `rows × k` weights given, per row and octet (two groups of four), as their
    /// four kept values and index byte in the compact form's encoding (`int8_two_of_four`:
    /// bits `2e..2e+2` hold kept value `e`'s position in its group).
    pub(super) fn new(
        (rows, k): (usize, usize),
        octet: impl Fn(usize, usize) -> ([i8; 4], u8),
    ) -> ExpandedLines {
        let quads = k.div_ceil(4).next_multiple_of(GROUP_QUADS).max(GROUP_QUADS);
        let per_block = quads / GROUP_QUADS;
        let blocks = rows.div_ceil(LANES);
        let mut groups = vec![EMPTY; blocks * per_block];
        for row in 0..rows {
            let (block, lane) = (row / LANES, row % LANES);
            for o in 0..k.div_ceil(8) {
                let (values, byte) = octet(row, o);
                for half in 0..2 {
                    let q = 2 * o + half;
                    let g = &mut groups[block * per_block + q / GROUP_QUADS];
                    let slot = q % GROUP_QUADS;
                    let positions = [(byte >> (4 * half)) & 3, (byte >> (4 * half + 2)) & 3];
                    let mut mask = 0u64;
                    for p in positions {
                        mask |= 1 << (4 * lane + usize::from(p));
                    }
                    g.masks[slot] = g.masks[slot] & !(0xF << (4 * lane)) | mask;
                    // The compact form keeps distinct ascending positions, so the kept values
                    // fill the row's two bytes in lane order.
                    for (e, &v) in values[2 * half..2 * half + 2].iter().enumerate() {
                        g.values[slot][2 * lane + e] = (v as u8) ^ 0x80;
                    }
                }
            }
        }
        ExpandedLines { rows, quads, groups }
    }

    /// Bytes held (padding included).
    pub(super) fn bytes(&self) -> usize {
        std::mem::size_of_val(self.groups.as_slice())
    }

    /// `y[rows × m] = W · x[k × m]` with 16 tokens of one row per zmm: per task (up to
    /// [`STAGE_BLOCKS`] blocks) and K block, the lines are expanded once into a thread-local
    /// stage and every token panel of the task runs the dense token-lane tile on them, so
    /// one expansion serves `m` `vpdpbusd` (per line, at one token a tile it served eight).
    ///
    /// # Safety
    /// [`available`] returned true; `x.len() == k·m` for a `k ≤ 4 · quads`,
    /// `y.len() == rows·m`, `m ≥ 1`, `k ≤ INT8_MAX_K`.
    pub(super) unsafe fn token_lanes(
        &self,
        threads: usize,
        x: &[i8],
        y: &mut [i32],
        m: usize,
        scratch: &mut Vec<u8>,
        epilogue: Epilogue<'_>,
    ) {
        let (n, quads) = (self.rows, self.quads);
        let panels = m.div_ceil(TOKENS);
        let panel_bytes = quads * TOKENS * 4;
        let xp = line_aligned(scratch, panels * panel_bytes);
        let corrections = pack_token_panels(threads, (x, x.len() / m, m), quads, xp);
        let (xp, corrections) = (&*xp, &corrections[..]);
        let blocks = n.div_ceil(LANES);
        let grid = TaskGrid::new(blocks, panels, threads, STAGE_BLOCKS);
        let out = SharedOutput(y.as_mut_ptr());
        let task = |t: usize| {
            let (block_range, panel_range) = grid.task(t);
            let mut stage = STAGE.with(|s| std::mem::take(&mut *s.borrow_mut()));
            // A K block's lines per staged block: `KC`, or all of a shorter K.
            let kc = KC.min(quads);
            stage.resize(block_range.len() * kc, Line([0; 64]));
            let row_base = block_range.start * LANES;
            let stage_rows = (n - row_base).min(block_range.len() * LANES);
            for q0 in (0..quads).step_by(kc) {
                let q1 = (q0 + kc).min(quads);
                for (j, b) in block_range.clone().enumerate() {
                    let lines = &mut stage[j * kc..j * kc + (q1 - q0)];
                    // SAFETY: the features were detected (caller); block b exists and holds
                    // quads q0..q1 (q0 a multiple of 8).
                    unsafe { expand_lines(self.block_at(b).cast(), q0, lines) };
                }
                for p in panel_range.clone() {
                    let masks = token_masks(m, p);
                    let panel = &xp[p * panel_bytes + q0 * TOKENS * 4..p * panel_bytes + q1 * TOKENS * 4];
                    let corr = &corrections[p * TOKENS..(p + 1) * TOKENS];
                    for row0 in (0..stage_rows).step_by(MR) {
                        let rows = (stage_rows - row0).min(MR);
                        // Row r's quad q is the i32 at lane (r % 16) of its block's line q;
                        // rows past `rows` repeat the last (computed, never stored).
                        let w_rows: [*const u8; MR] = std::array::from_fn(|r| {
                            let r = row0 + r.min(rows - 1);
                            stage[(r / LANES) * kc..]
                                .as_ptr()
                                .cast::<u8>()
                                .wrapping_add((r % LANES) * 4)
                        });
                        let ends = (q1 == quads)
                            .then(|| tile_scales(epilogue, row_base + row0))
                            .flatten();
                        let at = out.at((row_base + row0) * m + p * TOKENS);
                        prefetch_tile_output(at, m, rows);
                        // SAFETY: the tile (rows row_base + row0.., tokens p·64..) is inside
                        // `y` where `rows` and the masks say so, and only this task writes
                        // it; each staged block holds lines q0..q1; features detected.
                        unsafe {
                            token_tile(
                                w_rows,
                                panel,
                                (at, m),
                                rows,
                                masks,
                                ((q0 == 0).then_some(corr), ends),
                            );
                        }
                    }
                }
            }
            STAGE.with(|s| *s.borrow_mut() = stage);
        };
        if threads > 1 {
            (0..grid.tasks()).into_par_iter().for_each(task);
        } else {
            (0..grid.tasks()).for_each(task);
        }
    }
}

impl Lines for ExpandedLines {
    fn rows(&self) -> usize {
        self.rows
    }

    fn quads(&self) -> usize {
        self.quads
    }

    fn block_at(&self, b: usize) -> *const u8 {
        self.groups[b * (self.quads / GROUP_QUADS)..].as_ptr().cast()
    }

    unsafe fn tile<const R: usize, const T: usize>(
        w: [*const u8; R],
        x: [*const u8; T],
        quads: usize,
    ) -> [[__m512i; T]; R] {
        // SAFETY: the caller's contract; expanded lines exist only where `available` held.
        unsafe { expand_tile::<R, T>(w.map(|p| p.cast()), x, quads) }
    }
}

/// One `R`-block × `T`-token feature-lane tile over all quads: per quad, each block's line
/// expanded from its 32 kept bytes meets each token's quad (broadcast); returns the sums
/// without the tokens' corrections.
///
/// # Safety
/// AVX-512F/BW/VNNI/VBMI2 are available; each block pointer has `quads / 8` groups, each
/// token pointer `4 · quads` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi2")]
unsafe fn expand_tile<const R: usize, const T: usize>(
    w: [*const Group; R],
    x: [*const u8; T],
    quads: usize,
) -> [[__m512i; T]; R] {
    let fill = _mm512_set1_epi8(0x80u8 as i8);
    let mut acc = [[_mm512_setzero_si512(); T]; R];
    for g in 0..quads / GROUP_QUADS {
        for q in 0..GROUP_QUADS {
            // SAFETY: group g < quads / 8 of each block (caller); the prefetch may point past
            // the end, which a prefetch does not fault on.
            let wv: [__m512i; R] = std::array::from_fn(|r| unsafe {
                let group = w[r].add(g);
                if q < 5 {
                    let ahead = group.wrapping_add(PREFETCH_GROUPS).cast::<u8>();
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * q).cast());
                }
                let values = _mm256_load_si256((*group).values[q].as_ptr().cast());
                _mm512_mask_expand_epi8(fill, (*group).masks[q], _mm512_castsi256_si512(values))
            });
            let quad = g * GROUP_QUADS + q;
            for (t, &xt) in x.iter().enumerate() {
                // SAFETY: quad `quad` of each token is inside its row (caller).
                let xv = _mm512_set1_epi32(unsafe { xt.add(4 * quad).cast::<i32>().read_unaligned() });
                for (acc_block, &wb) in acc.iter_mut().zip(&wv) {
                    acc_block[t] = _mm512_dpbusd_epi32(acc_block[t], wb, xv);
                }
            }
        }
    }
    acc
}

/// Expand the block stream at `block`'s quads `q0 ..` (as many as `out` holds) into whole
/// lines.
///
/// # Safety
/// AVX-512F/BW/VBMI2 are available; `q0` is a multiple of 8 and the block holds quads
/// `q0 .. q0 + out.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi2")]
unsafe fn expand_lines(block: *const Group, q0: usize, out: &mut [Line]) {
    let fill = _mm512_set1_epi8(0x80u8 as i8);
    for (i, line) in out.iter_mut().enumerate() {
        let q = q0 + i;
        // SAFETY: quad q is inside the block (caller); `line` is 64 aligned writable bytes.
        unsafe {
            let group = block.add(q / GROUP_QUADS);
            let values = _mm256_load_si256((*group).values[q % GROUP_QUADS].as_ptr().cast());
            let v = _mm512_mask_expand_epi8(
                fill,
                (*group).masks[q % GROUP_QUADS],
                _mm512_castsi256_si512(values),
            );
            _mm512_store_si512(line.0.as_mut_ptr().cast(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_20_expanded_lines_hold_each_rows_kept_bytes_in_lane_order() {
        // Row 0 keeps positions 1, 3 of group 0 and 0, 2 of group 1; row 17 (block 1, lane 1)
        // keeps 2, 3 of group 2.
        let octet = |r: usize, o: usize| match (r, o) {
            (0, 0) => ([5, -3, 7, 9], 0b10_00_11_01),
            (17, 1) => ([-1, 4, 0, 0], 0b01_00_11_10),
            _ => ([0; 4], 0b01_00_01_00),
        };
        let a = ExpandedLines::new((18, 12), octet);
        assert_eq!(a.quads, GROUP_QUADS);
        assert_eq!(a.groups.len(), 2);
        let g = &a.groups[0];
        assert_eq!(g.masks[0] & 0xF, 0b1010);
        assert_eq!(g.masks[1] & 0xF, 0b0101);
        assert_eq!(&g.values[0][..2], &[5u8 ^ 0x80, (-3i8 as u8) ^ 0x80]);
        assert_eq!(&g.values[1][..2], &[7u8 ^ 0x80, 9u8 ^ 0x80]);
        // Row 1 of block 0 is all zeros: positions 0, 1, values 0x80.
        assert_eq!((g.masks[0] >> 4) & 0xF, 0b0011);
        assert_eq!(&g.values[0][2..4], &[0x80, 0x80]);
        let g1 = &a.groups[1];
        assert_eq!((g1.masks[2] >> 4) & 0xF, 0b1100);
        assert_eq!(&g1.values[2][2..4], &[(-1i8 as u8) ^ 0x80, 4u8 ^ 0x80]);
        // Padding quads past K (quad 3 on) keep the empty pattern.
        assert_eq!(g.masks[3], EMPTY.masks[0]);
        assert_eq!(a.bytes(), 2 * 320);
    }
}
