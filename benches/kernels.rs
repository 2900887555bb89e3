//! criterion micro-benchmarks of the CPU kernels: dense f32 GEMM against the 2:4, CSR and BSR
//! kernels on the same pruned weights, at a BERT and a LLaMA shape, plus the reduced precisions
//! at the BERT shape.
//!
//! Run with `cargo bench --bench kernels` (release profile; add `-- 2:4` to filter, or
//! `-- --quick` for a short pass). `sparsegate bench` measures the same kernels with the
//! pipeline's interleaved sampling and confidence intervals; this is the developer's loop.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sparsegate::execute::kernels::dense::{DenseWeights, gemm_f32};
use sparsegate::execute::kernels::precision::{self, Half, HalfBuf, SparseI8};
use sparsegate::execute::prune_and_compress;
use sparsegate::ingress::{GemmOp, Sparsity};
use sparsegate::schedule::schedule_cpu;
use std::hint::black_box;

/// `(tokens M, output features N, reduction K)`.
const SHAPES: [(usize, usize, usize); 2] = [(128, 3072, 768), (128, 11008, 4096)];

fn data(len: usize, salt: u32, scale: f32) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let h = (i as u32).wrapping_mul(2654435761).wrapping_add(salt) >> 8;
            ((h % 2001) as f32 / 1000.0 - 1.0) * scale
        })
        .collect()
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn formats(c: &mut Criterion) {
    let t = threads();
    for (m, n, k) in SHAPES {
        let mut group = c.benchmark_group(format!("{m}x{n}x{k}"));
        group.sample_size(10);
        group.throughput(Throughput::Elements((2 * m * n * k) as u64));
        let x = data(k * m, 7, 1.0);
        let mut y = vec![0.0f32; n * m];
        let patterns = [
            ("2:4", Sparsity::NOfM { n: 2, m: 4 }),
            ("csr-0.1", Sparsity::Unstructured { density: 0.1 }),
            (
                "bsr-8x8-0.25",
                Sparsity::Block {
                    rows: 8,
                    cols: 8,
                    density: 0.25,
                },
            ),
        ];
        let w0 = data(n * k, 1, (3.0 / k as f32).sqrt());
        // The comparator as the gate runs it (weights laid out once), and the one-off path.
        let dense = DenseWeights::new(w0.clone(), n, k).expect("shape");
        group.bench_function("dense", |b| {
            b.iter(|| dense.gemm(t, black_box(&x), &mut y, m).expect("dense"))
        });
        group.bench_function("dense-one-off", |b| {
            b.iter(|| gemm_f32(t, black_box(&w0), &x, &mut y, n, k, m).expect("dense"))
        });
        let op = GemmOp {
            name: String::new(),
            m,
            n,
            k,
        };
        let schedule = schedule_cpu(&op, t);
        for (label, sparsity) in patterns {
            let mut w = w0.clone();
            let a = prune_and_compress(&mut w, n, k, sparsity)
                .expect("compress")
                .expect("sparse pattern");
            group.bench_function(BenchmarkId::new("sparse", label), |b| {
                b.iter(|| {
                    a.spmm_scheduled(&schedule, black_box(&x), &mut y, m)
                        .expect("spmm")
                })
            });
        }
        group.finish();
    }
}

fn precisions(c: &mut Criterion) {
    let t = threads();
    let (m, n, k) = SHAPES[0];
    let mut group = c.benchmark_group(format!("precision-{m}x{n}x{k}"));
    group.sample_size(10);
    let (w, x) = (data(n * k, 1, (3.0 / k as f32).sqrt()), data(k * m, 7, 1.0));
    let mut y = vec![0.0f32; n * m];
    for (label, kind) in [("fp16", Half::F16), ("bf16", Half::Bf16)] {
        let (wh, xh) = (HalfBuf::from_f32(kind, &w), HalfBuf::from_f32(kind, &x));
        let (mut wp, mut xp) = (vec![0.0; n * k], vec![0.0; k * m]);
        group.bench_function(BenchmarkId::new("dense", label), |b| {
            b.iter(|| precision::gemm_half(t, &wh, &xh, (&mut wp, &mut xp), &mut y, n, k, m).expect("half"))
        });
    }
    let mut w24 = w.clone();
    sparsegate::execute::kernels::nm::prune_magnitude_in_place(&mut w24, n, k, 2, 4);
    let (wq, _) = precision::quantize_per_channel(&w24, n, k).expect("quantize");
    let (xq, _) = precision::quantize_per_channel(&x, 1, k * m).expect("quantize");
    let mut acc = vec![0i32; n * m];
    let dense = precision::DenseI8::new(&wq, n, k).expect("int8 layout");
    group.bench_function(BenchmarkId::new("dense", "int8"), |b| {
        b.iter(|| dense.gemm(t, &xq, &mut acc, m).expect("int8"))
    });
    let sparse = SparseI8::compress_nm(&wq, n, k, 2, 4).expect("compress");
    group.bench_function(BenchmarkId::new("2:4", "int8"), |b| {
        b.iter(|| sparse.spmm(t, &xq, &mut acc, m).expect("int8 2:4"))
    });
    group.finish();
}

criterion_group!(benches, formats, precisions);
criterion_main!(benches);
