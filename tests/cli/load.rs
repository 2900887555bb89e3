//! Latency under load on the CPU backend (issue 8): the same workload at the same mean
//! rate, served from a steady stream and from bursts. Assertions are on the queueing
//! structure (drops, queued requests, requests in the system) and on generous ratios, not
//! on timings that vary with machine load.

use crate::support::{Sandbox, assert_contains, assert_exit};

fn load_pack(guardrails: &str, steady: &str, bursts: &str) -> String {
    format!(
        "schema_version: 1
name: load
owners: [{{name: T, email: t@example.com, role: owner}}]
rollback: {{trigger: t}}
lock: {{threads: 1}}
x-work: &work {{ops: [{{gemm: {{name: ffn, m: 32, n: 256, k: 256}}}}]}}
guardrails: {guardrails}
slices:
  - id: steady
    workload: *work
    sparsity: [\"2:4\"]
    load: {steady}
  - id: bursts
    workload: *work
    sparsity: [\"2:4\"]
    load: {bursts}
"
    )
}

fn counter(slice: &serde_json::Value, name: &str) -> f64 {
    slice["counters"][name]
        .as_f64()
        .unwrap_or_else(|| panic!("no counter {name}: {slice}"))
}

fn quantile(slice: &serde_json::Value, q: f64) -> f64 {
    let mut v: Vec<f64> = slice["metrics"]["latency"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    v.sort_by(f64::total_cmp);
    v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

#[test]
fn issue_8_bursts_regress_p99_where_steady_load_at_the_same_rate_does_not() {
    // 400 requests/s on average either way; bursts of 32 every 80 ms into a queue of 16.
    let sb = Sandbox::with_pack(&load_pack(
        "[{metric: latency_p99, at_most: 1.0}]",
        "{arrivals: steady, rate_hz: 400, queue: 256, requests: 704}",
        // Twice the requests, so the half that is served still supports a p99.
        "{arrivals: bursts, rate_hz: 400, burst: 32, queue: 16, requests: 1408}",
    ));
    // p99 from 704 offered requests (≥ LoadGen's 662) is judged, not inconclusive.
    assert_exit(&sb.gate("pack.yaml", &[]), 0);
    let evidence = sb.json("out/evidence.json");
    let (steady, bursts) = (&evidence["slices"][0], &evidence["slices"][1]);
    assert_eq!(steady["slice"], "steady-2of4-fp32");
    assert_eq!(counter(steady, "requests"), 704.0);
    assert_eq!(counter(steady, "dropped"), 0.0, "{steady}");
    // 44 bursts of 32 into a queue of 16: at least 16 of every burst are dropped (more if a
    // stall of this shared machine keeps one burst from draining before the next), and
    // every served request but the first of its burst waited behind another.
    let (dropped, served) = (counter(bursts, "dropped"), counter(bursts, "served"));
    assert!(dropped >= 44.0 * 16.0, "{bursts}");
    assert_eq!(dropped + served, 1408.0);
    assert_eq!(counter(bursts, "max_in_system"), 16.0);
    assert!(counter(bursts, "queued") >= served - 44.0, "{bursts}");
    // The steady stream mostly finds the server idle.
    assert!(counter(steady, "queued") < 0.5 * 704.0, "{steady}");
    // The 16th request of a burst waits for 15 services: its p99 dwarfs the steady median.
    let (steady_p50, bursts_p99) = (quantile(steady, 0.5), quantile(bursts, 0.99));
    assert!(
        bursts_p99 > 3.0 * steady_p50,
        "bursts p99 {bursts_p99} vs steady p50 {steady_p50}"
    );
}

#[test]
fn issue_8_load_mistakes_are_refused_at_ingress_with_locations() {
    let sb = Sandbox::with_pack(&load_pack(
        "[{metric: latency_p99, at_most: 1.0}, {metric: effective_speedup, at_least: 1}]",
        "{arrivals: steady, rate_hz: 400, burst: 4, requests: 100}",
        "{arrivals: bursts, rate_hz: 400, burst: 4, requests: 800}",
    ));
    let err = sb.refused_at_ingress("pack.yaml");
    assert_contains(
        &err,
        // Issue 24: one helper for every sample budget, the order-statistic minimum.
        "a 95% distribution-free interval of the p99 needs at least 368 samples, and the load offers 100 requests",
    );
    assert!(err.contains("pack.yaml:7:"), "located at the guardrail: {err}");
    assert_contains(&err, "`burst` applies to `arrivals: bursts`");
    assert_contains(&err, "measures request latency, not `effective_speedup`");
}
