//! Run history and `trend` (issue 8, part 2): gate runs are recorded in SQLite, listed by
//! `history`, and `trend` finds a planted step change at the right run through E-divisive
//! means, and none in a flat history.

use crate::support::{
    Sandbox, assert_exit, assert_refused, assert_stdout_matches_schema, stderr, stdout_json,
};

/// A one-slice simulated pack (deterministic and fast) whose FFN layer has `k` inputs: a
/// larger `k` is a slower layer, which plants a step in the latency series.
fn sim_pack(k: u32) -> String {
    format!(
        "
        schema_version: 1
        name: trend-demo
        owners:
          - {{name: Ada Lovelace, email: ada@example.com, role: owner}}
        rollback:
          trigger: the layer got slower
        samples: {{warmup: 0, min: 5, max: 5, time_budget_s: 1}}
        slices:
          - id: ffn
            backend: sim
            preset: h100
            precision: [fp16]
            sparsity: ['2:4']
            workload:
              ops:
                - gemm: {{name: ffn1, m: 4096, n: 3072, k: {k}}}
            guardrails:
              - {{metric: latency, at_most: 1}}
        "
    )
}

/// `gate pack.yaml --out out -q --history h/history.db`, the pack's layer `k` inputs deep.
fn gate(sb: &Sandbox, k: u32) -> std::process::Output {
    sb.write("pack.yaml", &sim_pack(k));
    sb.gate("pack.yaml", &["-q", "--history", "h/history.db"])
}

/// `trend --metric METRIC --slice ffn-2of4-fp16 --history h/history.db EXTRA...`.
fn trend(sb: &Sandbox, metric: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "trend",
        "--metric",
        metric,
        "--slice",
        "ffn-2of4-fp16",
        "--history",
        "h/history.db",
    ];
    args.extend_from_slice(extra);
    sb.output(&args)
}

fn trend_json(sb: &Sandbox, metric: &str) -> serde_json::Value {
    let out = trend(sb, metric, &["--json"]);
    assert_exit(&out, 0);
    assert_stdout_matches_schema(&out, "trend-report.schema.json");
    stdout_json(&out)
}

/// `history --history h/history.db --json EXTRA...`: the recorded runs, newest first, as
/// the committed schema describes them.
#[track_caller]
fn history_json(sb: &Sandbox, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["history", "--history", "h/history.db", "--json"];
    args.extend_from_slice(extra);
    sb.output_report(&args, "history-report.schema.json")
}

#[test]
fn issue_8_trend_finds_a_planted_step_at_the_right_run() {
    let sb = Sandbox::new();
    // Runs 1..=8 on the fast layer, runs 9..=14 on one with twice the reduction depth.
    let ks: Vec<u32> = [vec![768; 8], vec![1536; 6]].concat();
    for &k in &ks {
        assert_exit(&gate(&sb, k), 0);
    }
    let trend = trend_json(&sb, "latency");
    let points = trend["points"].as_array().unwrap();
    assert_eq!(points.len(), ks.len());
    let changes = trend["change_points"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{trend}");
    assert_eq!(changes[0]["index"], 8, "{trend}");
    assert_eq!(changes[0]["run_id"], points[8]["run_id"]);
    assert!(changes[0]["relative_change"].as_f64().unwrap() > 0.5, "{trend}");
    assert!(changes[0]["p_value"].as_f64().unwrap() <= 0.05);
    // The last run's memo charts the history with the change point.
    let html = sb.read("out/memo.html");
    assert!(html.contains("<h2>Run history</h2>"), "no trend chart");
    assert!(html.contains("change points found by E-divisive means"));
    let memo = sb.json("out/memo.json");
    assert_eq!(memo["trends"][0]["change_points"], serde_json::json!([8]));

    // `history` lists every run, newest first, with the pack and its verdict.
    let runs = history_json(&sb, &["--limit", "3"]);
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[0]["id"], points[13]["run_id"]);
    assert_eq!(runs[0]["verdict"], "pass");
    assert!(
        runs[0]["packs"][0]
            .as_str()
            .unwrap()
            .starts_with("trend-demo@sha256:")
    );
}

#[test]
fn issue_8_trend_finds_no_change_in_a_flat_history() {
    let sb = Sandbox::new();
    for _ in 0..10 {
        assert_exit(&gate(&sb, 768), 0);
    }
    let trend = trend_json(&sb, "latency");
    assert_eq!(trend["points"].as_array().unwrap().len(), 10);
    assert_eq!(trend["change_points"], serde_json::json!([]), "{trend}");
    let html = sb.read("out/memo.html");
    assert!(html.contains("recorded runs (this run last); no change point"));
    // Counters are series too.
    assert_eq!(
        trend_json(&sb, "fallback_rate")["points"]
            .as_array()
            .unwrap()
            .len(),
        10
    );
}

#[test]
fn issue_8_a_history_write_failure_warns_and_keeps_the_verdict() {
    let sb = Sandbox::new();
    // A directory where the database file should be: SQLite cannot open it.
    std::fs::create_dir_all(sb.path().join("h/history.db")).unwrap();
    sb.write(
        "pack.yaml",
        &sim_pack(768).replace("at_most: 1}", "at_most: 1e-9}"),
    );
    let out = sb.gate("pack.yaml", &["-q", "--history", "h/history.db"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the failing guardrail still fails the gate"
    );
    assert!(
        stderr(&out).contains("not recorded in the history"),
        "{}",
        stderr(&out)
    );
    assert!(sb.path().join("out/verdict.json").is_file());
}

#[test]
fn issue_8_history_location_env_default_and_opt_out() {
    let sb = Sandbox::with_pack(&sim_pack(768));
    let run = |args: &[&str], env: Option<&str>| {
        let mut all = vec!["gate", "pack.yaml", "--out", "out", "-q"];
        all.extend_from_slice(args);
        let mut cmd = sb.cmd(&all);
        cmd.env_remove("SPARSEGATE_HISTORY");
        if let Some(path) = env {
            cmd.env("SPARSEGATE_HISTORY", path);
        }
        assert_eq!(cmd.output().unwrap().status.code(), Some(0));
    };
    run(&["--no-history"], None);
    assert!(!sb.path().join(".sparsegate").exists());
    run(&[], Some("env.db"));
    assert!(sb.path().join("env.db").is_file());
    assert!(!sb.path().join(".sparsegate").exists());
    // Default: .sparsegate/history.db in the current directory (the sandbox is no git repo).
    run(&[], None);
    assert!(sb.path().join(".sparsegate/history.db").is_file());
}

#[test]
fn issue_8_history_commands_reject_bad_input_with_exit_2() {
    let sb = Sandbox::new();
    let out = sb.output(&["history", "--history", "missing.db"]);
    assert_refused(&out, "no run history at missing.db");
    assert_exit(&gate(&sb, 768), 0);
    let out = trend(&sb, "nonsense", &[]);
    assert_refused(&out, "no recorded values of `nonsense`");
    assert_refused(&out, "latency");
    sb.write_raw("junk.db", "not a database at all, just text");
    assert_exit(&sb.output(&["history", "--history", "junk.db"]), 2);
}

/// Gate processes writing one history at once: every run lands and the file stays intact.
#[test]
fn issue_8_concurrent_gates_share_one_history() {
    let sb = Sandbox::with_pack(&sim_pack(768));
    std::thread::scope(|scope| {
        for i in 0..4 {
            let sb = &sb;
            scope.spawn(move || {
                let out_dir = format!("out{i}");
                let args = [
                    "gate",
                    "pack.yaml",
                    "--out",
                    &out_dir,
                    "-q",
                    "--history",
                    "h/history.db",
                ];
                assert_exit(&sb.output(&args), 0);
            });
        }
    });
    assert_eq!(history_json(&sb, &[]).as_array().unwrap().len(), 4);
}

/// `merge` records its decision too, marked as a merge.
#[test]
fn issue_8_merge_records_its_decision() {
    let sb = Sandbox::with_pack(&sim_pack(768));
    // One shard of one: a second, empty shard would carry a different `threads` lock
    // (an empty shard records the default thread count), which merge refuses.
    let out = sb.output(&["run", "pack.yaml", "--shard", "1/1", "--out", "shard1", "-q"]);
    assert_exit(&out, 0);
    let out = sb.output(&["merge", "shard1", "--out", "merged", "--history", "h/history.db"]);
    assert_exit(&out, 0);
    let runs = history_json(&sb, &["--pack", "trend-demo"]);
    assert_eq!(runs[0]["command"], "merge", "{runs}");
    assert_eq!(runs.as_array().unwrap().len(), 1);
}
