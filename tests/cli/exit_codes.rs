//! Exit codes 0/1/2/3 exactly as DESIGN.md §3 defines them, and the files each run leaves.

use crate::support::{Sandbox, stderr, stdout, tiny_pack};

const FAST: &str = "{warmup: 1, min: 8, max: 12, time_budget_s: 0.05}";

#[test]
fn pass_exits_0_and_writes_every_output() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &tiny_pack(
            "passing",
            FAST,
            "      - {metric: fallback_rate, at_most: 0}\n      - {metric: effective_speedup, at_least: 0.01}",
        ),
    );
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        sb.files_under("out"),
        [
            "evidence.json",
            "junit.xml",
            "memo.html",
            "memo.json",
            "memo.md",
            "verdict.json"
        ]
    );
    let verdict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sb.path().join("out/verdict.json")).unwrap()).unwrap();
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
    let memo = std::fs::read_to_string(sb.path().join("out/memo.md")).unwrap();
    for needle in [
        "Closure memo: PASS",
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
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &tiny_pack(
            "planted",
            FAST,
            "      - {metric: effective_speedup, at_least: 100}",
        ),
    );
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("[fail]") && text.contains("planted/tiny-2of4-fp32"),
        "{text}"
    );
    assert!(text.contains("effective_speedup at_least 100"), "{text}");
    assert!(text.contains("first failing stage: validation"), "{text}");
    let verdict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sb.path().join("out/verdict.json")).unwrap()).unwrap();
    assert_eq!(verdict["first_failing_stage"], "validation");
    assert_eq!(verdict["exit_code"], 1);
}

#[test]
fn fallback_failure_is_attributed_to_lowering() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &tiny_pack(
            "fallback",
            FAST,
            "      - {metric: effective_speedup, at_least: 100}",
        )
        .replace("k: 64}", "k: 62}"),
    );
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "--json", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let verdict: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(verdict["first_failing_stage"], "lowering");
    assert_eq!(verdict["guardrails"][0]["bottleneck"], "fallback");
    let memo = std::fs::read_to_string(sb.path().join("out/memo.md")).unwrap();
    assert!(
        memo.contains("dense_fallback") && memo.contains("not a multiple"),
        "{memo}"
    );
}

#[test]
fn too_few_samples_to_decide_exits_3() {
    let sb = Sandbox::new();
    // Three samples cannot give a 95% interval for a median: the gate must not guess.
    sb.write(
        "pack.yaml",
        &tiny_pack(
            "undecided",
            "{warmup: 1, min: 3, max: 3, time_budget_s: 0.01}",
            "      - {metric: effective_speedup, at_least: 0.01}",
        ),
    );
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("gate INCONCLUSIVE"), "{}", stdout(&out));
}

#[test]
fn warn_severity_never_blocks() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &tiny_pack(
            "advisory",
            FAST,
            "      - {metric: effective_speedup, at_least: 100, severity: warn}",
        ),
    );
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
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
        let out = sb.cmd(&cmd).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{cmd:?}");
        assert!(stdout(&out).contains("Usage"), "{cmd:?}: {}", stdout(&out));
    }
}

#[test]
fn run_writes_evidence_with_raw_samples() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &tiny_pack("evidence", FAST, "      - {metric: fallback_rate, at_most: 0}"),
    );
    let out = sb
        .cmd(&["run", "pack.yaml", "--out", "ev", "--json", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let evidence: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sb.path().join("ev/evidence.json")).unwrap()).unwrap();
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
    let summary: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(summary[0]["slice"], "tiny-2of4-fp32");
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
    let out = sb.cmd(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        report.as_array().unwrap().iter().all(|r| r["valid"] == true),
        "{report}"
    );
}

/// The file validates against the committed schema (issue 6: versioned, derived schemas).
fn assert_matches_schema(file: &std::path::Path, schema: &str) {
    let schema_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("schemas")
        .join(schema);
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path).unwrap()).unwrap();
    let instance: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{} does not match {schema}: {errors:?}",
        file.display()
    );
}
