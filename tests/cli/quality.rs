//! Quality guardrails on a real model (issue 7): a digits MLP gated end to end through the
//! CLI, with accuracy and quality_delta judged on their intervals.

use crate::support::{Sandbox, assert_contains, assert_exit, example_pack, slice_named};

fn pack(accuracy_at_least: f64) -> String {
    format!(
        "
schema_version: 1
name: digits-small
owners:
  - {{name: Ada, email: ada@example.com, role: owner}}
rollback:
  trigger: accuracy below the bound
seed: 7
samples: {{warmup: 1, min: 5, max: 20, time_budget_s: 0.05}}
slices:
  - id: mlp
    workload:
      mlp: {{dataset: digits, hidden: 64, epochs: 8, equal_latency: true}}
    sparsity: [dense, \"2:4\", {{unstructured: {{sparsity: 75%}}}}]
    pruning: {{schedule: gradual, steps: 2, finetune_epochs: 1}}
    guardrails:
      - {{metric: accuracy, at_least: {accuracy_at_least}}}
      - {{metric: quality_delta, at_least: -0.15}}
"
    )
}

fn verdicts(sb: &Sandbox, metric: &str) -> Vec<(String, String)> {
    sb.json("out/verdict.json")["guardrails"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["metric"] == metric)
        .map(|g| {
            (
                g["slice"].as_str().unwrap().to_owned(),
                g["verdict"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn issue_7_digits_pack_passes_on_intervals_and_the_memo_shows_quality() {
    let sb = Sandbox::with_pack(&pack(0.8));
    assert_exit(&sb.gate("pack.yaml", &[]), 0);
    let acc = verdicts(&sb, "accuracy");
    assert_eq!(acc.len(), 3);
    assert!(acc.iter().all(|(_, v)| v == "pass"), "{acc:?}");
    assert!(verdicts(&sb, "quality_delta").iter().all(|(_, v)| v == "pass"));
    let memo = sb.read("out/memo.md");
    assert_contains(&memo, "## Model quality");
    assert!(memo.contains("Pruning schedule of `mlp-2of4-fp32`: gradual (cubic), 2 steps"));
    assert!(memo.contains("Equal latency budget"));
    let evidence = sb.json("out/evidence.json");
    let sparse = slice_named(&evidence, "mlp-u0.25-fp32");
    assert_eq!(sparse["quality"]["steps"].as_array().unwrap().len(), 2);
    assert!(
        sparse["quality"]["equal_latency"]["dense"]["hidden"]
            .as_u64()
            .unwrap()
            >= 8
    );
}

#[test]
fn issue_7_accuracy_bound_above_the_whole_interval_fails_the_gate() {
    let sb = Sandbox::new();
    // No digits MLP of this size reaches 99.9%: the whole Wilson interval lies below.
    sb.write("pack.yaml", &pack(0.999));
    assert_exit(&sb.gate("pack.yaml", &[]), 1);
    assert!(verdicts(&sb, "accuracy").iter().all(|(_, v)| v == "fail"));
}

/// Per-layer drift rows of the memo's precision table: `(slice, layer, relative error)`.
fn drift_rows(sb: &Sandbox) -> Vec<(String, String, f64)> {
    let v = sb.json("out/evidence.json");
    let mut rows = vec![];
    for s in v["slices"].as_array().unwrap() {
        for l in s["quality"]["precision"]["layers"].as_array().unwrap() {
            rows.push((
                s["slice"].as_str().unwrap().to_owned(),
                l["layer"].as_str().unwrap().to_owned(),
                l["relative_error"].as_f64().unwrap(),
            ));
        }
    }
    rows
}

#[test]
fn issue_7_precision_example_gates_and_all_int8_drifts_most_on_the_logits() {
    let sb = Sandbox::new();
    assert_exit(&sb.gate(&example_pack("digits-precision.yaml"), &[]), 0);
    // On this small MLP no policy costs a resolvable amount of accuracy: every quality
    // guardrail passes (the memo says so; the drift table is where int8 shows).
    let acc = verdicts(&sb, "accuracy");
    assert_eq!(acc.len(), 4, "{acc:?}");
    assert!(acc.iter().all(|(_, v)| v == "pass"), "{acc:?}");
    let delta = verdicts(&sb, "quality_delta");
    assert!(delta.iter().all(|(_, v)| v == "pass"), "{delta:?}");
    let rows = drift_rows(&sb);
    let at = |slice: &str, layer: &str| {
        rows.iter()
            .find(|(s, l, _)| s == slice && l == layer)
            .map(|r| r.2)
            .unwrap_or_else(|| panic!("{slice}/{layer} in {rows:?}"))
    };
    // fp32 is the reference itself; int8 on fc1 moves it the same in both int8 policies.
    assert_eq!(at("digits-dense-fp32", "fc1"), 0.0);
    assert_eq!(at("digits-dense-fp32", "fc2"), 0.0);
    assert_eq!(
        at("digits-dense-mixed", "fc1"),
        at("digits-dense-all-int8", "fc1")
    );
    assert!(at("digits-dense-mixed", "fc1") > 1e-3);
    // On the unpruned model the reference is the model's own fp32 forward: the format's own
    // share of the drift is all of it.
    for s in sb.json("out/evidence.json")["slices"].as_array().unwrap() {
        for l in s["quality"]["precision"]["layers"].as_array().unwrap() {
            assert_eq!(l["precision_relative_error"], l["relative_error"], "{l}");
        }
    }
    // One low-precision format for every operator is visibly worse on the logits than
    // keeping fc2 in fp32, and bf16 logits alone drift less than either.
    let (mixed, all, bf16) = (
        at("digits-dense-mixed", "fc2"),
        at("digits-dense-all-int8", "fc2"),
        at("digits-dense-bf16-logits", "fc2"),
    );
    assert!(all > 1.3 * mixed, "all-int8 {all} vs mixed {mixed}");
    assert!(mixed > bf16 && bf16 > 0.0, "mixed {mixed} vs bf16 {bf16}");
    let memo = sb.read("out/memo.md");
    assert_contains(
        &memo,
        "| digits-precision/digits-dense-all-int8 | int8 | fc2 | int8 |",
    );
    assert!(memo.contains("| digits-precision/digits-dense-mixed | int8, fc2 fp32 | fc2 | fp32 |"));
}
