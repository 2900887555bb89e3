//! The AVX-512 N:M kernel vectorised along tokens, with the weights re-blocked by K block:
//! the faster of the two 2:4 kernels once a product has a few dozen tokens, and the kernel of
//! every other pattern with groups of up to 64 (1:2, 4:8, …) from the same token count.
//!
//! The loop is the one the design notes describe (broadcast each kept weight, FMA it against
//! the contiguous activation row its 2-bit index names, no gathers): one activation load per
//! FMA. On this Zen 5 a 64-byte *aligned* L1 load per FMA runs at the rate of FMAs alone
//! (`examples/port_mix.rs`), so the loop can come close to the FMA peak on half the FMAs of
//! dense, provided every load hits L1 and nothing else intrudes. What kept the first version
//! (`two_of_four.rs`) at 0.7–0.85× dense was all in the second half of that sentence:
//!
//! * **The activation tile spanned a page per row.** A K block of a row-major activation
//!   matrix touches one 4 KiB page per K row, so a 64-row tile needed 64 TLB entries beside
//!   the weights' own. Here each task packs the K block × strip tile it is about to use
//!   ([`TileX`]: `W` = up to 128 tokens, zero-padded to a vector) into 32 KiB of consecutive,
//!   line-aligned memory. (A panel-major copy of all of `x` up front did the same at the
//!   cost of one more pass over memory: 4–8% of a large product.)
//! * **The weights of one K block were a row apart.** Row-major kept values put the 32 values
//!   a row needs for one K block 4–20 KiB away from the next row's, a strided stream of short
//!   runs across pages. [`TokenLayout`] stores them `[K block][row][32 values]` (and the 8
//!   index bytes likewise), so a pass over the rows for one K block reads one contiguous run.
//! * **Outputs aliased in L1.** Output rows a power of two apart map to the same L1 sets; the
//!   strip being accumulated now lives in a contiguous per-task scratch buffer (L2), and a
//!   strip's last K block writes its sums straight to `y` (3–7% faster than copying the
//!   scratch afterwards).
//!
//! Loop nest per task (a contiguous block of output rows, one per thread): strips of `W`
//! tokens → K blocks of [`K_BLOCK`] → row pairs (2 rows × `W/16` zmm accumulators, 16
//! independent FMA chains at `W` = 128) → the index bytes of the block, decoded inline (a
//! shift and a mask per kept weight on the integer ports).
//!
//! For 2:4 the execution copy holds the same values and the same 2-bit indices as the stored
//! form, only reordered (rows padded to even, K to a multiple of 8). Other patterns store one
//! byte per kept weight, its row in the K block, instead of their 1–8-bit in-group index:
//! a plain load where the stored form would need a variable shift per weight. Either way the
//! metadata counters keep reporting the stored format and [`TokenLayout::resident_bytes`]
//! reports the copy.

use crate::shared_output::for_each_chunk;
use crate::sparse_rows::{
    AlignedFloats, Lines, MAX_STRIP, TileX, lane_kernel_prologue, prefetch, strip_plan,
};

/// f32 per zmm register.
const LANES: usize = 16;
/// K positions per block: 8 index bytes, 32 kept values a row for 2:4; × 128 tokens = a
/// 32 KiB activation tile, most of a 48 KiB L1d. Other patterns take the largest multiple of
/// their group size that fits.
const K_BLOCK: usize = 64;
/// Index bytes a row of a full 2:4 K block holds (two groups of 4 per byte).
const FULL_BLOCK_BYTES: usize = K_BLOCK / 8;
/// Output rows per register tile.
const ROWS: usize = 2;
/// Row pairs ahead whose next weights are prefetched: the K-block-major layout makes them the
/// next bytes of one stream, but the prefetchers need a head start once it comes from L3.
const PREFETCH_PAIRS_AHEAD: usize = 12;

/// How many of every four kept weights a strip of `v` vectors spreads by shuffles rather
/// than one broadcast load each (see `four_weights`), on a CPU where shuffles run beside the
/// FMAs (`shuffles_apart`): there they free the load ports for the activations, but cost
/// more than they save outside a middle range. Measured side by side on Zen 4/5
/// (`sparsegate bench`, 2 threads, against the broadcast loads):
///
/// * all four at 2–5 vectors: 2:4 15–17% faster at 32 tokens (4096² 1.36–1.38× → 1.55–1.59×
///   dense, 3072×768 1.04–1.07× → 1.23×, 768×3072 1.15–1.16× → 1.30–1.33×), 7–10% at 64
///   tokens, 5–8% at 48, level at 80; 4:8 and 1:2 4–7% faster at 64 tokens;
/// * every other one at 6–7 vectors: 2–6% faster at 96 tokens (2:4 and 4:8), level to ±3%
///   at 112, where spreading all four was 3–10% slower;
/// * none at one vector (2:4 at 16 tokens on 4096²: 1.49–1.51× dense → 1.22×) nor at 8 (the
///   LLaMA FFN shapes, whose weights stream from memory, lose 3–5% with half spread and
///   7–10% with all; 2048³ is level).
///
/// On Intel's AVX-512 cores a 512-bit shuffle issues on port 5, one of the two FMA ports, so
/// each one takes an FMA's slot: on Emerald Rapids (1 thread, 1024², kernel time, four
/// alternated rounds) broadcasting every weight was 4–5% faster at 32, 48 and 96 tokens,
/// 3% at 80 and 112, level at 64. There `shuffles_apart` is false and nothing is spread.
const fn spread_weights(v: usize, shuffles_apart: bool) -> usize {
    match v {
        _ if !shuffles_apart => 0,
        2..=5 => 4,
        6..=7 => 2,
        _ => 0,
    }
}

/// Copies of the register tile's sums a strip of `v` vectors keeps, so that the tile has
/// at least 8 independent FMA chains (two pipes × four cycles of latency): 4 at one vector,
/// 2 at two or three, 1 from four (`Chains`).
const fn chain_sets(v: usize) -> usize {
    let sets = 8usize.div_ceil(ROWS * v);
    if sets > MAX_CHAIN_SETS {
        MAX_CHAIN_SETS
    } else {
        sets
    }
}

/// The most copies [`chain_sets`] asks for.
const MAX_CHAIN_SETS: usize = 4;

/// How a layout names the activation row of each kept weight inside its K block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meta {
    /// 2:4's stored index bytes, unchanged: 2 bits per kept weight, two groups per byte,
    /// decoded inline.
    TwoBit,
    /// One byte per kept weight, its row in the K block (< 64): any other N:M pattern, whose
    /// stored indices would cost a variable-width decode per weight.
    Rows,
}

/// An N:M matrix rearranged for the token-lane kernel (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct TokenLayout {
    rows: usize,
    k: usize,
    /// Rows rounded up to [`ROWS`]; the padding rows have zero weights.
    rows_padded: usize,
    /// K rows the kernel reads: K rounded up to a whole index byte for 2:4 (the rows past K are
    /// zero in every packed tile).
    k_padded: usize,
    /// K rows, kept values a row and metadata bytes a row of a full block (all blocks are
    /// full but the last, which has as many of each per K row).
    k_block: usize,
    kept_block: usize,
    meta_block: usize,
    meta: Meta,
    /// `[block][row][kept values in block]`, zero for padding.
    values: AlignedFloats,
    /// `[block][row][metadata bytes in block]`.
    idx: Vec<u8>,
}

impl TokenLayout {
    /// Whether the kernel takes an `n:m` pattern: a K block must hold a whole group.
    pub(crate) fn supports(m: usize) -> bool {
        (2..=K_BLOCK).contains(&m)
    }

    /// Rearrange a compressed N:M matrix: row-major kept `values` (`n` per group) and packed
    /// in-group `indices` (`row_bytes` per row, `bits` each, the layout of `indices.rs`).
    /// 2:4 keeps its index bytes as they are; other patterns get one row byte per weight.
    pub(crate) fn new(
        (rows, k): (usize, usize),
        (n, m): (usize, usize),
        values: &[f32],
        (indices, row_bytes, bits): (&[u8], usize, usize),
    ) -> TokenLayout {
        assert!(
            Self::supports(m) && n < m && k.is_multiple_of(m),
            "unsupported {n}:{m}"
        );
        let rows_padded = rows.div_ceil(ROWS) * ROWS;
        let kept_row = k / m * n;
        let two_bit = (n, m) == (2, 4);
        let (k_padded, k_block) = if two_bit {
            (k.div_ceil(8) * 8, K_BLOCK)
        } else {
            (k, K_BLOCK / m * m)
        };
        let kept_block = k_block / m * n;
        let meta_block = if two_bit { k_block / 8 } else { kept_block };
        let mut l = TokenLayout {
            rows,
            k,
            rows_padded,
            k_padded,
            k_block,
            kept_block,
            meta_block,
            meta: if two_bit { Meta::TwoBit } else { Meta::Rows },
            values: AlignedFloats::zeroed(rows_padded * k_padded / m * n),
            // Exact: the blocks' metadata bytes a row add up to `meta_block · k_padded / k_block`.
            idx: vec![0; rows_padded * (meta_block * k_padded / k_block)],
        };
        let row_idx = |row: usize| &indices[row * row_bytes..(row + 1) * row_bytes];
        for row in 0..rows {
            for e in 0..kept_row {
                let group = e / n;
                let block = group * m / k_block;
                let (_, kept_b, meta_b) = l.block_shape(block);
                let local = e - block * kept_block;
                l.values[block * rows_padded * kept_block + row * kept_b + local] =
                    values[row * kept_row + e];
                let at = block * rows_padded * meta_block + row * meta_b;
                match l.meta {
                    // Four entries per byte: copy each stored byte once.
                    Meta::TwoBit if local.is_multiple_of(4) => l.idx[at + local / 4] = row_idx(row)[e / 4],
                    Meta::TwoBit => {}
                    Meta::Rows => {
                        let k_row = group * m + super::indices::get(row_idx(row), e, bits);
                        l.idx[at + local] = (k_row - block * k_block) as u8;
                    }
                }
            }
        }
        l
    }

    /// Bytes of the execution-time copy (values and metadata bytes, padding included).
    pub(crate) fn resident_bytes(&self) -> usize {
        self.values.len() * 4 + self.idx.len()
    }

    fn blocks(&self) -> usize {
        self.k_padded.div_ceil(self.k_block)
    }

    /// `(K rows, kept values a row, metadata bytes a row)` of block `b`.
    fn block_shape(&self, b: usize) -> (usize, usize, usize) {
        let rows = self.k_block.min(self.k_padded - b * self.k_block);
        (
            rows,
            self.kept_block * rows / self.k_block,
            self.meta_block * rows / self.k_block,
        )
    }
}

/// `y[rows × cols] = W · x`, where row `r` of `x` starts at `x[r · xs]` (`xs ≥ cols`).
///
/// Panics unless AVX-512F was detected (the caller dispatches on `Isa::Avx512`) or the
/// buffers are shorter than the shapes (`lane_kernel_prologue`).
pub(crate) fn spmm(l: &TokenLayout, threads: usize, x: (&[f32], usize), y: &mut [f32], cols: usize) {
    spmm_spreading(l, threads, x, y, cols, crate::cpu::shuffles_beside_fmas());
}

/// [`spmm`], spreading weights by shuffles where [`spread_weights`] says so for a CPU whose
/// shuffles run beside its FMAs (`shuffles_apart`) or not: the tests run both on any CPU.
pub(super) fn spmm_spreading(
    l: &TokenLayout,
    threads: usize,
    (x, xs): (&[f32], usize),
    y: &mut [f32],
    cols: usize,
    shuffles_apart: bool,
) {
    if !lane_kernel_prologue("token-lane kernel", (l.rows, l.k), (x, xs), y, cols) {
        return;
    }
    // Strips of 128 tokens (8 accumulators a row), the last one the rest rounded up to a
    // vector: rounding it to 64 tokens instead left 96 tokens at 1.22× dense and 80 at 1.10×
    // on 4096² (1.56× and 1.73× now), the padding costing as much as real tokens.
    let strips = strip_plan(cols, (MAX_STRIP, LANES));
    let per_task = l.rows_padded.div_ceil(threads.max(1)).div_ceil(ROWS) * ROWS;
    let task = |(t, y_rows): (usize, &mut [f32])| {
        rows_task(
            l,
            (t * per_task, per_task),
            (x, xs),
            &strips,
            (y_rows, cols),
            shuffles_apart,
        )
    };
    for_each_chunk(y, per_task * cols, threads > 1, task);
}

/// One task: layout rows `row0 .. row0 + per_task` (padding included), of which the real ones
/// are `y_rows` (`rows × cols`), over every strip of tokens and K block of `x`.
fn rows_task(
    l: &TokenLayout,
    (row0, per_task): (usize, usize),
    x: (&[f32], usize),
    strips: &[(usize, usize)],
    (y_rows, cols): (&mut [f32], usize),
    shuffles_apart: bool,
) {
    let real = y_rows.len() / cols;
    let tile_rows = per_task.min(l.rows_padded - row0);
    let mut scratch = Lines::zeroed(tile_rows * MAX_STRIP / LANES);
    let out: *mut f32 = scratch.floats_mut().as_mut_ptr();
    let mut packed = TileX::new(l.k_block, MAX_STRIP);
    // Every write to `y` goes through this one pointer (rows `< real`, `cols` floats each).
    let y = y_rows.as_mut_ptr();
    for &(c0, width) in strips {
        let valid = width.min(cols - c0);
        for block in 0..l.blocks() {
            // A full strip's last K block goes straight to `y`: no scratch round trip.
            let direct = block + 1 == l.blocks() && valid == width;
            let (k_rows, kept, meta) = l.block_shape(block);
            let values = &l.values[block * l.rows_padded * l.kept_block..];
            let idx = &l.idx[block * l.rows_padded * l.meta_block..];
            let tile = packed.fill(x, (block * l.k_block, k_rows, l.k), (c0, width, cols));
            let pass = BlockPass {
                values,
                idx,
                kept,
                meta,
                row0,
                tile_rows,
                rows_padded: l.rows_padded,
                accumulate: block > 0,
                tile: tile.as_ptr(),
                width,
                scratch: out,
                direct: direct.then_some((y.wrapping_add(c0), cols, real)),
            };
            // SAFETY: AVX-512F was checked by `spmm`; the fields hold the block's weights of
            // every row of the task, its tile (`width` floats a K row, each index inside the
            // block), the task's scratch (`tile_rows × width`) and, with `direct`, `y` from
            // column `c0` (`real` rows of `cols ≥ c0 + width`), as `BlockPass` requires.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                match (l.meta, shuffles_apart) {
                    (Meta::TwoBit, true) => block_pass_for_width::<true, true>(&pass),
                    (Meta::TwoBit, false) => block_pass_for_width::<true, false>(&pass),
                    (Meta::Rows, true) => block_pass_for_width::<false, true>(&pass),
                    (Meta::Rows, false) => block_pass_for_width::<false, false>(&pass),
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = pass;
        }
        if valid < width {
            for r in 0..real {
                // SAFETY: scratch row `r < tile_rows` holds `width > valid` floats; `y` row
                // `r < real` holds `cols ≥ c0 + valid`; the scratch is not `y`.
                unsafe { std::ptr::copy_nonoverlapping(out.add(r * width), y.add(r * cols + c0), valid) };
            }
        }
    }
}

/// [`avx512::block_pass`] compiled for the strip's width (`V` = 1–8 vectors of tokens) and
/// for a CPU whose shuffles run beside its FMAs (`SHUFFLES_APART`, [`spread_weights`]) or not.
///
/// # Safety
/// As [`avx512::block_pass`]; `pass.width` is a multiple of 16 up to [`MAX_STRIP`].
#[cfg(target_arch = "x86_64")]
unsafe fn block_pass_for_width<const TWO_BIT: bool, const SHUFFLES_APART: bool>(pass: &BlockPass<'_>) {
    // SAFETY: the caller's contract.
    unsafe {
        match pass.width / LANES {
            1 => avx512::block_pass::<1, TWO_BIT, SHUFFLES_APART>(pass),
            2 => avx512::block_pass::<2, TWO_BIT, SHUFFLES_APART>(pass),
            3 => avx512::block_pass::<3, TWO_BIT, SHUFFLES_APART>(pass),
            4 => avx512::block_pass::<4, TWO_BIT, SHUFFLES_APART>(pass),
            5 => avx512::block_pass::<5, TWO_BIT, SHUFFLES_APART>(pass),
            6 => avx512::block_pass::<6, TWO_BIT, SHUFFLES_APART>(pass),
            7 => avx512::block_pass::<7, TWO_BIT, SHUFFLES_APART>(pass),
            _ => avx512::block_pass::<8, TWO_BIT, SHUFFLES_APART>(pass),
        }
    }
}

/// One K block of one strip for every row pair of a task: what [`avx512::block_pass`] reads.
///
/// Invariants the constructor in `rows_task` upholds: `values`/`idx` start at the block's
/// first row and hold `kept`/`meta` per row for rows `row0 .. row0 + tile_rows`; `tile` is
/// 64-byte aligned with the block's K rows of `width` floats, every index naming one of them;
/// `scratch` is 64-byte aligned with `tile_rows × width` floats; `direct`, when set, is `y`
/// from the strip's first column, its row stride, and the task's real rows, each writable
/// for `width` floats.
struct BlockPass<'a> {
    values: &'a [f32],
    idx: &'a [u8],
    kept: usize,
    meta: usize,
    row0: usize,
    tile_rows: usize,
    rows_padded: usize,
    accumulate: bool,
    tile: *const f32,
    width: usize,
    scratch: *mut f32,
    direct: Option<(*mut f32, usize, usize)>,
}

/// Two rows' weights for one K block.
struct Pair {
    values: [*const f32; ROWS],
    idx: [*const u8; ROWS],
    /// Metadata bytes a row: index bytes (2:4) or kept weights (row bytes).
    count: usize,
    accumulate: bool,
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{
        BlockPass, FULL_BLOCK_BYTES, LANES, MAX_CHAIN_SETS, PREFETCH_PAIRS_AHEAD, Pair, ROWS, prefetch,
    };
    use std::arch::x86_64::*;

    /// Every row pair of the task over one K block: the pair loop compiled with AVX-512, so
    /// the micro-kernel inlines into it.
    ///
    /// # Safety
    /// AVX-512F; the invariants of [`BlockPass`].
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn block_pass<const V: usize, const TWO_BIT: bool, const SHUFFLES_APART: bool>(
        b: &BlockPass<'_>,
    ) {
        let (kept, meta, width) = (b.kept, b.meta, b.width);
        for r in (0..b.tile_rows).step_by(ROWS) {
            let row = b.row0 + r;
            let ahead = row + PREFETCH_PAIRS_AHEAD * ROWS;
            if ahead < b.rows_padded {
                for line in b.values[ahead * kept..(ahead + ROWS) * kept].chunks(LANES) {
                    prefetch(line.as_ptr().cast());
                }
                prefetch(b.idx[ahead * meta..].as_ptr());
            }
            let pair = Pair {
                values: std::array::from_fn(|i| b.values[(row + i) * kept..][..kept].as_ptr()),
                idx: std::array::from_fn(|i| b.idx[(row + i) * meta..][..meta].as_ptr()),
                count: meta,
                accumulate: b.accumulate,
            };
            let from: [*const f32; ROWS] =
                std::array::from_fn(|i| b.scratch.wrapping_add((r + i) * width).cast_const());
            let to = std::array::from_fn(|i| match b.direct {
                Some((y, stride, real)) if r + i < real => y.wrapping_add((r + i) * stride),
                _ => b.scratch.wrapping_add((r + i) * width),
            });
            // SAFETY: the invariants of `BlockPass` (the caller's contract) for rows `r, r + 1`.
            unsafe {
                if TWO_BIT {
                    two_bit::<V, SHUFFLES_APART>(&pair, b.tile, from, to)
                } else {
                    row_bytes::<V, SHUFFLES_APART>(&pair, b.tile, from, to)
                }
            }
        }
    }

    /// `to[r][..16·V] = (from[r][..16·V] if accumulating) + Σ kept w · tile[k][..16·V]` for
    /// both rows, the kept weights' K rows named by 2-bit index bytes ([`super::Meta::TwoBit`]).
    ///
    /// A full K block (8 index bytes, 32 values a row) takes [`two_bit_block`]; a shorter last
    /// block decodes byte by byte.
    ///
    /// # Safety
    /// AVX-512F; `tile` 64-byte aligned, rows of `16·V` floats, holding every K row the
    /// pair's metadata names; `from[r]` 64-byte aligned and readable, `to[r]` writable, for
    /// `16·V` floats.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn two_bit<const V: usize, const SHUFFLES_APART: bool>(
        p: &Pair,
        tile: *const f32,
        from: [*const f32; ROWS],
        to: [*mut f32; ROWS],
    ) {
        // SAFETY: the caller's contract.
        let mut acc = unsafe { start::<V>(p, from) };
        if p.count == FULL_BLOCK_BYTES {
            let mut chains = Chains::<V>::new(acc);
            // SAFETY: a full block: 8 index bytes and 32 values a row (the caller's contract).
            unsafe { two_bit_block::<V, SHUFFLES_APART>(&mut chains, p, tile) };
            acc = chains.sum();
        } else {
            let width = LANES * V;
            for j in 0..p.count {
                // SAFETY: K rows `8j .. 8j + 8 <= 8·pairs` of the tile (contract).
                let base = unsafe { tile.add(8 * j * width) };
                for ((acc, idx), values) in acc.iter_mut().zip(p.idx).zip(p.values) {
                    // SAFETY: index byte `j < pairs` and values `4j .. 4j + 4` of the row.
                    let (b, w) = unsafe { (usize::from(*idx.add(j)), values.add(4 * j)) };
                    for (t, k) in decode(b).into_iter().enumerate() {
                        // SAFETY: value `4j + t` of the row; K row `8j + k` of the tile.
                        unsafe { kept_weight(acc, _mm512_set1_ps(*w.add(t)), base.add(k * width)) };
                    }
                }
            }
        }
        // SAFETY: the caller's contract.
        unsafe { finish::<V>(&acc, to) }
    }

    /// One full K block of 2:4 weights (8 index bytes, 32 values a row) into `acc`.
    ///
    /// The loop is bound by the two 512-bit loads a cycle (one per FMA for the activations,
    /// one per `V` FMAs for a weight's broadcast). A row's 8 index bytes come in as one `u64`
    /// before the first FMA, so no activation load waits on an index load queued behind other
    /// activation loads: 0.79–0.81 → 0.86–0.87 of the FMA peak on the lone register tile
    /// (`examples/token_lane_tile.rs`). Spreading the weights by shuffles from one load of
    /// four takes the broadcasts off the load ports: 0.93 on the lone tile, but in the
    /// product it only pays at 2–7 vectors of tokens ([`four_weights`]).
    ///
    /// Where nothing is spread (`!SHUFFLES_APART`), each weight is broadcast inside the loop
    /// that uses it: given the four broadcasts up front, LLVM ordered the FMAs accumulator by
    /// accumulator, each sum's four FMAs one dependent chain back to back, where this order
    /// (a weight's `V` independent FMAs, then the next weight's) is the lone tile's. On
    /// Emerald Rapids (2 threads, × fp32 dense, alternated) 2:4 at 2048³ went 1.12–1.29 →
    /// 1.36–1.37, 512 × 4096² 1.13–1.29 → 1.43–1.47, 128 × 4096² 1.28–1.31 → 1.43–1.44,
    /// 512 × 11008 × 4096 1.28 → 1.45, level at 32 and 64 tokens; the row-byte patterns
    /// likewise (4:8 at 512 × 4096² 1.08–1.20 → 1.30, level at 128). Zen's spreading order
    /// is unchanged (not measured there).
    ///
    /// # Safety
    /// AVX-512F; each row's `idx` holds 8 bytes and `values` 32 floats; `tile` as for
    /// [`two_bit`], with 64 K rows.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn two_bit_block<const V: usize, const SHUFFLES_APART: bool>(
        chains: &mut Chains<V>,
        p: &Pair,
        tile: *const f32,
    ) {
        let width = LANES * V;
        // SAFETY: 8 index bytes a row (contract).
        let bits: [u64; ROWS] = std::array::from_fn(|r| unsafe { p.idx[r].cast::<u64>().read_unaligned() });
        for j in 0..FULL_BLOCK_BYTES {
            // SAFETY: K rows `8j .. 8j + 8 <= 64` of the tile (contract).
            let base = unsafe { tile.add(8 * j * width) };
            for (r, (bits, values)) in bits.into_iter().zip(p.values).enumerate() {
                let rows = decode((bits >> (8 * j)) as usize & 0xFF);
                // Broadcast where its FMAs use it unless spread (see the doc above).
                // SAFETY: values `4j .. 4j + 4 <= 32` of the row.
                let spread =
                    SHUFFLES_APART.then(|| unsafe { four_weights::<V, SHUFFLES_APART>(values.add(4 * j)) });
                for (t, k) in rows.into_iter().enumerate() {
                    // SAFETY: value `4j + t < 32` of the row.
                    let w =
                        spread.map_or_else(|| _mm512_set1_ps(unsafe { *values.add(4 * j + t) }), |w| w[t]);
                    // SAFETY: K row `8j + k < 64` of the tile.
                    unsafe { kept_weight(chains.row(t, r), w, base.add(k * width)) };
                }
            }
        }
    }

    /// The register tile's accumulators, with independent copies for narrow strips.
    ///
    /// An FMA takes 4 cycles and two issue a cycle, so a loop needs 8 independent sums to
    /// keep both pipes busy; 2 rows × `V` vectors has that only from `V` = 4. Narrower strips
    /// send consecutive kept weights to [`super::chain_sets`] copies in turn and add the
    /// copies once at the end of the block.
    struct Chains<const V: usize>([[[__m512; V]; ROWS]; MAX_CHAIN_SETS]);

    impl<const V: usize> Chains<V> {
        #[target_feature(enable = "avx512f")]
        #[inline]
        fn new(acc: [[__m512; V]; ROWS]) -> Self {
            let mut sets = [[[_mm512_setzero_ps(); V]; ROWS]; MAX_CHAIN_SETS];
            sets[0] = acc;
            Chains(sets)
        }

        /// The sums of row `r` that the `t`-th weight in a run feeds.
        #[inline]
        fn row(&mut self, t: usize, r: usize) -> &mut [__m512; V] {
            &mut self.0[t % super::chain_sets(V)][r]
        }

        #[target_feature(enable = "avx512f")]
        #[inline]
        fn sum(self) -> [[__m512; V]; ROWS] {
            let mut acc = self.0[0];
            for set in &self.0[1..super::chain_sets(V)] {
                for (acc, set) in acc.iter_mut().zip(set) {
                    for (a, s) in acc.iter_mut().zip(set) {
                        *a = _mm512_add_ps(*a, *s);
                    }
                }
            }
            acc
        }
    }

    /// The K rows (of 8) an index byte names: two 2:4 groups, two 2-bit indices each.
    #[inline]
    fn decode(b: usize) -> [usize; 4] {
        [b & 3, b >> 2 & 3, 4 + (b >> 4 & 3), 4 + (b >> 6 & 3)]
    }

    /// As [`two_bit`], with one row byte per kept weight ([`super::Meta::Rows`]).
    ///
    /// # Safety
    /// As [`two_bit`].
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn row_bytes<const V: usize, const SHUFFLES_APART: bool>(
        p: &Pair,
        tile: *const f32,
        from: [*const f32; ROWS],
        to: [*mut f32; ROWS],
    ) {
        // SAFETY: the caller's contract.
        let mut chains = Chains::<V>::new(unsafe { start::<V>(p, from) });
        let width = LANES * V;
        // Eight row bytes at a time as one `u64` (as in `two_bit_block`), then the rest.
        let whole = p.count / 8 * 8;
        for e0 in (0..whole).step_by(8) {
            // SAFETY: entries `e0 .. e0 + 8 <= count` of each row.
            let bytes: [u64; ROWS] =
                std::array::from_fn(|r| unsafe { p.idx[r].add(e0).cast::<u64>().read_unaligned() });
            for half in 0..2 {
                for (r, (bytes, values)) in bytes.into_iter().zip(p.values).enumerate() {
                    // Broadcast where its FMAs use it unless spread (see `two_bit_block`).
                    // SAFETY: entries `e0 + 4·half .. + 4 <= count` of the row.
                    let spread = SHUFFLES_APART
                        .then(|| unsafe { four_weights::<V, SHUFFLES_APART>(values.add(e0 + 4 * half)) });
                    for e in 4 * half..4 * half + 4 {
                        let k = (bytes >> (8 * e)) as usize & 0xFF;
                        // SAFETY: entry `e0 + e < count` of the row.
                        let w = spread.map_or_else(
                            || _mm512_set1_ps(unsafe { *values.add(e0 + e) }),
                            |w| w[e - 4 * half],
                        );
                        // SAFETY: its K row is inside the tile.
                        unsafe { kept_weight(chains.row(e, r), w, tile.add(k * width)) };
                    }
                }
            }
        }
        let mut acc = chains.sum();
        for e in whole..p.count {
            for ((acc, idx), values) in acc.iter_mut().zip(p.idx).zip(p.values) {
                // SAFETY: entry `e < count` of the row; its K row is inside the tile.
                let (w, k) = unsafe { (*values.add(e), usize::from(*idx.add(e))) };
                // SAFETY: as above.
                unsafe { kept_weight(acc, _mm512_set1_ps(w), tile.add(k * width)) };
            }
        }
        // SAFETY: the caller's contract.
        unsafe { finish::<V>(&acc, to) }
    }

    /// Four consecutive kept weights of a row, each in every lane of a register.
    ///
    /// Strips of 2–7 vectors on a CPU whose shuffles run beside its FMAs (`SHUFFLES_APART`,
    /// [`super::spread_weights`]) load the four once into each 128-bit lane and spread all or
    /// every other one with an in-lane shuffle; the rest, and every
    /// weight at other widths, take one broadcast load each. The load is written as `asm!`
    /// because LLVM otherwise folds load and shuffles back into four broadcast loads.
    ///
    /// # Safety
    /// AVX-512F; `w` is readable for 4 floats.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn four_weights<const V: usize, const SHUFFLES_APART: bool>(w: *const f32) -> [__m512; 4] {
        // SAFETY: 4 readable floats at `w` (contract).
        let broadcast = |t: usize| _mm512_set1_ps(unsafe { *w.add(t) });
        let spread = super::spread_weights(V, SHUFFLES_APART);
        if spread == 0 {
            return std::array::from_fn(broadcast);
        }
        let quad: __m512;
        // SAFETY: 16 readable bytes at `w` (contract); AVX-512F (this function's feature).
        unsafe {
            std::arch::asm!(
                "vbroadcastf32x4 {quad}, xmmword ptr [{w}]",
                quad = out(zmm_reg) quad,
                w = in(reg) w,
                options(pure, readonly, nostack, preserves_flags),
            )
        };
        if spread == 2 {
            return [
                _mm512_permute_ps::<0x00>(quad),
                broadcast(1),
                _mm512_permute_ps::<0xAA>(quad),
                broadcast(3),
            ];
        }
        [
            _mm512_permute_ps::<0x00>(quad),
            _mm512_permute_ps::<0x55>(quad),
            _mm512_permute_ps::<0xAA>(quad),
            _mm512_permute_ps::<0xFF>(quad),
        ]
    }

    /// One kept weight, already in every lane of `wb`: `acc[v] += wb · x[16v .. 16v + 16]`
    /// (no gather: the activation row is the one its index names).
    ///
    /// # Safety
    /// AVX-512F; `x` is a 64-byte aligned tile row of at least `16·V` floats.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn kept_weight<const V: usize>(acc: &mut [__m512; V], wb: __m512, x: *const f32) {
        for (v, a) in acc.iter_mut().enumerate() {
            // SAFETY: columns `16v .. 16v + 16 <= 16·V` of the aligned row (contract).
            *a = _mm512_fmadd_ps(wb, unsafe { _mm512_load_ps(x.add(LANES * v)) }, *a);
        }
    }

    /// The accumulators: the outputs so far, or zero for the first block.
    ///
    /// # Safety
    /// AVX-512F; each `y[r]` is 64-byte aligned and readable for `16·V` floats.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn start<const V: usize>(p: &Pair, y: [*const f32; ROWS]) -> [[__m512; V]; ROWS] {
        let mut acc = [[_mm512_setzero_ps(); V]; ROWS];
        if p.accumulate {
            for (row, y) in acc.iter_mut().zip(y) {
                for (v, a) in row.iter_mut().enumerate() {
                    // SAFETY: `16·v < 16·V` floats of the row's aligned output (contract).
                    *a = unsafe { _mm512_load_ps(y.add(LANES * v)) };
                }
            }
        }
        acc
    }

    /// Store the accumulators (to the scratch or, on a strip's last block, to `y`, which need
    /// not be aligned).
    ///
    /// # Safety
    /// AVX-512F; each `y[r]` is writable for `16·V` floats.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn finish<const V: usize>(acc: &[[__m512; V]; ROWS], y: [*mut f32; ROWS]) {
        for (row, y) in acc.iter().zip(y) {
            for (v, a) in row.iter().enumerate() {
                // SAFETY: the caller's contract.
                unsafe { _mm512_storeu_ps(y.add(LANES * v), *a) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{NmMatrix, prune_magnitude};
    use super::*;
    use crate::reference::gemm_naive;
    use crate::testing::{assert_close, data, has_avx512};
    use proptest::prelude::*;

    /// The kernel against the naive product, on `x` rows `xs` apart.
    fn check(rows: usize, groups: usize, cols: usize, xs: usize, threads: usize, seed: u64) {
        let k = 4 * groups;
        let w = prune_magnitude(&data(rows * k, seed), rows, k, 2, 4);
        let x = data(k * xs, seed + 1);
        let dense_x: Vec<f32> = (0..k * cols).map(|i| x[i / cols * xs + i % cols]).collect();
        let a = NmMatrix::compress(&w, rows, k, 2, 4).unwrap();
        let layout = TokenLayout::new((rows, k), (2, 4), a.values(), (a.indices(), k.div_ceil(8), 2));
        let mut want = vec![0.0; rows * cols];
        gemm_naive(&w, &dense_x, &mut want, rows, k, cols);
        // Both weight loads (broadcast, spread by shuffles), whichever this CPU takes.
        for shuffles_apart in [false, true] {
            let mut got = vec![f32::NAN; rows * cols];
            spmm_spreading(&layout, threads, (&x, xs), &mut got, cols, shuffles_apart);
            assert_close(
                &got,
                &want,
                k,
                &format!("{rows}×{k}×{cols} (xs {xs}, {threads} threads, shuffles apart {shuffles_apart})"),
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Odd rows (a padding row), K with half an index byte (`groups` odd) and across
        /// several K blocks, token counts around the 64/128 strip widths, padded x rows.
        #[test]
        fn issue_3_token_lanes_match_the_naive_oracle(
            rows in 1usize..12, groups in 1usize..40, cols in 1usize..300, pad in 0usize..3,
            threads in 1usize..3, seed in any::<u64>(),
        ) {
            if has_avx512() {
                check(rows, groups, cols, cols + pad, threads, seed);
            }
        }
    }

    #[test]
    fn issue_3_token_lanes_cover_block_and_strip_boundaries() {
        if !has_avx512() {
            return;
        }
        for (rows, groups, cols) in [
            (2, 16, 128),
            (3, 17, 129),
            (4, 32, 64),
            (5, 33, 65),
            (7, 2, 192),
            (1, 1, 1),
        ] {
            check(rows, groups, cols, cols, 2, 7);
        }
    }

    #[test]
    fn issue_3_the_execution_copy_is_the_stored_form_reordered() {
        let (rows, k) = (5, 76);
        let w = prune_magnitude(&data(rows * k, 3), rows, k, 2, 4);
        let a = NmMatrix::compress(&w, rows, k, 2, 4).unwrap();
        let l = TokenLayout::new((rows, k), (2, 4), a.values(), (a.indices(), k.div_ceil(8), 2));
        // 6 rows (padded to even) × 10 index bytes, each row's 4 values per byte.
        assert_eq!(l.idx.len(), 6 * 10);
        assert_eq!(l.resident_bytes(), 6 * 10 * 4 * 4 + 6 * 10);
        let mut kept: Vec<f32> = l.values.iter().copied().filter(|&v| v != 0.0).collect();
        let mut stored: Vec<f32> = a.values().iter().copied().filter(|&v| v != 0.0).collect();
        kept.sort_by(f32::total_cmp);
        stored.sort_by(f32::total_cmp);
        assert_eq!(kept, stored);
    }
}
