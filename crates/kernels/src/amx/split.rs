//! Dense f16 on the bf16 tiles, three passes (issue 20): `y = Σ w·x` with f16 operands and
//! f32 sums where the CPU has AMX-BF16 but no AMX-FP16.
//!
//! Why: no other x86 instruction multiplies f16 into f32 sums (AVX-512 FP16 accumulates in
//! f16), so the f16 comparator widened in registers for f32 FMA ran at the f32 rate (247
//! GFLOP/s at 2048³ on two AMX Xeon cores, MKL's `cblas_gemm_f16f16f32` 289) while the tiles
//! sat idle. An f16 value (11 significant bits) is exactly the sum of two bf16 (8 each):
//! `hi`, its nearest bf16, and `lo = x − hi`, which has at most four significant bits. So
//! `w·x = wh·xh + wh·xl + wl·xh + wl·xl`, each product exact in f32. The first three are one
//! bf16 product over a K three times as long: weights `[wh | wh | wl]` and activations
//! `[xh ; xl ; xh]` stacked along K (the "bf16x3" of XLA's precision configs). 2:4 weights
//! stay 2:4 in every third (a zero splits into zeros), so the 2:4 tiles run them alike.
//!
//! Numerics: the dropped `wl·xl` is at most `2⁻¹⁶·|w·x|` (`|lo| ≤ 2⁻⁸·|x|` for a nearest
//! `hi`), 32 times below f16's own rounding (2⁻¹¹), so a sum errs by at most
//! `(2⁻¹⁶ + γ(3K))·Σ|w·x|`, γ the f32 summation's bound. Non-finite values keep their meaning:
//! an infinite or NaN operand's `lo` and its second `hi` are zero, so its one remaining
//! product is the f32 product's (`±∞·x`, `0·∞ = NaN`), not `∞ − ∞`. f16 subnormals and
//! every `lo` are normal bf16 and their products normal f32, so the tiles' denormal
//! flushing never applies.

use super::{AmxWeights, SparseTiles, available};
use rayon::prelude::*;
use std::arch::x86_64::*;
use std::cell::RefCell;

thread_local! {
    /// The calling thread's split activations (`3·seg × m` bf16), reused between products.
    static SPLIT: RefCell<Vec<u16>> = const { RefCell::new(Vec::new()) };
}

/// Whether this process runs the f16 tiles: AMX-BF16 granted ([`available`]) and AVX-512
/// BF16 and F16C (the split's conversions).
pub(crate) fn f16_available() -> bool {
    available(super::Op::Bf16) && crate::cpu::has!("avx512bf16") && crate::cpu::has!("f16c")
}

/// f16 weights as `[wh | wh | wl]` bf16 along a K three times as long (each third `seg`
/// long: K, padded to whole groups of four for 2:4), on the tiles.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct F16Tiles {
    k: usize,
    seg: usize,
    form: Form,
}

#[derive(Debug, Clone, PartialEq)]
enum Form {
    Dense(AmxWeights),
    /// 2:4 expanded per step ([`SparseTiles`]): each third keeps the weights' zeros.
    TwoOfFour(SparseTiles),
}

/// The bits of `(hi, lo)`, each a bf16, with `hi + lo` the f16 `bits` exactly; `lo` is zero
/// for a non-finite value (whose `hi` is itself).
fn split(bits: u16) -> (u16, u16) {
    let x = half::f16::from_bits(bits).to_f32();
    let hi = half::bf16::from_f32(x);
    if !x.is_finite() {
        return (hi.to_bits(), 0);
    }
    (hi.to_bits(), half::bf16::from_f32(x - hi.to_f32()).to_bits())
}

/// The row-major `n × k` f16 weights `w` (bits) as `n × 3·seg` bf16 bits, row by row
/// `[wh | wh | wl]`, each third zero-padded from k to `seg`; a non-finite weight keeps only
/// its `wh·xh` (see the module doc).
fn stack(w: &[u16], n: usize, k: usize, seg: usize) -> Vec<u16> {
    debug_assert_eq!(w.len(), n * k);
    let mut stacked = vec![0u16; n * 3 * seg];
    for (row, out) in w
        .chunks_exact(k.max(1))
        .zip(stacked.chunks_exact_mut(3 * seg.max(1)))
    {
        let (first, rest) = out.split_at_mut(seg);
        let (second, third) = rest.split_at_mut(seg);
        for (i, &b) in row.iter().enumerate() {
            let (hi, lo) = split(b);
            (first[i], second[i], third[i]) = (hi, if finite(b) { hi } else { 0 }, lo);
        }
    }
    stacked
}

impl F16Tiles {
    /// Whether a dense f16 product of `tokens` tokens runs on the tiles in this process.
    pub(crate) fn pays_at(tokens: usize) -> bool {
        tokens >= crate::precision::F16_TILES_FROM_TOKENS && f16_available()
    }

    /// Whether a 2:4 f16 product of `tokens` tokens runs on the tiles in this process (the
    /// expansion needs VBMI2 too).
    pub(crate) fn two_of_four_pays_at(tokens: usize) -> bool {
        tokens >= crate::precision::F16_TWO_OF_FOUR_TILES_FROM_TOKENS
            && f16_available()
            && SparseTiles::available(super::Op::Bf16)
    }

    /// Pack the row-major `n × k` f16 weights (their bits).
    pub(crate) fn new(w: &[u16], n: usize, k: usize) -> F16Tiles {
        F16Tiles {
            k,
            seg: k,
            form: Form::Dense(AmxWeights::new(&stack(w, n, k, k), n, 3 * k)),
        }
    }

    /// Pack row-major `n × k` f16 weights (bits) with at most two non-zeros in every group
    /// of four along K; `None` where they have more, or the CPU cannot expand them (VBMI2).
    pub(crate) fn two_of_four(w: &[u16], n: usize, k: usize) -> Option<F16Tiles> {
        if !SparseTiles::available(super::Op::Bf16) {
            return None;
        }
        // Whole groups of four in each third, so none straddles two.
        let seg = k.next_multiple_of(4);
        let tiles = SparseTiles::new(&stack(w, n, k, seg), n, 3 * seg)?;
        Some(F16Tiles {
            k,
            seg,
            form: Form::TwoOfFour(tiles),
        })
    }

    /// (value bytes, metadata bytes) as stored: three bf16 a weight (dense, `n · k · 6`),
    /// or the 2:4 tiles' kept values and masks over the three thirds.
    pub(crate) fn bytes(&self, n: usize) -> (usize, usize) {
        match &self.form {
            Form::Dense(_) => (n * self.k * 6, 0),
            Form::TwoOfFour(t) => (t.value_bytes(), t.metadata_bytes()),
        }
    }

    /// `y[n × m] = W · x[k × m]`, x as f16 bits, f32 sums, on `threads` workers.
    ///
    /// # Safety
    /// [`f16_available`] returned true (and VBMI2 for 2:4: [`Self::two_of_four_pays_at`]);
    /// `x.len() == k·m`, `y.len() == n·m`.
    pub(crate) unsafe fn gemm(&self, threads: usize, x: &[u16], y: &mut [f32], m: usize) {
        let mut stacked = SPLIT.with(|s| std::mem::take(&mut *s.borrow_mut()));
        // SAFETY: the caller's contract.
        unsafe { split_activations(threads, x, self.seg, m, &mut stacked) };
        // SAFETY: the caller's contract; `stacked` is the `3·seg × m` activations.
        unsafe {
            match &self.form {
                Form::Dense(t) => t.gemm(threads, &stacked, y, m),
                Form::TwoOfFour(t) => t.spmm(threads, &stacked, y, m),
            }
        }
        SPLIT.with(|s| *s.borrow_mut() = stacked);
    }
}

/// Values a task of [`split_activations`] splits.
const SPLIT_CHUNK: usize = 1 << 14;

/// Split the f16 activations `x` (`k × m`, their bits) into `out = [xh ; xl ; xh]`, each
/// third `seg × m` bf16 bits (rows past k zero; the second `hi` and `lo` zero where a value
/// is not finite), in parallel when `threads > 1`. The split is value by value, so chunks
/// need not follow rows.
///
/// # Safety
/// [`f16_available`] returned true; `x.len()` is a multiple of m and `seg ≥ x.len() / m`.
unsafe fn split_activations(threads: usize, x: &[u16], seg: usize, m: usize, out: &mut Vec<u16>) {
    let (len, third) = (x.len(), seg * m);
    out.resize(3 * third, 0);
    let (hi, rest) = out.split_at_mut(third);
    let (lo, again) = rest.split_at_mut(third);
    for pad in [&mut hi[len..], &mut lo[len..], &mut again[len..]] {
        pad.fill(0);
    }
    let (hi, lo, again) = (&mut hi[..len], &mut lo[..len], &mut again[..len]);
    // SAFETY: `f16_available` (the caller's contract) covers the features; the chunks of
    // the four slices are as long.
    let split =
        |x: &[u16], hi: &mut [u16], lo: &mut [u16], again: &mut [u16]| unsafe { split_row(x, hi, lo, again) };
    if threads > 1 && len > SPLIT_CHUNK {
        let chunks = x.par_chunks(SPLIT_CHUNK).zip(hi.par_chunks_mut(SPLIT_CHUNK));
        let chunks = chunks
            .zip(lo.par_chunks_mut(SPLIT_CHUNK))
            .zip(again.par_chunks_mut(SPLIT_CHUNK));
        chunks.for_each(|(((x, hi), lo), again)| split(x, hi, lo, again));
    } else {
        split(x, hi, lo, again);
    }
}

/// Whether the f16 `bits` is finite (exponent not all ones).
fn finite(bits: u16) -> bool {
    bits & 0x7c00 != 0x7c00
}

/// Split f16 activations into their `hi`, `lo` and second `hi` (the latter two zero where
/// the value is not finite; see the module doc).
///
/// # Safety
/// AVX-512F/BW/VL, AVX-512 BF16 and F16C; the four slices are as long.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,f16c")]
unsafe fn split_row(x: &[u16], hi: &mut [u16], lo: &mut [u16], again: &mut [u16]) {
    let exponent = _mm256_set1_epi16(0x7c00);
    for start in (0..x.len()).step_by(16) {
        let mask = (((1u32 << (x.len() - start).min(16)) - 1) & 0xffff) as u16;
        // SAFETY: lanes masked to the row's values from `start`.
        let bits = unsafe { _mm256_maskz_loadu_epi16(mask, x.as_ptr().add(start).cast()) };
        let v = _mm512_cvtph_ps(bits);
        let h = _mm512_cvtneps_pbh(v);
        // SAFETY: both are 32 bytes of vector; the bf16 are read back as their bits.
        let h_bits: __m256i = unsafe { std::mem::transmute(h) };
        let back = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h_bits)));
        // SAFETY: as above.
        let l: __m256i = unsafe { std::mem::transmute(_mm512_cvtneps_pbh(_mm512_sub_ps(v, back))) };
        let finite = _mm256_cmpneq_epi16_mask(_mm256_and_si256(bits, exponent), exponent);
        // SAFETY: lanes masked to the row's values from `start` in each output.
        unsafe {
            _mm256_mask_storeu_epi16(hi.as_mut_ptr().add(start).cast(), mask, h_bits);
            _mm256_mask_storeu_epi16(
                lo.as_mut_ptr().add(start).cast(),
                mask,
                _mm256_maskz_mov_epi16(finite, l),
            );
            _mm256_mask_storeu_epi16(
                again.as_mut_ptr().add(start).cast(),
                mask,
                _mm256_maskz_mov_epi16(finite, h_bits),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every f16 is exactly its `hi + lo` (each a bf16), with `|lo| ≤ 2⁻⁸·|x|` (the bound
    /// the module doc's dropped product rests on); non-finite values keep `lo = 0`.
    #[test]
    fn issue_20_every_f16_is_the_exact_sum_of_its_two_bf16() {
        for bits in 0..=u16::MAX {
            let x = half::f16::from_bits(bits).to_f32();
            let (hi, lo) = split(bits);
            let (hi, lo) = (
                half::bf16::from_bits(hi).to_f32(),
                half::bf16::from_bits(lo).to_f32(),
            );
            if !x.is_finite() {
                assert_eq!(lo, 0.0, "{bits:#06x}");
                assert!(
                    hi.is_nan() == x.is_nan() && (x.is_nan() || hi == x),
                    "{bits:#06x}"
                );
                continue;
            }
            assert_eq!(hi + lo, x, "{bits:#06x}");
            assert!(lo.abs() <= x.abs() / 256.0, "{bits:#06x}: lo {lo} of {x}");
        }
    }

    /// The activations' vector split agrees with the scalar one on every f16, the second
    /// `hi` and `lo` zeroed where the value is not finite, at row lengths around a vector.
    #[test]
    fn issue_20_activation_split_matches_the_scalar_split() {
        if !f16_available() {
            return;
        }
        let all: Vec<u16> = (0..=u16::MAX).collect();
        for len in [1, 15, 16, 17, 33, all.len()] {
            let x = &all[all.len() - len..];
            let (mut hi, mut lo, mut again) = (vec![1; len], vec![1; len], vec![1; len]);
            // SAFETY: `f16_available` checked above; the slices are as long.
            unsafe { split_row(x, &mut hi, &mut lo, &mut again) };
            for (i, &b) in x.iter().enumerate() {
                let (h, l) = split(b);
                let keep = if finite(b) { h } else { 0 };
                // NaN payloads may differ between the two conversions; NaN stays NaN.
                let same = |a: u16, b: u16| {
                    a == b || half::bf16::from_bits(a).is_nan() && half::bf16::from_bits(b).is_nan()
                };
                assert!(
                    same(hi[i], h) && lo[i] == l && same(again[i], keep),
                    "{b:#06x}: {} {} {}",
                    hi[i],
                    lo[i],
                    again[i]
                );
            }
        }
    }

    /// Infinities and NaN give what the f32 product gives (`±∞·x`, `0·∞ = NaN`, NaN), not the
    /// `∞ − ∞` of a split infinity, in weights and activations alike.
    #[test]
    fn issue_20_non_finite_operands_multiply_as_in_f32() {
        if !f16_available() {
            return;
        }
        let f = |v: f32| half::f16::from_f32(v).to_bits();
        let (inf, nan) = (f32::INFINITY, f32::NAN);
        // Rows: [∞, 1.5, …], [0, 1, …], [NaN, 2, …], [1.25, -3, …]; k = 40 (two steps).
        let k = 40;
        let rows = [[inf, 1.5], [0.0, 1.0], [nan, 2.0], [1.25, -3.0]];
        let mut w = vec![0u16; 4 * k];
        for (r, v) in rows.iter().enumerate() {
            w[r * k] = f(v[0]);
            w[r * k + 1] = f(v[1]);
        }
        // Tokens: x = [1, ·], [∞, ·], [-∞, ·], [0.1, 0.2]; every other k zero.
        let m = 4;
        let mut x = vec![0u16; k * m];
        for (t, v) in [[1.0, 0.5], [inf, 0.5], [-inf, 0.5], [0.1, 0.2]]
            .iter()
            .enumerate()
        {
            x[t] = f(v[0]);
            x[m + t] = f(v[1]);
        }
        let tiles = F16Tiles::new(&w, 4, k);
        let mut y = vec![0.0f32; 4 * m];
        // SAFETY: `f16_available` checked above; the lengths match.
        unsafe { tiles.gemm(1, &x, &mut y, m) };
        let value = |b: u16| half::f16::from_bits(b).to_f32();
        for r in 0..4 {
            for t in 0..m {
                let want = value(w[r * k]) * value(x[t]) + value(w[r * k + 1]) * value(x[m + t]);
                let got = y[r * m + t];
                let close = (got - want).abs() <= want.abs() * 1e-3;
                assert!(
                    got == want || want.is_nan() && got.is_nan() || close,
                    "row {r} token {t}: {got} vs {want}"
                );
            }
        }
    }

    /// 2:4 f16 on the tiles, K a multiple of four or not (each third padded to whole groups):
    /// the product of the weights as given, within the bound of the dense split's.
    #[test]
    fn issue_20_two_of_four_f16_tiles_match_the_naive_product() {
        if !SparseTiles::available(super::super::Op::Bf16) || !f16_available() {
            return;
        }
        let (n, m) = (37, 70);
        for k in [4, 38, 101, 256] {
            let bytes = super::super::tests::bytes(k as u64, n * k + k * m);
            // Values in ±(0, 2) with 11-bit significands; two of every four along K kept.
            let value = |b: u8| half::f16::from_f32((b as f32 - 127.5) / 64.0).to_bits();
            let mut w: Vec<u16> = bytes[..n * k].iter().map(|&b| value(b)).collect();
            for row in w.chunks_mut(k) {
                for (g, group) in row.chunks_mut(4).enumerate() {
                    for (j, v) in group.iter_mut().enumerate() {
                        if (j + g) % 4 >= 2 {
                            *v = 0;
                        }
                    }
                }
            }
            let x: Vec<u16> = bytes[n * k..].iter().map(|&b| value(b.rotate_left(3))).collect();
            let tiles = F16Tiles::two_of_four(&w, n, k).expect("two of four a group");
            let mut y = vec![f32::NAN; n * m];
            // SAFETY: the features were checked above; the lengths match.
            unsafe { tiles.gemm(2, &x, &mut y, m) };
            let f = |b: u16| half::f16::from_bits(b).to_f32() as f64;
            for r in 0..n {
                for t in 0..m {
                    let terms = (0..k).map(|i| f(w[r * k + i]) * f(x[i * m + t]));
                    let (want, scale) = terms.fold((0.0, 0.0), |(s, a), p| (s + p, a + p.abs()));
                    let bound = (2.0 * (3 * k + 2) as f64 * 2f64.powi(-24) + 2f64.powi(-16)) * scale;
                    let got = y[r * m + t] as f64;
                    assert!(
                        (got - want).abs() <= bound,
                        "k {k} row {r} token {t}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
