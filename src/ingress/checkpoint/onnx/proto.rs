//! The subset of `onnx.proto` (ONNX IR, proto2) the gate reads, written by hand as prost
//! messages so no `protoc` runs at build time. Field numbers are onnx.proto's; fields the
//! gate does not need (doc strings, training info, functions) are
//! left out, and prost skips them on decode. Repeated scalars decode packed or not, as
//! protobuf requires. `raw_data` is [`bytes::Bytes`], so decoding from one `Bytes` buffer
//! slices the weights out of it instead of copying them.

/// `ModelProto`: the file's top-level message.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    /// ONNX IR version.
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    /// The operator sets the graph's nodes use.
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    /// The main graph.
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
}

/// `OperatorSetIdProto`: a domain and its version.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    /// `""` or `ai.onnx` for the standard operators.
    #[prost(string, tag = "1")]
    pub domain: String,
    /// Opset version.
    #[prost(int64, tag = "2")]
    pub version: i64,
}

/// `GraphProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    /// Nodes (ONNX requires topological order; the gate checks the graph is acyclic).
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    /// Graph name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Constant tensors: the weights.
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    /// Graph inputs.
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    /// Graph outputs.
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    /// Declared types and shapes of intermediate values.
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
}

/// `NodeProto`: one operator application.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    /// Value names read (`""` for an omitted optional input).
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    /// Value names written.
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    /// Node name (may be empty).
    #[prost(string, tag = "3")]
    pub name: String,
    /// Operator, e.g. `MatMul`.
    #[prost(string, tag = "4")]
    pub op_type: String,
    /// Attributes.
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    /// Operator domain (`""` = `ai.onnx`).
    #[prost(string, tag = "7")]
    pub domain: String,
}

/// `AttributeProto`, the scalar and list forms the gate reads.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    /// Attribute name, e.g. `transB`.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Float value.
    #[prost(float, tag = "2")]
    pub f: f32,
    /// Integer value.
    #[prost(int64, tag = "3")]
    pub i: i64,
    /// Integer list.
    #[prost(int64, repeated, tag = "8")]
    pub ints: Vec<i64>,
    /// A subgraph: an `If`'s `then_branch`/`else_branch`, a `Loop`'s or `Scan`'s `body`
    /// (listed in the matrix, never run; the wire scan counts its nodes first).
    #[prost(message, optional, boxed, tag = "6")]
    pub g: Option<Box<GraphProto>>,
    /// A list of subgraphs (no standard op has one; a custom op may).
    #[prost(message, repeated, tag = "11")]
    pub graphs: Vec<GraphProto>,
}

/// `TensorProto`: an initializer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// Shape, outermost first.
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    /// `TensorProto.DataType`.
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    /// FLOAT values (typed form).
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    /// INT32, INT16, INT8, UINT16, UINT8, BOOL, FLOAT16 and BFLOAT16 values (typed form;
    /// 16-bit floats as their bit patterns).
    #[prost(int32, repeated, tag = "5")]
    pub int32_data: Vec<i32>,
    /// STRING values.
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub string_data: Vec<Vec<u8>>,
    /// INT64 values.
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    /// Tensor name.
    #[prost(string, tag = "8")]
    pub name: String,
    /// Little-endian packed values (the form `numpy_helper.from_array` writes).
    #[prost(bytes = "bytes", tag = "9")]
    pub raw_data: bytes::Bytes,
    /// DOUBLE values.
    #[prost(double, repeated, tag = "10")]
    pub double_data: Vec<f64>,
    /// UINT32 and UINT64 values.
    #[prost(uint64, repeated, tag = "11")]
    pub uint64_data: Vec<u64>,
    /// Where the data lives when it is not in this file.
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<StringStringEntryProto>,
    /// `0` DEFAULT (in this message), `1` EXTERNAL.
    #[prost(int32, tag = "14")]
    pub data_location: i32,
}

/// `StringStringEntryProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStringEntryProto {
    /// Key, e.g. `location`.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `ValueInfoProto`: a value's declared type.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    /// Value name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its type.
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
}

/// `TypeProto`, its tensor case only (sequences, maps and optionals are skipped).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProto {
    /// `TypeProto.Tensor`.
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TensorTypeProto>,
}

/// `TypeProto.Tensor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorTypeProto {
    /// Element type (`TensorProto.DataType`).
    #[prost(int32, tag = "1")]
    pub elem_type: i32,
    /// Shape, if declared.
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

/// `TensorShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    /// Dimensions, outermost first.
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<Dimension>,
}

/// `TensorShapeProto.Dimension`: a number, a symbol, or unknown.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dimension {
    /// A fixed size.
    #[prost(int64, optional, tag = "1")]
    pub dim_value: Option<i64>,
    /// A symbolic size, e.g. `batch`.
    #[prost(string, optional, tag = "2")]
    pub dim_param: Option<String>,
}
