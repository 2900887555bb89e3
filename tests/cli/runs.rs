//! The run protocol (issue 9): `process`-mode runs in fresh child processes of sparsegate,
//! merged into one slice's evidence; runs planned from a baseline's between-run spread.

use crate::support::{Sandbox, stderr, stdout, tiny_pack};

const SPEEDUP: &str = "      - {metric: effective_speedup, at_least: 0.01}";

fn evidence(sb: &Sandbox, dir: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(sb.path().join(dir).join("evidence.json")).unwrap())
        .unwrap()
}

#[test]
fn issue_9_process_runs_come_from_distinct_child_processes_and_merge() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &tiny_pack(
            "children",
            "{warmup: 1, min: 5, max: 8, time_budget_s: 0.02, runs: 3, run_mode: process}",
            SPEEDUP,
        ),
    );
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let slice = &evidence(&sb, "out")["slices"][0];
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
    let ids: Vec<u64> = latency["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), latency["samples"].as_array().unwrap().len());
    for (run, summary) in runs.iter().enumerate() {
        let n = ids.iter().filter(|&&id| id == run as u64).count();
        assert_eq!(summary["samples"].as_u64(), Some(n as u64));
        assert!(n >= 5, "run {run} took {n} samples");
    }
    let memo = std::fs::read_to_string(sb.path().join("out/memo.md")).unwrap();
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
        let out = sb.cmd(&["run", pack, "--out", &dir, "-q"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
        let slice = &evidence(&sb, &dir)["slices"][0];
        assert_eq!(slice["run_mode"], mode, "{pack}");
        assert_eq!(slice["runs"][0].get("pid").is_some(), pid, "{pack}");
    }
}

#[test]
fn issue_9_the_hidden_run_slice_command_refuses_a_bad_request_with_exit_2() {
    let sb = Sandbox::new();
    let out = sb.cmd(&["__run-slice"]).write_stdin("not json").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("run request"), "{}", stderr(&out));
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
    let out = sb
        .cmd(&["run", "pack.yaml", "--out", "out", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let environment = evidence(&sb, "out")["environment"].clone();
    let request = serde_json::json!({
        "pack_path": pack, "pack_digest": "sha256:0000", "slice": "tiny-2of4-fp32", "run": 0,
        "environment": environment,
    });
    let out = sb
        .cmd(&["__run-slice"])
        .write_stdin(request.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("changed after the gate loaded it"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn issue_9_max_runs_below_runs_is_refused_at_its_line() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &tiny_pack("capped", "{runs: 4, max_runs: 2}", SPEEDUP),
    );
    let out = sb.cmd(&["validate", "pack.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out) + &stdout(&out);
    assert!(
        err.contains("samples.max_runs (2) is less than samples.runs (4)"),
        "{err}"
    );
    assert!(err.contains("pack.yaml:7:"), "{err}");
}

#[test]
fn issue_5_a_sequential_slice_records_its_looks_and_its_verdict_says_which_decided() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &tiny_pack(
            "looks",
            "{warmup: 1, min: 4, max: 6, time_budget_s: 0.01, runs: 2, max_runs: 4, sequential: true, \
             run_mode: in_process}",
            SPEEDUP,
        ),
    );
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q", "--json"])
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let slice = &evidence(&sb, "out")["slices"][0];
    let looks = slice["looks"].as_array().expect("looks recorded");
    let runs = slice["runs"].as_array().unwrap().len();
    assert!((2..=4).contains(&runs), "{runs}");
    assert_eq!(
        looks.len(),
        runs - 1,
        "a look at every run from the 2nd: {looks:?}"
    );
    assert_eq!(looks.last().unwrap()["runs"].as_u64(), Some(runs as u64));
    let verdict: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let detail = verdict["guardrails"][0]["detail"].as_str().unwrap();
    assert!(detail.contains("sequential: read at look"), "{detail}");
}

#[test]
fn issue_5_sequential_without_room_to_add_runs_is_refused() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &tiny_pack("seq", "{runs: 3, sequential: true}", SPEEDUP),
    );
    let out = sb.cmd(&["validate", "pack.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out) + &stdout(&out);
    assert!(
        err.contains("sequential sampling needs samples.max_runs above samples.runs (3)"),
        "{err}"
    );
}
