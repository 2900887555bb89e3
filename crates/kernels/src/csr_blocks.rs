//! The AVX-512 CSR kernel for products with many tokens: CSR re-blocked by K block, against
//! a mostly L1-resident activation tile, the token-lane loop of `nm/token_lanes.rs` with a
//! variable number of kept weights per row.
//!
//! Why: the shared loop (`sparse_rows.rs`) grows its K block until each row has dozens of
//! weights in it, which makes the activation tile an L2-sized one, and at random rows every
//! FMA's load then misses L1 (no prefetcher follows sparse indices): 12% of the FMA peak at
//! 90% sparsity. Here the K block is 128 rows of a 128-token strip, a tile that stays mostly
//! in L1; a row has ~13 weights in it at 90% sparsity, so the per-row cost (its 8
//! accumulators loaded and stored) is paid inside one tight loop over all rows of a task
//! rather than per call, and the accumulators live in a contiguous scratch buffer; a strip's
//! last block writes straight to `y`.
//!
//! Layout ([`CsrBlocks`], an execution copy built on first use): entries ordered
//! `[K block][row][entry]`, each a value and its row inside the block (one byte, < 128), with
//! a start per (block, row).

use super::kept::{Column, Values};
use super::sparse_rows::{Lines, TileX, lane_kernel_prologue, strip_plan};
use crate::shared_output::for_each_chunk;

/// f32 per zmm register.
const LANES: usize = 16;
/// K rows per block and tokens per strip: a 128 × 128 × 4 B = 64 KiB tile, a little more than
/// L1 holds, measured best side by side at 70–95% sparsity (2048³, 1 thread): 64 × 128
/// (32 KiB, half the weights per row and block) was 15–30% slower, 128 × 64 (4 accumulators a
/// row) 5–25% slower, 256 × 128 faster only at 95% and 30% slower at 70%. Tasks are one
/// per thread: capping them at 128–512 rows (a scratch that fits L2) was no faster.
pub(crate) const K_BLOCK: usize = 128;
const STRIP: usize = 128;

/// A CSR matrix re-blocked by K block (see the module doc), its values stored as `T` stores
/// them.
#[derive(Debug, Clone)]
pub(crate) struct CsrBlocks<T: Values> {
    rows: usize,
    k: usize,
    /// `blocks · rows + 1` starts into `values`/`rows_in_block`, block-major.
    starts: Vec<u32>,
    values: Vec<T::Stored>,
    rows_in_block: Vec<u8>,
}

impl<T: Values> CsrBlocks<T> {
    /// Re-block a CSR matrix given as its row pointers, sorted column indices and values.
    pub(crate) fn new<C: Column>(
        rows: usize,
        k: usize,
        row_ptr: &[u32],
        cols: &[C],
        values: &[T::Stored],
    ) -> CsrBlocks<T> {
        let blocks = k.div_ceil(K_BLOCK);
        let mut counts = vec![0u32; blocks * rows + 1];
        for r in 0..rows {
            for &c in &cols[row_ptr[r] as usize..row_ptr[r + 1] as usize] {
                counts[c.at() / K_BLOCK * rows + r + 1] += 1;
            }
        }
        for i in 1..counts.len() {
            counts[i] += counts[i - 1];
        }
        let starts = counts;
        let mut next: Vec<u32> = starts[..blocks * rows].to_vec();
        let mut bv = vec![T::Stored::default(); values.len()];
        let mut br = vec![0u8; values.len()];
        for r in 0..rows {
            for e in row_ptr[r] as usize..row_ptr[r + 1] as usize {
                let c = cols[e].at();
                let slot = &mut next[c / K_BLOCK * rows + r];
                bv[*slot as usize] = values[e];
                br[*slot as usize] = (c % K_BLOCK) as u8;
                *slot += 1;
            }
        }
        CsrBlocks {
            rows,
            k,
            starts,
            values: bv,
            rows_in_block: br,
        }
    }

    /// Bytes of the execution copy.
    pub(crate) fn resident_bytes(&self) -> usize {
        self.starts.len() * 4 + self.values.len() * (size_of::<T::Stored>() + 1)
    }
}

/// `y[rows × cols] = W · x`, where row `r` of `x` starts at `x[r · xs]` (`xs ≥ cols`).
///
/// Panics unless the features of [`crate::kept::available`] were detected or the buffers
/// are shorter than the shapes.
pub(crate) fn spmm<T: Values>(
    l: &CsrBlocks<T>,
    threads: usize,
    (x, xs): (&[f32], usize),
    y: &mut [f32],
    cols: usize,
) {
    assert!(
        crate::kept::available(),
        "the CSR block kernel needs AVX-512F, BW, VL and F16C"
    );
    if !lane_kernel_prologue("CSR block kernel", (l.rows, l.k), (x, xs), y, cols) {
        return;
    }
    // Strips of 128 tokens, the last one the rest rounded up to a vector.
    let strips = strip_plan(cols, (STRIP, LANES));
    let per_task = l.rows.div_ceil(threads.max(1)).max(1);
    let task = |(t, y_rows): (usize, &mut [f32])| rows_task(l, t * per_task, (x, xs), &strips, y_rows, cols);
    for_each_chunk(y, per_task * cols, threads > 1, task);
}

/// One task: rows `row0 ..`, as many as `y_rows` (`rows × cols`) holds, over every strip of
/// tokens and K block of `x`, each tile packed by the task just before use ([`TileX`]).
fn rows_task<T: Values>(
    l: &CsrBlocks<T>,
    row0: usize,
    x: (&[f32], usize),
    strips: &[(usize, usize)],
    y_rows: &mut [f32],
    cols: usize,
) {
    let rows = y_rows.len() / cols;
    let mut scratch = Lines::zeroed(rows * STRIP / LANES);
    let out = scratch.floats_mut().as_mut_ptr();
    let mut packed = TileX::new(K_BLOCK, STRIP);
    let y = y_rows.as_mut_ptr();
    let blocks = l.k.div_ceil(K_BLOCK);
    for &(c0, width) in strips {
        let valid = width.min(cols - c0);
        for block in 0..blocks {
            let tile = packed.fill(x, (block * K_BLOCK, K_BLOCK, l.k), (c0, width, cols));
            let starts = &l.starts[block * l.rows + row0..=block * l.rows + row0 + rows];
            let (first, last) = (starts[0] as usize, starts[rows] as usize);
            let span = Span {
                starts,
                values: &l.values[first..last],
                rows_in_block: &l.rows_in_block[first..last],
                first,
                accumulate: block > 0,
            };
            // A full strip's last K block goes straight to `y`.
            let to = if block + 1 == blocks && valid == width {
                (y.wrapping_add(c0), cols)
            } else {
                (out, width)
            };
            // SAFETY: `kept::available` was asserted by `spmm`; the tile holds `K_BLOCK` aligned rows
            // of `width` floats and every entry's row byte is `< K_BLOCK`; the scratch holds
            // `rows × width` floats; `y` holds `rows × cols` floats and, when written directly,
            // columns `c0 .. c0 + width <= cols`.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                let t = tile.as_ptr();
                match width / LANES {
                    1 => avx512::rows::<T, 1>(&span, t, out, to),
                    2 => avx512::rows::<T, 2>(&span, t, out, to),
                    3 => avx512::rows::<T, 3>(&span, t, out, to),
                    4 => avx512::rows::<T, 4>(&span, t, out, to),
                    5 => avx512::rows::<T, 5>(&span, t, out, to),
                    6 => avx512::rows::<T, 6>(&span, t, out, to),
                    7 => avx512::rows::<T, 7>(&span, t, out, to),
                    _ => avx512::rows::<T, 8>(&span, t, out, to),
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (span, tile, to);
        }
        if valid < width {
            for r in 0..rows {
                // SAFETY: scratch row `r` holds `width > valid` floats; `y` row `r < rows`
                // holds `cols ≥ c0 + valid`; the scratch is not `y`.
                unsafe { std::ptr::copy_nonoverlapping(out.add(r * width), y.add(r * cols + c0), valid) };
            }
        }
    }
}

/// One task's rows in one K block.
struct Span<'a, T: Values> {
    /// `rows + 1` starts, absolute (`first` is `starts[0]`).
    starts: &'a [u32],
    values: &'a [T::Stored],
    rows_in_block: &'a [u8],
    first: usize,
    accumulate: bool,
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{K_BLOCK, LANES, Span, Values};
    use std::arch::x86_64::*;

    /// For every row `r` of the span: `to[r][..16·V] = (scratch[r] if accumulating) +
    /// Σ w · tile[row][..16·V]`, `to` being `(base, row stride)`.
    ///
    /// # Safety
    /// The features of `kept::available`; `tile` is 64-byte aligned with `K_BLOCK` rows of `16·V` floats; `scratch`
    /// is 64-byte aligned with `rows × 16·V` floats; `to` is writable for `16·V` floats at
    /// `base + r · stride` for every row; the entries' row bytes are `< K_BLOCK`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
    pub(super) unsafe fn rows<T: Values, const V: usize>(
        s: &Span<'_, T>,
        tile: *const f32,
        scratch: *mut f32,
        (base, stride): (*mut f32, usize),
    ) {
        let width = LANES * V;
        for (r, se) in s.starts.windows(2).enumerate() {
            let mut acc = [_mm512_setzero_ps(); V];
            if s.accumulate {
                for (v, a) in acc.iter_mut().enumerate() {
                    // SAFETY: scratch row `r`, columns `16v .. + 16 <= width` (contract).
                    *a = unsafe { _mm512_load_ps(scratch.add(r * width + LANES * v)) };
                }
            }
            let (e0, e1) = (se[0] as usize - s.first, se[1] as usize - s.first);
            for (&w, &kr) in s.values[e0..e1].iter().zip(&s.rows_in_block[e0..e1]) {
                debug_assert!(usize::from(kr) < K_BLOCK);
                // SAFETY: AVX-512F and F16C (enabled here).
                let wb = unsafe { T::splat(w) };
                // SAFETY: row `kr < K_BLOCK` of the tile (contract).
                let x = unsafe { tile.add(usize::from(kr) * width) };
                for (v, a) in acc.iter_mut().enumerate() {
                    // SAFETY: columns `16v .. + 16 <= width` of an aligned tile row.
                    *a = _mm512_fmadd_ps(wb, unsafe { _mm512_load_ps(x.add(LANES * v)) }, *a);
                }
            }
            for (v, a) in acc.iter().enumerate() {
                // SAFETY: the output row `r` (contract).
                unsafe { _mm512_storeu_ps(base.add(r * stride + LANES * v), *a) };
            }
        }
    }
}
