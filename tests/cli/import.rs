//! `backend: import` (issue 8): packs gating the committed real outputs of Google
//! Benchmark, hyperfine, criterion and pytest-benchmark, a planted regression, and a
//! missing entry failing at the execution stage with the entries the file has.

use crate::support::{Sandbox, stderr, stdout};
use std::path::PathBuf;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn verdict(sb: &Sandbox) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(sb.path().join("out/verdict.json")).unwrap()).unwrap()
}

/// A pack importing `benchmark` (vs `comparator`) from a fixture in `format`.
fn import_pack(file: &str, format: &str, benchmark: &str, comparator: &str, guardrails: &str) -> String {
    let fixture = repo("tests/data/import").join(file);
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
        fixture.display()
    )
}

#[test]
fn issue_8_import_example_pack_gates_every_format() {
    let sb = Sandbox::new();
    let pack = repo("scenarios/examples/import.yaml");
    let out = sb
        .cmd(&["gate", pack.to_str().unwrap(), "--out", "out"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let v = verdict(&sb);
    let rows = v["guardrails"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "{v}");
    assert!(rows.iter().all(|g| g["verdict"] == "pass"), "{v}");
    let evidence: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sb.path().join("out/evidence.json")).unwrap()).unwrap();
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
    let sb = Sandbox::new();
    // The dense entry gated as if it were the sparse candidate: about 2x slower, not 1.3x faster.
    sb.write(
        "pack.yaml",
        &import_pack(
            "google_benchmark.json",
            "google_benchmark",
            "BM_Dense/65536",
            ", comparator: BM_Sparse/65536",
            "[{metric: effective_speedup, at_least: 1.3}]",
        ),
    );
    let out = sb.cmd(&["gate", "pack.yaml", "--out", "out"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let v = verdict(&sb);
    assert_eq!(v["first_failing_stage"], "validation");
    assert_eq!(v["guardrails"][0]["verdict"], "fail");
}

#[test]
fn issue_8_unknown_import_entry_fails_at_execution_listing_the_entries() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &import_pack(
            "hyperfine.json",
            "hyperfine",
            "busy-9999",
            "",
            "[{metric: latency, at_most: 1}]",
        ),
    );
    let out = sb.cmd(&["gate", "pack.yaml", "--out", "out"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(verdict(&sb)["first_failing_stage"], "execution");
    let memo = std::fs::read_to_string(sb.path().join("out/memo.md")).unwrap();
    assert!(memo.contains("no benchmark `busy-9999`"), "{memo}");
    assert!(memo.contains("busy-2000, busy-8000"), "{memo}");
}

#[test]
fn issue_8_import_speedup_without_comparator_is_refused_at_ingress() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &import_pack(
            "pytest_benchmark.json",
            "pytest_benchmark",
            "test_sparse",
            "",
            "[{metric: effective_speedup, at_least: 1}]",
        ),
    );
    let out = sb.cmd(&["validate", "pack.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out) + &stdout(&out);
    assert!(err.contains("needs a comparator"), "{err}");
}
