//! Run history and `trend` (issue 8, part 2): gate runs are recorded, listed by `history`,
//! and `trend` finds a planted step change at the right run through E-divisive means, and
//! none in a flat history. Issue 22: each of these runs against SQLite and, as its
//! `…_postgres` twin, against the PostgreSQL server `SPARSEGATE_TEST_POSTGRES` names (a
//! database of its own per test; SKIPPED without the variable).

use crate::pg_scratch::ScratchDb;
use crate::support::{
    Sandbox, assert_exit, assert_refused, assert_stdout_matches_schema, stderr, stdout_json,
};

/// Where a test's history lives: `h/history.db` in the sandbox, or a fresh database.
struct Store {
    location: String,
    db: Option<ScratchDb>,
}

impl Store {
    fn sqlite() -> Store {
        Store {
            location: "h/history.db".to_owned(),
            db: None,
        }
    }

    fn postgres(test: &str) -> Option<Store> {
        let db = ScratchDb::create(test)?;
        Some(Store {
            location: db.url.clone(),
            db: Some(db),
        })
    }
}

/// Each test body once per backend: `fn sqlite_name / postgres_name (store) { … }`.
macro_rules! on_both_backends {
    ($($(#[$doc:meta])* fn $sqlite:ident / $postgres:ident ($store:ident) $body:block)*) => {$(
        $(#[$doc])*
        #[test]
        fn $sqlite() {
            let $store = &Store::sqlite();
            $body
        }
        $(#[$doc])*
        #[test]
        fn $postgres() {
            let Some(store) = Store::postgres(stringify!($postgres)) else { return };
            let $store = &store;
            $body
        }
    )*};
}

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

/// `gate pack.yaml --out out -q --history H`, the pack's layer `k` inputs deep.
fn gate(sb: &Sandbox, h: &Store, k: u32) -> std::process::Output {
    sb.write("pack.yaml", &sim_pack(k));
    sb.gate("pack.yaml", &["-q", "--history", &h.location])
}

/// `trend --metric METRIC --slice ffn-2of4-fp16 --history H EXTRA...`.
fn trend(sb: &Sandbox, h: &Store, metric: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "trend",
        "--metric",
        metric,
        "--slice",
        "ffn-2of4-fp16",
        "--history",
        &h.location,
    ];
    args.extend_from_slice(extra);
    sb.output(&args)
}

fn trend_json(sb: &Sandbox, h: &Store, metric: &str) -> serde_json::Value {
    let out = trend(sb, h, metric, &["--json"]);
    assert_exit(&out, 0);
    assert_stdout_matches_schema(&out, "trend-report.schema.json");
    stdout_json(&out)
}

/// `history --history H --json EXTRA...`: the recorded runs, newest first, as the
/// committed schema describes them.
#[track_caller]
fn history_json(sb: &Sandbox, h: &Store, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["history", "--history", &h.location, "--json"];
    args.extend_from_slice(extra);
    sb.output_report(&args, "history-report.schema.json")
}

on_both_backends! {
    fn issue_8_trend_finds_a_planted_step_at_the_right_run
        / trend_finds_a_planted_step_at_the_right_run_postgres (h) {
        let sb = Sandbox::new();
        // Runs 1..=8 on the fast layer, runs 9..=14 on one with twice the reduction depth.
        let ks: Vec<u32> = [vec![768; 8], vec![1536; 6]].concat();
        for &k in &ks {
            assert_exit(&gate(&sb, h, k), 0);
        }
        let trend = trend_json(&sb, h, "latency");
        let points = trend["points"].as_array().unwrap();
        assert_eq!(points.len(), ks.len());
        let changes = trend["change_points"].as_array().unwrap();
        assert_eq!(changes.len(), 1, "{trend}");
        assert_eq!(changes[0]["index"], 8, "{trend}");
        assert_eq!(changes[0]["run_id"], points[8]["run_id"]);
        assert_eq!(changes[0]["recorded_at"], points[8]["recorded_at"]);
        assert!(changes[0]["relative_change"].as_f64().unwrap() > 0.5, "{trend}");
        assert!(changes[0]["p_value"].as_f64().unwrap() <= 0.05);
        // The last run's memo charts the history with the change point.
        let html = sb.read("out/memo.html");
        assert!(html.contains("<h2>Run history</h2>"), "no trend chart");
        assert!(html.contains("change points found by E-divisive means"));
        let memo = sb.json("out/memo.json");
        assert_eq!(memo["trends"][0]["change_points"], serde_json::json!([8]));

        // `history` lists every run, newest first, with the pack and its verdict.
        let runs = history_json(&sb, h, &["--limit", "3"]);
        let runs = runs.as_array().unwrap();
        assert_eq!(runs.len(), 3);
        assert_eq!(runs[0]["id"], points[13]["run_id"]);
        assert_eq!(runs[0]["verdict"], "pass");
        assert_eq!(runs[0]["outputs"], "written");
        assert!(
            runs[0]["packs"][0]
                .as_str()
                .unwrap()
                .starts_with("trend-demo@sha256:")
        );
    }

    fn issue_8_trend_finds_no_change_in_a_flat_history
        / trend_finds_no_change_in_a_flat_history_postgres (h) {
        let sb = Sandbox::new();
        for _ in 0..10 {
            assert_exit(&gate(&sb, h, 768), 0);
        }
        let series = trend_json(&sb, h, "latency");
        assert_eq!(series["points"].as_array().unwrap().len(), 10);
        assert_eq!(series["change_points"], serde_json::json!([]), "{series}");
        let html = sb.read("out/memo.html");
        assert!(html.contains("recorded runs (this run last); no change point"));
        // Counters are series too.
        assert_eq!(
            trend_json(&sb, h, "fallback_rate")["points"]
                .as_array()
                .unwrap()
                .len(),
            10
        );
        // An unknown metric is refused, naming what was recorded.
        let out = trend(&sb, h, "nonsense", &[]);
        assert_refused(&out, "no recorded values of `nonsense`");
        assert_refused(&out, "latency");
    }

    /// Gate processes (shards of one CI run) writing one history at once: every run lands.
    fn issue_8_concurrent_gates_share_one_history
        / concurrent_gates_share_one_history_postgres (h) {
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
                        &h.location,
                    ];
                    assert_exit(&sb.output(&args), 0);
                });
            }
        });
        let runs = history_json(&sb, h, &[]);
        let mut ids: Vec<i64> = runs
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect();
        ids.dedup();
        assert_eq!(ids.len(), 4, "{runs}");
    }

    /// Issue 22: the latest run against a rolling window of the runs before it flags a jump
    /// in the last run alone, which no change point can name yet.
    fn trend_compares_the_latest_run_with_a_rolling_window
        / trend_compares_the_latest_run_with_a_rolling_window_postgres (h) {
        let sb = Sandbox::new();
        for k in [768, 768, 768, 768, 768, 768, 1536] {
            assert_exit(&gate(&sb, h, k), 0);
        }
        let out = trend(&sb, h, "latency", &["--window", "5", "--json"]);
        assert_exit(&out, 0);
        assert_stdout_matches_schema(&out, "trend-report.schema.json");
        let report = stdout_json(&out);
        let points = report["points"].as_array().unwrap();
        let window = &report["window"];
        assert_eq!(window["requested"], 5, "{report}");
        assert_eq!(window["runs"], 5, "{report}");
        assert_eq!(window["first_run_id"], points[1]["run_id"]);
        assert_eq!(window["latest_run_id"], points[6]["run_id"]);
        assert_eq!(window["outlier"], true, "{report}");
        assert!(window["relative_change"].as_f64().unwrap() > 0.5, "{report}");
        assert_eq!(report["change_points"], serde_json::json!([]), "{report}");
        // An absolute guardrail has no baseline to compare with.
        assert_eq!(report["baseline"], serde_json::Value::Null);
        let text = String::from_utf8(trend(&sb, h, "latency", &["--window", "5"]).stdout).unwrap();
        assert!(text.contains("outside the window"), "{text}");
        // The run before the jump sits inside its window.
        assert_exit(&gate(&sb, h, 768), 0);
        let report = trend_json(&sb, h, "latency");
        assert_eq!(report["window"]["runs"], 7, "{report}");
        assert_eq!(report["window"]["outlier"], false, "{report}");
    }

    /// `merge` records its decision too, marked as a merge.
    fn issue_8_merge_records_its_decision
        / merge_records_its_decision_postgres (h) {
        let sb = Sandbox::with_pack(&sim_pack(768));
        // One shard of one: a second, empty shard would carry a different `threads` lock
        // (an empty shard records the default thread count), which merge refuses.
        let out = sb.output(&["run", "pack.yaml", "--shard", "1/1", "--out", "shard1", "-q"]);
        assert_exit(&out, 0);
        let out = sb.output(&["merge", "shard1", "--out", "merged", "--history", &h.location]);
        assert_exit(&out, 0);
        let runs = history_json(&sb, h, &["--pack", "trend-demo"]);
        assert_eq!(runs[0]["command"], "merge", "{runs}");
        assert_eq!(runs.as_array().unwrap().len(), 1);
    }
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

/// Issue 22: a `postgresql://` URL in `SPARSEGATE_HISTORY` selects PostgreSQL for `gate`,
/// `history` and `trend` alike; no SQLite file appears.
#[test]
fn a_postgres_url_in_the_environment_selects_postgres() {
    let Some(h) = Store::postgres("a_postgres_url_in_the_environment_selects_postgres") else {
        return;
    };
    let url = h.location.replacen("postgres://", "postgresql://", 1);
    let sb = Sandbox::with_pack(&sim_pack(768));
    let with_env = |args: &[&str]| {
        let out = sb.cmd(args).env("SPARSEGATE_HISTORY", &url).output().unwrap();
        assert_exit(&out, 0);
        out
    };
    with_env(&["gate", "pack.yaml", "--out", "out", "-q"]);
    with_env(&["gate", "pack.yaml", "--out", "out", "-q"]);
    let runs = stdout_json(&with_env(&["history", "--json"]));
    assert_eq!(runs.as_array().unwrap().len(), 2, "{runs}");
    let trend = stdout_json(&with_env(&[
        "trend",
        "--metric",
        "latency",
        "--slice",
        "ffn-2of4-fp16",
        "--json",
    ]));
    assert_eq!(trend["points"].as_array().unwrap().len(), 2);
    assert!(!sb.path().join(".sparsegate").exists());
    assert!(!sb.path().join("postgresql:").exists());
}

#[test]
fn issue_8_history_commands_reject_bad_input_with_exit_2() {
    let sb = Sandbox::new();
    let out = sb.output(&["history", "--history", "missing.db"]);
    assert_refused(&out, "no run history at missing.db");
    assert_exit(&gate(&sb, &Store::sqlite(), 768), 0);
    sb.write_raw("junk.db", "not a database at all, just text");
    assert_exit(&sb.output(&["history", "--history", "junk.db"]), 2);
}

/// Issue 22: a PostgreSQL history that cannot be had is bad input (exit 2) for `history`
/// and `trend`, and a warning for `gate` (the verdict stands), with the URL's password in
/// no message: an unreachable server (port 1 refuses) and a malformed URL.
#[test]
fn an_unreachable_or_malformed_postgres_url_exits_2_without_the_password() {
    let sb = Sandbox::with_pack(&sim_pack(768));
    let unreachable = "postgres://ada:hunter2@127.0.0.1:1/history?connect_timeout=5";
    for args in [
        vec!["history", "--history", unreachable],
        vec![
            "trend",
            "--metric",
            "latency",
            "--slice",
            "ffn-2of4-fp16",
            "--history",
            unreachable,
        ],
    ] {
        let out = sb.output(&args);
        assert_refused(&out, "run history postgres://ada:***@127.0.0.1:1/history");
        assert_refused(&out, "cannot connect");
        assert_refused(&out, "check that the server runs");
        assert!(!stderr(&out).contains("hunter2"), "{}", stderr(&out));
    }
    let out = sb.gate("pack.yaml", &["-q", "--history", unreachable]);
    assert_exit(&out, 0);
    assert!(
        stderr(&out).contains("not recorded in the history"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("hunter2"), "{}", stderr(&out));

    let out = sb.output(&[
        "history",
        "--history",
        "postgresql://ada:hunter2@db:notaport/history",
    ]);
    assert_refused(&out, "is not a valid PostgreSQL URL");
    assert_refused(&out, "postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE");
    assert!(!stderr(&out).contains("hunter2"), "{}", stderr(&out));
}

/// Issue 22: a password the server refuses is exit 2 with a hint about the credentials,
/// and neither the wrong password nor the right one appears anywhere.
#[test]
fn a_refused_postgres_login_exits_2_without_the_password_postgres() {
    let Some(h) = Store::postgres("a_refused_postgres_login_exits_2_without_the_password_postgres") else {
        return;
    };
    let (userinfo, _) = h.location["postgres://".len()..].split_once('@').unwrap();
    let (_, password) = userinfo.split_once(':').expect("the test URL carries a password");
    let wrong = h.location.replace(password, "wrong-password");
    let out = Sandbox::new().output(&["history", "--history", &wrong]);
    assert_refused(&out, "password authentication failed");
    assert_refused(&out, "check the user and password");
    assert!(!stderr(&out).contains(password) && !stderr(&out).contains("wrong-password"));
}

/// Issue 22: a `gate` on PostgreSQL connects once. The session-drift estimate read before the
/// run and the record written after it share one connection (it had been two), as the
/// server counts sessions on the test's own database (`pg_stat_database.sessions`, which
/// PostgreSQL 14 added; `pg_stat_force_next_flush`, 15).
#[test]
fn a_gate_connects_to_postgres_once_postgres() {
    let Some(h) = Store::postgres("a_gate_connects_to_postgres_once_postgres") else {
        return;
    };
    let db = h.db.as_ref().expect("a PostgreSQL store");
    let mut watcher = db.client();
    // Sessions so far, this watcher's own included (its pending statistics flushed first).
    let mut sessions = || -> i64 {
        watcher
            .batch_execute("SELECT pg_stat_force_next_flush()")
            .unwrap();
        watcher
            .query_one(
                "SELECT sessions FROM pg_stat_database WHERE datname = current_database()",
                &[],
            )
            .unwrap()
            .get(0)
    };
    let sb = Sandbox::new();
    // The first gate creates the schema; count the second, which reads a history with a run in it.
    assert_exit(&gate(&sb, &h, 768), 0);
    let before = sessions();
    assert_exit(&gate(&sb, &h, 768), 0);
    // A backend counts its session when it ends, a moment after the gate's process exits.
    let start = std::time::Instant::now();
    let mut after = sessions();
    while after - before < 1 && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        after = sessions();
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    after = sessions();
    assert_eq!(after - before, 1, "the gate opened {} sessions", after - before);
    assert_eq!(history_json(&sb, &h, &[]).as_array().unwrap().len(), 2);
}
