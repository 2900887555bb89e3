//! The test oracle: a triple loop with f64 accumulation. Slow on purpose and obviously right,
//! so the fast kernels are checked against something that shares none of their tricks.

/// `y[N×M] = w[N×K] · x[K×M]`, accumulated in f64 and rounded once.
///
/// Panics if a buffer is shorter than its shape: it is only meant for tests and checks.
pub fn gemm_naive(w: &[f32], x: &[f32], y: &mut [f32], n: usize, k: usize, m: usize) {
    assert!(
        w.len() >= n * k && x.len() >= k * m && y.len() >= n * m,
        "gemm_naive: short buffer"
    );
    for row in 0..n {
        for col in 0..m {
            let acc: f64 = (0..k)
                .map(|kk| f64::from(w[row * k + kk]) * f64::from(x[kk * m + col]))
                .sum();
            y[row * m + col] = acc as f32;
        }
    }
}

/// `y[N×M] = w[N×K] · x[K×M]` for int8 operands, accumulated in i64: the exact value every
/// int8 kernel's i32 result must equal.
///
/// Panics if a buffer is shorter than its shape: it is only meant for tests and checks.
pub fn gemm_i8_naive(w: &[i8], x: &[i8], n: usize, k: usize, m: usize) -> Vec<i64> {
    assert!(
        w.len() >= n * k && x.len() >= k * m,
        "gemm_i8_naive: short buffer"
    );
    (0..n * m)
        .map(|i| {
            let (row, col) = (i / m, i % m);
            (0..k)
                .map(|kk| i64::from(w[row * k + kk]) * i64::from(x[kk * m + col]))
                .sum()
        })
        .collect()
}
