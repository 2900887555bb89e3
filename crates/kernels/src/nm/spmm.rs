//! The N:M sparse × dense product, driven by a [`CpuSchedule`].
//!
//! Loop nest, outermost first: tasks of `rows_per_task` output rows (in parallel) → token
//! strips of `strip_width` → K blocks of whole groups → passes of one or two rows of the task
//! → the inline-decoding loop (2:4 or any pattern), with the decoded loop for the portable build
//! and for strip tails narrower than a vector. The activation tile `x[K block, strip]` is
//! reused from L1 by every row of the task, and the task's output tile stays in L1 across
//! K blocks (see `schedule`).

use super::NmMatrix;
use super::any_pattern::{self, Pattern};
use super::microkernel::{Isa, Offsets, RowBlock, row_strip};
use super::two_of_four;
use crate::schedule::CpuSchedule;
use crate::shared_output::for_each_chunk;
use crate::sparse_rows::{RowKernel, grown_blocking, panels, prefetch, spmm_entry_points};

/// Rows ahead whose weights are prefetched: the K-block-major loop reads each row's values
/// for one block and then jumps a whole row ahead, a stride the hardware prefetchers follow
/// poorly once the weights live in L3.
const PREFETCH_ROWS_AHEAD: usize = 4;

/// Tokens from which an AVX-512 product takes the token-lane kernel rather than the
/// feature-lane one, for patterns that have both (`m ≤ 16`; 1:2 with K a multiple of 4 runs
/// as the 2:4 matrix it is). Measured side by side (`sparsegate bench`, 2 threads, speedup
/// over dense, token lanes vs feature lanes):
///
/// * **2:4**, 24 tokens from K = 1024, 28 below. At 12 tokens feature lanes lead everywhere
///   (4096² 1.39× vs 2.02×, 2048² 1.14× vs 1.63×, 1024² 1.04× vs 1.91×, 768×3072 1.15× vs
///   1.39×); at 16 on K ≥ 4096 the two are level to within ±0.2 either way (4096² 1.46× vs
///   1.43×, 11008×4096 1.50× vs 1.69×, 4096×11008 1.63× vs 1.52×); at 24 token lanes lead
///   there (1.51× vs 1.35×, 1.54× vs 1.47×, 1.77× vs 1.53×). On 2048² and 768×3072, 16
///   tokens run 1.14× vs 1.11× and 1.12× vs 0.79×. At K = 768, 24 tokens run 1.28× vs 1.40×
///   (768²) and level (3072×768), 28 run 1.26× vs 1.20× and 1.23× vs 1.10×. (Zen 4/5.)
///   On Emerald Rapids (2 threads, alternated) feature lanes lead at 16 on K = 4096 and
///   11008 (4096² 1.00–1.01× vs 0.84–0.85×, 11008×4096 1.20× vs 1.08×, 4096×11008 1.22× vs
///   1.13×), so 16 takes them; at 24 the two trade places by shape (0.96–1.16× vs 0.89×,
///   1.07× vs 1.02×, 1.02× vs 1.08×), at 32 token lanes lead (0.88–0.93× vs 0.73×).
/// * **Other patterns**, 16 tokens from K = 4096 (4:8, 1:4, 2:8 and 8:16 on 4096²: feature
///   lanes ahead by 1.1–1.4× at 8–12 tokens, level at 16, behind from 24); below, 32 for
///   patterns that keep at least half (4:8 at 24 tokens: 1.14–1.18× vs 1.20–1.52× on 2048²,
///   768×3072, 768², 3072×768; behind from 32), and for sparser ones 16 from K = 1024 (1:4 at
///   16 tokens 1.82× vs 1.62× on 2048², 1.78× vs 1.49× on 768×3072) and 32 below (1:4 at 24
///   tokens 1.85× vs 2.02× on 768², level on 3072×768).
///
/// Both kernels beat what they replaced at these counts by far: 4:8 at 1 token ran 0.84–0.92×
/// dense on token lanes (a token padded to 16 lanes) and runs 1.72× on feature lanes, 1:4
/// 1.30× → 2.23×, 2:8 1.38× → 2.93× (4096²).
fn token_lanes_min_cols(k: usize, (n, m): (usize, usize), two_of_four: bool) -> usize {
    match k {
        _ if two_of_four => {
            if k >= 1024 {
                24
            } else {
                28
            }
        }
        4096.. => 16,
        1024.. if 2 * n < m => 16,
        _ => 32,
    }
}

/// The AVX-512 kernels with their own layouts and activation copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lanes {
    /// `token_lanes.rs`.
    Tokens,
    /// `feature_lanes.rs` (2:4, and other patterns with `m ≤ 16`).
    Features,
}

impl NmMatrix {
    /// Which AVX-512 kernel takes a product with `cols` tokens, if one does: the token-lane
    /// kernel once there are enough tokens to fill its strips ([`token_lanes_min_cols`]);
    /// below that, the feature-lane kernel for patterns with groups of up to 16 (see their
    /// module docs).
    fn lanes_kernel(&self, isa: Isa, cols: usize) -> Option<Lanes> {
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx512 {
            let two_four = self.runs_as_two_of_four();
            let features = two_four || super::feature_lanes::LaneLayout::supports(self.m);
            let min = if features {
                token_lanes_min_cols(self.k, (self.n, self.m), two_four)
            } else {
                // No feature-lane kernel (groups over 16): the generic loop of `any_pattern.rs`
                // is far slower at any token count (1:2 at 4096² took 20.6 ms with 1 token and
                // 0.75 ms at 768², 0.1× dense, where token lanes took 1.76 and 0.12; with 16
                // tokens 5.4 vs 1.7 ms, 0.43× vs 1.37× dense).
                1
            };
            if cols >= min && super::token_lanes::TokenLayout::supports(self.m) {
                return Some(Lanes::Tokens);
            }
            if features {
                return Some(Lanes::Features);
            }
        }
        let _ = (isa, cols);
        None
    }
}

/// Which loop takes an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// The 2:4 loop with its decoding unrolled per index byte.
    TwoOfFour,
    /// The general inline-decoding loop.
    AnyPattern,
    /// Indices decoded into offsets first: the portable fallback.
    Decoded,
}

impl Path {
    fn choose(n: usize, m: usize, isa: Isa) -> Path {
        match (n, m) {
            _ if isa == Isa::Portable => Path::Decoded,
            (2, 4) => Path::TwoOfFour,
            _ => Path::AnyPattern,
        }
    }
}

/// A K block (rows `kb0..kb1` of `x`) and a token strip (`c0 .. c0 + width`).
#[derive(Debug, Clone, Copy)]
struct Block {
    kb0: usize,
    kb1: usize,
    c0: usize,
    width: usize,
}

impl NmMatrix {
    spmm_entry_points! {
        /// So the execution stage can schedule once per op and callers can study blockings.
    }

    /// One task: output rows `row0 ..` (as many as `y` holds).
    #[allow(clippy::too_many_arguments)]
    fn rows_task(
        &self,
        isa: Isa,
        s: &CpuSchedule,
        row0: usize,
        (x, xs): (&[f32], usize),
        y: &mut [f32],
        (cols, panel): (usize, std::ops::Range<usize>),
    ) {
        let path = Path::choose(self.n, self.m, isa);
        // The 2:4 loop starts K blocks on index-byte boundaries (two groups).
        let align = if path == Path::TwoOfFour { 8 } else { self.m };
        let k_block = (s.k_block / align).max(1) * align;
        let per_pass = if path == Path::Decoded {
            1
        } else {
            isa.rows_per_pass()
        };
        let strip = s.strip_width.max(1);
        let mut offsets = Offsets::with_capacity(k_block / self.m * self.n);
        for c0 in panel.clone().step_by(strip) {
            let width = strip.min(panel.end - c0);
            for kb0 in (0..self.k).step_by(k_block) {
                let kb1 = (kb0 + k_block).min(self.k);
                let block = Block { kb0, kb1, c0, width };
                let mut rest = &mut *y;
                let mut row = row0;
                while !rest.is_empty() {
                    let take = per_pass.min(rest.len() / cols);
                    let (now, later) = rest.split_at_mut(take * cols);
                    self.prefetch_block(row + PREFETCH_ROWS_AHEAD, kb0 / self.m, kb1 / self.m);
                    self.pass(isa, path, row, now, (x, xs), cols, block, &mut offsets);
                    (rest, row) = (later, row + take);
                }
            }
        }
    }

    /// One or two output rows (`y_rows`, from `row`) over one K block and strip.
    #[allow(clippy::too_many_arguments)]
    fn pass(
        &self,
        isa: Isa,
        path: Path,
        row: usize,
        y_rows: &mut [f32],
        (x, xs): (&[f32], usize),
        cols: usize,
        b: Block,
        offsets: &mut Offsets,
    ) {
        let (g0, g1) = (b.kb0 / self.m, b.kb1 / self.m);
        let accumulate = b.kb0 > 0;
        let pattern = Pattern {
            n: self.n,
            m: self.m,
            bits: self.bits,
        };
        let (kb, c0) = ((b.kb0, b.kb1), b.c0);
        let mut blocks: [Option<RowBlock<'_>>; 2] = [None, None];
        for ((i, y_row), slot) in y_rows.chunks_exact_mut(cols).enumerate().zip(&mut blocks) {
            *slot = Some(self.row_block(row + i, (g0, g1), &mut y_row[c0..c0 + b.width]));
        }
        let done = match (path, &mut blocks) {
            (Path::TwoOfFour, [Some(a), Some(z)]) => {
                two_of_four::rows_strip(isa, &mut [a.reborrow(), z.reborrow()], x, xs, kb, c0, accumulate)
            }
            (Path::TwoOfFour, [Some(a), None]) => {
                two_of_four::rows_strip(isa, &mut [a.reborrow()], x, xs, kb, c0, accumulate)
            }
            (Path::AnyPattern, [Some(a), Some(z)]) => {
                let mut both = [a.reborrow(), z.reborrow()];
                any_pattern::rows_strip(isa, pattern, &mut both, x, xs, (g0, g1), c0, accumulate)
            }
            (Path::AnyPattern, [Some(a), None]) => {
                any_pattern::rows_strip(isa, pattern, &mut [a.reborrow()], x, xs, (g0, g1), c0, accumulate)
            }
            _ => 0,
        };
        if done < b.width {
            for (i, block) in blocks.iter_mut().flatten().enumerate() {
                self.generic_strip(
                    isa,
                    (row + i, g0, g1),
                    x,
                    xs,
                    c0,
                    done,
                    block.y,
                    accumulate,
                    offsets,
                );
            }
        }
    }

    /// Row `r`'s values and indices for groups `g0..g1`, with its output strip.
    fn row_block<'a>(&'a self, r: usize, (g0, g1): (usize, usize), y: &'a mut [f32]) -> RowBlock<'a> {
        let kept = self.kept_per_row();
        RowBlock {
            values: &self.values[r * kept + g0 * self.n..r * kept + g1 * self.n],
            idx: &self.indices[r * self.row_bytes..][..self.row_bytes],
            y,
        }
    }

    /// The generic path for one row over groups `g0..g1`, columns `c0 + done ..` of the strip
    /// `y_strip` (which starts at column `c0`): indices decoded into offsets, then the
    /// microkernel.
    #[allow(clippy::too_many_arguments)]
    fn generic_strip(
        &self,
        isa: Isa,
        (row, g0, g1): (usize, usize, usize),
        x: &[f32],
        cols: usize,
        c0: usize,
        done: usize,
        y_strip: &mut [f32],
        accumulate: bool,
        offsets: &mut Offsets,
    ) {
        let (n, m) = (self.n, self.m);
        let idx = &self.indices[row * self.row_bytes..][..self.row_bytes];
        let kept = self.kept_per_row();
        offsets.clear();
        for g in g0..g1 {
            for e in g * n..(g + 1) * n {
                offsets.push((g * m + super::indices::get(idx, e, self.bits)) * cols);
            }
        }
        let values = &self.values[row * kept + g0 * n..row * kept + g1 * n];
        row_strip(
            isa,
            values,
            offsets,
            x,
            c0 + done,
            &mut y_strip[done..],
            accumulate,
        );
    }

    /// Ask for the values and index bytes of `row`'s groups `g0..g1` to be brought into cache.
    #[inline(always)]
    fn prefetch_block(&self, row: usize, g0: usize, g1: usize) {
        if row >= self.rows {
            return;
        }
        let kept = self.kept_per_row();
        let values = &self.values[row * kept + g0 * self.n..row * kept + g1 * self.n];
        for line in values.chunks(16) {
            prefetch(line.as_ptr().cast());
        }
        prefetch(self.indices[row * self.row_bytes + g0 * self.n * self.bits / 8..].as_ptr());
    }
}

impl RowKernel for NmMatrix {
    fn rows(&self) -> usize {
        self.rows
    }

    fn copies_activations(&self, isa: Isa, cols: usize) -> bool {
        self.lanes_kernel(isa, cols).is_some()
    }

    fn k(&self) -> usize {
        self.k
    }

    /// The product on a given instruction set, `x` rows `xs` apart; shapes already checked and
    /// non-empty. Tests use it to cover every path the machine supports, not only the one
    /// detection picks.
    fn spmm_on(
        &self,
        isa: Isa,
        schedule: &CpuSchedule,
        (x, xs): (&[f32], usize),
        y: &mut [f32],
        cols: usize,
    ) {
        match self.lanes_kernel(isa, cols) {
            Some(Lanes::Tokens) => {
                return super::token_lanes::spmm(self.token_layout(), schedule.threads, (x, xs), y, cols);
            }
            Some(Lanes::Features) => {
                return super::feature_lanes::spmm(self.lane_layout(), schedule.threads, (x, xs), y, cols);
            }
            None => {}
        }
        // Grown like the other sparse formats: a row keeps n/m of each K block.
        let kept = (self.k / self.m * self.n) as f64;
        let (k_block, rows_per_task) = grown_blocking(schedule, self.rows, self.k, kept, (8, 1));
        let grown = CpuSchedule {
            k_block,
            rows_per_task,
            ..*schedule
        };
        let schedule = &grown;
        let chunk = schedule.rows_per_task.max(1) * cols;
        // Column panels (see `panels`): the activations stay in L2 across tasks.
        for range in panels(self.k, cols, schedule.strip_width) {
            let task = |(t, y_rows): (usize, &mut [f32])| {
                self.rows_task(
                    isa,
                    schedule,
                    t * schedule.rows_per_task.max(1),
                    (x, xs),
                    y_rows,
                    (cols, range.clone()),
                )
            };
            for_each_chunk(y, chunk, schedule.threads > 1, task);
        }
    }
}
