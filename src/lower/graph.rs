//! The rows of the supported layer matrix for an ONNX graph's nodes that are not
//! sparse-capable GEMMs (issue 21): each runs `dense` (a known operator that is no GEMM, or
//! a GEMM with no weight to prune) or is `unsupported` (an operator the gate cannot read:
//! unknown, from another domain, or a GEMM whose weight no sparse kernel takes), with why.
//!
//! An unknown operator is listed, not refused: shipped graphs routinely carry contrib or
//! custom-domain ops (`com.microsoft`, a vendor's fused attention), and the gate can still
//! verify and time every GEMM it can read. The matrix says what it could not vouch for.

use crate::ingress::checkpoint::onnx::{Graph, NodeKind};
use serde::{Deserialize, Serialize};

/// How a graph node that is not a sparse-capable GEMM runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodePath {
    /// On the dense path, by its nature: no sparse kernel applies.
    Dense,
    /// The gate cannot say how it runs (unknown op) or cannot run it sparse (an opaque
    /// GEMM): its share of the work is not covered by the verdict.
    Unsupported,
}

/// One graph node in the supported layer matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodePlan {
    /// The node's name (`#<index>` when the graph gives none).
    pub node: String,
    /// Its operator, with the domain when it is not the standard one (`com.example.Foo`).
    pub op_type: String,
    /// How it runs.
    pub path: NodePath,
    /// Why.
    pub reason: String,
}

/// Standard (`ai.onnx`) operators that are no GEMM and run on the dense path.
const DENSE_OPS: &[&str] = &[
    "Abs",
    "Add",
    "And",
    "ArgMax",
    "ArgMin",
    "AveragePool",
    "BatchNormalization",
    "BiasGelu",
    "Cast",
    "CastLike",
    "Ceil",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "CumSum",
    "Div",
    "Dropout",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Floor",
    "Gather",
    "GatherElements",
    "GatherND",
    "Gelu",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Greater",
    "GreaterOrEqual",
    "GroupNormalization",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "InstanceNormalization",
    "LayerNormalization",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "LogSoftmax",
    "LpNormalization",
    "LRN",
    "Max",
    "MaxPool",
    "Mean",
    "Min",
    "Mish",
    "Mod",
    "Mul",
    "Neg",
    "Not",
    "OneHot",
    "Or",
    "Pad",
    "Pow",
    "PRelu",
    "Range",
    "Reciprocal",
    "ReduceL2",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
    "Relu",
    "Reshape",
    "Resize",
    "RMSNormalization",
    "ScatterElements",
    "ScatterND",
    "Selu",
    "Shape",
    "Sigmoid",
    "Sign",
    "Sin",
    "Cos",
    "Size",
    "Slice",
    "Softmax",
    "Softplus",
    "Softsign",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Tanh",
    "Tile",
    "TopK",
    "Transpose",
    "Trilu",
    "Unsqueeze",
    "Where",
    "Xor",
];

/// The matrix rows of every node of `graph` that is not a GEMM with a readable weight.
pub fn nodes(graph: &Graph) -> Vec<NodePlan> {
    graph
        .nodes
        .iter()
        .filter_map(|n| {
            let standard = n.domain.is_empty() || n.domain == "ai.onnx";
            let op = if standard {
                n.op_type.clone()
            } else {
                format!("{}.{}", n.domain, n.op_type)
            };
            let (path, reason) = match &n.kind {
                NodeKind::Gemm(_) => return None,
                NodeKind::ActivationGemm => (
                    NodePath::Dense,
                    format!("{op}: a product of two activations, no weight to prune; runs dense"),
                ),
                NodeKind::OpaqueGemm(why) => (NodePath::Unsupported, format!("{op}: {why}")),
                NodeKind::Quantize(of) => (
                    NodePath::Dense,
                    format!(
                        "{op}: {} {of}; not a GEMM, runs dense",
                        if n.op_type == "DequantizeLinear" { "dequantizes" } else { "quantizes" }
                    ),
                ),
                NodeKind::ControlFlow(holds) => (
                    NodePath::Unsupported,
                    format!(
                        "{op}: control flow; its subgraphs ({holds}) run on a runtime condition or trip count, so the gate lists their ops but neither verifies nor times them"
                    ),
                ),
                NodeKind::InSubgraph(whose) => (
                    NodePath::Unsupported,
                    format!(
                        "{op}: inside {whose}; ops in control-flow subgraphs are neither verified nor timed (export with the branch or loop resolved to gate them)"
                    ),
                ),
                NodeKind::Other if standard && DENSE_OPS.contains(&n.op_type.as_str()) => {
                    (NodePath::Dense, format!("{op}: not a GEMM, runs dense"))
                }
                NodeKind::Other if standard => (
                    NodePath::Unsupported,
                    format!("{op}: an operator the gate does not model; how it runs is not covered"),
                ),
                NodeKind::Other => (
                    NodePath::Unsupported,
                    format!(
                        "unknown op {op} (domain `{}`): the gate cannot tell whether it hides a GEMM; its work is not covered",
                        n.domain
                    ),
                ),
            };
            Some(NodePlan {
                node: n.name.clone(),
                op_type: op,
                path,
                reason,
            })
        })
        .collect()
}

/// How the graph's GEMM whose weight is `tensor` was read, for its matrix row.
pub fn gemm_note(graph: &Graph, tensor: &str) -> Option<String> {
    let (node, gemm) = graph.gemm_of(tensor)?;
    let mut note = format!("ONNX {} `{}`: {}", node.op_type, node.name, gemm.form);
    for q in &gemm.quantized {
        note.push_str("; ");
        note.push_str(q);
    }
    Some(note)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingress::checkpoint::onnx::GraphNode;

    fn node(name: &str, op: &str, domain: &str, kind: NodeKind) -> GraphNode {
        GraphNode {
            name: name.into(),
            op_type: op.into(),
            domain: domain.into(),
            kind,
        }
    }

    #[test]
    fn known_ops_run_dense_and_unknown_ones_are_listed_unsupported_not_refused() {
        let graph = Graph {
            nodes: vec![
                node("ln", "LayerNormalization", "", NodeKind::Other),
                node("f", "Foo", "", NodeKind::Other),
                node("x", "Attention", "com.microsoft", NodeKind::Other),
                node("qk", "MatMul", "", NodeKind::ActivationGemm),
                node("g", "ConvTranspose", "", NodeKind::OpaqueGemm("no kernel".into())),
            ],
            weights: vec![],
        };
        let rows = nodes(&graph);
        let paths: Vec<NodePath> = rows.iter().map(|r| r.path).collect();
        use NodePath::{Dense, Unsupported};
        assert_eq!(paths, [Dense, Unsupported, Unsupported, Dense, Unsupported]);
        assert_eq!(rows[0].reason, "LayerNormalization: not a GEMM, runs dense");
        assert!(
            rows[1]
                .reason
                .starts_with("Foo: an operator the gate does not model")
        );
        assert_eq!(rows[2].op_type, "com.microsoft.Attention");
        assert!(rows[2].reason.starts_with("unknown op com.microsoft.Attention"));
        assert_eq!(rows[4].reason, "ConvTranspose: no kernel");
    }
}
