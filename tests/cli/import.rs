//! `backend: import` (issue 8): packs gating the committed real outputs of Google
//! Benchmark, hyperfine, criterion and pytest-benchmark, a planted regression, and a
//! missing entry refused with the entries the file has; GPU traces (issue 21): PyTorch
//! profiler and Nsight Systems exports, malformed and oversized ones. A results file that
//! cannot be read is bad input like the pack: exit 2, the file named, nothing written.

use crate::support::{Sandbox, assert_contains, assert_exit, example_pack, printed, repo_file};

/// `gate pack.yaml --out out`, which must refuse the pack's results file before anything
/// runs (exit 2) and write nothing: what it printed.
#[track_caller]
fn refused_before_running(sb: &Sandbox) -> String {
    let out = sb.gate("pack.yaml", &[]);
    assert_exit(&out, 2);
    assert!(!sb.path().join("out").exists(), "nothing is written");
    let text = printed(&out);
    assert_contains(&text, "pack.yaml: slice `");
    text
}

/// A pack importing `benchmark` (vs `comparator`) from a fixture in `format`.
fn import_pack(file: &str, format: &str, benchmark: &str, comparator: &str, guardrails: &str) -> String {
    let fixture = repo_file(&format!("tests/data/import/{file}"));
    format!(
        "schema_version: 1
name: imp
owners: [{{name: T, email: t@example.com, role: owner}}]
rollback: {{trigger: t}}
slices:
  - id: imported
    backend: import
    import: {{file: '{}', format: {format}, benchmark: '{benchmark}'{comparator}}}
    guardrails: {guardrails}
",
        fixture
    )
}

#[test]
fn issue_8_import_example_pack_gates_every_format() {
    let sb = Sandbox::new();
    assert_exit(&sb.gate(&example_pack("import.yaml"), &[]), 0);
    let v = sb.json("out/verdict.json");
    let rows = v["guardrails"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "{v}");
    assert!(rows.iter().all(|g| g["verdict"] == "pass"), "{v}");
    let evidence = sb.json("out/evidence.json");
    let slices = evidence["slices"].as_array().unwrap();
    let count = |i: usize| {
        slices[i]["metrics"]["latency"]["samples"]
            .as_array()
            .unwrap()
            .len()
    };
    // 12 Google Benchmark repetitions, 20 hyperfine runs, 10 criterion samples, 12 rounds.
    assert_eq!([count(0), count(1), count(2), count(3)], [12, 20, 10, 12]);
    // hyperfine timed one process per sample: each is its own run.
    assert_eq!(slices[1]["runs"].as_array().unwrap().len(), 20);
    assert_eq!(slices[0]["runs"].as_array().unwrap().len(), 1);
}

#[test]
fn issue_8_imported_regression_fails_the_gate() {
    // The dense entry gated as if it were the sparse candidate: about 2x slower, not 1.3x faster.
    let sb = Sandbox::with_pack(&import_pack(
        "google_benchmark.json",
        "google_benchmark",
        "BM_Dense/65536",
        ", comparator: BM_Sparse/65536",
        "[{metric: effective_speedup, at_least: 1.3}]",
    ));
    let (v, _) = sb.gate_fails_at("validation");
    assert_eq!(v["guardrails"][0]["verdict"], "fail");
}

#[test]
fn issue_8_unknown_import_entry_is_refused_listing_the_entries() {
    let sb = Sandbox::with_pack(&import_pack(
        "hyperfine.json",
        "hyperfine",
        "busy-9999",
        "",
        "[{metric: latency, at_most: 1}]",
    ));
    let printed = refused_before_running(&sb);
    assert_contains(&printed, "hyperfine `");
    assert_contains(&printed, "no benchmark `busy-9999`");
    assert_contains(&printed, "busy-2000, busy-8000");
}

#[test]
fn issue_8_import_speedup_without_comparator_is_refused_at_ingress() {
    let sb = Sandbox::with_pack(&import_pack(
        "pytest_benchmark.json",
        "pytest_benchmark",
        "test_sparse",
        "",
        "[{metric: effective_speedup, at_least: 1}]",
    ));
    let err = sb.refused_at_ingress("pack.yaml");
    assert_contains(&err, "needs a comparator");
}

/// A pack importing the GPU trace `file` (a path) in `format`, with `extra` keys.
fn trace_pack(file: &str, format: &str, extra: &str, guardrails: &str) -> String {
    format!(
        "schema_version: 1
name: trace
owners: [{{name: T, email: t@example.com, role: owner}}]
rollback: {{trigger: t}}
slices:
  - id: traced
    backend: import
    import: {{file: '{file}', format: {format}{extra}}}
    guardrails: {guardrails}
"
    )
}

#[test]
fn issue_21_gpu_trace_example_proves_layer0_ran_sparse() {
    let sb = Sandbox::new();
    assert_exit(&sb.gate(&example_pack("gpu-trace.yaml"), &[]), 0);
    let evidence = sb.json("out/evidence.json");
    let nsys = &evidence["slices"][1];
    let rate = nsys["counters"]["fallback_rate"].as_f64().unwrap();
    assert!((rate - 400.0 / 560.0).abs() < 1e-9, "{rate}");
    assert_eq!(nsys["counters"]["sparse_kernels"], 4.0);
    let ranges = nsys["gpu_kernels"]["ranges"].as_array().unwrap();
    assert_eq!(ranges.len(), 2, "{nsys}");
    assert_eq!(ranges[1]["range"], "layer1");
    assert_eq!(ranges[1]["kernels"]["dense"], 4);
    assert_eq!(nsys["metrics"]["latency"]["samples"].as_array().unwrap().len(), 8);
}

#[test]
fn issue_21_a_layer_that_fell_back_fails_the_gate() {
    let file = repo_file("tests/data/import/torch_trace.json");
    let sb = Sandbox::with_pack(&trace_pack(
        &file,
        "torch_profiler",
        "",
        "[{metric: fallback_rate, at_most: 0.0}]",
    ));
    // A fallback is the lowering's failure (DESIGN.md): the dense path ran.
    let (v, _) = sb.gate_fails_at("lowering");
    assert_eq!(v["guardrails"][0]["verdict"], "fail");
    assert!((v["guardrails"][0]["value"].as_f64().unwrap() - 400.0 / 560.0).abs() < 1e-9);
}

#[test]
fn issue_21_bad_kernel_pattern_is_refused_at_its_location() {
    let sb = Sandbox::with_pack(&trace_pack(
        "t.json",
        "torch_profiler",
        ", kernels: {sparse: ['sp(']}, benchmark: x",
        "[]",
    ));
    let err = sb.refused_at_ingress("pack.yaml");
    assert_contains(&err, "pack.yaml:8:");
    assert_contains(&err, "not a valid regular expression");
    assert_contains(&err, "`benchmark` does not apply to `format: torch_profiler`");
}

#[test]
fn issue_21_fallback_rate_over_a_benchmark_format_is_refused() {
    let sb = Sandbox::with_pack(&import_pack(
        "hyperfine.json",
        "hyperfine",
        "busy-2000",
        "",
        "[{metric: fallback_rate, at_most: 0.0}]",
    ));
    let err = sb.refused_at_ingress("pack.yaml");
    assert_contains(&err, "does not measure `fallback_rate`");
}

#[test]
fn issue_21_malformed_traces_are_refused_with_exit_2_saying_where_and_why() {
    for (file, format, needle) in [
        ("torch_truncated.json", "torch_profiler", "ends early"),
        ("torch_truncated.json", "torch_profiler", "at line "),
        ("torch_negative_dur.json", "torch_profiler", "negative `dur`"),
        (
            "nsys_no_kernels_table.sqlite",
            "nsys_sqlite",
            "no `CUPTI_ACTIVITY_KIND_KERNEL` table",
        ),
        ("hyperfine.json", "nsys_sqlite", "not a readable SQLite database"),
    ] {
        let path = repo_file(&format!("tests/data/import/{file}"));
        let sb = Sandbox::with_pack(&trace_pack(&path, format, "", "[{metric: latency, at_most: 1}]"));
        let printed = refused_before_running(&sb);
        assert_contains(&printed, file);
        assert_contains(&printed, needle);
    }
}

#[test]
fn issue_21_ten_million_event_json_trace_is_refused_quickly() {
    use std::io::Write;
    let sb = Sandbox::new();
    let path = sb.path().join("big.json");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    f.write_all(b"{\"traceEvents\": [{}").unwrap();
    for _ in 1..10_000_000 {
        f.write_all(b",{}").unwrap();
    }
    f.write_all(b"]}").unwrap();
    drop(f);
    sb.write(
        "pack.yaml",
        &trace_pack(
            "big.json",
            "torch_profiler",
            "",
            "[{metric: latency, at_most: 1}]",
        ),
    );
    let start = std::time::Instant::now();
    assert_contains(&refused_before_running(&sb), "more than 2000000 trace events");
    assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
    // Over the size cap: refused from its length, nothing read.
    let huge = std::fs::File::create(sb.path().join("huge.json")).unwrap();
    huge.set_len(300 << 20).unwrap();
    sb.write(
        "pack.yaml",
        &trace_pack(
            "huge.json",
            "torch_profiler",
            "",
            "[{metric: latency, at_most: 1}]",
        ),
    );
    assert_contains(&refused_before_running(&sb), "over the 268435456-byte limit");
}

#[test]
fn issue_21_sqlite_export_over_the_event_cap_is_refused_by_count() {
    let sb = Sandbox::new();
    let path = sb.path().join("big.sqlite");
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute_batch(
        "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
         CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, correlationId INTEGER,
             demangledName INTEGER, shortName INTEGER);
         WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 2000000)
         INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT i, i + 1, i, 1, 1 FROM n;",
    )
    .unwrap();
    drop(db);
    sb.write(
        "pack.yaml",
        &trace_pack("big.sqlite", "nsys_sqlite", "", "[{metric: latency, at_most: 1}]"),
    );
    assert_contains(&refused_before_running(&sb), "more than 2000000 trace events");
}
