//! The six pipeline stages (DESIGN.md §1), as the memo names them.

use serde::{Deserialize, Serialize};

/// A stage of the pipeline; the memo's *first failing stage* is one of these.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// Loading, validating and expanding packs; capturing the environment.
    Ingress,
    /// Choosing sparse kernel or dense fallback per op.
    Lowering,
    /// Tiling, blocking and placement.
    Scheduling,
    /// Running kernels and collecting samples.
    Execution,
    /// Statistics against baselines and guardrail verdicts.
    Validation,
    /// The gate decision and its outputs.
    Release,
}

impl Stage {
    /// The lowercase name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Ingress => "ingress",
            Stage::Lowering => "lowering",
            Stage::Scheduling => "scheduling",
            Stage::Execution => "execution",
            Stage::Validation => "validation",
            Stage::Release => "release",
        }
    }
}

super::by_name::display_as!(Stage, as_str);
