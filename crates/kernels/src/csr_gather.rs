//! The AVX-512 CSR kernels for products with few tokens (decode-time batches), 1–8 tokens.
//!
//! Why: with a handful of tokens a product is bound by streaming the weights, which CSR at
//! 90% sparsity shrinks to a fifth (a value and a `u32` index per kept weight against four
//! bytes per dense weight). The token-vectorised loop of `sparse_rows.rs` instead spends a
//! 64-byte line of activations on every kept weight to use one to eight floats of it, and ran
//! at 0.66× dense with one token. Two loops, chosen by `CsrMatrix::token_minor`:
//!
//! * [`Loop::Gather`]: per output row and token a dot product over the row's kept weights, sixteen
//!   at a time, their activations gathered by column index from a token-major copy of `x`
//!   (one token's activations, `K` floats, stay in L1/L2). Best at one token.
//! * [`Loop::TokenMinor`]: per row, each kept weight broadcast and FMA'd against its K row of
//!   a token-minor copy (8 floats a K row: every token at once), so a weight costs one
//!   32-byte load instead of a gather lane per token. From 3 tokens (2 at K < 4096).

use crate::kept::{Column, Values};
use crate::shared_output::for_each_chunk;
use crate::sparse_rows::{TOKEN_MINOR, token_major_copy, token_minor_copy};

/// Most tokens these kernels take: the token-minor copy's K row is one ymm of 8 tokens (the
/// gather kernel, a gather per token and 16 kept weights, ran 0.96× dense at 8 tokens on
/// 4096² where the token-minor one runs 2.7–3.0×).
pub(crate) const GATHER_MAX_COLS: usize = 8;

/// Output rows a parallel task takes: rows differ in their kept weights, so tasks are small
/// enough to balance, large enough that scheduling them costs nothing measurable.
const ROWS_PER_TASK: usize = 64;

/// Which few-token loop a product runs (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loop {
    /// Gathers from a token-major copy: best at one token.
    Gather,
    /// A 32-byte load per kept weight from a token-minor copy.
    TokenMinor,
}

impl Loop {
    /// The loop for `cols` tokens (`1 ..= GATHER_MAX_COLS`) and reduction length `k`: the
    /// token-minor copy from 3 tokens, and from 2 when K is below 4096 (its copy, 32 bytes a K
    /// row, then stays nearer L1). Measured at 90% sparsity, × dense, gathers vs token-minor: 1
    /// token 1.06 vs 1.00 on 768², 1.63–1.83 vs 0.93–1.07 at K = 768–3072; 2 tokens 1.00 vs
    /// 1.34–1.35 on 768², 1.09–1.12 vs 1.53–1.54 on 3072×768, 1.13–1.19 vs 1.36–1.44 on
    /// 768×3072, 1.25–1.43 vs 1.34–1.47 on 2048², but 2.88 vs 2.36 on 4096² and 2.66 vs 1.78
    /// on 11008×4096.
    pub(crate) fn for_tokens(cols: usize, k: usize) -> Loop {
        if cols >= 3 || (cols == 2 && k < 4096) {
            Loop::TokenMinor
        } else {
            Loop::Gather
        }
    }
}

/// `y[rows × cols] = W · x` for a CSR `W` (`row_ptr`, `col_idx`, `values`, column indices
/// `< k`, values read as `V` widens them), where row `r` of `x` starts at `x[r · xs]`
/// (`xs ≥ cols`), on `kernel`.
///
/// Panics unless the features of [`crate::kept::available`] were detected (the caller
/// dispatches on them), `cols` is `1 ..= GATHER_MAX_COLS`, `k` fits a signed 32-bit gather
/// index (for [`Loop::Gather`]), or a buffer is shorter than its shape.
pub(crate) fn spmm<V: Values, C: Column>(
    kernel: Loop,
    (row_ptr, col_idx, values): (&[u32], &[C], &[V::Stored]),
    k: usize,
    threads: usize,
    (x, xs): (&[f32], usize),
    y: &mut [f32],
    cols: usize,
) {
    assert!(
        crate::kept::available(),
        "the CSR few-token kernels need AVX-512F, BW, VL and F16C"
    );
    let rows = row_ptr.len() - 1;
    assert!(
        (1..=GATHER_MAX_COLS).contains(&cols),
        "CSR few-token kernel: {cols} tokens"
    );
    assert!(
        kernel == Loop::TokenMinor || i32::try_from(k).is_ok(),
        "CSR gather kernel: K {k} exceeds a gather index"
    );
    assert!(y.len() == rows * cols && (k == 0 || (k - 1) * xs + cols <= x.len()));
    assert!(col_idx.len() == values.len() && row_ptr[rows] as usize == values.len());
    let copy = match kernel {
        // Token-major: token `c`'s activations are `xt[c·k .. (c + 1)·k]`.
        Loop::Gather => token_major_copy((x, xs), k, cols, k, 1),
        Loop::TokenMinor => token_minor_copy((x, xs), k, cols, TOKEN_MINOR),
    };
    let task = |(t, y_rows): (usize, &mut [f32])| {
        let row0 = t * ROWS_PER_TASK;
        let rows = &row_ptr[row0..=row0 + y_rows.len() / cols];
        let csr = (col_idx, values);
        // SAFETY: AVX-512F was asserted; `rows` are row pointers into `col_idx`/`values`, whose
        // entries are column indices `< k` (the `CsrMatrix` invariants); `copy` holds `cols`
        // rows of `k` floats (gather) or `k` rows of 8 (token-minor); `y_rows` holds `cols`
        // floats per row.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            match (kernel, cols) {
                (Loop::TokenMinor, _) => avx512::rows_token_minor::<V, C>(rows, csr, &copy, y_rows, cols),
                (_, 1) => avx512::rows::<V, C, 1>(rows, csr, (&copy, k), y_rows),
                (_, 2) => avx512::rows::<V, C, 2>(rows, csr, (&copy, k), y_rows),
                (_, 3) => avx512::rows::<V, C, 3>(rows, csr, (&copy, k), y_rows),
                (_, 4) => avx512::rows::<V, C, 4>(rows, csr, (&copy, k), y_rows),
                (_, 5) => avx512::rows::<V, C, 5>(rows, csr, (&copy, k), y_rows),
                (_, 6) => avx512::rows::<V, C, 6>(rows, csr, (&copy, k), y_rows),
                (_, 7) => avx512::rows::<V, C, 7>(rows, csr, (&copy, k), y_rows),
                _ => avx512::rows::<V, C, 8>(rows, csr, (&copy, k), y_rows),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (rows, &copy);
    };
    for_each_chunk(y, ROWS_PER_TASK * cols, threads > 1, task);
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use crate::kept::{Column, Values};
    use std::arch::x86_64::*;

    /// For each row `r` (entries `row_ptr[r] .. row_ptr[r + 1]`) and token `c < C`:
    /// `y[r · C + c] = Σ value · xt[c · k + column]`.
    ///
    /// # Safety
    /// The features of `kept::available`; every entry in the rows' ranges lies inside `col_idx` and `values`,
    /// its column is `< k`; `xt` holds `C · k` floats; `y` holds `(row_ptr.len() - 1) · C`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn rows<V: Values, I: Column, const C: usize>(
        row_ptr: &[u32],
        (col_idx, values): (&[I], &[V::Stored]),
        (xt, k): (&[f32], usize),
        y: &mut [f32],
    ) {
        for (r, y_row) in y.chunks_exact_mut(C).enumerate() {
            let (e0, e1) = (row_ptr[r] as usize, row_ptr[r + 1] as usize);
            let mut acc = [_mm512_setzero_ps(); C];
            let full = e0 + (e1 - e0) / 16 * 16;
            for e in (e0..full).step_by(16) {
                // SAFETY: entries `e .. e + 16 <= e1` of the row (contract).
                let (w, cols) = unsafe {
                    (
                        V::zmm(values.as_ptr().add(e), 16),
                        I::zmm(col_idx.as_ptr().add(e)),
                    )
                };
                for (c, a) in acc.iter_mut().enumerate() {
                    // SAFETY: every column is `< k`, inside token `c`'s row of `xt` (contract).
                    let g = unsafe { _mm512_i32gather_ps::<4>(cols, xt.as_ptr().add(c * k)) };
                    *a = _mm512_fmadd_ps(w, g, *a);
                }
            }
            // The row's last `e1 - full < 16` entries one by one. (A masked gather for all of a
            // row's entries ran 4× slower than full ones at one token on this Zen 5; for the
            // tail alone it is no faster than this loop.)
            let mut tail = [0.0f32; C];
            for (&w, &col) in values[full..e1].iter().zip(&col_idx[full..e1]) {
                for (c, t) in tail.iter_mut().enumerate() {
                    *t = V::one(w).mul_add(xt[c * k + col.at()], *t);
                }
            }
            for ((out, a), t) in y_row.iter_mut().zip(acc).zip(tail) {
                *out = _mm512_reduce_add_ps(a) + t;
            }
        }
    }

    /// For each row `r` and token `c < cols`: `y[r · cols + c] = Σ value · xm[8 · column + c]`,
    /// eight independent 8-lane sums a row (four measured the same: the random loads of `xm`
    /// from L2 bind, not the FMA latency).
    ///
    /// # Safety
    /// the features of `kept::available` (and so AVX2 and FMA); every entry in the rows' ranges lies inside
    /// `col_idx` and `values`, its column is `< xm.len() / 8`; `y` holds
    /// `(row_ptr.len() - 1) · cols` floats, `cols ≤ 8`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn rows_token_minor<V: Values, I: Column>(
        row_ptr: &[u32],
        (col_idx, values): (&[I], &[V::Stored]),
        xm: &[f32],
        y: &mut [f32],
        cols: usize,
    ) {
        let xp = xm.as_ptr();
        for (r, y_row) in y.chunks_exact_mut(cols).enumerate() {
            let (e0, e1) = (row_ptr[r] as usize, row_ptr[r + 1] as usize);
            let mut acc = [_mm256_setzero_ps(); 8];
            let full = e0 + (e1 - e0) / 8 * 8;
            for e in (e0..full).step_by(8) {
                for (i, a) in acc.iter_mut().enumerate() {
                    // SAFETY: entry `e + i < e1` of the row; its column's 8 floats are in `xm`;
                    // AVX-512F and F16C enabled.
                    unsafe {
                        let (w, col) = (*values.get_unchecked(e + i), col_idx.get_unchecked(e + i).at());
                        *a = _mm256_fmadd_ps(
                            _mm512_castps512_ps256(V::splat(w)),
                            _mm256_loadu_ps(xp.add(col * super::TOKEN_MINOR)),
                            *a,
                        );
                    }
                }
            }
            for e in full..e1 {
                // SAFETY: as above.
                unsafe {
                    let (w, col) = (values[e], col_idx[e].at());
                    acc[0] = _mm256_fmadd_ps(
                        _mm512_castps512_ps256(V::splat(w)),
                        _mm256_loadu_ps(xp.add(col * super::TOKEN_MINOR)),
                        acc[0],
                    );
                }
            }
            let sum = acc.iter().fold(_mm256_setzero_ps(), |s, a| _mm256_add_ps(s, *a));
            let mut out = [0.0f32; 8];
            // SAFETY: `out` holds 8 floats.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), sum) };
            y_row.copy_from_slice(&out[..cols]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::gemm_naive;
    use crate::testing::{assert_close, data};
    use proptest::prelude::*;

    /// Both kernels against the naive product of the same weights, dense, on `x` rows `xs`
    /// apart.
    fn check(rows: usize, k: usize, cols: usize, xs: usize, keep_every: usize, threads: usize, seed: u64) {
        let mut w = data(rows * k, seed);
        for (i, v) in w.iter_mut().enumerate() {
            if !(i * 7 + i / k).is_multiple_of(keep_every) {
                *v = 0.0;
            }
        }
        let (mut row_ptr, mut col_idx, mut values) = (vec![0u32], Vec::new(), Vec::new());
        for row in w.chunks(k) {
            for (c, &v) in row.iter().enumerate().filter(|(_, v)| **v != 0.0) {
                col_idx.push(c as u32);
                values.push(v);
            }
            row_ptr.push(values.len() as u32);
        }
        let x = data(k * xs, seed + 1);
        let dense_x: Vec<f32> = (0..k * cols).map(|i| x[i / cols * xs + i % cols]).collect();
        let mut want = vec![0.0; rows * cols];
        gemm_naive(&w, &dense_x, &mut want, rows, k, cols);
        for kernel in [Loop::Gather, Loop::TokenMinor] {
            let mut got = vec![f32::NAN; rows * cols];
            spmm::<crate::kept::F32, u32>(
                kernel,
                (&row_ptr, &col_idx, &values),
                k,
                threads,
                (&x, xs),
                &mut got,
                cols,
            );
            assert_close(
                &got,
                &want,
                k,
                &format!("{rows}×{k}×{cols} (xs {xs}, 1 in {keep_every} kept)"),
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Rows with no, fewer than 16, exactly 16 and many kept weights (the mask and the
        /// full-chunk paths), every token count the kernel takes, more rows than one task.
        #[test]
        fn issue_3_csr_gather_matches_the_naive_oracle(
            rows in 1usize..150, k in 1usize..300, cols in 1usize..=GATHER_MAX_COLS,
            pad in 0usize..3, keep_every in 1usize..12, threads in 1usize..3, seed in any::<u64>(),
        ) {
            if crate::kept::available() {
                check(rows, k, cols, cols + pad, keep_every, threads, seed);
            }
        }
    }

    #[test]
    fn issue_3_csr_gather_covers_empty_rows_and_exact_chunks() {
        if !crate::kept::available() {
            return;
        }
        // 1 in 100 kept on 50 columns leaves most rows empty; K 32 fully kept is two chunks.
        check(70, 50, 3, 3, 100, 2, 5);
        check(9, 32, 8, 8, 1, 1, 6);
        check(1, 16, 1, 1, 1, 1, 7);
    }
}
