//! Graphs built here with prost's encoder, so each malformation is exactly the one named.

use super::*;
use prost::Message;

fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: name.into(),
        op_type: op.into(),
        ..Default::default()
    }
}

fn f32_init(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 1,
        raw_data: values
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>()
            .into(),
        ..Default::default()
    }
}

fn value(name: &str, dims: &[Option<i64>]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TensorTypeProto {
                elem_type: 1,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| Dimension {
                            dim_value: *d,
                            dim_param: d.is_none().then(|| "tokens".to_owned()),
                        })
                        .collect(),
                }),
            }),
        }),
    }
}

fn model(graph: GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: 9,
        opset_import: vec![],
        graph: Some(graph),
    }
    .encode_to_vec()
}

/// x [tokens, 4] → MatMul(W [4, 2]) → LayerNormalization → y.
fn small() -> GraphProto {
    GraphProto {
        node: vec![
            node("mm", "MatMul", &["x", "W"], &["h"]),
            node("ln", "LayerNormalization", &["h", "gamma"], &["y"]),
        ],
        name: "g".into(),
        initializer: vec![
            // [K = 4, N = 2], row-major: column 0 is 1..4, column 1 is 5..8.
            f32_init("W", &[4, 2], &[1.0, 5.0, 2.0, 6.0, 3.0, 7.0, 4.0, 8.0]),
            f32_init("gamma", &[2], &[1.0, 1.0]),
        ],
        input: vec![value("x", &[None, Some(4)])],
        output: vec![value("y", &[None, Some(2)])],
        value_info: vec![],
    }
}

fn error(bytes: &[u8]) -> String {
    decode(bytes.to_vec(), "m.onnx").expect_err("refused").to_string()
}

#[test]
fn a_matmul_weight_is_read_as_out_by_in_and_other_ops_are_listed() {
    let g = decode(model(small()), "m.onnx").unwrap();
    assert_eq!(g.weights.len(), 1);
    let w = &g.weights[0];
    assert_eq!((w.name.as_str(), w.shape.as_slice()), ("W", &[2u64, 4][..]));
    let values: Vec<f32> = w
        .held
        .as_ref()
        .unwrap()
        .0
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(values, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    assert!(matches!(&g.nodes[0].kind, NodeKind::Gemm(gemm) if gemm.weight == "W"));
    assert_eq!(g.nodes[1].kind, NodeKind::Other);
}

#[test]
fn a_gemm_with_trans_b_keeps_its_layout_and_typed_fields_are_read() {
    let mut g = small();
    g.node[0] = node("g", "Gemm", &["x", "W"], &["h"]);
    g.node[0].attribute.push(AttributeProto {
        name: "transB".into(),
        i: 1,
        ..Default::default()
    });
    g.initializer[0] = TensorProto {
        name: "W".into(),
        dims: vec![2, 4],
        data_type: 1,
        float_data: vec![1.0, 0.0, 2.0, 0.0, 0.0, 3.0, 0.0, 4.0],
        ..Default::default()
    };
    let read = decode(model(g), "m.onnx").unwrap();
    assert_eq!(read.weights[0].shape, [2, 4]);
    assert_eq!(read.weights[0].held.as_ref().unwrap().0[4..8], 0f32.to_le_bytes());
}

#[test]
fn a_weight_through_quantize_dequantize_is_the_gemms_weight_and_the_pair_is_placed() {
    let mut g = small();
    g.node
        .insert(0, node("q", "QuantizeLinear", &["W", "s"], &["Wq"]));
    g.node
        .insert(1, node("dq", "DequantizeLinear", &["Wq", "s"], &["Wd"]));
    g.node[2] = node("mm", "MatMul", &["x", "Wd"], &["h"]);
    g.initializer.push(f32_init("s", &[], &[0.1]));
    let read = decode(model(g), "m.onnx").unwrap();
    let NodeKind::Gemm(gemm) = &read.nodes[2].kind else {
        panic!("{:?}", read.nodes[2]);
    };
    assert_eq!(gemm.weight, "W");
    assert_eq!(
        gemm.quantized,
        ["weight through QuantizeLinear `q` → DequantizeLinear `dq`"]
    );
    assert_eq!(
        read.nodes[0].kind,
        NodeKind::Quantize("the weight `W` of MatMul `mm`".into())
    );
}

#[test]
fn a_product_of_two_activations_is_no_weight_gemm() {
    let mut g = small();
    g.node[0] = node("scores", "MatMul", &["x", "x"], &["h"]);
    let read = decode(model(g), "m.onnx").unwrap();
    assert!(read.weights.is_empty());
    assert_eq!(read.nodes[0].kind, NodeKind::ActivationGemm);
}

#[test]
fn a_conv_is_its_im2col_gemm() {
    let mut g = small();
    g.node[0] = node("conv", "Conv", &["img", "K"], &["h"]);
    g.input.push(value("img", &[Some(1), Some(2), Some(5), Some(5)]));
    g.value_info
        .push(value("h", &[Some(1), Some(3), Some(3), Some(3)]));
    g.initializer.push(f32_init("K", &[3, 2, 3, 3], &[0.5; 54]));
    let read = decode(model(g), "m.onnx").unwrap();
    let k = read.weights.iter().find(|t| t.name == "K").unwrap();
    assert_eq!(k.shape, [3, 18]);
    let Some((_, gemm)) = read.gemm_of("K") else {
        panic!()
    };
    assert_eq!(gemm.rows_per_token, 9);
}

#[test]
fn a_cycle_is_refused_naming_its_nodes() {
    let mut g = small();
    g.node = vec![
        node("a", "Add", &["x", "c"], &["b"]),
        node("b", "Relu", &["b"], &["c"]),
    ];
    let msg = error(&model(g));
    assert!(msg.contains("is on a cycle"), "{msg}");
    assert!(msg.contains("`a` (Add)") && msg.contains("`b` (Relu)"), "{msg}");
}

#[test]
fn a_value_read_but_never_defined_is_refused() {
    let mut g = small();
    g.node[1].input[1] = "nowhere".into();
    let msg = error(&model(g));
    assert!(
        msg.contains("node `ln` (LayerNormalization): reads `nowhere`"),
        "{msg}"
    );
}

#[test]
fn raw_data_disagreeing_with_the_declared_shape_is_refused() {
    let mut g = small();
    g.initializer[0].dims = vec![4, 3];
    let msg = error(&model(g));
    assert!(
        msg.contains("initializer `W`: F32 × [4, 3] is 48 bytes, but raw_data holds 32"),
        "{msg}"
    );
}

#[test]
fn a_declared_activation_width_other_than_k_is_refused() {
    let mut g = small();
    g.input[0] = value("x", &[None, Some(5)]);
    let msg = error(&model(g));
    assert!(
        msg.contains("node `mm` (MatMul): reads `x` declared [?, 5] (K = 5)"),
        "{msg}"
    );
    assert!(msg.contains("expected K = 4"), "{msg}");
}

#[test]
fn external_data_is_refused() {
    let mut g = small();
    g.initializer[0].data_location = 1;
    assert!(error(&model(g)).contains("keeps its data in an external file"));
}

#[test]
fn a_million_claimed_nodes_are_refused_before_any_is_decoded() {
    // A graph of 10^6 empty nodes is 2 MB on the wire (key + zero length each).
    let mut graph = Vec::with_capacity(2_000_000);
    for _ in 0..1_000_000 {
        graph.extend_from_slice(&[0x0a, 0x00]);
    }
    let mut bytes = vec![0x3a];
    prost::encoding::encode_varint(graph.len() as u64, &mut bytes);
    bytes.extend_from_slice(&graph);
    let msg = error(&bytes);
    assert!(
        msg.contains("the graph: holds 1000000 nodes, expected at most 100000"),
        "{msg}"
    );
}

#[test]
fn a_truncated_message_is_refused_with_the_byte_where_it_stops() {
    let bytes = model(small());
    let msg = error(&bytes[..bytes.len() - 7]);
    assert!(msg.contains("not a complete protobuf message"), "{msg}");
    assert!(msg.starts_with("m.onnx: byte "), "{msg}");
}

/// A graph holding one `If` whose `then_branch` is `inner`.
fn if_holding(inner: GraphProto) -> GraphProto {
    let mut g = small();
    g.input.push(value("c", &[]));
    let mut branch = node("branch", "If", &["c"], &["b"]);
    branch.attribute.push(AttributeProto {
        name: "then_branch".into(),
        g: Some(Box::new(inner)),
        ..Default::default()
    });
    g.node.push(branch);
    g
}

#[test]
fn subgraph_nodes_are_listed_after_their_if_and_never_become_weights() {
    // The real `onnx` package's If and Loop (tests/data/checkpoint/make_fixtures.py).
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/checkpoint/control-flow.onnx");
    let g = read(&path, "control-flow.onnx").unwrap();
    let rows: Vec<(&str, &str)> = g
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.op_type.as_str()))
        .collect();
    assert_eq!(
        rows,
        [
            ("ln", "LayerNormalization"),
            ("up", "MatMul"),
            ("branch", "If"),
            // In the file's attribute order (`onnx.helper` sorts them by name).
            ("branch/else_branch/else_gemm", "Gemm"),
            ("branch/then_branch/then_mm", "MatMul"),
            ("repeat", "Loop"),
            ("repeat/body/keep_going", "Identity"),
            ("repeat/body/body_mm", "MatMul"),
        ]
    );
    assert_eq!(
        g.nodes[2].kind,
        NodeKind::ControlFlow("else_branch: 1 node (1 GEMM), then_branch: 1 node (1 GEMM)".into())
    );
    assert_eq!(
        g.nodes[7].kind,
        NodeKind::InSubgraph("the body of Loop `repeat`".into())
    );
    // Only the top-level MatMul's weight is run; the subgraphs' GEMMs (one on the outer
    // initializer mlp.down.weight) are not.
    let weights: Vec<&str> = g.weights.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(weights, ["mlp.up.weight"]);
}

#[test]
fn a_subgraph_inside_a_subgraph_is_listed_and_counted_in_its_owners_summary() {
    let mut loop_node = node("inner_loop", "Loop", &[], &[]);
    loop_node.attribute.push(AttributeProto {
        name: "body".into(),
        g: Some(Box::new(GraphProto {
            node: vec![node("deep", "MatMul", &["x", "W"], &["z"])],
            ..Default::default()
        })),
        ..Default::default()
    });
    let g = decode(
        model(if_holding(GraphProto {
            node: vec![loop_node],
            ..Default::default()
        })),
        "m.onnx",
    )
    .unwrap();
    let names: Vec<&str> = g.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(
        names[2..],
        [
            "branch",
            "branch/then_branch/inner_loop",
            "branch/then_branch/inner_loop/body/deep"
        ]
    );
    assert_eq!(
        g.nodes[2].kind,
        NodeKind::ControlFlow("then_branch: 1 node (1 GEMM)".into())
    );
    assert_eq!(
        g.nodes[3].kind,
        NodeKind::InSubgraph("the then_branch of If `branch`; holds body: 1 node (1 GEMM)".into())
    );
}

#[test]
fn nodes_hidden_in_a_subgraph_count_against_the_node_limit_before_decoding() {
    // 10^5 + 1 empty nodes inside an If's branch; the top level holds three more.
    let inner = GraphProto {
        node: vec![NodeProto::default(); 100_001],
        ..Default::default()
    };
    let msg = error(&model(if_holding(inner)));
    assert!(
        msg.contains("the graph: holds 100004 nodes, expected at most 100000"),
        "{msg}"
    );
}

#[test]
fn subgraphs_nested_past_the_depth_limit_are_refused_by_the_wire_scan() {
    let mut g = GraphProto::default();
    for _ in 0..=wire::MAX_SUBGRAPH_DEPTH {
        g = if_holding(g);
    }
    let msg = error(&model(g));
    assert!(msg.contains("subgraphs are nested more than 8 deep"), "{msg}");
}
