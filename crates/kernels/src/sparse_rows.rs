//! The inner loop shared by the CSR and BSR kernels: `R` output rows × one strip of tokens,
//! over a list of *entries*, each an activation row index with one weight per output row.
//!
//! For every entry it does `y_r[strip] += w_r · x[row, strip]`: a broadcast, a contiguous load
//! and an FMA per vector of tokens, no gathers (the layout of `lib.rs`). The strip is
//! held in registers across all entries of a K block, so the output is loaded and stored once
//! per block. With `R > 1` (BSR, whose rows in a block row read the same activation rows) one
//! load of `x` feeds `R` FMAs, which takes the kernel off the load ports.
//!
//! Entries come from a small trait so CSR (one index per weight) and BSR (one index per block,
//! weights contiguous) share one loop without materialising offsets.

use super::error::{KernelError, check_len};
use super::nm::Isa;
use crate::schedule::{CpuSchedule, schedule_cpu};
use crate::shared_output::{for_each_chunk, trivial_product};
use rayon::prelude::*;

/// Kept weights a row should have in one K block (see [`grown_blocking`]).
const ENTRIES_PER_BLOCK: usize = 48;

/// Bytes of activations one K block × strip may span once the block is grown: L2-resident.
const L2_TILE_BUDGET: usize = 256 << 10;

/// Bytes the output tile of a task may span once the task is grown: L2-resident.
const L2_OUTPUT_BUDGET: usize = 256 << 10;

/// Times each activation a task loads should be used by the task's rows.
const TARGET_REUSE: f64 = 16.0;

/// `(k_block, rows_per_task)` for a matrix that keeps `kept_per_row` of its `k` weights per
/// row on average, grown from the dense-sized schedule `s`.
///
/// The schedule sizes blocks for a dense row: every row of a task uses every activation of the
/// L1 tile. A row that keeps a fraction `d` uses only `d` of them, so with the dense sizes
/// (a) a row has a handful of weights per K block and the fixed cost per block (its output
/// strip loaded and stored, its run located) dominates, and (b) each activation the task
/// brings in is used by `d ×` as many rows, so the activations stream from L3 at one FMA or
/// two per load. Growing the K block to about [`ENTRIES_PER_BLOCK`] weights per row fixes (a)
/// with an L2-sized tile, and growing the task to `TARGET_REUSE / d` rows fixes (b) with an
/// L2-sized output tile, while keeping a couple of tasks per thread. `align` rounds the K
/// block (to whole blocks for BSR), and the task to whole block rows.
pub(crate) fn grown_blocking(
    s: &CpuSchedule,
    rows: usize,
    k: usize,
    kept_per_row: f64,
    align: (usize, usize),
) -> (usize, usize) {
    let (k_align, row_align) = (align.0.max(1), align.1.max(1));
    let strip_bytes = s.strip_width.max(1) * 4;
    let base_k = s.k_block.max(1);
    let base_rows = s.rows_per_task.max(1);
    if kept_per_row <= 0.0 || k == 0 {
        return (
            base_k.div_ceil(k_align) * k_align,
            base_rows.div_ceil(row_align) * row_align,
        );
    }
    let density = (kept_per_row / k as f64).min(1.0);
    let want_k = (ENTRIES_PER_BLOCK as f64 / density).ceil() as usize;
    let k_block = want_k.clamp(base_k, (L2_TILE_BUDGET / strip_bytes).max(base_k));
    let want_rows = (TARGET_REUSE / density).ceil() as usize;
    let balanced = if s.threads <= 1 {
        rows
    } else {
        rows.div_ceil(2 * s.threads)
    };
    let task = want_rows
        .min((L2_OUTPUT_BUDGET / strip_bytes).max(1))
        .min(balanced.max(1))
        .max(base_rows);
    (
        k_block.div_ceil(k_align) * k_align,
        task.div_ceil(row_align) * row_align,
    )
}

/// Activation bytes above which a product runs in column panels (see [`panels`]).
pub(crate) const L2_ACTIVATION_BUDGET: usize = 512 << 10;

/// The column ranges a product runs in, outermost and shared by all tasks: the whole width
/// when the activations (`k × cols` f32) fit in L2, else strip-wide panels, so the panel stays
/// in L2 while every task passes over it instead of each task streaming all activations from
/// L3 for a few FMAs per line.
pub(crate) fn panels(k: usize, cols: usize, strip: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let panel = if k * cols * 4 > L2_ACTIVATION_BUDGET {
        strip.max(1)
    } else {
        cols.max(1)
    };
    (0..cols).step_by(panel).map(move |p0| p0..(p0 + panel).min(cols))
}

/// The activations `x[k × cols]` copied into rows that start on cache lines, `stride` floats
/// apart.
///
/// Two costs of the caller's layout, both paid on every vector load of the sparse kernels
/// (the dense GEMM avoids them by packing too): a heap `Vec<f32>` is only 16-byte aligned, so
/// every 64-byte load splits across two cache lines and the loads, the bottleneck of a
/// kernel with one load per FMA, halve; and a power-of-two row length maps every row of the
/// L1 activation tile to the same few cache sets, which evicts the tile that the schedule
/// sized to stay in L1. An odd number of lines per row spreads the rows over all sets. The
/// copy is `k × cols` floats once per product, a few percent of a large GEMM.
pub(crate) struct PackedX {
    lines: Lines,
    stride: usize,
}

impl PackedX {
    /// Copy `x` (`rows × cols`, checked by the caller) on `threads` workers.
    pub(crate) fn new(x: &[f32], rows: usize, cols: usize, threads: usize) -> PackedX {
        let mut per_row = cols.div_ceil(16).max(1);
        if per_row > 1 && per_row.is_multiple_of(2) {
            per_row += 1;
        }
        let stride = per_row * 16;
        let mut lines = Lines::zeroed(rows * per_row);
        let copy = |(r, dst): (usize, &mut [Line])| {
            let src = &x[r * cols..(r + 1) * cols];
            for (line, chunk) in dst.iter_mut().zip(src.chunks(16)) {
                line.0[..chunk.len()].copy_from_slice(chunk);
            }
        };
        for_each_chunk(&mut lines, per_row, threads > 1 && rows * cols > 1 << 16, copy);
        PackedX { lines, stride }
    }

    /// The packed activations and their row stride.
    pub(crate) fn view(&self) -> (&[f32], usize) {
        // SAFETY: `Line` is `repr(C)` around `[f32; 16]` (64 bytes, alignment 64, no padding),
        // so `lines` is `16 · len` contiguous, initialised f32 values.
        let floats =
            unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<f32>(), self.lines.len() * 16) };
        (floats, self.stride)
    }
}

/// One cache line of activations or outputs: keeps every vector access aligned.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [f32; 16]);

thread_local! {
    /// Line buffers kept between products on this thread (see [`Lines`]).
    static SPARE_LINES: std::cell::RefCell<Vec<Vec<Line>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Spare buffers a thread keeps, and the largest it keeps (64 MiB).
const SPARE_BUFFERS: usize = 4;
const SPARE_MAX_LINES: usize = (64 << 20) / 64;

/// A zeroed buffer of cache lines, taken from this thread's spares and given back on drop.
///
/// Why: the packed activation copies and output scratch of a large product are megabytes,
/// allocated on every call. A fresh allocation of that size is fresh pages from the kernel,
/// one fault per 4 KiB page, a cost that is a few percent of a 10 ms product and varies with
/// how the kernel happens to back the memory. Reused buffers are only zeroed.
pub(crate) struct Lines(Vec<Line>);

impl Lines {
    pub(crate) fn zeroed(len: usize) -> Lines {
        let mut v = SPARE_LINES.with(|s| s.borrow_mut().pop()).unwrap_or_default();
        v.clear();
        v.resize(len, Line([0.0; 16]));
        Lines(v)
    }

    /// The lines as the floats they hold.
    pub(crate) fn floats_mut(&mut self) -> &mut [f32] {
        // SAFETY: `Line` is `repr(C)` around `[f32; 16]` (64 bytes, alignment 64, no padding),
        // so the lines are `16 · len` contiguous, initialised f32 values, borrowed mutably once.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<f32>(), self.0.len() * 16) }
    }
}

/// Floats that start on a cache line: a kernel's execution copy of weights it reads in
/// vectors and prefetches a line at a time.
///
/// Why: a `Vec<f32>` promises 4-byte alignment only (a large one typically starts 16 bytes
/// into a page), so a vector load of it may straddle two lines, and prefetching a run a line
/// at a time from its start may miss its last line. (For the 2:4 token-lane weights, whose
/// runs are two lines a row and K block, it measured 0.5–1.5% on the LLaMA FFN-down shape,
/// within noise elsewhere.)
#[derive(Debug, Clone, Default)]
pub(crate) struct AlignedFloats {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedFloats {
    pub(crate) fn zeroed(len: usize) -> AlignedFloats {
        AlignedFloats {
            lines: vec![Line([0.0; 16]); len.div_ceil(16)],
            len,
        }
    }
}

impl std::ops::Deref for AlignedFloats {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // SAFETY: `Line` is `repr(C)` around `[f32; 16]` (no padding), so the lines are
        // `16 · lines.len() >= len` contiguous, initialised floats.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<f32>(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedFloats {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as for `deref`, borrowed mutably once.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<f32>(), self.len) }
    }
}

impl std::ops::Deref for Lines {
    type Target = [Line];
    fn deref(&self) -> &[Line] {
        &self.0
    }
}

impl std::ops::DerefMut for Lines {
    fn deref_mut(&mut self) -> &mut [Line] {
        &mut self.0
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        if v.capacity() <= SPARE_MAX_LINES {
            // `try_with`: a buffer dropped while the thread exits is simply freed.
            let _ = SPARE_LINES.try_with(|s| {
                let mut spare = s.borrow_mut();
                if spare.len() < SPARE_BUFFERS {
                    spare.push(v);
                }
            });
        }
    }
}

/// The checks every AVX-512 kernel with its own activation copy makes before touching memory
/// (`rows × k` weights, `x` rows `xs` apart, `y` `rows × cols`), and the answer to the shapes
/// with nothing to compute. Returns whether there is a product left to run.
///
/// Panics unless AVX-512F was detected (callers dispatch on `Isa::Avx512`) or a buffer is
/// shorter than its shape.
pub(crate) fn lane_kernel_prologue(
    kernel: &str,
    (rows, k): (usize, usize),
    (x, xs): (&[f32], usize),
    y: &mut [f32],
    cols: usize,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    assert!(crate::cpu::has!("avx512f"), "{kernel} needs AVX-512F");
    assert!(
        xs >= cols && (k == 0 || (k - 1) * xs + cols <= x.len()),
        "{kernel}: x too short"
    );
    assert!(y.len() == rows * cols, "{kernel}: y has the wrong length");
    !trivial_product(y, rows, k, cols)
}

/// A cache hint; a no-op off x86-64.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and has no architectural effect; `p` comes from a live slice.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// `(first token, width)` of the strips `cols` tokens are cut into: `widest` each (a multiple
/// of `granule`) but the last, which is the rest rounded up to `granule`.
pub(crate) fn strip_plan(cols: usize, (widest, granule): (usize, usize)) -> Vec<(usize, usize)> {
    let mut strips = Vec::new();
    let mut c0 = 0;
    while c0 < cols {
        let width = (cols - c0).min(widest).div_ceil(granule) * granule;
        strips.push((c0, width));
        c0 += width;
    }
    strips
}

/// One K block × strip of the activations, packed by the task that uses it just before use:
/// `rows × width` contiguous floats starting on a cache line, zero past `k` and past the last
/// token, so the kernel's loads never straddle a line or a page boundary.
///
/// Why not a [`PanelX`] of the whole matrix: that copy is one more pass over all of `x`
/// (a write of megabytes and a read back) before any FMA, 4–8% of a large 2:4 product on
/// this machine. Packed per tile, the copy is a few hundred loads and stores against
/// hundreds of thousands of FMAs, done while the tile is L1-bound anyway; each thread packs
/// the tiles it needs, so `x` is read once per thread.
pub(crate) struct TileX {
    lines: Lines,
}

impl TileX {
    /// A tile of up to `rows × width` floats.
    pub(crate) fn new(rows: usize, width: usize) -> TileX {
        TileX {
            lines: Lines::zeroed(rows * width.div_ceil(16)),
        }
    }

    /// Pack rows `k0 .. k0 + rows` of `x` (row `r` at `x[r · xs]`, rows `>= k` read as zero),
    /// columns `c0 .. c0 + width` (those `>= cols` zero), and return the tile.
    ///
    /// Panics if the tile was made smaller or `x` is shorter than the rows `< k` it names.
    pub(crate) fn fill(
        &mut self,
        (x, xs): (&[f32], usize),
        (k0, rows, k): (usize, usize, usize),
        (c0, width, cols): (usize, usize, usize),
    ) -> &[f32] {
        let valid = width.min(cols.saturating_sub(c0));
        let tile = &mut self.lines.floats_mut()[..rows * width];
        for (r, row) in tile.chunks_exact_mut(width).enumerate() {
            let kk = k0 + r;
            if kk < k {
                row[..valid].copy_from_slice(&x[kk * xs + c0..][..valid]);
                row[valid..].fill(0.0);
            } else {
                row.fill(0.0);
            }
        }
        tile
    }
}

/// Widest strip of tokens a panel holds: 8 zmm accumulators per output row.
pub(crate) const MAX_STRIP: usize = 128;

/// The activations copied *panel-major*: strip after strip of at most [`MAX_STRIP`] tokens,
/// each `k_padded × width` contiguous floats, zero past `k` and past the last token.
///
/// Why, beyond [`PackedX`]: a K block of a row-major activation matrix touches one 4 KiB page
/// per K row, so a tile of 64–500 K rows needs as many TLB entries, on top of the weights'.
/// Panel-major, the same tile is one contiguous, line-aligned run: a few pages.
pub(crate) struct PanelX {
    lines: Lines,
    /// `(first token, width)` of each strip.
    strips: Vec<(usize, usize)>,
    /// First line of each strip.
    starts: Vec<usize>,
    k_padded: usize,
}

impl PanelX {
    /// Copy the `k` rows of `x` (row `r` at `x[r · xs]`, `cols` valid, checked by the caller)
    /// into panels of `k_padded ≥ k` rows. Strips are `widest` tokens wide (a multiple of
    /// `granule`, at most [`MAX_STRIP`]) but the last, which is the rest rounded up to
    /// `granule` (a multiple of 16: what the kernel's narrowest register block takes).
    pub(crate) fn new(
        (x, xs): (&[f32], usize),
        (k, k_padded): (usize, usize),
        cols: usize,
        (widest, granule): (usize, usize),
        threads: usize,
    ) -> PanelX {
        debug_assert!(granule.is_multiple_of(16) && widest.is_multiple_of(granule) && widest <= MAX_STRIP);
        let strips = strip_plan(cols, (widest, granule));
        let starts: Vec<usize> = strips
            .iter()
            .scan(0, |line, &(_, w)| {
                let start = *line;
                *line += k_padded * w / 16;
                Some(start)
            })
            .collect();
        let total: usize = strips.iter().map(|&(_, w)| k_padded * w / 16).sum();
        let mut lines = Lines::zeroed(total);
        let mut chunks = Vec::with_capacity(strips.len());
        let mut rest: &mut [Line] = &mut lines;
        for &(c0, width) in &strips {
            let (now, later) = rest.split_at_mut(k_padded * width / 16);
            chunks.push((c0, width, now));
            rest = later;
        }
        let copy = |(c0, width, dst): (usize, usize, &mut [Line])| {
            let valid = width.min(cols - c0);
            for (kk, row) in dst.chunks_exact_mut(width / 16).take(k).enumerate() {
                let src = &x[kk * xs + c0..kk * xs + c0 + valid];
                for (line, chunk) in row.iter_mut().zip(src.chunks(16)) {
                    line.0[..chunk.len()].copy_from_slice(chunk);
                }
            }
        };
        if threads > 1 && k * cols > 1 << 16 {
            chunks.into_par_iter().for_each(copy);
        } else {
            chunks.into_iter().for_each(copy);
        }
        PanelX {
            lines,
            strips,
            starts,
            k_padded,
        }
    }

    /// `(first token, width)` of each strip.
    pub(crate) fn strips(&self) -> &[(usize, usize)] {
        &self.strips
    }

    /// Strip `s`: `k_padded` rows of its width, starting on a cache line.
    pub(crate) fn strip(&self, s: usize) -> &[f32] {
        let lines = &self.lines[self.starts[s]..][..self.k_padded * self.strips[s].1 / 16];
        // SAFETY: `Line` is `repr(C)` around `[f32; 16]` (64 bytes, alignment 64, no padding),
        // so `lines` is `16 · len` contiguous, initialised f32 values.
        unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<f32>(), lines.len() * 16) }
    }
}

/// A list of `(activation row, weights for R output rows)` entries.
///
/// Implementations are crate-private and trusted: `max_row` must bound every row that
/// `for_each` yields, since the vector loads rely on it.
pub(crate) trait Entries<const R: usize>: Copy {
    /// Calls `f(row, weights)` for every entry, in order.
    fn for_each(self, f: impl FnMut(usize, [f32; R]));
    /// The largest activation row yielded, `None` when there are no entries.
    fn max_row(self) -> Option<usize>;
}

/// For each of the `R` strips `y[r]` (equal widths): `y_r (+)= Σ w_r · x[row, c0 ..][..width]`,
/// overwriting when `accumulate` is false (so an empty entry list writes zeros).
///
/// Panics (before touching memory) if an entry's row or the strip lies outside `x`
/// (`x.len() / cols` rows of `cols`).
pub(crate) fn rows_strip<const R: usize, E: Entries<R>>(
    isa: Isa,
    entries: E,
    x: &[f32],
    cols: usize,
    c0: usize,
    y: [&mut [f32]; R],
    accumulate: bool,
) {
    let width = y.first().map_or(0, |s| s.len());
    assert!(
        y.iter().all(|s| s.len() == width),
        "rows_strip: strips of different widths"
    );
    assert!(c0 + width <= cols, "rows_strip: strip outside x");
    if let Some(max) = entries.max_row() {
        assert!((max + 1) * cols <= x.len(), "rows_strip: row {max} outside x");
    }
    let y = y.map(|s| s.as_mut_ptr());
    let xp = x.as_ptr().wrapping_add(c0);
    let done = match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` is only built after detecting AVX-512F (with AVX2 and FMA);
        // every row read is `<= max_row`, inside `x` by the assert, and every column lies in
        // `c0 .. c0 + width <= cols`; the `y` pointers come from `R` distinct `&mut` strips.
        Isa::Avx512 => unsafe {
            let done = avx512::rows_strip(entries, xp, cols, y, width, accumulate);
            if done < width {
                let (xs, ys) = (xp.add(done), y.map(|p| p.add(done)));
                avx512_tail::columns(entries, xs, cols, ys, width - done, accumulate);
            }
            width
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 and FMA were detected; bounds as above.
        Isa::Avx2Fma => unsafe { avx2::rows_strip(entries, xp, cols, y, width, accumulate) },
        Isa::Portable => 0,
    };
    if done < width {
        portable(
            entries,
            x,
            cols,
            c0 + done,
            y.map(|p| p.wrapping_add(done)),
            width - done,
            accumulate,
        );
    }
}

/// The portable loop, blocked by 16 tokens so the compiler keeps accumulators in registers.
fn portable<const R: usize, E: Entries<R>>(
    entries: E,
    x: &[f32],
    cols: usize,
    c0: usize,
    y: [*mut f32; R],
    width: usize,
    accumulate: bool,
) {
    const B: usize = 16;
    let mut start = 0;
    while start < width {
        let w = B.min(width - start);
        let mut acc = [[0.0f32; B]; R];
        if accumulate {
            for (a, &p) in acc.iter_mut().zip(&y) {
                // SAFETY: `p` points at a strip of `width` elements (the caller's `&mut`), and
                // `start + w <= width`.
                a[..w].copy_from_slice(unsafe { std::slice::from_raw_parts(p.add(start), w) });
            }
        }
        entries.for_each(|row, ws| {
            let xs = &x[row * cols + c0 + start..][..w];
            for (a, wr) in acc.iter_mut().zip(ws) {
                for (a, &xv) in a.iter_mut().zip(xs) {
                    *a += wr * xv;
                }
            }
        });
        for (a, &p) in acc.iter().zip(&y) {
            // SAFETY: as above.
            unsafe { std::slice::from_raw_parts_mut(p.add(start), w) }.copy_from_slice(&a[..w]);
        }
        start += w;
    }
}

/// Generates the strip loop for one vector ISA. (Not the shared walker of
/// `register_blocks.rs`: on it this loop measured 6–13% slower, that file says more.)
macro_rules! strip_loop {
    ($isa:ident, $feature:literal, $vec:ty, $lanes:literal, $acc_regs:literal, $zero:ident,
     $set1:ident, $load:ident, $store:ident, $fmadd:ident) => {
        #[cfg(target_arch = "x86_64")]
        mod $isa {
            use super::Entries;
            use std::arch::x86_64::*;

            /// Accumulators per row in the main loop: 8 while `R·8` fit the registers the ISA
            /// leaves for accumulators, else 4 (spilling accumulators would cost more than the
            /// shorter blocks).
            const fn max_v(r: usize) -> usize {
                if r * 8 <= $acc_regs { 8 } else { 4 }
            }

            /// Returns how many columns it did (a multiple of the vector width).
            ///
            /// # Safety
            /// The CPU supports the module's features; `xp` points at `x[0, c0]`; for every
            /// entry row, columns `c0 .. c0 + width` of that row (stride `cols`) are readable;
            /// each `y[r]` is writable for `width` elements and they do not overlap.
            #[target_feature(enable = $feature)]
            pub(super) unsafe fn rows_strip<const R: usize, E: Entries<R>>(
                entries: E,
                xp: *const f32,
                cols: usize,
                y: [*mut f32; R],
                width: usize,
                accumulate: bool,
            ) -> usize {
                let top = max_v(R);
                let mut col = 0;
                while width - col >= top * $lanes {
                    let ys = y.map(|p| p.wrapping_add(col));
                    let xs = xp.wrapping_add(col);
                    // SAFETY: the block covers columns `col .. col + lanes·V <= width` (the loop
                    // condition) of the caller's strips; the CPU has the features (contract).
                    unsafe {
                        if top == 8 {
                            block::<R, 8, E>(entries, xs, cols, ys, accumulate);
                        } else {
                            block::<R, 4, E>(entries, xs, cols, ys, accumulate);
                        }
                    }
                    col += top * $lanes;
                }
                for v in [4, 2, 1] {
                    if v < top && width - col >= v * $lanes {
                        let (xs, ys) = (xp.wrapping_add(col), y.map(|p| p.wrapping_add(col)));
                        // SAFETY: as above, with `col + lanes·v <= width` (the condition).
                        unsafe {
                            match v {
                                4 => block::<R, 4, E>(entries, xs, cols, ys, accumulate),
                                2 => block::<R, 2, E>(entries, xs, cols, ys, accumulate),
                                _ => block::<R, 1, E>(entries, xs, cols, ys, accumulate),
                            }
                        }
                        col += v * $lanes;
                    }
                }
                col
            }

            /// `R × V` accumulators held in registers across all entries.
            ///
            /// # Safety
            /// As [`rows_strip`], for columns `0 .. lanes·V` of `xp` and every `y[r]`.
            #[target_feature(enable = $feature)]
            #[inline]
            unsafe fn block<const R: usize, const V: usize, E: Entries<R>>(
                entries: E,
                xp: *const f32,
                cols: usize,
                y: [*mut f32; R],
                accumulate: bool,
            ) {
                let mut acc: [[$vec; V]; R] = [[$zero(); V]; R];
                if accumulate {
                    for (row, y) in acc.iter_mut().zip(y) {
                        for (v, a) in row.iter_mut().enumerate() {
                            // SAFETY: inside the caller's strip of `y`.
                            *a = unsafe { $load(y.add($lanes * v)) };
                        }
                    }
                }
                entries.for_each(|row, ws| {
                    let p = xp.wrapping_add(row * cols);
                    let mut xv = [$zero(); V];
                    for (v, xv) in xv.iter_mut().enumerate() {
                        // SAFETY: `row` is an entry row, whose strip is readable (contract).
                        *xv = unsafe { $load(p.add($lanes * v)) };
                    }
                    for (acc, &w) in acc.iter_mut().zip(&ws) {
                        let wb = $set1(w);
                        for (a, &xv) in acc.iter_mut().zip(&xv) {
                            *a = $fmadd(wb, xv, *a);
                        }
                    }
                });
                for (row, y) in acc.iter().zip(y) {
                    for (v, a) in row.iter().enumerate() {
                        // SAFETY: inside the caller's strip of `y`.
                        unsafe { $store(y.add($lanes * v), *a) };
                    }
                }
            }
        }
    };
}

strip_loop!(
    avx512,
    "avx512f",
    __m512,
    16,
    16,
    _mm512_setzero_ps,
    _mm512_set1_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_fmadd_ps
);
strip_loop!(
    avx2,
    "avx2,fma",
    __m256,
    8,
    8,
    _mm256_setzero_ps,
    _mm256_set1_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_fmadd_ps
);

/// The last `n < 16` columns of a strip on AVX-512: one masked vector per row, so a token
/// count that is not a multiple of 16 (8, 12, 40, …) does not fall to the portable loop.
/// (That loop had taken 8 tokens of a 90% CSR product to 0.73× dense and 12 tokens to 0.44×,
/// where 16 tokens ran 1.3×.)
#[cfg(target_arch = "x86_64")]
mod avx512_tail {
    use super::Entries;
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX-512F; `xp` points at `x[0, c]` and, for every entry row, columns `c .. c + n` of that
    /// row (stride `cols`) are readable; each `y[r]` is writable for `n < 16` elements and
    /// they do not overlap. Masked-off lanes are neither read nor written.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn columns<const R: usize, E: Entries<R>>(
        entries: E,
        xp: *const f32,
        cols: usize,
        y: [*mut f32; R],
        n: usize,
        accumulate: bool,
    ) {
        debug_assert!(n < 16);
        let mask: __mmask16 = (1 << n) - 1;
        let mut acc = [_mm512_setzero_ps(); R];
        if accumulate {
            for (a, &y) in acc.iter_mut().zip(&y) {
                // SAFETY: the first `n` elements of the caller's strip of `y`.
                *a = unsafe { _mm512_maskz_loadu_ps(mask, y) };
            }
        }
        entries.for_each(|row, ws| {
            // SAFETY: the first `n` columns of an entry row (contract).
            let xv = unsafe { _mm512_maskz_loadu_ps(mask, xp.wrapping_add(row * cols)) };
            for (a, &w) in acc.iter_mut().zip(&ws) {
                *a = _mm512_fmadd_ps(_mm512_set1_ps(w), xv, *a);
            }
        });
        for (a, &y) in acc.iter().zip(&y) {
            // SAFETY: as above.
            unsafe { _mm512_mask_storeu_ps(y, mask, *a) };
        }
    }
}

/// A sparse weight format the shared driver can run: its shape and its product on a given
/// instruction set (shapes checked, non-empty, activations packed).
pub(crate) trait RowKernel {
    /// Output rows (N of the GEMM).
    fn rows(&self) -> usize;
    /// Reduction length (K of the GEMM).
    fn k(&self) -> usize;
    /// The product, `x` rows `xs` apart.
    fn spmm_on(&self, isa: Isa, schedule: &CpuSchedule, x: (&[f32], usize), y: &mut [f32], cols: usize);
    /// Whether the product on `isa` with `cols` tokens makes its own copy of the activations
    /// (panel-major or token-major), so [`spmm_checked`] passes the caller's instead of
    /// copying them into [`PackedX`] first, a copy that would only be read once.
    fn copies_activations(&self, _isa: Isa, _cols: usize) -> bool {
        false
    }
}

/// The default schedule of a `rows × k` sparse weight times `cols` activation columns.
pub(crate) fn default_schedule(kernel: &impl RowKernel, cols: usize, threads: usize) -> CpuSchedule {
    schedule_cpu(cols, kernel.rows(), kernel.k(), threads)
}

/// `y = W · x` for any sparse format: check the shapes, handle empty products, pack the
/// activations into line-aligned rows, and run the format's kernel on the detected ISA.
pub(crate) fn spmm_checked(
    kernel: &impl RowKernel,
    schedule: &CpuSchedule,
    x: &[f32],
    y: &mut [f32],
    cols: usize,
) -> Result<(), KernelError> {
    let (rows, k) = (kernel.rows(), kernel.k());
    check_len("x", x.len(), k, cols)?;
    check_len("y", y.len(), rows, cols)?;
    if trivial_product(y, rows, k, cols) {
        return Ok(());
    }
    let isa = Isa::detect();
    if kernel.copies_activations(isa, cols) {
        kernel.spmm_on(isa, schedule, (x, cols), y, cols);
    } else {
        let packed = PackedX::new(x, k, cols, schedule.threads);
        kernel.spmm_on(isa, schedule, packed.view(), y, cols);
    }
    Ok(())
}

/// The two public entry points of a sparse format that implements [`RowKernel`], written
/// once: `spmm` (the default schedule) and `spmm_scheduled` (the caller's), both through
/// [`spmm_checked`]. Invoked inside the format's `impl` block; doc comments given to the
/// invocation extend `spmm_scheduled`'s.
///
/// Why a macro and not a trait: the formats keep these as inherent methods, so callers
/// (the execution stage, the benches, the examples) need no trait in scope, and the
/// crate-private [`RowKernel`] stays out of the public API.
macro_rules! spmm_entry_points {
    ($(#[$scheduled_doc:meta])*) => {
        /// `y[rows × cols] = W · x[k × cols]`, blocked by
        /// [`schedule_cpu`](crate::schedule::schedule_cpu) for `threads` workers of the current
        /// rayon pool.
        pub fn spmm(
            &self,
            threads: usize,
            x: &[f32],
            y: &mut [f32],
            cols: usize,
        ) -> Result<(), crate::KernelError> {
            let schedule = crate::sparse_rows::default_schedule(self, cols, threads);
            self.spmm_scheduled(&schedule, x, y, cols)
        }

        /// `y = W · x` with an explicit schedule.
        $(#[$scheduled_doc])*
        pub fn spmm_scheduled(
            &self,
            schedule: &crate::schedule::CpuSchedule,
            x: &[f32],
            y: &mut [f32],
            cols: usize,
        ) -> Result<(), crate::KernelError> {
            crate::sparse_rows::spmm_checked(self, schedule, x, y, cols)
        }
    };
}
pub(crate) use spmm_entry_points;

/// The activations `x` (`k` rows, row `r` at `x[r · xs]`, `cols` tokens) copied
/// token-major: token `t`'s activations at `[t · kpad ..][..k]`, zero up to `kpad ≥ k`;
/// copied on `threads` workers when large.
pub(crate) fn token_major_copy(
    (x, xs): (&[f32], usize),
    k: usize,
    cols: usize,
    kpad: usize,
    threads: usize,
) -> Vec<f32> {
    const B: usize = 16;
    let mut xt = vec![0.0f32; cols * kpad];
    let copy = |(b, dst): (usize, &mut [f32])| {
        let t0 = b * B;
        let tn = dst.len() / kpad;
        for k0 in (0..k).step_by(B) {
            for kk in k0..(k0 + B).min(k) {
                let src = &x[kk * xs + t0..kk * xs + t0 + tn];
                for (t, &v) in src.iter().enumerate() {
                    dst[t * kpad + kk] = v;
                }
            }
        }
    };
    for_each_chunk(&mut xt, B * kpad, threads > 1 && cols * k > 1 << 16, copy);
    xt
}

/// Floats a K row of the AVX2 kernels' token-minor activation copy holds: one ymm, up to 8
/// tokens.
pub(crate) const TOKEN_MINOR: usize = 8;

/// The activations `x` (`k` rows, row `r` at `x[r · xs]`, `cols ≤ lanes` tokens) copied
/// token-minor: K row `r`'s tokens at `[lanes · r .. lanes · r + cols]`, zero past them, so
/// that one vector load of `lanes` floats reads every token of a K row.
pub(crate) fn token_minor_copy((x, xs): (&[f32], usize), k: usize, cols: usize, lanes: usize) -> Vec<f32> {
    debug_assert!(cols <= lanes);
    let mut xm = vec![0.0f32; k * lanes];
    for (dst, x_row) in xm.chunks_exact_mut(lanes).zip(x.chunks(xs).take(k)) {
        dst[..cols].copy_from_slice(&x_row[..cols]);
    }
    xm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_cover_the_tokens_in_granules() {
        assert_eq!(strip_plan(300, (128, 64)), vec![(0, 128), (128, 128), (256, 64)]);
        assert_eq!(strip_plan(64, (128, 64)), vec![(0, 64)]);
        assert!(strip_plan(0, (128, 64)).is_empty());
    }

    /// Rows past `k` and columns past `cols` come out zero, whatever the tile held before.
    #[test]
    fn issue_3_a_packed_tile_is_the_block_of_x_zero_padded() {
        let (k, cols, xs) = (5, 20, 23);
        let x: Vec<f32> = (0..k * xs).map(|i| i as f32 + 1.0).collect();
        let mut packed = TileX::new(4, 32);
        packed.lines.floats_mut().fill(f32::NAN);
        let tile = packed.fill((&x, xs), (4, 3, k), (16, 16, cols)).to_vec();
        assert_eq!(tile.len(), 3 * 16);
        let want: Vec<f32> = (0..3 * 16)
            .map(|i| {
                let (r, c) = (4 + i / 16, 16 + i % 16);
                if r < k && c < cols { x[r * xs + c] } else { 0.0 }
            })
            .collect();
        assert_eq!(tile, want);
    }
}
