//! Golden baselines through the CLI: bless, gate against them, and every refusal.

use crate::support::{Sandbox, stderr, stdout, tiny_pack};
use sparsegate::validate::golden::Baseline;

const SAMPLES: &str = "{warmup: 2, min: 15, max: 20, time_budget_s: 0.05}";

fn golden_pack(sb: &Sandbox) {
    sb.write(
        "pack.yaml",
        &tiny_pack(
            "golden-test",
            SAMPLES,
            "      - {metric: latency, regress_at_most: 90%}",
        ),
    );
}

#[test]
fn bless_then_gate_compares_against_the_baseline() {
    let sb = Sandbox::new();
    golden_pack(&sb);
    let out = sb.cmd(&["bless", "pack.yaml", "-q"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("created golden/golden-test/tiny-2of4-fp32.json"),
        "{}",
        stdout(&out)
    );
    assert_eq!(sb.files_under("golden"), ["golden-test/tiny-2of4-fp32.json"]);

    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "--json", "-q"])
        .output()
        .unwrap();
    let verdict: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let g = &verdict["guardrails"][0];
    assert!(
        g["baseline"].is_number() && g["ci_low"].is_number() && g["p_value"].is_number(),
        "{g}"
    );
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "a 90% margin on equal code must not fail: {verdict}"
    );

    // Blessing again reports the change against the old baseline.
    let out = sb.cmd(&["bless", "pack.yaml", "-q"]).output().unwrap();
    assert!(
        stdout(&out).contains("updated golden/golden-test/tiny-2of4-fp32.json"),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("latency"), "{}", stdout(&out));
}

#[test]
fn missing_baseline_exits_2_and_says_bless_before_running() {
    let sb = Sandbox::new();
    golden_pack(&sb);
    let out = sb.cmd(&["gate", "pack.yaml", "--out", "out"]).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no golden baseline") && err.contains("sparsegate bless pack.yaml"),
        "{err}"
    );
    assert!(sb.files_under(".") == ["pack.yaml"], "{:?}", sb.files_under("."));
}

fn rewrite_baseline(sb: &Sandbox, edit: impl FnOnce(&mut Baseline), redigest: bool) {
    let path = sb.path().join("golden/golden-test/tiny-2of4-fp32.json");
    let mut baseline: Baseline = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut baseline);
    if redigest {
        baseline.digest = baseline.compute_digest();
    }
    std::fs::write(&path, serde_json::to_string_pretty(&baseline).unwrap()).unwrap();
}

#[test]
fn mismatched_lock_exits_2_naming_fields_unless_allowed() {
    let sb = Sandbox::new();
    golden_pack(&sb);
    assert_eq!(
        sb.cmd(&["bless", "pack.yaml", "-q"])
            .output()
            .unwrap()
            .status
            .code(),
        Some(0)
    );
    rewrite_baseline(
        &sb,
        |b| {
            b.environment.cpu_model = "Imaginary CPU 9000".into();
            b.environment.threads = 64;
        },
        true,
    );
    let out = sb.cmd(&["gate", "pack.yaml", "--out", "out"]).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cpu_model") && err.contains("Imaginary CPU 9000") && err.contains("threads"),
        "{err}"
    );
    assert!(err.contains("--allow-env-drift"), "{err}");
    assert!(!sb.path().join("out").exists());

    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "--allow-env-drift", "-q"])
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let memo = std::fs::read_to_string(sb.path().join("out/memo.md")).unwrap();
    assert!(
        memo.contains("Environment drift allowed") && memo.contains("Imaginary CPU 9000"),
        "{memo}"
    );
}

#[test]
fn hand_edited_baseline_exits_2() {
    let sb = Sandbox::new();
    golden_pack(&sb);
    assert_eq!(
        sb.cmd(&["bless", "pack.yaml", "-q"])
            .output()
            .unwrap()
            .status
            .code(),
        Some(0)
    );
    rewrite_baseline(&sb, |b| b.blessed_by = "mallory".into(), false);
    let out = sb.cmd(&["gate", "pack.yaml", "--out", "out"]).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("edited by hand"), "{err}");
}

#[test]
fn bless_one_slice_only() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        &tiny_pack(
            "subset",
            SAMPLES,
            "      - {metric: latency, regress_at_most: 90%}",
        )
        .replace("sparsity: [\"2:4\"]", "sparsity: [\"2:4\", \"dense\"]"),
    );
    let out = sb
        .cmd(&["bless", "pack.yaml", "--slice", "tiny-dense-fp32", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(sb.files_under("golden"), ["subset/tiny-dense-fp32.json"]);
    let out = sb
        .cmd(&["bless", "pack.yaml", "--slice", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("tiny-2of4-fp32"), "{}", stderr(&out));
}
