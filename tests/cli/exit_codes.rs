//! Exit codes 0/1/2/3 exactly as DESIGN.md §3 defines them, and the files each run leaves.

use crate::support::{
    FAST, Sandbox, assert_contains, assert_exit, assert_matches_schema, assert_stdout_matches_schema, stdout,
    stdout_json, tiny_pack,
};

/// Gates (`-q`) a tiny pack named `name` with the one guardrail `guardrail`.
fn gate_tiny(name: &str, samples: &str, guardrail: &str) -> (Sandbox, std::process::Output) {
    let sb = Sandbox::with_pack(&tiny_pack(name, samples, &[guardrail]));
    let out = sb.gate("pack.yaml", &["-q"]);
    (sb, out)
}

#[test]
fn pass_exits_0_and_writes_every_output() {
    let sb = Sandbox::with_pack(&tiny_pack(
        "passing",
        FAST,
        &[
            "{metric: fallback_rate, at_most: 0}",
            "{metric: effective_speedup, at_least: 0.01}",
        ],
    ));
    assert_exit(&sb.gate("pack.yaml", &["-q"]), 0);
    assert_eq!(
        sb.files_under("out"),
        [
            "evidence.json",
            "junit.xml",
            "memo.html",
            "memo.json",
            "memo.md",
            "run-manifest.json",
            "verdict.json"
        ]
    );
    let verdict = sb.json("out/verdict.json");
    assert_eq!(verdict["verdict"], "pass");
    assert_eq!(verdict["exit_code"], 0);
    assert_eq!(verdict["schema_version"], 1);
    assert!(verdict["first_failing_stage"].is_null());
    for key in [
        "pack",
        "slice",
        "metric",
        "verdict",
        "value",
        "baseline",
        "ci_low",
        "ci_high",
        "p_value",
        "severity",
        "bottleneck",
    ] {
        assert!(
            verdict["guardrails"][0].get(key).is_some(),
            "verdict.json guardrail lacks `{key}`"
        );
    }
    for (file, schema) in [
        ("verdict.json", "verdict.schema.json"),
        ("memo.json", "memo.schema.json"),
        ("evidence.json", "evidence.schema.json"),
    ] {
        assert_matches_schema(&sb.path().join("out").join(file), schema);
    }
    let memo = sb.read("out/memo.md");
    for needle in [
        "# SHIP: closure memo (verdict pass, exit 0)",
        "Test Owner",
        "test trigger",
        "Validation matrix",
        "effective_speedup",
    ] {
        assert!(memo.contains(needle), "memo.md lacks {needle:?}:\n{memo}");
    }
}

#[test]
fn planted_regression_exits_1_and_names_guardrail_and_stage() {
    let (sb, out) = gate_tiny("planted", FAST, "{metric: effective_speedup, at_least: 100}");
    assert_exit(&out, 1);
    let text = stdout(&out);
    assert_contains(&text, "[fail]");
    assert_contains(&text, "planted/tiny-2of4-fp32");
    assert_contains(&text, "effective_speedup at_least 100");
    assert_contains(&text, "first failing stage: validation");
    let verdict = sb.json("out/verdict.json");
    assert_eq!(verdict["first_failing_stage"], "validation");
    assert_eq!(verdict["exit_code"], 1);
}

#[test]
fn fallback_failure_is_attributed_to_lowering() {
    let sb = Sandbox::with_pack(
        &tiny_pack("fallback", FAST, &["{metric: effective_speedup, at_least: 100}"])
            .replace("k: 64}", "k: 62}"),
    );
    let out = sb.gate("pack.yaml", &["--json", "-q"]);
    assert_exit(&out, 1);
    assert_stdout_matches_schema(&out, "verdict.schema.json");
    let verdict = stdout_json(&out);
    assert_eq!(verdict["first_failing_stage"], "lowering");
    assert_eq!(verdict["guardrails"][0]["bottleneck"], "fallback");
    let memo = sb.read("out/memo.md");
    assert_contains(&memo, "dense_fallback");
    assert_contains(&memo, "not a multiple");
}

#[test]
fn a_budget_too_small_to_ever_decide_is_refused_before_running() {
    // Three samples cannot give a 95% interval for a median: the gate used to run and come
    // out inconclusive (exit 3); issue 24 refuses it up front, located, with the fix.
    let (_, out) = gate_tiny(
        "undecided",
        "{warmup: 1, min: 3, max: 3, time_budget_s: 0.01}",
        "{metric: effective_speedup, at_least: 0.01}",
    );
    assert_exit(&out, 2);
    let err = crate::support::stderr(&out);
    assert!(err.contains("pack.yaml:15:"), "located at the guardrail: {err}");
    assert!(
        err.contains("needs at least 6 samples, and the budget is 3 (samples.max 3 × samples.runs 1)"),
        "{err}"
    );
    assert!(err.contains("raise `samples.max` to 6"), "{err}");
}

#[test]
fn warn_severity_never_blocks() {
    let (_, out) = gate_tiny(
        "advisory",
        FAST,
        "{metric: effective_speedup, at_least: 100, severity: warn}",
    );
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("gate WARN"), "{}", stdout(&out));
}

#[test]
fn every_command_has_help() {
    let sb = Sandbox::new();
    for cmd in [
        vec!["--help"],
        vec!["validate", "--help"],
        vec!["run", "--help"],
        vec!["gate", "--help"],
        vec!["bless", "--help"],
    ] {
        let out = sb.output(&cmd);
        assert_eq!(out.status.code(), Some(0), "{cmd:?}");
        assert!(stdout(&out).contains("Usage"), "{cmd:?}: {}", stdout(&out));
    }
}

#[test]
fn run_writes_evidence_with_raw_samples() {
    let sb = Sandbox::with_pack(&tiny_pack(
        "evidence",
        FAST,
        &["{metric: fallback_rate, at_most: 0}"],
    ));
    let out = sb.output(&["run", "pack.yaml", "--out", "ev", "--json", "-q"]);
    assert_exit(&out, 0);
    let evidence = sb.json("ev/evidence.json");
    let slice = &evidence["slices"][0];
    let latency = slice["metrics"]["latency"]["samples"].as_array().unwrap();
    assert!(latency.len() >= 8, "{latency:?}");
    assert_eq!(
        slice["metrics"]["latency"]["runs"].as_array().unwrap().len(),
        latency.len()
    );
    assert_eq!(
        slice["comparator"]["samples"].as_array().unwrap().len(),
        latency.len()
    );
    assert_eq!(slice["plan"]["ops"][0]["path"], "sparse");
    assert!(evidence["environment"]["cpu_model"].is_string());
    assert_eq!(stdout_json(&out)[0]["slice"], "tiny-2of4-fp32");
    assert_stdout_matches_schema(&out, "run-report.schema.json");
}

#[test]
fn shipped_scenarios_validate() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut packs: Vec<String> = Vec::new();
    for dir in ["scenarios", "scenarios/examples"] {
        for e in std::fs::read_dir(format!("{root}/{dir}")).unwrap().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "yaml") {
                packs.push(p.display().to_string());
            }
        }
    }
    assert!(packs.len() >= 3, "{packs:?}");
    let sb = Sandbox::new();
    let mut args = vec!["validate", "--json"];
    args.extend(packs.iter().map(String::as_str));
    let out = sb.output(&args);
    let report = stdout_json(&out);
    // A pack that `requires` what this machine lacks (issue 25: the GPU example on a CPU
    // runner) is refused for that alone; every other shipped pack is valid.
    for r in report.as_array().unwrap() {
        if r["valid"] != true {
            let errors = r["errors"].as_array().unwrap();
            assert!(
                !errors.is_empty()
                    && errors
                        .iter()
                        .all(|e| e["pointer"].as_str().unwrap().starts_with("/requires/")),
                "{r}"
            );
        }
    }
    let refused_for_requirements = report.as_array().unwrap().iter().any(|r| r["valid"] != true);
    assert_exit(&out, if refused_for_requirements { 2 } else { 0 });
    assert_stdout_matches_schema(&out, "validate-report.schema.json");
}
