//! One GEMM, in the convention the research tables use: M tokens, N output features, K input
//! (reduction) features.

use serde::{Deserialize, Serialize};

/// One GEMM of a workload, in the research-table convention (M tokens, N out, K in).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GemmOp {
    /// Layer name for the memo.
    pub name: String,
    /// Tokens.
    pub m: usize,
    /// Output features.
    pub n: usize,
    /// Input (reduction) features.
    pub k: usize,
}

impl GemmOp {
    /// Dense-equivalent floating-point operations: 2·M·N·K.
    pub fn dense_flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }

    /// The layer and token count of an op named `<layer>@<tokens>`, as a workload with
    /// several token counts names its ops; `None` for any other name.
    pub fn layer_at_tokens(&self) -> Option<(&str, u64)> {
        layer_at_tokens(&self.name)
    }
}

/// [`GemmOp::layer_at_tokens`] of a bare op name.
pub fn layer_at_tokens(name: &str) -> Option<(&str, u64)> {
    let (layer, tokens) = name.rsplit_once('@')?;
    if layer.is_empty() || tokens.is_empty() || !tokens.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((layer, tokens.parse().ok()?))
}
