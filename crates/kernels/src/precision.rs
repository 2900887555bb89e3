//! Reduced precisions on the CPU: f16 and bf16 operands with f32 accumulation, and
//! int8 × int8 → i32 with a per-channel scale.
//!
//! * **bf16.** [`DenseBf16`] (the dense comparator) and [`TwoOfFourBf16`] (2:4, the compact
//!   format: one bf16 pair and one nibble of indices per row and group of four) multiply
//!   bf16 by bf16 into f32 sums with AVX-512 BF16 (`vdpbf16ps`, `super::half_dot`) where the
//!   CPU has it, detected at run time: the operands are never widened, and the dense one is
//!   what the CPU can do in bf16, not an f32 kernel on 16-bit storage. Without AVX-512 BF16
//!   both widen (the weights once, the activations on every call) and run the f32 kernels.
//!   [`gemm_half`] takes the bf16 kernel too. [`BlockBf16`] runs bf16 block sparsity (blocks
//!   of whole 16-row panels and K-pairs) on the same instruction, wherever the dense one
//!   does. [`CsrHalf`] runs bf16 and f16 unstructured sparsity on 16-bit values and u16
//!   columns, widened in registers by the f32 CSR kernels. Other bf16 and f16 sparse formats
//!   (other block shapes, N:M but 2:4) still widen to f32 storage.
//! * **f16.** [`DenseF16`] and [`TwoOfFourF16`] (the same compact 2:4 format) stream the
//!   weights as f16 and widen them in registers (`vcvtph2ps`, `super::half_dot`) for f32
//!   multiply-adds, on AVX-512F, F16C and VBMI (detected together): no x86 instruction short of
//!   AMX-FP16 multiplies f16 into f32 sums (AVX-512 FP16's accumulate in f16), and at few
//!   tokens, where the weight bytes decide, this is twice the f32 rate. Where the CPU has
//!   AMX-BF16, products of more tokens ([`F16_TILES_FROM_TOKENS`],
//!   [`F16_TWO_OF_FOUR_TILES_FROM_TOKENS`]) run as three bf16 tile products, each f16 split
//!   exactly into a bf16 `hi` and `lo` (`amx::F16Tiles`): 1.7× MKL's f16 GEMM at 2048³ on an
//!   AMX Xeon, where the widening kernel ran 0.85×. Without them both widen once and run the
//!   f32 kernels. Accumulation is f32; the only error beyond f32's is the rounding of the
//!   operands to the storage type, and on the tiles the dropped `lo·lo`, at most `2⁻¹⁶·|w·x|`.
//! * **int8.** [`gemm_i8`] (dense) and [`SparseI8`] (any pruned pattern, kept entries per row)
//!   multiply i8 by i8 into exact i32 sums; [`quantize_per_channel`] and [`dequantize`] map to
//!   and from f32 with one scale per output channel (weight row) and one for the activations.
//!   [`DenseI8`] is the comparator every int8 sparse speedup is measured against, weights
//!   packed once as the vendor libraries pack theirs, so it runs the AVX-512 VNNI kernels
//!   (`super::int8_dense`) where the CPU has them; [`SparseI8`] runs VNNI too (kept entries four at a time). The widening axpy loop
//!   is the fallback for both. [`DenseI8::gemm_scaled`] and [`SparseI8::spmm_scaled`] give
//!   the f32 outputs directly, bit for bit the sums dequantized: the VNNI dense kernels and
//!   the 2:4 expanded lines scale in their register tiles as they store (an `Epilogue`),
//!   the other kernels store sums and a pass scales them in place.
//!
//! bf16 numerics: a product of two bf16 is exact in f32, so a bf16 kernel's only error is
//! its f32 summation, `|ŷ − y| ≤ γ_K · Σ_k |w·x|` with `γ_K ≈ K · 2⁻²⁴` at worst against the
//! exact product of the bf16 operands (plus at most `K · 2⁻¹²⁶` from `vdpbf16ps` flushing
//! subnormals); the rounding of f32 data *to* bf16 is the caller's, before the product.

pub use super::csr_half::{CsrBf16, CsrF16, CsrHalf};
use super::dense::DenseWeights;
use super::error::{KernelError, check_gemm, check_len};
use super::isa::{Form, IsaPath};
use super::nm::NmMatrix;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;
use std::cell::RefCell;

/// A 16-bit storage type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Half {
    /// IEEE binary16.
    F16,
    /// bfloat16 (f32's exponent, 8 mantissa bits).
    Bf16,
}

/// Values held in a 16-bit storage type.
#[derive(Debug, Clone, PartialEq)]
pub enum HalfBuf {
    /// IEEE binary16.
    F16(Vec<half::f16>),
    /// bfloat16.
    Bf16(Vec<half::bf16>),
}

/// Whether `half`'s f16 conversions may use F16C. The crate detects F16C itself, which
/// `SPARSEGATE_MAX_ISA` does not reach, so under a cap below it (`portable`) the conversions
/// here run `half`'s software ones instead, as on a CPU without F16C: a capped run times what
/// such a CPU would. Both round to nearest even, so the values are the same bit for bit
/// (`the_software_f16_conversions_match_the_detected_ones`).
fn f16c_allowed() -> bool {
    super::cpu::allows(super::cpu::IsaLevel::of_feature("f16c"))
}

/// `v` rounded to f16 (see [`f16c_allowed`]).
fn f16_from_f32(v: f32) -> half::f16 {
    if f16c_allowed() {
        half::f16::from_f32(v)
    } else {
        half::f16::from_f32_const(v)
    }
}

/// `v` widened (see [`f16c_allowed`]).
fn f16_to_f32(v: half::f16) -> f32 {
    if f16c_allowed() {
        v.to_f32()
    } else {
        v.to_f32_const()
    }
}

/// `v` widened into `out`, of the same length (see [`f16c_allowed`]).
fn f16_widen(v: &[half::f16], out: &mut [f32]) {
    if f16c_allowed() {
        v.convert_to_f32_slice(out)
    } else {
        for (o, &e) in out.iter_mut().zip(v) {
            *o = e.to_f32_const();
        }
    }
}

impl HalfBuf {
    /// Round `v` to the storage type (round to nearest even).
    pub fn from_f32(kind: Half, v: &[f32]) -> HalfBuf {
        match kind {
            Half::F16 => HalfBuf::F16(v.iter().map(|&e| Storage16::from_f32(e)).collect()),
            Half::Bf16 => HalfBuf::Bf16(v.iter().map(|&e| Storage16::from_f32(e)).collect()),
        }
    }

    /// Elements stored.
    pub fn len(&self) -> usize {
        match self {
            HalfBuf::F16(v) => v.len(),
            HalfBuf::Bf16(v) => v.len(),
        }
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Widen into the f32 panel `out` (exact: every 16-bit value is an f32).
    pub fn to_f32_into(&self, out: &mut [f32]) -> Result<(), KernelError> {
        check_len("panel", out.len(), 1, self.len())?;
        match self {
            HalfBuf::F16(v) => Storage16::widen(v, out),
            HalfBuf::Bf16(v) => Storage16::widen(v, out),
        }
        Ok(())
    }

    /// The widened values.
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.len()];
        // The length matches by construction.
        let _ = self.to_f32_into(&mut out);
        out
    }
}

/// `y[N×M] = w[N×K] · x[K×M]` with 16-bit stored operands and f32 accumulation, a one-off
/// product: on the 16-bit kernel where detected (bf16 `vdpbf16ps`, f16 widened in registers;
/// the weights packed for this call, the panels unused), otherwise both operands widened into
/// the caller's f32 panels `w_panel`, `x_panel` and the dense f32 kernel run.
#[allow(clippy::too_many_arguments)]
pub fn gemm_half(
    threads: usize,
    w: &HalfBuf,
    x: &HalfBuf,
    (w_panel, x_panel): (&mut [f32], &mut [f32]),
    y: &mut [f32],
    n: usize,
    k: usize,
    m: usize,
) -> Result<(), KernelError> {
    check_gemm(w.len(), x.len(), y.len(), n, k, m)?;
    let done = match (w, x) {
        (HalfBuf::Bf16(wb), HalfBuf::Bf16(xb)) => one_off(threads, wb, xb, y, (n, k, m)),
        (HalfBuf::F16(wb), HalfBuf::F16(xb)) => one_off(threads, wb, xb, y, (n, k, m)),
        _ => false,
    };
    if done {
        return Ok(());
    }
    w.to_f32_into(w_panel)?;
    x.to_f32_into(x_panel)?;
    super::dense::gemm_f32(threads, w_panel, x_panel, y, n, k, m)
}

/// A one-off product on the 16-bit kernel of `T`, if this CPU runs it (lengths checked).
fn one_off<T: Storage16>(
    threads: usize,
    w: &[T],
    x: &[T],
    y: &mut [f32],
    (n, k, m): (usize, usize, usize),
) -> bool {
    match DenseHalf::<T>::for_tokens(w, n, k, m) {
        Ok(d) if !matches!(d.stored, DenseHalfStored::Widened(_)) => d.gemm(threads, x, y, m).is_ok(),
        _ => false,
    }
}

thread_local! {
    /// The widened activations of a 16-bit product on a CPU without its kernel, per thread.
    static WIDENED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` on `x` widened to f32 (in a per-thread buffer).
pub(crate) fn widened<T: Storage16, R>(x: &[T], f: impl FnOnce(&[f32]) -> R) -> R {
    let mut buf = WIDENED.with(|b| std::mem::take(&mut *b.borrow_mut()));
    buf.resize(x.len(), 0.0);
    T::widen(x, &mut buf);
    let r = f(&buf);
    WIDENED.with(|b| *b.borrow_mut() = buf);
    r
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
}

/// A 16-bit storage type the 16-bit kernels take: [`half::bf16`] or [`half::f16`].
pub trait Storage16: Copy + Send + Sync + 'static + sealed::Sealed {
    /// Which one.
    const KIND: Half;
    /// Round to nearest even.
    fn from_f32(v: f32) -> Self;
    /// The value (exact).
    fn to_f32(self) -> f32;
    /// The values' bits.
    fn bits(v: &[Self]) -> &[u16];
    /// Widen `v` into `out` (same length).
    fn widen(v: &[Self], out: &mut [f32]);
}

macro_rules! storage16 {
    ($t:ty, $kind:expr, $from:expr, $to:expr, $widen:expr) => {
        impl Storage16 for $t {
            const KIND: Half = $kind;
            fn from_f32(v: f32) -> Self {
                $from(v)
            }
            fn to_f32(self) -> f32 {
                $to(self)
            }
            fn bits(v: &[Self]) -> &[u16] {
                v.reinterpret_cast()
            }
            fn widen(v: &[Self], out: &mut [f32]) {
                $widen(v, out)
            }
        }
    };
}
storage16!(
    half::bf16,
    Half::Bf16,
    half::bf16::from_f32,
    half::bf16::to_f32,
    <[half::bf16]>::convert_to_f32_slice
);
storage16!(half::f16, Half::F16, f16_from_f32, f16_to_f32, f16_widen);

/// Dense `n × k` 16-bit weights laid out once for repeated products (weight-stationary): the
/// dense comparator of a bf16 or f16 slice.
///
/// Where the CPU runs the 16-bit kernels (detected when built) the weights are packed for
/// them and streamed as 16-bit values: bf16 as K-pairs for `vdpbf16ps` (AVX-512 BF16), f16
/// as 16-row halves widened in registers (AVX-512F + F16C; see `half_dot::f16` for why not
/// AVX-512 FP16). Without them they are widened to f32 once and every product widens its
/// activations and runs [`DenseWeights`].
#[derive(Debug, Clone)]
pub struct DenseHalf<T> {
    n: usize,
    k: usize,
    stored: DenseHalfStored,
    _storage: std::marker::PhantomData<T>,
}

/// The dense bf16 comparator.
pub type DenseBf16 = DenseHalf<half::bf16>;
/// The dense f16 comparator.
pub type DenseF16 = DenseHalf<half::f16>;

#[derive(Debug, Clone)]
enum DenseHalfStored {
    #[cfg(target_arch = "x86_64")]
    Tiles(super::amx::AmxWeights),
    #[cfg(target_arch = "x86_64")]
    F16Tiles(super::amx::F16Tiles),
    #[cfg(target_arch = "x86_64")]
    Pairs(super::half_dot::DensePairs),
    #[cfg(target_arch = "x86_64")]
    Halves(super::half_dot::DenseHalves<super::half_dot::F16>),
    #[cfg(target_arch = "x86_64")]
    BfHalves(super::half_dot::DenseHalves<super::half_dot::Bf16>),
    Widened(DenseWeights),
}

/// Which kernel a 16-bit product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HalfKernel {
    /// bf16 tiles on `tdpbf16ps` (AMX-BF16); f16 as three bf16 tile products.
    #[cfg(target_arch = "x86_64")]
    Tiles,
    /// bf16 pairs on `vdpbf16ps` (AVX-512 BF16).
    #[cfg(target_arch = "x86_64")]
    Dot,
    /// 16-bit weights widened in registers for f32 FMA (AVX-512F).
    #[cfg(target_arch = "x86_64")]
    Registers,
    /// Weights widened to f32 once, then the f32 kernels.
    F32,
}

/// Below this many tokens a bf16 product runs on `vdpbf16ps` wherever the CPU has it: one
/// tile of so few tokens widens every weight vector for one or two FMAs, so the shift and
/// zero-extension cost more than a half-rate dot-product saves. Measured on Emerald Rapids
/// (2 threads, 4096x4096): dense at 1 token 44-47 GFLOP/s on the dot-product, 35-41 widened
/// (MKL 47); at 16 tokens 83-145 and 119-159.
pub const BF16_DOT_BELOW_TOKENS: usize = 8;

/// The fewest tokens at which a dense f16 product runs on the bf16 tiles (three products
/// each, `amx::F16Tiles`, where the CPU has AMX-BF16) rather than widened in registers
/// (`half_dot::f16`): the tiles stream three bf16 a weight, three times the f16 bytes, and a
/// few token tiles leave them short of work. Measured (Intel Xeon with AMX-BF16, 2 threads,
/// `sparsegate bench`, ms, widened / tiles): 4096² 2.45 / 3.06 at 16 tokens, 3.97 / 4.52 at
/// 32, 5.85 / 6.18 at 48, 7.84 / 6.78 at 64, 15.7 / 8.96 at 128; 11008×4096 11.6 / 12.1 at
/// 32, 16.2 / 16.4 at 48, 22.2 / 17.8 at 64, 43.6 / 26.4 at 128.
pub const F16_TILES_FROM_TOKENS: usize = 64;

/// The fewest tokens from which a dense f16 product without the bf16 tiles widens its
/// weights to f32 once and runs the f32 kernel, rather than widening every weight vector in
/// registers at every use: past a few token tiles the conversions cost more than the f32
/// weights' extra bytes. MKL converts and runs its f32 GEMM too (its f16 GEMM ran 0.90× ours
/// at 2048³ before). Measured on a 2-vCPU Emerald Rapids without AMX (4096², 2 threads, ms,
/// in registers / widened once, 4 alternated rounds): 3.4–4.5 / 3.4–5.6 at 24 tokens,
/// 4.2–5.1 / 3.4–5.7 at 32 (each ahead twice), 6.1–9.6 / 5.0–7.4 at 48 (widened ahead in
/// all four); 8.11 / 7.30 at 64, 14.8 / 13.8 at 128, 66.1 / 55.3 at 512.
pub const F16_DENSE_WIDENS_FROM_TOKENS: usize = 48;

/// [`F16_DENSE_WIDENS_FROM_TOKENS`] for 2:4 f16 (and [`BF16_TWO_OF_FOUR_WIDENS_FROM_TOKENS`]
/// for bf16): from 32 tokens, where the f32 2:4 kernel's token lanes fill two vectors.
/// Measured as there once the token lanes broadcast every weight on Intel (3 alternated
/// rounds, ms of the 2:4 product, in registers / widened once): 4096² 2.35–2.63 / 2.55–3.21
/// at 16 tokens, 3.38–3.81 / 3.87–4.08 at 24 (11008×4096 8.85–8.94 / 9.57–10.1), 4.27–4.59
/// / 3.62–3.69 at 32, 6.23–6.37 / 4.98–5.39 at 48 (11008×4096 16.9–17.1 / 13.2–13.5); from
/// 64 the f32 2:4 kernel runs 1.29–1.33× the f32 dense, where the f16 2:4 kernel ran
/// 0.99–1.04× the f16 dense. (Before that change the two were level at 48.)
pub const F16_TWO_OF_FOUR_WIDENS_FROM_TOKENS: usize = 32;

/// The fewest tokens from which a dense bf16 product whose process picked widening over
/// `vdpbf16ps` (`half_dot::bf16_widens`) widens its weights to f32 once and runs the f32
/// kernel, as f16 does from [`F16_DENSE_WIDENS_FROM_TOKENS`]. Where `vdpbf16ps` won the
/// probe it stays: it multiplies twice the pairs an FMA does. Measured as there (ms, in
/// registers / widened once): 3.5–5.4 / 3.4–5.4 at 24 tokens (level), 4.6–6.7 / 3.7–5.8 at
/// 32, 6.8–7.9 / 5.3–7.2 at 40 (11.3 once, in a slow phase), 8.8–9.1 / 7.4–7.6 at 48 (3
/// rounds), 7.99 / 6.96 at 64, 66.5 / 54.6 at 512.
pub const BF16_DENSE_WIDENS_FROM_TOKENS: usize = 32;

/// [`BF16_DENSE_WIDENS_FROM_TOKENS`] for 2:4 bf16, as f16's
/// ([`F16_TWO_OF_FOUR_WIDENS_FROM_TOKENS`]). Measured as there (3 alternated rounds, ms of
/// the 2:4 product, in registers / widened once): 4096² 2.38–2.55 / 2.48–2.70 at 16 tokens,
/// 3.35–3.40 / 3.61–3.96 at 24 (11008×4096 8.87–8.91 / 9.6–15.1), 4.39–4.67 / 3.58–4.24
/// at 32, 6.25–6.34 / 5.01–5.41 at 48 (11008×4096 17.0–17.8 / 13.2–13.3); widened once
/// 1.19–1.36× the widened dense from 64 to 256 tokens, where the compact kernel ran
/// 0.99–1.03× the dense kernel in registers. (Before the token lanes stopped spreading
/// weights by shuffles on Intel, widening lost at 24–48 and this count was 64.)
pub const BF16_TWO_OF_FOUR_WIDENS_FROM_TOKENS: usize = 32;

/// The fewest tokens from which a 16-bit product on `form` weights that would widen in
/// registers (f16 without the tiles; bf16 where the process picked widening) widens the
/// weights to f32 once instead: dense and 2:4 as measured above; other forms never (`None`:
/// blocks keep their own kernels, the rest widens to f32 anyway).
pub fn widens_once_from(kind: Half, form: Form) -> Option<usize> {
    match (kind, form) {
        (Half::F16, Form::Dense) => Some(F16_DENSE_WIDENS_FROM_TOKENS),
        (Half::F16, Form::TwoOfFour) => Some(F16_TWO_OF_FOUR_WIDENS_FROM_TOKENS),
        (Half::Bf16, Form::Dense) => Some(BF16_DENSE_WIDENS_FROM_TOKENS),
        (Half::Bf16, Form::TwoOfFour) => Some(BF16_TWO_OF_FOUR_WIDENS_FROM_TOKENS),
        _ => None,
    }
}

/// Whether a product of `tokens` tokens widens once ([`widens_once_from`]).
pub fn widens_once(kind: Half, form: Form, tokens: usize) -> bool {
    widens_once_from(kind, form).is_some_and(|from| tokens >= from)
}

/// The fewest tokens at which a 2:4 f16 product runs on the bf16 tiles (three products, the
/// 2:4 weights expanded a step at a time) rather than the compact kernel widened in
/// registers: earlier than dense, because 2:4 on the tiles streams about half of dense's
/// three bf16 a weight. Measured (Intel Xeon with AMX-BF16, 2 threads, `sparsegate bench`,
/// ms, widened / tiles): 4096² 1.10 / 1.86 at 8 tokens, 2.36–2.48 / 2.06–2.27 at 16,
/// 3.23 / 2.50 at 24, 4.31 / 2.61 at 32, 15.5 / 10.3 at 128, 60.5 / 29.6 at 512;
/// 11008×4096 2.98 / 6.84 at 8, 6.12 / 6.56–6.84 at 16, 8.69 / 7.08 at 24, 11.4 / 7.23 at 32.
pub const F16_TWO_OF_FOUR_TILES_FROM_TOKENS: usize = 20;

impl HalfKernel {
    /// The fastest kernel for `kind` on this CPU at `tokens` (for bf16 past a few tokens,
    /// measured once per process: `half_dot::bf16_widens`).
    fn chosen(kind: Half, form: Form, tokens: usize) -> HalfKernel {
        #[cfg(target_arch = "x86_64")]
        match kind {
            Half::Bf16 if tokens < BF16_DOT_BELOW_TOKENS && super::half_dot::available() => {
                return HalfKernel::Dot;
            }
            Half::Bf16 if super::half_dot::bf16_widens() => {
                return if widens_once(kind, form, tokens) {
                    HalfKernel::F32
                } else {
                    HalfKernel::Registers
                };
            }
            Half::Bf16 if super::half_dot::available() => return HalfKernel::Dot,
            Half::F16 if super::half_dot::f16_available() && !widens_once(kind, form, tokens) => {
                return HalfKernel::Registers;
            }
            _ => {}
        }
        let _ = (kind, form, tokens);
        HalfKernel::F32
    }

    /// The dense comparator's kernel: [`Self::chosen`], or the tiles where the CPU and OS
    /// grant AMX-BF16: for bf16 always, for f16 (three bf16 products) from the token count
    /// where they pay (`amx::F16Tiles::pays_at`).
    fn chosen_dense(kind: Half, tokens: usize) -> HalfKernel {
        #[cfg(target_arch = "x86_64")]
        if kind == Half::Bf16 && super::amx::available(super::amx::Op::Bf16)
            || kind == Half::F16 && super::amx::F16Tiles::pays_at(tokens)
        {
            return HalfKernel::Tiles;
        }
        HalfKernel::chosen(kind, Form::Dense, tokens)
    }

    /// The 2:4 kernel: [`Self::chosen`], or the tiles (2:4 expanded per K block) for bf16
    /// where the CPU and OS grant AMX-BF16, the CPU has VBMI2 and `tokens` are enough for
    /// the tiles to pay (`amx::sparse_tiles_from_tokens`).
    fn chosen_two_of_four(kind: Half, tokens: usize) -> HalfKernel {
        #[cfg(target_arch = "x86_64")]
        if kind == Half::Bf16 && super::amx::SparseTiles::pays_at(super::amx::Op::Bf16, tokens)
            || kind == Half::F16 && super::amx::F16Tiles::two_of_four_pays_at(tokens)
        {
            return HalfKernel::Tiles;
        }
        HalfKernel::chosen(kind, Form::TwoOfFour, tokens)
    }

    /// Every kernel this CPU runs for `kind`, so that tests check each on one machine.
    #[cfg(test)]
    fn all(kind: Half) -> Vec<HalfKernel> {
        let mut all = vec![HalfKernel::F32];
        #[cfg(target_arch = "x86_64")]
        {
            if kind == Half::Bf16 && super::half_dot::available() {
                all.push(HalfKernel::Dot);
            }
            if kind == Half::Bf16 && super::amx::available(super::amx::Op::Bf16)
                || kind == Half::F16 && super::amx::f16_available()
            {
                all.push(HalfKernel::Tiles);
            }
            if super::half_dot::f16_available() {
                all.push(HalfKernel::Registers);
            }
        }
        let _ = kind;
        all
    }
}

impl<T: Storage16> DenseHalf<T> {
    /// Lay out the row-major `n × k` weights `w` for products of many tokens.
    pub fn new(w: &[T], n: usize, k: usize) -> Result<DenseHalf<T>, KernelError> {
        DenseHalf::for_tokens(w, n, k, usize::MAX)
    }

    /// Lay out the row-major `n × k` weights `w` on the fastest kernel for products of
    /// `tokens` tokens (bf16 may take a different one below [`BF16_DOT_BELOW_TOKENS`]).
    pub fn for_tokens(w: &[T], n: usize, k: usize, tokens: usize) -> Result<DenseHalf<T>, KernelError> {
        DenseHalf::build(w, n, k, HalfKernel::chosen_dense(T::KIND, tokens))
    }

    /// [`Self::new`] on `kernel`, which the CPU runs.
    fn build(w: &[T], n: usize, k: usize, kernel: HalfKernel) -> Result<DenseHalf<T>, KernelError> {
        check_len("w", w.len(), n, k)?;
        let stored = match (kernel, T::KIND) {
            #[cfg(target_arch = "x86_64")]
            (HalfKernel::Tiles, Half::Bf16) => {
                DenseHalfStored::Tiles(super::amx::AmxWeights::new(T::bits(w), n, k))
            }
            #[cfg(target_arch = "x86_64")]
            (HalfKernel::Tiles, Half::F16) => {
                DenseHalfStored::F16Tiles(super::amx::F16Tiles::new(T::bits(w), n, k))
            }
            #[cfg(target_arch = "x86_64")]
            (HalfKernel::Dot, _) => {
                DenseHalfStored::Pairs(super::half_dot::DensePairs::new(T::bits(w), n, k))
            }
            #[cfg(target_arch = "x86_64")]
            (HalfKernel::Registers, Half::Bf16) => {
                DenseHalfStored::BfHalves(super::half_dot::DenseHalves::new(T::bits(w), n, k))
            }
            #[cfg(target_arch = "x86_64")]
            (HalfKernel::Registers, Half::F16) => {
                DenseHalfStored::Halves(super::half_dot::DenseHalves::new(T::bits(w), n, k))
            }
            (HalfKernel::F32, _) => {
                let mut wide = vec![0.0; w.len()];
                T::widen(w, &mut wide);
                DenseHalfStored::Widened(DenseWeights::new(wide, n, k)?)
            }
        };
        Ok(DenseHalf {
            n,
            k,
            stored,
            _storage: std::marker::PhantomData,
        })
    }

    /// `y[n × m] = W · x[k × m]`, f32 sums, on `threads` workers of the current rayon pool
    /// (1 runs on the calling thread).
    pub fn gemm(&self, threads: usize, x: &[T], y: &mut [f32], m: usize) -> Result<(), KernelError> {
        check_len("x", x.len(), self.k, m)?;
        check_len("y", y.len(), self.n, m)?;
        match &self.stored {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Tiles` is only built for bf16 where AMX-BF16 was detected and
            // granted; the lengths were checked above.
            DenseHalfStored::Tiles(t) => unsafe { t.gemm(threads, T::bits(x), y, m) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `F16Tiles` is only built for f16 where `amx::f16_available` held; the
            // lengths were checked above.
            DenseHalfStored::F16Tiles(t) => unsafe { t.gemm(threads, T::bits(x), y, m) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Pairs` is only built where the features were detected; the lengths
            // were checked above.
            DenseHalfStored::Pairs(p) => unsafe { p.gemm(threads, T::bits(x), y, m) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as for `Pairs`.
            DenseHalfStored::Halves(h) => unsafe { h.gemm(threads, T::bits(x), y, m) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as for `Pairs`.
            DenseHalfStored::BfHalves(h) => unsafe { h.gemm(threads, T::bits(x), y, m) },
            DenseHalfStored::Widened(d) => return widened(x, |xf| d.gemm(threads, xf, y, m)),
        }
        Ok(())
    }

    /// Which instruction-set path its products take.
    pub fn isa_path(&self) -> IsaPath {
        match self.stored {
            #[cfg(target_arch = "x86_64")]
            DenseHalfStored::Tiles(_) => IsaPath::AmxBf16,
            #[cfg(target_arch = "x86_64")]
            DenseHalfStored::F16Tiles(_) => IsaPath::AmxBf16x3,
            #[cfg(target_arch = "x86_64")]
            DenseHalfStored::Pairs(_) => IsaPath::Avx512Bf16,
            #[cfg(target_arch = "x86_64")]
            DenseHalfStored::Halves(_) => IsaPath::Avx512F16Widen,
            #[cfg(target_arch = "x86_64")]
            DenseHalfStored::BfHalves(_) => IsaPath::Avx512Bf16Widen,
            DenseHalfStored::Widened(_) => IsaPath::WidenF32,
        }
    }

    /// Bytes of weight values a product streams, as stored: `n · k` 16-bit values (three
    /// bf16 a weight for f16 on the tiles).
    pub fn value_bytes(&self) -> usize {
        match &self.stored {
            #[cfg(target_arch = "x86_64")]
            DenseHalfStored::F16Tiles(t) => t.bytes(self.n).0,
            _ => self.n * self.k * 2,
        }
    }
}

/// 2:4 16-bit weights in the compact format: per row and group of four the two kept values
/// in the storage type and their in-group positions as 2 bits each (a nibble per group),
/// read as such by the kernel where the CPU runs it: bf16 (`vpshufb` hands each row its
/// activation pair, `vdpbf16ps` multiplies it; AVX-512 BF16 and VBMI), f16 (`vpermilps`
/// hands each row its activation, the values widened in registers; AVX-512F and VBMI).
/// Without them it keeps the [`NmMatrix`] of the widened values and every product widens its
/// activations.
#[derive(Debug, Clone)]
pub struct TwoOfFourHalf<T> {
    rows: usize,
    k: usize,
    metadata_bytes: usize,
    stored: TwoOfFourStored,
    _storage: std::marker::PhantomData<T>,
}

/// 2:4 bf16 weights in the compact format.
pub type TwoOfFourBf16 = TwoOfFourHalf<half::bf16>;
/// 2:4 f16 weights in the compact format.
pub type TwoOfFourF16 = TwoOfFourHalf<half::f16>;

#[derive(Debug, Clone)]
enum TwoOfFourStored {
    /// bf16 2:4 expanded into AMX tiles per K block.
    #[cfg(target_arch = "x86_64")]
    Tiles(super::amx::SparseTiles),
    /// f16 2:4 as three bf16 products on those tiles.
    #[cfg(target_arch = "x86_64")]
    F16Tiles(super::amx::F16Tiles),
    #[cfg(target_arch = "x86_64")]
    Pairs(super::half_dot::TwoOfFourPairs),
    #[cfg(target_arch = "x86_64")]
    Halves(super::half_dot::TwoOfFourHalves<super::half_dot::F16>),
    #[cfg(target_arch = "x86_64")]
    BfHalves(super::half_dot::TwoOfFourHalves<super::half_dot::Bf16>),
    /// Boxed: the matrix carries its lazily built execution copies inline.
    Widened(Box<NmMatrix>),
}

impl<T: Storage16> TwoOfFourHalf<T> {
    /// Compress row-major `rows × k` weights that already satisfy 2:4 (at most two
    /// non-zeros in every group of four along K; see [`super::nm::prune_magnitude`]).
    pub fn compress(w: &[T], rows: usize, k: usize) -> Result<TwoOfFourHalf<T>, KernelError> {
        check_len("w", w.len(), rows, k)?;
        let mut wide = vec![0.0; w.len()];
        T::widen(w, &mut wide);
        let a = NmMatrix::compress(&wide, rows, k, 2, 4)?;
        Ok(TwoOfFourHalf::from_nm_values(
            &a,
            HalfKernel::chosen_two_of_four(T::KIND, usize::MAX),
        ))
    }

    /// The 16-bit form of a 2:4 [`NmMatrix`] (`None` for another pattern), its kept values
    /// rounded to `T`: exact for weights that were `T` already, as a slice's are; on the
    /// fastest kernel for products of `tokens` tokens.
    pub fn from_two_of_four(a: &NmMatrix, tokens: usize) -> Option<TwoOfFourHalf<T>> {
        (a.pattern() == (2, 4))
            .then(|| TwoOfFourHalf::from_nm_values(a, HalfKernel::chosen_two_of_four(T::KIND, tokens)))
    }

    /// [`Self::from_two_of_four`] for a matrix known to be 2:4, on `kernel`, which the CPU
    /// runs.
    fn from_nm_values(a: &NmMatrix, kernel: HalfKernel) -> TwoOfFourHalf<T> {
        let (rows, k) = (a.rows(), a.k());
        let values: Vec<T> = a.values().iter().map(|&v| T::from_f32(v)).collect();
        let make = |stored| TwoOfFourHalf {
            rows,
            k,
            metadata_bytes: a.metadata_bytes(),
            stored,
            _storage: std::marker::PhantomData,
        };
        #[cfg(target_arch = "x86_64")]
        {
            let (bits, row_bytes) = (T::bits(&values), k.div_ceil(8));
            match (kernel, T::KIND) {
                (HalfKernel::Tiles, Half::Bf16) => {
                    let dense: Vec<T> = a.decompress().iter().map(|&v| T::from_f32(v)).collect();
                    // The decompressed 2:4 weights keep at most two non-zeros a group.
                    if let Some(tiles) = super::amx::SparseTiles::new(T::bits(&dense), rows, k) {
                        return make(TwoOfFourStored::Tiles(tiles));
                    }
                }
                (HalfKernel::Tiles, Half::F16) => {
                    let dense: Vec<T> = a.decompress().iter().map(|&v| T::from_f32(v)).collect();
                    if let Some(tiles) = super::amx::F16Tiles::two_of_four(T::bits(&dense), rows, k) {
                        return make(TwoOfFourStored::F16Tiles(tiles));
                    }
                }
                (HalfKernel::Dot, _) => {
                    let pairs = super::half_dot::TwoOfFourPairs::new(rows, k, bits, a.indices(), row_bytes);
                    return make(TwoOfFourStored::Pairs(pairs));
                }
                (HalfKernel::Registers, Half::Bf16) => {
                    let halves = super::half_dot::TwoOfFourHalves::new(rows, k, bits, a.indices(), row_bytes);
                    return make(TwoOfFourStored::BfHalves(halves));
                }
                (HalfKernel::Registers, Half::F16) => {
                    let halves = super::half_dot::TwoOfFourHalves::new(rows, k, bits, a.indices(), row_bytes);
                    return make(TwoOfFourStored::Halves(halves));
                }
                (HalfKernel::F32, _) => {}
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = kernel;
        let widened = if values.iter().zip(a.values()).all(|(b, &f)| b.to_f32() == f) {
            a.clone()
        } else {
            let dense: Vec<f32> = a.decompress().iter().map(|&v| T::from_f32(v).to_f32()).collect();
            // Rounding keeps every zero a zero (and may add some), so the pattern still holds.
            NmMatrix::compress(&dense, rows, k, 2, 4).unwrap_or_else(|_| a.clone())
        };
        make(TwoOfFourStored::Widened(Box::new(widened)))
    }

    /// `y[rows × m] = W · x[k × m]`, f32 sums, on `threads` workers of the current rayon pool
    /// (1 runs on the calling thread).
    pub fn spmm(&self, threads: usize, x: &[T], y: &mut [f32], m: usize) -> Result<(), KernelError> {
        check_len("x", x.len(), self.k, m)?;
        check_len("y", y.len(), self.rows, m)?;
        match &self.stored {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Tiles` is only built for bf16 where AMX-BF16 and VBMI2 were detected
            // and granted; the lengths were checked above.
            TwoOfFourStored::Tiles(t) => unsafe { t.spmm(threads, T::bits(x), y, m) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `F16Tiles` is only built where `amx::f16_available` held and the CPU
            // expands 2:4 (`F16Tiles::two_of_four`); the lengths were checked above.
            TwoOfFourStored::F16Tiles(t) => unsafe { t.gemm(threads, T::bits(x), y, m) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Pairs` is only built where the features were detected; the lengths
            // were checked above.
            TwoOfFourStored::Pairs(p) => unsafe { p.spmm(threads, T::bits(x), y, m) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as for `Pairs`.
            TwoOfFourStored::Halves(h) => unsafe { h.spmm(threads, T::bits(x), y, m) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as for `Pairs`.
            TwoOfFourStored::BfHalves(h) => unsafe { h.spmm(threads, T::bits(x), y, m) },
            TwoOfFourStored::Widened(a) => {
                let schedule = super::schedule::schedule_cpu(m, self.rows, self.k, threads);
                return widened(x, |xf| a.spmm_scheduled(&schedule, xf, y, m));
            }
        }
        Ok(())
    }

    /// Which instruction-set path its products take.
    pub fn isa_path(&self) -> IsaPath {
        match self.stored {
            #[cfg(target_arch = "x86_64")]
            TwoOfFourStored::Tiles(_) => IsaPath::AmxBf16,
            #[cfg(target_arch = "x86_64")]
            TwoOfFourStored::F16Tiles(_) => IsaPath::AmxBf16x3,
            #[cfg(target_arch = "x86_64")]
            TwoOfFourStored::Pairs(_) => IsaPath::Avx512Bf16,
            #[cfg(target_arch = "x86_64")]
            TwoOfFourStored::Halves(_) => IsaPath::Avx512F16Widen,
            #[cfg(target_arch = "x86_64")]
            TwoOfFourStored::BfHalves(_) => IsaPath::Avx512Bf16Widen,
            TwoOfFourStored::Widened(_) => IsaPath::WidenF32,
        }
    }

    /// Bytes of kept values, as stored: two 16-bit values per group of four (the tiles' form
    /// padded to whole 16-row panels and 32-k steps).
    pub fn value_bytes(&self) -> usize {
        match &self.stored {
            #[cfg(target_arch = "x86_64")]
            TwoOfFourStored::Tiles(t) => t.value_bytes(),
            #[cfg(target_arch = "x86_64")]
            TwoOfFourStored::F16Tiles(t) => t.bytes(self.rows).0,
            _ => self.rows * self.k,
        }
    }

    /// Bytes of index metadata, as stored: 2 bits per kept value, each row on a byte (the
    /// tiles' form: a 32-bit expansion mask per row and step).
    pub fn metadata_bytes(&self) -> usize {
        match &self.stored {
            #[cfg(target_arch = "x86_64")]
            TwoOfFourStored::Tiles(t) => t.metadata_bytes(),
            #[cfg(target_arch = "x86_64")]
            TwoOfFourStored::F16Tiles(t) => t.bytes(self.rows).1,
            _ => self.metadata_bytes,
        }
    }
}

/// bf16 block-sparse weights on `vdpbf16ps` (issue 20): the kept blocks of a
/// [`BsrMatrix`](super::bsr::BsrMatrix) as bf16 pairs, so a bf16 block-sparse candidate runs
/// at the bf16 rate of its dense comparator instead of widening to the f32 BSR kernel.
/// Built only where that kernel runs and the blocks fit it (16-row multiples, even
/// widths); elsewhere [`BlockBf16::from_bsr`] says `None` and the slice keeps the f32 form.
/// Where the AMX tiles are granted, blocks of whole panels × 16s of K take them instead from
/// a few tokens on (`amx::KeptTiles`: each tile holding a kept block stored whole, the
/// empty ones skipped), as the dense comparator does.
#[derive(Debug, Clone)]
pub struct BlockBf16 {
    rows: usize,
    k: usize,
    metadata_bytes: usize,
    #[cfg(target_arch = "x86_64")]
    form: BlockBf16Form,
    #[cfg(not(target_arch = "x86_64"))]
    never: std::convert::Infallible,
}

/// How a [`BlockBf16`] holds its blocks.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone)]
enum BlockBf16Form {
    /// Kept blocks as `vdpbf16ps` operands.
    Pairs(super::half_dot::BlockPairs),
    /// AMX tiles holding a kept block, the empty ones skipped.
    Tiles(super::amx::KeptTiles),
}

impl BlockBf16 {
    /// The bf16 form of a block-sparse matrix whose values are bf16 already (a bf16
    /// slice's are; others are rounded), where `vdpbf16ps` is this CPU's bf16 kernel for
    /// products of `tokens` tokens and the block shape fits it.
    pub fn from_bsr(a: &super::bsr::BsrMatrix, tokens: usize) -> Option<BlockBf16> {
        #[cfg(target_arch = "x86_64")]
        {
            let (br, bc) = a.block_shape();
            let (rows, k) = (a.rows(), a.k());
            let bf16 =
                |v: &[f32]| -> Vec<u16> { v.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect() };
            if super::amx::KeptTiles::pays_at(super::amx::Op::Bf16, (br, bc), tokens) {
                let tiles = super::amx::KeptTiles::new(&bf16(&a.decompress()), rows, k);
                return Some(BlockBf16 {
                    rows,
                    k,
                    metadata_bytes: tiles.metadata_bytes(),
                    form: BlockBf16Form::Tiles(tiles),
                });
            }
            if !super::half_dot::blocks_fit(br, bc)
                || HalfKernel::chosen(Half::Bf16, Form::Block { rows: br, cols: bc }, tokens)
                    != HalfKernel::Dot
            {
                return None;
            }
            let (block_ptr, block_cols, values) = a.parts();
            let pairs =
                super::half_dot::BlockPairs::new((rows, k), (br, bc), block_ptr, block_cols, &bf16(values));
            Some(BlockBf16 {
                rows,
                k,
                metadata_bytes: a.metadata_bytes(),
                form: BlockBf16Form::Pairs(pairs),
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (a, tokens);
            None
        }
    }

    /// `y[rows × m] = W · x[k × m]`, f32 sums, on `threads` workers of the current rayon pool
    /// (1 runs on the calling thread).
    pub fn spmm(&self, threads: usize, x: &[half::bf16], y: &mut [f32], m: usize) -> Result<(), KernelError> {
        check_len("x", x.len(), self.k, m)?;
        check_len("y", y.len(), self.rows, m)?;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: each form is built only where its features were detected (and the tiles
        // granted); lengths checked above.
        unsafe {
            let x = <half::bf16 as Storage16>::bits(x);
            match &self.form {
                BlockBf16Form::Pairs(p) => p.spmm(threads, x, y, m),
                BlockBf16Form::Tiles(t) => t.spmm(threads, x, y, m),
            }
        };
        #[cfg(not(target_arch = "x86_64"))]
        match self.never {}
        Ok(())
    }

    /// Which instruction-set path its products take.
    pub fn isa_path(&self) -> IsaPath {
        #[cfg(target_arch = "x86_64")]
        return match self.form {
            BlockBf16Form::Pairs(_) => IsaPath::Avx512Bf16,
            BlockBf16Form::Tiles(_) => IsaPath::AmxBf16,
        };
        #[cfg(not(target_arch = "x86_64"))]
        match self.never {}
    }

    /// Bytes of stored values (bf16), the zeros inside kept blocks (or tiles) included.
    pub fn value_bytes(&self) -> usize {
        #[cfg(target_arch = "x86_64")]
        return match &self.form {
            BlockBf16Form::Pairs(p) => p.value_bytes(),
            BlockBf16Form::Tiles(t) => t.value_bytes(),
        };
        #[cfg(not(target_arch = "x86_64"))]
        match self.never {}
    }

    /// Bytes of index metadata: a u32 block column per block plus the block-row pointers
    /// (tiles: a u32 K step per kept tile entry plus run lengths per panel pair).
    pub fn metadata_bytes(&self) -> usize {
        self.metadata_bytes
    }
}

/// Symmetric per-channel quantisation of row-major `rows × cols` values: one scale per row,
/// `max|row| / 127` (1 for an all-zero row). Returns `(q, scales)` with `v ≈ q · scale`.
pub fn quantize_per_channel(v: &[f32], rows: usize, cols: usize) -> Result<(Vec<i8>, Vec<f32>), KernelError> {
    check_len("v", v.len(), rows, cols)?;
    let mut q = vec![0i8; v.len()];
    let mut scales = vec![1.0f32; rows];
    if cols == 0 {
        return Ok((q, scales));
    }
    for ((row, qrow), s) in v
        .chunks_exact(cols)
        .zip(q.chunks_exact_mut(cols))
        .zip(&mut scales)
    {
        let max = row.iter().fold(0.0f32, |a, &e| a.max(e.abs()));
        if max > 0.0 && max.is_finite() {
            *s = max / 127.0;
        }
        for (qe, &e) in qrow.iter_mut().zip(row) {
            // In [-127, 127] by the choice of scale; `as` saturates NaN to 0.
            *qe = (e / *s).round().clamp(-127.0, 127.0) as i8;
        }
    }
    Ok((q, scales))
}

/// `y[r, c] = acc[r, c] · w_scale[r] · x_scale`: the f32 value of an int8 product, on
/// `threads` workers of the current rayon pool (1 runs on the calling thread).
///
/// Parallel because it is part of every int8 product the gate times: one pass over the
/// outputs on one core took ~4 ms of a 2048³ product's ~27 on two (Zen 4), a seventh of
/// the time, on the dense comparator and the sparse candidate alike.
pub fn dequantize(
    threads: usize,
    acc: &[i32],
    w_scale: &[f32],
    x_scale: f32,
    y: &mut [f32],
    cols: usize,
) -> Result<(), KernelError> {
    check_len("acc", acc.len(), w_scale.len(), cols)?;
    check_len("y", y.len(), w_scale.len(), cols)?;
    let scales = Int8Scales { w_scale, x_scale };
    scale_rows(threads, y, scales, cols, |r, yr, s| {
        let ar = &acc[r * cols..(r + 1) * cols];
        yr.iter_mut().zip(ar).for_each(|(o, &a)| *o = a as f32 * s);
    });
    Ok(())
}

/// Runs `row(r, y_row, w_scale[r] · x_scale)` for every row of `y` (`cols` wide), rows split
/// over `threads` workers of the current rayon pool (four tasks a worker): the one loop of
/// [`dequantize`] and of the in-place pass behind [`DenseI8::gemm_scaled`].
fn scale_rows(
    threads: usize,
    y: &mut [f32],
    scales: Int8Scales<'_>,
    cols: usize,
    row: impl Fn(usize, &mut [f32], f32) + Sync,
) {
    if cols == 0 {
        return;
    }
    let rows_per_task = scales.w_scale.len().div_ceil(threads.max(1) * 4).max(1);
    let task = |(i, yc): (usize, &mut [f32])| {
        let first = i * rows_per_task;
        for (j, (yr, &s)) in yc
            .chunks_exact_mut(cols)
            .zip(&scales.w_scale[first..])
            .enumerate()
        {
            row(first + j, yr, s * scales.x_scale);
        }
    };
    super::shared_output::for_each_chunk(y, rows_per_task * cols, threads > 1, task);
}

/// The scales of an int8 product whose outputs are wanted in f32: `y[r, c] = Σ · w_scale[r]
/// · x_scale`, as [`dequantize`] computes it.
#[derive(Debug, Clone, Copy)]
pub struct Int8Scales<'a> {
    /// One per output row (weight channel).
    pub w_scale: &'a [f32],
    /// The activations'.
    pub x_scale: f32,
}

/// What an int8 kernel stores for each exact sum `s` of output row `r`.
///
/// Why `Scaled`: a separate dequantization reads every i32 sum back and writes its f32 once
/// more; stored from the register tile, the outputs are written once. On a 2-vCPU Emerald
/// Rapids the separate pass took 1.2–1.3 ms of a 15 ms int8 2048³ product (2 threads), on
/// the dense comparator and the sparse candidate alike.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Epilogue<'a> {
    /// `s` itself.
    Sums,
    /// The f32 bits of `s as f32 · (w_scale[r] · x_scale)` in `s`'s slot: bit for bit what
    /// [`dequantize`] writes.
    Scaled(Int8Scales<'a>),
}

impl<'a> Epilogue<'a> {
    /// The same epilogue for the rows from `first` on (a task's part of the output).
    pub(crate) fn rows_from(self, first: usize) -> Epilogue<'a> {
        match self {
            Epilogue::Sums => Epilogue::Sums,
            Epilogue::Scaled(s) => Epilogue::Scaled(Int8Scales {
                w_scale: &s.w_scale[first.min(s.w_scale.len())..],
                x_scale: s.x_scale,
            }),
        }
    }

    /// Row `r`'s multiplier (`None` for sums); rows past the scales take the last row's,
    /// for tiles whose padding rows are computed but never stored.
    #[inline]
    pub(crate) fn row_scale(self, r: usize) -> Option<f32> {
        match self {
            Epilogue::Sums => None,
            Epilogue::Scaled(s) => Some(s.w_scale[r.min(s.w_scale.len().saturating_sub(1))] * s.x_scale),
        }
    }

    /// What is stored for the sum `s` under `scale` (a [`Self::row_scale`]).
    #[inline]
    pub(crate) fn value(s: i32, scale: Option<f32>) -> i32 {
        match scale {
            None => s,
            Some(m) => (s as f32 * m).to_bits() as i32,
        }
    }
}

/// `y` as the i32 slots an int8 kernel writes its sums (or, [`Epilogue::Scaled`], their f32
/// bits) into.
fn sum_slots(y: &mut [f32]) -> &mut [i32] {
    // SAFETY: i32 and f32 have the same size and alignment and every bit pattern is valid
    // for both; the borrow of `y` passes to the result.
    unsafe { std::slice::from_raw_parts_mut(y.as_mut_ptr().cast::<i32>(), y.len()) }
}

/// Turn the i32 sums a kernel left in `y`'s slots into their f32 values in place, as
/// [`dequantize`] would into another buffer: the epilogue of the kernels that cannot store
/// f32 from their register tiles.
fn dequantize_in_place(threads: usize, y: &mut [f32], scales: Int8Scales<'_>, cols: usize) {
    scale_rows(threads, y, scales, cols, |_, yr, s| {
        yr.iter_mut().for_each(|o| *o = o.to_bits() as i32 as f32 * s);
    });
}

/// An int8 product with f32 outputs in `y` (`rows × m`): `product(slots, epilogue)` runs the
/// kernel on `y`'s slots and says whether it scaled as it stored; where it did not, a pass
/// scales the sums in place.
fn scaled(
    threads: usize,
    scales: Int8Scales<'_>,
    (y, rows, m): (&mut [f32], usize, usize),
    product: impl FnOnce(&mut [i32], Epilogue<'_>) -> Result<bool, KernelError>,
) -> Result<(), KernelError> {
    check_len("w_scale", scales.w_scale.len(), rows, 1)?;
    check_len("y", y.len(), rows, m)?;
    if !product(sum_slots(y), Epilogue::Scaled(scales))? {
        dequantize_in_place(threads, y, scales, m);
    }
    Ok(())
}

/// One output row: `y_row = Σ w · x[k, ..]` over the `(k, w)` entries, widened in i32
/// (exact: see [`INT8_MAX_K`]). The loop is written once and compiled for AVX-512BW and AVX2
/// as well, picked at run time, because the i8 → i32 widening vectorises badly on baseline
/// x86-64.
#[inline]
fn axpy_rows(isa: IntIsa, entries: impl Iterator<Item = (usize, i8)>, x: &[i8], y_row: &mut [i32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512BW was detected by `IntIsa::detect`; the body is safe code.
        IntIsa::Avx512 => unsafe { axpy_avx512(entries, x, y_row) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 was detected by `IntIsa::detect`; the body is safe code.
        IntIsa::Avx2 => unsafe { axpy_avx2(entries, x, y_row) },
        IntIsa::Portable => axpy_body(entries, x, y_row),
    }
}

/// The vector extension the int8 loop is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IntIsa {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Portable,
}

impl IntIsa {
    fn detect() -> IntIsa {
        #[cfg(target_arch = "x86_64")]
        {
            if crate::cpu::has!("avx512bw") {
                return IntIsa::Avx512;
            }
            if crate::cpu::has!("avx2") {
                return IntIsa::Avx2;
            }
        }
        IntIsa::Portable
    }
}

#[inline(always)]
fn axpy_body(entries: impl Iterator<Item = (usize, i8)>, x: &[i8], y_row: &mut [i32]) {
    let m = y_row.len();
    y_row.fill(0);
    for (k, w) in entries {
        let w = i32::from(w);
        let xr = &x[k * m..(k + 1) * m];
        for (o, &e) in y_row.iter_mut().zip(xr) {
            *o += w * i32::from(e);
        }
    }
}

/// # Safety
/// The CPU supports AVX-512F and AVX-512BW.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn axpy_avx512(entries: impl Iterator<Item = (usize, i8)>, x: &[i8], y_row: &mut [i32]) {
    axpy_body(entries, x, y_row)
}

/// # Safety
/// The CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn axpy_avx2(entries: impl Iterator<Item = (usize, i8)>, x: &[i8], y_row: &mut [i32]) {
    axpy_body(entries, x, y_row)
}

/// Largest K an int8 product accepts: `K · 128 · 128 ≤ i32::MAX`, so even `-128 · -128` in
/// every term leaves the true sum inside i32 and every kernel's result exact. (The VNNI
/// kernel's shifted partial sums may pass i32 on the way; they wrap modulo 2^32 and come
/// back exactly, see `int8_vnni`.)
pub const INT8_MAX_K: usize = (i32::MAX as usize) / (128 * 128);

/// `y[N×M] = w[N×K] · x[K×M]` in i8 × i8 → i32, exact, on `threads` workers of the current
/// rayon pool (1 runs on the calling thread).
///
/// One product on the dense int8 comparator, [`DenseI8`], its weights laid out for this call
/// only: the AVX-512 VNNI kernel (`vpdpbusd`, four byte products per i32 lane) where
/// AVX-512F/BW/VNNI are detected at run time, else the widening axpy loop (AVX-512BW, AVX2 or
/// portable). Repeated products with the same weights hold a [`DenseI8`] instead.
pub fn gemm_i8(
    threads: usize,
    w: &[i8],
    x: &[i8],
    y: &mut [i32],
    n: usize,
    k: usize,
    m: usize,
) -> Result<(), KernelError> {
    check_i8_shapes(w, x, y, n, k, m)?;
    DenseI8::for_tokens(w, n, k, m)?.gemm(threads, x, y, m)
}

/// Dense `n × k` int8 weights laid out once for repeated products (weight-stationary): the
/// dense int8 comparator of a slice, as the vendor libraries it is measured against pack
/// theirs once (issue 20).
///
/// Where AVX-512F/BW/VNNI are detected the weights are packed for `vpdpbusd` in 16-row
/// blocks (`int8_dense`); without them they stay row-major for the widening axpy loop.
#[derive(Debug, Clone)]
pub struct DenseI8 {
    n: usize,
    k: usize,
    stored: DenseI8Stored,
}

#[derive(Debug, Clone)]
enum DenseI8Stored {
    #[cfg(target_arch = "x86_64")]
    Tiles(super::amx::AmxWeights),
    #[cfg(target_arch = "x86_64")]
    Blocks(super::int8_dense::DenseBlocks),
    Rows(Vec<i8>),
}

/// The fewest tokens at which the dense int8 comparator runs on AMX tiles where the CPU also
/// has VNNI: at one or two tokens a 16-token activation tile is mostly padding and the
/// weights' bytes decide, and the VNNI kernel streams them a little faster. Measured on a
/// 2-vCPU AMX Xeon (2 threads, huge pages, dense ms, tiles / VNNI): 1×11008×4096 0.99–1.01
/// / 0.91, 1×4096² 0.36–0.40 / 0.34–0.36, 2×11008×4096 0.89–0.92 / 0.85–0.86; at 4 tokens
/// the tiles lead (4×11008×4096 0.91–0.92 / 0.94–0.97, 4×4096² 0.31–0.37 / 0.38).
pub const INT8_TILES_FROM_TOKENS: usize = 3;

impl DenseI8 {
    /// Lay out the row-major `n × k` weights `w`; refuses a K whose sums could leave i32.
    pub fn new(w: &[i8], n: usize, k: usize) -> Result<DenseI8, KernelError> {
        DenseI8::for_tokens(w, n, k, usize::MAX)
    }

    /// [`Self::new`] on the fastest kernel for products of `tokens` tokens (the tiles from
    /// [`INT8_TILES_FROM_TOKENS`] where both exist).
    pub fn for_tokens(w: &[i8], n: usize, k: usize, tokens: usize) -> Result<DenseI8, KernelError> {
        check_len("w", w.len(), n, k)?;
        if k > INT8_MAX_K {
            return Err(KernelError::Overflow { rows: n, cols: k });
        }
        #[cfg(target_arch = "x86_64")]
        let vector = super::int8_dense::available();
        #[cfg(target_arch = "x86_64")]
        if super::amx::available(super::amx::Op::I8) && (tokens >= INT8_TILES_FROM_TOKENS || !vector) {
            let stored = DenseI8Stored::Tiles(super::amx::AmxWeights::new(w, n, k));
            return Ok(DenseI8 { n, k, stored });
        }
        #[cfg(target_arch = "x86_64")]
        if vector {
            let stored = DenseI8Stored::Blocks(super::int8_dense::DenseBlocks::new(w, n, k));
            return Ok(DenseI8 { n, k, stored });
        }
        Ok(DenseI8 {
            n,
            k,
            stored: DenseI8Stored::Rows(w.to_vec()),
        })
    }

    /// `y[n × m] = W · x[k × m]`, exact in i32, on `threads` workers of the current rayon
    /// pool (1 runs on the calling thread).
    pub fn gemm(&self, threads: usize, x: &[i8], y: &mut [i32], m: usize) -> Result<(), KernelError> {
        self.gemm_with(threads, x, y, m, Epilogue::Sums).map(|_| ())
    }

    /// `y[n × m] = (W · x[k × m]) · w_scale[row] · x_scale` in f32, bit for bit
    /// [`Self::gemm`] then [`dequantize`], with the scaling fused into the kernel's stores
    /// where it has them (so the outputs are written once).
    pub fn gemm_scaled(
        &self,
        threads: usize,
        x: &[i8],
        scales: Int8Scales<'_>,
        y: &mut [f32],
        m: usize,
    ) -> Result<(), KernelError> {
        scaled(threads, scales, (y, self.n, m), |sums, epilogue| {
            self.gemm_with(threads, x, sums, m, epilogue)
        })
    }

    /// The product with `epilogue`; says whether the kernel applied it (else `y` holds
    /// the sums).
    fn gemm_with(
        &self,
        threads: usize,
        x: &[i8],
        y: &mut [i32],
        m: usize,
        epilogue: Epilogue<'_>,
    ) -> Result<bool, KernelError> {
        check_len("x", x.len(), self.k, m)?;
        check_len("y", y.len(), self.n, m)?;
        match &self.stored {
            #[cfg(target_arch = "x86_64")]
            DenseI8Stored::Tiles(t) => {
                // SAFETY: `Tiles` is only built where AMX-INT8 was detected and granted; the
                // shapes were checked above and `k ≤ INT8_MAX_K` by `new`.
                unsafe { t.gemm(threads, x, y, m) };
                Ok(false)
            }
            #[cfg(target_arch = "x86_64")]
            DenseI8Stored::Blocks(b) => {
                // SAFETY: `Blocks` is only built where the features were detected; the
                // shapes were checked above and `k ≤ INT8_MAX_K` by `new`.
                Ok(unsafe { b.gemm(threads, x, y, m, epilogue) })
            }
            DenseI8Stored::Rows(w) => gemm_i8_axpy(threads, w, x, y, self.n, self.k, m).map(|()| false),
        }
    }

    /// Which instruction-set path its products take.
    pub fn isa_path(&self) -> IsaPath {
        match self.stored {
            #[cfg(target_arch = "x86_64")]
            DenseI8Stored::Tiles(_) => IsaPath::AmxInt8,
            #[cfg(target_arch = "x86_64")]
            DenseI8Stored::Blocks(_) => IsaPath::Avx512Vnni,
            DenseI8Stored::Rows(_) => IsaPath::WidenI32,
        }
    }

    /// Bytes of weight values a product streams, as stored (the VNNI layout's padding to
    /// whole 16-row blocks and K-quads included).
    pub fn value_bytes(&self) -> usize {
        match &self.stored {
            #[cfg(target_arch = "x86_64")]
            DenseI8Stored::Tiles(t) => t.packed_bytes(),
            #[cfg(target_arch = "x86_64")]
            DenseI8Stored::Blocks(b) => b.packed_bytes(),
            DenseI8Stored::Rows(w) => w.len(),
        }
    }
}

fn check_i8_shapes(w: &[i8], x: &[i8], y: &[i32], n: usize, k: usize, m: usize) -> Result<(), KernelError> {
    check_gemm(w.len(), x.len(), y.len(), n, k, m)?;
    if k > INT8_MAX_K {
        return Err(KernelError::Overflow { rows: n, cols: k });
    }
    Ok(())
}

/// [`gemm_i8`] on the widening axpy loop: the fallback without VNNI, one row per task.
fn gemm_i8_axpy(
    threads: usize,
    w: &[i8],
    x: &[i8],
    y: &mut [i32],
    n: usize,
    k: usize,
    m: usize,
) -> Result<(), KernelError> {
    check_i8_shapes(w, x, y, n, k, m)?;
    if n == 0 || m == 0 {
        return Ok(());
    }
    let isa = IntIsa::detect();
    let row = |(r, y_row): (usize, &mut [i32])| {
        let wr = &w[r * k..(r + 1) * k];
        axpy_rows(isa, wr.iter().copied().enumerate(), x, y_row);
    };
    if threads <= 1 {
        y.chunks_exact_mut(m).enumerate().for_each(row);
    } else {
        y.par_chunks_exact_mut(m).enumerate().for_each(row);
    }
    Ok(())
}

/// Pruned int8 weights: the int8 kernel for every sparsity pattern, which streams only the
/// kept weights. Two forms:
///
/// * **Compact 2:4** ([`SparseI8::compress_nm`] with 2:4, or 1:2, which is a 2:4 matrix), where
///   AVX-512 VNNI and VBMI are detected: i8 values and 2-bit in-group indices, 0.625 bytes per
///   dense weight, read directly by the kernels in `int8_two_of_four`.
/// * **Blocks** ([`SparseI8::compress_blocks`]) of whole 16-row panels × whole quads of K,
///   where AVX-512 VNNI is detected: each kept block as the dense kernel's `vpdpbusd`
///   operands, one u32 block column per block (`int8_blocks`); from
///   [`SparseI8::compress_blocks_for`]'s token threshold, blocks of whole panels × 16s of K
///   on AMX tiles instead, each tile holding a kept block stored whole and the empty ones
///   skipped (`amx::KeptTiles`).
/// * **Kept entries per row** (values and u32 K positions) for every other pattern or CPU;
///   where VNNI is detected `compress` also regroups them into quads for the VNNI kernel and
///   into groups of 16 for the few-token gather kernel, `int8_gather` (the byte counts below
///   describe the kept entries, not those padded copies).
#[derive(Debug, Clone, PartialEq)]
pub struct SparseI8 {
    rows: usize,
    k: usize,
    form: SparseForm,
}

/// How a [`SparseI8`] holds its weights.
#[derive(Debug, Clone, PartialEq)]
enum SparseForm {
    Entries {
        row_start: Vec<usize>,
        cols: Vec<u32>,
        values: Vec<i8>,
        /// The same entries regrouped for the VNNI kernel, where the CPU has it (built once
        /// here, weight-stationary like the other sparse formats).
        #[cfg(target_arch = "x86_64")]
        quads: Option<super::int8_vnni::SparseQuads>,
        /// The same entries grouped for the few-token gather kernel, where the CPU has VNNI.
        #[cfg(target_arch = "x86_64")]
        gather: Option<super::int8_gather::GatherRows>,
    },
    #[cfg(target_arch = "x86_64")]
    TwoOfFour(super::int8_two_of_four::TwoOfFourI8),
    /// 2:4 expanded into AMX tiles per K block (AMX-INT8 and VBMI2).
    #[cfg(target_arch = "x86_64")]
    Tiles(super::amx::SparseTiles),
    #[cfg(target_arch = "x86_64")]
    Blocks(super::int8_blocks::BlocksI8),
    /// Blocks on AMX tiles, the all-zero tiles skipped (AMX-INT8).
    #[cfg(target_arch = "x86_64")]
    KeptTiles(super::amx::KeptTiles),
}

impl SparseI8 {
    /// Keep the non-zeros of the row-major `rows × k` int8 weights, as kept entries per row.
    pub fn compress(w: &[i8], rows: usize, k: usize) -> Result<SparseI8, KernelError> {
        check_sparse_i8(w, rows, k)?;
        let (row_start, cols, values) = crate::csr::nonzero_rows(w, rows, k);
        Ok(SparseI8 {
            rows,
            k,
            form: SparseForm::Entries {
                #[cfg(target_arch = "x86_64")]
                quads: super::int8_vnni::available()
                    .then(|| super::int8_vnni::SparseQuads::from_rows(rows, k, &row_start, &cols, &values)),
                #[cfg(target_arch = "x86_64")]
                gather: super::int8_vnni::available()
                    .then(|| super::int8_gather::GatherRows::from_rows(rows, k, &row_start, &cols, &values)),
                row_start,
                cols,
                values,
            },
        })
    }

    /// Compress row-major `rows × k` int8 weights pruned to `n:m` along K (at most `n`
    /// non-zeros in every group of `m`, the last group possibly shorter; a fuller group is
    /// refused as [`KernelError::Overfull`]). 2:4, and 1:2 (each group of four keeps one in
    /// each half, so it is 2:4), take the compact 2:4 form where the CPU runs its kernels;
    /// every other case keeps entries as [`Self::compress`] does.
    ///
    /// Why not other ratios in the compact form: four kept values of 1:4 or 2:8 span 16 K
    /// positions, so a token's bytes no longer fit one two-register `vpermt2b` (16 tokens ×
    /// 16 bytes) and the kernel would need two selections per `vpdpbusd`; they could run as
    /// padded 2:4 (every group of four holds at most two), at 2:4's cost for half its work.
    pub fn compress_nm(w: &[i8], rows: usize, k: usize, n: usize, m: usize) -> Result<SparseI8, KernelError> {
        SparseI8::compress_nm_for(w, rows, k, (n, m), usize::MAX)
    }

    /// [`Self::compress_nm`] for products of `tokens` tokens: 2:4 and 1:2 take the AMX
    /// tiles only from the token count where they pay (`amx::sparse_tiles_from_tokens`),
    /// the compact AVX-512 form below it.
    pub fn compress_nm_for(
        w: &[i8],
        rows: usize,
        k: usize,
        (n, m): (usize, usize),
        tokens: usize,
    ) -> Result<SparseI8, KernelError> {
        if n == 0 || n >= m || m > 256 {
            return Err(KernelError::Pattern { n, m });
        }
        check_sparse_i8(w, rows, k)?;
        for (row, wr) in w.chunks_exact(k.max(1)).take(rows).enumerate() {
            for (group, g) in wr.chunks(m).enumerate() {
                let nonzeros = g.iter().filter(|&&v| v != 0).count();
                if nonzeros > n {
                    return Err(KernelError::Overfull {
                        row,
                        group,
                        nonzeros,
                        n,
                        m,
                    });
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        if matches!((n, m), (2, 4) | (1, 2)) && super::amx::SparseTiles::pays_at(super::amx::Op::I8, tokens) {
            // Every group of four holds at most two non-zeros (checked above).
            if let Some(tiles) = super::amx::SparseTiles::new(w, rows, k) {
                return Ok(SparseI8 {
                    rows,
                    k,
                    form: SparseForm::Tiles(tiles),
                });
            }
        }
        #[cfg(target_arch = "x86_64")]
        if matches!((n, m), (2, 4) | (1, 2)) && super::int8_two_of_four::available() {
            let compact = super::int8_two_of_four::TwoOfFourI8::compress(w, rows, k)?;
            return Ok(SparseI8 {
                rows,
                k,
                form: SparseForm::TwoOfFour(compact),
            });
        }
        SparseI8::compress(w, rows, k)
    }

    /// Compress row-major `rows × k` int8 weights pruned to `br × bc` blocks (every block
    /// with a non-zero kept whole): as blocks where the block kernel runs them (VNNI, `br`
    /// a multiple of 16, `bc` of 4, both tiling the matrix), else as kept entries.
    pub fn compress_blocks(
        w: &[i8],
        rows: usize,
        k: usize,
        br: usize,
        bc: usize,
    ) -> Result<SparseI8, KernelError> {
        SparseI8::compress_blocks_for(w, rows, k, (br, bc), usize::MAX)
    }

    /// [`Self::compress_blocks`] for products of `tokens` tokens: blocks of whole panels ×
    /// multiples of 16 take the AMX tiles (the all-zero tiles skipped) from the token count
    /// where they pay, the AVX-512 block form below it.
    pub fn compress_blocks_for(
        w: &[i8],
        rows: usize,
        k: usize,
        (br, bc): (usize, usize),
        tokens: usize,
    ) -> Result<SparseI8, KernelError> {
        check_sparse_i8(w, rows, k)?;
        #[cfg(target_arch = "x86_64")]
        if super::amx::KeptTiles::pays_at(super::amx::Op::I8, (br, bc), tokens) {
            return Ok(SparseI8 {
                rows,
                k,
                form: SparseForm::KeptTiles(super::amx::KeptTiles::new(w, rows, k)),
            });
        }
        #[cfg(target_arch = "x86_64")]
        if super::int8_blocks::fits(br, bc)
            && rows.is_multiple_of(br)
            && k.is_multiple_of(bc)
            && super::int8_vnni::available()
        {
            let blocks = super::int8_blocks::BlocksI8::compress(w, rows, k, br, bc);
            return Ok(SparseI8 {
                rows,
                k,
                form: SparseForm::Blocks(blocks),
            });
        }
        let _ = (br, bc);
        SparseI8::compress(w, rows, k)
    }

    /// Whether the weights are held in the compact 2:4 form (see [`Self::compress_nm`]).
    pub fn is_compact(&self) -> bool {
        match self.form {
            SparseForm::Entries { .. } => false,
            #[cfg(target_arch = "x86_64")]
            SparseForm::Blocks(_) | SparseForm::KeptTiles(_) => false,
            #[cfg(target_arch = "x86_64")]
            SparseForm::TwoOfFour(_) | SparseForm::Tiles(_) => true,
        }
    }

    /// `y[rows × m] = W · x[k × m]`, exact in i32, on `threads` workers of the current rayon
    /// pool (1 runs on the calling thread): the compact 2:4 kernels, else the VNNI kernel on
    /// kept entries four at a time per `vpdpbusd` where the CPU has it, else the widening
    /// axpy loop.
    pub fn spmm(&self, threads: usize, x: &[i8], y: &mut [i32], m: usize) -> Result<(), KernelError> {
        self.spmm_with(threads, x, y, m, Epilogue::Sums).map(|_| ())
    }

    /// `y[rows × m] = (W · x[k × m]) · w_scale[row] · x_scale` in f32, bit for bit
    /// [`Self::spmm`] then [`dequantize`], with the scaling fused into the kernel's stores
    /// where it has them (as [`DenseI8::gemm_scaled`], so both sides of a comparison pay
    /// for their outputs alike).
    pub fn spmm_scaled(
        &self,
        threads: usize,
        x: &[i8],
        scales: Int8Scales<'_>,
        y: &mut [f32],
        m: usize,
    ) -> Result<(), KernelError> {
        scaled(threads, scales, (y, self.rows, m), |sums, epilogue| {
            self.spmm_with(threads, x, sums, m, epilogue)
        })
    }

    /// The product with `epilogue`; says whether the kernel applied it (else `y` holds
    /// the sums).
    fn spmm_with(
        &self,
        threads: usize,
        x: &[i8],
        y: &mut [i32],
        m: usize,
        epilogue: Epilogue<'_>,
    ) -> Result<bool, KernelError> {
        check_len("x", x.len(), self.k, m)?;
        check_len("y", y.len(), self.rows, m)?;
        match &self.form {
            #[cfg(target_arch = "x86_64")]
            SparseForm::TwoOfFour(a) => {
                // SAFETY: the compact form exists only where its features were detected; the
                // shapes were checked above and `k ≤ INT8_MAX_K` by `compress_nm`.
                Ok(unsafe { a.spmm(threads, x, y, m, epilogue) })
            }
            #[cfg(target_arch = "x86_64")]
            SparseForm::Tiles(a) => {
                // SAFETY: the tile form exists only where AMX-INT8 and VBMI2 were detected
                // and granted; the shapes were checked above and `k ≤ INT8_MAX_K` by
                // `compress_nm`.
                unsafe { a.spmm(threads, x, y, m) };
                Ok(false)
            }
            #[cfg(target_arch = "x86_64")]
            SparseForm::Blocks(a) => {
                // SAFETY: the block form exists only where VNNI was detected; the shapes
                // were checked above and `k ≤ INT8_MAX_K` by `compress_blocks`.
                unsafe { a.spmm(threads, x, y, m) };
                Ok(false)
            }
            #[cfg(target_arch = "x86_64")]
            SparseForm::KeptTiles(a) => {
                // SAFETY: the tile form exists only where AMX-INT8 was detected and granted;
                // the shapes were checked above and `k ≤ INT8_MAX_K` by `compress_blocks_for`.
                unsafe { a.spmm(threads, x, y, m) };
                Ok(false)
            }
            #[cfg(target_arch = "x86_64")]
            SparseForm::Entries {
                gather: Some(g),
                quads,
                ..
            } if (1..=super::int8_gather::GATHER_TOKENS).contains(&m)
                && !quads.as_ref().is_some_and(|q| q.takes_narrow(m)) =>
            {
                // SAFETY: `gather` exists only where the features were detected; the shapes
                // were checked above and `k ≤ INT8_MAX_K` by `compress`.
                unsafe { g.spmm(threads, x, y, m) };
                Ok(false)
            }
            #[cfg(target_arch = "x86_64")]
            SparseForm::Entries { quads: Some(q), .. } => {
                // SAFETY: `quads` exists only where the features were detected; the shapes
                // were checked above and `k ≤ INT8_MAX_K` by `compress`.
                unsafe { q.spmm(threads, x, y, m) };
                Ok(false)
            }
            SparseForm::Entries { .. } => self.spmm_axpy(threads, x, y, m).map(|()| false),
        }
    }

    /// [`Self::spmm`] on the widening axpy loop (kept entries only; the compact form has its
    /// own kernels and answers with them).
    fn spmm_axpy(&self, threads: usize, x: &[i8], y: &mut [i32], m: usize) -> Result<(), KernelError> {
        check_len("x", x.len(), self.k, m)?;
        check_len("y", y.len(), self.rows, m)?;
        let (row_start, cols, values) = match &self.form {
            SparseForm::Entries {
                row_start,
                cols,
                values,
                ..
            } => (row_start, cols, values),
            #[cfg(target_arch = "x86_64")]
            SparseForm::TwoOfFour(_)
            | SparseForm::Tiles(_)
            | SparseForm::Blocks(_)
            | SparseForm::KeptTiles(_) => {
                return self.spmm(threads, x, y, m);
            }
        };
        if self.rows == 0 || m == 0 {
            return Ok(());
        }
        let isa = IntIsa::detect();
        let row = |(r, y_row): (usize, &mut [i32])| {
            let span = row_start[r]..row_start[r + 1];
            let entries = cols[span.clone()]
                .iter()
                .zip(&values[span])
                .map(|(&c, &v)| (c as usize, v));
            axpy_rows(isa, entries, x, y_row);
        };
        if threads <= 1 {
            y.chunks_exact_mut(m).enumerate().for_each(row);
        } else {
            y.par_chunks_exact_mut(m).enumerate().for_each(row);
        }
        Ok(())
    }

    /// Bytes of stored values (1 each; the compact form's padding zeros included).
    pub fn value_bytes(&self) -> usize {
        match &self.form {
            SparseForm::Entries { values, .. } => values.len(),
            #[cfg(target_arch = "x86_64")]
            SparseForm::TwoOfFour(a) => a.value_bytes(),
            #[cfg(target_arch = "x86_64")]
            SparseForm::Tiles(a) => a.value_bytes(),
            #[cfg(target_arch = "x86_64")]
            SparseForm::Blocks(a) => a.value_bytes(),
            #[cfg(target_arch = "x86_64")]
            SparseForm::KeptTiles(a) => a.value_bytes(),
        }
    }

    /// Bytes of the compact 2:4 form's execution copies, built on the first product that
    /// runs them (rows in lanes at 2–12 tokens, on Intel to 48; expanded lines on Intel at
    /// one token and from 49), 0 before and for the other forms. Reported so the memory they
    /// cost is not hidden.
    pub fn execution_copy_bytes(&self) -> usize {
        match &self.form {
            #[cfg(target_arch = "x86_64")]
            SparseForm::TwoOfFour(a) => a.execution_copy_bytes(),
            _ => 0,
        }
    }

    /// Bytes of index metadata: row starts and u32 columns for kept entries; 2-bit indices
    /// (one byte per eight K positions) and the per-row `+128` corrections for compact 2:4;
    /// a u32 column per block and the block-row pointers for blocks.
    pub fn metadata_bytes(&self) -> usize {
        match &self.form {
            SparseForm::Entries { row_start, cols, .. } => {
                cols.len() * 4 + row_start.len() * std::mem::size_of::<usize>()
            }
            #[cfg(target_arch = "x86_64")]
            SparseForm::TwoOfFour(a) => a.metadata_bytes(),
            #[cfg(target_arch = "x86_64")]
            SparseForm::Tiles(a) => a.metadata_bytes(),
            #[cfg(target_arch = "x86_64")]
            SparseForm::Blocks(a) => a.metadata_bytes(),
            #[cfg(target_arch = "x86_64")]
            SparseForm::KeptTiles(a) => a.metadata_bytes(),
        }
    }
}

/// The shape checks both compressions make: `w` is `rows × k`, and K keeps every sum (and
/// every u32 column) in range.
fn check_sparse_i8(w: &[i8], rows: usize, k: usize) -> Result<(), KernelError> {
    check_len("w", w.len(), rows, k)?;
    if k > INT8_MAX_K || u32::try_from(k).is_err() {
        return Err(KernelError::Overflow { rows, cols: k });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nm;
    use crate::reference::{gemm_i8_naive, gemm_naive};
    use crate::testing::hashed as data;
    use proptest::prelude::*;

    /// Under `SPARSEGATE_MAX_ISA=portable` the f16 conversions run `half`'s software ones
    /// ([`f16c_allowed`]); they must give the values the detected (F16C) ones give.
    #[test]
    fn the_software_f16_conversions_match_the_detected_ones() {
        let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        for bits in 0..=u16::MAX {
            let h = half::f16::from_bits(bits);
            assert!(same(h.to_f32(), h.to_f32_const()), "widening {bits:#06x}");
        }
        // Every f16 value, the midpoints between neighbours (ties round to even), and
        // pseudo-random f32 bit patterns (subnormal, overflowing, NaN among them).
        let mut values: Vec<f32> = (0..=u16::MAX).map(|b| half::f16::from_bits(b).to_f32()).collect();
        let mids: Vec<f32> = values
            .windows(2)
            .filter(|p| p[0].is_finite() && p[1].is_finite())
            .map(|p| ((f64::from(p[0]) + f64::from(p[1])) / 2.0) as f32)
            .collect();
        values.extend(mids);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        values.extend((0..1 << 20).map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            f32::from_bits((state >> 32) as u32)
        }));
        for v in values {
            let (a, b) = (half::f16::from_f32(v), half::f16::from_f32_const(v));
            assert!(
                same(a.to_f32(), b.to_f32()),
                "rounding {v:e} ({:#010x})",
                v.to_bits()
            );
        }
    }

    /// `y` equals the exact sums `want`, element for element.
    #[track_caller]
    fn assert_exact(y: &[i32], want: &[i64], what: std::fmt::Arguments<'_>) {
        assert!(y.iter().zip(want).all(|(&a, &b)| i64::from(a) == b), "{what}");
    }

    /// Σ|w·x| per output: the scale the rounding error of a K-term sum follows.
    fn abs_sums(w: &[f32], x: &[f32], n: usize, k: usize, m: usize) -> Vec<f32> {
        let (wa, xa): (Vec<f32>, Vec<f32>) = (
            w.iter().map(|v| v.abs()).collect(),
            x.iter().map(|v| v.abs()).collect(),
        );
        let mut s = vec![0.0; n * m];
        gemm_naive(&wa, &xa, &mut s, n, k, m);
        s
    }

    fn check_half(
        kind: Half,
        rel: f32,
        n: usize,
        k: usize,
        m: usize,
        threads: usize,
    ) -> Result<(), TestCaseError> {
        let (w, x) = (data(n * k, 3), data(k * m, 11));
        let (wh, xh) = (HalfBuf::from_f32(kind, &w), HalfBuf::from_f32(kind, &x));
        let (mut wp, mut xp) = (vec![0.0; n * k], vec![0.0; k * m]);
        let mut y = vec![0.0; n * m];
        gemm_half(threads, &wh, &xh, (&mut wp, &mut xp), &mut y, n, k, m).unwrap();
        // Against the exact product of the *unrounded* f32 operands.
        let mut want = vec![0.0; n * m];
        gemm_naive(&w, &x, &mut want, n, k, m);
        let scale = abs_sums(&w, &x, n, k, m);
        for ((a, b), s) in y.iter().zip(&want).zip(&scale) {
            prop_assert!(
                (a - b).abs() <= rel * s.max(1e-3),
                "{kind:?}: {a} vs {b} (Σ|terms| {s})"
            );
        }
        Ok(())
    }

    /// 16-bit values in [-1, 1], one in eight an exact zero.
    fn half_values<T: Storage16 + std::fmt::Debug>(len: usize) -> impl Strategy<Value = Vec<T>> {
        proptest::collection::vec(prop_oneof![7 => -1.0f32..1.0, 1 => Just(0.0f32)], len)
            .prop_map(|v| v.into_iter().map(T::from_f32).collect())
    }

    /// A product's shape and operands.
    type HalfProduct<T> = (usize, usize, usize, Vec<T>, Vec<T>);

    /// Shapes around the 16-bit kernels' edges (pairs, groups of four, 8-token tiles, 16-row
    /// panels, 32- and 48-row blocks, 128- and 256-k blocks: `k_max` past the dense one) with
    /// operands to match; `k` a multiple of `k_step`.
    fn half_product<T: Storage16 + std::fmt::Debug>(
        max_n: usize,
        k_max: usize,
        k_step: usize,
        max_m: usize,
    ) -> impl Strategy<Value = HalfProduct<T>> {
        (1..max_n, 1..=k_max / k_step, 1..max_m).prop_flat_map(move |(n, kq, m)| {
            let k = kq * k_step;
            (
                Just(n),
                Just(k),
                Just(m),
                half_values::<T>(n * k),
                half_values::<T>(k * m),
            )
        })
    }

    fn widen<T: Storage16>(v: &[T]) -> Vec<f32> {
        v.iter().map(|e| e.to_f32()).collect()
    }

    /// The first output of a 16-bit product off the exact product of its operands by more
    /// than f32 summation allows: `2 · (K + 2) · 2⁻²⁴ · Σ|w·x|` (twice the worst-case bound,
    /// for the f32 rounding of the reference itself; products of two bf16 or two f16 are
    /// exact in f32). A wrong pair or index errs by a whole term, about `Σ|w·x| / K`, far
    /// above it at these K.
    fn half_mismatch<T: Storage16>(
        y: &[f32],
        w: &[T],
        x: &[T],
        n: usize,
        k: usize,
        m: usize,
    ) -> Option<String> {
        half_mismatch_on(IsaPath::WidenF32, y, w, x, (n, k, m))
    }

    /// [`half_mismatch`] for a product on `path`: f16 as three bf16 products
    /// (`amx-bf16x3`) sums 3K terms and drops `wl·xl`, at most `2⁻¹⁶·|w·x|` (`amx::split`),
    /// so its bound is `2 · (3K + 2) · 2⁻²⁴ + 2⁻¹⁶` of `Σ|w·x|`, still far below a term.
    fn half_mismatch_on<T: Storage16>(
        path: IsaPath,
        y: &[f32],
        w: &[T],
        x: &[T],
        (n, k, m): (usize, usize, usize),
    ) -> Option<String> {
        let (wf, xf) = (widen(w), widen(x));
        let mut want = vec![0.0; n * m];
        gemm_naive(&wf, &xf, &mut want, n, k, m);
        let scale = abs_sums(&wf, &xf, n, k, m);
        let tol = if path == IsaPath::AmxBf16x3 {
            2.0 * (3.0 * k as f32 + 2.0) * f32::EPSILON / 2.0 + 2f32.powi(-16)
        } else {
            2.0 * (k as f32 + 2.0) * f32::EPSILON / 2.0
        };
        (0..n * m)
            .find(|&i| y[i].is_nan() || (y[i] - want[i]).abs() > tol * scale[i] + f32::MIN_POSITIVE)
            .map(|i| {
                format!(
                    "y[{i}] (row {}, token {}) = {} vs {} (Σ|terms| {})",
                    i / m,
                    i % m,
                    y[i],
                    want[i],
                    scale[i]
                )
            })
    }

    fn buf<T: Storage16>(v: &[T]) -> HalfBuf {
        HalfBuf::from_f32(T::KIND, &widen(v))
    }

    fn check_dense_half<T: Storage16>(
        (n, k, m, w, x): HalfProduct<T>,
        t: usize,
    ) -> Result<(), TestCaseError> {
        for kernel in HalfKernel::all(T::KIND) {
            let d = DenseHalf::<T>::build(&w, n, k, kernel).unwrap();
            let mut y = vec![f32::NAN; n * m];
            d.gemm(t, &x, &mut y, m).unwrap();
            if let Some(e) = half_mismatch_on(d.isa_path(), &y, &w, &x, (n, k, m)) {
                prop_assert!(
                    false,
                    "Dense {:?} {n}x{k}x{m} t={t} {:?}: {e}",
                    T::KIND,
                    d.isa_path()
                );
            }
        }
        let (mut wp, mut xp, mut y) = (vec![0.0; n * k], vec![0.0; k * m], vec![f32::NAN; n * m]);
        gemm_half(t, &buf(&w), &buf(&x), (&mut wp, &mut xp), &mut y, n, k, m).unwrap();
        let path = DenseHalf::<T>::for_tokens(&w, n, k, m).unwrap().isa_path();
        if let Some(e) = half_mismatch_on(path, &y, &w, &x, (n, k, m)) {
            prop_assert!(false, "gemm_half {:?} {n}x{k}x{m} t={t}: {e}", T::KIND);
        }
        Ok(())
    }

    fn check_two_of_four_half<T: Storage16>(
        (n, k, m, w, x): HalfProduct<T>,
        t: usize,
    ) -> Result<(), TestCaseError> {
        let pruned = nm::prune_magnitude(&widen(&w), n, k, 2, 4);
        let w: Vec<T> = pruned.iter().map(|&v| T::from_f32(v)).collect();
        let a = nm::NmMatrix::compress(&widen(&w), n, k, 2, 4).unwrap();
        for kernel in HalfKernel::all(T::KIND) {
            let s = TwoOfFourHalf::<T>::from_nm_values(&a, kernel);
            // The tiles' form pads to whole 16-row panels and 32-k steps: 32 value bytes and
            // a 4-byte mask a row and step.
            // f16 on them (`amx-bf16x3`) over three thirds of K, each padded to groups of four.
            let tiles = |k: usize| {
                let (rows, steps) = (n.div_ceil(16) * 16, k.div_ceil(32));
                (rows * steps * 32, rows * steps * 4)
            };
            let bytes = match s.isa_path() {
                IsaPath::AmxBf16 => tiles(k),
                IsaPath::AmxBf16x3 => tiles(3 * k.next_multiple_of(4)),
                _ => (n * k, n * k.div_ceil(8)),
            };
            prop_assert_eq!((s.value_bytes(), s.metadata_bytes()), bytes);
            let mut y = vec![f32::NAN; n * m];
            s.spmm(t, &x, &mut y, m).unwrap();
            if let Some(e) = half_mismatch_on(s.isa_path(), &y, &w, &x, (n, k, m)) {
                prop_assert!(
                    false,
                    "2:4 {:?} {n}x{k}x{m} t={t} {:?}: {e}",
                    T::KIND,
                    s.isa_path()
                );
            }
        }
        Ok(())
    }

    fn check_block_bf16(
        (n, k, m): (usize, usize, usize),
        (br, bc): (usize, usize),
        density: f64,
        seed: u32,
        t: usize,
    ) -> Result<(), TestCaseError> {
        let round = |v: Vec<f32>| -> Vec<half::bf16> { v.into_iter().map(half::bf16::from_f32).collect() };
        let mut wf = widen(&round(data(n * k, seed)));
        crate::prune::prune_blocks(&mut wf, n, k, br, bc, density);
        let a = crate::bsr::BsrMatrix::compress(&wf, n, k, br, bc).unwrap();
        let Some(b) = BlockBf16::from_bsr(&a, m) else {
            // Only a CPU whose bf16 kernel is not the dot product says no.
            #[cfg(target_arch = "x86_64")]
            let block = Form::Block { rows: br, cols: bc };
            prop_assert!(HalfKernel::chosen(Half::Bf16, block, m) != HalfKernel::Dot);
            return Ok(());
        };
        if b.isa_path() == IsaPath::AmxBf16 {
            // Whole 1 KiB tiles, at most every tile of the padded matrix and at least the
            // kept blocks' bytes.
            let all = n.div_ceil(16) * k.div_ceil(32) * 1024;
            prop_assert!(b.value_bytes() % 1024 == 0 && b.value_bytes() <= all);
            prop_assert!(b.value_bytes() >= a.blocks() * br * bc * 2);
        } else {
            prop_assert_eq!(b.value_bytes(), a.blocks() * br * bc * 2);
        }
        let (w, x) = (round(wf), round(data(k * m, seed + 1)));
        let mut y = vec![f32::NAN; n * m];
        b.spmm(t, &x, &mut y, m).unwrap();
        if let Some(e) = half_mismatch(&y, &w, &x, n, k, m) {
            prop_assert!(false, "block {br}x{bc} {n}x{k}x{m} t={t}: {e}");
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn issue_20_dense_bf16_matches_naive(p in half_product::<half::bf16>(110, 90, 1, 40), t in 1usize..3) {
            check_dense_half(p, t)?;
        }

        #[test]
        fn issue_20_two_of_four_bf16_matches_naive(p in half_product::<half::bf16>(80, 96, 4, 40), t in 1usize..3) {
            check_two_of_four_half(p, t)?;
        }

        #[test]
        fn issue_20_dense_f16_matches_naive(p in half_product::<half::f16>(110, 90, 1, 40), t in 1usize..3) {
            check_dense_half(p, t)?;
        }

        #[test]
        fn issue_20_two_of_four_f16_matches_naive(p in half_product::<half::f16>(80, 96, 4, 40), t in 1usize..3) {
            check_two_of_four_half(p, t)?;
        }
    }

    /// A 16-bit CSR product against the naive one on the same 16-bit operands, its weights
    /// pruned to `density` per row, and its byte counts those of 16-bit values and columns.
    fn check_csr_half<T: Storage16 + std::fmt::Debug>(
        (n, k, m, w, x): HalfProduct<T>,
        density: f64,
        t: usize,
    ) -> Result<(), TestCaseError> {
        let mut wf = widen(&w);
        crate::prune::prune_unstructured_per_row(&mut wf, n, k, density);
        let a = crate::csr::CsrMatrix::compress(&wf, n, k).unwrap();
        let Some(c) = CsrHalf::<T>::from_csr(&a) else {
            prop_assert!(!crate::kept::available(), "refused on a CPU that runs it");
            return Ok(());
        };
        prop_assert_eq!(
            (c.value_bytes(), c.metadata_bytes()),
            (a.nnz() * 2, a.nnz() * 2 + (n + 1) * 4)
        );
        let w: Vec<T> = wf.iter().map(|&v| T::from_f32(v)).collect();
        let mut y = vec![f32::NAN; n * m];
        c.spmm(t, &x, &mut y, m).unwrap();
        if let Some(e) = half_mismatch(&y, &w, &x, n, k, m) {
            prop_assert!(false, "{:?} CSR {n}x{k}x{m} t={t}: {e}", T::KIND);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Issue 20: unstructured bf16 and f16 on 16-bit values and u16 columns, at every
        /// kernel's token counts (gathers 1–2, the token-minor copy 3–8, K blocks of 128 past
        /// that, a partial strip), several K blocks, empty and full rows.
        #[test]
        fn issue_20_csr_bf16_matches_naive(
            p in half_product::<half::bf16>(90, 400, 1, 40), density in 0.0f64..=1.0, t in 1usize..3,
        ) {
            check_csr_half(p, density, t)?;
        }

        #[test]
        fn issue_20_csr_f16_matches_naive(
            p in half_product::<half::f16>(90, 400, 1, 40), density in 0.0f64..=1.0, t in 1usize..3,
        ) {
            check_csr_half(p, density, t)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(10))]
        #[test]
        fn issue_20_csr_bf16_matches_naive_past_one_strip(
            p in half_product::<half::bf16>(20, 300, 1, 300), density in 0.05f64..0.5, t in 1usize..3,
        ) {
            check_csr_half(p, density, t)?;
        }

        #[test]
        fn issue_20_dense_bf16_matches_naive_across_k_blocks(p in half_product::<half::bf16>(60, 700, 1, 20), t in 1usize..3) {
            check_dense_half(p, t)?;
        }

        #[test]
        fn issue_20_two_of_four_bf16_matches_naive_across_k_blocks(p in half_product::<half::bf16>(40, 1200, 4, 20), t in 1usize..3) {
            check_two_of_four_half(p, t)?;
        }

        // Past 8 tokens a task runs several tiles over a K block: the first widens the block
        // once for the others (issue 20).
        #[test]
        fn issue_20_dense_f16_matches_naive_across_k_blocks(p in half_product::<half::f16>(60, 700, 1, 40), t in 1usize..3) {
            check_dense_half(p, t)?;
        }

        /// bf16 block sparsity on `vdpbf16ps`: block heights of 1–4 panels (a tile takes
        /// up to three), widths of 1–8 pairs, every token count of a tile, empty block rows
        /// (low densities) written as zeros, 1–2 threads.
        #[test]
        fn issue_20_block_bf16_matches_naive(
            (br, bc) in prop_oneof![
                (1usize..=4, 1usize..=8).prop_map(|(p, q)| (16 * p, 2 * q)),
                // Whole 16s of K: the AMX tiles' blocks from a few tokens on.
                (1usize..=2, 1usize..=2).prop_map(|(p, q)| (16 * p, 16 * q)),
            ],
            (brows, bcols, m) in (1usize..4, 1usize..24, 1usize..20),
            density in 0.05f64..1.0,
            seed in 0u32..1000,
            t in 1usize..3,
        ) {
            check_block_bf16((brows * br, bcols * bc, m), (br, bc), density, seed, t)?;
        }

        #[test]
        fn issue_20_two_of_four_f16_matches_naive_across_k_blocks(p in half_product::<half::f16>(40, 1200, 4, 40), t in 1usize..3) {
            check_two_of_four_half(p, t)?;
        }
    }

    /// Issue 20: u16 columns reach K = 65536 (the last column included) and no further;
    /// past it the slice keeps f32 CSR, and the path named for it says so.
    #[test]
    fn issue_20_csr_half_takes_k_up_to_65536_and_refuses_more() {
        use crate::isa::{Form, IsaPath, Operands, isa_path};
        let k = 1 << 16;
        let mut w = vec![0.0f32; 2 * k];
        w[k - 1] = 0.5;
        w[k] = -2.0;
        w[2 * k - 1] = 1.5;
        let a = crate::csr::CsrMatrix::compress(&w, 2, k).unwrap();
        let x: Vec<half::bf16> = (0..k)
            .map(|i| half::bf16::from_f32(if i == k - 1 { 4.0 } else { 1.0 }))
            .collect();
        let runs = crate::kept::available();
        match CsrBf16::from_csr(&a) {
            Some(c) => {
                let mut y = vec![0.0; 2];
                c.spmm(1, &x, &mut y, 1).unwrap();
                assert_eq!(y, [2.0, -2.0 + 6.0]);
                assert_eq!(c.isa_path(), IsaPath::Avx512Bf16Widen);
            }
            None => assert!(!runs),
        }
        assert_eq!(
            isa_path(Operands::Bf16, Form::Unstructured { k }) == IsaPath::Avx512Bf16Widen,
            runs
        );
        assert_eq!(
            isa_path(Operands::F16, Form::Unstructured { k }) == IsaPath::Avx512F16Widen,
            runs
        );
        let wide = crate::csr::CsrMatrix::compress(&vec![1.0; k + 1], 1, k + 1).unwrap();
        assert!(CsrBf16::from_csr(&wide).is_none() && CsrF16::from_csr(&wide).is_none());
        assert_eq!(
            isa_path(Operands::Bf16, Form::Unstructured { k: k + 1 }),
            IsaPath::WidenF32
        );
    }

    #[test]
    fn issue_20_bf16_kernels_refuse_wrong_lengths_and_bad_patterns() {
        let w = vec![half::bf16::ONE; 2 * 8];
        let d = DenseBf16::new(&w, 2, 8).unwrap();
        let mut y = vec![0.0; 2 * 3];
        let err = d.gemm(1, &[half::bf16::ZERO; 8 * 2], &mut y, 3).unwrap_err();
        assert!(matches!(err, KernelError::Length { what: "x", .. }));
        // Three non-zeros in a group of four is not 2:4.
        assert!(matches!(
            TwoOfFourBf16::compress(&w, 2, 8),
            Err(KernelError::Overfull { .. })
        ));
        let a = nm::NmMatrix::compress(&[1.0, 0.0, 0.0, 0.0], 1, 4, 1, 4).unwrap();
        assert!(TwoOfFourBf16::from_two_of_four(&a, 1).is_none());
    }

    /// Issue 20: a few-token bf16 product takes `vdpbf16ps` wherever the CPU has it, a
    /// many-token one the kernel the process measured faster, and `isa::isa_path_at` says
    /// the same as the kernels built.
    #[test]
    fn issue_20_bf16_picks_its_kernel_by_tokens_and_says_which() {
        use crate::isa::{Form, Operands, isa_path_at};
        let w: Vec<half::bf16> = (0..32 * 64)
            .map(|i| half::bf16::from_f32((i % 7) as f32 - 3.0))
            .collect();
        let pruned = nm::prune_magnitude(&widen(&w), 32, 64, 2, 4);
        let a = nm::NmMatrix::compress(&pruned, 32, 64, 2, 4).unwrap();
        for tokens in [1, 4, 5, BF16_DOT_BELOW_TOKENS - 1, BF16_DOT_BELOW_TOKENS, 512] {
            let dense = DenseBf16::for_tokens(&w, 32, 64, tokens).unwrap().isa_path();
            let sparse = TwoOfFourBf16::from_two_of_four(&a, tokens).unwrap().isa_path();
            assert_eq!(
                dense,
                isa_path_at(Operands::Bf16, Form::Dense, tokens),
                "{tokens}"
            );
            assert_eq!(
                sparse,
                isa_path_at(Operands::Bf16, Form::TwoOfFour, tokens),
                "{tokens}"
            );
            #[cfg(target_arch = "x86_64")]
            if tokens < BF16_DOT_BELOW_TOKENS && crate::half_dot::available() {
                // Dense runs on the tiles wherever they are granted, else on the dot product
                // at so few tokens; 2:4 on the dot product below where the tiles pay.
                let (dot, amx) = (IsaPath::Avx512Bf16, IsaPath::AmxBf16);
                let tiles = crate::isa::tiles_granted(Operands::Bf16);
                assert_eq!(dense, if tiles { amx } else { dot });
                if !crate::amx::SparseTiles::pays_at(crate::amx::Op::Bf16, tokens) {
                    assert_eq!(sparse, dot);
                }
            }
            #[cfg(target_arch = "x86_64")]
            if tokens >= crate::amx::sparse_tiles_from_tokens(crate::amx::Op::Bf16)
                && crate::amx::SparseTiles::available(crate::amx::Op::Bf16)
            {
                assert_eq!(sparse, IsaPath::AmxBf16, "{tokens}");
            }
        }
    }

    #[test]
    fn issue_20_bf16_empty_k_writes_zeros() {
        let mut y = vec![7.0; 6];
        DenseBf16::new(&[], 2, 0)
            .unwrap()
            .gemm(2, &[], &mut y, 3)
            .unwrap();
        assert_eq!(y, vec![0.0; 6]);
        let mut y = vec![7.0; 6];
        TwoOfFourBf16::compress(&[], 2, 0)
            .unwrap()
            .spmm(2, &[], &mut y, 3)
            .unwrap();
        assert_eq!(y, vec![0.0; 6]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn issue_3_f16_storage_matches_naive(n in 1usize..24, k in 1usize..80, m in 1usize..40, t in 1usize..3) {
            check_half(Half::F16, 1e-3, n, k, m, t)?;
        }

        #[test]
        fn issue_3_bf16_storage_matches_naive(n in 1usize..24, k in 1usize..80, m in 1usize..40, t in 1usize..3) {
            check_half(Half::Bf16, 1e-2, n, k, m, t)?;
        }

        #[test]
        fn issue_3_int8_dense_and_sparse_are_exact(n in 1usize..24, groups in 1usize..20, m in 1usize..40, t in 1usize..3) {
            let k = groups * 4;
            let mut wf = data(n * k, 5);
            nm::prune_magnitude_in_place(&mut wf, n, k, 2, 4);
            let (w, _) = quantize_per_channel(&wf, n, k).unwrap();
            let x: Vec<i8> = (0..k * m).map(|i| ((i * 37 + 11) % 255) as i32 - 127).map(|v| v as i8).collect();
            let want: Vec<i64> = (0..n * m)
                .map(|i| (0..k).map(|kk| i64::from(w[i / m * k + kk]) * i64::from(x[kk * m + i % m])).sum())
                .collect();
            let mut y = vec![0i32; n * m];
            gemm_i8(t, &w, &x, &mut y, n, k, m).unwrap();
            prop_assert!(y.iter().zip(&want).all(|(&a, &b)| i64::from(a) == b));
            let mut ys = vec![7i32; n * m];
            SparseI8::compress(&w, n, k).unwrap().spmm(t, &x, &mut ys, m).unwrap();
            prop_assert_eq!(ys, y);
        }
    }

    /// An int8 value, one time in four an extreme (-128 or 127), where sign and shift bugs show.
    fn i8_value() -> impl Strategy<Value = i8> {
        prop_oneof![
            Just(i8::MIN),
            Just(i8::MAX),
            any::<i8>(),
            any::<i8>(),
            any::<i8>(),
            any::<i8>()
        ]
    }

    /// Shapes around the VNNI kernel's edges (K-quads, 16-token groups, 64-token panels, 6-row
    /// blocks, 512-k blocks) with operands to match.
    fn i8_product(
        max_n: usize,
        max_k: usize,
        max_m: usize,
    ) -> impl Strategy<Value = (usize, usize, usize, Vec<i8>, Vec<i8>)> {
        (1..max_n, 1..max_k, 1..max_m).prop_flat_map(|(n, k, m)| {
            (
                Just(n),
                Just(k),
                Just(m),
                proptest::collection::vec(i8_value(), n * k),
                proptest::collection::vec(i8_value(), k * m),
            )
        })
    }

    /// Issue 20: a product scaled as it is stored (`product(scales, y)`) is, bit for bit, its
    /// exact `sums` dequantized. The scales vary per row and take both signs.
    fn check_scaled(
        sums: &[i32],
        (n, m): (usize, usize),
        what: &str,
        product: impl FnOnce(Int8Scales<'_>, &mut [f32]) -> Result<(), KernelError>,
    ) -> Result<(), TestCaseError> {
        let w_scale: Vec<f32> = (0..n)
            .map(|r| (r as f32 * 0.37 + 0.011) * if r % 3 == 1 { -1.0 } else { 1.0 })
            .collect();
        let x_scale = 0.0173;
        let mut want = vec![0.0f32; n * m];
        dequantize(1, sums, &w_scale, x_scale, &mut want, m).unwrap();
        let mut got = vec![f32::NAN; n * m];
        product(
            Int8Scales {
                w_scale: &w_scale,
                x_scale,
            },
            &mut got,
        )
        .unwrap();
        if let Some(i) = (0..n * m).find(|&i| got[i].to_bits() != want[i].to_bits()) {
            prop_assert!(
                false,
                "{what} {n}x{m}, scaled: y[{i}] = {} vs {} dequantized",
                got[i],
                want[i]
            );
        }
        Ok(())
    }

    fn check_i8_exact(
        w: &[i8],
        x: &[i8],
        n: usize,
        k: usize,
        m: usize,
        t: usize,
    ) -> Result<(), TestCaseError> {
        let want = gemm_i8_naive(w, x, n, k, m);
        let mut fast = vec![7i32; n * m];
        gemm_i8(t, w, x, &mut fast, n, k, m).unwrap();
        let mut axpy = vec![-7i32; n * m];
        gemm_i8_axpy(t, w, x, &mut axpy, n, k, m).unwrap();
        if let Some(i) = (0..n * m).find(|&i| i64::from(fast[i]) != want[i]) {
            prop_assert!(
                false,
                "gemm_i8 {n}x{k}x{m} t={t}: y[{i}] = {} vs {}",
                fast[i],
                want[i]
            );
        }
        prop_assert_eq!(&axpy, &fast, "axpy fallback differs");
        let d = DenseI8::for_tokens(w, n, k, m).unwrap();
        check_scaled(&fast, (n, m), "DenseI8", |s, y| d.gemm_scaled(t, x, s, y, m))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn issue_3_int8_dense_vnni_and_fallback_are_bit_exact((n, k, m, w, x) in i8_product(20, 90, 150), t in 1usize..3) {
            check_i8_exact(&w, &x, n, k, m, t)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]
        #[test]
        fn issue_3_int8_dense_is_bit_exact_across_k_blocks((n, k, m, w, x) in i8_product(14, 1300, 40), t in 1usize..3) {
            check_i8_exact(&w, &x, n, k, m, t)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(10))]
        /// The token lanes (over 48 tokens) across their K blocks: K up to past one block of
        /// 1024 quads, K not a multiple of four, ragged 64-token panels, one run of panels or
        /// two (threads).
        #[test]
        fn issue_20_int8_dense_token_lanes_are_bit_exact_across_k_blocks(
            (n, k, m, w, x) in (1usize..20, 1usize..4500, 49usize..150).prop_flat_map(|(n, k, m)| {
                (
                    Just(n),
                    Just(k),
                    Just(m),
                    proptest::collection::vec(i8_value(), n * k),
                    proptest::collection::vec(i8_value(), k * m),
                )
            }),
            t in 1usize..3,
        ) {
            check_i8_exact(&w, &x, n, k, m, t)?;
        }
    }

    /// A sparse int8 product: about `zero_pct` % of the weights zeroed.
    fn i8_sparse_product() -> impl Strategy<Value = (usize, usize, usize, Vec<i8>, Vec<i8>)> {
        i8_sparse_product_tokens(1..150)
    }

    /// [`i8_sparse_product`] with `tokens` tokens.
    fn i8_sparse_product_tokens(
        tokens: std::ops::Range<usize>,
    ) -> impl Strategy<Value = (usize, usize, usize, Vec<i8>, Vec<i8>)> {
        (1usize..20, 1usize..1200, tokens, 0u32..100).prop_flat_map(|(n, k, m, zero_pct)| {
            let weight = prop_oneof![
                (100 - zero_pct) => i8_value(),
                zero_pct.max(1) => Just(0i8),
            ];
            (
                Just(n),
                Just(k),
                Just(m),
                proptest::collection::vec(weight, n * k),
                proptest::collection::vec(i8_value(), k * m),
            )
        })
    }

    /// `SparseI8::compress` then `spmm` on `t` threads, bit for bit against the naive
    /// product; the weights and the product, for further checks.
    fn check_kept_entries(
        (n, k, m, w, x): (usize, usize, usize, Vec<i8>, Vec<i8>),
        t: usize,
    ) -> Result<(SparseI8, Vec<i32>), TestCaseError> {
        let want = gemm_i8_naive(&w, &x, n, k, m);
        let a = SparseI8::compress(&w, n, k).unwrap();
        let mut y = vec![7i32; n * m];
        a.spmm(t, &x, &mut y, m).unwrap();
        if let Some(i) = (0..n * m).find(|&i| i64::from(y[i]) != want[i]) {
            prop_assert!(
                false,
                "SparseI8 {n}x{k}x{m} t={t}: y[{i}] = {} vs {}",
                y[i],
                want[i]
            );
        }
        check_scaled(&y, (n, m), "SparseI8", |s, out| a.spmm_scaled(t, &x, s, out, m))?;
        Ok((a, y))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]
        #[test]
        fn issue_3_int8_sparse_vnni_and_fallback_are_bit_exact(p in i8_sparse_product(), t in 1usize..3) {
            let (n, m, x) = (p.0, p.2, p.4.clone());
            let (a, fast) = check_kept_entries(p, t)?;
            let mut axpy = vec![-7i32; n * m];
            a.spmm_axpy(t, &x, &mut axpy, m).unwrap();
            prop_assert_eq!(axpy, fast);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]
        /// Issue 20: kept entries at every few-token kernel (gathers at 1–2 tokens, the
        /// 16-token tile at 3–16 where the CPU has VBMI, else gathers to 4, 64-token tiles
        /// past), bit for bit.
        #[test]
        fn issue_20_int8_kept_entries_are_exact_at_few_tokens(
            p in i8_sparse_product_tokens(1..21), t in 1usize..3,
        ) {
            check_kept_entries(p, t)?;
        }
    }

    #[test]
    fn issue_3_int8_dense_is_exact_at_the_k_bound_with_extreme_values() {
        // Where every term is -128 · -128 or 127 · 127 the shifted VNNI partial sums
        // ((x + 128) · w up to 255 · 127 per term) pass i32 long before K ends; the result
        // must still be the exact sum, which fits in i32 at K = INT8_MAX_K.
        // m = 3 runs the few-token kernel (weights shifted instead, `(w + 128) · x`), m = 19
        // the token panels.
        let (n, k) = (3, INT8_MAX_K);
        let row_values = [i8::MIN, i8::MAX, -1];
        let w: Vec<i8> = (0..n * k).map(|i| row_values[i / k]).collect();
        for m in [3, 19] {
            let x: Vec<i8> = (0..k * m)
                .map(|i| match i % m {
                    0 | 17 => i8::MIN,
                    1 | 18 => i8::MAX,
                    c => [i8::MIN, i8::MAX, 0, 1][(i / m + c) % 4],
                })
                .collect();
            let want = gemm_i8_naive(&w, &x, n, k, m);
            assert_eq!(want[0], 128 * 128 * k as i64, "the worst case is in the test");
            assert!(want.iter().all(|&v| i32::try_from(v).is_ok()));
            for t in [1, 2] {
                let mut y = vec![0i32; n * m];
                gemm_i8(t, &w, &x, &mut y, n, k, m).unwrap();
                assert_exact(&y, &want, format_args!("gemm_i8 m={m} t={t}"));
                let mut y = vec![0i32; n * m];
                gemm_i8_axpy(t, &w, &x, &mut y, n, k, m).unwrap();
                assert_exact(&y, &want, format_args!("axpy m={m} t={t}"));
            }
        }
    }

    #[test]
    fn issue_3_int8_max_k_is_the_largest_k_whose_sums_fit_i32() {
        let worst = |k: usize| 128 * 128 * k as i64;
        assert!(worst(INT8_MAX_K) <= i64::from(i32::MAX));
        assert!(worst(INT8_MAX_K + 1) > i64::from(i32::MAX));
    }

    #[test]
    fn issue_3_int8_dense_with_empty_k_writes_zeros() {
        let mut y = vec![7i32; 6];
        gemm_i8(2, &[], &[], &mut y, 2, 0, 3).unwrap();
        assert_eq!(y, vec![0; 6]);
    }

    #[test]
    fn issue_3_per_channel_scale_round_trips_within_half_a_step() {
        let v = data(6 * 10, 9);
        let (q, s) = quantize_per_channel(&v, 6, 10).unwrap();
        for (r, row) in v.chunks(10).enumerate() {
            for (c, &e) in row.iter().enumerate() {
                assert!((f32::from(q[r * 10 + c]) * s[r] - e).abs() <= s[r] / 2.0 + 1e-6);
            }
        }
        let mut y = vec![0.0; 2];
        dequantize(1, &[10, -4], &[0.5, 2.0], 0.25, &mut y, 1).unwrap();
        assert_eq!(y, vec![1.25, -2.0]);
    }

    #[test]
    fn issue_20_dequantize_on_several_workers_equals_one() {
        // 37 rows into tasks of whole rows, the last one short.
        let (rows, cols) = (37, 13);
        let acc: Vec<i32> = (0..rows * cols)
            .map(|i| (i as i32 * 7919) % 2001 - 1000)
            .collect();
        let scales: Vec<f32> = (0..rows).map(|r| 0.01 + r as f32 / 64.0).collect();
        let mut one = vec![0.0; rows * cols];
        dequantize(1, &acc, &scales, 0.3, &mut one, cols).unwrap();
        for threads in [2, 3, 64] {
            let mut many = vec![f32::NAN; rows * cols];
            dequantize(threads, &acc, &scales, 0.3, &mut many, cols).unwrap();
            assert_eq!(many, one, "threads={threads}");
        }
        assert_eq!(one[cols * 5 + 2], acc[cols * 5 + 2] as f32 * (scales[5] * 0.3));
    }

    #[test]
    fn issue_3_int8_refuses_a_k_whose_sums_could_overflow() {
        let err = gemm_i8(1, &[], &[], &mut [], 0, INT8_MAX_K + 1, 0).unwrap_err();
        assert!(matches!(err, KernelError::Overflow { .. }));
    }

    /// Whether `compress_nm` should pick the compact 2:4 form on this CPU.
    fn compact_expected() -> bool {
        #[cfg(target_arch = "x86_64")]
        return crate::int8_two_of_four::available();
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// Weights pruned to 2:4 with every group shape: a pattern per group of four (0–5 the six
    /// pairs, 6–9 a single position, 10 none) applied to random values with extremes.
    fn two_of_four_weights(n: usize, k: usize) -> impl Strategy<Value = Vec<i8>> {
        let groups = k.div_ceil(4);
        (
            proptest::collection::vec(0usize..11, n * groups),
            proptest::collection::vec(i8_value(), n * k),
        )
            .prop_map(move |(patterns, mut w)| {
                const PAIRS: [[usize; 2]; 6] = [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]];
                for (i, v) in w.iter_mut().enumerate() {
                    let (row, col) = (i / k, i % k);
                    let p = patterns[row * groups + col / 4];
                    let keep = match p {
                        0..=5 => PAIRS[p].contains(&(col % 4)),
                        6..=9 => col % 4 == p - 6,
                        _ => false,
                    };
                    if !keep {
                        *v = 0;
                    }
                }
                w
            })
    }

    /// A 2:4 product around the compact kernels' edges (octets, 16-token tiles and two-tile
    /// panels, 8- and 12-row blocks, 128-position chunks), with operands to match.
    fn two_of_four_product(
        max_n: usize,
        k_range: std::ops::Range<usize>,
        tokens: impl Strategy<Value = usize>,
    ) -> impl Strategy<Value = (usize, usize, usize, Vec<i8>, Vec<i8>)> {
        (1..max_n, k_range, tokens).prop_flat_map(|(n, k, m)| {
            (
                Just(n),
                Just(k),
                Just(m),
                two_of_four_weights(n, k),
                proptest::collection::vec(i8_value(), k * m),
            )
        })
    }

    fn check_two_of_four(
        (n, k, m): (usize, usize, usize),
        w: &[i8],
        x: &[i8],
        t: usize,
        pattern: (usize, usize),
    ) -> Result<(), TestCaseError> {
        // Compressed for many tokens (the tiles where they run) and for this product's `m`
        // (the AVX-512 form at few tokens on an AMX host): both exact at every `m`.
        let many = SparseI8::compress_nm(w, n, k, pattern.0, pattern.1).unwrap();
        let these = SparseI8::compress_nm_for(w, n, k, pattern, m).unwrap();
        let want = gemm_i8_naive(w, x, n, k, m);
        for (which, a) in [("many", many), ("these", these)] {
            prop_assert_eq!(a.is_compact(), compact_expected());
            let mut y = vec![7i32; n * m];
            a.spmm(t, x, &mut y, m).unwrap();
            if let Some(i) = (0..n * m).find(|&i| i64::from(y[i]) != want[i]) {
                prop_assert!(
                    false,
                    "{}:{} {n}x{k}x{m} t={t} ({which} tokens): y[{i}] = {} vs {}",
                    pattern.0,
                    pattern.1,
                    y[i],
                    want[i]
                );
            }
            check_scaled(&y, (n, m), which, |s, out| a.spmm_scaled(t, x, s, out, m))?;
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn issue_20_int8_two_of_four_compact_is_bit_exact(
            (n, k, m, w, x) in two_of_four_product(30, 1..300, prop_oneof![1usize..=8, 9usize..=16, 17usize..80]),
            t in 1usize..3,
        ) {
            check_two_of_four((n, k, m), &w, &x, t, (2, 4))?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]
        #[test]
        fn issue_20_int8_two_of_four_is_bit_exact_across_k_blocks(
            // The token-lane kernel's K blocks are 4096 positions: K crosses one or two.
            (n, k, m, w, x) in two_of_four_product(14, 4000..9000, prop_oneof![1usize..=8, 9usize..40]),
            t in 1usize..3,
        ) {
            check_two_of_four((n, k, m), &w, &x, t, (2, 4))?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]
        #[test]
        fn issue_20_int8_two_of_four_expanded_lines_are_bit_exact_across_stages_and_k_blocks(
            // On Intel the expanded lines' token lanes stage a task's blocks (up to twelve of
            // 16 rows) × 4096 K positions: rows cross tasks (and end inside a block), K
            // crosses K blocks; below 49 tokens the rows-in-lanes groups of up to twelve end
            // unevenly.
            (n, k, m, w, x) in two_of_four_product(230, 3800..4500, prop_oneof![13usize..=48, 49usize..140]),
            t in 1usize..3,
        ) {
            check_two_of_four((n, k, m), &w, &x, t, (2, 4))?;
        }
    }

    /// int8 blocks against the naive product, bit for bit: block heights of 1–4 panels (a
    /// tile takes up to three) and one not a panel, widths of 1–6 quads and one not a quad
    /// (both kept entries), every token count of a tile, empty block rows, extreme values.
    fn check_blocks_i8(
        (n, k, m): (usize, usize, usize),
        (br, bc): (usize, usize),
        keep: &[bool],
        (w, x): (&[i8], &[i8]),
        t: usize,
    ) -> Result<(), TestCaseError> {
        // Zero every block `keep` drops (cycled over the blocks in row-major order).
        let mut w = w.to_vec();
        for (i, row) in w.chunks_exact_mut(k).enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                if !keep[((i / br) * (k / bc) + j / bc) % keep.len()] {
                    *v = 0;
                }
            }
        }
        let a = SparseI8::compress_blocks_for(&w, n, k, (br, bc), m).unwrap();
        let tiles = crate::amx::KeptTiles::pays_at(crate::amx::Op::I8, (br, bc), m);
        let blocks =
            !tiles && super::super::int8_blocks::fits(br, bc) && super::super::int8_vnni::available();
        prop_assert_eq!(matches!(a.form, SparseForm::KeptTiles(_)), tiles);
        prop_assert_eq!(matches!(a.form, SparseForm::Blocks(_)), blocks);
        let want = gemm_i8_naive(&w, x, n, k, m);
        let mut y = vec![7i32; n * m];
        a.spmm(t, x, &mut y, m).unwrap();
        if let Some(i) = (0..n * m).find(|&i| i64::from(y[i]) != want[i]) {
            prop_assert!(
                false,
                "blocks {br}x{bc} {n}x{k}x{m} t={t}: y[{i}] = {} vs {}",
                y[i],
                want[i]
            );
        }
        check_scaled(&y, (n, m), "blocks", |s, out| a.spmm_scaled(t, x, s, out, m))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn issue_20_int8_blocks_are_bit_exact(
            (br, bc) in prop_oneof![
                4 => (1usize..=4, 1usize..=6).prop_map(|(p, q)| (16 * p, 4 * q)),
                1 => Just((8usize, 4usize)),
                1 => Just((16usize, 6usize)),
                // One block per AMX tile width: the tiles from 4 tokens where granted.
                1 => Just((32usize, 64usize)),
            ],
            (brows, bcols, m) in (1usize..4, 1usize..20, 1usize..20),
            keep in proptest::collection::vec(proptest::bool::weighted(0.4), 1..7),
            seed in any::<u64>(),
            t in 1usize..3,
        ) {
            let (n, k) = (brows * br, bcols * bc);
            let mut rng = seed;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                // Extremes often: -128 and 127 are where a wrong shift or sign shows.
                match rng % 8 { 0 => -128, 1 => 127, _ => (rng >> 8) as u8 as i8 }
            };
            let w: Vec<i8> = (0..n * k).map(|_| next()).collect();
            let x: Vec<i8> = (0..k * m).map(|_| next()).collect();
            check_blocks_i8((n, k, m), (br, bc), &keep, (&w, &x), t)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        #[test]
        fn issue_20_int8_one_of_two_runs_as_compact_two_of_four(
            (n, k, m, mut w, x) in two_of_four_product(12, 1..120, 1usize..40),
            t in 1usize..3,
        ) {
            // Keep at most one of each pair of a row: 1:2, and so 2:4.
            for pair in w.chunks_mut(k).flat_map(|row| row.chunks_mut(2)) {
                if pair.len() == 2 && pair[0] != 0 {
                    pair[1] = 0;
                }
            }
            check_two_of_four((n, k, m), &w, &x, t, (1, 2))?;
        }
    }

    #[test]
    fn issue_20_int8_every_kernel_choice_by_token_count_is_exact() {
        // Each token count the dense and compact 2:4 kernels dispatch on differently (1, 2,
        // 3–8, 9–16, more; dense up to 48, then panels), with N, K and M tails.
        let (n, k) = (13, 300);
        let mut w: Vec<i8> = (0..n * k).map(|i| ((i * 7919 + 13) % 255) as i8).collect();
        for (i, v) in w.iter_mut().enumerate() {
            // Keep positions (i / 4 + row) % 3 and 3 of each group: every group shape occurs.
            let (row, col) = (i / k, i % k);
            let keep = [(col / 4 + row) % 3, 3];
            if !keep.contains(&(col % 4)) {
                *v = 0;
            }
        }
        w[5] = i8::MIN;
        let a = SparseI8::compress_nm(&w, n, k, 2, 4).unwrap();
        assert_eq!(a.is_compact(), compact_expected());
        for m in [1, 2, 3, 8, 9, 16, 17, 33, 47, 48, 49, 65] {
            let x: Vec<i8> = (0..k * m).map(|i| ((i * 104729 + 7) % 256) as u8 as i8).collect();
            let want = gemm_i8_naive(&w, &x, n, k, m);
            for t in [1, 2] {
                let mut y = vec![7i32; n * m];
                a.spmm(t, &x, &mut y, m).unwrap();
                assert_exact(&y, &want, format_args!("2:4 m={m} t={t}"));
                let mut y = vec![7i32; n * m];
                gemm_i8(t, &w, &x, &mut y, n, k, m).unwrap();
                assert_exact(&y, &want, format_args!("dense m={m} t={t}"));
            }
        }
    }

    #[test]
    fn issue_20_int8_dense_packed_once_is_exact_at_every_token_count() {
        // One packing, every token count: each feature-lane group size (1–16, balanced
        // groups up to 48) and the token lanes past it, with several 16-row blocks, a
        // partial last block, a K that is no multiple of four and tasks split per thread.
        let (n, k) = (37, 301);
        let w: Vec<i8> = (0..n * k).map(|i| ((i * 7919 + 13) % 256) as u8 as i8).collect();
        let dense = DenseI8::new(&w, n, k).unwrap();
        for m in (1..=70).chain([127, 129]) {
            let x: Vec<i8> = (0..k * m).map(|i| ((i * 104729 + 7) % 256) as u8 as i8).collect();
            let want = gemm_i8_naive(&w, &x, n, k, m);
            for t in [1, 2] {
                let mut y = vec![7i32; n * m];
                dense.gemm(t, &x, &mut y, m).unwrap();
                assert_exact(&y, &want, format_args!("dense m={m} t={t}"));
            }
        }
        assert!(
            dense.value_bytes() >= n * k,
            "the packed weights hold every weight"
        );
        // Built for a token or two: VNNI where the CPU has it (even beside AMX), exact at
        // any token count all the same.
        let few = DenseI8::for_tokens(&w, n, k, 1).unwrap();
        let path = crate::isa::isa_path_at(crate::isa::Operands::I8, Form::Dense, 1);
        assert_eq!(few.isa_path(), path);
        for m in [1, 2, 3, 17] {
            let x: Vec<i8> = (0..k * m).map(|i| ((i * 104729 + 7) % 256) as u8 as i8).collect();
            let mut y = vec![7i32; n * m];
            few.gemm(2, &x, &mut y, m).unwrap();
            assert_exact(&y, &gemm_i8_naive(&w, &x, n, k, m), format_args!("few m={m}"));
        }
        // A long K through the feature lanes (over 2000, several groups of tokens).
        let (n, k) = (21, 2 * 1024 + 13);
        let w: Vec<i8> = (0..n * k).map(|i| ((i * 613 + 5) % 256) as u8 as i8).collect();
        let dense = DenseI8::new(&w, n, k).unwrap();
        for m in [1, 5, 8, 9, 17, 48, 49] {
            let x: Vec<i8> = (0..k * m).map(|i| ((i * 7877 + 3) % 256) as u8 as i8).collect();
            let want = gemm_i8_naive(&w, &x, n, k, m);
            for t in [1, 2] {
                let mut y = vec![7i32; n * m];
                dense.gemm(t, &x, &mut y, m).unwrap();
                assert_exact(&y, &want, format_args!("dense, long K, m={m} t={t}"));
            }
        }
    }

    /// Issue 20: on an AMX host int8 2:4 takes the tiles only from the token count where
    /// they pay, the AVX-512 compact form below it, and the evidence's path says which.
    #[test]
    fn issue_20_int8_two_of_four_takes_the_tiles_only_where_they_pay() {
        use crate::isa::{Form, IsaPath, Operands, isa_path_at};
        let (n, k) = (32, 128);
        let mut wf = data(n * k, 9);
        for g in wf.chunks_mut(4) {
            g[1] = 0.0;
            g[3] = 0.0;
        }
        let (w, _) = quantize_per_channel(&wf, n, k).unwrap();
        for tokens in [1, 7, 8, 16, 512] {
            let a = SparseI8::compress_nm_for(&w, n, k, (2, 4), tokens).unwrap();
            #[cfg(target_arch = "x86_64")]
            {
                let tiles = matches!(a.form, SparseForm::Tiles(_));
                let pays = crate::amx::SparseTiles::pays_at(crate::amx::Op::I8, tokens);
                assert_eq!(tiles, pays, "{tokens}");
                let path = isa_path_at(Operands::I8, Form::TwoOfFour, tokens);
                assert_eq!(path == IsaPath::AmxInt8, tiles, "{tokens}: {path:?}");
                if crate::amx::SparseTiles::available(crate::amx::Op::I8) {
                    assert_eq!(tiles, tokens >= 8, "{tokens}");
                }
            }
            let _ = a;
        }
    }

    #[test]
    fn issue_20_int8_compact_reports_its_execution_copies_once_built() {
        let (n, k) = (40, 256);
        let mut w: Vec<i8> = (0..n * k).map(|i| (i % 251) as i8 - 100).collect();
        for g in w.chunks_mut(4) {
            g[0] = 0;
            g[2] = 0;
        }
        // Compressed for one token: the AVX-512 compact form, not the AMX tiles.
        let a = SparseI8::compress_nm_for(&w, n, k, (2, 4), 1).unwrap();
        assert_eq!(a.execution_copy_bytes(), 0);
        #[cfg(target_arch = "x86_64")]
        if !matches!(a.form, SparseForm::TwoOfFour(_)) {
            return;
        }
        #[cfg(not(target_arch = "x86_64"))]
        return;
        // Rows in lanes (4 tokens): 40 rows in 3 panels of 16, 32 octets; values, index
        // bytes and one correction a panel row.
        let rows_in_lanes = 3 * 32 * 16 * 4 + 3 * 32 * 16 + 3 * 16 * 4;
        let mut y = vec![0i32; n * 4];
        a.spmm(1, &vec![1i8; k * 4], &mut y, 4).unwrap();
        assert_eq!(a.execution_copy_bytes(), rows_in_lanes);
        // One token on Intel adds the expanded lines: 3 blocks × 64 quads of 40 bytes.
        let mut y = vec![0i32; n];
        a.spmm(1, &vec![1i8; k], &mut y, 1).unwrap();
        #[cfg(target_arch = "x86_64")]
        let expanded = if crate::int8_expand::pays() {
            3 * 64 * 40
        } else {
            0
        };
        #[cfg(not(target_arch = "x86_64"))]
        let expanded = 0;
        assert_eq!(a.execution_copy_bytes(), rows_in_lanes + expanded);
    }

    #[test]
    fn issue_20_int8_compact_reports_its_real_metadata() {
        // (rows, k): whole blocks of 8 rows and chunks of 128 (value bytes = half the dense
        // weights, index bytes an eighth), and a shape padded to them.
        for (n, k) in [(16, 256), (5, 21)] {
            let mut wf = data(n * k, 4);
            for row in wf.chunks_mut(k) {
                for g in row.chunks_mut(4) {
                    g.iter_mut().skip(2).for_each(|v| *v = 0.0);
                }
            }
            let (w, _) = quantize_per_channel(&wf, n, k).unwrap();
            let a = SparseI8::compress_nm(&w, n, k, 2, 4).unwrap();
            #[cfg(target_arch = "x86_64")]
            if let SparseForm::Tiles(_) = a.form {
                // 16-row panels × 64-k steps: 32 value bytes and an 8-byte mask a row and step.
                let (rows, steps) = (n.div_ceil(16) * 16, k.div_ceil(64));
                assert_eq!(a.value_bytes(), rows * steps * 32, "{n}x{k}");
                assert_eq!(a.metadata_bytes(), rows * steps * 8, "{n}x{k}");
                continue;
            }
            if a.is_compact() {
                let (rows, chunks) = (n.div_ceil(8) * 8, k.div_ceil(128));
                assert_eq!(a.value_bytes(), rows * chunks * 64, "{n}x{k}");
                // Index bytes, padding included, and one i32 correction a row.
                assert_eq!(a.metadata_bytes(), rows * chunks * 16 + n * 4, "{n}x{k}");
                if (n, k) == (16, 256) {
                    assert_eq!(
                        (a.value_bytes(), a.metadata_bytes() - n * 4),
                        (n * k / 2, n * k / 8)
                    );
                }
            } else {
                let e = SparseI8::compress(&w, n, k).unwrap();
                assert_eq!(
                    (a.value_bytes(), a.metadata_bytes()),
                    (e.value_bytes(), e.metadata_bytes())
                );
            }
        }
    }

    #[test]
    fn issue_20_int8_nm_refuses_overfull_groups_and_bad_patterns() {
        let w = [1i8, 0, 2, 3, 0, 0, 0, 0];
        let err = SparseI8::compress_nm(&w, 1, 8, 2, 4).unwrap_err();
        assert!(matches!(
            err,
            KernelError::Overfull {
                row: 0,
                group: 0,
                nonzeros: 3,
                n: 2,
                m: 4
            }
        ));
        // The short last group counts too (K = 7: positions 4..7).
        let w = [0i8, 0, 0, 0, 1, 1, 1];
        assert!(matches!(
            SparseI8::compress_nm(&w, 1, 7, 2, 4),
            Err(KernelError::Overfull { group: 1, .. })
        ));
        assert!(matches!(
            SparseI8::compress_nm(&w, 1, 7, 4, 4),
            Err(KernelError::Pattern { n: 4, m: 4 })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        #[test]
        fn issue_20_int8_other_ratios_keep_entries_and_stay_exact(
            (n, k, m, w, x) in i8_sparse_product(),
            t in 1usize..3,
            pattern in prop_oneof![Just((1usize, 4usize)), Just((2, 8)), Just((4, 8))],
        ) {
            // Prune to the pattern: keep the first `n` non-zeros of each group.
            let (keep, group) = pattern;
            let mut w = w;
            for row in w.chunks_mut(k) {
                for g in row.chunks_mut(group) {
                    let mut kept = 0;
                    for v in g.iter_mut().filter(|v| **v != 0) {
                        if kept == keep {
                            *v = 0;
                        } else {
                            kept += 1;
                        }
                    }
                }
            }
            let a = SparseI8::compress_nm(&w, n, k, keep, group).unwrap();
            prop_assert!(!a.is_compact());
            let want = gemm_i8_naive(&w, &x, n, k, m);
            let mut y = vec![7i32; n * m];
            a.spmm(t, &x, &mut y, m).unwrap();
            prop_assert!(y.iter().zip(&want).all(|(&a, &b)| i64::from(a) == b));
        }
    }

    #[test]
    fn issue_20_int8_compact_is_exact_at_the_k_bound_with_extreme_values() {
        // As for dense: every kept term -128 · -128 or 127 · 127 pushes the shifted partial
        // sums past i32 long before K ends; the result must still be the exact sum. Each row
        // keeps two extremes per group, at a different pair of positions.
        let (n, k) = (3, INT8_MAX_K);
        let w: Vec<i8> = (0..n * k)
            .map(|i| {
                let (r, c) = (i / k, i % k);
                let kept = [[0, 1], [1, 3], [0, 2]][(r + c / 4) % 3].contains(&(c % 4));
                match (kept, r) {
                    (false, _) => 0,
                    (true, 0) => i8::MIN,
                    (true, 1) => i8::MAX,
                    (true, _) => [i8::MIN, i8::MAX][c % 2],
                }
            })
            .collect();
        for m in [3, 19] {
            let x: Vec<i8> = (0..k * m)
                .map(|i| match i % m {
                    0 | 17 => i8::MIN,
                    1 | 18 => i8::MAX,
                    c => [i8::MIN, i8::MAX, 0, 1][(i / m + c) % 4],
                })
                .collect();
            let want = gemm_i8_naive(&w, &x, n, k, m);
            assert!(want.iter().all(|&v| i32::try_from(v).is_ok()));
            assert!(want[0] > i64::from(i32::MAX) / 4, "large sums are in the test");
            let a = SparseI8::compress_nm(&w, n, k, 2, 4).unwrap();
            assert_eq!(a.is_compact(), compact_expected());
            for t in [1, 2] {
                let mut y = vec![0i32; n * m];
                a.spmm(t, &x, &mut y, m).unwrap();
                assert_exact(&y, &want, format_args!("m={m} t={t}"));
            }
        }
    }
}
