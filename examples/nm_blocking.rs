//! Explore blockings of the 2:4 kernel on one shape: prints, for each (strip, k_block,
//! rows_per_task), the ratio of the fastest dense time to the fastest sparse time over 31
//! interleaved pairs. With `SPARSE_ONLY=1` it times the default schedule alone instead.
//!
//! `cargo run --release --example nm_blocking -- [n] [k] [tokens]`

mod common;

use sparsegate::execute::kernels::{dense::DenseWeights, nm::NmMatrix, nm::prune_magnitude};
use sparsegate::schedule::CpuSchedule;
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (n, k, m) = (
        args.first().copied().unwrap_or(2304),
        args.get(1).copied().unwrap_or(768),
        args.get(2).copied().unwrap_or(128),
    );
    let w = common::weights(n * k);
    let x = common::activations(k * m);
    let pruned = prune_magnitude(&w, n, k, 2, 4);
    let sparse = NmMatrix::compress(&pruned, n, k, 2, 4).expect("pruned");
    let dense = DenseWeights::new(pruned.clone(), n, k).expect("shape");
    let mut y = vec![0.0; n * m];
    if std::env::var_os("SPARSE_ONLY").is_some() {
        let t = Instant::now();
        for _ in 0..100 {
            sparse.spmm(1, &x, &mut y, m).expect("shape");
        }
        let d = t.elapsed().as_secs_f64() / 100.0;
        println!(
            "{n}x{k}x{m}: {:.1} µs, {:.1} dense-equivalent GFLOP/s",
            d * 1e6,
            2.0 * (n * k * m) as f64 / d / 1e9
        );
        return;
    }
    for strip in [128] {
        for k_block in [32, 64, 128] {
            for rows_per_task in [16, 32, 64] {
                let s = CpuSchedule {
                    threads: 1,
                    strip_width: strip,
                    k_block,
                    rows_per_task,
                    working_set_bytes: 0,
                };
                let (mut td, mut ts) = (Vec::new(), Vec::new());
                for _ in 0..31 {
                    let t = Instant::now();
                    dense.gemm(1, &x, &mut y, m).expect("shape");
                    td.push(t.elapsed().as_secs_f64());
                    let t = Instant::now();
                    sparse.spmm_scheduled(&s, &x, &mut y, m).expect("shape");
                    ts.push(t.elapsed().as_secs_f64());
                }
                td.sort_by(f64::total_cmp);
                ts.sort_by(f64::total_cmp);
                println!(
                    "strip {strip:>3} kb {k_block:>4} rows {rows_per_task:>3}: ratio {:.2}",
                    td[0] / ts[0]
                );
            }
        }
    }
}
