//! How a CPU kernel blocks one product for the caches and splits it over threads.
//!
//! The sparse kernels stream one kept weight at a time and, for each, load a contiguous strip
//! of an activation row (`x[k, strip]`). Every FMA therefore needs one load, which only L1 can
//! feed at full FMA rate. The schedule picks a strip of tokens and a block of K such that the
//! activation tile they span stays in L1 while every row of a task sweeps over it, and sizes
//! tasks so each thread's share of the weights stays in L2 between strips.
//!
//! It lives beside the kernels because its budgets follow from their inner loop; the gate's
//! `schedule` stage calls [`schedule_cpu`] with an op's dimensions.

/// L1 data bytes the activation tile may use: most of a 32–48 KiB L1d, leaving room for the
/// weights and outputs streaming through.
pub const L1_TILE_BUDGET: usize = 32 << 10;

/// L2 bytes a task's weights may use, so they are re-read from L2 (not DRAM) for every strip.
pub const L2_WEIGHT_BUDGET: usize = 512 << 10;

/// L1 bytes the task's output tile may use: the rows of a task revisit their strip of `y`
/// once per K block, so the tile should stay in L1 beside the activation tile. It also bounds
/// the rows whose weights are streamed concurrently, which the hardware prefetchers follow
/// only for a few dozen streams.
pub const L1_OUTPUT_BUDGET: usize = 8 << 10;

/// Widest token strip: 128 f32 is two 64-wide register blocks, enough to amortise decoding
/// the sparse indices while still leaving a useful K block in L1.
pub const MAX_STRIP: usize = 128;

/// Smallest and largest K block (elements of K per pass over a strip).
const MIN_K_BLOCK: usize = 16;
const MAX_K_BLOCK: usize = 1024;

/// Tasks per thread: a few, so an uneven split of rows still balances.
const TASKS_PER_THREAD: usize = 4;

/// How a CPU kernel blocks one op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSchedule {
    /// Worker threads (≥ 1).
    pub threads: usize,
    /// Tokens (columns of `x` and `y`) per strip: the M block.
    pub strip_width: usize,
    /// Reduction elements per pass over a strip: the K block. A sparse kernel rounds it down to
    /// whole groups.
    pub k_block: usize,
    /// Output rows per parallel task.
    pub rows_per_task: usize,
    /// Bytes one task keeps hot: the activation tile, its output tile and its rows'
    /// dense-equivalent weights.
    pub working_set_bytes: usize,
}

/// Block `Yᵀ[n × m] = W[n × k] · Xᵀ[k × m]` (`m` tokens, `n` output rows, `k` the reduction)
/// for a CPU with `threads` workers.
pub fn schedule_cpu(m: usize, n: usize, k: usize, threads: usize) -> CpuSchedule {
    let threads = threads.max(1);
    let strip_width = round_up(m.max(1), 8).min(MAX_STRIP);
    let k_block = round_down(L1_TILE_BUDGET / (strip_width * 4), 8).clamp(MIN_K_BLOCK, MAX_K_BLOCK);
    let rows = n.max(1);
    let tasks = if threads == 1 {
        1
    } else {
        threads * TASKS_PER_THREAD
    };
    let balanced = rows.div_ceil(tasks);
    let fits_l2 = (L2_WEIGHT_BUDGET / (k.max(1) * 4)).max(1);
    let fits_l1 = (L1_OUTPUT_BUDGET / (strip_width * 4)).max(1);
    let rows_per_task = balanced.min(fits_l2).min(fits_l1).max(1);
    let working_set_bytes =
        (k_block.min(k.max(1)) * strip_width + rows_per_task * strip_width + rows_per_task * k) * 4;
    CpuSchedule {
        threads,
        strip_width,
        k_block,
        rows_per_task,
        working_set_bytes,
    }
}

/// How a weight-stationary kernel splits its output into parallel tasks: `row_units` (row
/// tiles or blocks) in chunks of at most `max_rows`, × `col_units` (token tiles or panels) in
/// groups, each split as evenly as the units allow.
///
/// At least `TASKS_PER_THREAD` tasks a worker where the shape allows, and a whole number
/// of row chunks per worker: eleven equal tasks on two workers leave one idle for a twelfth
/// of the product (the int8 token-lane kernel at 2048³ lost ~8 % to it, issue 20).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskGrid {
    row_units: usize,
    col_units: usize,
    row_chunks: usize,
    col_groups: usize,
}

impl TaskGrid {
    /// The grid for `threads` workers.
    pub fn new(row_units: usize, col_units: usize, threads: usize, max_rows: usize) -> TaskGrid {
        let threads = threads.max(1);
        let (rows, cols) = (row_units.max(1), col_units.max(1));
        let want = threads * TASKS_PER_THREAD;
        let row_chunks = rows
            .div_ceil(max_rows.max(1))
            .max(want.min(rows))
            .next_multiple_of(threads)
            .min(rows);
        let col_groups = want.div_ceil(row_chunks).min(cols);
        TaskGrid {
            row_units,
            col_units,
            row_chunks,
            col_groups,
        }
    }

    /// Tasks in the grid.
    pub fn tasks(&self) -> usize {
        self.row_chunks * self.col_groups
    }

    /// Task `t`'s row units and column units.
    pub fn task(&self, t: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let (chunk, group) = (t / self.col_groups, t % self.col_groups);
        (
            even_part(self.row_units, self.row_chunks, chunk),
            even_part(self.col_units, self.col_groups, group),
        )
    }
}

/// Part `i` of `len` units cut into `parts` parts whose sizes differ by at most one.
fn even_part(len: usize, parts: usize, i: usize) -> std::ops::Range<usize> {
    len * i / parts..len * (i + 1) / parts
}

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

fn round_down(v: usize, to: usize) -> usize {
    v / to * to
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_tile_fits_the_l1_budget() {
        for m in [1, 7, 64, 128, 3136] {
            let s = schedule_cpu(m, 768, 768, 2);
            assert!(s.strip_width.is_multiple_of(8) && s.strip_width <= MAX_STRIP);
            assert!(s.k_block * s.strip_width * 4 <= L1_TILE_BUDGET, "{s:?}");
        }
    }

    #[test]
    fn bert_shape_uses_two_register_blocks_and_a_64_deep_k_block() {
        let s = schedule_cpu(128, 2304, 768, 2);
        assert_eq!((s.strip_width, s.k_block), (128, 64));
    }

    #[test]
    fn small_m_gets_a_narrow_strip_and_a_deep_k_block() {
        let s = schedule_cpu(4, 768, 768, 1);
        assert_eq!(s.strip_width, 8);
        assert_eq!(s.k_block, 1024);
    }

    #[test]
    fn rows_split_into_several_tasks_per_thread() {
        // Few tokens: the output tile is small, so load balance sets the task size.
        let s = schedule_cpu(8, 768, 768, 2);
        assert_eq!(s.rows_per_task, 96);
        // One thread runs one task's worth of rows, but still in L2-sized row blocks.
        let one = schedule_cpu(8, 768, 768, 1);
        assert_eq!(one.rows_per_task, L2_WEIGHT_BUDGET / (768 * 4));
    }

    #[test]
    fn output_tile_fits_the_l1_budget() {
        let s = schedule_cpu(128, 3072, 768, 2);
        assert_eq!(s.rows_per_task, 16);
        assert!(s.rows_per_task * s.strip_width * 4 <= L1_OUTPUT_BUDGET);
    }

    #[test]
    fn task_weights_are_capped_by_l2() {
        let s = schedule_cpu(128, 8192, 16384, 1);
        assert!(s.rows_per_task * 16384 * 4 <= L2_WEIGHT_BUDGET);
    }

    #[test]
    fn task_grid_covers_every_unit_once_and_balances_workers() {
        for (rows, cols, threads, max_rows) in [
            (342, 32, 2, 32),
            (683, 8, 2, 32),
            (5, 3, 2, 32),
            (1, 1, 4, 8),
            (100, 1, 1, 7),
            (0, 0, 2, 1),
        ] {
            let g = TaskGrid::new(rows, cols, threads, max_rows);
            let mut seen = vec![0u32; rows * cols];
            for t in 0..g.tasks() {
                let (r, c) = g.task(t);
                assert!(r.len() <= max_rows, "{rows}x{cols}: {r:?}");
                for (i, j) in r.flat_map(|i| c.clone().map(move |j| (i, j))) {
                    seen[i * cols + j] += 1;
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "{rows}x{cols} on {threads}");
        }
        // 2048³ int8: 342 row tiles of at most 32 → 12 chunks (not 11), six a worker.
        let g = TaskGrid::new(342, 32, 2, 32);
        assert_eq!(g.tasks() % 2, 0);
        assert!(g.tasks() >= 2 * TASKS_PER_THREAD);
        let sizes: Vec<usize> = (0..g.tasks()).map(|t| g.task(t).0.len()).collect();
        assert!(
            sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1,
            "{sizes:?}"
        );
    }

    #[test]
    fn degenerate_shapes_still_schedule() {
        let s = schedule_cpu(0, 0, 0, 0);
        assert!(s.threads == 1 && s.rows_per_task >= 1 && s.strip_width >= 8);
    }
}
