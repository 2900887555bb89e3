//! Block sparsity in BSR (block compressed sparse row): the weight matrix cut into `br × bc`
//! blocks, only non-zero blocks stored (row-major inside a block), one u32 block-column index
//! per block and one pointer per block row.
//!
//! Index cost is one u32 per `br·bc` values, and the rows of a block row read the same
//! activation rows, so the kernel takes several rows per pass (`Isa::rows_per_pass`): one
//! load of `x` feeds an FMA per row, which is what lets block sparsity approach dense
//! efficiency × 1/density where CSR cannot. Products with 1–8 tokens (AVX2) or 1–48
//! (AVX-512) take `bsr_few_tokens.rs` instead: the tokens of a K row in one to three
//! vectors, so a whole block row's rows share each activation load.

use super::bsr_few_tokens;
use super::error::{KernelError, check_len};
use super::nm::Isa;
use super::sparse_rows::{Entries, RowKernel, grown_blocking, panels, rows_strip, spmm_entry_points};
use crate::schedule::CpuSchedule;
use crate::shared_output::for_each_chunk;

/// A row-major `rows × k` weight matrix stored as its non-zero `br × bc` blocks.
///
/// Fields are private so the invariants the kernel's loads rely on hold: `br` divides `rows`,
/// `bc` divides `k`, block pointers are non-decreasing to `block_cols.len()`, block columns are
/// strictly increasing within a block row and `< k / bc`, and `values` holds `br·bc` per block.
#[derive(Debug, Clone, PartialEq)]
pub struct BsrMatrix {
    rows: usize,
    k: usize,
    br: usize,
    bc: usize,
    block_ptr: Vec<u32>,
    block_cols: Vec<u32>,
    values: Vec<f32>,
}

/// Rows `r0 .. r0 + R` of one block row's blocks in a K range.
#[derive(Clone, Copy)]
struct BlockEntries<'a, const R: usize> {
    /// The blocks' values, `br·bc` each.
    values: &'a [f32],
    block_cols: &'a [u32],
    r0: usize,
    bc: usize,
}

impl<const R: usize> Entries<R> for BlockEntries<'_, R> {
    #[inline(always)]
    fn for_each(self, mut f: impl FnMut(usize, [f32; R])) {
        let bc = self.bc;
        let per_block = self.values.len() / self.block_cols.len().max(1);
        for (block, &bcol) in self.values.chunks_exact(per_block.max(1)).zip(self.block_cols) {
            let rows: [&[f32]; R] = std::array::from_fn(|i| &block[(self.r0 + i) * bc..][..bc]);
            let base = bcol as usize * bc;
            // `c` picks the same column from each of the R rows: an index, not an iteration.
            #[allow(clippy::needless_range_loop)]
            for c in 0..bc {
                f(base + c, std::array::from_fn(|i| rows[i][c]));
            }
        }
    }

    fn max_row(self) -> Option<usize> {
        self.block_cols.last().map(|&b| (b as usize + 1) * self.bc - 1)
    }
}

impl BsrMatrix {
    /// Compress a row-major `rows × k` matrix into `br × bc` blocks, keeping every block with a
    /// weight that is not `0.0`. Prune first with `prune_blocks` to choose a density.
    ///
    /// Refuses block shapes that do not tile the matrix: lowering sends those to dense.
    pub fn compress(
        w: &[f32],
        rows: usize,
        k: usize,
        br: usize,
        bc: usize,
    ) -> Result<BsrMatrix, KernelError> {
        if br == 0 || bc == 0 || !rows.is_multiple_of(br) || !k.is_multiple_of(bc) {
            return Err(KernelError::BlockShape { rows, k, br, bc });
        }
        check_len("w", w.len(), rows, k)?;
        let too_big = || KernelError::Overflow { rows, cols: k };
        let mut block_ptr = vec![0u32];
        let (mut block_cols, mut values) = (Vec::new(), Vec::new());
        for brow in 0..rows / br {
            for bcol in 0..k / bc {
                let at = |r: usize| &w[(brow * br + r) * k + bcol * bc..][..bc];
                if (0..br).any(|r| at(r).iter().any(|&v| v != 0.0)) {
                    block_cols.push(u32::try_from(bcol).map_err(|_| too_big())?);
                    (0..br).for_each(|r| values.extend_from_slice(at(r)));
                }
            }
            block_ptr.push(u32::try_from(block_cols.len()).map_err(|_| too_big())?);
        }
        Ok(BsrMatrix {
            rows,
            k,
            br,
            bc,
            block_ptr,
            block_cols,
            values,
        })
    }

    /// The dense `rows × k` form.
    pub fn decompress(&self) -> Vec<f32> {
        let (br, bc) = (self.br, self.bc);
        let mut w = vec![0.0; self.rows * self.k];
        for brow in 0..self.block_ptr.len() - 1 {
            for b in self.block_ptr[brow] as usize..self.block_ptr[brow + 1] as usize {
                let col0 = self.block_cols[b] as usize * bc;
                for r in 0..br {
                    let dst = (brow * br + r) * self.k + col0;
                    w[dst..dst + bc].copy_from_slice(&self.values[(b * br + r) * bc..][..bc]);
                }
            }
        }
        w
    }

    /// Output rows (N of the GEMM).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Reduction length (K of the GEMM).
    pub fn k(&self) -> usize {
        self.k
    }

    /// The block shape, `(rows, cols)`.
    pub fn block_shape(&self) -> (usize, usize) {
        (self.br, self.bc)
    }

    /// The stored form: block-row pointers, block columns, and the blocks' values
    /// (`br·bc` each, row-major), for kernels that lay the blocks out their own way.
    pub(crate) fn parts(&self) -> (&[u32], &[u32], &[f32]) {
        (&self.block_ptr, &self.block_cols, &self.values)
    }

    /// Stored blocks.
    pub fn blocks(&self) -> usize {
        self.block_cols.len()
    }

    /// Bytes of stored values (f32), the zeros inside kept blocks included.
    pub fn value_bytes(&self) -> usize {
        self.values.len() * 4
    }

    /// Bytes of index metadata: a u32 block column per block plus the block-row pointers.
    pub fn metadata_bytes(&self) -> usize {
        (self.block_cols.len() + self.block_ptr.len()) * 4
    }

    spmm_entry_points! {
        /// Tasks are rounded up to whole block rows, K blocks to whole blocks.
    }

    /// Block rows `brow0 ..` (as many as `y` holds).
    fn task(
        &self,
        isa: Isa,
        (strip, k_block): (usize, usize),
        brow0: usize,
        (x, xs): (&[f32], usize),
        y: &mut [f32],
        (cols, panel): (usize, std::ops::Range<usize>),
    ) {
        let (br, bc) = (self.br, self.bc);
        let block_rows = y.len() / cols / br;
        let strip = strip.max(1);
        let per_pass = if br.is_multiple_of(2) {
            isa.rows_per_pass()
        } else {
            1
        };
        let mut cursor = vec![0usize; block_rows];
        for c0 in panel.clone().step_by(strip) {
            let width = strip.min(panel.end - c0);
            for (i, c) in cursor.iter_mut().enumerate() {
                *c = self.block_ptr[brow0 + i] as usize;
            }
            for kb0 in (0..self.k).step_by(k_block) {
                let kb1 = (kb0 + k_block).min(self.k);
                for (i, (y_brow, c)) in y.chunks_exact_mut(br * cols).zip(&mut cursor).enumerate() {
                    let end = self.block_ptr[brow0 + i + 1] as usize;
                    let run = &self.block_cols[*c..end];
                    let len = run.partition_point(|&b| (b as usize) * bc < kb1);
                    let (cols_run, values) = (&run[..len], &self.values[*c * br * bc..(*c + len) * br * bc]);
                    let acc = kb0 > 0;
                    let mut rows = y_brow.chunks_exact_mut(cols);
                    let mut r0 = 0;
                    while r0 < br {
                        if per_pass == 2 {
                            let (a, b) = (rows.next(), rows.next());
                            if let (Some(a), Some(b)) = (a, b) {
                                let e = BlockEntries::<2> {
                                    values,
                                    block_cols: cols_run,
                                    r0,
                                    bc,
                                };
                                let strips = [&mut a[c0..c0 + width], &mut b[c0..c0 + width]];
                                rows_strip(isa, e, x, xs, c0, strips, acc);
                            }
                            r0 += 2;
                        } else {
                            if let Some(a) = rows.next() {
                                let e = BlockEntries::<1> {
                                    values,
                                    block_cols: cols_run,
                                    r0,
                                    bc,
                                };
                                rows_strip(isa, e, x, xs, c0, [&mut a[c0..c0 + width]], acc);
                            }
                            r0 += 1;
                        }
                    }
                    *c += len;
                }
            }
        }
    }
}

impl RowKernel for BsrMatrix {
    fn rows(&self) -> usize {
        self.rows
    }

    fn k(&self) -> usize {
        self.k
    }

    /// The product on a given instruction set; shapes checked and non-empty.
    fn spmm_on(
        &self,
        isa: Isa,
        schedule: &CpuSchedule,
        (x, xs): (&[f32], usize),
        y: &mut [f32],
        cols: usize,
    ) {
        // Few tokens: the few-token kernel (AVX2 + FMA to 8 tokens, AVX-512 to 48). At 90%
        // sparsity with 16×16 blocks, × dense, the loop below vs it: 4096² 1.44 vs 2.45 at 1
        // token, 2.15 vs 3.73 at 4, 2.86 vs 4.79 at 8; 768² 0.76 vs 1.57 and 2.92 vs 6.02 at 1
        // and 8; 11008×4096 2.55 vs 3.85 and 2.98 vs 4.79; from 12 to 48 tokens 1.8–3.4 vs
        // 4.4–5.6 on 4096², 11008×4096, 4096×11008 and 2048², and 0.3–0.9 vs 0.6–1.6 with
        // 4×4, 1×16, 2×8 and 8×1 blocks at 25–50% (`sparsegate bench`, 2 threads, against
        // the dense comparator of each run).
        if cols <= bsr_few_tokens::max_cols(isa) {
            let blocks = bsr_few_tokens::Blocks {
                br: self.br,
                bc: self.bc,
                block_ptr: &self.block_ptr,
                block_cols: &self.block_cols,
                values: &self.values,
            };
            return bsr_few_tokens::spmm(&blocks, (self.k, isa), schedule.threads, (x, xs), y, cols);
        }
        let per_row = self.values.len() as f64 / self.rows.max(1) as f64;
        let (k_block, rows_per_task) =
            grown_blocking(schedule, self.rows, self.k, per_row, (self.bc, self.br));
        let block_rows_per_task = (rows_per_task / self.br).max(1);
        let chunk = block_rows_per_task * self.br * cols;
        for range in panels(self.k, cols, schedule.strip_width) {
            let task = |(t, y_rows): (usize, &mut [f32])| {
                self.task(
                    isa,
                    (schedule.strip_width, k_block),
                    t * block_rows_per_task,
                    (x, xs),
                    y_rows,
                    (cols, range.clone()),
                )
            };
            for_each_chunk(y, chunk, schedule.threads > 1, task);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prune::prune_blocks;
    use crate::reference::gemm_naive;
    use crate::schedule::schedule_cpu;
    use crate::testing::{assert_close, data};
    use proptest::prelude::*;

    #[allow(clippy::too_many_arguments)]
    fn check(
        brs: usize,
        kbs: usize,
        br: usize,
        bc: usize,
        cols: usize,
        density: f64,
        threads: usize,
        seed: u64,
    ) {
        let (rows, k) = (brs * br, kbs * bc);
        let mut w = data(rows * k, seed);
        prune_blocks(&mut w, rows, k, br, bc, density);
        let x = data(k * cols, seed + 1);
        let a = BsrMatrix::compress(&w, rows, k, br, bc).unwrap();
        assert_eq!(a.decompress(), w, "compress then decompress is the identity");
        assert_eq!(a.blocks(), crate::prune::kept_count(brs * kbs, density));
        let mut want = vec![0.0; rows * cols];
        gemm_naive(&w, &x, &mut want, rows, k, cols);
        let schedule = schedule_cpu(cols, rows, k, threads);
        for isa in Isa::available() {
            let mut y = vec![f32::NAN; rows * cols];
            a.spmm_on(isa, &schedule, (&x, cols), &mut y, cols);
            assert_close(&y, &want, k, &format!("{isa:?} {br}x{bc}"));
        }
        let mut y = vec![f32::NAN; rows * cols];
        a.spmm(threads, &x, &mut y, cols).unwrap();
        assert_close(&y, &want, k, "spmm");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn issue_3_bsr_matches_the_naive_oracle(
            brs in 1usize..6, kbs in 1usize..8, br in 1usize..6, bc in 1usize..20,
            cols in 1usize..300, density in 0.0f64..=1.0, threads in 1usize..3, seed: u64,
        ) {
            check(brs, kbs, br, bc, cols, density, threads, seed);
        }
    }

    /// 1–48 tokens take `bsr_few_tokens.rs` (a ymm to 8, one to three zmm past): block
    /// heights that split into register tiles of 16, 8, 4, 2 and 1 rows, more block rows
    /// than one task, empty block rows, both thread counts.
    #[test]
    fn issue_3_bsr_few_tokens_cover_every_row_tile() {
        for cols in (1..=17).chain([24, 31, 32, 33, 47, 48]) {
            for (brs, kbs, br, bc, density) in [
                (9, 7, 16, 16, 0.3),
                (4, 5, 31, 2, 0.5),
                (5, 4, 13, 3, 0.5),
                (6, 9, 7, 5, 0.2),
                (3, 3, 1, 1, 0.6),
            ] {
                check(brs, kbs, br, bc, cols, density, 1 + cols % 2, 40 + cols as u64);
            }
        }
    }

    #[test]
    fn issue_3_bsr_on_blocked_shapes() {
        check(5, 70, 16, 16, 133, 0.1, 2, 3);
        check(8, 40, 4, 8, 300, 0.5, 1, 4);
    }

    #[test]
    fn issue_3_bsr_refuses_blocks_that_do_not_tile() {
        assert!(matches!(
            BsrMatrix::compress(&[0.0; 12], 3, 4, 2, 2),
            Err(KernelError::BlockShape { .. })
        ));
        assert!(BsrMatrix::compress(&[0.0; 12], 3, 4, 0, 2).is_err());
    }

    #[test]
    fn issue_3_bsr_reports_its_bytes() {
        // 2×4 matrix, 2×2 blocks, the right one non-zero.
        let w = [0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 2.0, 0.0];
        let a = BsrMatrix::compress(&w, 2, 4, 2, 2).unwrap();
        assert_eq!(
            (a.blocks(), a.value_bytes(), a.metadata_bytes()),
            (1, 16, (1 + 2) * 4)
        );
    }
}
