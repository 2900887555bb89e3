//! `sparsegate stats compare` (issue 5): formats in, numbers and verdict out, located
//! errors with exit 2.

use crate::support::{
    Sandbox, assert_contains, assert_exit, assert_refused, assert_stdout_matches_schema, stderr, stdout,
    stdout_json, tiny_pack,
};

fn lines(values: &[f64]) -> String {
    values.iter().map(|v| format!("{v}\n")).collect()
}

/// Deterministic, mildly noisy timings around `median`.
fn timings(n: usize, median: f64, salt: u64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let u = ((i as u64 * 2_654_435_761 + salt * 97) % 1000) as f64 / 1000.0;
            median * (1.0 + 0.02 * (u - 0.5))
        })
        .collect()
}

fn compare(sb: &Sandbox, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "stats",
        "compare",
        "--baseline",
        "base.txt",
        "--candidate",
        "cand.txt",
        "--resamples",
        "2000",
    ];
    args.extend_from_slice(extra);
    sb.output(&args)
}

#[test]
fn issue_5_compare_reports_every_statistic_as_json() {
    let sb = Sandbox::new();
    sb.write_raw("base.txt", &lines(&timings(40, 1.0, 1)));
    sb.write_raw("cand.txt", &lines(&timings(40, 1.2, 2)));
    let out = compare(&sb, &["--margin", "5%", "--json"]);
    assert_exit(&out, 1);
    assert_stdout_matches_schema(&out, "stats-compare-report.schema.json");
    let v = stdout_json(&out);
    assert_eq!(v["verdict"], "fail");
    assert!(v["method"].as_str().unwrap().contains("independent samples"));
    for key in ["p_two_sided", "p_less", "p_greater", "u"] {
        assert!(v["mann_whitney"][key].is_number(), "{key}");
    }
    assert!(v["mann_whitney"]["p_greater"].as_f64().unwrap() < 1e-6);
    assert!(v["hodges_lehmann"]["shift"].as_f64().unwrap() > 0.15);
    assert!(v["welch"]["df"].is_number());
    assert!(v["ratio"]["low"].as_f64().unwrap() > 1.05);
    assert_eq!(v["ratio"]["method"], "bca");
    assert!(v["baseline"]["median"].is_number() && v["candidate"]["median"].is_number());
    assert!(v["minimum_detectable_regression"].is_number());
}

#[test]
fn issue_5_compare_passes_a_copy_and_is_inconclusive_on_too_little_data() {
    let sb = Sandbox::new();
    let base = timings(40, 1.0, 3);
    sb.write_raw("base.txt", &lines(&base));
    sb.write_raw("cand.txt", &format!("# same\n{}", lines(&base)));
    let out = compare(&sb, &[]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    for needle in [
        "Mann–Whitney",
        "Hodges–Lehmann",
        "Welch",
        "ratio of medians",
        "verdict: pass",
    ] {
        assert!(text.contains(needle), "{needle} in {text}");
    }
    sb.write_raw("base.txt", "1.0\n1.3\n");
    sb.write_raw("cand.txt", "1.1\n1.2\n");
    assert_exit(&compare(&sb, &["--margin", "1%"]), 3);
}

#[test]
fn issue_5_grouped_input_uses_the_run_aware_method() {
    let sb = Sandbox::new();
    // Runs in different speed modes: samples of a run are not independent.
    let runs = |salt: u64| -> String {
        let rs: Vec<Vec<f64>> = (0..8)
            .map(|r| {
                timings(
                    20,
                    if (r + salt).is_multiple_of(3) { 1.25 } else { 1.0 },
                    salt * 10 + r,
                )
            })
            .collect();
        serde_json::to_string(&rs).unwrap()
    };
    sb.write_raw("base.txt", &runs(0));
    sb.write_raw("cand.txt", &runs(1));
    let out = compare(&sb, &["--json"]);
    assert_stdout_matches_schema(&out, "stats-compare-report.schema.json");
    let v = stdout_json(&out);
    assert!(v["method"].as_str().unwrap().starts_with("run-aware"), "{v}");
    assert_eq!(v["baseline"]["runs"], 8);
    assert!(v["baseline"]["between_run_cv"].as_f64().unwrap() > 0.05);
    assert_eq!(v["ratio"]["method"], "percentile");
    // Different modes, same code: the run-aware rule must not call it a regression.
    assert_ne!(v["verdict"], "fail", "{v}");
}

#[test]
fn issue_5_bad_input_is_located_and_exits_2() {
    let sb = Sandbox::new();
    sb.write_raw("base.txt", "1.0\n2.0\n");
    for (content, needle) in [
        ("1.0\n\nabc\n", "cand.txt:3"),
        ("1.0\nNaN\n", "cand.txt:2"),
        ("1.0\ninf\n", "cand.txt:2"),
        ("# only a comment\n", "no samples"),
        ("", "no samples"),
        ("[1.0,\n \"x\"]", "cand.txt:2"),
    ] {
        sb.write_raw("cand.txt", content);
        let out = compare(&sb, &[]);
        assert_eq!(out.status.code(), Some(2), "{content:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{content:?}: {}", stderr(&out));
    }
    sb.write_raw("cand.txt", "[[1.0, 2.0]]");
    assert_refused(&compare(&sb, &[]), "grouped by run");
    assert_exit(&compare(&sb, &["--margin", "150%"]), 2);
}

/// Issue 5: `bless` shows the change with its interval; `--expires-in-days` writes an
/// expiry that `gate` enforces (exit 2, with a hint) once it has passed.
#[test]
fn issue_5_bless_prints_the_interval_and_gate_refuses_expired_baselines() {
    let sb = Sandbox::with_pack(&tiny_pack(
        "expiry-test",
        "{warmup: 2, min: 15, max: 20, time_budget_s: 0.05}",
        &["{metric: latency, regress_at_most: 90%}"],
    ));
    // `bless --expires-in-days DAYS` on 2026-11-28T23:00:00Z.
    let bless_expiring_in = |days: &str| {
        sb.cmd(&["bless", "pack.yaml", "-q", "--expires-in-days", days])
            .env("SOURCE_DATE_EPOCH", "1795906800")
            .output()
            .unwrap()
    };
    assert_exit(&bless_expiring_in("30"), 0);
    let text = sb.read("golden/expiry-test/tiny-2of4-fp32.json");
    assert_contains(&text, "\"expires_at\": \"2026-12-28T23:00:00Z\"");

    let out = sb.output(&["bless", "pack.yaml", "-q"]);
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("95% CI"), "{}", stdout(&out));

    assert_exit(&bless_expiring_in("1"), 0);
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q"])
        .env("SOURCE_DATE_EPOCH", "1796000000")
        .output()
        .unwrap();
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert_contains(&err, "expired at 2026-11-29T23:00:00Z");
    assert_contains(&err, "--expires-in-days");
    assert!(
        !sb.path().join("out").exists(),
        "nothing is written before the refusal"
    );
}
