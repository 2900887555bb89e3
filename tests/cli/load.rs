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

/// A simulated accelerator serving one small GEMM under a load matrix (issue 24): steady and
/// bursts at the same mean rate, into the same queue. Simulated time, so exact and fast.
fn sim_matrix_pack(guardrails: &str, queue: u32) -> String {
    format!(
        "schema_version: 1
name: simload
owners: [{{name: T, email: t@example.com, role: owner}}]
rollback: {{trigger: t}}
slices:
  - id: ffn
    backend: sim
    preset: h100
    workload: {{ops: [{{gemm: {{name: ffn, m: 32, n: 256, k: 256}}}}]}}
    sparsity: [\"2:4\"]
    precision: [fp16]
    load:
      - {{arrivals: steady, rate_hz: 1000, queue: {queue}, requests: 64}}
      - {{arrivals: bursts, rate_hz: 1000, burst: 16, queue: {queue}, requests: 64}}
    guardrails: {guardrails}
"
    )
}

#[test]
fn a_queue_that_overflows_fails_a_drop_rate_at_most_0_guardrail_and_regresses_only_under_burst() {
    // Issue 24: bursts of 16 into a queue of 4 turn 12 of every 16 away; the steady stream
    // at the same mean rate never finds the simulated accelerator busy.
    let sb = Sandbox::with_pack(&sim_matrix_pack("[{metric: drop_rate, at_most: 0}]", 4));
    let (verdict, memo) = sb.gate_fails_at("validation");
    let rows = verdict["guardrails"].as_array().unwrap();
    let row = |slice: &str| {
        rows.iter()
            .find(|g| g["slice"] == slice)
            .unwrap_or_else(|| panic!("no {slice}: {verdict}"))
    };
    assert_eq!(row("ffn-2of4-fp16-steady")["verdict"], "pass", "{verdict}");
    assert_eq!(row("ffn-2of4-fp16-steady")["value"], 0.0);
    assert_eq!(row("ffn-2of4-fp16-bursts")["verdict"], "fail", "{verdict}");
    assert_eq!(row("ffn-2of4-fp16-bursts")["value"], 0.75);
    let evidence = sb.json("out/evidence.json");
    let bursts = &evidence["slices"][1];
    assert_eq!(bursts["slice"], "ffn-2of4-fp16-bursts");
    assert_eq!(counter(bursts, "dropped"), 48.0);
    assert_eq!(counter(bursts, "drop_rate"), 0.75);
    assert_eq!(bursts["load"]["arrivals"]["kind"], "bursts", "{bursts}");
    // The memo names the traffic and the finding.
    assert_contains(&memo, "### Latency under load");
    assert_contains(
        &memo,
        "| simload/ffn-2of4-fp16-bursts | bursts | 1000 req/s | 16 | 4 | 64 | 16 | 48 | 75% |",
    );
    assert_contains(
        &memo,
        "| simload/ffn-2of4-fp16-steady | steady | 1000 req/s | – | 4 | 64 | 64 | 0 | 0% |",
    );
    assert_contains(
        &memo,
        "**simload/ffn-2of4-fp16-bursts regresses only under burst:** drop_rate fails under bursts of 16 at 1000 req/s, while ffn-2of4-fp16-steady holds under steady arrivals at the same mean rate.",
    );
    let html = sb.read("out/memo.html");
    assert_contains(&html, "regresses only under burst:</strong>");
}

#[test]
fn a_queue_that_holds_every_request_passes_drop_rate_at_most_0() {
    // Issue 24: a queue as deep as a burst drops nothing; no burst call-out either.
    let sb = Sandbox::with_pack(&sim_matrix_pack("[{metric: drop_rate, at_most: 0}]", 16));
    assert_exit(&sb.gate("pack.yaml", &[]), 0);
    let verdict = sb.json("out/verdict.json");
    assert!(
        verdict["guardrails"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["verdict"] == "pass" && g["value"] == 0.0),
        "{verdict}"
    );
    let memo = sb.read("out/memo.md");
    assert_contains(
        &memo,
        "| simload/ffn-2of4-fp16-bursts | bursts | 1000 req/s | 16 | 16 | 64 | 64 | 0 | 0% |",
    );
    assert!(!memo.contains("regresses only under burst"), "{memo}");
}

#[test]
fn cpu_bursts_that_overflow_the_queue_fail_drop_rate_where_steady_passes() {
    // Issue 24 on the CPU kernels: two hand-written slices (how a pack said it before the
    // load matrix) are matched by workload and rate, and the p99 call-out follows.
    let sb = Sandbox::with_pack(&load_pack(
        "[{metric: drop_rate, at_most: 0}]",
        "{arrivals: steady, rate_hz: 400, queue: 64, requests: 64}",
        "{arrivals: bursts, rate_hz: 400, burst: 32, queue: 16, requests: 128}",
    ));
    let (verdict, memo) = sb.gate_fails_at("validation");
    let rows = verdict["guardrails"].as_array().unwrap();
    assert_eq!(rows[0]["slice"], "steady-2of4-fp32");
    assert_eq!(rows[0]["verdict"], "pass", "{verdict}");
    assert_eq!(rows[1]["verdict"], "fail", "{verdict}");
    assert!(rows[1]["value"].as_f64().unwrap() >= 0.5, "{verdict}");
    assert_contains(
        &memo,
        "**load/bursts-2of4-fp32 regresses only under burst:** drop_rate fails",
    );
}

#[test]
fn a_command_serves_a_load_one_invocation_per_request() {
    // Issue 24: the user's command as the system under test. Bursts of 4 arrive at once
    // into a queue of 2: one in service, one waiting, two turned away, every burst.
    let sb = Sandbox::with_pack(
        "schema_version: 1
name: cmdload
owners: [{name: T, email: t@example.com, role: owner}]
rollback: {trigger: t}
samples: {warmup: 1}
slices:
  - id: sut
    backend: command
    command: {argv: [sh, -c, \":\"]}
    load: {arrivals: bursts, rate_hz: 50, burst: 4, queue: 2, requests: 16}
    guardrails:
      - {metric: drop_rate, at_most: 0.01}
      - {metric: latency, at_most: 10}
",
    );
    let (verdict, memo) = sb.gate_fails_at("validation");
    let rows = verdict["guardrails"].as_array().unwrap();
    assert_eq!(rows[0]["metric"], "drop_rate");
    assert_eq!(rows[0]["verdict"], "fail", "{verdict}");
    assert_eq!(rows[1]["verdict"], "pass", "{verdict}");
    let evidence = sb.json("out/evidence.json");
    let sut = &evidence["slices"][0];
    let (dropped, served) = (counter(sut, "dropped"), counter(sut, "served"));
    assert!(dropped >= 8.0, "{sut}");
    assert_eq!(dropped + served, 16.0);
    // One warm-up invocation, then one per served request.
    assert_eq!(counter(sut, "invocations"), served + 1.0, "{sut}");
    assert_contains(&memo, "| cmdload/sut | bursts | 50 req/s | 4 | 2 | 16 |");
}

#[test]
fn load_refusals_are_located_at_ingress() {
    // Issue 24: what `load` cannot mean is refused at validate, located, with a hint.
    let sb = Sandbox::new();
    let head = "schema_version: 1
name: bad
owners: [{name: T, email: t@example.com, role: owner}]
rollback: {trigger: t}
slices:
";
    let cases = [
        (
            "drop.yaml",
            "  - id: a
    workload: {ops: [{gemm: {name: g, m: 8, n: 64, k: 64}}]}
    sparsity: [\"2:4\"]
    guardrails: [{metric: drop_rate, at_most: 0}]
",
            "drop.yaml:9:",
            "`drop_rate` is measured under `load`, and slice `a` has none",
        ),
        (
            "twice.yaml",
            "  - id: a
    workload: {ops: [{gemm: {name: g, m: 8, n: 64, k: 64}}]}
    sparsity: [\"2:4\"]
    load: [{arrivals: bursts, rate_hz: 10, burst: 2}, {arrivals: bursts, rate_hz: 10, burst: 4}]
",
            "twice.yaml:9:",
            "`arrivals: bursts` is listed twice in slice `a`'s load matrix",
        ),
        (
            "import.yaml",
            "  - id: a
    backend: import
    import: {file: r.json, format: hyperfine, benchmark: x}
    load: {arrivals: steady, rate_hz: 10}
",
            "import.yaml:9:",
            "`load` drives a system under test, but slice `a` imports results",
        ),
        (
            "comparator.yaml",
            "  - id: a
    backend: command
    command: {argv: [sh, -c, \":\"], comparator: {argv: [sh, -c, \":\"]}}
    load: {arrivals: steady, rate_hz: 10}
",
            "comparator.yaml:8:",
            "serves its command under `load`, one invocation per request; a `comparator` is not run",
        ),
        (
            "simtail.yaml",
            "  - id: a
    backend: sim
    preset: h100
    workload: {ops: [{gemm: {name: g, m: 8, n: 64, k: 64}}]}
    sparsity: [\"2:4\"]
    precision: [fp16]
    guardrails: [{metric: latency_p99, at_most: 1}]
",
            "simtail.yaml:12:",
            "has no distribution to take a percentile of",
        ),
    ];
    for (name, slices, at, says) in cases {
        sb.write(name, &format!("{head}{slices}"));
        let err = sb.refused_at_ingress(name);
        assert_contains(&err, says);
        assert!(err.contains(at), "{name}: located at {at}: {err}");
    }
}
