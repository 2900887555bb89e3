//! Progress while a long slice runs (issue 24: a slice that ran 25 s printed nothing until
//! it ended). Without a terminal, a line every few seconds names the runs done and the
//! samples taken; `--quiet` silences it. The interval is shortened for the test with
//! `SPARSEGATE_PROGRESS_EVERY_S` (5 s by default).

use crate::support::{Sandbox, assert_exit, stderr};

/// One slice of three runs of about a second each.
const PACK: &str = "
schema_version: 1
name: long
owners:
  - {name: Ada, email: ada@example.com, role: owner}
rollback:
  trigger: speedup below 0.01x
samples: {warmup: 1, min: 8, max: 100000, time_budget_s: 1, runs: 3}
slices:
  - id: slow
    workload:
      ops:
        - gemm: {name: proj, m: 64, n: 512, k: 512}
    sparsity: [\"2:4\"]
    guardrails:
      - {metric: fallback_rate, at_most: 0}
";

fn run_long_slice(extra: &[&str]) -> String {
    let sb = Sandbox::with_pack(PACK);
    let mut args = vec!["run", "pack.yaml", "--out", "out"];
    args.extend_from_slice(extra);
    let out = sb
        .cmd(&args)
        .env("SPARSEGATE_PROGRESS_EVERY_S", "0.8")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    stderr(&out)
}

#[test]
fn a_long_slice_reports_runs_and_samples_while_it_runs() {
    let err = run_long_slice(&[]);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("runs done")).collect();
    assert!(!lines.is_empty(), "no progress line while the slice ran:\n{err}");
    for line in &lines {
        assert!(
            line.contains("long/slow-2of4-fp32: ")
                && line.contains("/3 runs done")
                && line.contains(" samples, "),
            "a progress line names the slice, its runs and samples: {line:?}\n{err}"
        );
    }
    // The slice's own line still ends the record, naming it again after the progress lines.
    assert!(
        err.contains("long/slow-2of4-fp32: ") && err.contains(" samples in "),
        "{err}"
    );
}

#[test]
fn quiet_silences_the_progress_of_a_long_slice() {
    let err = run_long_slice(&["--quiet"]);
    assert!(!err.contains("runs done") && !err.contains("[1/1]"), "{err}");
}

/// Run `pack` with a progress line for every event, and return stderr.
fn progress_of(pack: &str) -> String {
    let sb = Sandbox::with_pack(pack);
    let out = sb
        .cmd(&["run", "pack.yaml", "--out", "out"])
        .env("SPARSEGATE_PROGRESS_EVERY_S", "0")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    stderr(&out)
}

#[test]
fn a_model_slice_reports_its_training_pruning_timing_and_width_search() {
    // Issue 24: a model slice trains, prunes, times and searches before it ends.
    let err = progress_of(
        "
schema_version: 1
name: model
owners: [{name: Ada, email: ada@example.com, role: owner}]
rollback: {trigger: t}
samples: {warmup: 1, min: 5, max: 20, time_budget_s: 0.05, runs: 2}
slices:
  - id: mlp
    workload:
      mlp: {dataset: digits, hidden: 32, epochs: 3, batch: 32, learning_rate: 0.05, equal_latency: true}
    sparsity: [\"2:4\"]
    pruning: {schedule: gradual, steps: 2, finetune_epochs: 1, scope: per_row}
    guardrails:
      - {metric: accuracy, at_least: 0.1}
",
    );
    for expected in [
        "model/mlp-2of4-fp32: training the dense model (32 hidden), epoch 1/3, ",
        "model/mlp-2of4-fp32: training the dense model (32 hidden), epoch 3/3, ",
        "model/mlp-2of4-fp32: pruning, step 2/2 done, ",
        "model/mlp-2of4-fp32: 2/2 runs done, ",
        "model/mlp-2of4-fp32: searching the equal-latency dense width, 1 timed, ",
    ] {
        assert!(err.contains(expected), "no {expected:?} in:\n{err}");
    }
}

#[test]
fn a_load_slice_reports_the_requests_served_while_it_serves() {
    // Issue 24: 1000 requests at 2000/s take half a second; the loop says where it stands
    // at least every 250 ms and once at the end.
    let err = progress_of(
        "
schema_version: 1
name: load
owners: [{name: Ada, email: ada@example.com, role: owner}]
rollback: {trigger: t}
lock: {threads: 1}
slices:
  - id: serve
    workload: {ops: [{gemm: {name: ffn, m: 8, n: 128, k: 128}}]}
    sparsity: [\"2:4\"]
    load: {arrivals: steady, rate_hz: 2000, queue: 64, requests: 1000}
    guardrails:
      - {metric: fallback_rate, at_most: 0}
",
    );
    let lines: Vec<&str> = err.lines().filter(|l| l.contains(" requests (")).collect();
    assert!(lines.len() >= 2, "fewer than two serving lines:\n{err}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("load/serve-2of4-fp32: ") && !l.contains("1000/1000")),
        "no line while it served:\n{err}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.contains("1000/1000 requests (") && l.contains(" served, ")),
        "the last line counts every request:\n{err}"
    );
}
