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
