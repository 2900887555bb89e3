//! The dense comparator: [`DenseWeights`], weights laid out once like the sparse formats',
//! and [`gemm_f32`] for a one-off product.
//!
//! On AVX-512 a [`DenseWeights`] product runs the packed-panel kernel of `dense_lanes` (the
//! fastest dense f32 measured on this machine, numpy/OpenBLAS included); elsewhere, and for
//! a single token on weights that fit in L3, it runs the `gemm` crate, as [`gemm_f32`]
//! always does. From 2 tokens the packed kernel is level with the crate where the weights
//! stream from DRAM and 1.3–1.55× on weights in L3 (`examples/dense_vs_gemm_crate.rs`).
//!
//! `gemm` is an `unsafe` raw-pointer API with strides, and its scaling convention is the
//! reverse of BLAS (`dst := alpha·dst + beta·lhs·rhs`). Both hazards live here and nowhere
//! else: callers get a slice API that checks every length before the pointers are formed.

use super::dense_lanes::{self, PanelWeights};
use super::error::{KernelError, check_gemm, check_len};
use super::shared_output::trivial_product;
use gemm::Parallelism;

/// Dense `n × k` weights ready for repeated products, laid out once (weight-stationary, as
/// the sparse formats are) for the kernel that will run them.
#[derive(Debug, Clone)]
pub struct DenseWeights {
    n: usize,
    k: usize,
    stored: Stored,
}

/// The copies a [`DenseWeights`] keeps: only what its products can run on, so a large
/// layer is not held twice.
#[derive(Debug, Clone)]
enum Stored {
    /// Row-major, for the `gemm` crate: no AVX-512.
    RowMajor(Vec<f32>),
    /// The packed panels alone: AVX-512 weights large enough that every product, one token
    /// included, runs faster on them ([`dense_lanes::takes`]).
    Panels(PanelWeights),
    /// Both: AVX-512 weights small enough that a single token runs faster on the crate.
    Both { rows: Vec<f32>, panels: PanelWeights },
}

impl DenseWeights {
    /// Take the row-major `n × k` weights `w` and lay them out for the kernels this CPU runs.
    pub fn new(w: Vec<f32>, n: usize, k: usize) -> Result<DenseWeights, KernelError> {
        check_len("w", w.len(), n, k)?;
        let stored = if !dense_lanes::available() {
            Stored::RowMajor(w)
        } else if dense_lanes::takes(n, k, 1) {
            Stored::Panels(PanelWeights::new(&w, n, k))
        } else {
            let panels = PanelWeights::new(&w, n, k);
            Stored::Both { rows: w, panels }
        };
        Ok(DenseWeights { n, k, stored })
    }

    /// Bytes of weight values a product streams (`n · k` f32), whichever copy it reads.
    pub fn value_bytes(&self) -> usize {
        self.n * self.k * 4
    }

    /// `y[n × m] = W · x[k × m]`, row-major f32, on `threads` workers of the current rayon
    /// pool (1 runs on the calling thread).
    pub fn gemm(&self, threads: usize, x: &[f32], y: &mut [f32], m: usize) -> Result<(), KernelError> {
        let (n, k) = (self.n, self.k);
        match &self.stored {
            Stored::Both { rows, .. } if !dense_lanes::takes(n, k, m) => {
                gemm_f32(threads, rows, x, y, n, k, m)
            }
            Stored::RowMajor(rows) => gemm_f32(threads, rows, x, y, n, k, m),
            Stored::Panels(panels) | Stored::Both { panels, .. } => {
                check_len("x", x.len(), k, m)?;
                check_len("y", y.len(), n, m)?;
                dense_lanes::gemm(panels, threads, x, y, m);
                Ok(())
            }
        }
    }
}

/// `y[N×M] = w[N×K] · x[K×M]`, row-major f32, with the `gemm` crate on `threads` workers of
/// the current rayon pool (1 runs on the calling thread): a product that runs once, or on a
/// CPU without AVX-512.
///
/// Returns an error instead of touching memory when a buffer's length disagrees with the shape.
pub fn gemm_f32(
    threads: usize,
    w: &[f32],
    x: &[f32],
    y: &mut [f32],
    n: usize,
    k: usize,
    m: usize,
) -> Result<(), KernelError> {
    check_gemm(w.len(), x.len(), y.len(), n, k, m)?;
    if trivial_product(y, n, k, m) {
        return Ok(());
    }
    let parallelism = if threads <= 1 {
        Parallelism::None
    } else {
        Parallelism::Rayon(threads)
    };
    let (k_stride, m_stride) = (stride(k)?, stride(m)?);
    #[cfg(target_arch = "x86_64")]
    if !crate::cpu::allows(crate::cpu::IsaLevel::Avx512) {
        // SAFETY: as below.
        unsafe { capped::gemm(y, w, x, (n, k, m), (k_stride, m_stride), parallelism) };
        return Ok(());
    }
    // SAFETY: the three lengths were checked above, so every element the strides address
    // (row-major, unit column stride) lies inside its slice; `y` is borrowed mutably, so it
    // aliases neither input. `read_dst = false` means `y` is only written, and with gemm's
    // reversed convention alpha = 0 (ignored), beta = 1 gives y = w·x.
    unsafe {
        gemm::gemm(
            n,
            m,
            k,
            y.as_mut_ptr(),
            1,
            m_stride,
            false,
            w.as_ptr(),
            1,
            k_stride,
            x.as_ptr(),
            1,
            m_stride,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            parallelism,
        );
    }
    Ok(())
}

/// The `gemm` crate's kernels below AVX-512, for a process capped there (`cpu`): what its
/// dispatch runs on a CPU without AVX-512 (the AVX2+FMA kernel, or the scalar one without
/// them), which it would not pick on this one. The same call as `gemm::gemm` makes for
/// f32, with its operand swap for a row-major output.
#[cfg(target_arch = "x86_64")]
mod capped {
    use gemm::Parallelism;
    use gemm_common::gemm::gemm_basic_generic;
    use gemm_common::simd::{MixedSimd, Scalar, V3};

    /// `y = w · x` as [`super::gemm_f32`] describes, strides `(k, m)` in floats.
    ///
    /// # Safety
    /// `w` holds `n × k`, `x` `k × m` and `y` `n × m` floats at those row strides.
    pub(super) unsafe fn gemm(
        y: &mut [f32],
        w: &[f32],
        x: &[f32],
        (n, k, m): (usize, usize, usize),
        (k_stride, m_stride): (isize, isize),
        parallelism: Parallelism,
    ) {
        // `gemm::gemm` transposes a problem whose output runs along rows (unit column
        // stride) into the column-major one its kernels compute: yᵀ = xᵀ · wᵀ.
        let (rows, cols, (dst_cs, dst_rs), (lhs, lhs_cs, lhs_rs), (rhs, rhs_cs, rhs_rs)) = if 1 < m_stride {
            (
                m,
                n,
                (m_stride, 1),
                (x.as_ptr(), m_stride, 1),
                (w.as_ptr(), k_stride, 1),
            )
        } else {
            (
                n,
                m,
                (1, m_stride),
                (w.as_ptr(), 1, k_stride),
                (x.as_ptr(), 1, m_stride),
            )
        };
        let dst = y.as_mut_ptr();
        macro_rules! run {
            ($simd:expr, $kernels:path, $lanes:expr) => {{
                use $kernels as kernels;
                // SAFETY: the caller's contract; the strides address exactly the three
                // buffers, as in `gemm::gemm`'s own call.
                unsafe {
                    gemm_basic_generic::<
                        _,
                        f32,
                        { $lanes },
                        { kernels::MR_DIV_N * $lanes },
                        { kernels::NR },
                        { kernels::MR_DIV_N },
                        { kernels::H_M },
                        { kernels::H_N },
                    >(
                        $simd,
                        rows,
                        cols,
                        k,
                        dst,
                        dst_cs,
                        dst_rs,
                        false,
                        lhs,
                        lhs_cs,
                        lhs_rs,
                        rhs,
                        rhs_cs,
                        rhs_rs,
                        0.0,
                        1.0,
                        false,
                        false,
                        false,
                        |a, b, c| a * b + c,
                        &kernels::UKR,
                        &kernels::H_UKR,
                        false,
                        parallelism,
                    )
                }
            }};
        }
        let avx2 = crate::cpu::has!("avx2") && crate::cpu::has!("fma");
        match <V3 as MixedSimd<f32, f32, f32, f32>>::try_new() {
            Some(v3) if avx2 => run!(v3, gemm_f32::microkernel::fma::f32, 8),
            _ => run!(Scalar, gemm_f32::microkernel::scalar::f32, 1),
        }
    }
}

fn stride(len: usize) -> Result<isize, KernelError> {
    isize::try_from(len).map_err(|_| KernelError::Overflow { rows: 1, cols: len })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::gemm_naive;
    use crate::testing::hashed as data;
    use proptest::prelude::*;

    /// The first element of `got` off `want` by more than the f32 tolerance of a K-long sum.
    fn mismatch(got: &[f32], want: &[f32], k: usize) -> Option<(f32, f32)> {
        let tol = 1e-4 * (k as f32).max(1.0) / 10.0;
        got.iter()
            .zip(want)
            .map(|(&a, &b)| (a, b))
            .find(|(a, b)| (a - b).abs() > tol * b.abs().max(1.0))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn matches_the_naive_oracle(n in 1usize..40, k in 1usize..90, m in 1usize..70, threads in 1usize..3) {
            let (w, x) = (data(n * k, 1), data(k * m, 7));
            let (mut y, mut want) = (vec![0.0; n * m], vec![0.0; n * m]);
            gemm_f32(threads, &w, &x, &mut y, n, k, m).unwrap();
            gemm_naive(&w, &x, &mut want, n, k, m);
            prop_assert_eq!(mismatch(&y, &want, k), None);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        /// Whichever kernel runs (packed panels on AVX-512 from 2 tokens, or 1 on large
        /// weights; `gemm` otherwise), `DenseWeights` computes the same product as the one-off
        /// path.
        #[test]
        fn dense_weights_match_the_one_off_product(n in 1usize..30, k in 1usize..70, m in 1usize..90, threads in 1usize..3) {
            let (w, x) = (data(n * k, 2), data(k * m, 9));
            let (mut y, mut want) = (vec![0.0; n * m], vec![0.0; n * m]);
            gemm_f32(threads, &w, &x, &mut want, n, k, m).unwrap();
            DenseWeights::new(w, n, k).unwrap().gemm(threads, &x, &mut y, m).unwrap();
            prop_assert_eq!(mismatch(&y, &want, k), None);
        }
    }

    /// Weights past the single-token threshold keep only the packed panels on AVX-512 (a
    /// 7B-model FFN layer is 180 MB), and every token count still gets the right product.
    #[test]
    fn issue_3_large_dense_weights_are_held_once() {
        let (n, k) = (1024, 4096);
        let w = data(n * k, 5);
        let d = DenseWeights::new(w.clone(), n, k).unwrap();
        assert_eq!(d.value_bytes(), n * k * 4);
        let expected_panels_only = dense_lanes::available();
        assert_eq!(matches!(d.stored, Stored::Panels(_)), expected_panels_only);
        for m in [1, 3] {
            let x = data(k * m, 11);
            let (mut y, mut want) = (vec![0.0; n * m], vec![0.0; n * m]);
            gemm_f32(2, &w, &x, &mut want, n, k, m).unwrap();
            d.gemm(2, &x, &mut y, m).unwrap();
            assert_eq!(mismatch(&y, &want, k), None, "{m} tokens");
        }
        // Small weights keep the row-major copy beside the panels for one token.
        let small = DenseWeights::new(data(64 * 64, 1), 64, 64).unwrap();
        assert_eq!(matches!(small.stored, Stored::Both { .. }), expected_panels_only);
    }

    #[test]
    fn dense_weights_refuse_wrong_lengths() {
        assert!(matches!(
            DenseWeights::new(vec![0.0; 5], 2, 3),
            Err(KernelError::Length { what: "w", .. })
        ));
        let d = DenseWeights::new(vec![0.0; 6], 2, 3).unwrap();
        let mut y = vec![0.0; 2 * 32];
        let err = d.gemm(1, &[0.0; 3 * 31], &mut y, 32).unwrap_err();
        assert!(matches!(err, KernelError::Length { what: "x", .. }));
    }

    #[test]
    fn refuses_wrong_lengths_instead_of_reading_past_them() {
        let mut y = vec![0.0; 4];
        let err = gemm_f32(1, &[0.0; 3], &[0.0; 4], &mut y, 2, 2, 2).unwrap_err();
        assert!(matches!(
            err,
            KernelError::Length {
                what: "w",
                expected: 4,
                actual: 3
            }
        ));
    }

    #[test]
    fn empty_reduction_gives_zeros() {
        let mut y = vec![5.0; 6];
        gemm_f32(1, &[], &[], &mut y, 2, 0, 3).unwrap();
        assert!(y.iter().all(|&v| v == 0.0));
    }
}
