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
}
