//! Issue 5 benchmark (ignored by default: absolute speed belongs in benchmarks, not in the
//! test suite): Mann–Whitney U + Hodges–Lehmann shift and interval + a 10,000-resample
//! bootstrap of the ratio of medians on two samples of 1,000, the same work and data as
//! `scripts/bench_stats_scipy.py`. Target: under 20 ms.
//!
//!     cargo test --release --test stats_bench -- --ignored --nocapture

use sparsegate::validate::stats::{
    Bootstrap, CiMethod, MwuMethod, TwoSample, hodges_lehmann, mann_whitney_u,
};
use std::time::Instant;

fn data() -> (Vec<f64>, Vec<f64>) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/stats/bench.json"
    ))
    .expect("bench data");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let f = |k: &str| -> Vec<f64> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    (f("baseline"), f("candidate"))
}

#[test]
#[ignore]
fn issue_5_benchmark_mwu_hl_bootstrap_on_1000_per_side() {
    let (a, b) = data();
    let once = || {
        let m = mann_whitney_u(&b, &a, MwuMethod::Auto).unwrap();
        let h = hodges_lehmann(&a, &b, 0.95).unwrap();
        let r = Bootstrap::new(10_000, 1)
            .two_sample(
                &a,
                &b,
                TwoSample::RatioOfQuantiles { q: 0.5 },
                CiMethod::Percentile,
                0.95,
            )
            .unwrap();
        (m.p_two_sided, h.shift, r.low)
    };
    once();
    let mut times: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(once());
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let split = |f: &dyn Fn()| {
        let t = Instant::now();
        f();
        t.elapsed().as_secs_f64() * 1e3
    };
    let mwu = split(&|| {
        std::hint::black_box(mann_whitney_u(&b, &a, MwuMethod::Auto).unwrap());
    });
    let hl = split(&|| {
        std::hint::black_box(hodges_lehmann(&a, &b, 0.95).unwrap());
    });
    let boot = split(&|| {
        std::hint::black_box(
            Bootstrap::new(10_000, 1)
                .two_sample(
                    &a,
                    &b,
                    TwoSample::RatioOfQuantiles { q: 0.5 },
                    CiMethod::Percentile,
                    0.95,
                )
                .unwrap(),
        );
    });
    eprintln!(
        "rust: median {:.2} ms over 7 runs (min {:.2}); split: MWU {mwu:.2} ms, HL {hl:.2} ms, bootstrap {boot:.2} ms",
        times[3], times[0]
    );
}
