//! The N:M sparse × dense product, driven by a [`CpuSchedule`].
//!
//! Loop nest, outermost first: tasks of `rows_per_task` output rows (in parallel) → token
//! strips of `strip_width` → K blocks of whole groups → rows of the task → the microkernel.
//! The activation tile `x[K block, strip]` is reused from L1 by every row of the task; each
//! row's indices are decoded once per K block and strip into activation offsets.

use super::NmMatrix;
use super::microkernel::{Isa, Offsets, row_strip};
use super::two_of_four::{self, RowBlock};
use crate::execute::kernels::error::{KernelError, check_len};
use crate::ingress::GemmOp;
use crate::schedule::{CpuSchedule, schedule_cpu};
use rayon::prelude::*;

/// Rows ahead whose weights are prefetched: the K-block-major loop reads each row's values
/// for one block and then jumps a whole row ahead, a stride the hardware prefetchers follow
/// poorly once the weights live in L3.
const PREFETCH_ROWS_AHEAD: usize = 4;

impl NmMatrix {
    /// `y[rows × cols] = W · x[k × cols]`, blocked by [`schedule_cpu`] for `threads` workers of
    /// the current rayon pool.
    pub fn spmm(&self, threads: usize, x: &[f32], y: &mut [f32], cols: usize) -> Result<(), KernelError> {
        let op = GemmOp {
            name: String::new(),
            m: cols,
            n: self.rows,
            k: self.k,
        };
        self.spmm_scheduled(&schedule_cpu(&op, threads), x, y, cols)
    }

    /// `y = W · x` with an explicit schedule, so the execution stage can schedule once per op
    /// and callers can study blockings.
    pub fn spmm_scheduled(
        &self,
        schedule: &CpuSchedule,
        x: &[f32],
        y: &mut [f32],
        cols: usize,
    ) -> Result<(), KernelError> {
        check_len("x", x.len(), self.k, cols)?;
        check_len("y", y.len(), self.rows, cols)?;
        if self.rows == 0 || cols == 0 {
            return Ok(());
        }
        if self.k == 0 {
            y.fill(0.0);
            return Ok(());
        }
        self.spmm_on(Isa::detect(), schedule, x, y, cols);
        Ok(())
    }

    /// The product on a given instruction set; shapes already checked and non-empty. Tests use
    /// it to cover every path the machine supports, not only the one detection picks.
    pub(crate) fn spmm_on(&self, isa: Isa, schedule: &CpuSchedule, x: &[f32], y: &mut [f32], cols: usize) {
        let chunk = schedule.rows_per_task.max(1) * cols;
        let task = |(t, y_rows): (usize, &mut [f32])| {
            self.rows_task(isa, schedule, t * schedule.rows_per_task.max(1), x, y_rows, cols)
        };
        if schedule.threads <= 1 {
            y.chunks_mut(chunk).enumerate().for_each(task);
        } else {
            y.par_chunks_mut(chunk).enumerate().for_each(task);
        }
    }

    /// One task: output rows `row0 ..` (as many as `y` holds).
    fn rows_task(&self, isa: Isa, s: &CpuSchedule, row0: usize, x: &[f32], y: &mut [f32], cols: usize) {
        let (n, m) = (self.n, self.m);
        let kept = self.kept_per_row();
        let fast_2of4 = (n, m) == (2, 4) && isa != Isa::Portable;
        let pair_rows = two_of_four::rows_per_pass(isa) >= 2;
        // The 2:4 loop starts K blocks on index-byte boundaries (two groups).
        let align = if fast_2of4 { 8 } else { m };
        let strip = s.strip_width.max(1);
        let k_block = (s.k_block / align).max(1) * align;
        let mut offsets = Offsets::with_capacity(k_block / m * n);
        for c0 in (0..cols).step_by(strip) {
            let width = strip.min(cols - c0);
            for kb0 in (0..self.k).step_by(k_block) {
                let kb1 = (kb0 + k_block).min(self.k);
                let (g0, g1) = (kb0 / m, kb1 / m);
                let mut rows = y.chunks_exact_mut(cols).enumerate().peekable();
                while let Some((r, y_row)) = rows.next() {
                    let row = row0 + r;
                    self.prefetch_block(row + PREFETCH_ROWS_AHEAD, g0, g1);
                    let values = &self.values[row * kept + g0 * n..row * kept + g1 * n];
                    let idx = &self.indices[row * self.row_bytes..][..self.row_bytes];
                    let y_strip = &mut y_row[c0..c0 + width];
                    if !fast_2of4 {
                        self.generic_strip(
                            isa,
                            (row, g0, g1),
                            x,
                            cols,
                            c0,
                            0,
                            y_strip,
                            kb0 > 0,
                            &mut offsets,
                        );
                        continue;
                    }
                    let bytes = kb0 / 8;
                    let first = RowBlock {
                        values,
                        idx: &idx[bytes..],
                        y: y_strip,
                    };
                    let pair = if pair_rows { rows.next() } else { None };
                    let done = match pair {
                        Some((r2, y_row2)) => {
                            let row2 = row0 + r2;
                            let idx2 = &self.indices[row2 * self.row_bytes..][..self.row_bytes];
                            let second = RowBlock {
                                values: &self.values[row2 * kept + g0 * n..row2 * kept + g1 * n],
                                idx: &idx2[bytes..],
                                y: &mut y_row2[c0..c0 + width],
                            };
                            let mut both = [first, second];
                            let done =
                                two_of_four::rows_strip(isa, &mut both, x, cols, (kb0, kb1), c0, kb0 > 0);
                            let [first, second] = both;
                            if done < width {
                                self.generic_strip(
                                    isa,
                                    (row2, g0, g1),
                                    x,
                                    cols,
                                    c0,
                                    done,
                                    second.y,
                                    kb0 > 0,
                                    &mut offsets,
                                );
                            }
                            (done, first.y)
                        }
                        None => {
                            let mut one = [first];
                            let done =
                                two_of_four::rows_strip(isa, &mut one, x, cols, (kb0, kb1), c0, kb0 > 0);
                            let [first] = one;
                            (done, first.y)
                        }
                    };
                    if done.0 < width {
                        self.generic_strip(
                            isa,
                            (row, g0, g1),
                            x,
                            cols,
                            c0,
                            done.0,
                            done.1,
                            kb0 > 0,
                            &mut offsets,
                        );
                    }
                }
            }
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

/// A cache hint; a no-op off x86-64.
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and has no architectural effect; `p` comes from a live slice.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
