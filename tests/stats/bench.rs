//! Issue 5 benchmark (ignored by default: absolute speed belongs in benchmarks, not in the
//! test suite): Mann–Whitney U + Hodges–Lehmann shift and interval + a 10,000-resample
//! bootstrap of the ratio of medians on two samples of 1,000, the same work and data as
//! `scripts/bench_stats_scipy.py`. Target: under 20 ms.
//!
//!     cargo test --release --test stats bench:: -- --ignored --nocapture

use sparsegate::validate::stats::{
    Bootstrap, CiMethod, MwuMethod, TwoSample, hodges_lehmann, mann_whitney_u,
};
use std::time::Instant;

fn data() -> (Vec<f64>, Vec<f64>) {
    let v = crate::common::fixture("stats/bench.json");
    (
        crate::common::floats(&v["baseline"]),
        crate::common::floats(&v["candidate"]),
    )
}

/// Milliseconds one call of `f` takes.
fn ms<T>(f: impl Fn() -> T) -> f64 {
    let t = Instant::now();
    std::hint::black_box(f());
    t.elapsed().as_secs_f64() * 1e3
}

#[test]
#[ignore]
fn issue_5_benchmark_mwu_hl_bootstrap_on_1000_per_side() {
    let (a, b) = data();
    let mwu = || mann_whitney_u(&b, &a, MwuMethod::Auto).unwrap();
    let hl = || hodges_lehmann(&a, &b, 0.95).unwrap();
    let boot = || {
        Bootstrap::new(10_000, 1)
            .two_sample(
                &a,
                &b,
                TwoSample::RatioOfQuantiles { q: 0.5 },
                CiMethod::Percentile,
                0.95,
            )
            .unwrap()
    };
    let once = || (mwu().p_two_sided, hl().shift, boot().low);
    once();
    let mut times: Vec<f64> = (0..7).map(|_| ms(once)).collect();
    times.sort_by(f64::total_cmp);
    let (mwu, hl, boot) = (ms(mwu), ms(hl), ms(boot));
    eprintln!(
        "rust: median {:.2} ms over 7 runs (min {:.2}); split: MWU {mwu:.2} ms, HL {hl:.2} ms, bootstrap {boot:.2} ms",
        times[3], times[0]
    );
}
