//! int8 on AVX-512 VNNI: the sparse kernel on kept entries ([`SparseQuads`]) and what every
//! VNNI kernel shares (detection, token-major packing, the `+128` corrections, register
//! tiles of 16-token groups). The dense comparator is `int8_dense`, the compact 2:4 kernels
//! `int8_two_of_four`.
//!
//! Why `vpdpbusd`: a widening axpy loop multiplies one byte pair per i32 lane, while
//! `vpdpbusd` multiplies four byte pairs per lane and adds them into the accumulator in one
//! instruction (issue 3).
//!
//! * **Signedness.** `vpdpbusd` multiplies *unsigned* by signed bytes, so one operand is
//!   shifted by 128 (an XOR with `0x80`) and the accumulators are corrected by `-128 ·` the
//!   sum of the other operand.
//! * **Exactness.** `vpdpbusd` (unlike `vpdpbusds`) wraps modulo 2^32, and so does the
//!   correction, so the shifted partial sums may leave the i32 range without harm: the final
//!   value is the true sum modulo 2^32, and the true sum itself fits in i32 for
//!   `K ≤ INT8_MAX_K`, so it is exact.
//! * **Sparse.** [`SparseQuads`] holds pruned weights (`SparseI8`) as kept entries four at a
//!   time, their four activation rows interleaved per tile by shuffles, the activations
//!   shifted to `x + 128` and each row corrected by `-128 · Σ kept w`: 64-token tiles, and
//!   at 3–16 tokens one 16-token tile whose four rows a `vpermb` interleaves.
//!
//! The packing buffer is kept per calling thread between calls (thread-local scratch).

use super::shared_output::for_each_chunk;
use std::arch::x86_64::*;
use std::cell::RefCell;

thread_local! {
    /// The shifted activations, reused across calls on the same thread, so a repeated
    /// product does not page-fault fresh megabytes of scratch on every call.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Whether this CPU runs the VNNI kernels: AVX-512F, BW and VNNI, detected at run time.
pub(super) fn available() -> bool {
    crate::cpu::has!("avx512f") && crate::cpu::has!("avx512bw") && crate::cpu::has!("avx512vnni")
}

/// Token-major copy of `x` (`k × m`) for the feature-lane kernels: row `t` of `out` (`stride`
/// bytes each) holds token `t`'s `k` activations XOR `flip` (0 keeps them signed, `0x80`
/// shifts them to `x + 128`), then zeros.
pub(super) fn pack_token_major(x: &[i8], k: usize, m: usize, stride: usize, flip: u8, out: &mut [u8]) {
    for (t, row) in out.chunks_exact_mut(stride).enumerate().take(m) {
        row.iter_mut()
            .zip(x.iter().skip(t).step_by(m))
            .for_each(|(d, &s)| *d = (s as u8) ^ flip);
        row[k..].fill(0);
    }
}

/// `-128 · Σ w` over a weight row: the start of its accumulators, which removes the `+128`
/// shift of the activations (wrapping, like the sums it corrects).
pub(super) fn row_correction(row: &[i8]) -> i32 {
    row.iter().map(|&v| i32::from(v)).sum::<i32>().wrapping_mul(-128)
}

/// How a micro-tile's accumulators start.
#[derive(Clone, Copy)]
pub(super) enum Init<'a> {
    /// First K block: the rows' corrections for the `+128` shift.
    Bias(&'a [i32]),
    /// Later K blocks: the partial sums already in `y`.
    Load,
}

/// The accumulators of an `R`-row × `V`-zmm tile of 16-token groups as `init` says: the rows'
/// corrections, or the partial sums in `y` (row stride `ldy`) under the token masks. Rows
/// past `rows` (padding of the last row block) start at zero and are never stored. Shared by
/// every VNNI kernel that vectorises along tokens.
///
/// # Safety
/// AVX-512F is available; for [`Init::Load`] the first `rows` rows of `y` are readable under
/// the masks; for [`Init::Bias`] the slice holds `rows` corrections.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn start_tile<const R: usize, const V: usize>(
    y: *const i32,
    ldy: usize,
    rows: usize,
    masks: [__mmask16; V],
    init: Init<'_>,
) -> [[__m512i; V]; R] {
    let mut acc = [[_mm512_setzero_si512(); V]; R];
    for (r, acc_row) in acc.iter_mut().enumerate().take(rows) {
        for (c, a) in acc_row.iter_mut().enumerate() {
            *a = match init {
                Init::Bias(bias) => _mm512_set1_epi32(bias[r]),
                // SAFETY: row r < rows and the masked tokens are in bounds (caller).
                Init::Load => unsafe { _mm512_maskz_loadu_epi32(masks[c], y.wrapping_add(r * ldy + c * 16)) },
            };
        }
    }
    acc
}

/// Store the first `rows` rows of a tile started by [`start_tile`] under the token masks.
///
/// # Safety
/// AVX-512F is available; the first `rows` rows of `y` (stride `ldy`) are writable under the
/// masks and written by no one else meanwhile.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn store_tile<const R: usize, const V: usize>(
    acc: &[[__m512i; V]; R],
    y: *mut i32,
    ldy: usize,
    rows: usize,
    masks: [__mmask16; V],
) {
    for (r, acc_row) in acc.iter().enumerate().take(rows) {
        for (c, &a) in acc_row.iter().enumerate() {
            // SAFETY: row r < rows and the masked tokens are in bounds (caller).
            unsafe { _mm512_mask_storeu_epi32(y.wrapping_add(r * ldy + c * 16), masks[c], a) };
        }
    }
}

/// Columns per K block of the sparse kernel: a block's activations for the two 64-token
/// tiles a pass covers (`2 · SPARSE_KB · 64` bytes, 32 KiB) stay in L1 while a task's rows
/// visit them.
const SPARSE_KB: usize = 256;
/// Most rows per sparse task, so their partial sums (256 bytes a row) stay beside the
/// activation block in L1.
const SPARSE_CHUNK_ROWS: usize = 32;
/// Most tokens of the narrow sparse kernel ([`SparseQuads::spmm_narrow`]): one zmm of i32
/// lanes.
const NARROW_TOKENS: usize = 16;

/// Kept int8 weights regrouped for `vpdpbusd`: per row and [`SPARSE_KB`]-column block, the
/// kept entries four at a time (a quad: four columns, four weights as one i32), the last quad
/// of a block padded with zero weights at the block's first column.
///
/// Why: the axpy loop spends a widening multiply per kept weight and token; a quad instead
/// gathers four activation rows into K-quads per token with two rounds of byte unpacking and
/// multiplies all four in one instruction. It works for any pattern, since the columns come
/// from the kept entries themselves.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SparseQuads {
    blocks_per_row: usize,
    /// Quad index where (row, block) starts; `rows · blocks_per_row + 1` entries.
    seg_start: Vec<usize>,
    cols: Vec<[u32; 4]>,
    weights: Vec<i32>,
    /// `-128 · Σ kept w` per row, undoing the `x + 128` shift.
    bias: Vec<i32>,
}

impl SparseQuads {
    /// Regroup kept entries given per row (`row_start`, columns ascending within a row).
    pub(super) fn from_rows(rows: usize, k: usize, row_start: &[usize], cols: &[u32], values: &[i8]) -> Self {
        let blocks_per_row = k.div_ceil(SPARSE_KB).max(1);
        let mut seg_start = Vec::with_capacity(rows * blocks_per_row + 1);
        let (mut quad_cols, mut weights, mut bias) = (Vec::new(), Vec::new(), Vec::with_capacity(rows));
        seg_start.push(0);
        for r in 0..rows {
            let span = row_start[r]..row_start[r + 1];
            let (rc, rv) = (&cols[span.clone()], &values[span]);
            bias.push(rv.iter().map(|&v| i32::from(v)).sum::<i32>().wrapping_mul(-128));
            let mut at = 0;
            for b in 0..blocks_per_row {
                let end = (b + 1) * SPARSE_KB;
                let len = rc[at..].iter().take_while(|&&c| (c as usize) < end).count();
                for (qc, qv) in rc[at..at + len].chunks(4).zip(rv[at..at + len].chunks(4)) {
                    let mut c4 = [(b * SPARSE_KB) as u32; 4];
                    let mut v4 = [0u8; 4];
                    c4.iter_mut().zip(qc).for_each(|(d, &s)| *d = s);
                    v4.iter_mut().zip(qv).for_each(|(d, &s)| *d = s as u8);
                    quad_cols.push(c4);
                    weights.push(i32::from_le_bytes(v4));
                }
                at += len;
                seg_start.push(quad_cols.len());
            }
        }
        SparseQuads {
            blocks_per_row,
            seg_start,
            cols: quad_cols,
            weights,
            bias,
        }
    }

    /// `y[rows × m] = W · x[k × m]`, exact in i32, on `threads` workers (1 = calling thread).
    ///
    /// # Safety
    /// [`available`] returned true; `x.len() == k·m` and `y.len() == rows·m` for the `k` and
    /// `rows` this was built with; `k ≤ INT8_MAX_K`.
    pub(super) unsafe fn spmm(&self, threads: usize, x: &[i8], y: &mut [i32], m: usize) {
        let rows = self.bias.len();
        if rows == 0 || m == 0 {
            return;
        }
        if self.takes_narrow(m) {
            // SAFETY: the caller's contract.
            return unsafe { self.spmm_narrow(threads, x, y, m) };
        }
        // The activations, shifted to `x + 128` and laid out tile by tile (`[tile][k][64]`,
        // zero past `m`), so a K block of one tile is contiguous in L1 instead of 64 bytes
        // every `m` (which maps to a handful of L1 sets for power-of-two `m`).
        let k = x.len() / m;
        let tiles = m.div_ceil(64);
        let mut shifted = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
        shifted.resize(tiles * k * 64, 0);
        let xs = &mut shifted[..tiles * k * 64];
        let lay_out = |(t, tile): (usize, &mut [u8])| {
            let (t0, valid) = (t * 64, (m - t * 64).min(64));
            for (kk, dst) in tile.chunks_exact_mut(64).enumerate() {
                let src = &x[kk * m + t0..kk * m + t0 + valid];
                dst.iter_mut().zip(src).for_each(|(d, &s)| *d = (s as u8) ^ 0x80);
                dst[valid..].fill(0);
            }
        };
        for_each_chunk(&mut *xs, k * 64, threads > 1, lay_out);
        let chunk = (rows.div_ceil(threads.max(1) * 8)).clamp(1, SPARSE_CHUNK_ROWS);
        let xs = &*xs;
        let task = |(c, y_chunk): (usize, &mut [i32])| {
            // SAFETY: the caller guarantees the features and shapes; `y_chunk` is this
            // task's rows.
            unsafe { self.rows_chunk(c * chunk, xs, y_chunk, m) }
        };
        for_each_chunk(y, chunk * m, threads > 1, task);
        SCRATCH.with(|s| *s.borrow_mut() = shifted);
    }

    /// Whether a product of `m` tokens runs [`Self::spmm_narrow`]: 3–16 tokens where the CPU
    /// has VBMI. Measured on Zen 4 (2 threads, 90% sparsity, × int8 dense, two alternated
    /// rounds, against the 64-token tiles or, to 4 tokens, the gathers): 3 tokens 0.44–0.52
    /// vs 0.29–0.33, 4 tokens 0.35–0.62 vs 0.20–0.35, 8 0.59–0.60 vs 0.32–0.35, 12 0.82 vs
    /// 0.43–0.44, 16 1.10 vs 0.53–0.59 on 4096²; 8 × 11008 × 4096 0.64–0.71 vs 0.24–0.26. At
    /// 2 tokens the gathers stay (0.36–0.49 vs 0.36–0.42, and 0.56–0.76 vs 0.68–0.78 on 11008
    /// × 4096).
    pub(super) fn takes_narrow(&self, m: usize) -> bool {
        (3..=NARROW_TOKENS).contains(&m) && crate::cpu::has!("avx512vbmi")
    }

    /// [`Self::spmm`] for up to [`NARROW_TOKENS`] tokens: one 16-lane tile, `x + 128` laid
    /// out `[k][16]`, and per quad its four activation rows (16 bytes each) put in one zmm
    /// and interleaved into K-quads by one `vpermb`, so a quad costs one `vpdpbusd` where the
    /// 64-token tile spends four and eight unpacks on mostly padding.
    ///
    /// # Safety
    /// As for [`Self::spmm`], and [`Self::takes_narrow`] for `m`.
    unsafe fn spmm_narrow(&self, threads: usize, x: &[i8], y: &mut [i32], m: usize) {
        let rows = self.bias.len();
        let k = x.len() / m;
        let mut shifted = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
        shifted.resize(k * NARROW_TOKENS, 0);
        let xs = &mut shifted[..k * NARROW_TOKENS];
        for (dst, src) in xs.chunks_exact_mut(NARROW_TOKENS).zip(x.chunks_exact(m)) {
            dst.iter_mut().zip(src).for_each(|(d, &s)| *d = (s as u8) ^ 0x80);
            dst[m..].fill(0);
        }
        let xs = &*xs;
        let chunk = rows.div_ceil(threads.max(1) * 8).max(1);
        let task = |(c, y_chunk): (usize, &mut [i32])| {
            // SAFETY: the caller's contract; `y_chunk` is rows `c · chunk ..` of `y`.
            unsafe { self.rows_narrow(c * chunk, xs, y_chunk, m) }
        };
        for_each_chunk(y, chunk * m, threads > 1, task);
        SCRATCH.with(|s| *s.borrow_mut() = shifted);
    }

    /// Rows `first..` (as many as `y` holds) of [`Self::spmm_narrow`].
    ///
    /// # Safety
    /// AVX-512F/BW/VNNI/VBMI; `xs` is `[k][16]` shifted activations; every quad column `< k`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi")]
    unsafe fn rows_narrow(&self, first: usize, xs: &[u8], y: &mut [i32], m: usize) {
        // Byte `4t + j` of the result is token `t` of quad row `j` (byte `16j + t`).
        let interleave = _mm512_set_epi8(
            63, 47, 31, 15, 62, 46, 30, 14, 61, 45, 29, 13, 60, 44, 28, 12, 59, 43, 27, 11, 58, 42, 26, 10,
            57, 41, 25, 9, 56, 40, 24, 8, 55, 39, 23, 7, 54, 38, 22, 6, 53, 37, 21, 5, 52, 36, 20, 4, 51, 35,
            19, 3, 50, 34, 18, 2, 49, 33, 17, 1, 48, 32, 16, 0,
        );
        let mask = ((1u32 << m) - 1) as __mmask16;
        let xp = xs.as_ptr();
        let bpr = self.blocks_per_row;
        for (r, y_row) in y.chunks_exact_mut(m).enumerate() {
            let row = first + r;
            let quads = self.seg_start[row * bpr]..self.seg_start[(row + 1) * bpr];
            // Two chains: one waited on `vpdpbusd`'s latency.
            let mut acc = [_mm512_set1_epi32(self.bias[row]), _mm512_setzero_si512()];
            for (i, (c, &w)) in self.cols[quads.clone()]
                .iter()
                .zip(&self.weights[quads])
                .enumerate()
            {
                // SAFETY: every column is `< k`, so each 16-byte load is inside `xs`.
                let v = unsafe {
                    let at = |j: usize| _mm_loadu_si128(xp.add(c[j] as usize * NARROW_TOKENS).cast());
                    let v = _mm512_castsi128_si512(at(0));
                    let v = _mm512_inserti32x4::<1>(v, at(1));
                    let v = _mm512_inserti32x4::<2>(v, at(2));
                    _mm512_inserti32x4::<3>(v, at(3))
                };
                let a = &mut acc[i & 1];
                *a = _mm512_dpbusd_epi32(*a, _mm512_permutexvar_epi8(interleave, v), _mm512_set1_epi32(w));
            }
            // SAFETY: the first `m ≤ 16` lanes are row `r`'s tokens.
            unsafe { _mm512_mask_storeu_epi32(y_row.as_mut_ptr(), mask, _mm512_add_epi32(acc[0], acc[1])) };
        }
    }

    /// Rows `first..` (as many as `y` holds) over every 64-token tile: per tile, per K block,
    /// per row, the row's quads in that block, with the partial sums parked in `acc` between
    /// blocks; then each row's sums are put back in token order and stored.
    ///
    /// # Safety
    /// AVX-512F/BW/VNNI are available; `xs` is the shifted `k × m` activations; `y` holds
    /// whole rows of `m`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn rows_chunk(&self, first: usize, xs: &[u8], y: &mut [i32], m: usize) {
        let tiles = m.div_ceil(64);
        let mut tile = 0;
        while tile < tiles {
            // Two tiles at once where there are two: eight independent accumulator chains
            // per row instead of four, and each quad's columns and weights read once for both.
            if tile + 1 < tiles {
                // SAFETY: as for this function.
                unsafe { self.rows_tiles::<2>(first, xs, y, m, tile) };
                tile += 2;
            } else {
                // SAFETY: as for this function.
                unsafe { self.rows_tiles::<1>(first, xs, y, m, tile) };
                tile += 1;
            }
        }
    }

    /// [`Self::rows_chunk`] for the `T` tiles from `first_tile`.
    ///
    /// # Safety
    /// As for [`Self::rows_chunk`]; tiles `first_tile .. first_tile + T` exist.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn rows_tiles<const T: usize>(
        &self,
        first: usize,
        xs: &[u8],
        y: &mut [i32],
        m: usize,
        first_tile: usize,
    ) {
        let rows = y.len() / m;
        let k = xs.len() / m.div_ceil(64) / 64;
        let x_tiles: [&[u8]; T] = std::array::from_fn(|i| {
            let t = first_tile + i;
            &xs[t * k * 64..(t + 1) * k * 64]
        });
        let mut acc: Vec<[[__m512i; 4]; T]> = (0..rows)
            .map(|r| [[_mm512_set1_epi32(self.bias[first + r]); 4]; T])
            .collect();
        for b in 0..self.blocks_per_row {
            for (r, a) in acc.iter_mut().enumerate() {
                let seg = (first + r) * self.blocks_per_row + b;
                let quads = self.seg_start[seg]..self.seg_start[seg + 1];
                // SAFETY: every quad column is < k, so each 64-byte load is inside its tile.
                unsafe { quads_tiles(&self.cols[quads.clone()], &self.weights[quads], x_tiles, a) };
            }
        }
        for (r, a) in acc.iter().enumerate() {
            for (i, tile_acc) in a.iter().enumerate() {
                let t0 = (first_tile + i) * 64;
                let valid = (m - t0).min(64);
                for (g, v) in in_token_order(tile_acc).iter().enumerate() {
                    let lanes = valid.saturating_sub(g * 16).min(16);
                    let mask = ((1u32 << lanes) - 1) as __mmask16;
                    let dst = y[r * m..].as_mut_ptr().wrapping_add(t0 + g * 16);
                    // SAFETY: the masked lanes are tokens < m of row r.
                    unsafe { _mm512_mask_storeu_epi32(dst, mask, *v) };
                }
            }
        }
    }
}

/// Accumulate one row's quads over `T` 64-token tiles into `acc` (lane order of the
/// unpacking, see [`in_token_order`]).
///
/// # Safety
/// AVX-512F/BW/VNNI are available; every column `c` has `64·c + 64 ≤ tile.len()` for each
/// tile.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn quads_tiles<const T: usize>(
    cols: &[[u32; 4]],
    weights: &[i32],
    tiles: [&[u8]; T],
    acc: &mut [[__m512i; 4]; T],
) {
    let mut a4 = *acc;
    for (c, &w) in cols.iter().zip(weights) {
        let wv = _mm512_set1_epi32(w);
        for (tile, a) in tiles.iter().zip(a4.iter_mut()) {
            let base = tile.as_ptr();
            // SAFETY: the caller guarantees the 64 bytes are inside the tile.
            let row = |j: usize| unsafe { _mm512_loadu_si512(base.add(c[j] as usize * 64).cast()) };
            let (ra, rb, rc, rd) = (row(0), row(1), row(2), row(3));
            let (ab_lo, ab_hi) = (_mm512_unpacklo_epi8(ra, rb), _mm512_unpackhi_epi8(ra, rb));
            let (cd_lo, cd_hi) = (_mm512_unpacklo_epi8(rc, rd), _mm512_unpackhi_epi8(rc, rd));
            a[0] = _mm512_dpbusd_epi32(a[0], _mm512_unpacklo_epi16(ab_lo, cd_lo), wv);
            a[1] = _mm512_dpbusd_epi32(a[1], _mm512_unpackhi_epi16(ab_lo, cd_lo), wv);
            a[2] = _mm512_dpbusd_epi32(a[2], _mm512_unpacklo_epi16(ab_hi, cd_hi), wv);
            a[3] = _mm512_dpbusd_epi32(a[3], _mm512_unpackhi_epi16(ab_hi, cd_hi), wv);
        }
    }
    *acc = a4;
}

/// The unpacking leaves token `16·L + 4·j + s` in lane `4·L + s` of accumulator `j` (`L` the
/// 128-bit lane); a 4 × 4 transpose of 128-bit lanes returns tokens `16·g ..` in output `g`.
#[target_feature(enable = "avx512f")]
fn in_token_order(acc: &[__m512i; 4]) -> [__m512i; 4] {
    let t0 = _mm512_shuffle_i32x4::<0x44>(acc[0], acc[1]);
    let t1 = _mm512_shuffle_i32x4::<0x44>(acc[2], acc[3]);
    let t2 = _mm512_shuffle_i32x4::<0xEE>(acc[0], acc[1]);
    let t3 = _mm512_shuffle_i32x4::<0xEE>(acc[2], acc[3]);
    [
        _mm512_shuffle_i32x4::<0x88>(t0, t1),
        _mm512_shuffle_i32x4::<0xDD>(t0, t1),
        _mm512_shuffle_i32x4::<0x88>(t2, t3),
        _mm512_shuffle_i32x4::<0xDD>(t2, t3),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_3_sparse_lane_order_is_undone_by_the_transpose() {
        if !available() {
            return;
        }
        // Label lane `4·L + s` of accumulator `j` with the token the unpacking put there.
        let acc: [__m512i; 4] = std::array::from_fn(|j| {
            let lanes: [i32; 16] = std::array::from_fn(|i| (16 * (i / 4) + 4 * j + i % 4) as i32);
            // SAFETY: 16 readable i32.
            unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) }
        });
        // SAFETY: AVX-512F was detected.
        let out = unsafe { in_token_order(&acc) };
        for (g, v) in out.iter().enumerate() {
            let mut got = [0i32; 16];
            // SAFETY: 16 writable i32.
            unsafe { _mm512_storeu_si512(got.as_mut_ptr().cast(), *v) };
            let want: Vec<i32> = (0..16).map(|t| (16 * g + t) as i32).collect();
            assert_eq!(got.to_vec(), want, "output {g}");
        }
    }

    #[test]
    fn issue_3_sparse_quads_pad_each_k_block_with_zero_weights_inside_it() {
        // Row 0 keeps 5 entries in block 0 and 1 in block 1; row 1 keeps none.
        let cols = [0u32, 3, 7, 8, 100, SPARSE_KB as u32 + 2];
        let values = [1i8, -2, 3, -4, 5, 6];
        let q = SparseQuads::from_rows(2, SPARSE_KB + 10, &[0, 6, 6], &cols, &values);
        assert_eq!(q.seg_start, vec![0, 2, 3, 3, 3]);
        assert_eq!(q.cols[1], [100, 0, 0, 0]);
        assert_eq!(q.weights[1], i32::from_le_bytes([5, 0, 0, 0]));
        assert_eq!(
            q.cols[2],
            [
                SPARSE_KB as u32 + 2,
                SPARSE_KB as u32,
                SPARSE_KB as u32,
                SPARSE_KB as u32
            ]
        );
        assert_eq!(q.bias, vec![-128 * 9, 0]);
    }
}
