//! The driver the two block-sparse kernels share (bf16 pairs on `vdpbf16ps` in
//! `half_dot/blocks.rs`, int8 quads on VNNI in `int8_blocks.rs`): both store each kept block
//! as `[step][panel]` 64-byte lines (16 rows of one K step, the dense kernel's operand), pack
//! the activations per 8-token tile as `[step][8]` 32-bit words, and keep a register tile of
//! up to three panels × eight tokens in registers over a whole block row. What differs is
//! the instruction and the sums' type, which live in each kernel's tile function.

use super::schedule::TaskGrid;
use super::scratch::line_aligned;
use super::shared_output::SharedOutput;
use rayon::prelude::*;
use std::cell::RefCell;
use std::thread::LocalKey;

/// Output rows per zmm of sums (a panel).
pub(crate) const LANES: usize = 16;
/// Tokens per packed activation tile, and the most per register tile.
pub(crate) const TOKENS: usize = 8;
/// Panels per register tile at most: 3 × 8 tokens = 24 accumulators.
const MAX_PANELS: usize = 3;

/// One 64-byte line of a kept block: 16 rows' operands for one K step, aligned so that a
/// load never splits a cache line.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [u32; LANES]);

/// A block-sparse matrix as both kernels store it: the kept blocks of each block row in
/// column order, each as `[step][panel]` lines (one sequential stream per block row), one
/// u32 block column per block and a pointer per block row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredBlocks {
    /// `(n, k)`.
    shape: (usize, usize),
    /// Rows per block (a multiple of [`LANES`]).
    br: usize,
    /// K steps per block.
    steps: usize,
    /// First block of each block row, and one past the last.
    block_ptr: Vec<u32>,
    /// Block column of each block.
    block_cols: Vec<u32>,
    /// `[block][step][panel]` lines.
    lines: Vec<Line>,
}

impl StoredBlocks {
    /// Store `n × k` weights in blocks of `br` rows × `steps` K steps, the blocks given by
    /// `block_ptr` and `block_cols`; `line(block, step, panel)` makes a kept block's line.
    pub(crate) fn new(
        (n, k): (usize, usize),
        (br, steps): (usize, usize),
        (block_ptr, block_cols): (Vec<u32>, Vec<u32>),
        line: impl Fn(usize, usize, usize) -> Line + Sync,
    ) -> StoredBlocks {
        debug_assert!(br.is_multiple_of(LANES) && n.is_multiple_of(br));
        let panels = br / LANES;
        let mut lines = vec![Line::default(); block_cols.len() * steps * panels];
        if !lines.is_empty() {
            lines
                .par_chunks_mut(steps * panels)
                .enumerate()
                .for_each(|(b, out)| {
                    for (i, l) in out.iter_mut().enumerate() {
                        *l = line(b, i / panels, i % panels);
                    }
                });
        }
        StoredBlocks {
            shape: (n, k),
            br,
            steps,
            block_ptr,
            block_cols,
            lines,
        }
    }

    /// `(n, k)`.
    pub(crate) fn shape(&self) -> (usize, usize) {
        self.shape
    }

    /// Bytes of stored values, the zeros inside kept blocks included.
    pub(crate) fn value_bytes(&self) -> usize {
        self.lines.len() * 64
    }

    /// Bytes of index metadata: a u32 block column per block plus the block-row pointers.
    pub(crate) fn metadata_bytes(&self) -> usize {
        (self.block_cols.len() + self.block_ptr.len()) * 4
    }
}

/// One block row's kept blocks for one panel group, as a tile function reads them.
#[derive(Clone, Copy)]
pub(crate) struct BlockRow {
    /// The row's first block's first line, offset by the group's first panel.
    pub(crate) lines: *const Line,
    pub(crate) cols: *const u32,
    pub(crate) blocks: usize,
    /// K steps per block.
    pub(crate) steps: usize,
    /// Lines per step: the block row's panels.
    pub(crate) stride: usize,
    /// The group's first row's start value, if the layout has them.
    pub(crate) bias: Option<*const i32>,
    /// Tokens of the product: the row stride of `y`.
    pub(crate) m: usize,
}

/// A kernel's per-thread buffer of packed activations.
pub(crate) type Scratch = &'static LocalKey<RefCell<Vec<u32>>>;
/// Packs activation tile `tile` into `out` (`(tile, out)`).
pub(crate) type PackTile<'a> = dyn Fn((usize, &mut [u32])) + Sync + 'a;

/// A register tile of a kernel: a block row's group, its packed tile, `y` at the group's
/// first row and the tile's first token.
pub(crate) type TileFn<O> = unsafe fn(BlockRow, *const u32, *mut O);

/// The register tile of `P` panels (1–3) × `T` tokens (1–8) for a runtime `(panels, tokens)`
/// of a kernel's tile function generic over `<P, T, U>`: one to three tokens keep their sums
/// in several copies (`U`), so that the instruction's latency stays covered.
macro_rules! pick_block_tile {
    ($tile:ident, $out:ty, $panels:expr, $tokens:expr) => {{
        macro_rules! by_tokens {
            ($p:literal) => {
                match $tokens {
                    1 => $tile::<$p, 1, 4> as $crate::block_rows::TileFn<$out>,
                    2 => $tile::<$p, 2, 2>,
                    3 => $tile::<$p, 3, 2>,
                    4 => $tile::<$p, 4, 1>,
                    5 => $tile::<$p, 5, 1>,
                    6 => $tile::<$p, 6, 1>,
                    7 => $tile::<$p, 7, 1>,
                    _ => $tile::<$p, 8, 1>,
                }
            };
        }
        match $panels {
            1 => by_tokens!(1),
            2 => by_tokens!(2),
            _ => by_tokens!(3),
        }
    }};
}
pub(crate) use pick_block_tile;

/// `y[n × m] = W · x`: pack the activations per 8-token tile with `pack((tile, out))` into
/// the thread's `scratch`, then tasks of (block rows × tile groups) run `pick(panels,
/// tokens)` over every block row's panel groups and tiles, each writing its rows × tokens;
/// rows start from `bias` (one value a row) where given, else zero.
///
/// # Safety
/// The features of every tile function `pick` returns are available; `y.len() == n·m`;
/// `bias`, if any, has `n` values; `pack` fills a tile's `k_steps · 8` words, `k_steps`
/// being the K steps of all of K.
pub(crate) unsafe fn product<O: Send + Copy>(
    layout: &StoredBlocks,
    bias: Option<&[i32]>,
    (threads, m, k_steps): (usize, usize, usize),
    y: &mut [O],
    (scratch, pack): (Scratch, &PackTile<'_>),
    pick: fn(usize, usize) -> TileFn<O>,
) {
    let (n, _) = layout.shape;
    let panels = layout.br / LANES;
    let tiles = m.div_ceil(TOKENS);
    let tile_len = k_steps * TOKENS;
    let mut packed = scratch.with(|s| std::mem::take(&mut *s.borrow_mut()));
    let packed_s = line_aligned(&mut packed, tiles * tile_len);
    if threads > 1 {
        packed_s.par_chunks_mut(tile_len).enumerate().for_each(pack);
    } else {
        packed_s.chunks_mut(tile_len).enumerate().for_each(pack);
    }
    let xp = &*packed_s;

    let grid = TaskGrid::new(n / layout.br, tiles, threads, usize::MAX);
    // Each task writes its own block rows × tokens of `y`; the tasks join before this returns.
    let out = SharedOutput(y.as_mut_ptr());
    let task = |t: usize| {
        let (row_range, tile_range) = grid.task(t);
        for brow in row_range {
            let (b0, b1) = (
                layout.block_ptr[brow] as usize,
                layout.block_ptr[brow + 1] as usize,
            );
            for p0 in (0..panels).step_by(MAX_PANELS) {
                let group = (panels - p0).min(MAX_PANELS);
                let row0 = brow * layout.br + p0 * LANES;
                let first = (b0 * layout.steps * panels).min(layout.lines.len());
                let row = BlockRow {
                    lines: layout.lines[first..].as_ptr().wrapping_add(p0),
                    cols: layout.block_cols[b0..b1].as_ptr(),
                    blocks: b1 - b0,
                    steps: layout.steps,
                    stride: panels,
                    bias: bias.map(|b| b[row0..].as_ptr()),
                    m,
                };
                for tile in tile_range.clone() {
                    let f = pick(group, (m - tile * TOKENS).min(TOKENS));
                    // SAFETY: the caller's contract for the features and the layout; `y` at
                    // this group's `16 · group` rows × the tile's tokens, inside `y` and
                    // this task's alone.
                    unsafe {
                        f(
                            row,
                            xp[tile * tile_len..].as_ptr(),
                            out.at(row0 * m + tile * TOKENS),
                        )
                    };
                }
            }
        }
    };
    if threads > 1 {
        (0..grid.tasks()).into_par_iter().for_each(task);
    } else {
        (0..grid.tasks()).for_each(task);
    }
    scratch.with(|s| *s.borrow_mut() = packed);
}

/// Run `step(copy, lines, x)` over every K step of the row's blocks, consecutive steps into
/// the `U` copies of the sums: `lines` is the step's first line (the group's panels follow,
/// one a line), `x` the step's 8 packed tokens.
///
/// # Safety
/// `row` and the packed tile `x` as for a [`TileFn`].
#[inline(always)]
pub(crate) unsafe fn over_blocks<A, const U: usize>(
    row: &BlockRow,
    x: *const u32,
    a: &mut [A; U],
    mut step: impl FnMut(&mut A, *const Line, *const u32),
) {
    for b in 0..row.blocks {
        // SAFETY: block b < blocks of the row (contract).
        let col = unsafe { row.cols.add(b).read() } as usize;
        let w = row.lines.wrapping_add(b * row.steps * row.stride);
        let xb = x.wrapping_add(col * row.steps * TOKENS);
        let mut q = 0;
        while q + U <= row.steps {
            for (u, au) in a.iter_mut().enumerate() {
                step(
                    au,
                    w.wrapping_add((q + u) * row.stride),
                    xb.wrapping_add((q + u) * TOKENS),
                );
            }
            q += U;
        }
        for q in q..row.steps {
            step(
                &mut a[0],
                w.wrapping_add(q * row.stride),
                xb.wrapping_add(q * TOKENS),
            );
        }
    }
}

/// Write one panel's 16 sums of token `t` to `y` (row `r` at `y[r·m + t]`), the panel's
/// first row at `y`.
///
/// # Safety
/// `y` has 16 rows of `m` elements from its start, `t < m`, written by no one else.
#[inline(always)]
pub(crate) unsafe fn scatter<O: Copy>(sums: &[O; LANES], y: *mut O, m: usize, t: usize) {
    for (lane, &s) in sums.iter().enumerate() {
        // SAFETY: row `lane < 16`, token `t` (contract).
        unsafe { y.add(lane * m + t).write(s) };
    }
}
