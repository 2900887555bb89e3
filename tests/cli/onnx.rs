//! Issue 21: an ONNX graph as the checkpoint (`checkpoint: {graph: model.onnx}`). The
//! fixtures are written by the real `onnx` package (tests/data/checkpoint/make_fixtures.py):
//! `tiny.onnx` is LayerNormalization → MatMul (2:4) → Relu → Gemm (transB, one planted
//! violation at [5, 16]) → MatMul through a QuantizeLinear/DequantizeLinear pair → Softmax →
//! an unknown `com.example` op.

use crate::support::*;

/// A sandbox with `tests/data/checkpoint/<fixture>` at `ckpt/<fixture>` and a pack whose
/// one 2:4 slice gates it as `graph` with the extra checkpoint keys `extra`.
fn sandbox(fixture: &str, extra: &str) -> Sandbox {
    let sb = Sandbox::new();
    let to = sb.path().join("ckpt").join(fixture);
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(repo_file(&format!("tests/data/checkpoint/{fixture}")), &to).unwrap();
    write_pack(&sb, &format!("{{graph: ckpt/{fixture}, tokens: 8{extra}}}"));
    sb
}

fn write_pack(sb: &Sandbox, checkpoint: &str) {
    sb.write(
        "pack.yaml",
        &format!(
            "
            schema_version: 1
            name: graph
            owners: [{{name: Ada, email: ada@example.com, role: owner}}]
            rollback: {{trigger: any pattern violation}}
            samples: {FAST}
            guardrails:
              - {{metric: pattern_violations, at_most: 0}}
            slices:
              - id: g
                workload:
                  checkpoint: {checkpoint}
                sparsity: [\"2:4\"]
            "
        ),
    );
}

/// `gate pack.yaml --out out`, which must exit 2 and write nothing: what it printed.
#[track_caller]
fn refused(sb: &Sandbox) -> String {
    let out = sb.gate("pack.yaml", &[]);
    assert_exit(&out, 2);
    assert!(!sb.path().join("out").exists(), "nothing is written");
    printed(&out)
}

#[test]
fn issue_21_an_onnx_graph_lists_every_op_and_times_its_gemms_on_their_initializers() {
    let sb = sandbox("tiny.onnx", "");
    let (verdict, memo) = sb.gate_fails_at("validation");
    assert_eq!(verdict["guardrails"][0]["metric"], "pattern_violations");
    // The GEMMs, named by their weights, with how each was read from the graph.
    for row in [
        "| g-2of4-fp32 | mlp.up.weight | 8x128x64 | sparse | 2:4 structured kernel (compressed values, packed indices) (ONNX MatMul `up`: MatMul, B \\[64, 128\\] read as \\[out, in\\] = \\[128, 64\\]) |",
        "| g-2of4-fp32 | mlp.down.weight | 8x64x128 | sparse | 2:4 structured kernel (compressed values, packed indices) (ONNX Gemm `down`: Gemm transB=1, B \\[64, 128\\] = \\[out, in\\]); the shipped tensor breaks 2:4 in 1 group, so it was timed after magnitude-pruning it to the pattern |",
        "(ONNX MatMul `proj`: MatMul, B \\[64, 64\\] read as \\[out, in\\] = \\[64, 64\\]; weight through QuantizeLinear `proj_q` → DequantizeLinear `proj_dq`) |",
        // Every other op, dense or unsupported, with why.
        "| g-2of4-fp32 | ln (LayerNormalization) | – | dense | LayerNormalization: not a GEMM, runs dense |",
        "| g-2of4-fp32 | act (Relu) | – | dense | Relu: not a GEMM, runs dense |",
        "| g-2of4-fp32 | proj_q (QuantizeLinear) | – | dense | QuantizeLinear: quantizes the weight `proj.weight` of MatMul `proj`; not a GEMM, runs dense |",
        "| g-2of4-fp32 | proj_dq (DequantizeLinear) | – | dense | DequantizeLinear: dequantizes the weight `proj.weight` of MatMul `proj`; not a GEMM, runs dense |",
        "| g-2of4-fp32 | softmax (Softmax) | – | dense | Softmax: not a GEMM, runs dense |",
        "| g-2of4-fp32 | fancy (com.example.FancyNorm) | – | unsupported | unknown op com.example.FancyNorm (domain `com.example`): the gate cannot tell whether it hides a GEMM; its work is not covered |",
    ] {
        assert_contains(&memo, row);
    }
    // The planted violation is located in the Gemm's weight, read in [out, in] layout.
    assert_contains(&memo, "| `mlp.down.weight` | F32 | 64×128 | ");
    assert_contains(&memo, "| 1 | [5, 16] | 2:4 |");
    assert_contains(&memo, "Artifacts read: `ckpt/tiny.onnx` (");
    let evidence = sb.json("out/evidence.json");
    let slice = slice_named(&evidence, "g-2of4-fp32");
    assert_eq!(slice["counters"]["pattern_violations"], 1.0);
    let structure = slice["structure"].as_array().unwrap();
    let names: Vec<&str> = structure.iter().map(|t| t["tensor"].as_str().unwrap()).collect();
    assert_eq!(names, ["mlp.down.weight", "mlp.up.weight", "proj.weight"]);
    // MatMul's B is stored [K, N]; read as [out, in] its 2:4 groups run along K and hold.
    assert_eq!(structure[1]["violations"], 0);
    assert_eq!(structure[1]["density"], 0.5);
    // Two of the three GEMMs' FLOPs hold 2:4 and run sparse (down has the violation).
    let coverage = slice["counters"]["sparse_coverage"].as_f64().unwrap();
    assert!(
        (coverage - (128.0 * 64.0 + 64.0 * 64.0) / (128.0 * 64.0 * 2.0 + 64.0 * 64.0)).abs() < 1e-12,
        "{coverage}"
    );
    assert!(
        slice["metrics"]["latency"]["samples"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
    );
    let nodes = slice["plan"]["graph"].as_array().unwrap();
    assert_eq!(nodes.len(), 6, "{nodes:?}");
}

#[test]
fn ops_inside_if_and_loop_subgraphs_are_listed_unsupported_with_whose_they_are() {
    // control-flow.onnx: MatMul `up` at the top level; If `branch` holds a MatMul and a Gemm,
    // Loop `repeat` an Identity and a MatMul.
    let sb = sandbox("control-flow.onnx", "");
    let out = sb.gate("pack.yaml", &[]);
    assert_exit(&out, 0);
    let memo = sb.read("out/memo.md");
    for row in [
        "| g-2of4-fp32 | mlp.up.weight | 8x128x64 | sparse | ",
        "| g-2of4-fp32 | branch (If) | – | unsupported | If: control flow; its subgraphs (else_branch: 1 node (1 GEMM), then_branch: 1 node (1 GEMM)) run on a runtime condition or trip count, so the gate lists their ops but neither verifies nor times them |",
        "| g-2of4-fp32 | branch/then_branch/then_mm (MatMul) | – | unsupported | MatMul: inside the then_branch of If `branch`; ops in control-flow subgraphs are neither verified nor timed (export with the branch or loop resolved to gate them) |",
        "| g-2of4-fp32 | branch/else_branch/else_gemm (Gemm) | – | unsupported | Gemm: inside the else_branch of If `branch`; ",
        "| g-2of4-fp32 | repeat (Loop) | – | unsupported | Loop: control flow; its subgraphs (body: 2 nodes (1 GEMM)) ",
        "| g-2of4-fp32 | repeat/body/keep_going (Identity) | – | unsupported | Identity: inside the body of Loop `repeat`; ",
        "| g-2of4-fp32 | repeat/body/body_mm (MatMul) | – | unsupported | MatMul: inside the body of Loop `repeat`; ",
    ] {
        assert_contains(&memo, row);
    }
    let evidence = sb.json("out/evidence.json");
    let slice = slice_named(&evidence, "g-2of4-fp32");
    let structure = slice["structure"].as_array().unwrap();
    let names: Vec<&str> = structure.iter().map(|t| t["tensor"].as_str().unwrap()).collect();
    assert_eq!(names, ["mlp.up.weight"], "subgraph weights are not verified");
}

#[test]
fn issue_21_malformed_onnx_graphs_exit_2_naming_the_file_and_the_node_or_tensor() {
    for (fixture, needles) in [
        (
            "bad/truncated.onnx",
            &[
                "ckpt/bad/truncated.onnx: byte ",
                "not a complete protobuf message",
                "(truncated)",
                "re-export it",
            ][..],
        ),
        (
            "bad/cycle.onnx",
            &[
                "ckpt/bad/cycle.onnx: node `",
                "is on a cycle",
                "`ln` (LayerNormalization)",
                "expected an acyclic graph",
                "must be acyclic",
            ][..],
        ),
        (
            "bad/shape-vs-bytes.onnx",
            &[
                "initializer `mlp.down.weight`: F32 × [64, 132] is 33792 bytes, but raw_data holds 32768",
                "infer_shapes",
            ][..],
        ),
        (
            "bad/declared-width.onnx",
            &[
                "node `up` (MatMul): reads `xn` declared [?, 65] (K = 65), but its weight `mlp.up.weight` is [64, 128]: expected K = 64",
            ][..],
        ),
        (
            "bad/external.onnx",
            &[
                "initializer `",
                "keeps its data in an external file",
                "save_as_external_data=False",
            ][..],
        ),
    ] {
        let sb = sandbox(fixture, "");
        let printed = refused(&sb);
        assert_contains(&printed, "pack.yaml:11:27:");
        for needle in needles {
            assert_contains(&printed, needle);
        }
    }
}

#[test]
fn issue_21_a_graph_claiming_a_million_nodes_is_refused_before_decoding_them() {
    // 10^6 empty NodeProto fields inside the graph field: 2 MB on the wire.
    let mut graph = Vec::with_capacity(2_000_000);
    for _ in 0..1_000_000 {
        graph.extend_from_slice(&[0x0a, 0x00]);
    }
    let mut bytes = vec![0x3a];
    let mut len = graph.len() as u64;
    while len >= 0x80 {
        bytes.push((len as u8) | 0x80);
        len >>= 7;
    }
    bytes.push(len as u8);
    bytes.extend_from_slice(&graph);
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.path().join("ckpt")).unwrap();
    std::fs::write(sb.path().join("ckpt/huge.onnx"), &bytes).unwrap();
    write_pack(&sb, "{graph: ckpt/huge.onnx, tokens: 8}");
    let printed = refused(&sb);
    assert_contains(
        &printed,
        "ckpt/huge.onnx: the graph: holds 1000000 nodes, expected at most 100000",
    );
    assert_contains(&printed, "instead, or split the graph");
}

#[test]
fn issue_21_a_checkpoint_names_weights_or_a_graph_and_the_graph_stays_in_the_pack_tree() {
    let sb = sandbox("tiny.onnx", ", weights: ckpt/tiny.onnx");
    assert_contains(
        &sb.refused_at_ingress("pack.yaml"),
        "names both `weights` and `graph`",
    );
    let sb = Sandbox::new();
    write_pack(&sb, "{tokens: 8}");
    assert_contains(
        &sb.refused_at_ingress("pack.yaml"),
        "names neither `weights` nor `graph`",
    );
    let sb = Sandbox::new();
    write_pack(&sb, "{graph: ../tiny.onnx, tokens: 8}");
    assert_contains(
        &sb.refused_at_ingress("pack.yaml"),
        "is outside the pack's directory",
    );
}
