//! Stage 2, graph lowering and kernel selection: for every op of a slice, the sparse kernel
//! or the dense fallback, and why. This is the *supported layer matrix* the memo shows.
//! Nothing here measures time.

use crate::ingress::{Backend, GemmOp, Precision, Slice, Sparsity};
use serde::{Deserialize, Serialize};

/// The kernel choice for every op of one slice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// One entry per op, in order.
    pub ops: Vec<OpPlan>,
}

/// How one op will run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpPlan {
    /// The op.
    pub op: GemmOp,
    /// The kernel path.
    pub path: KernelPath,
    /// Why this path: the supported feature, or the reason for falling back.
    pub reason: String,
}

/// Which kernel family runs an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KernelPath {
    /// The slice is dense by request: the dense kernel is the intended path.
    Dense,
    /// A sparse kernel takes the op.
    Sparse,
    /// The slice asked for sparsity this op cannot have: it runs dense, and counts as a
    /// fallback.
    DenseFallback,
}

impl Plan {
    /// Share of ops that fell back to dense; 0 for a dense slice.
    pub fn fallback_rate(&self) -> f64 {
        if self.ops.is_empty() {
            return 0.0;
        }
        let fallbacks = self
            .ops
            .iter()
            .filter(|o| o.path == KernelPath::DenseFallback)
            .count();
        fallbacks as f64 / self.ops.len() as f64
    }
}

/// Choose a kernel for every op of `slice`.
pub fn lower(slice: &Slice) -> Plan {
    Plan {
        ops: slice
            .ops
            .iter()
            .map(|op| {
                let (path, reason) = match (slice.backend, &slice.preset) {
                    (Backend::Sim, Some(preset)) => select_sim(preset, slice.precision, slice.sparsity, op),
                    _ => select(slice.precision, slice.sparsity, op),
                };
                OpPlan {
                    op: op.clone(),
                    path,
                    reason,
                }
            })
            .collect(),
    }
}

/// The simulated part's choice: its sparse math units take what the hardware pattern
/// contains; everything else is a counted dense fallback, with the simulator's reason.
fn select_sim(
    preset: &crate::sim::Preset,
    precision: Precision,
    sparsity: Sparsity,
    op: &GemmOp,
) -> (KernelPath, String) {
    use crate::sim::SimPath;
    match crate::sim::sparse::select(preset, sparsity, precision, op.k as u64) {
        SimPath::Dense => (
            KernelPath::Dense,
            format!("dense slice: {} dense tensor-core GEMM", preset.name),
        ),
        SimPath::Structured { hw_n, hw_m } => (
            KernelPath::Sparse,
            format!(
                "{} sparse math units, hardware pattern {hw_n}:{hw_m}",
                preset.name
            ),
        ),
        SimPath::Unstructured { action, format } => (
            KernelPath::Sparse,
            format!(
                "{} unstructured support ({format:?} format, {action:?})",
                preset.name
            ),
        ),
        SimPath::Fallback { reason } => (KernelPath::DenseFallback, format!("{}: {reason}", preset.name)),
    }
}

fn select(precision: Precision, sparsity: Sparsity, op: &GemmOp) -> (KernelPath, String) {
    match sparsity {
        Sparsity::Dense => (KernelPath::Dense, "dense slice: dense f32 GEMM".into()),
        _ if precision != Precision::Fp32 => (
            KernelPath::DenseFallback,
            format!(
                "no {} sparse CPU kernel; sparse kernels support fp32",
                precision.as_str()
            ),
        ),
        Sparsity::NOfM { n, m } if !op.k.is_multiple_of(m as usize) => (
            KernelPath::DenseFallback,
            format!("K = {} is not a multiple of the {n}:{m} group size {m}", op.k),
        ),
        Sparsity::NOfM { n, m } => (
            KernelPath::Sparse,
            format!("{n}:{m} structured kernel (compressed values, packed indices)"),
        ),
        Sparsity::Unstructured { .. } => (
            KernelPath::Sparse,
            "unstructured CSR kernel (f32 values, u32 column indices)".into(),
        ),
        Sparsity::Block { rows, cols, .. }
            if !op.n.is_multiple_of(rows as usize) || !op.k.is_multiple_of(cols as usize) =>
        {
            (
                KernelPath::DenseFallback,
                format!(
                    "{rows}x{cols} blocks do not tile the {}x{} weight (N must be a multiple of {rows}, K of {cols})",
                    op.n, op.k
                ),
            )
        }
        Sparsity::Block { rows, cols, .. } => (
            KernelPath::Sparse,
            format!("{rows}x{cols} block-sparse BSR kernel (u32 index per block)"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingress::pack::SamplePolicy;

    fn slice(sparsity: Sparsity, precision: Precision, ks: &[usize]) -> Slice {
        Slice {
            pack: "p".into(),
            id: "s".into(),
            ops: ks
                .iter()
                .map(|&k| GemmOp {
                    name: format!("k{k}"),
                    m: 8,
                    n: 8,
                    k,
                })
                .collect(),
            sparsity,
            precision,
            backend: Backend::Cpu,
            preset: None,
            guardrails: vec![],
            samples: SamplePolicy::default(),
            seed: 1,
            threads: 1,
        }
    }

    #[test]
    fn n_of_m_takes_the_sparse_path_only_when_k_divides() {
        let plan = lower(&slice(Sparsity::NOfM { n: 2, m: 4 }, Precision::Fp32, &[16, 18]));
        assert_eq!(plan.ops[0].path, KernelPath::Sparse);
        assert_eq!(plan.ops[1].path, KernelPath::DenseFallback);
        assert!(
            plan.ops[1].reason.contains("not a multiple"),
            "{}",
            plan.ops[1].reason
        );
        assert_eq!(plan.fallback_rate(), 0.5);
    }

    #[test]
    fn dense_slices_never_count_as_fallback() {
        let plan = lower(&slice(Sparsity::Dense, Precision::Fp32, &[16, 18]));
        assert_eq!(plan.fallback_rate(), 0.0);
    }

    #[test]
    fn issue_3_unstructured_runs_csr_and_blocks_run_bsr_when_they_tile() {
        let plan = lower(&slice(
            Sparsity::Unstructured { density: 0.1 },
            Precision::Fp32,
            &[18],
        ));
        assert_eq!(plan.ops[0].path, KernelPath::Sparse);
        assert!(plan.ops[0].reason.contains("CSR"));
        let block = Sparsity::Block {
            rows: 4,
            cols: 8,
            density: 0.1,
        };
        // N = 8 in the test slice; K = 16 tiles, K = 12 does not.
        let plan = lower(&slice(block, Precision::Fp32, &[16, 12]));
        assert_eq!(plan.ops[0].path, KernelPath::Sparse);
        assert_eq!(plan.ops[1].path, KernelPath::DenseFallback);
        assert!(
            plan.ops[1].reason.contains("do not tile"),
            "{}",
            plan.ops[1].reason
        );
    }

    #[test]
    fn unsupported_precision_falls_back_with_reason() {
        let plan = lower(&slice(Sparsity::NOfM { n: 2, m: 4 }, Precision::Bf16, &[16]));
        assert_eq!(plan.ops[0].path, KernelPath::DenseFallback);
        assert!(plan.ops[0].reason.contains("bf16"));
    }
}
