//! The checkpoint a pack names (issue 21): its safetensors files (one, or the shards of a
//! `model.safetensors.index.json`) or its ONNX graph ([`onnx`]), and, optionally, its
//! Hugging Face `config.json`.
//!
//! Ingress reads what the gate must know before anything runs: every header (dtypes,
//! shapes, where each tensor's bytes are), checked against the file sizes, and the config's
//! sparsity claims. Tensor *data* is read later, one tensor at a time and bounded by its
//! declared size ([`Checkpoint::read_tensor`]), so memory never holds more of a checkpoint
//! than one tensor. Every file is confined to the pack's directory, refused unless it is a
//! regular file, and digested (sha256, streamed) for the lock, the evidence and the memo.
//!
//! Errors name the file and the tensor, say what was expected and never echo file content.

mod config;
pub mod eval;
mod header;
mod locate;
pub mod onnx;
mod select;

pub use config::{Claimed, ClaimedStructure, ModelConfig, SparsityClaim};
pub use select::{
    CheckpointWorkload, OpenError, SelectError, matches_glob, open_workload, select, tensor_of,
};

use crate::files::FileError;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Largest safetensors header read (the reference implementation's limit).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;
/// Largest `config.json` or shard index read.
pub const MAX_JSON_BYTES: u64 = 16 << 20;

/// The element type of a stored tensor, as safetensors names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Dtype {
    /// 32-bit float.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// Signed byte.
    I8,
    /// Unsigned byte (bitmask companions of compressed formats).
    U8,
    /// Any other safetensors dtype (listed, never verified or run).
    Other(::safetensors::Dtype),
}

impl Dtype {
    /// Bytes per element, where whole.
    pub fn bytes(self) -> Option<u64> {
        match self {
            Dtype::F32 => Some(4),
            Dtype::F16 | Dtype::Bf16 => Some(2),
            Dtype::I8 | Dtype::U8 => Some(1),
            Dtype::Other(d) => (d.bitsize() % 8 == 0).then_some(d.bitsize() as u64 / 8),
        }
    }

    /// The safetensors name, e.g. `BF16`.
    pub fn name(self) -> String {
        match self {
            Dtype::F32 => "F32".into(),
            Dtype::F16 => "F16".into(),
            Dtype::Bf16 => "BF16".into(),
            Dtype::I8 => "I8".into(),
            Dtype::U8 => "U8".into(),
            Dtype::Other(d) => d.to_string(),
        }
    }
}

/// One file of a checkpoint, with its digest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArtifactFile {
    /// The path relative to the pack's directory, as the memo shows it.
    pub name: String,
    /// The resolved path.
    #[serde(skip)]
    pub path: PathBuf,
    /// Size in bytes.
    pub bytes: u64,
    /// `sha256:<hex>` of the whole file.
    pub digest: String,
}

/// One tensor of a checkpoint: where its bytes are, and what they hold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TensorEntry {
    /// The tensor's name, e.g. `model.layers.0.mlp.up_proj.weight`.
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Shape, outermost first (a Linear weight is `[out_features, in_features]`).
    pub shape: Vec<u64>,
    /// Index into [`Checkpoint::files`].
    pub file: usize,
    /// Absolute byte offset of the data in that file.
    pub offset: u64,
    /// Bytes of data.
    pub len: u64,
    /// The data itself, for a weight read from an ONNX graph (already in `[out, in]`
    /// layout); `None` for a safetensors tensor, read from its file when needed.
    #[serde(skip)]
    pub held: Option<Held>,
}

/// Tensor bytes kept in memory (an ONNX graph's GEMM weights: the graph is one protobuf
/// message, read whole and bounded). Debug shows the length, not the bytes.
#[derive(Clone, PartialEq)]
pub struct Held(pub bytes::Bytes);

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Held({} bytes)", self.0.len())
    }
}

impl TensorEntry {
    /// Elements stored.
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// A checkpoint whose headers passed every check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Checkpoint {
    /// Its files: the index (if sharded), then the weight files in name order (or the ONNX
    /// graph), then the config.
    pub files: Vec<ArtifactFile>,
    /// Every tensor, in name order (of a graph: its GEMMs' weights).
    pub tensors: Vec<TensorEntry>,
    /// The ONNX graph, when the checkpoint is one: every node and what it is to the gate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph: Option<onnx::Graph>,
    /// The model config, if the pack names one.
    pub config: Option<ModelConfig>,
}

/// Why a checkpoint cannot be gated. Each names the file (relative to the pack) and, where
/// there is one, the tensor.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file could not be opened or read, or is not a regular file.
    #[error("{0}")]
    File(#[from] FileError),
    /// A path leaves the pack's directory.
    #[error("`{name}` is outside the pack's directory")]
    OutsidePack {
        /// The path as the pack (or the shard index) wrote it.
        name: String,
    },
    /// The file is shorter than the 8-byte header length.
    #[error(
        "{file}: {len} bytes is too short for a safetensors file (8-byte header length, then the header)"
    )]
    TooShort {
        /// The file.
        file: String,
        /// Its length.
        len: u64,
    },
    /// The header length is over the limit or past the end of the file.
    #[error("{file}: the header length says {claimed} bytes, but {limit}")]
    HeaderLength {
        /// The file.
        file: String,
        /// What the first 8 bytes claim.
        claimed: u64,
        /// What bounds it (the read limit or the file's size), in words.
        limit: String,
    },
    /// The header is not the JSON object safetensors writes.
    #[error("{file}: the header is not a safetensors JSON header ({problem})")]
    Header {
        /// The file.
        file: String,
        /// The parser's message (positions, never content).
        problem: String,
    },
    /// One tensor's entry is inconsistent.
    #[error("{file}: tensor `{tensor}`: {problem}")]
    Tensor {
        /// The file.
        file: String,
        /// The tensor's name.
        tensor: String,
        /// What is wrong.
        problem: String,
    },
    /// The data does not end where the file does.
    #[error(
        "{file}: the tensors' data ends at byte {expected} of the data section, but the file holds {actual}"
    )]
    DataLength {
        /// The file.
        file: String,
        /// End of the last tensor, per the header.
        expected: u64,
        /// Bytes after the header.
        actual: u64,
    },
    /// The shard index or the config is malformed.
    #[error("{file}: {problem}")]
    Json {
        /// The file.
        file: String,
        /// What is wrong.
        problem: String,
    },
    /// A field of the model config is missing, of the wrong type or absurd, or its
    /// sparsity claim is not one compressed-tensors writes.
    #[error("{file}{at}: {problem}")]
    Config {
        /// The file.
        file: String,
        /// `:line:col` of the field's value, or empty when it has none (missing).
        at: String,
        /// The field, what it holds and what was expected.
        problem: String,
        /// What to do about it.
        hint: &'static str,
    },
    /// The ONNX graph is malformed: its protobuf, a node or an initializer.
    #[error("{file}: {item}: {problem}")]
    Graph {
        /// The file.
        file: String,
        /// What is wrong: `node `x` (MatMul)`, `initializer `w``, `byte 120`, `the graph`.
        item: String,
        /// What was expected and what was found (never the file's bytes).
        problem: String,
        /// What to do about it.
        hint: &'static str,
    },
}

impl CheckpointError {
    /// What to do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            CheckpointError::File(_) => {
                "the path is relative to the pack's directory and must name a regular file"
            }
            CheckpointError::OutsidePack { .. } => {
                "checkpoints must live inside the pack's directory tree (no `..`, no absolute paths or links out)"
            }
            CheckpointError::TooShort { .. }
            | CheckpointError::HeaderLength { .. }
            | CheckpointError::DataLength { .. } => {
                "the file is truncated or not a safetensors file; re-export it with `safetensors.torch.save_file`"
            }
            CheckpointError::Header { .. } | CheckpointError::Tensor { .. } => {
                "the header must map each tensor to {dtype, shape, data_offsets} with offsets matching the dtype and shape, contiguous and in range"
            }
            CheckpointError::Json { .. } => {
                "check the file against what `transformers` writes (`save_pretrained`)"
            }
            CheckpointError::Graph { hint, .. } | CheckpointError::Config { hint, .. } => hint,
        }
    }
}

/// `target` resolved against `dir` (the pack's directory), refused if it leaves it
/// ([`crate::files::confined`]).
pub fn confined(dir: &Path, target: &str) -> Result<PathBuf, CheckpointError> {
    crate::files::confined(dir, target).map_err(|e| match e {
        crate::files::ConfineError::Outside => CheckpointError::OutsidePack {
            name: target.to_owned(),
        },
        crate::files::ConfineError::File(e) => CheckpointError::File(e),
    })
}

/// `sha256:<hex>` of the regular file at `path`, streamed (bounded memory), with its size.
pub fn digest_file(path: &Path) -> Result<(u64, String), FileError> {
    use sha2::Digest;
    use std::io::Read;
    let mut file = crate::files::open_regular(path)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(|source| FileError::Read {
            path: path.to_owned(),
            source,
        })?;
        if n == 0 {
            break;
        }
        total += n as u64;
        hasher.update(&buf[..n]);
    }
    let hex: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((total, format!("sha256:{hex}")))
}

impl Checkpoint {
    /// Open the checkpoint's `weights` (a `.safetensors` file or a shard index ending in
    /// `.index.json`) or its ONNX graph, and the optional `config`, all relative to the pack
    /// directory `dir`.
    pub fn open(dir: &Path, source: Source<'_>, config: Option<&str>) -> Result<Checkpoint, CheckpointError> {
        let mut files = Vec::new();
        let mut tensors = Vec::new();
        let mut graph = None;
        match source {
            Source::Weights(weights) if weights.ends_with(".index.json") => {
                header::open_sharded(dir, weights, &mut files, &mut tensors)?;
            }
            Source::Weights(weights) => {
                let path = confined(dir, weights)?;
                header::read_headers(&path, weights, 0, &mut tensors)?;
                files.push(artifact(path, weights)?);
            }
            Source::Graph(name) => {
                let path = confined(dir, name)?;
                let read = onnx::read(&path, name)?;
                tensors = read.weights.clone();
                files.push(artifact(path, name)?);
                graph = Some(read);
            }
        }
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        let config = match config {
            Some(name) => {
                let path = confined(dir, name)?;
                let parsed = config::read(&path, name)?;
                files.push(artifact(path, name)?);
                Some(parsed)
            }
            None => None,
        };
        Ok(Checkpoint {
            files,
            tensors,
            config,
            graph,
        })
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorEntry> {
        self.tensors
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.tensors[i])
    }

    /// The bytes of `tensor`, read from its file: exactly its declared length, never more.
    pub fn read_tensor(&self, tensor: &TensorEntry) -> Result<Vec<u8>, CheckpointError> {
        use std::io::{Read, Seek, SeekFrom};
        if let Some(held) = &tensor.held {
            return Ok(held.0.to_vec());
        }
        let file = &self.files[tensor.file];
        let read = |source| FileError::Read {
            path: file.path.clone(),
            source,
        };
        let mut f = crate::files::open_regular(&file.path)?;
        f.seek(SeekFrom::Start(tensor.offset)).map_err(read)?;
        let len = usize::try_from(tensor.len).map_err(|_| CheckpointError::Tensor {
            file: file.name.clone(),
            tensor: tensor.name.clone(),
            problem: format!("{} bytes do not fit in memory on this machine", tensor.len),
        })?;
        let mut out = Vec::new();
        out.try_reserve_exact(len).map_err(|_| CheckpointError::Tensor {
            file: file.name.clone(),
            tensor: tensor.name.clone(),
            problem: format!("cannot allocate {} bytes for its data", tensor.len),
        })?;
        f.take(tensor.len).read_to_end(&mut out).map_err(read)?;
        if out.len() as u64 != tensor.len {
            // The file shrank after its header was checked.
            return Err(CheckpointError::DataLength {
                file: file.name.clone(),
                expected: tensor.offset + tensor.len,
                actual: tensor.offset + out.len() as u64,
            });
        }
        Ok(out)
    }
}

/// Where a checkpoint's weights are.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// A `.safetensors` file or a shard index.
    Weights(&'a str),
    /// An ONNX model, whose GEMM weights are its initializers.
    Graph(&'a str),
}

/// A name from a foreign file, fit to show: control characters escaped, at most 120
/// characters.
pub(crate) fn shown(name: &str) -> String {
    let escaped: String = name.chars().flat_map(char::escape_default).collect();
    match escaped.char_indices().nth(120) {
        Some((cut, _)) => format!("{}…", &escaped[..cut]),
        None => escaped,
    }
}

impl Checkpoint {
    /// The values of `tensor` widened to f32 (exactly, for f16/bf16; int8 as its integer
    /// values), for the kernels' f32 panels; `None` for a dtype the CPU does not run.
    pub fn read_f32(&self, tensor: &TensorEntry) -> Result<Option<Vec<f32>>, CheckpointError> {
        let data = self.read_tensor(tensor)?;
        Ok(match tensor.dtype {
            Dtype::F32 => Some(
                data.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            ),
            Dtype::F16 => Some(
                data.chunks_exact(2)
                    .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
            ),
            Dtype::Bf16 => Some(
                data.chunks_exact(2)
                    .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
            ),
            Dtype::I8 => Some(data.iter().map(|&b| f32::from(b as i8)).collect()),
            Dtype::U8 | Dtype::Other(_) => None,
        })
    }
}

fn artifact(path: PathBuf, name: &str) -> Result<ArtifactFile, CheckpointError> {
    let (bytes, digest) = digest_file(&path)?;
    Ok(ArtifactFile {
        name: name.to_owned(),
        path,
        bytes,
        digest,
    })
}
