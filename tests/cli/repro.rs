//! Issue 22: every failing slice in the memo carries the command that reproduces it, and
//! that command, run as printed, fails the same slice the same way.

use crate::support::{Sandbox, assert_contains, assert_exit, stderr};

/// Two cells of one slice, two runs each; the 2:4 cell fails its metadata bound (a
/// counter, so the failure cannot turn inconclusive on a busy runner, as a speedup bound
/// did in CI with two runs of a tiny GEMM), the dense cell has nothing to fail.
const PACK: &str = "schema_version: 1
name: repro
owners:
  - {name: Test Owner, email: owner@example.com, role: owner}
rollback:
  trigger: test trigger
samples: {warmup: 1, min: 8, max: 12, time_budget_s: 0.05, runs: 2}
slices:
  - id: tiny
    workload:
      ops:
        - gemm: {name: proj, m: 32, n: 64, k: 64}
    sparsity: [\"2:4\", dense]
    guardrails:
      - {metric: fallback_rate, at_most: 0}
      - {metric: metadata_overhead, at_most: 0}
";

/// The command the memo prints for `slice`, as arguments after `sparsegate`.
fn repro_command(memo: &str, slice: &str) -> Vec<String> {
    let line = memo
        .lines()
        .find(|l| l.starts_with(&format!("- `repro/{slice}`: `sparsegate gate ")))
        .unwrap_or_else(|| panic!("no repro line for {slice}:\n{memo}"));
    let command = line.split('`').nth(3).unwrap();
    assert!(!command.contains('\''), "plain words here: {command}");
    command.split_whitespace().skip(1).map(str::to_owned).collect()
}

#[test]
fn issue_22_the_memos_repro_command_fails_the_same_slice_again() {
    let sb = Sandbox::with_pack(PACK);
    assert_exit(&sb.gate("pack.yaml", &["-q", "--no-history"]), 1);
    let memo = sb.read("out/memo.md");
    assert_contains(&memo, "## Reproduce");
    assert!(
        !memo.contains("- `repro/tiny-dense-fp32`:"),
        "only failing slices: {memo}"
    );
    let args = repro_command(&memo, "tiny-2of4-fp32");
    let digest = sb.json("out/memo.json")["packs"][0]["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    for expected in [
        "pack.yaml",
        "--pack-digest",
        digest.as_str(),
        "--slice",
        "tiny-2of4-fp32",
        "--runs",
        "2",
        "--golden",
        "golden",
    ] {
        assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
    }
    let html = sb.read("out/memo.html");
    assert_contains(
        &html,
        &format!("<code class=\"repro\">sparsegate {}</code>", args.join(" ")),
    );

    let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
    argv.extend(["-q", "--no-history"]);
    assert_exit(&sb.output(&argv), 1);
    let verdict = sb.json("repro-tiny-2of4-fp32/verdict.json");
    let guardrails = verdict["guardrails"].as_array().unwrap();
    assert!(
        guardrails.iter().all(|g| g["slice"] == "tiny-2of4-fp32"),
        "{verdict}"
    );
    let metadata = guardrails
        .iter()
        .find(|g| g["metric"] == "metadata_overhead")
        .unwrap();
    assert_eq!(metadata["verdict"], "fail", "{verdict}");
    assert_eq!(metadata["value"], 1.0 / 16.0, "{verdict}");
    let evidence = sb.json("repro-tiny-2of4-fp32/evidence.json");
    assert_eq!(evidence["slices"].as_array().unwrap().len(), 1);
    assert_eq!(evidence["slices"][0]["runs"].as_array().unwrap().len(), 2);
}

#[test]
fn issue_22_a_repro_command_refuses_a_pack_that_changed() {
    let sb = Sandbox::with_pack(PACK);
    assert_exit(&sb.gate("pack.yaml", &["-q", "--no-history"]), 1);
    let args = repro_command(&sb.read("out/memo.md"), "tiny-2of4-fp32");
    sb.write(
        "pack.yaml",
        &PACK.replace(
            "metadata_overhead, at_most: 0",
            "metadata_overhead, at_most: 0.01",
        ),
    );
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = sb.output(&argv);
    assert_exit(&out, 2);
    assert_contains(&stderr(&out), "the pack changed since the gate that failed");
    let unknown = sb.output(&["gate", "pack.yaml", "--slice", "tiny", "--out", "x"]);
    assert_exit(&unknown, 2);
    assert_contains(
        &stderr(&unknown),
        "no pack has a slice `tiny` (slices: tiny-2of4-fp32, tiny-dense-fp32)",
    );
}

/// A narrowed gate whose pack's `rollback.when` names a guardrail of a slice `--slice` left
/// out: the trigger is not checked there (the full gate checks it) instead of holding an
/// all-pass reproduction inconclusive (exit 3), and the memo says why.
#[test]
fn a_slice_gate_does_not_hold_a_trigger_on_slices_it_left_out_undecided() {
    let pack = "schema_version: 1
name: focus
owners:
  - {name: Test Owner, email: owner@example.com, role: owner}
rollback:
  trigger: a layer falls back
  when: fallback-a or fallback-b
samples: {warmup: 1, min: 8, max: 12, time_budget_s: 0.05}
slices:
  - id: a
    workload: {ops: [{gemm: {name: proj, m: 16, n: 32, k: 32}}]}
    sparsity: [\"2:4\"]
    guardrails:
      - {id: fallback-a, metric: fallback_rate, at_most: 0}
  - id: b
    workload: {ops: [{gemm: {name: proj, m: 16, n: 32, k: 64}}]}
    sparsity: [\"2:4\"]
    guardrails:
      - {id: fallback-b, metric: fallback_rate, at_most: 0}
";
    let sb = Sandbox::with_pack(pack);
    let out = sb.gate("pack.yaml", &["--slice", "a-2of4-fp32", "-q", "--no-history"]);
    assert_exit(&out, 0);
    let verdict = sb.json("out/verdict.json");
    assert_eq!(verdict["brief"]["rollback"][0]["state"], "unchecked", "{verdict}");
    assert_contains(
        &sb.read("out/memo.md"),
        "fallback-b was not run here (its slices are outside --slice)",
    );
    let out = sb.output(&["gate", "pack.yaml", "--out", "full", "-q", "--no-history"]);
    assert_exit(&out, 0);
    assert_eq!(
        sb.json("full/verdict.json")["brief"]["rollback"][0]["state"],
        "not_fired"
    );
}
