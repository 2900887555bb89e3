//! Two strided sums (dense: every element; sparse: every other one) so that a pack can gate
//! one criterion benchmark against another.
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;

fn sums(c: &mut Criterion) {
    let v = vec![1.0f32; 1 << 16];
    let mut g = c.benchmark_group("sum");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_millis(300));
    g.bench_function("dense", |b| b.iter(|| black_box(&v).iter().sum::<f32>()));
    g.bench_function("sparse", |b| b.iter(|| black_box(&v).iter().step_by(2).sum::<f32>()));
    g.finish();
}

criterion_group!(benches, sums);
criterion_main!(benches);
