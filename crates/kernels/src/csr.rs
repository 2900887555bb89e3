//! Unstructured sparsity in CSR (compressed sparse row): per output row, the kept weights and
//! their K indices (u32), plus one row pointer per row.
//!
//! With AVX-512 and at least 9 tokens the product runs on a K-blocked execution copy
//! (`csr_blocks.rs`, an activation tile of 128 K rows × up to 128 tokens); with AVX-512 and
//! 1–8 tokens, on one of the few-token kernels of `csr_gather.rs` (gathers from a
//! token-major copy for 1–2, a token-minor copy for 2–8: `csr_gather::Loop`). Otherwise it streams each
//! row's kept weights and, for each, FMAs a contiguous strip of the activation row it names
//! (`sparse_rows.rs`): token strips of the panel-major activation
//! copy (`PanelX`, one contiguous run per K block instead of a page per K row) → tasks of rows
//! in parallel → K blocks grown for the density → rows. Column indices are sorted within a
//! row, so a row's share of a K block is a contiguous run found by a cursor that only moves
//! forward.

use super::csr_blocks::{self, CsrBlocks};
use super::csr_gather::{self, GATHER_MAX_COLS};
use super::error::{KernelError, check_len};
use super::kept::{F32, Values};
use super::nm::Isa;
use super::sparse_rows::{
    Entries, MAX_STRIP, PanelX, RowKernel, grown_blocking, rows_strip, spmm_entry_points,
};
use crate::schedule::CpuSchedule;
use crate::shared_output::for_each_chunk;

/// A row-major `rows × k` weight matrix with only its non-zeros stored.
///
/// Fields are private so the invariants the kernel's loads rely on hold: `row_ptr` is
/// non-decreasing from 0 to `values.len()`, and within a row the column indices are strictly
/// increasing and `< k`.
#[derive(Debug, Clone, PartialEq)]
pub struct CsrMatrix {
    rows: usize,
    k: usize,
    row_ptr: Vec<u32>,
    col_idx: Vec<u32>,
    values: Vec<f32>,
    /// The K-blocked execution copy, built on the first AVX-512 product with many tokens.
    blocks: BlocksCache<F32>,
}

/// A lazily built execution copy: derived from the other fields, so it takes no part in
/// equality, and a clone keeps whatever was built.
#[derive(Clone)]
pub(crate) struct BlocksCache<T: Values>(std::sync::OnceLock<CsrBlocks<T>>);

impl<T: Values> Default for BlocksCache<T> {
    fn default() -> BlocksCache<T> {
        BlocksCache(std::sync::OnceLock::new())
    }
}

impl<T: Values> BlocksCache<T> {
    /// The copy, built by `build` on first use.
    pub(crate) fn get_or_init(&self, build: impl FnOnce() -> CsrBlocks<T>) -> &CsrBlocks<T> {
        self.0.get_or_init(build)
    }

    /// Its bytes, 0 until built.
    pub(crate) fn resident_bytes(&self) -> usize {
        self.0.get().map_or(0, CsrBlocks::resident_bytes)
    }
}

impl<T: Values> PartialEq for BlocksCache<T> {
    fn eq(&self, _: &BlocksCache<T>) -> bool {
        true
    }
}

impl<T: Values> std::fmt::Debug for BlocksCache<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.get() {
            Some(b) => write!(f, "BlocksCache({} resident bytes)", b.resident_bytes()),
            None => f.write_str("BlocksCache(not built)"),
        }
    }
}

/// Tokens from which the AVX-512 product takes the K-blocked kernel (`csr_blocks.rs`, strips
/// of 128 tokens, the last one padded to a vector); below, one of the few-token kernels of
/// `csr_gather.rs` ([`csr_gather::Loop::for_tokens`]). Measured at 90% sparsity (`sparsegate
/// bench`, 2 threads): the blocks kernel took 0.91 vs 1.11 ms at 4 tokens on 4096² and 0.93
/// vs 1.90 ms at 8 against gathers, 0.92–1.13 vs 1.99–2.66 at 12–48 against the shared loop;
/// the token-minor kernel then beat it at 3–8 tokens on every shape tried (× dense, blocks vs
/// token-minor: 4096² 1.63 vs 2.18 at 3 tokens, 2.05 vs 2.99 at 8; 768² 0.88 vs 1.66 and 2.35
/// vs 4.14; 3072×768 1.03 vs 2.03 and 1.74 vs 4.43; 768×3072, 2048² and 11008×4096 likewise).
pub(crate) const BLOCKS_MIN_COLS: usize = GATHER_MAX_COLS + 1;

#[derive(Clone, Copy)]
struct CsrEntries<'a> {
    values: &'a [f32],
    cols: &'a [u32],
}

impl Entries<1> for CsrEntries<'_> {
    #[inline(always)]
    fn for_each(self, mut f: impl FnMut(usize, [f32; 1])) {
        for (&v, &c) in self.values.iter().zip(self.cols) {
            f(c as usize, [v]);
        }
    }

    fn max_row(self) -> Option<usize> {
        // Sorted within a row: the last is the largest.
        self.cols.last().map(|&c| c as usize)
    }
}

/// The non-zeros of row-major `rows × k` weights (`w.len() == rows · k`, `k` within u32),
/// row by row: where each row's kept weights end (after a leading 0), their columns and
/// their values. Zero is `T::default()`; a NaN is kept.
pub(crate) fn nonzero_rows<T: Copy + PartialEq + Default>(
    w: &[T],
    rows: usize,
    k: usize,
) -> (Vec<usize>, Vec<u32>, Vec<T>) {
    let mut ends = Vec::with_capacity(rows + 1);
    ends.push(0);
    let (mut cols, mut values) = (Vec::new(), Vec::new());
    for row in w.chunks_exact(k.max(1)).take(rows) {
        for (c, &v) in row.iter().enumerate() {
            if v != T::default() {
                cols.push(c as u32);
                values.push(v);
            }
        }
        ends.push(values.len());
    }
    ends.resize(rows + 1, values.len());
    (ends, cols, values)
}

impl CsrMatrix {
    /// Compress a row-major `rows × k` matrix, keeping every weight that is not `0.0` (NaN is
    /// kept). Prune first (`prune_unstructured_*`) to choose a density.
    pub fn compress(w: &[f32], rows: usize, k: usize) -> Result<CsrMatrix, KernelError> {
        check_len("w", w.len(), rows, k)?;
        let too_big = || KernelError::Overflow { rows, cols: k };
        if k > u32::MAX as usize {
            return Err(too_big());
        }
        let (row_ends, col_idx, values) = nonzero_rows(w, rows, k);
        let row_ptr = row_ends
            .into_iter()
            .map(|end| u32::try_from(end).map_err(|_| too_big()))
            .collect::<Result<Vec<u32>, _>>()?;
        Ok(CsrMatrix {
            rows,
            k,
            row_ptr,
            col_idx,
            values,
            blocks: BlocksCache::default(),
        })
    }

    /// The stored form: row pointers, column indices, values.
    pub(crate) fn parts(&self) -> (&[u32], &[u32], &[f32]) {
        (&self.row_ptr, &self.col_idx, &self.values)
    }

    /// The dense `rows × k` form.
    pub fn decompress(&self) -> Vec<f32> {
        let mut w = vec![0.0; self.rows * self.k];
        for r in 0..self.rows {
            for e in self.range(r) {
                w[r * self.k + self.col_idx[e] as usize] = self.values[e];
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

    /// Stored (kept) weights.
    pub fn nnz(&self) -> usize {
        self.values.len()
    }

    /// Bytes of kept values the kernel streams (f32).
    pub fn value_bytes(&self) -> usize {
        self.values.len() * 4
    }

    /// Bytes of index metadata: a u32 column index per value plus `rows + 1` u32 row pointers.
    /// At 90 % sparsity this equals the value bytes, which is why CSR needs high sparsity.
    pub fn metadata_bytes(&self) -> usize {
        (self.col_idx.len() + self.row_ptr.len()) * 4
    }

    spmm_entry_points!();

    /// One task: output rows `row0 ..` (as many as `y` holds) × one strip of the panel-major
    /// activations (`width` floats a K row), whose first `valid` tokens are columns
    /// `c0 .. c0 + valid` of `y`.
    fn task(
        &self,
        isa: Isa,
        k_block: usize,
        row0: usize,
        (strip, width): (&[f32], usize),
        y: &mut [f32],
        (cols, c0, valid): (usize, usize, usize),
    ) {
        let rows = y.len() / cols;
        let mut cursor: Vec<usize> = (0..rows).map(|i| self.row_ptr[row0 + i] as usize).collect();
        for kb0 in (0..self.k).step_by(k_block.max(1)) {
            let kb1 = (kb0 + k_block).min(self.k);
            for (i, (y_row, c)) in y.chunks_exact_mut(cols).zip(&mut cursor).enumerate() {
                let end = self.row_ptr[row0 + i + 1] as usize;
                let run = &self.col_idx[*c..end];
                let len = run.partition_point(|&col| (col as usize) < kb1);
                let entries = CsrEntries {
                    values: &self.values[*c..*c + len],
                    cols: &run[..len],
                };
                rows_strip(
                    isa,
                    entries,
                    strip,
                    width,
                    0,
                    [&mut y_row[c0..c0 + valid]],
                    kb0 > 0,
                );
                *c += len;
            }
        }
    }

    /// Bytes of the execution copy the AVX-512 kernel keeps beside the stored form (the same
    /// values, a row byte per value and a start per K block and row), 0 until the first such
    /// product. Reported so the memory it costs is not hidden.
    pub fn execution_copy_bytes(&self) -> usize {
        self.blocks.resident_bytes()
    }

    fn blocks(&self) -> &CsrBlocks<F32> {
        self.blocks
            .get_or_init(|| CsrBlocks::new(self.rows, self.k, &self.row_ptr, &self.col_idx, &self.values))
    }

    /// Whether the K-blocked AVX-512 kernel takes a product with `cols` tokens.
    fn takes_blocks(isa: Isa, cols: usize) -> bool {
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx512 && super::kept::available() {
            return cols >= BLOCKS_MIN_COLS;
        }
        let _ = (isa, cols);
        false
    }

    /// Whether the AVX-512 gather kernel takes a product with `cols` tokens (and this K).
    fn takes_gather(&self, isa: Isa, cols: usize) -> bool {
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx512 && super::kept::available() {
            return cols <= GATHER_MAX_COLS && i32::try_from(self.k).is_ok();
        }
        let _ = (isa, cols);
        false
    }

    /// `(k_block, rows_per_task)`: the schedule grown for this matrix's density.
    fn blocking(&self, s: &CpuSchedule) -> (usize, usize) {
        let per_row = self.values.len() as f64 / self.rows.max(1) as f64;
        grown_blocking(s, self.rows, self.k, per_row, (8, 1))
    }

    fn range(&self, r: usize) -> std::ops::Range<usize> {
        self.row_ptr[r] as usize..self.row_ptr[r + 1] as usize
    }
}

impl RowKernel for CsrMatrix {
    fn rows(&self) -> usize {
        self.rows
    }

    /// The K-blocked and the gather kernels, and past one strip of tokens the shared loop,
    /// read their own copy (panel-major, token-major).
    fn copies_activations(&self, isa: Isa, cols: usize) -> bool {
        Self::takes_blocks(isa, cols) || self.takes_gather(isa, cols) || cols > MAX_STRIP
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
        if Self::takes_blocks(isa, cols) {
            return csr_blocks::spmm(self.blocks(), schedule.threads, (x, xs), y, cols);
        }
        if self.takes_gather(isa, cols) {
            let csr = (&self.row_ptr[..], &self.col_idx[..], &self.values[..]);
            let kernel = csr_gather::Loop::for_tokens(cols, self.k);
            return csr_gather::spmm::<F32, u32>(kernel, csr, self.k, schedule.threads, (x, xs), y, cols);
        }
        let (k_block, per_task) = self.blocking(schedule);
        // One strip's worth of tokens: the caller's line-aligned copy already keeps each K
        // block contiguous, so a second copy would only cost time.
        let panels = (cols > MAX_STRIP)
            .then(|| PanelX::new((x, xs), (self.k, self.k), cols, (MAX_STRIP, 16), schedule.threads));
        let strips = panels.as_ref().map_or(1, |p| p.strips().len());
        // Strip by strip, all tasks in parallel: the strip's panel stays in L2/L3 while every
        // task sweeps its rows over it.
        for s in 0..strips {
            let (strip, c0, valid) = match &panels {
                Some(p) => {
                    let (c0, width) = p.strips()[s];
                    ((p.strip(s), width), c0, width.min(cols - c0))
                }
                None => ((x, xs), 0, cols),
            };
            let span = (cols, c0, valid);
            let task =
                |(t, y_rows): (usize, &mut [f32])| self.task(isa, k_block, t * per_task, strip, y_rows, span);
            for_each_chunk(y, per_task * cols, schedule.threads > 1, task);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prune::{prune_unstructured_global, prune_unstructured_per_row};
    use crate::reference::gemm_naive;
    use crate::schedule::schedule_cpu;
    use crate::testing::{assert_close, data};
    use proptest::prelude::*;

    fn check(rows: usize, k: usize, cols: usize, density: f64, threads: usize, global: bool, seed: u64) {
        let mut w = data(rows * k, seed);
        if global {
            prune_unstructured_global(&mut w, density);
        } else {
            prune_unstructured_per_row(&mut w, rows, k, density);
        }
        let x = data(k * cols, seed + 1);
        let a = CsrMatrix::compress(&w, rows, k).unwrap();
        assert_eq!(a.decompress(), w, "compress then decompress is the identity");
        let mut want = vec![0.0; rows * cols];
        gemm_naive(&w, &x, &mut want, rows, k, cols);
        let schedule = schedule_cpu(cols, rows, k, threads);
        for isa in Isa::available() {
            let mut y = vec![f32::NAN; rows * cols];
            a.spmm_on(isa, &schedule, (&x, cols), &mut y, cols);
            assert_close(&y, &want, k, &format!("{isa:?}"));
        }
        let mut y = vec![f32::NAN; rows * cols];
        a.spmm(threads, &x, &mut y, cols).unwrap();
        assert_close(&y, &want, k, "spmm");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn issue_3_csr_matches_the_naive_oracle(
            rows in 1usize..40, k in 1usize..150, cols in 1usize..300,
            density in 0.0f64..=1.0, threads in 1usize..3, global: bool, seed: u64,
        ) {
            check(rows, k, cols, density, threads, global, seed);
        }
    }

    #[test]
    fn issue_3_csr_on_blocked_shapes() {
        // Several K blocks and strips, and a strip tail narrower than a vector.
        check(37, 1000, 133, 0.1, 2, false, 5);
        check(64, 2048, 260, 0.3, 1, true, 6);
    }

    #[test]
    fn issue_3_csr_execution_copy_is_built_for_many_tokens_and_reported() {
        let (rows, k, cols) = (9, 200, 70);
        let mut w = data(rows * k, 3);
        prune_unstructured_per_row(&mut w, rows, k, 0.2);
        let a = CsrMatrix::compress(&w, rows, k).unwrap();
        assert_eq!(a.execution_copy_bytes(), 0);
        let mut y = vec![0.0; rows * cols];
        a.spmm(1, &data(k * cols, 4), &mut y, cols).unwrap();
        if Isa::detect() == Isa::Avx512 {
            // A start per (K block, row) plus one, and a value and a row byte per weight.
            let blocks = k.div_ceil(csr_blocks::K_BLOCK);
            assert_eq!(a.execution_copy_bytes(), (blocks * rows + 1) * 4 + a.nnz() * 5);
        }
        assert_eq!(
            a,
            CsrMatrix::compress(&w, rows, k).unwrap(),
            "the copy takes no part in equality"
        );
    }

    #[test]
    fn issue_3_csr_reports_its_bytes() {
        let w = [0.0, 1.0, 0.0, 2.0, 0.0, 0.0, 3.0, 0.0];
        let a = CsrMatrix::compress(&w, 2, 4).unwrap();
        assert_eq!(
            (a.nnz(), a.value_bytes(), a.metadata_bytes()),
            (3, 12, (3 + 3) * 4)
        );
    }

    #[test]
    fn issue_3_csr_refuses_wrong_lengths() {
        let a = CsrMatrix::compress(&[1.0; 4], 2, 2).unwrap();
        let mut y = vec![0.0; 4];
        assert!(matches!(
            a.spmm(1, &[0.0; 3], &mut y, 2),
            Err(KernelError::Length { what: "x", .. })
        ));
        assert!(CsrMatrix::compress(&[1.0; 3], 2, 2).is_err());
    }
}
