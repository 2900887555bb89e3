//! A Hugging Face `config.json`: the model's sizes, checked for sanity, and the sparsity the
//! checkpoint claims, as llm-compressor / compressed-tensors write it
//! (`compression_config.sparsity_config` or `quantization_config.sparsity_config`:
//! `format`, `sparsity_structure`, `targets`, `ignore`).
//!
//! A config that is missing its depth or width, or whose sizes are absurd (zero, negative,
//! fractional, past what any published model uses, a width that does not split into its
//! heads), is refused with the field's `line:col` in the file, what was expected and a hint
//! (issue 21). Nothing is allocated from a size the config claims.

use super::header::json_position;
use super::locate::value_position;
use super::{CheckpointError, MAX_JSON_BYTES};
use crate::domain::Sparsity;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::Path;

/// What the gate reads of a `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelConfig {
    /// `model_type`, e.g. `llama`.
    pub model_type: Option<String>,
    /// `num_hidden_layers` (or `n_layer`, `num_layers`).
    pub layers: u64,
    /// `hidden_size` (or `n_embd`, `d_model`).
    pub hidden: u64,
    /// `intermediate_size` (or `n_inner`, `d_ff`, `ffn_dim`).
    pub intermediate: Option<u64>,
    /// `num_attention_heads` (or `n_head`, `num_heads`).
    pub heads: Option<u64>,
    /// `num_key_value_heads` (grouped-query attention).
    pub kv_heads: Option<u64>,
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
    /// `sparsity_structure` read, with where the config says it.
    #[serde(skip_deserializing)]
    pub structure: Option<Claimed>,
}

/// A `sparsity_structure` as the gate reads it, and where the config wrote it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Claimed {
    /// The structure.
    pub structure: ClaimedStructure,
    /// `file:line:col` of the value (`file` alone when it cannot be located).
    pub at: String,
}

/// What a config says the targeted weights hold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum ClaimedStructure {
    /// N of every M consecutive weights along in_features (`2:4`, `8:16`).
    NOfM {
        /// Kept per group.
        n: u32,
        /// Group size.
        m: u32,
    },
    /// Pruned without a structure (`unstructured`): nothing per group to verify.
    Unstructured,
    /// No structure claimed (`0:0`, what compressed-tensors writes when it inferred none).
    Unspecified,
}

impl std::fmt::Display for ClaimedStructure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClaimedStructure::NOfM { n, m } => write!(f, "{n}:{m}"),
            ClaimedStructure::Unstructured => f.write_str("unstructured"),
            ClaimedStructure::Unspecified => f.write_str("0:0"),
        }
    }
}

impl ClaimedStructure {
    /// The pattern each targeted tensor must hold, where the claim names one.
    pub fn pattern(self) -> Option<Sparsity> {
        match self {
            ClaimedStructure::NOfM { n, m } => Some(Sparsity::NOfM { n, m }),
            ClaimedStructure::Unstructured | ClaimedStructure::Unspecified => None,
        }
    }

    /// Whether weights that hold this claim also hold the slice's `pattern`, so that a pack
    /// testing `pattern` agrees with the config. `dense` (timing the weights as stored)
    /// agrees with every claim; an N:M claim implies a coarser or looser N':M' whose groups
    /// tile or nest in its own, and an unstructured density at least its N/M; a claim of
    /// `unstructured` implies no structure at all. `0:0` claims nothing, so nothing
    /// contradicts it.
    pub fn admits(self, pattern: Sparsity) -> bool {
        match (self, pattern) {
            (_, Sparsity::Dense) | (ClaimedStructure::Unspecified, _) => true,
            (ClaimedStructure::NOfM { n, m }, Sparsity::NOfM { n: n2, m: m2 }) => {
                // Groups of m2 made of whole claimed groups keep at most n per m.
                (m2 % m == 0 && u64::from(n) * u64::from(m2 / m) <= u64::from(n2))
                    // Groups of m2 inside one claimed group keep at most min(n, m2).
                    || (m % m2 == 0 && n.min(m2) <= n2)
            }
            (ClaimedStructure::NOfM { n, m }, Sparsity::Unstructured { density }) => {
                f64::from(n) / f64::from(m) <= density
            }
            (ClaimedStructure::Unstructured, Sparsity::Unstructured { .. }) => true,
            (ClaimedStructure::NOfM { .. } | ClaimedStructure::Unstructured, _) => false,
        }
    }
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

/// A size field: the names transformers' model families give it (LLaMA's first, then
/// GPT-2's, T5's, OPT's), the largest value taken as real, and what to say about it.
struct SizeField {
    keys: &'static [&'static str],
    max: u64,
    hint: &'static str,
}

/// The deepest published decoders have under 200 blocks (LLaMA-3.1-405B: 126).
const LAYERS: SizeField = SizeField {
    keys: &["num_hidden_layers", "n_layer", "num_layers"],
    max: 4096,
    hint: "`num_hidden_layers` counts the transformer blocks (32 for LLaMA-2-7B, 126 for LLaMA-3.1-405B)",
};
/// The widest published models are under 32k wide (LLaMA-3.1-405B: 16384).
const HIDDEN: SizeField = SizeField {
    keys: &["hidden_size", "n_embd", "d_model"],
    max: 1 << 18,
    hint: "`hidden_size` is the model width (4096 for LLaMA-2-7B, 16384 for LLaMA-3.1-405B), a multiple of `num_attention_heads`",
};
const INTERMEDIATE: SizeField = SizeField {
    keys: &["intermediate_size", "n_inner", "d_ff", "ffn_dim"],
    max: 1 << 20,
    hint: "`intermediate_size` is the MLP's inner width (11008 for LLaMA-2-7B, 53248 for LLaMA-3.1-405B)",
};
const HEADS: SizeField = SizeField {
    keys: &["num_attention_heads", "n_head", "num_heads"],
    max: 1 << 16,
    hint: "`num_attention_heads` must divide `hidden_size` (32 heads of 128 for LLaMA-2-7B)",
};
const KV_HEADS: SizeField = SizeField {
    keys: &["num_key_value_heads"],
    max: 1 << 16,
    hint: "`num_key_value_heads` must divide `num_attention_heads` (8 for LLaMA-2-70B's 64 heads)",
};

/// Weights the sizes may imply together, `layers · (4·hidden² + 3·hidden·intermediate)`:
/// ten times the largest published dense models' ~10^12.
const MAX_IMPLIED_WEIGHTS: u128 = 10_000_000_000_000;

const HINT_MISSING: &str = "a transformers config names the model's depth and width (`save_pretrained` writes them); re-save it, or drop `config:` from the pack";
const HINT_SPARSITY: &str = "compressed-tensors writes `sparsity_config` as {format, sparsity_structure, targets, ignore}: strings, and lists of strings";
const HINT_STRUCTURE: &str = "compressed-tensors writes `sparsity_structure` as `2:4` (or another `N:M`), `unstructured`, or `0:0` when it claims none";

/// The config's text and name, for located errors.
struct Fields<'a> {
    text: &'a str,
    file: &'a str,
}

impl Fields<'_> {
    /// `:line:col` of the value at `path`, or nothing when it cannot be located.
    fn at(&self, path: &[&str]) -> String {
        value_position(self.text, path).map_or_else(String::new, |(l, c)| format!(":{l}:{c}"))
    }

    fn error(&self, path: &[&str], problem: String, hint: &'static str) -> CheckpointError {
        CheckpointError::Config {
            file: self.file.to_owned(),
            at: self.at(path),
            problem,
            hint,
        }
    }

    /// The first of `field`'s keys the config gives (`null` is not given), checked to be a
    /// whole number in `1..=max`; with the key it was read from.
    fn size(
        &self,
        map: &Map<String, Value>,
        field: &SizeField,
    ) -> Result<Option<(u64, &'static str)>, CheckpointError> {
        let Some((key, value)) = field
            .keys
            .iter()
            .find_map(|&k| map.get(k).filter(|v| !v.is_null()).map(|v| (k, v)))
        else {
            return Ok(None);
        };
        match value.as_u64() {
            Some(n) if (1..=field.max).contains(&n) => Ok(Some((n, key))),
            _ => Err(self.error(
                &[key],
                format!(
                    "`{key}` is {}; expected a whole number in 1..={}",
                    describe(value),
                    field.max
                ),
                field.hint,
            )),
        }
    }

    /// Like [`Fields::size`], for a field every model config has.
    fn required(
        &self,
        map: &Map<String, Value>,
        field: &SizeField,
    ) -> Result<(u64, &'static str), CheckpointError> {
        self.size(map, field)?.ok_or_else(|| CheckpointError::Config {
            file: self.file.to_owned(),
            at: String::new(),
            problem: format!(
                "`{}` is missing (nor is it given as {}); expected a whole number in 1..={}",
                field.keys[0],
                field.keys[1..]
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(" or "),
                field.max
            ),
            hint: HINT_MISSING,
        })
    }
}

/// What a foreign value is, in words: numbers as read (they are not content to hide), every
/// other kind by its kind.
fn describe(v: &Value) -> String {
    match v {
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.to_string(),
            (_, Some(i), _) => i.to_string(),
            (_, _, Some(f)) if f.is_finite() && f.fract() == 0.0 => {
                format!("{f:e}, past what 64 bits hold")
            }
            _ => "a fraction".into(),
        },
        Value::String(_) => "a string".into(),
        Value::Bool(b) => b.to_string(),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
        Value::Null => "null".into(),
    }
}

/// A `sparsity_structure` value; `None` when it is none of compressed-tensors' forms.
fn parse_structure(s: &str) -> Option<ClaimedStructure> {
    let s = s.trim().to_ascii_lowercase();
    match s.as_str() {
        "unstructured" => Some(ClaimedStructure::Unstructured),
        "0:0" => Some(ClaimedStructure::Unspecified),
        _ => match s.parse::<Sparsity>() {
            Ok(Sparsity::NOfM { n, m }) => Some(ClaimedStructure::NOfM { n, m }),
            _ => None,
        },
    }
}

/// Read and check the config at `path` (named `name` in messages).
pub(super) fn read(path: &Path, name: &str) -> Result<ModelConfig, CheckpointError> {
    let text = crate::files::read_bounded(path, MAX_JSON_BYTES)?;
    let map: Map<String, Value> = serde_json::from_str(&text).map_err(|e| CheckpointError::Json {
        file: name.to_owned(),
        problem: format!("not a model config (a JSON object): {}", json_position(&e)),
    })?;
    let fields = Fields {
        text: &text,
        file: name,
    };
    let (layers, layers_key) = fields.required(&map, &LAYERS)?;
    let (hidden, hidden_key) = fields.required(&map, &HIDDEN)?;
    let intermediate = fields.size(&map, &INTERMEDIATE)?;
    let heads = fields.size(&map, &HEADS)?;
    let kv_heads = fields.size(&map, &KV_HEADS)?;
    if let Some((heads, key)) = heads
        && hidden % heads != 0
    {
        return Err(fields.error(
            &[key],
            format!("`{key}` {heads} does not divide `{hidden_key}` {hidden}; expected the width to split into whole heads"),
            HEADS.hint,
        ));
    }
    if let Some((kv, key)) = kv_heads {
        let heads = heads.map(|(h, _)| h);
        if heads.is_none_or(|h| h % kv != 0) {
            return Err(fields.error(
                &[key],
                match heads {
                    Some(h) => format!(
                        "`{key}` {kv} does not divide `num_attention_heads` {h}; expected each key/value head to serve a whole group of query heads"
                    ),
                    None => format!("`{key}` is given without `num_attention_heads`; expected both"),
                },
                KV_HEADS.hint,
            ));
        }
    }
    // Each size may be plausible and their product not: nothing real has 10^13 weights.
    let inner = intermediate.map_or(4 * u128::from(hidden), |(i, _)| u128::from(i));
    let h = u128::from(hidden);
    let implied = u128::from(layers) * (4 * h * h + 3 * h * inner);
    if implied > MAX_IMPLIED_WEIGHTS {
        return Err(fields.error(
            &[layers_key],
            format!(
                "`{layers_key}` {layers} blocks of width {hidden}{} imply {implied:.1e} weights; expected at most {:.0e} (ten times the largest published model)",
                intermediate.map_or_else(String::new, |(i, k)| format!(" and `{k}` {i}")),
                MAX_IMPLIED_WEIGHTS as f64,
                implied = implied as f64,
            ),
            LAYERS.hint,
        ));
    }
    let mut sparsity = None;
    for section in ["compression_config", "quantization_config"] {
        let Some(value) = map.get(section).filter(|v| !v.is_null()) else {
            continue;
        };
        let Some(object) = value.as_object() else {
            return Err(fields.error(
                &[section],
                format!("`{section}` is {}; expected an object", describe(value)),
                HINT_SPARSITY,
            ));
        };
        let Some(raw) = object.get("sparsity_config").filter(|v| !v.is_null()) else {
            continue;
        };
        let mut claim: SparsityClaim = serde_json::from_value(raw.clone()).map_err(|_| {
            fields.error(
                &[section, "sparsity_config"],
                format!(
                    "`{section}.sparsity_config` is not what compressed-tensors writes; expected {{format, sparsity_structure, targets, ignore}}: strings, and lists of strings"
                ),
                HINT_SPARSITY,
            )
        })?;
        if let Some(written) = &claim.sparsity_structure {
            let path = [section, "sparsity_config", "sparsity_structure"];
            let structure = parse_structure(written).ok_or_else(|| {
                fields.error(
                    &path,
                    format!(
                        "`sparsity_structure` `{}` is not a structure; expected `N:M` with 0 < N < M ≤ 32 (e.g. `2:4`), `unstructured` or `0:0`",
                        super::shown(written)
                    ),
                    HINT_STRUCTURE,
                )
            })?;
            claim.structure = Some(Claimed {
                structure,
                at: format!("{name}{}", fields.at(&path)),
            });
        }
        if let Some((list, re)) = ["ignore", "targets"].iter().find_map(|&list| {
            let patterns = if list == "ignore" {
                &claim.ignore
            } else {
                &claim.targets
            };
            patterns
                .iter()
                .filter_map(|p| p.strip_prefix("re:"))
                .find(|re| regex::Regex::new(re).is_err())
                .map(|re| (list, re))
        }) {
            return Err(fields.error(
                &[section, "sparsity_config", list],
                format!(
                    "sparsity_config pattern `re:{}` is not a valid regular expression",
                    super::shown(re)
                ),
                "`re:` patterns are regular expressions over module names, e.g. `re:.*o_proj`",
            ));
        }
        sparsity = Some(claim);
        break;
    }
    Ok(ModelConfig {
        model_type: map.get("model_type").and_then(Value::as_str).map(str::to_owned),
        layers,
        hidden,
        intermediate: intermediate.map(|(i, _)| i),
        heads: heads.map(|(h, _)| h),
        kv_heads: kv_heads.map(|(k, _)| k),
        sparsity,
    })
}

#[cfg(test)]
mod tests {
    use super::{ClaimedStructure, parse_structure};
    use crate::domain::Sparsity;

    #[test]
    fn a_claim_admits_exactly_the_patterns_its_weights_must_hold() {
        let two_four = ClaimedStructure::NOfM { n: 2, m: 4 };
        let nm = |n, m| Sparsity::NOfM { n, m };
        // Coarser groups made of whole claimed groups: 2:4 → 4:8, 8:16; not 3:8.
        assert!(two_four.admits(nm(2, 4)) && two_four.admits(nm(4, 8)) && two_four.admits(nm(8, 16)));
        assert!(!two_four.admits(nm(3, 8)));
        // Finer groups inside a claimed group: 2:8 → 2:4 (a half keeps at most 2), 1:4 no.
        assert!(ClaimedStructure::NOfM { n: 2, m: 8 }.admits(nm(2, 4)));
        assert!(!two_four.admits(nm(1, 4)) && !two_four.admits(nm(1, 2)));
        // Groups that neither tile nor nest: 2:4 → 3:6 can break (2 + 2 in one group of 6).
        assert!(!two_four.admits(nm(3, 6)));
        assert!(two_four.admits(Sparsity::Dense));
        assert!(two_four.admits(Sparsity::Unstructured { density: 0.5 }));
        assert!(!two_four.admits(Sparsity::Unstructured { density: 0.25 }));
        let block = Sparsity::Block {
            rows: 2,
            cols: 2,
            density: 0.5,
        };
        assert!(!two_four.admits(block));
        assert!(!ClaimedStructure::Unstructured.admits(nm(2, 4)));
        assert!(ClaimedStructure::Unstructured.admits(Sparsity::Unstructured { density: 0.1 }));
        assert!(ClaimedStructure::Unspecified.admits(nm(2, 4)));
    }

    #[test]
    fn sparsity_structures_read_as_compressed_tensors_writes_them() {
        assert_eq!(
            parse_structure("2:4"),
            Some(ClaimedStructure::NOfM { n: 2, m: 4 })
        );
        assert_eq!(
            parse_structure("8:16"),
            Some(ClaimedStructure::NOfM { n: 8, m: 16 })
        );
        assert_eq!(
            parse_structure("Unstructured"),
            Some(ClaimedStructure::Unstructured)
        );
        assert_eq!(parse_structure("0:0"), Some(ClaimedStructure::Unspecified));
        for bad in ["4:2", "0:4", "dense", "2:4:8", "", "two-four", "unstructured:0.5"] {
            assert_eq!(parse_structure(bad), None, "{bad}");
        }
    }
}
