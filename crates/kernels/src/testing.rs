//! Helpers shared by the kernels' tests.

/// Deterministic values in [-1, 1] (xorshift), so failures reproduce from the seed alone.
pub(crate) fn data(len: usize, salt: u64) -> Vec<f32> {
    let mut s = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// Deterministic values in [-1, 1] from a multiplicative hash of the index, the inputs of
/// the dense and precision tests.
pub(crate) fn hashed(len: usize, salt: u32) -> Vec<f32> {
    (0..len)
        .map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(salt) >> 8) % 2001) as f32 / 1000.0 - 1.0)
        .collect()
}

/// Panics with the first element where `got` differs from the f64-accumulated oracle by more
/// than f32 rounding over a K-long sum allows (a wrong index errs by O(1)).
pub(crate) fn assert_close(got: &[f32], want: &[f32], k: usize, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let tol = 1e-5 * (k as f32).max(10.0);
    if let Some(i) = got
        .iter()
        .zip(want)
        .position(|(g, w)| (g - w).is_nan() || (g - w).abs() > tol * w.abs().max(1.0))
    {
        panic!("{what}: element {i}: {} vs {}", got[i], want[i]);
    }
}

/// Whether this CPU has AVX-512F: tests of AVX-512-only kernels skip without it.
pub(crate) fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    return crate::cpu::has!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    false
}
