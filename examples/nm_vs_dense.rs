//! Side-by-side medians of the N:M kernel (2:4 unless told) and the dense `gemm` comparator on
//! BERT-base shapes, interleaved in one process (absolute speed claims belong here, never in
//! timed tests).
//!
//! `cargo run --release --example nm_vs_dense -- [threads] [tokens] [n] [m]`

mod common;

use sparsegate::execute::kernels::{dense::DenseWeights, nm::NmMatrix, nm::prune_magnitude};
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let threads = args.first().copied().unwrap_or(1);
    let m = args.get(1).copied().unwrap_or(128);
    let (keep, group) = (
        args.get(2).copied().unwrap_or(2),
        args.get(3).copied().unwrap_or(4),
    );
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool");
    println!("threads {threads}, tokens {m}, pattern {keep}:{group}");
    println!(
        "{:>6} {:>6} {:>10} {:>10} {:>9} {:>9} {:>11} {:>9}",
        "N", "K", "dense µs", "N:M µs", "dense GF", "N:M GF*", "pair ratio", "min ratio"
    );
    for (n, k) in [(2304, 768), (768, 768), (3072, 768), (768, 3072)] {
        let w = common::weights(n * k);
        let x = common::activations(k * m);
        let pruned = prune_magnitude(&w, n, k, keep, group);
        let sparse = NmMatrix::compress(&pruned, n, k, keep, group).expect("pruned");
        let dense = DenseWeights::new(pruned.clone(), n, k).expect("shape");
        let mut y = vec![0.0; n * m];
        let (mut td, mut ts) = (Vec::new(), Vec::new());
        pool.install(|| {
            for i in 0..60 {
                let t = Instant::now();
                dense.gemm(threads, &x, &mut y, m).expect("shape");
                let d = t.elapsed().as_secs_f64();
                let t = Instant::now();
                sparse.spmm(threads, &x, &mut y, m).expect("shape");
                let s = t.elapsed().as_secs_f64();
                if i >= 10 {
                    td.push(d);
                    ts.push(s);
                }
            }
        });
        let mut pairs: Vec<f64> = td.iter().zip(&ts).map(|(d, s)| d / s).collect();
        let pair = median(&mut pairs);
        let min_ratio =
            td.iter().copied().fold(f64::MAX, f64::min) / ts.iter().copied().fold(f64::MAX, f64::min);
        let (d, s) = (median(&mut td), median(&mut ts));
        let flops = 2.0 * (n * k * m) as f64;
        println!(
            "{n:>6} {k:>6} {:>10.1} {:>10.1} {:>9.1} {:>9.1} {:>11.2}x {:>8.2}x",
            d * 1e6,
            s * 1e6,
            flops / d / 1e9,
            flops / s / 1e9,
            pair,
            min_ratio
        );
    }
    println!("medians of 50 interleaved pairs; GF* = dense-equivalent GFLOP/s (2·N·K·M / time)");
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
