//! Production-shape slices (issue 7): named models expand into their research-table GEMMs and
//! the example pack gates on the CPU kernels and on the simulator.

use crate::support::{Sandbox, assert_contains, assert_exit, example_pack, slice_named};

#[test]
fn issue_7_production_shapes_example_gates_with_the_research_shapes() {
    let sb = Sandbox::new();
    // Warn-only speedup guardrails may warn on a busy machine; nothing blocks.
    assert_exit(&sb.gate(&example_pack("production-shapes.yaml"), &[]), 0);
    let evidence = sb.json("out/evidence.json");
    let shapes = |slice: &str| -> Vec<(String, u64, u64, u64)> {
        slice_named(&evidence, slice)["plan"]["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let op = &o["op"];
                (
                    op["name"].as_str().unwrap().to_owned(),
                    op["m"].as_u64().unwrap(),
                    op["n"].as_u64().unwrap(),
                    op["k"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let bert = shapes("bert-base-cpu-2of4-fp32");
    assert_eq!(
        bert,
        [
            ("qkv".to_owned(), 128, 2304, 768),
            ("out".to_owned(), 128, 768, 768),
            ("ffn1".to_owned(), 128, 3072, 768),
            ("ffn2".to_owned(), 128, 768, 3072)
        ]
    );
    let llama = shapes("llama-2-7b-cpu-b4x4-0.5-fp32");
    assert_eq!(
        llama,
        [
            ("o".to_owned(), 16, 4096, 4096),
            ("down".to_owned(), 16, 4096, 11008)
        ]
    );
    // Full size on the simulator: every LLaMA-2-7B linear GEMM at a 4096-token prefill.
    let sim: Vec<String> = shapes("llama-2-7b-sim-2of4-fp16")
        .into_iter()
        .map(|s| s.0)
        .collect();
    assert_eq!(sim, ["qkv", "o", "gate", "up", "down"]);
    assert!(shapes("llama-2-7b-sim-2of4-fp16").iter().all(|s| s.1 == 4096));
    // Per-layer fidelity against the unpruned fp32 output: 2:4 keeps half the weights, so
    // the error is large but well below 1; the 4×4 blocks at the same density lose more; the
    // heavy-tailed LLaMA weights keep their outliers under pruning and lose less than BERT's
    // uniform ones.
    let error = |slice: &str, op: &str| -> (f64, f64) {
        let c = slice_named(&evidence, slice)["op_costs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["op"] == op)
            .unwrap();
        (
            c["fidelity"]["relative_error"].as_f64().unwrap(),
            c["fidelity"]["cosine"].as_f64().unwrap(),
        )
    };
    let (bert_24, bert_24_cos) = error("bert-base-cpu-2of4-fp32", "ffn1");
    let (bert_block, _) = error("bert-base-cpu-b4x4-0.5-fp32", "ffn1");
    let (llama_24, _) = error("llama-2-7b-cpu-2of4-fp32", "down");
    assert!(
        bert_24 > 0.1 && bert_24 < 0.9 && bert_24_cos > 0.5,
        "{bert_24} {bert_24_cos}"
    );
    assert!(bert_block > bert_24, "{bert_block} vs {bert_24}");
    assert!(llama_24 < bert_24, "{llama_24} vs {bert_24}");
    assert!(
        evidence["slices"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["slice"].as_str().unwrap().contains("-sim-"))
            .all(|s| s["op_costs"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c.get("fidelity").is_none()))
    );
    let memo = sb.read("out/memo.md");
    assert_contains(&memo, "### Per-layer numerical fidelity");
    assert_contains(&memo, "| llama-2-7b-cpu-2of4-fp32 | down | ");
    let verdict = sb.json("out/verdict.json");
    let fails: Vec<&serde_json::Value> = verdict["guardrails"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["verdict"] == "fail")
        .collect();
    assert!(fails.is_empty(), "{fails:?}");
}

/// Issue 20: a named model's `tokens` list times every selected layer at each count, on the
/// CPU and on the simulator, and the evidence and memo state each layer's break-even.
#[test]
fn issue_20_a_named_model_token_list_reports_each_layers_break_even() {
    let sb = Sandbox::with_pack(
        "schema_version: 1
name: break-even
owners: [{name: Ada, email: ada@example.com, role: owner}]
rollback: {trigger: \"2:4 slower than dense\"}
samples: {warmup: 1, min: 3, max: 5, time_budget_s: 0.05, runs: 2}
guardrails: [{metric: latency, at_most: 1000}]
slices:
  - id: bert
    sparsity: [\"2:4\"]
    workload:
      model: {name: bert-base, tokens: [64, 1, 8], layers: [ffn1]}
  - id: llama
    backend: sim
    preset: h100
    precision: [fp16]
    sparsity: [\"2:4\"]
    workload:
      model: {name: llama-2-7b, tokens: [1, 4096], layers: [down]}
",
    );
    assert!(sb.gate("pack.yaml", &[]).status.code().is_some());
    let evidence = sb.json("out/evidence.json");
    let cpu = slice_named(&evidence, "bert-2of4-fp32");
    let names: Vec<&str> = cpu["plan"]["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["op"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ffn1@1", "ffn1@8", "ffn1@64"]);
    let layers = cpu["break_even"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{layers:?}");
    assert_eq!(layers[0]["tensor"], "ffn1");
    let tokens: Vec<u64> = layers[0]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(tokens, [1, 8, 64]);
    // The simulator is exact: its points carry no spread, and the same pack gives the same
    // numbers every time.
    let sim = &slice_named(&evidence, "llama-2of4-fp16")["break_even"][0];
    assert_eq!(sim["tensor"], "down");
    for p in sim["points"].as_array().unwrap() {
        assert_eq!(p["low"], p["speedup"]);
        assert_eq!(p["high"], p["speedup"]);
    }
    let memo = sb.read("out/memo.md");
    assert_contains(&memo, "### Break-even per layer: bert-2of4-fp32");
    assert_contains(&memo, "| `ffn1` |");
    assert_contains(&memo, "### Break-even per layer: llama-2of4-fp16");
}
