//! ONNX graphs a checkpoint slice names (`checkpoint: {graph: model.onnx}`, issue 21): every
//! node's op type, the GEMMs among them with their dimensions and weights, and where
//! QuantizeLinear/DequantizeLinear sit.
//!
//! A model is one protobuf message, so it is read whole, bounded by [`MAX_GRAPH_BYTES`]
//! (past that size exporters move weights to external data, which is refused). Before
//! anything is decoded the wire format is scanned ([`wire::count`]) so a file claiming a
//! million nodes is refused without allocating them. Then the graph must be acyclic, every
//! value it reads defined, and every initializer's bytes must match its declared type and
//! shape (and any shape the graph declares for it).
//!
//! A GEMM is a node whose weight is a 2-D initializer (through an optional
//! Quantize/DequantizeLinear pair): `MatMul` with the initializer as B (`[K, N]`), `Gemm`
//! (B is `[N, K]` with `transB = 1`, else `[K, N]`), and `Conv` with `group = 1` as its
//! im2col GEMM (`N = C_out`, `K = C_in·kH·kW`, M = tokens × output positions). Its weight
//! becomes a [`TensorEntry`] in the safetensors layout `[out, in]` (transposed here when the
//! graph stores `[K, N]`), so structure verification, eligibility and the timed kernels read
//! it exactly as they read a safetensors tensor.

mod proto;
mod wire;

pub use proto::{
    AttributeProto, Dimension, GraphProto, ModelProto, NodeProto, TensorProto, TensorShapeProto,
    TensorTypeProto, TypeProto, ValueInfoProto,
};

use super::{CheckpointError, Dtype, Held, TensorEntry, shown};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Largest graph file read (protobuf cannot exceed 2 GiB; exporters put bigger weights in
/// external data, which is refused).
pub const MAX_GRAPH_BYTES: u64 = 256 << 20;
/// Most nodes a graph may hold (a 7B-parameter transformer exports to about 10 000).
pub const MAX_NODES: u64 = 100_000;
/// Most initializers a graph may hold.
pub const MAX_INITIALIZERS: u64 = 100_000;
/// Most declared value types (inputs, outputs, value_info together).
pub const MAX_VALUE_INFOS: u64 = 400_000;

/// A graph whose structure passed every check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Graph {
    /// Every node, in file order.
    pub nodes: Vec<GraphNode>,
    /// The GEMMs' weights in `[out, in]` layout, one per initializer.
    #[serde(skip)]
    pub weights: Vec<TensorEntry>,
}

impl Graph {
    /// The GEMM node whose weight is `tensor`, if one is.
    pub fn gemm_of(&self, tensor: &str) -> Option<(&GraphNode, &GemmNode)> {
        self.nodes.iter().find_map(|n| match &n.kind {
            NodeKind::Gemm(g) if g.weight == tensor => Some((n, g)),
            _ => None,
        })
    }
}

/// One node of the graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphNode {
    /// Its name (escaped for display), or `#<index>` when the graph gives none.
    pub name: String,
    /// Operator, e.g. `LayerNormalization`.
    pub op_type: String,
    /// Operator domain (`""` for the standard `ai.onnx` operators).
    pub domain: String,
    /// What the gate makes of it.
    pub kind: NodeKind,
}

/// What a node is to the gate.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// A GEMM with a readable weight: the weight tensor is one of the slice's ops.
    Gemm(GemmNode),
    /// A product of two activations (attention scores): no weight to prune.
    ActivationGemm,
    /// A GEMM-like op whose weight the gate cannot run sparse, with why.
    OpaqueGemm(String),
    /// A QuantizeLinear or DequantizeLinear node, with what it quantizes.
    Quantize(String),
    /// A node holding subgraphs (`If`, `Loop`, `Scan`): what they hold, e.g.
    /// `then_branch: 1 node (1 GEMM), else_branch: 1 node (1 GEMM)`. Its nodes follow it in
    /// [`Graph::nodes`]; none is verified or timed.
    ControlFlow(String),
    /// A node inside a subgraph, with whose (e.g. `the then_branch of If `branch``).
    InSubgraph(String),
    /// Any other op.
    Other,
}

/// A GEMM node's weight and how its dimensions were read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GemmNode {
    /// The initializer that is its weight.
    pub weight: String,
    /// How the GEMM was read, e.g. `MatMul, B [64, 128] as [out, in] = [128, 64]`.
    pub form: String,
    /// Rows of the GEMM per token (a Conv's output positions; 1 otherwise).
    pub rows_per_token: u64,
    /// Where its operands are quantized, e.g. `weight through QuantizeLinear `q` →
    /// DequantizeLinear `dq``.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quantized: Vec<String>,
}

/// Build a [`CheckpointError::Graph`].
fn bad(
    file: &str,
    item: impl Into<String>,
    problem: impl Into<String>,
    hint: &'static str,
) -> CheckpointError {
    CheckpointError::Graph {
        file: file.to_owned(),
        item: item.into(),
        problem: problem.into(),
        hint,
    }
}

const REEXPORT: &str = "the file is truncated or not an ONNX model; re-export it (`torch.onnx.export`, `onnx.save`) and check it with `onnx.checker.check_model`";
const DAG: &str = "an ONNX graph must be acyclic and define every value before it is read; check it with `onnx.checker.check_model`";
const SHAPES: &str = "an initializer's data must hold exactly the elements its dims and data_type declare; re-export it, or run `onnx.shape_inference.infer_shapes` to see the disagreement";
const TOO_BIG: &str = "gate the graph's GEMM weights as safetensors (`weights:`) instead, or split the graph";

/// Read and check the ONNX model at `path`, named `name` (relative to the pack) in messages.
pub fn read(path: &Path, name: &str) -> Result<Graph, CheckpointError> {
    let bytes = crate::files::read_bounded_bytes(path, MAX_GRAPH_BYTES)?;
    decode(bytes, name)
}

/// [`read`] on the file's bytes (kept: the weights are sliced out of them, not copied).
pub fn decode(bytes: Vec<u8>, name: &str) -> Result<Graph, CheckpointError> {
    use prost::Message;
    let counts = wire::count(&bytes).map_err(|e| {
        bad(
            name,
            format!("byte {}", e.at),
            format!("not a complete protobuf message: {}", e.problem),
            REEXPORT,
        )
    })?;
    for (what, n, max) in [
        ("nodes", counts.nodes, MAX_NODES),
        ("initializers", counts.initializers, MAX_INITIALIZERS),
        ("declared value types", counts.value_infos, MAX_VALUE_INFOS),
    ] {
        if n > max {
            return Err(bad(
                name,
                "the graph",
                format!("holds {n} {what}, expected at most {max}"),
                TOO_BIG,
            ));
        }
    }
    let model = ModelProto::decode(bytes::Bytes::from(bytes)).map_err(|e| {
        // prost's message names the field path and the problem, never the bytes.
        bad(
            name,
            "the model",
            format!("not an ONNX ModelProto ({e})"),
            REEXPORT,
        )
    })?;
    let graph = model
        .graph
        .ok_or_else(|| bad(name, "the model", "holds no graph", REEXPORT))?;
    build(&graph, name)
}

/// Bytes per element of an ONNX `data_type`, and the dtype the gate knows it as.
fn element(data_type: i32) -> Option<(u64, Dtype)> {
    use ::safetensors::Dtype as S;
    Some(match data_type {
        1 => (4, Dtype::F32),
        2 => (1, Dtype::U8),
        3 => (1, Dtype::I8),
        4 => (2, Dtype::Other(S::U16)),
        5 => (2, Dtype::Other(S::I16)),
        6 => (4, Dtype::Other(S::I32)),
        7 => (8, Dtype::Other(S::I64)),
        9 => (1, Dtype::Other(S::BOOL)),
        10 => (2, Dtype::F16),
        11 => (8, Dtype::Other(S::F64)),
        12 => (4, Dtype::Other(S::U32)),
        13 => (8, Dtype::Other(S::U64)),
        16 => (2, Dtype::Bf16),
        _ => return None,
    })
}

/// A checked initializer: its dims, element type and little-endian bytes.
struct Init {
    dims: Vec<u64>,
    dtype: Option<Dtype>,
    data: bytes::Bytes,
}

/// Check `t` against its declared type and shape and return its bytes (the typed fields
/// re-encoded little-endian, as `raw_data` would hold them).
fn initializer(t: &TensorProto, file: &str) -> Result<Init, CheckpointError> {
    let item = format!("initializer `{}`", shown(&t.name));
    if t.data_location == 1 || !t.external_data.is_empty() {
        return Err(bad(
            file,
            item,
            "keeps its data in an external file; the gate reads only weights inside the graph file",
            "save the model with `onnx.save_model(m, path, save_as_external_data=False)`, or export the weights as safetensors and name them in `weights:`",
        ));
    }
    let mut dims = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        dims.push(u64::try_from(d).map_err(|_| {
            bad(
                file,
                item.clone(),
                format!("has a negative dimension {d}"),
                SHAPES,
            )
        })?);
    }
    let elements = dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= MAX_GRAPH_BYTES)
        .ok_or_else(|| {
            bad(
                file,
                item.clone(),
                format!("declares {dims:?}, more elements than the file can hold"),
                SHAPES,
            )
        })?;
    let known = element(t.data_type);
    if !t.raw_data.is_empty() {
        let Some((size, dtype)) = known else {
            return Ok(Init {
                dims,
                dtype: None,
                data: t.raw_data.clone(),
            });
        };
        if t.raw_data.len() as u64 != elements * size {
            return Err(bad(
                file,
                item,
                format!(
                    "{} × {dims:?} is {} bytes, but raw_data holds {}",
                    dtype.name(),
                    elements * size,
                    t.raw_data.len()
                ),
                SHAPES,
            ));
        }
        return Ok(Init {
            dims,
            dtype: Some(dtype),
            data: t.raw_data.clone(),
        });
    }
    let mut data = Vec::new();
    let held = match t.data_type {
        1 => {
            data.extend(t.float_data.iter().flat_map(|x| x.to_le_bytes()));
            t.float_data.len()
        }
        2 | 3 | 9 => {
            data.extend(t.int32_data.iter().map(|&x| x as u8));
            t.int32_data.len()
        }
        4 | 5 | 10 | 16 => {
            data.extend(t.int32_data.iter().flat_map(|&x| (x as u16).to_le_bytes()));
            t.int32_data.len()
        }
        6 => {
            data.extend(t.int32_data.iter().flat_map(|x| x.to_le_bytes()));
            t.int32_data.len()
        }
        7 => {
            data.extend(t.int64_data.iter().flat_map(|x| x.to_le_bytes()));
            t.int64_data.len()
        }
        11 => {
            data.extend(t.double_data.iter().flat_map(|x| x.to_le_bytes()));
            t.double_data.len()
        }
        12 => {
            data.extend(t.uint64_data.iter().flat_map(|&x| (x as u32).to_le_bytes()));
            t.uint64_data.len()
        }
        13 => {
            data.extend(t.uint64_data.iter().flat_map(|x| x.to_le_bytes()));
            t.uint64_data.len()
        }
        8 => t.string_data.len(),
        // Types without a typed field (float8, int4, complex): only raw_data holds them.
        _ => 0,
    };
    if held as u64 != elements {
        return Err(bad(
            file,
            item,
            format!("declares {dims:?} ({elements} elements), but its data holds {held}"),
            SHAPES,
        ));
    }
    Ok(Init {
        dims,
        dtype: known.map(|(_, d)| d),
        data: data.into(),
    })
}

/// The declared shape of each value (graph inputs, outputs and value_info): `None` for a
/// symbolic or unknown dimension.
fn declared_shapes(g: &GraphProto) -> HashMap<&str, Vec<Option<u64>>> {
    g.input
        .iter()
        .chain(&g.output)
        .chain(&g.value_info)
        .filter_map(|v| {
            let shape = v.r#type.as_ref()?.tensor_type.as_ref()?.shape.as_ref()?;
            let dims = shape
                .dim
                .iter()
                .map(|d| d.dim_value.and_then(|x| u64::try_from(x).ok()))
                .collect();
            Some((v.name.as_str(), dims))
        })
        .collect()
}

fn node_name(n: &NodeProto, i: usize) -> String {
    if n.name.is_empty() {
        format!("#{i}")
    } else {
        shown(&n.name)
    }
}

fn is_standard(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

fn attr_i(n: &NodeProto, name: &str, default: i64) -> i64 {
    n.attribute
        .iter()
        .find(|a| a.name == name)
        .map_or(default, |a| a.i)
}

/// Check the graph and classify its nodes.
fn build(g: &GraphProto, file: &str) -> Result<Graph, CheckpointError> {
    let mut inits: HashMap<&str, Init> = HashMap::new();
    for t in &g.initializer {
        let init = initializer(t, file)?;
        if inits.insert(t.name.as_str(), init).is_some() {
            return Err(bad(
                file,
                format!("initializer `{}`", shown(&t.name)),
                "is defined twice",
                DAG,
            ));
        }
    }
    let shapes = declared_shapes(g);
    for (name, init) in &inits {
        if let Some(declared) = shapes.get(name) {
            let agrees = declared.len() == init.dims.len()
                && declared
                    .iter()
                    .zip(&init.dims)
                    .all(|(d, &i)| d.is_none_or(|d| d == i));
            if !agrees {
                return Err(bad(
                    file,
                    format!("initializer `{}`", shown(name)),
                    format!(
                        "holds {:?}, but the graph declares its shape as {}",
                        init.dims,
                        show_dims(declared)
                    ),
                    SHAPES,
                ));
            }
        }
    }
    // Producers, then every read value defined, then acyclic.
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in g.node.iter().enumerate() {
        for out in n.output.iter().filter(|o| !o.is_empty()) {
            if producer.insert(out.as_str(), i).is_some() || inits.contains_key(out.as_str()) {
                return Err(bad(
                    file,
                    format!("node `{}` ({})", node_name(n, i), shown(&n.op_type)),
                    format!(
                        "writes `{}`, which another node or an initializer already defines",
                        shown(out)
                    ),
                    DAG,
                ));
            }
        }
    }
    let inputs: HashSet<&str> = g.input.iter().map(|v| v.name.as_str()).collect();
    for (i, n) in g.node.iter().enumerate() {
        for v in n.input.iter().filter(|v| !v.is_empty()) {
            let v = v.as_str();
            if !producer.contains_key(v) && !inits.contains_key(v) && !inputs.contains(v) {
                return Err(bad(
                    file,
                    format!("node `{}` ({})", node_name(n, i), shown(&n.op_type)),
                    format!(
                        "reads `{}`, which no node, graph input or initializer defines",
                        shown(v)
                    ),
                    DAG,
                ));
            }
        }
    }
    check_acyclic(g, &producer, file)?;
    classify(g, file, &inits, &shapes, &producer)
}

fn show_dims(dims: &[Option<u64>]) -> String {
    let parts: Vec<String> = dims
        .iter()
        .map(|d| d.map_or("?".to_owned(), |d| d.to_string()))
        .collect();
    format!("[{}]", parts.join(", "))
}

/// Kahn's algorithm; on a cycle, name its nodes (walking producers from a node left over).
fn check_acyclic(g: &GraphProto, producer: &HashMap<&str, usize>, file: &str) -> Result<(), CheckpointError> {
    let n = g.node.len();
    let preds: Vec<Vec<usize>> = g
        .node
        .iter()
        .map(|node| {
            node.input
                .iter()
                .filter_map(|v| producer.get(v.as_str()).copied())
                .collect()
        })
        .collect();
    let mut succs = vec![Vec::new(); n];
    let mut indegree = vec![0usize; n];
    for (i, ps) in preds.iter().enumerate() {
        for &p in ps {
            succs[p].push(i);
            indegree[i] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut done = vec![false; n];
    while let Some(i) = ready.pop() {
        done[i] = true;
        for &s in &succs[i] {
            indegree[s] -= 1;
            if indegree[s] == 0 {
                ready.push(s);
            }
        }
    }
    let Some(start) = (0..n).find(|&i| !done[i]) else {
        return Ok(());
    };
    // Every node left over has a predecessor left over: walk back until one repeats.
    let mut path = vec![start];
    let mut at = start;
    loop {
        at = preds[at].iter().copied().find(|&p| !done[p]).unwrap_or(at);
        if let Some(pos) = path.iter().position(|&p| p == at) {
            path.drain(..pos);
            break;
        }
        path.push(at);
    }
    path.reverse();
    let names: Vec<String> = path
        .iter()
        .take(6)
        .map(|&i| format!("`{}` ({})", node_name(&g.node[i], i), shown(&g.node[i].op_type)))
        .collect();
    Err(bad(
        file,
        format!("node {}", names[0]),
        format!(
            "is on a cycle: {}{} → back to the first; expected an acyclic graph",
            names.join(" → "),
            if path.len() > 6 { " → …" } else { "" }
        ),
        DAG,
    ))
}

/// The initializer `value` is, directly or through Quantize/DequantizeLinear nodes (whose
/// names are appended to `through`).
fn constant_source<'g>(
    g: &'g GraphProto,
    value: &'g str,
    inits: &HashMap<&str, Init>,
    producer: &HashMap<&str, usize>,
    through: &mut Vec<usize>,
) -> Option<&'g str> {
    let mut v = value;
    for _ in 0..4 {
        if inits.contains_key(v) {
            return Some(v);
        }
        let &p = producer.get(v)?;
        let node = &g.node[p];
        if !matches!(node.op_type.as_str(), "QuantizeLinear" | "DequantizeLinear") {
            return None;
        }
        through.push(p);
        v = node.input.first()?;
    }
    None
}

/// Sort the nodes into GEMMs (with their weights), Q/DQ and the rest.
fn classify(
    g: &GraphProto,
    file: &str,
    inits: &HashMap<&str, Init>,
    shapes: &HashMap<&str, Vec<Option<u64>>>,
    producer: &HashMap<&str, usize>,
) -> Result<Graph, CheckpointError> {
    let mut nodes: Vec<GraphNode> = g
        .node
        .iter()
        .enumerate()
        .map(|(i, n)| GraphNode {
            name: node_name(n, i),
            op_type: shown(&n.op_type),
            domain: shown(&n.domain),
            kind: NodeKind::Other,
        })
        .collect();
    let mut weights: Vec<TensorEntry> = Vec::new();
    let mut quant_role: HashMap<usize, String> = HashMap::new();
    for (i, n) in g.node.iter().enumerate() {
        if !is_standard(&n.domain) {
            continue;
        }
        let input = |k: usize| n.input.get(k).map(String::as_str).filter(|v| !v.is_empty());
        let (a, b) = match n.op_type.as_str() {
            "MatMul" | "Gemm" | "Conv" => (input(0), input(1)),
            "MatMulInteger" | "QLinearMatMul" | "ConvInteger" | "QLinearConv" | "ConvTranspose"
            | "Einsum" => {
                nodes[i].kind = NodeKind::OpaqueGemm(
                    match n.op_type.as_str() {
                        "ConvTranspose" => "a transposed convolution has no sparse CPU kernel",
                        "Einsum" => "an Einsum's contraction is not read as a GEMM",
                        _ => "an integer GEMM whose quantized weight the gate does not dequantize",
                    }
                    .to_owned(),
                );
                continue;
            }
            _ => continue,
        };
        let node_item = format!("node `{}` ({})", nodes[i].name, nodes[i].op_type);
        let (Some(a), Some(b)) = (a, b) else {
            return Err(bad(
                file,
                node_item,
                "has fewer than two inputs, expected A and B",
                DAG,
            ));
        };
        let mut through = Vec::new();
        let Some(w) = constant_source(g, b, inits, producer, &mut through) else {
            nodes[i].kind = NodeKind::ActivationGemm;
            continue;
        };
        let init = &inits[w];
        let op = n.op_type.as_str();
        let trans_b = attr_i(n, "transB", 0) != 0;
        let group = attr_i(n, "group", 1);
        // (N, K, stored as [K, N]?, rows per token, form)
        let (out_dim, k, in_out, rows_per_token, form) = match (op, init.dims.as_slice()) {
            ("MatMul", &[k, n_]) => (
                n_,
                k,
                true,
                1,
                format!("MatMul, B [{k}, {n_}] read as [out, in] = [{n_}, {k}]"),
            ),
            ("Gemm", &[r, c]) if trans_b => {
                (r, c, false, 1, format!("Gemm transB=1, B [{r}, {c}] = [out, in]"))
            }
            ("Gemm", &[k, n_]) => (
                n_,
                k,
                true,
                1,
                format!("Gemm transB=0, B [{k}, {n_}] read as [out, in] = [{n_}, {k}]"),
            ),
            ("Conv", dims) if dims.len() >= 3 && group == 1 => {
                let k: u64 = dims[1..].iter().product();
                let out = n.output.first().and_then(|o| shapes.get(o.as_str()));
                let positions = out.filter(|s| s.len() >= 3).and_then(|s| {
                    s[2..]
                        .iter()
                        .try_fold(1u64, |a, d| d.map(|d| a.saturating_mul(d)))
                });
                let form = match positions {
                    Some(p) => {
                        format!("Conv {dims:?} as im2col GEMM, K = {k}, M = tokens × {p} output positions")
                    }
                    None => format!(
                        "Conv {dims:?} as im2col GEMM, K = {k}; output positions undeclared, M = tokens"
                    ),
                };
                (dims[0], k, false, positions.unwrap_or(1).max(1), form)
            }
            ("Conv", dims) if dims.len() >= 3 => {
                nodes[i].kind = NodeKind::OpaqueGemm(format!(
                    "a grouped convolution (group = {group}) has no sparse CPU kernel"
                ));
                continue;
            }
            (_, dims) => {
                nodes[i].kind = NodeKind::OpaqueGemm(format!(
                    "its weight `{}` is {}-D, not a 2-D matrix",
                    shown(w),
                    dims.len()
                ));
                continue;
            }
        };
        // The activation's declared reduction dimension must be the weight's K.
        if op != "Conv" {
            let trans_a = op == "Gemm" && attr_i(n, "transA", 0) != 0;
            if let Some(ds) = shapes.get(a) {
                let declared = if trans_a { ds.first() } else { ds.last() };
                if let Some(&Some(d)) = declared
                    && d != k
                {
                    return Err(bad(
                        file,
                        node_item,
                        format!(
                            "reads `{}` declared {} (K = {d}), but its weight `{}` is {:?}: expected K = {k}",
                            shown(a),
                            show_dims(ds),
                            shown(w),
                            init.dims
                        ),
                        SHAPES,
                    ));
                }
            }
        }
        let dtype = match init.dtype {
            Some(d @ (Dtype::F32 | Dtype::F16 | Dtype::Bf16 | Dtype::I8)) => d,
            other => {
                nodes[i].kind = NodeKind::OpaqueGemm(format!(
                    "its weight `{}` is {}, which no sparse CPU kernel reads",
                    shown(w),
                    other.map_or("an ONNX type without a CPU dtype".to_owned(), Dtype::name)
                ));
                continue;
            }
        };
        let mut quantized = Vec::new();
        if !through.is_empty() {
            let chain: Vec<String> = through
                .iter()
                .rev()
                .map(|&q| format!("{} `{}`", g.node[q].op_type, nodes[q].name))
                .collect();
            quantized.push(format!("weight through {}", chain.join(" → ")));
            for &q in &through {
                quant_role.insert(
                    q,
                    format!("the weight `{}` of {op} `{}`", shown(w), nodes[i].name),
                );
            }
        }
        if let Some(&p) = producer.get(a)
            && g.node[p].op_type == "DequantizeLinear"
            && constant_source(g, a, inits, producer, &mut Vec::new()).is_none()
        {
            quantized.push(format!("activation through DequantizeLinear `{}`", nodes[p].name));
            quant_role.insert(
                p,
                format!("the activation `{}` into {op} `{}`", shown(a), nodes[i].name),
            );
            if let Some(&q) = g.node[p].input.first().and_then(|v| producer.get(v.as_str()))
                && g.node[q].op_type == "QuantizeLinear"
            {
                quant_role.insert(
                    q,
                    format!("the activation `{}` into {op} `{}`", shown(a), nodes[i].name),
                );
            }
        }
        if let Some(prev) = weights.iter().find(|t| t.name == w) {
            if prev.shape != [out_dim, k] {
                nodes[i].kind = NodeKind::OpaqueGemm(format!(
                    "shares its weight `{}` with another GEMM in another layout",
                    shown(w)
                ));
                continue;
            }
        } else {
            let size = dtype.bytes().unwrap_or(1) as usize;
            let data = if in_out {
                transpose(&init.data, k as usize, out_dim as usize, size)
            } else {
                init.data.clone()
            };
            weights.push(TensorEntry {
                name: w.to_owned(),
                dtype,
                shape: vec![out_dim, k],
                file: 0,
                offset: 0,
                len: data.len() as u64,
                held: Some(Held(data)),
            });
        }
        nodes[i].kind = NodeKind::Gemm(GemmNode {
            weight: w.to_owned(),
            form,
            rows_per_token,
            quantized,
        });
    }
    for (i, n) in g.node.iter().enumerate() {
        if matches!(n.op_type.as_str(), "QuantizeLinear" | "DequantizeLinear")
            && matches!(nodes[i].kind, NodeKind::Other)
        {
            nodes[i].kind = NodeKind::Quantize(
                quant_role
                    .remove(&i)
                    .unwrap_or_else(|| "a value no GEMM reads directly".to_owned()),
            );
        }
    }
    Ok(Graph {
        nodes: with_subgraphs(g, nodes),
        weights,
    })
}

/// Op types that are a GEMM or hide one, counted in a subgraph's summary.
const GEMM_OPS: &[&str] = &[
    "MatMul",
    "Gemm",
    "Conv",
    "MatMulInteger",
    "QLinearMatMul",
    "ConvInteger",
    "QLinearConv",
    "ConvTranspose",
    "Einsum",
];

/// The subgraphs `n`'s attributes hold, by attribute name (`graphs[i]` as `name[i]`).
fn subgraphs(n: &NodeProto) -> Vec<(String, &GraphProto)> {
    let mut out = Vec::new();
    for a in &n.attribute {
        if let Some(g) = &a.g {
            out.push((shown(&a.name), &**g));
        }
        for (i, g) in a.graphs.iter().enumerate() {
            out.push((format!("{}[{i}]", shown(&a.name)), g));
        }
    }
    out
}

/// `nodes` (the top level, classified) with every subgraph's nodes after the node holding
/// it: that node becomes [`NodeKind::ControlFlow`], its subgraphs' nodes
/// [`NodeKind::InSubgraph`] named `<node>/<attribute>/<inner>`. The gate runs no subgraph
/// (which branch or how many trips is a runtime value), so their GEMMs are listed, never
/// verified or timed; the wire scan bounded their number before decoding.
fn with_subgraphs(g: &GraphProto, nodes: Vec<GraphNode>) -> Vec<GraphNode> {
    let mut out = Vec::with_capacity(nodes.len());
    for (n, mut node) in g.node.iter().zip(nodes) {
        let subs = subgraphs(n);
        if subs.is_empty() {
            out.push(node);
            continue;
        }
        let mut inner = Vec::new();
        node.kind = NodeKind::ControlFlow(nested(&node, &subs, &mut inner));
        out.push(node);
        out.extend(inner);
    }
    out
}

/// Push the nodes of `owner`'s subgraphs `subs` (recursively) onto `out`; return what they
/// hold, in words.
fn nested(owner: &GraphNode, subs: &[(String, &GraphProto)], out: &mut Vec<GraphNode>) -> String {
    let mut parts = Vec::new();
    for (attr, sub) in subs {
        let whose = format!("the {attr} of {} `{}`", owner.op_type, owner.name);
        let is_gemm = |domain: &str, op: &str| is_standard(domain) && GEMM_OPS.contains(&op);
        let mut gemms = 0;
        for (i, n) in sub.node.iter().enumerate() {
            gemms += usize::from(is_gemm(&n.domain, &n.op_type));
            let mut node = GraphNode {
                name: format!("{}/{attr}/{}", owner.name, node_name(n, i)),
                op_type: shown(&n.op_type),
                domain: shown(&n.domain),
                kind: NodeKind::InSubgraph(whose.clone()),
            };
            let deeper = subgraphs(n);
            if deeper.is_empty() {
                out.push(node);
            } else {
                let mut inner = Vec::new();
                let held = nested(&node, &deeper, &mut inner);
                node.kind = NodeKind::InSubgraph(format!("{whose}; holds {held}"));
                gemms += inner.iter().filter(|m| is_gemm(&m.domain, &m.op_type)).count();
                out.push(node);
                out.extend(inner);
            }
        }
        let plural = |k: usize, what: &str| format!("{k} {what}{}", if k == 1 { "" } else { "s" });
        parts.push(format!(
            "{attr}: {} ({})",
            plural(sub.node.len(), "node"),
            plural(gemms, "GEMM")
        ));
    }
    parts.join(", ")
}

/// The row-major `rows × cols` matrix `data` (elements of `size` bytes) transposed.
fn transpose(data: &bytes::Bytes, rows: usize, cols: usize, size: usize) -> bytes::Bytes {
    let mut out = vec![0u8; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            let from = (r * cols + c) * size;
            let to = (c * rows + r) * size;
            out[to..to + size].copy_from_slice(&data[from..from + size]);
        }
    }
    out.into()
}

#[cfg(test)]
mod tests;
