//! safetensors headers: 8 bytes of little-endian header length, a JSON object mapping each
//! tensor name to `{dtype, shape, data_offsets}` (plus an optional `__metadata__` map of
//! strings), then the data. Only the header is read here, bounded by
//! [`MAX_HEADER_BYTES`]; every entry is checked against the file's real size, so a header
//! that lies is refused before any tensor is read.

use super::{ArtifactFile, CheckpointError, Dtype, MAX_HEADER_BYTES, MAX_JSON_BYTES, TensorEntry, confined};
use crate::files::FileError;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// Read the header of the safetensors file at `path` (named `name` in messages) and append
/// its tensors, as file number `file`, to `out`.
pub(super) fn read_headers(
    path: &Path,
    name: &str,
    file: usize,
    out: &mut Vec<TensorEntry>,
) -> Result<(), CheckpointError> {
    let read = |source| FileError::Read {
        path: path.to_owned(),
        source,
    };
    let mut f = crate::files::open_regular(path)?;
    let len = f.metadata().map_err(read)?.len();
    let mut prefix = [0u8; 8];
    if len < 8 {
        return Err(CheckpointError::TooShort {
            file: name.to_owned(),
            len,
        });
    }
    f.read_exact(&mut prefix).map_err(read)?;
    let claimed = u64::from_le_bytes(prefix);
    if claimed > MAX_HEADER_BYTES {
        return Err(CheckpointError::HeaderLength {
            file: name.to_owned(),
            claimed,
            limit: format!("headers are read up to {MAX_HEADER_BYTES} bytes"),
        });
    }
    if claimed > len - 8 {
        return Err(CheckpointError::HeaderLength {
            file: name.to_owned(),
            claimed,
            limit: format!("the file has only {} bytes after the length", len - 8),
        });
    }
    let mut header = Vec::with_capacity(claimed as usize);
    f.take(claimed).read_to_end(&mut header).map_err(read)?;
    let bad_header = |problem: String| CheckpointError::Header {
        file: name.to_owned(),
        problem,
    };
    let entries: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| bad_header(json_position(&e)))?;
    let data_start = 8 + claimed;
    let data_len = len - data_start;
    let mut spans: Vec<(u64, u64, String)> = Vec::with_capacity(entries.len());
    for (tensor, value) in entries {
        if tensor == "__metadata__" {
            // Free-form strings; nothing the gate reads, but it must be a map of strings.
            serde_json::from_value::<BTreeMap<String, String>>(value)
                .map_err(|_| bad_header("`__metadata__` is not a map of strings".into()))?;
            continue;
        }
        let problem = |problem: String| CheckpointError::Tensor {
            file: name.to_owned(),
            tensor: super::shown(&tensor),
            problem,
        };
        // The parser's message would quote the file's values: say what was expected instead.
        let info: safetensors::tensor::TensorInfo = serde_json::from_value(value).map_err(|_| {
            problem(
                "expected {dtype, shape, data_offsets}: a safetensors dtype (F32, F16, BF16, I8, U8, ...), \
                 a list of non-negative dimensions and two byte offsets"
                    .into(),
            )
        })?;
        let dtype = match info.dtype {
            safetensors::Dtype::F32 => Dtype::F32,
            safetensors::Dtype::F16 => Dtype::F16,
            safetensors::Dtype::BF16 => Dtype::Bf16,
            safetensors::Dtype::I8 => Dtype::I8,
            safetensors::Dtype::U8 => Dtype::U8,
            other => Dtype::Other(other),
        };
        let shape: Vec<u64> = info.shape.iter().map(|&d| d as u64).collect();
        let elements = shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| problem(format!("shape {shape:?} overflows")))?;
        let bits = elements
            .checked_mul(info.dtype.bitsize() as u64)
            .ok_or_else(|| problem(format!("shape {shape:?} overflows")))?;
        let (start, end) = (info.data_offsets.0 as u64, info.data_offsets.1 as u64);
        if end < start {
            return Err(problem(format!(
                "data_offsets [{start}, {end}] end before they start"
            )));
        }
        if bits % 8 != 0 || bits / 8 != end - start {
            return Err(problem(format!(
                "{} × {shape:?} is {} bytes, but data_offsets [{start}, {end}] span {}",
                dtype.name(),
                bits.div_ceil(8),
                end - start
            )));
        }
        if end > data_len {
            return Err(problem(format!(
                "data_offsets [{start}, {end}] run past the data section ({data_len} bytes): the file is \
                 truncated, or its header is wrong"
            )));
        }
        spans.push((start, end, tensor.clone()));
        out.push(TensorEntry {
            name: tensor,
            dtype,
            shape,
            file,
            offset: data_start + start,
            len: end - start,
            held: None,
        });
    }
    // Contiguous and non-overlapping, as the format requires: every byte belongs to one
    // tensor, so no two tensors share data and nothing hides between them.
    spans.sort();
    let mut at = 0u64;
    for (start, end, tensor) in &spans {
        if *start != at {
            let problem = match spans.iter().find(|(s, e, t)| t != tensor && s < end && start < e) {
                Some((_, _, other)) => {
                    format!(
                        "its data_offsets [{start}, {end}] overlap tensor `{}`",
                        super::shown(other)
                    )
                }
                None => format!("its data starts at {start}, but the previous tensor ends at {at}"),
            };
            return Err(CheckpointError::Tensor {
                file: name.to_owned(),
                tensor: super::shown(tensor),
                problem,
            });
        }
        at = *end;
    }
    if at != data_len {
        return Err(CheckpointError::DataLength {
            file: name.to_owned(),
            expected: at,
            actual: data_len,
        });
    }
    Ok(())
}

/// A Hugging Face shard index: `{"metadata": {...}, "weight_map": {tensor: file}}`.
#[derive(serde::Deserialize)]
struct ShardIndex {
    weight_map: BTreeMap<String, String>,
}

/// Open every shard the index at `name` lists, check that each tensor it maps is in the file
/// it names, and append the index and the shards to `files`.
pub(super) fn open_sharded(
    dir: &Path,
    name: &str,
    files: &mut Vec<ArtifactFile>,
    tensors: &mut Vec<TensorEntry>,
) -> Result<(), CheckpointError> {
    let index_path = confined(dir, name)?;
    let text = crate::files::read_bounded(&index_path, MAX_JSON_BYTES)?;
    let index: ShardIndex = serde_json::from_str(&text).map_err(|e| CheckpointError::Json {
        file: name.to_owned(),
        problem: format!(
            "not a shard index (`weight_map` of tensor → file): {}",
            json_position(&e)
        ),
    })?;
    files.push(super::artifact(index_path.clone(), name)?);
    // Shards are named relative to the index's directory.
    let base = Path::new(name).parent().unwrap_or(Path::new(""));
    let shard_names: std::collections::BTreeSet<&String> = index.weight_map.values().collect();
    for shard in shard_names {
        if shard.contains('/') || shard.contains('\\') {
            return Err(CheckpointError::Json {
                file: name.to_owned(),
                problem: format!(
                    "shard `{}` is not a file name beside the index",
                    super::shown(shard)
                ),
            });
        }
        let relative = base.join(shard).display().to_string();
        let path = confined(dir, &relative)?;
        let before = tensors.len();
        read_headers(&path, &relative, files.len(), tensors)?;
        let found: std::collections::BTreeSet<&str> =
            tensors[before..].iter().map(|t| t.name.as_str()).collect();
        if let Some((tensor, _)) = index
            .weight_map
            .iter()
            .find(|(t, f)| *f == shard && !found.contains(t.as_str()))
        {
            return Err(CheckpointError::Tensor {
                file: relative,
                tensor: super::shown(tensor),
                problem: format!("the index `{name}` maps it here, but the shard has no such tensor"),
            });
        }
        files.push(super::artifact(path, &relative)?);
    }
    let mut names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(CheckpointError::Json {
            file: name.to_owned(),
            problem: format!("tensor `{}` is stored in two shards", super::shown(w[0])),
        });
    }
    Ok(())
}

/// Where a JSON parse failed and what kind of failure it was, without the parser's quote of
/// the offending value (the file is foreign; its content is not echoed).
pub(super) fn json_position(e: &serde_json::Error) -> String {
    let kind = match e.classify() {
        serde_json::error::Category::Io => "read error",
        serde_json::error::Category::Syntax => "syntax error",
        serde_json::error::Category::Data => "unexpected structure",
        serde_json::error::Category::Eof => "unexpected end",
    };
    format!("{kind} at line {} column {}", e.line(), e.column())
}
