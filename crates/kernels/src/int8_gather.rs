//! int8 kept entries at a few tokens on AVX-512 VNNI: one `vpgatherdd` of 16 activations per
//! token and 16 kept weights, one `vpdpbusd`, bit-exact.
//!
//! Why: the kept-entries kernel ([`super::int8_vnni::SparseQuads`]) puts 64 tokens in the
//! lanes, so at one token it computed 63 lanes of padding and an unstructured int8 slice ran
//! at 0.14–0.37× int8 dense from 1 to 16 tokens (Zen 4, 90% sparsity), where the weight
//! bytes, not the arithmetic, decide. Measured on that Zen 4 (2 threads, 4096², 90%
//! sparsity, ratio to int8 dense): 1 token 0.14 → 0.71–0.78, 2 tokens 0.53–0.57, 4 tokens
//! 0.24 → 0.28–0.35; 1×11008×4096 1.22–1.24. Still short of dense at one token on 4096²: the
//! u32 columns are four bytes per kept byte, and the gathers are slow (see
//! [`GATHER_TOKENS`]).
//!
//! * **Layout.** Per row its kept entries in column order, padded to whole groups of 16 (a
//!   padded entry is column 0 with weight 0): the u32 columns, then the weights as i8.
//! * **Kernel.** The activations are copied token-major as `x + 128` bytes (each token's row
//!   padded by three bytes, so a dword read at the last column stays inside). Per group and
//!   token, `vpgatherdd` reads the dword at each entry's column: its low byte is the entry's
//!   activation. The weights are zero-extended to dwords (`w, 0, 0, 0`), so `vpdpbusd`
//!   multiplies that low byte alone, and the other three bytes meet zeros. Rows start from
//!   `-128 · Σ w` (undoing the shift); wrapping i32, exact for `K ≤ INT8_MAX_K`.

use super::int8_vnni::pack_token_major;
use super::shared_output::for_each_chunk;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Up to this many tokens the gather kernel runs: a `vpgatherdd` per token and group costs
/// ~30 cycles on Zen 4 (measured through the kernel: 1.6M entries, 1 token, 0.41 ms on 2
/// cores), so past four tokens the 64-token tiles win (8 tokens, 90% sparsity, 4096²: 3.7–3.9
/// ms against 2.0). Where the CPU has VBMI the quads' 16-token tile takes over from 3 tokens
/// (`SparseQuads::takes_narrow`).
pub(super) const GATHER_TOKENS: usize = 4;
/// Entries per group: one zmm of columns.
const GROUP: usize = 16;

thread_local! {
    /// The token-major shifted activations, reused across calls on the same thread.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Kept int8 entries grouped by 16 per row for the gather kernel.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct GatherRows {
    k: usize,
    /// First group of each row, and one past the last.
    row_groups: Vec<usize>,
    cols: Vec<u32>,
    weights: Vec<i8>,
    /// `-128 · Σ w` per row.
    bias: Vec<i32>,
}

impl GatherRows {
    /// Group kept entries given per row (`row_start`, columns ascending within a row).
    pub(super) fn from_rows(
        rows: usize,
        k: usize,
        row_start: &[usize],
        cols: &[u32],
        values: &[i8],
    ) -> GatherRows {
        let mut row_groups = Vec::with_capacity(rows + 1);
        let (mut gcols, mut weights, mut bias) = (Vec::new(), Vec::new(), Vec::with_capacity(rows));
        row_groups.push(0);
        for r in 0..rows {
            let span = row_start[r]..row_start[r + 1];
            let len = span.len().next_multiple_of(GROUP);
            bias.push(super::int8_vnni::row_correction(&values[span.clone()]));
            gcols.extend_from_slice(&cols[span.clone()]);
            weights.extend_from_slice(&values[span.clone()]);
            gcols.resize(gcols.len() + len - span.len(), 0);
            weights.resize(weights.len() + len - span.len(), 0);
            row_groups.push(gcols.len() / GROUP);
        }
        GatherRows {
            k,
            row_groups,
            cols: gcols,
            weights,
            bias,
        }
    }

    /// `y[rows × m] = W · x[k × m]` for `1 ≤ m ≤` [`GATHER_TOKENS`], exact in i32.
    ///
    /// # Safety
    /// AVX-512F/BW/VNNI are available; `x.len() == k·m`, `y.len() == rows·m`; `k ≤
    /// INT8_MAX_K`.
    pub(super) unsafe fn spmm(&self, threads: usize, x: &[i8], y: &mut [i32], m: usize) {
        debug_assert!((1..=GATHER_TOKENS).contains(&m) && x.len() == self.k * m);
        let rows = self.bias.len();
        if rows == 0 {
            return;
        }
        let stride = self.k + 3;
        let mut xt = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
        xt.resize(m * stride, 0);
        pack_token_major(x, self.k, m, stride, 0x80, &mut xt[..m * stride]);
        let xt_s = &xt[..m * stride];
        let chunk_rows = rows.div_ceil(threads.max(1) * 8).max(1);
        let task = |(c, y_chunk): (usize, &mut [i32])| {
            for (i, y_row) in y_chunk.chunks_exact_mut(m).enumerate() {
                let r = c * chunk_rows + i;
                // SAFETY: the features (caller); row r's groups are inside `cols` and
                // `weights`, every column < k, so a dword at it is inside a token's row.
                unsafe {
                    match m {
                        1 => self.row::<1>(r, xt_s, stride, y_row),
                        2 => self.row::<2>(r, xt_s, stride, y_row),
                        _ => self.row::<4>(r, xt_s, stride, y_row),
                    }
                }
            }
        };
        for_each_chunk(y, chunk_rows * m, threads > 1, task);
        SCRATCH.with(|s| *s.borrow_mut() = xt);
    }

    /// Row `r` for `y_row.len() ≤ T` tokens (slots past them repeat the last token).
    ///
    /// # Safety
    /// As for [`Self::spmm`]; `xt` holds `y_row.len()` token rows of `stride` bytes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn row<const T: usize>(&self, r: usize, xt: &[u8], stride: usize, y_row: &mut [i32]) {
        let valid = y_row.len();
        let bases: [*const u8; T] = std::array::from_fn(|t| xt[t.min(valid - 1) * stride..].as_ptr());
        // Two copies at one token: one chain of `vpdpbusd` would wait on its latency.
        let mut acc = [[_mm512_setzero_si512(); T]; 2];
        for (j, g) in (self.row_groups[r]..self.row_groups[r + 1]).enumerate() {
            // SAFETY: group g's 16 columns and 16 weights (contract).
            let (idx, w) = unsafe {
                (
                    _mm512_loadu_si512(self.cols.as_ptr().add(g * GROUP).cast()),
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(self.weights.as_ptr().add(g * GROUP).cast())),
                )
            };
            let a = &mut acc[if T == 1 { j % 2 } else { 0 }];
            for (t, &base) in bases.iter().enumerate() {
                // SAFETY: every column < k and the row has 3 bytes past k (contract).
                let xv = unsafe { _mm512_i32gather_epi32::<1>(idx, base.cast()) };
                a[t] = _mm512_dpbusd_epi32(a[t], xv, w);
            }
        }
        let bias = self.bias[r];
        for (t, y) in y_row.iter_mut().enumerate() {
            *y = _mm512_reduce_add_epi32(_mm512_add_epi32(acc[0][t], acc[1][t])).wrapping_add(bias);
        }
    }
}
