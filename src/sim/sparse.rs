//! What the hardware can exploit: for a requested sparsity, precision and shape, the
//! execution path (dense, structured N:M, unstructured gating/skipping, or a counted dense
//! fallback) and the fraction of the reduction the math units still walk.

use super::preset::{Compute, Preset, SparseAction, SparseFormat, Unstructured};
use crate::domain::{Precision, Sparsity};
use serde::Serialize;
use std::fmt;

/// How one GEMM runs on the simulated part.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum SimPath {
    /// Dense by request.
    Dense,
    /// Structured N:M on the sparse math units.
    Structured {
        /// The hardware pattern's kept values per group.
        hw_n: u32,
        /// The hardware pattern's group size.
        hw_m: u32,
    },
    /// Unstructured sparsity with gating or skipping.
    Unstructured {
        /// Gating or skipping.
        action: SparseAction,
        /// The sparse operand's format.
        format: SparseFormat,
    },
    /// Sparsity was asked for but the hardware cannot use it: dense math, counted.
    Fallback {
        /// Why.
        reason: FallbackReason,
    },
}

impl SimPath {
    /// Whether this path is a counted dense fallback.
    pub fn is_fallback(&self) -> bool {
        matches!(self, SimPath::Fallback { .. })
    }
}

/// Why a sparse request ran dense.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FallbackReason {
    /// No hardware N:M pattern contains the requested one at this precision.
    PatternUnsupported,
    /// K is not a multiple of the group size.
    ShapeNotAligned,
    /// The part has no unstructured-sparsity support.
    UnstructuredUnsupported,
    /// Block sparsity has no hardware path.
    BlockUnsupported,
}

impl fmt::Display for FallbackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FallbackReason::PatternUnsupported => {
                "no hardware N:M pattern at this precision contains the requested pattern"
            }
            FallbackReason::ShapeNotAligned => "K is not a multiple of the N:M group size",
            FallbackReason::UnstructuredUnsupported => "the part has no unstructured-sparsity support",
            FallbackReason::BlockUnsupported => "block sparsity has no hardware path on this part",
        })
    }
}

/// Whether every aligned window of `hw_m` values of an `n:m` matrix holds at most `hw_n`
/// nonzeros, i.e. the requested pattern is a special case of the hardware one (1:4 and 2:8
/// are valid 2:4; 4:8 is not).
pub fn nm_fits(n: u32, m: u32, hw_n: u32, hw_m: u32) -> bool {
    if m.is_multiple_of(hw_m) {
        n.min(hw_m) <= hw_n
    } else if hw_m.is_multiple_of(m) {
        u64::from(hw_m / m) * u64::from(n) <= u64::from(hw_n)
    } else {
        false
    }
}

/// Choose the path for `sparsity` at `precision` with reduction length `k`.
pub fn select(preset: &Preset, sparsity: Sparsity, precision: Precision, k: u64) -> SimPath {
    match sparsity {
        Sparsity::Dense => SimPath::Dense,
        Sparsity::NOfM { n, m } => {
            if let (Compute::Systolic(_), Some(block)) = (&preset.compute, preset.sparse.any_nm_block)
                && block.is_multiple_of(m)
            {
                // SCALE-Sim's ellpack-block mode compresses any N:M along K, ragged K padded.
                return SimPath::Structured { hw_n: n, hw_m: m };
            }
            let candidates = preset
                .sparse
                .structured
                .iter()
                .filter(|p| p.precisions.contains(&precision) && nm_fits(n, m, p.n, p.m));
            let mut misaligned = false;
            for p in candidates {
                if k.is_multiple_of(u64::from(p.m)) && k.is_multiple_of(u64::from(m)) {
                    return SimPath::Structured { hw_n: p.n, hw_m: p.m };
                }
                misaligned = true;
            }
            SimPath::Fallback {
                reason: if misaligned {
                    FallbackReason::ShapeNotAligned
                } else {
                    FallbackReason::PatternUnsupported
                },
            }
        }
        Sparsity::Unstructured { .. } => match preset.sparse.unstructured {
            Some(Unstructured { action, format, .. }) => SimPath::Unstructured { action, format },
            None => SimPath::Fallback {
                reason: FallbackReason::UnstructuredUnsupported,
            },
        },
        Sparsity::Block { .. } => SimPath::Fallback {
            reason: FallbackReason::BlockUnsupported,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_4_nm_containment_follows_the_hardware_window() {
        assert!(nm_fits(2, 4, 2, 4));
        assert!(nm_fits(1, 4, 2, 4));
        assert!(nm_fits(2, 8, 2, 4));
        assert!(nm_fits(1, 2, 2, 4));
        assert!(!nm_fits(4, 8, 2, 4));
        assert!(!nm_fits(3, 4, 2, 4));
        assert!(!nm_fits(2, 6, 2, 4));
        assert!(!nm_fits(2, 4, 1, 2));
    }
}
