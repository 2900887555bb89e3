//! `sparsegate stats compare` (issue 5): formats in, numbers and verdict out, located
//! errors with exit 2.

use crate::support::{Sandbox, stderr, stdout};
use serde_json::Value;

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
    sb.cmd(&args).output().unwrap()
}

#[test]
fn issue_5_compare_reports_every_statistic_as_json() {
    let sb = Sandbox::new();
    std::fs::write(sb.path().join("base.txt"), lines(&timings(40, 1.0, 1))).unwrap();
    std::fs::write(sb.path().join("cand.txt"), lines(&timings(40, 1.2, 2))).unwrap();
    let out = compare(&sb, &["--margin", "5%", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
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
    std::fs::write(sb.path().join("base.txt"), lines(&base)).unwrap();
    std::fs::write(sb.path().join("cand.txt"), format!("# same\n{}", lines(&base))).unwrap();
    let out = compare(&sb, &[]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
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
    std::fs::write(sb.path().join("base.txt"), "1.0\n1.3\n").unwrap();
    std::fs::write(sb.path().join("cand.txt"), "1.1\n1.2\n").unwrap();
    let out = compare(&sb, &["--margin", "1%"]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
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
    std::fs::write(sb.path().join("base.txt"), runs(0)).unwrap();
    std::fs::write(sb.path().join("cand.txt"), runs(1)).unwrap();
    let out = compare(&sb, &["--json"]);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
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
    std::fs::write(sb.path().join("base.txt"), "1.0\n2.0\n").unwrap();
    for (content, needle) in [
        ("1.0\n\nabc\n", "cand.txt:3"),
        ("1.0\nNaN\n", "cand.txt:2"),
        ("1.0\ninf\n", "cand.txt:2"),
        ("# only a comment\n", "no samples"),
        ("", "no samples"),
        ("[1.0,\n \"x\"]", "cand.txt:2"),
    ] {
        std::fs::write(sb.path().join("cand.txt"), content).unwrap();
        let out = compare(&sb, &[]);
        assert_eq!(out.status.code(), Some(2), "{content:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{content:?}: {}", stderr(&out));
    }
    std::fs::write(sb.path().join("cand.txt"), "[[1.0, 2.0]]").unwrap();
    let out = compare(&sb, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("grouped by run"), "{}", stderr(&out));
    let out = compare(&sb, &["--margin", "150%"]);
    assert_eq!(out.status.code(), Some(2));
}

/// Issue 5: `bless` shows the change with its interval; `--expires-in-days` writes an
/// expiry that `gate` enforces (exit 2, with a hint) once it has passed.
#[test]
fn issue_5_bless_prints_the_interval_and_gate_refuses_expired_baselines() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &crate::support::tiny_pack(
            "expiry-test",
            "{warmup: 2, min: 15, max: 20, time_budget_s: 0.05}",
            "      - {metric: latency, regress_at_most: 90%}",
        ),
    );
    let out = sb
        .cmd(&["bless", "pack.yaml", "-q", "--expires-in-days", "30"])
        .env("SOURCE_DATE_EPOCH", "1795906800")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(sb.path().join("golden/expiry-test/tiny-2of4-fp32.json")).unwrap();
    assert!(
        text.contains("\"expires_at\": \"2026-12-28T23:00:00Z\""),
        "{text}"
    );

    let out = sb.cmd(&["bless", "pack.yaml", "-q"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("95% CI"), "{}", stdout(&out));

    let out = sb
        .cmd(&["bless", "pack.yaml", "-q", "--expires-in-days", "1"])
        .env("SOURCE_DATE_EPOCH", "1795906800")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q"])
        .env("SOURCE_DATE_EPOCH", "1796000000")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}{}", stdout(&out), stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("expired at 2026-11-29T23:00:00Z") && err.contains("--expires-in-days"),
        "{err}"
    );
    assert!(
        !sb.path().join("out").exists(),
        "nothing is written before the refusal"
    );
}
