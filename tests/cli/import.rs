//! `backend: import` (issue 8): packs gating the committed real outputs of Google
//! Benchmark, hyperfine, criterion and pytest-benchmark, a planted regression, and a
//! missing entry failing at the execution stage with the entries the file has.

use crate::support::{Sandbox, assert_contains, assert_exit, example_pack, repo_file};

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
fn issue_8_unknown_import_entry_fails_at_execution_listing_the_entries() {
    let sb = Sandbox::with_pack(&import_pack(
        "hyperfine.json",
        "hyperfine",
        "busy-9999",
        "",
        "[{metric: latency, at_most: 1}]",
    ));
    let (_, memo) = sb.gate_fails_at("execution");
    assert_contains(&memo, "no benchmark `busy-9999`");
    assert_contains(&memo, "busy-2000, busy-8000");
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
