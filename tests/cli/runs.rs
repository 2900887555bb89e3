//! The run protocol (issue 9): `process`-mode runs in fresh child processes of sparsegate,
//! merged into one slice's evidence; runs planned from a baseline's between-run spread.

use crate::support::{
    Sandbox, assert_contains, assert_exit, assert_refused, stderr, stdout, stdout_json, tiny_pack, u64s,
};

const SPEEDUP: &[&str] = &["{metric: effective_speedup, at_least: 0.01}"];

/// What `validate` prints refusing a tiny pack with the sample policy `samples`.
fn refused_samples(samples: &str) -> String {
    Sandbox::with_pack(&tiny_pack("refused", samples, SPEEDUP)).refused_at_ingress("pack.yaml")
}

#[test]
fn issue_9_process_runs_come_from_distinct_child_processes_and_merge() {
    let sb = Sandbox::with_pack(&tiny_pack(
        "children",
        "{warmup: 1, min: 5, max: 8, time_budget_s: 0.02, runs: 3, run_mode: process}",
        SPEEDUP,
    ));
    // What is guarded here is where the runs ran and how they merged, not the verdict: three
    // runs of a microsecond product can spread past any bound on a loaded runner (3).
    let out = sb.gate("pack.yaml", &["-q"]);
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stdout(&out));
    let slice = &sb.json("out/evidence.json")["slices"][0];
    assert_eq!(slice["run_mode"], "process");
    let runs = slice["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    let mut pids: Vec<u64> = runs
        .iter()
        .map(|r| r["pid"].as_u64().expect("a pid per run"))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 3, "every run in its own process: {runs:?}");
    // Samples carry their run ids 0, 1, 2, one id per sample, as many as the runs report.
    let latency = &slice["metrics"]["latency"];
    let ids = u64s(&latency["runs"]);
    assert_eq!(ids.len(), latency["samples"].as_array().unwrap().len());
    for (run, summary) in runs.iter().enumerate() {
        let n = ids.iter().filter(|&&id| id == run as u64).count();
        assert_eq!(summary["samples"].as_u64(), Some(n as u64));
        assert!(n >= 5, "run {run} took {n} samples");
    }
    let memo = sb.read("out/memo.md");
    assert!(
        memo.contains("| process |"),
        "the memo names the run mode:\n{memo}"
    );
}

#[test]
fn issue_9_two_or_more_runs_default_to_child_processes_one_run_stays_in_process() {
    let sb = Sandbox::new();
    let fast = "warmup: 1, min: 4, max: 6, time_budget_s: 0.01";
    sb.write(
        "two.yaml",
        &tiny_pack("two", &format!("{{{fast}, runs: 2}}"), SPEEDUP),
    );
    sb.write("one.yaml", &tiny_pack("one", &format!("{{{fast}}}"), SPEEDUP));
    for (pack, mode, pid) in [("two.yaml", "process", true), ("one.yaml", "in_process", false)] {
        let dir = format!("out-{pack}");
        assert_exit(&sb.output(&["run", pack, "--out", &dir, "-q"]), 0);
        let slice = &sb.json(&format!("{dir}/evidence.json"))["slices"][0];
        assert_eq!(slice["run_mode"], mode, "{pack}");
        assert_eq!(slice["runs"][0].get("pid").is_some(), pid, "{pack}");
    }
}

#[test]
fn issue_9_the_hidden_run_slice_command_refuses_a_bad_request_with_exit_2() {
    let sb = Sandbox::new();
    let out = sb.cmd(&["__run-slice"]).write_stdin("not json").output().unwrap();
    assert_refused(&out, "run request");
}

#[test]
fn issue_9_a_child_refuses_a_pack_changed_after_the_gate_loaded_it() {
    // The gate sends the pack's digest; a child that finds another file refuses to measure,
    // which the gate reports as an execution failure of the slice.
    let sb = Sandbox::new();
    let pack = sb.write(
        "pack.yaml",
        &tiny_pack("edited", "{min: 4, max: 6, time_budget_s: 0.01}", SPEEDUP),
    );
    assert_exit(&sb.output(&["run", "pack.yaml", "--out", "out", "-q"]), 0);
    let environment = sb.json("out/evidence.json")["environment"].clone();
    let request = serde_json::json!({
        "pack_path": pack, "pack_digest": "sha256:0000", "slice": "tiny-2of4-fp32", "run": 0,
        "environment": environment,
    });
    let out = sb
        .cmd(&["__run-slice"])
        .write_stdin(request.to_string())
        .output()
        .unwrap();
    assert_refused(&out, "changed after the gate loaded it");
}

#[test]
fn issue_9_max_runs_below_runs_is_refused_at_its_line() {
    let err = refused_samples("{runs: 4, max_runs: 2}");
    assert_contains(&err, "samples.max_runs (2) is less than samples.runs (4)");
    assert_contains(&err, "pack.yaml:7:");
}

#[test]
fn issue_5_a_sequential_slice_records_its_looks_and_its_verdict_says_which_decided() {
    let sb = Sandbox::with_pack(&tiny_pack(
        "looks",
        "{warmup: 1, min: 4, max: 6, time_budget_s: 0.01, runs: 2, max_runs: 4, sequential: true, \
             run_mode: in_process}",
        SPEEDUP,
    ));
    let out = sb.gate("pack.yaml", &["-q", "--json"]);
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let slice = &sb.json("out/evidence.json")["slices"][0];
    let looks = slice["looks"].as_array().expect("looks recorded");
    let runs = slice["runs"].as_array().unwrap().len();
    assert!((2..=4).contains(&runs), "{runs}");
    assert_eq!(
        looks.len(),
        runs - 1,
        "a look at every run from the 2nd: {looks:?}"
    );
    assert_eq!(looks.last().unwrap()["runs"].as_u64(), Some(runs as u64));
    let verdict = stdout_json(&out);
    let detail = verdict["guardrails"][0]["detail"].as_str().unwrap();
    assert_contains(detail, "sequential: read at look");
}

#[test]
fn issue_5_sequential_without_room_to_add_runs_is_refused() {
    let err = refused_samples("{runs: 3, sequential: true}");
    assert_contains(
        &err,
        "sequential sampling needs samples.max_runs above samples.runs (3)",
    );
}

/// Issue 19: the run count validate plans from a baseline reaches execution without the
/// gate rewriting the loaded pack; the evidence shows the planned runs were taken.
#[test]
fn issue_9_runs_planned_from_the_baseline_are_the_runs_taken() {
    let sb = Sandbox::with_pack(&tiny_pack(
        "planned",
        "{warmup: 1, min: 4, max: 6, time_budget_s: 0.01, runs: 2, max_runs: 4, run_mode: in_process}",
        &["{metric: latency, regress_at_most: 0.1%}"],
    ));
    assert_exit(&sb.output(&["bless", "pack.yaml", "-q"]), 0);
    let out = sb.gate("pack.yaml", &[]);
    assert!(
        matches!(out.status.code(), Some(0 | 1 | 3)),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    // A 0.1% margin needs more runs than any budget: the plan takes the cap.
    assert_contains(
        &stderr(&out),
        "planned/tiny-2of4-fp32: 4 runs planned from the baseline's between-run spread",
    );
    let slice = &sb.json("out/evidence.json")["slices"][0];
    assert_eq!(slice["runs"].as_array().unwrap().len(), 4);
}
