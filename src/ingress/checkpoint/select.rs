//! Which tensors of a checkpoint are a slice's ops: the 2-D `.weight` tensors whose names
//! match the pack's `layers` pattern, minus those the config's `sparsity_config` leaves
//! dense (`ignore`, or outside `targets`), which are listed but not run sparse.

use super::{Checkpoint, CheckpointError, Dtype, TensorEntry};
use crate::domain::GemmOp;
use serde::Serialize;

/// A checkpoint resolved into a slice's workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointWorkload {
    /// The checkpoint, headers checked and files digested.
    pub checkpoint: Checkpoint,
    /// The tensors that are the slice's ops, in name order.
    pub layers: Vec<String>,
    /// Matching tensors the config leaves dense, with why.
    pub left_dense: Vec<(String, String)>,
    /// The token counts (ascending, each once): every layer is an op at each.
    pub tokens: Vec<u64>,
    /// The classifier evaluation the pack names, checked at ingress (`eval`).
    pub eval: Option<super::eval::Evaluation>,
}

impl CheckpointWorkload {
    /// The slice's ops: one GEMM per layer and token count, `N×K` from the tensor's `[out,
    /// in]` shape (M = tokens, times the output positions of a graph's Conv). With one
    /// token count an op is named after its tensor; with several, `<tensor>@<tokens>`
    /// ([`tensor_of`] reads the tensor back).
    pub fn ops(&self) -> Vec<GemmOp> {
        let several = self.tokens.len() > 1;
        self.layers
            .iter()
            .filter_map(|name| self.checkpoint.tensor(name))
            .flat_map(|t| {
                let rows = self
                    .checkpoint
                    .graph
                    .as_ref()
                    .and_then(|g| g.gemm_of(&t.name))
                    .map_or(1, |(_, gemm)| gemm.rows_per_token);
                self.tokens
                    .iter()
                    .map(move |&tokens| (t, tokens, tokens.saturating_mul(rows)))
            })
            .map(|(t, tokens, m)| GemmOp {
                name: if several {
                    format!("{}@{tokens}", t.name)
                } else {
                    t.name.clone()
                },
                m: usize::try_from(m).unwrap_or(usize::MAX),
                n: usize::try_from(t.shape[0]).unwrap_or(usize::MAX),
                k: usize::try_from(t.shape[1]).unwrap_or(usize::MAX),
            })
            .collect()
    }
}

/// The tensor an op of a checkpoint slice runs: its name without the `@<tokens>` that
/// [`CheckpointWorkload::ops`] appends when the slice has several token counts.
pub fn tensor_of(op: &str) -> &str {
    crate::domain::gemm::layer_at_tokens(op).map_or(op, |(tensor, _)| tensor)
}

/// Why no tensor could be selected.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    /// The pattern matched nothing the CPU can run.
    #[error(
        "no GEMM weight of the checkpoint (a 2-D f32, f16, bf16 or int8 `.weight` tensor, or a graph GEMM's initializer) matches `{pattern}` ({tensors} tensors in all)"
    )]
    NoMatch {
        /// The pattern.
        pattern: String,
        /// Tensors in the checkpoint.
        tensors: usize,
    },
    /// The block names neither `weights` nor `graph`.
    #[error("the checkpoint names neither `weights` nor `graph`")]
    NoSource,
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters.
pub fn matches_glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = (parts[0], &parts[1..]);
    let Some(mut tail) = name.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return tail.is_empty();
    };
    for part in middle {
        match tail.find(part) {
            Some(i) => tail = &tail[i + part.len()..],
            None => return false,
        }
    }
    tail.ends_with(last)
}

fn runnable(t: &TensorEntry) -> bool {
    t.shape.len() == 2
        && t.shape.iter().all(|&d| d > 0)
        && t.name.ends_with(".weight")
        && matches!(t.dtype, Dtype::F32 | Dtype::F16 | Dtype::Bf16 | Dtype::I8)
}

/// Select the slice's layers of `checkpoint`.
pub fn select(
    checkpoint: Checkpoint,
    layers: Option<&str>,
    tokens: Vec<u64>,
) -> Result<CheckpointWorkload, SelectError> {
    let claim = checkpoint.config.as_ref().and_then(|c| c.sparsity.as_ref());
    let mut chosen = Vec::new();
    let mut left_dense = Vec::new();
    // A graph's tensors are its GEMMs' weights, whatever their names.
    let from_graph = checkpoint.graph.is_some();
    for t in checkpoint.tensors.iter().filter(|t| from_graph || runnable(t)) {
        if !layers.is_none_or(|p| matches_glob(p, &t.name)) {
            continue;
        }
        let module = t.name.strip_suffix(".weight").unwrap_or(&t.name);
        match claim {
            Some(c) if c.ignores(module) => left_dense.push((
                t.name.clone(),
                "in the config's sparsity_config.ignore".to_owned(),
            )),
            Some(c) if !c.targets(module) => left_dense.push((
                t.name.clone(),
                "not in the config's sparsity_config.targets".to_owned(),
            )),
            _ => chosen.push(t.name.clone()),
        }
    }
    if chosen.is_empty() {
        return Err(SelectError::NoMatch {
            pattern: layers.unwrap_or("*").to_owned(),
            tensors: checkpoint.tensors.len(),
        });
    }
    Ok(CheckpointWorkload {
        checkpoint,
        layers: chosen,
        left_dense,
        tokens,
        eval: None,
    })
}

/// Open and select in one step, for the semantic checks.
pub fn open_workload(
    dir: &std::path::Path,
    spec: &crate::ingress::pack::CheckpointSpec,
) -> Result<CheckpointWorkload, OpenError> {
    let source = match (&spec.graph, &spec.weights) {
        (Some(graph), _) => super::Source::Graph(graph),
        (None, Some(weights)) => super::Source::Weights(weights),
        // Semantic checks refuse a block naming neither before opening it.
        (None, None) => return Err(SelectError::NoSource.into()),
    };
    let checkpoint = Checkpoint::open(dir, source, spec.config.as_deref())?;
    Ok(select(checkpoint, spec.layers.as_deref(), spec.tokens.counts())?)
}

/// Opening or selecting failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A file of the checkpoint is malformed.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Nothing matched.
    #[error(transparent)]
    Select(#[from] SelectError),
}

#[cfg(test)]
mod tests {
    use super::{matches_glob, tensor_of};

    #[test]
    fn op_names_of_several_token_counts_name_their_tensor() {
        assert_eq!(
            tensor_of("model.layers.0.mlp.up_proj.weight@16"),
            "model.layers.0.mlp.up_proj.weight"
        );
        assert_eq!(
            tensor_of("model.layers.0.mlp.up_proj.weight"),
            "model.layers.0.mlp.up_proj.weight"
        );
        // Only a trailing `@<digits>` is a token count.
        assert_eq!(tensor_of("odd@name.weight"), "odd@name.weight");
        assert_eq!(tensor_of("odd@"), "odd@");
    }

    #[test]
    fn layer_patterns_match_as_globs() {
        assert!(matches_glob(
            "model.layers.*.mlp.*",
            "model.layers.0.mlp.up_proj.weight"
        ));
        assert!(!matches_glob(
            "model.layers.*.mlp.*",
            "model.layers.0.self_attn.q_proj.weight"
        ));
        assert!(matches_glob("*", "anything"));
        assert!(matches_glob("a.weight", "a.weight"));
        assert!(!matches_glob("a.weight", "ba.weight"));
        assert!(matches_glob(
            "*up_proj.weight",
            "model.layers.1.mlp.up_proj.weight"
        ));
        assert!(!matches_glob("*.bias", "x.weight"));
    }
}
