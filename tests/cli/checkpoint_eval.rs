//! Issue 21, quality on the artifact: a checkpoint's own classifier head evaluated on the
//! pack's dataset file against the same head in a dense reference checkpoint. The fixtures
//! and the expected numbers (accuracies, quality_delta, Newcombe's paired 95% interval) come
//! from tests/data/checkpoint/make_fixtures.py, which trained, pruned and scored the head
//! with numpy.

use crate::support::*;

/// A sandbox with the classifier fixtures (and `bad/` datasets) under `ckpt/` and a pack
/// whose one slice gates `classifier.safetensors` with `eval` (YAML flow mapping) and the
/// slice guardrail `guardrail`.
fn sandbox(eval: &str, guardrail: &str) -> Sandbox {
    sandbox_of("classifier.safetensors", eval, guardrail)
}

/// [`sandbox`] with the slice gating the fixture `weights` (another dtype of the same head).
fn sandbox_of(weights: &str, eval: &str, guardrail: &str) -> Sandbox {
    let sb = Sandbox::new();
    for name in [
        "classifier.safetensors",
        "classifier-bf16.safetensors",
        "classifier-int8.safetensors",
        "classifier-dense.safetensors",
        "eval.safetensors",
        "bad/eval-no-labels.safetensors",
        "bad/eval-bad-label.safetensors",
    ] {
        let to = sb.path().join("ckpt").join(name);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(repo_file(&format!("tests/data/checkpoint/{name}")), &to).unwrap();
    }
    sb.write(
        "pack.yaml",
        &format!(
            "
            schema_version: 1
            name: ckpt-eval
            owners: [{{name: Ada, email: ada@example.com, role: owner}}]
            rollback: {{trigger: the pruned head loses accuracy}}
            samples: {FAST}
            slices:
              - id: head
                workload:
                  checkpoint:
                    weights: ckpt/{weights}
                    layers: \"classifier.fc1.*\"
                    tokens: 16
                    eval: {eval}
                sparsity: [\"2:4\"]
                guardrails:
                  - {guardrail}
            "
        ),
    );
    sb
}

const GOOD: &str = "{dataset: ckpt/eval.safetensors, head: [classifier.fc1, classifier.fc2], reference: ckpt/classifier-dense.safetensors}";

fn expected() -> serde_json::Value {
    let text = std::fs::read_to_string(repo_file("tests/data/checkpoint/expected.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["eval"].clone()
}

fn close(actual: &serde_json::Value, expected: &serde_json::Value) -> bool {
    (actual.as_f64().unwrap() - expected.as_f64().unwrap()).abs() < 1e-12
}

#[test]
fn issue_21_quality_delta_is_measured_on_the_shipped_checkpoints_own_head() {
    let sb = sandbox(GOOD, "{metric: quality_delta, at_least: -0.05}");
    assert_exit(&sb.gate("pack.yaml", &[]), 0);
    let want = expected();
    let verdict = sb.json("out/verdict.json");
    let g = &verdict["guardrails"][0];
    assert_eq!(g["metric"], "quality_delta");
    assert_eq!(g["verdict"], "pass");
    assert!(close(&g["value"], &want["quality_delta"]), "{g}");
    assert!(close(&g["ci_low"], &want["quality_delta_ci"][0]), "{g}");
    assert!(close(&g["ci_high"], &want["quality_delta_ci"][1]), "{g}");

    let evidence = sb.json("out/evidence.json");
    let slice = slice_named(&evidence, "head-2of4-fp32");
    let q = &slice["quality"];
    assert_eq!(q["dataset"], "ckpt/eval.safetensors");
    assert_eq!(q["split"], serde_json::json!([0, 0, want["samples"]]));
    assert_eq!(
        q["artifact"]["head"],
        serde_json::json!(["classifier.fc1", "classifier.fc2"])
    );
    let table = &want["table"];
    let right = |t: &str| table["both"].as_u64().unwrap() + table[t].as_u64().unwrap();
    assert_eq!(q["candidate"]["correct"], right("only_candidate"));
    assert_eq!(q["dense"]["correct"], right("only_reference"));
    assert!(close(&slice["counters"]["accuracy"], &want["accuracy"]));
    // fc1 lost half its weights: 256 of (512 + 128) head weights are zero.
    assert!(close(
        &q["candidate"]["sparsity"],
        &serde_json::json!(256.0 / 640.0)
    ));
    assert_eq!(q["dense"]["sparsity"], 0.0);
    // The dataset and the reference are artifacts: digested and bound like the weights.
    let names: Vec<&str> = slice["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "ckpt/classifier.safetensors",
            "ckpt/eval.safetensors",
            "ckpt/classifier-dense.safetensors"
        ]
    );
    let memo = sb.read("out/memo.md");
    assert_contains(
        &memo,
        "Quality of `head-2of4-fp32` on the artifact: the checkpoint's own head (`classifier.fc1`, `classifier.fc2`; `classifier.fc1.weight` on the slice's sparse kernel) on `ckpt/eval.safetensors` (400 samples), against the same head in `ckpt/classifier-dense.safetensors`",
    );
}

#[test]
fn issue_21_a_quality_bound_the_pruned_head_misses_fails_the_gate() {
    // Newcombe's interval [-0.034, 0.003] lies wholly below 0.01: the bound is missed.
    let sb = sandbox(GOOD, "{metric: quality_delta, at_least: 0.01}");
    let (verdict, _) = sb.gate_fails_at("validation");
    assert_eq!(verdict["guardrails"][0]["verdict"], "fail");
}

#[test]
fn issue_21_a_malformed_eval_dataset_or_a_missing_head_tensor_is_refused_at_its_key() {
    for (eval, at, needles) in [
        (
            GOOD.replace("ckpt/eval.safetensors", "ckpt/bad/eval-no-labels.safetensors"),
            "pack.yaml:13:25:",
            &[
                "ckpt/bad/eval-no-labels.safetensors: no tensor `y` (the labels)",
                "`y` uint8 [samples]",
            ][..],
        ),
        (
            GOOD.replace("ckpt/eval.safetensors", "ckpt/bad/eval-bad-label.safetensors"),
            "pack.yaml:13:25:",
            &["label 9 at `y`[7] is not one of the head's 4 classes (0..3)"][..],
        ),
        (
            GOOD.replace("classifier.fc2]", "classifier.out]"),
            "pack.yaml:13:71:",
            &[
                "ckpt/classifier.safetensors: head module `classifier.out`: no tensor `classifier.out.weight`",
                "each needs `<module>.weight` [out, in]",
            ][..],
        ),
        (
            GOOD.replace(
                "[classifier.fc1, classifier.fc2]",
                "[classifier.fc2, classifier.fc1]",
            ),
            "pack.yaml:13:71:",
            &["head module `classifier.fc1`: takes 16 inputs, but `classifier.fc2` gives 4"][..],
        ),
        (
            GOOD.replace("ckpt/classifier-dense.safetensors", "ckpt/eval.safetensors"),
            "pack.yaml:13:99:",
            &[
                "ckpt/eval.safetensors: head module `classifier.fc1`: no tensor",
                "the reference must hold the same head",
            ][..],
        ),
        (
            GOOD.replace("ckpt/eval.safetensors", "../eval.safetensors"),
            "pack.yaml:13:25:",
            &["outside the pack's directory"][..],
        ),
    ] {
        let sb = sandbox(&eval, "{metric: quality_delta, at_least: -0.05}");
        let printed = sb.refused_at_ingress("pack.yaml");
        assert_contains(&printed, at);
        for needle in needles {
            assert_contains(&printed, needle);
        }
        assert_exit(&sb.gate("pack.yaml", &[]), 2);
        assert!(!sb.path().join("out").exists(), "{eval}: nothing is written");
    }
}

#[test]
fn issue_21_quality_guardrails_on_a_checkpoint_without_eval_are_still_refused() {
    let sb = sandbox(GOOD, "{metric: quality_delta, at_least: -0.05}");
    let without: String = sb
        .read("pack.yaml")
        .lines()
        .filter(|l| !l.trim_start().starts_with("eval:"))
        .map(|l| format!("{l}\n"))
        .collect();
    sb.write_raw("pack.yaml", &without);
    assert_contains(
        &sb.refused_at_ingress("pack.yaml"),
        "`quality_delta` needs a model workload",
    );
}

#[test]
fn issue_21_an_eval_on_a_simulated_slice_is_refused() {
    let sb = sandbox(GOOD, "{metric: pattern_violations, at_most: 0}");
    let pack = sb.read("pack.yaml").replace(
        "    sparsity:",
        "    backend: sim\n    preset: h100\n    sparsity:",
    );
    sb.write_raw("pack.yaml", &pack);
    let printed = sb.refused_at_ingress("pack.yaml");
    assert_contains(&printed, "pack.yaml:13:9:");
    assert_contains(
        &printed,
        "a checkpoint's `eval` runs on the cpu backend, but slice `head` uses `sim`",
    );
}

#[test]
fn a_bf16_checkpoints_own_head_is_evaluated_on_its_exactly_widened_weights() {
    let sb = sandbox_of(
        "classifier-bf16.safetensors",
        GOOD,
        "{metric: quality_delta, at_least: -0.05}",
    );
    assert_exit(&sb.gate("pack.yaml", &[]), 0);
    // numpy's score of the same bf16 values widened to f32 (make_fixtures.py).
    let text = std::fs::read_to_string(repo_file("tests/data/checkpoint/expected.json")).unwrap();
    let want = serde_json::from_str::<serde_json::Value>(&text).unwrap()["eval_bf16"].clone();
    let evidence = sb.json("out/evidence.json");
    let slice = slice_named(&evidence, "head-2of4-fp32");
    assert!(
        close(&slice["counters"]["accuracy"], &want["accuracy"]),
        "{slice}"
    );
    let verdict = sb.json("out/verdict.json");
    assert!(close(&verdict["guardrails"][0]["value"], &want["quality_delta"]));
}

#[test]
fn an_int8_head_without_scales_is_refused_naming_the_tensor_with_a_hint() {
    let sb = sandbox_of(
        "classifier-int8.safetensors",
        GOOD,
        "{metric: quality_delta, at_least: -0.05}",
    );
    let out = sb.gate("pack.yaml", &[]);
    assert_exit(&out, 2);
    let err = printed(&out);
    for needle in [
        "pack.yaml:13:",
        "ckpt/classifier-int8.safetensors: head module `classifier.fc1`: `classifier.fc1.weight` is I8: quantized codes, not weights",
        "evaluate the head as exported before quantization",
    ] {
        assert_contains(&err, needle);
    }
    assert!(!sb.path().join("out").exists(), "nothing is written");
}
