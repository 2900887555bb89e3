//! Block-sparse weights on the tiles (issue 20): the weight tiles holding a non-zero are
//! stored as they are, the all-zero ones not at all, and the product skips them.
//!
//! Why: AMX has no sparse datapath, but block sparsity needs none: a weight tile (16 rows ×
//! one K step) whose blocks were all pruned contributes nothing, so skipping it skips its
//! bytes and its `tdp*` alike, with no expansion. On AVX-512 the block kernels ran at the
//! vector dot product's rate and lost to the tile comparator from a few tokens on (bf16
//! 16×16 blocks at 25% density, 4096², 2 threads of an AMX Xeon: 0.83× at 16 tokens, 0.33×
//! at 512).
//!
//! A panel pair's kept steps fall in three runs, each in ascending K: steps where both panels
//! keep a tile (the two tiles side by side, a 2-panel register tile step), then the first
//! panel's alone, then the second's alone (each the matching half of the register tile), so
//! the loops have no branch on the pattern. The sums are the same products in another order:
//! int8 exact, bf16 within the f32 summation bound.

use super::{
    Configured, Op, Operand, ROW_BYTES, ROWS, SUMS, Sum, TOKEN_TILES, Tile, WHOLE_K_ACTIVATIONS, ZERO_TILE,
    available, copy_sums, fill, load_sums, run_tasks, second_bf16, second_i8, step_bf16, step_i8, store_sums,
};
use crate::shared_output::SharedOutput;

/// The fewest tokens at which blocks `cols` wide run on the tiles rather than the AVX-512
/// block kernels, which stream exactly the kept blocks and win while the weights' bytes
/// decide and a tile holds more than a block: where blocks of several columns share a tile's
/// K (a bf16 tile is 32 wide, an int8 tile 64), a tile is kept when any of them is, so it
/// streams more than the blocks. Measured (Intel Xeon with AMX, 2 threads, 4096²,
/// `sparsegate bench`, ratio to the AMX dense, tiles / vector):
///
/// * one block per tile width: bf16 32×32 at 50% 1.74 / 1.43 at 1 token, 1.68 / 1.20 at 4;
///   int8 32×64 at 50% 1.34 / 1.61 at 1, 1.51 / 1.36 at 4, 1.46 / 1.00 at 16;
/// * two: bf16 16×16 at 25% 1.82 / 2.99 at 2, 1.93 / 1.99 at 4, 1.78 / 1.68 at 6; int8
///   32×32 at 50% 1.13–1.19 / 1.29–1.33 at 8, level at 12, 1.07–1.08 / 0.85–1.09 at 16;
/// * four (int8 16×16 at 25%): 1.18–1.34 / 1.45–1.60 at 16, 0.99 / 1.13 at 24, 1.11 / 0.98
///   at 32, 1.28 / 0.70 at 128.
fn block_tiles_from_tokens(op: Op, cols: usize) -> usize {
    // Blocks side by side in one tile's K: its width over the largest power of two (≥ 16,
    // as `fits` asks) dividing `cols`.
    let mut shared = op.k_step();
    while !cols.is_multiple_of(shared) {
        shared /= 2;
    }
    match (op, op.k_step() / shared) {
        (Op::Bf16, 1) => 1,
        (Op::Bf16, _) => 4,
        (Op::I8, 1) => 4,
        (Op::I8, 2) => 16,
        (Op::I8, _) => 32,
    }
}

/// Whether blocks of `rows × cols` run on the tiles: whole 16-row panels and K in 16s (a bf16
/// tile holds two such blocks side by side, an int8 tile four), so a tile is skipped as soon
/// as its blocks are. Narrower blocks would leave few tiles empty.
fn fits(rows: usize, cols: usize) -> bool {
    rows > 0 && cols > 0 && rows.is_multiple_of(ROWS) && cols.is_multiple_of(16)
}

/// Where a panel pair's runs are: its first entry and tile, and the length of each run
/// (both panels, first alone, second alone).
#[derive(Debug, Clone, PartialEq)]
struct PairRuns {
    entry: usize,
    tile: usize,
    runs: [usize; 3],
}

/// Weights with their all-zero tiles left out (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeptTiles {
    op: Op,
    n: usize,
    k: usize,
    steps: usize,
    /// Per panel pair.
    pairs: Vec<PairRuns>,
    /// The K step of each entry, pair by pair, run by run.
    entries: Vec<u32>,
    /// The kept tiles in entry order (two per entry of a both-panels run).
    tiles: Vec<Tile>,
}

impl KeptTiles {
    /// Whether a product of `tokens` tokens on blocks of `rows × cols` runs on the tiles:
    /// the CPU and OS grant them ([`available`]), the blocks [`fits`], and at least
    /// [`block_tiles_from_tokens`] tokens for their width.
    pub(crate) fn pays_at(op: Op, (rows, cols): (usize, usize), tokens: usize) -> bool {
        fits(rows, cols) && tokens >= block_tiles_from_tokens(op, cols) && available(op)
    }

    /// The tiles of row-major `n × k` weights `w` that hold a non-zero.
    pub(crate) fn new<E: Operand + PartialEq + Default>(w: &[E], n: usize, k: usize) -> KeptTiles {
        debug_assert_eq!(w.len(), n * k);
        let op = E::OP;
        let ks = op.k_step();
        let steps = k.div_ceil(ks);
        let panels = n.div_ceil(ROWS);
        // kept[panel][step]: any non-zero in the tile.
        let mut kept = vec![false; panels * steps];
        for (row, values) in w.chunks_exact(k.max(1)).take(n).enumerate() {
            for (s, chunk) in values.chunks(ks).enumerate() {
                if chunk.iter().any(|&v| v != E::default()) {
                    kept[row / ROWS * steps + s] = true;
                }
            }
        }
        let (mut pairs, mut entries, mut tiles) = (Vec::new(), Vec::new(), Vec::new());
        for p in (0..panels).step_by(2) {
            let keeps = |panel: usize, s: usize| panel < panels && kept[panel * steps + s];
            let mut at = PairRuns {
                entry: entries.len(),
                tile: tiles.len(),
                runs: [0; 3],
            };
            let runs: [(bool, bool); 3] = [(true, true), (true, false), (false, true)];
            for (run, &(first, second)) in runs.iter().enumerate() {
                for s in 0..steps {
                    if (keeps(p, s), keeps(p + 1, s)) != (first, second) {
                        continue;
                    }
                    entries.push(s as u32);
                    at.runs[run] += 1;
                    for panel in [p, p + 1].into_iter().filter(|&q| keeps(q, s)) {
                        let mut tile = ZERO_TILE;
                        fill(w, (n, k), (panel, s), &mut tile);
                        tiles.push(tile);
                    }
                }
            }
            pairs.push(at);
        }
        KeptTiles {
            op,
            n,
            k,
            steps,
            pairs,
            entries,
            tiles,
        }
    }

    /// Bytes of the kept tiles (the zeros inside them included).
    pub(crate) fn value_bytes(&self) -> usize {
        self.tiles.len() * size_of::<Tile>()
    }

    /// Bytes of the index: a u32 K step per entry and three run lengths per panel pair.
    pub(crate) fn metadata_bytes(&self) -> usize {
        self.entries.len() * 4 + self.pairs.len() * 3 * 4
    }

    /// As [`AmxWeights::gemm`](super::AmxWeights::gemm).
    ///
    /// # Safety
    /// As [`AmxWeights::gemm`](super::AmxWeights::gemm) for the weights' op.
    pub(crate) unsafe fn spmm<E: Operand, S: Sum>(&self, threads: usize, x: &[E], y: &mut [S], m: usize) {
        let shape = (self.op, self.n, self.k, self.steps);
        // SAFETY: the caller's contract; each task's rows and tokens are its own.
        unsafe {
            run_tasks(shape, threads, (x, y, m), |xp, out, pairs, tiles| {
                self.task(xp, out, m, pairs, tiles)
            })
        }
    }

    /// One task: panel pairs `pairs` × token tiles `tiles`, in token blocks whose activations
    /// over the whole K fit [`WHOLE_K_ACTIVATIONS`] where at least four token tiles' do,
    /// else blocks of [`TOKEN_TILES`] token tiles × K steps that fit: per K block, each panel pair meets
    /// every register tile of the token block, its kept weight tiles of the K block read
    /// again from L2 by each, and every K block's activations stay in L2 while all the
    /// pairs meet them. So a token block streams the kept weights from memory once (with K
    /// unblocked, a 4096 × 11008 bf16 weight at 512 tokens was streamed once per two
    /// token tiles and ran 1.1× dense against 1.6× at 11008 × 4096).
    ///
    /// # Safety
    /// As [`Self::spmm`]; `xp` is the packed activations of `m` tokens; no other task writes
    /// these rows × tokens of `out`.
    unsafe fn task<S: Sum>(
        &self,
        xp: &[Tile],
        out: SharedOutput<S>,
        m: usize,
        pairs: std::ops::Range<usize>,
        tiles: std::ops::Range<usize>,
    ) {
        if tiles.is_empty() {
            return;
        }
        let (n, steps) = (self.n, self.steps);
        let panels = n.div_ceil(ROWS);
        let (p0, p1) = (pairs.start * 2, (pairs.end * 2).min(panels));
        // Whole K where at least four token tiles' activations fit (or all the task's);
        // else up to TOKEN_TILES token tiles and K in blocks.
        let whole_k_tiles = WHOLE_K_ACTIVATIONS / (steps.max(1) * size_of::<Tile>());
        let block_tiles = if whole_k_tiles >= 4.min(tiles.len()) {
            whole_k_tiles.min(TOKEN_TILES)
        } else {
            TOKEN_TILES
        }
        .min(tiles.len());
        let k_block = (WHOLE_K_ACTIVATIONS / (block_tiles * size_of::<Tile>())).clamp(1, steps.max(1));
        let stride = block_tiles * ROW_BYTES;
        let mut sums = SUMS.with(|s| std::mem::take(&mut *s.borrow_mut()));
        sums.resize((p1 - p0) * block_tiles, ZERO_TILE);
        let c_base = sums.as_mut_ptr().cast::<u8>();
        let b_tile = steps * size_of::<Tile>();
        // SAFETY: `available` held (the caller's contract).
        let _tiles = unsafe { Configured::new() };
        for t0 in tiles.clone().step_by(block_tiles) {
            let t1 = (t0 + block_tiles).min(tiles.end);
            for s0 in (0..steps.max(1)).step_by(k_block) {
                let ks = (s0, (s0 + k_block).min(steps));
                for q in pairs.clone() {
                    let p = 2 * q;
                    for t in (t0..t1).step_by(2) {
                        let b = xp[t * steps..].as_ptr();
                        let c = c_base.wrapping_add((p - p0) * ROWS * stride + (t - t0) * ROW_BYTES);
                        // SAFETY: tiles configured; token tiles t (and t + 1 when two) have
                        // activation tiles for every step; the sums cover panels p0..p1 ×
                        // token tiles t0..t1, stored by the K blocks before this one.
                        unsafe {
                            match (p + 1 < p1, t + 1 < t1) {
                                (true, true) => self.pair::<2, 2>(q, ks, (b, b_tile), c, stride),
                                (true, false) => self.pair::<2, 1>(q, ks, (b, b_tile), c, stride),
                                (false, true) => self.pair::<1, 2>(q, ks, (b, b_tile), c, stride),
                                (false, false) => self.pair::<1, 1>(q, ks, (b, b_tile), c, stride),
                            }
                        }
                    }
                }
            }
            // SAFETY: the register tiles above stored every sum of the block.
            unsafe { copy_sums(c_base, stride, out, (n, m), (p0, p1), (t0, t1)) };
        }
        SUMS.with(|s| *s.borrow_mut() = sums);
    }

    /// Panel pair `q`'s register tile over its kept steps in `s0..s1`: sums from `c` (zero
    /// when `s0` is 0), plus those steps' products, back to `c`.
    ///
    /// # Safety
    /// Tiles configured; the activation tiles of token tiles at `b` (and `b_tile` bytes on,
    /// when `TILES` = 2) exist for every step; `c` covers the sums; `PANELS` is 1 only for a
    /// last, lone panel (whose pair has no second-panel entries).
    unsafe fn pair<const PANELS: usize, const TILES: usize>(
        &self,
        q: usize,
        (s0, s1): (usize, usize),
        (b, b_tile): (*const Tile, usize),
        c: *mut u8,
        stride: usize,
    ) {
        let at = &self.pairs[q];
        let [both, first, second] = at.runs;
        let entries = &self.entries[at.entry..at.entry + both + first + second];
        let (both_steps, rest) = entries.split_at(both);
        let (first_steps, second_steps) = rest.split_at(first);
        // Each run is in K order: its entries in s0..s1, and where their tiles start.
        let within = |run: &[u32]| {
            let lo = run.partition_point(|&s| (s as usize) < s0);
            (lo, run.partition_point(|&s| (s as usize) < s1))
        };
        let tiles = self.tiles[at.tile..].as_ptr();
        let tile = size_of::<Tile>();
        // SAFETY: the caller's contract; each entry's tiles are the next in `tiles` (two for
        // a both-panels step), and its step's activation tiles are at `b + step`.
        unsafe {
            load_sums::<PANELS, TILES>(if s0 == 0 { std::ptr::null() } else { c }, stride);
            macro_rules! walk {
                ($step:ident, $second:ident) => {{
                    let (lo, hi) = within(both_steps);
                    let mut a = tiles.add(2 * lo);
                    for &s in &both_steps[lo..hi] {
                        $step::<2, TILES>(a, tile, b.add(s as usize), b_tile);
                        a = a.add(2);
                    }
                    let (lo, hi) = within(first_steps);
                    let mut a = tiles.add(2 * both + lo);
                    for &s in &first_steps[lo..hi] {
                        $step::<1, TILES>(a, 0, b.add(s as usize), b_tile);
                        a = a.add(1);
                    }
                    let (lo, hi) = within(second_steps);
                    let mut a = tiles.add(2 * both + first + lo);
                    for &s in &second_steps[lo..hi] {
                        $second::<TILES>(a, b.add(s as usize), b_tile);
                        a = a.add(1);
                    }
                }};
            }
            match self.op {
                Op::Bf16 => walk!(step_bf16, second_bf16),
                Op::I8 => walk!(step_i8, second_i8),
            }
            store_sums::<PANELS, TILES>(c, stride);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{bytes, naive_i8, prune_blocks};
    use super::*;

    /// Issue 20: blocks take the tiles from fewer tokens the fewer of them share a tile's K.
    #[test]
    fn issue_20_blocks_sharing_a_tile_wait_for_more_tokens() {
        let table = [
            (Op::Bf16, 32, 1),
            (Op::Bf16, 64, 1),
            (Op::Bf16, 16, 4),
            (Op::Bf16, 48, 4),
            (Op::I8, 64, 4),
            (Op::I8, 128, 4),
            (Op::I8, 32, 16),
            (Op::I8, 96, 16),
            (Op::I8, 16, 32),
            (Op::I8, 48, 32),
        ];
        for (op, cols, tokens) in table {
            assert_eq!(block_tiles_from_tokens(op, cols), tokens, "{op:?}, {cols} wide");
        }
        assert!(!fits(8, 16) && !fits(16, 8) && !fits(0, 16) && fits(32, 48));
    }

    /// Issue 20: only tiles holding a non-zero are kept, and a panel pair's steps fall into
    /// runs of both panels, the first alone and the second alone.
    #[test]
    fn issue_20_kept_tiles_skip_empty_tiles_and_run_by_panel() {
        // Three panels (48 rows) × 4 int8 steps (256 k): panel 0 keeps steps 0 and 2,
        // panel 1 steps 2 and 3, panel 2 (a lone last panel) step 1.
        let (n, k) = (48, 256);
        let mut w = vec![0i8; n * k];
        for (row, col) in [(0, 0), (15, 130), (16, 129), (31, 255), (40, 64)] {
            w[row * k + col] = 1;
        }
        let tiles = KeptTiles::new(&w, n, k);
        assert_eq!(tiles.value_bytes(), 5 * size_of::<Tile>());
        assert_eq!(tiles.entries, [2, 0, 3, 1]);
        assert_eq!(tiles.pairs[0].runs, [1, 1, 1]);
        assert_eq!(tiles.pairs[1].runs, [0, 1, 0]);
        if super::super::available(Op::I8) {
            let x: Vec<i8> = bytes(9, k * 3).into_iter().map(|b| b as i8).collect();
            let mut y = vec![7i32; n * 3];
            // SAFETY: available; shapes as promised.
            unsafe { tiles.spmm(1, &x, &mut y, 3) };
            assert_eq!(y, naive_i8(&w, &x, n, k, 3));
        }
    }

    /// Issue 20: a token block whose activations outgrow [`WHOLE_K_ACTIVATIONS`] walks K in
    /// blocks, the sums carried between them (the proptests' shapes fit one K block).
    #[test]
    fn issue_20_kept_tiles_are_exact_across_k_blocks() {
        if !super::super::available(Op::I8) {
            return;
        }
        let (n, k, m): (usize, usize, usize) = (40, 8400, 260);
        // Fewer than four token tiles' activations fit over the whole K.
        assert!(4 * k.div_ceil(64) * size_of::<Tile>() > WHOLE_K_ACTIVATIONS);
        let mut w: Vec<i8> = bytes(3, n * k).into_iter().map(|b| b as i8).collect();
        prune_blocks(&mut w, (n, k), (16, 64), 0.4, 7);
        let x: Vec<i8> = bytes(4, k * m).into_iter().map(|b| b as i8).collect();
        for threads in [1, 2] {
            let mut y = vec![7i32; n * m];
            // SAFETY: available; shapes as promised; |sums| ≤ 8400 · 128² fits i32.
            unsafe { KeptTiles::new(&w, n, k).spmm(threads, &x, &mut y, m) };
            assert_eq!(y, naive_i8(&w, &x, n, k, m), "{threads} thread(s)");
        }
    }
}
