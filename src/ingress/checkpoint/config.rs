//! A Hugging Face `config.json`: the model's sizes, checked for sanity, and the sparsity the
//! checkpoint claims, as llm-compressor / compressed-tensors write it
//! (`compression_config.sparsity_config` or `quantization_config.sparsity_config`:
//! `format`, `sparsity_structure`, `targets`, `ignore`).

use super::header::json_position;
use super::{CheckpointError, MAX_JSON_BYTES};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Largest size a config field may claim (layers, widths, heads).
const MAX_DIMENSION: u64 = 1 << 20;

/// What the gate reads of a `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelConfig {
    /// `model_type`, e.g. `llama`.
    pub model_type: Option<String>,
    /// `num_hidden_layers`.
    pub layers: Option<u64>,
    /// `hidden_size`.
    pub hidden: Option<u64>,
    /// `intermediate_size`.
    pub intermediate: Option<u64>,
    /// `num_attention_heads`.
    pub heads: Option<u64>,
    /// The sparsity the checkpoint claims, if its config says.
    pub sparsity: Option<SparsityClaim>,
}

/// `sparsity_config` of compressed-tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SparsityClaim {
    /// The storage format, e.g. `sparse-24-bitmask` or `dense`.
    #[serde(default)]
    pub format: Option<String>,
    /// The structure, e.g. `2:4` or `unstructured`.
    #[serde(default)]
    pub sparsity_structure: Option<String>,
    /// Modules it applies to: class names (`Linear`) or `re:` patterns over module names.
    #[serde(default)]
    pub targets: Vec<String>,
    /// Modules left dense: names or `re:` patterns.
    #[serde(default)]
    pub ignore: Vec<String>,
}

impl SparsityClaim {
    /// Whether the module (a tensor name without `.weight`) is left dense by `ignore`.
    pub fn ignores(&self, module: &str) -> bool {
        self.ignore.iter().any(|p| matches_module(p, module))
    }

    /// Whether the module is one of the `targets` (every Linear-like weight when a target
    /// is a class name: a checkpoint does not record module classes).
    pub fn targets(&self, module: &str) -> bool {
        self.targets.is_empty()
            || self
                .targets
                .iter()
                .any(|p| !p.starts_with("re:") || matches_module(p, module))
    }
}

/// compressed-tensors' rule: `re:<pattern>` matches from the start of the module name
/// (Python's `re.match`); anything else is an exact module name.
fn matches_module(pattern: &str, module: &str) -> bool {
    match pattern.strip_prefix("re:") {
        Some(re) => regex::Regex::new(&format!("^(?:{re})")).is_ok_and(|r| r.is_match(module)),
        None => pattern == module,
    }
}

#[derive(Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    num_hidden_layers: Option<serde_json::Value>,
    hidden_size: Option<serde_json::Value>,
    intermediate_size: Option<serde_json::Value>,
    num_attention_heads: Option<serde_json::Value>,
    compression_config: Option<Compression>,
    quantization_config: Option<Compression>,
}

#[derive(Deserialize)]
struct Compression {
    sparsity_config: Option<SparsityClaim>,
}

/// Read and check the config at `path` (named `name` in messages).
pub(super) fn read(path: &Path, name: &str) -> Result<ModelConfig, CheckpointError> {
    let text = crate::files::read_bounded(path, MAX_JSON_BYTES)?;
    let fail = |problem: String| CheckpointError::Json {
        file: name.to_owned(),
        problem,
    };
    let raw: RawConfig = serde_json::from_str(&text)
        .map_err(|e| fail(format!("not a model config: {}", json_position(&e))))?;
    let size = |key: &str, v: Option<serde_json::Value>| -> Result<Option<u64>, CheckpointError> {
        let Some(v) = v else { return Ok(None) };
        match v.as_u64() {
            Some(n) if (1..=MAX_DIMENSION).contains(&n) => Ok(Some(n)),
            _ => Err(fail(format!(
                "`{key}` must be a whole number in 1..={MAX_DIMENSION}"
            ))),
        }
    };
    let config = ModelConfig {
        model_type: raw.model_type,
        layers: size("num_hidden_layers", raw.num_hidden_layers)?,
        hidden: size("hidden_size", raw.hidden_size)?,
        intermediate: size("intermediate_size", raw.intermediate_size)?,
        heads: size("num_attention_heads", raw.num_attention_heads)?,
        sparsity: raw
            .compression_config
            .and_then(|c| c.sparsity_config)
            .or_else(|| raw.quantization_config.and_then(|c| c.sparsity_config)),
    };
    if let (Some(hidden), Some(heads)) = (config.hidden, config.heads)
        && hidden % heads != 0
    {
        return Err(fail(format!(
            "`hidden_size` {hidden} is not a multiple of `num_attention_heads` {heads}"
        )));
    }
    if let Some(re) = config
        .sparsity
        .iter()
        .flat_map(|s| s.ignore.iter().chain(&s.targets))
        .filter_map(|p| p.strip_prefix("re:"))
        .find(|re| regex::Regex::new(re).is_err())
    {
        return Err(fail(format!(
            "sparsity_config pattern `re:{}` is not a valid regular expression",
            super::shown(re)
        )));
    }
    Ok(config)
}
