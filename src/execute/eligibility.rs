//! Whether a shipped tensor could run on the 2:4 path of a real stack (issue 21): the
//! documented rules of PyTorch's semi-structured sparsity (`torch.sparse.semi_structured`,
//! `to_sparse_semi_structured`), per backend. Its `_DTYPE_SHAPE_CONSTRAINTS` give, per
//! dtype, the smallest sparse operand (`sparse_min_rows`, `sparse_min_cols`); the weight's
//! rows and columns must each be at least that and a multiple of it, its dtype must be one
//! the backend lists, and its values must hold 2:4 along the rows. A tensor that fails any
//! of these stays dense on that stack, whatever the checkpoint claims.

use crate::domain::{Precision, Sparsity};
use serde::{Deserialize, Serialize};

/// One stack's verdict on one tensor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StackEligibility {
    /// The stack, e.g. `torch-cutlass`.
    pub stack: String,
    /// Whether the tensor would take its 2:4 kernel.
    pub sparse: bool,
    /// Why not (or which rule it met).
    pub reason: String,
}

/// A backend's `(precision, sparse_min_rows, sparse_min_cols)` table.
struct Stack {
    name: &'static str,
    shapes: &'static [(Precision, u64, u64)],
}

/// `SparseSemiStructuredTensorCUTLASS` and `SparseSemiStructuredTensorCUSPARSELT`
/// (torch/sparse/semi_structured.py, PyTorch 2.1 to 2.5; cuSPARSELt's fp32 entry was
/// dropped later, so fp32 is listed for CUTLASS only).
const STACKS: &[Stack] = &[
    Stack {
        name: "torch-cutlass",
        shapes: &[
            (Precision::Int8, 16, 128),
            (Precision::Fp16, 32, 64),
            (Precision::Bf16, 32, 64),
            (Precision::Fp32, 32, 32),
        ],
    },
    Stack {
        name: "torch-cusparselt",
        shapes: &[
            (Precision::Int8, 32, 32),
            (Precision::Fp16, 16, 16),
            (Precision::Bf16, 16, 16),
        ],
    },
];

/// Each stack's verdict on a `rows × cols` weight run at `precision`, whose values were
/// checked against `pattern` with `violations` breaking groups.
pub fn judge(
    rows: u64,
    cols: u64,
    precision: Precision,
    pattern: Sparsity,
    violations: u64,
) -> Vec<StackEligibility> {
    STACKS
        .iter()
        .map(|stack| {
            let verdict = |sparse: bool, reason: String| StackEligibility {
                stack: stack.name.to_owned(),
                sparse,
                reason,
            };
            if pattern != (Sparsity::NOfM { n: 2, m: 4 }) {
                return verdict(
                    false,
                    format!("only 2:4 is semi-structured; the claim is {pattern}"),
                );
            }
            let Some(&(_, min_rows, min_cols)) = stack.shapes.iter().find(|(p, _, _)| *p == precision) else {
                return verdict(
                    false,
                    format!("{} is not a dtype it supports", precision.as_str()),
                );
            };
            let fits = |d: u64, min: u64| d >= min && d.is_multiple_of(min);
            if !fits(rows, min_rows) || !fits(cols, min_cols) {
                return verdict(
                    false,
                    format!(
                        "{rows}×{cols} is not a multiple of its {min_rows}×{min_cols} minimum for {}",
                        precision.as_str()
                    ),
                );
            }
            if violations > 0 {
                return verdict(
                    false,
                    format!(
                        "{violations} group{} 2:4",
                        if violations == 1 { " breaks" } else { "s break" }
                    ),
                );
            }
            verdict(
                true,
                format!("2:4, {rows}×{cols} a multiple of {min_rows}×{min_cols}"),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_OF_FOUR: Sparsity = Sparsity::NOfM { n: 2, m: 4 };

    #[test]
    fn issue_21_torch_semi_structured_shape_and_dtype_rules_decide_the_path() {
        let at = |rows, cols, p, v| -> Vec<(String, bool)> {
            judge(rows, cols, p, TWO_OF_FOUR, v)
                .into_iter()
                .map(|e| (e.stack, e.sparse))
                .collect()
        };
        let both = |a, b| {
            vec![
                ("torch-cutlass".to_owned(), a),
                ("torch-cusparselt".to_owned(), b),
            ]
        };
        // 4096×4096 fp16: both backends.
        assert_eq!(at(4096, 4096, Precision::Fp16, 0), both(true, true));
        // 48 rows: a multiple of cuSPARSELt's 16, not of CUTLASS's 32.
        assert_eq!(at(48, 64, Precision::Fp16, 0), both(false, true));
        // int8 needs 128 columns on CUTLASS.
        assert_eq!(at(64, 64, Precision::Int8, 0), both(false, true));
        // fp32: CUTLASS only.
        assert_eq!(at(64, 64, Precision::Fp32, 0), both(true, false));
        // A broken group keeps it dense everywhere, and says so.
        let broken = judge(4096, 4096, Precision::Fp16, TWO_OF_FOUR, 3);
        assert!(
            broken
                .iter()
                .all(|e| !e.sparse && e.reason == "3 groups break 2:4")
        );
        let unstructured = judge(
            64,
            64,
            Precision::Fp16,
            Sparsity::Unstructured { density: 0.5 },
            0,
        );
        assert!(
            unstructured
                .iter()
                .all(|e| !e.sparse && e.reason.starts_with("only 2:4"))
        );
    }
}
