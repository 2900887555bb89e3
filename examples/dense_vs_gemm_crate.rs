//! The dense comparator's two kernels side by side across token counts: the packed-panel
//! AVX-512 kernel (`DenseWeights`, weights packed once) and the `gemm` crate (`gemm_f32`,
//! which packs on every call), interleaved, 2 threads, median of 25 pairs: the numbers behind
//! `dense_lanes::takes` and the blocking rules of `kernels/dense_lanes.rs`.
//!
//! `cargo run --release --example dense_vs_gemm_crate`

mod common;

use sparsegate::execute::kernels::dense::{DenseWeights, gemm_f32};
use std::time::Instant;

const PAIRS: usize = 25;
const THREADS: usize = 2;

fn main() {
    println!(
        "{:>11} {:>5} {:>12} {:>12} {:>6}",
        "N×K", "M", "packed GF/s", "gemm GF/s", "ratio"
    );
    for (n, k) in [(4096usize, 4096usize), (2048, 2048), (768, 768), (3072, 768)] {
        let w = common::weights(n * k);
        let packed = DenseWeights::new(w.clone(), n, k).expect("shape");
        for m in [1usize, 2, 4, 8, 16, 32, 48, 64, 100, 128, 256, 512] {
            let x = common::activations(k * m);
            let mut y = vec![0.0; n * m];
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for _ in 0..PAIRS {
                let t = Instant::now();
                packed.gemm(THREADS, &x, &mut y, m).expect("shape");
                a.push(t.elapsed().as_secs_f64());
                let t = Instant::now();
                gemm_f32(THREADS, &w, &x, &mut y, n, k, m).expect("shape");
                b.push(t.elapsed().as_secs_f64());
            }
            a.sort_by(f64::total_cmp);
            b.sort_by(f64::total_cmp);
            let (a, b) = (a[PAIRS / 2], b[PAIRS / 2]);
            let flops = 2.0 * (n * k * m) as f64;
            println!(
                "{:>11} {m:>5} {:>12.0} {:>12.0} {:>6.2}",
                format!("{n}×{k}"),
                flops / a / 1e9,
                flops / b / 1e9,
                b / a
            );
        }
    }
}
