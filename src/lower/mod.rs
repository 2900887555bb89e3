//! Stage 2, graph lowering and kernel selection: for every op of a slice, the sparse kernel
//! or the dense fallback, and why. This is the *supported layer matrix* the memo shows.
//! Nothing here measures time.

mod graph;

pub use graph::{NodePath, NodePlan};

use crate::domain::{GemmOp, Precision, Sparsity};
use sparsegate_kernels::isa::{Form, Operands, blocks_fit};
use sparsegate_kernels::precision::{F16_TILES_FROM_TOKENS, Half, widens_once_from};

use crate::ingress::Slice;
use serde::{Deserialize, Serialize};

/// The kernel choice for every op of one slice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Plan {
    /// One entry per op, in order.
    pub ops: Vec<OpPlan>,
    /// For an ONNX graph: every node that is not a GEMM with a readable weight, with how it
    /// runs (issue 21). Its GEMMs are in `ops`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub graph: Vec<NodePlan>,
}

/// How one op will run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// FLOPs of one iteration with every op dense: the work a speedup is measured on.
    pub fn dense_flops(&self) -> f64 {
        self.ops.iter().map(|p| p.op.dense_flops()).sum()
    }

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
    let graph = slice
        .checkpoint
        .as_ref()
        .and_then(|w| w.checkpoint.graph.as_ref());
    Plan {
        ops: slice
            .ops
            .iter()
            .map(|op| {
                let (path, mut reason) = match slice.backend.preset() {
                    Some(preset) => select_sim(preset, slice.precision, slice.sparsity, op),
                    None => select_cpu(slice.precision, slice.sparsity, op),
                };
                let tensor = crate::ingress::checkpoint::tensor_of(&op.name);
                if let Some(note) = graph.and_then(|g| graph::gemm_note(g, tensor)) {
                    reason = format!("{reason} ({note})");
                }
                OpPlan {
                    op: op.clone(),
                    path,
                    reason,
                }
            })
            .collect(),
        graph: graph.map(graph::nodes).unwrap_or_default(),
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

/// [`select`], with the storage conversion named for fp16/bf16 sparse kernels (bf16 and fp16
/// 2:4 and unstructured, and bf16 blocks of whole 16-row panels and K-pairs, have kernels of
/// their own).
fn select_cpu(precision: Precision, sparsity: Sparsity, op: &GemmOp) -> (KernelPath, String) {
    let (path, reason) = select(precision, sparsity, op);
    match precision {
        Precision::Bf16 if path == KernelPath::Sparse && sparsity == (Sparsity::NOfM { n: 2, m: 4 }) => (
            path,
            format!(
                "{reason}; bf16 2:4 compact kernel (bf16 values, 2-bit indices; {})",
                bf16_kernel()
            ),
        ),
        Precision::Fp16 if path == KernelPath::Sparse && sparsity == (Sparsity::NOfM { n: 2, m: 4 }) => (
            path,
            format!(
                "{reason}; fp16 2:4 compact kernel (f16 values, 2-bit indices; {})",
                f16_kernel()
            ),
        ),
        Precision::Bf16
            if path == KernelPath::Sparse
                && matches!(sparsity, Sparsity::Block { rows, cols, .. }
                    if blocks_fit(Operands::Bf16, rows as usize, cols as usize)) =>
        {
            (
                path,
                format!(
                    "{reason}; bf16 blocks on AMX tiles (each tile holding a kept block stored, \
                     the empty ones skipped) where they are granted and the width is 16s of K, from \
                     a few tokens; else as K-pairs of 16-row panels on vdpbf16ps where the dense \
                     comparator runs it, else widened to f32 panels"
                ),
            )
        }
        Precision::Fp16 | Precision::Bf16
            if path == KernelPath::Sparse && matches!(sparsity, Sparsity::Unstructured { .. }) =>
        {
            (
                path,
                format!(
                    "unstructured {} CSR (16-bit values, u16 column indices) widened in registers for \
                 f32 FMA where the CPU has AVX-512 and K ≤ 65536, else f32 values and u32 column \
                 indices",
                    precision.as_str()
                ),
            )
        }
        Precision::Fp16 | Precision::Bf16 if path == KernelPath::Sparse => (
            path,
            format!("{reason}; {} storage widened to f32 panels", precision.as_str()),
        ),
        _ => (path, reason),
    }
}

/// How the bf16 kernels multiply, which lowering cannot know for the machine that will run
/// them: the kernels measure whether `vdpbf16ps` outruns f32 FMA there (it ran at half the
/// FMA's FLOPs on an Emerald Rapids part), and the evidence records the path taken. Where
/// widening wins, from a few dozen tokens it widens the weights once (`widens_once_from`).
fn bf16_kernel() -> String {
    let (dense, two_four) = widen_once_counts(Half::Bf16);
    format!(
        "vdpbf16ps where the CPU has AVX-512 BF16 and it outruns f32 FMA, else below {dense} tokens \
         (2:4: {two_four}) bf16 streamed and widened in registers for f32 FMA where the CPU has AVX-512, else \
         widened to f32 panels once"
    )
}

/// How the f16 kernels multiply: no x86 instruction but AMX-FP16 multiplies f16 into f32
/// sums, so where the CPU has AMX-BF16 a product of enough tokens runs as three bf16 tile
/// products (each f16 split exactly into a bf16 `hi` and `lo`), otherwise the weights
/// stream as f16 and widen in registers, and from a few dozen tokens widen to f32 once
/// (`widens_once_from`).
fn f16_kernel() -> String {
    let (dense, two_four) = widen_once_counts(Half::F16);
    format!(
        "three bf16 products on AMX tiles (each f16 split into bf16 hi + lo) from {F16_TILES_FROM_TOKENS} \
         tokens (2:4 from 20) where the CPU has AMX-BF16, else below {dense} tokens (2:4: {two_four}) f16 streamed \
         and widened in registers for f32 FMA where the CPU has AVX-512, else widened to f32 panels once"
    )
}

/// The token counts from which dense and 2:4 `kind` products widen their weights once.
fn widen_once_counts(kind: Half) -> (usize, usize) {
    let from = |form| widens_once_from(kind, form).expect("dense and 2:4 16-bit products widen once");
    (from(Form::Dense), from(Form::TwoOfFour))
}

/// The dense kernel a precision runs on.
fn dense_kernel(precision: Precision) -> String {
    match precision {
        Precision::Fp32 => "dense f32 GEMM".into(),
        Precision::Fp16 => format!("dense fp16 GEMM ({})", f16_kernel()),
        Precision::Bf16 => format!("dense bf16 GEMM ({})", bf16_kernel()),
        Precision::Int8 => "dense int8 GEMM into i32".into(),
    }
}

fn select(precision: Precision, sparsity: Sparsity, op: &GemmOp) -> (KernelPath, String) {
    match sparsity {
        Sparsity::Dense => (
            KernelPath::Dense,
            format!("dense slice: {}", dense_kernel(precision)),
        ),
        Sparsity::NOfM { n, m } if precision == Precision::Int8 && op.k.is_multiple_of(m as usize) => (
            KernelPath::Sparse,
            if matches!((n, m), (2, 4) | (1, 2)) {
                format!(
                    "{n}:{m} as int8 2:4 on AMX tiles (kept values expanded into the tiles a K step \
                     at a time) from 8 tokens where they are granted; else compact 2:4 (i8 values, \
                     2-bit indices) on AVX-512 VNNI+VBMI, on Intel rebuilt into the dense VNNI \
                     kernel's lines by vpexpandb outside 2-12 tokens; else kept entries per row \
                     (u32 positions); exact i32 sums"
                )
            } else {
                format!("{n}:{m} as int8 kept entries per row (i8 values, u32 positions, exact i32 sums)")
            },
        ),
        Sparsity::Unstructured { .. } if precision == Precision::Int8 => (
            KernelPath::Sparse,
            "unstructured int8 kept entries per row (i8 values, u32 positions, exact i32 sums)".into(),
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
        Sparsity::Block { rows, cols, .. } if precision == Precision::Int8 => (
            KernelPath::Sparse,
            format!(
                "{rows}x{cols} int8 blocks on AMX tiles (each tile holding a kept block stored, the \
                 empty ones skipped) where they are granted, the height is whole 16-row panels and \
                 the width 16s of K, from a few tokens; else (i8 values, u32 column per block) on \
                 AVX-512 VNNI where the height is whole 16-row panels and the width whole quads, \
                 else kept entries per row (u32 positions); exact i32 sums"
            ),
        ),
        Sparsity::Block { rows, cols, .. } => (
            KernelPath::Sparse,
            format!("{rows}x{cols} block-sparse BSR kernel (u32 index per block)"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingress::SliceBackend;
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
            backend: SliceBackend::Kernels {
                weights: Default::default(),
            },
            guardrails: vec![],
            not_applicable: vec![],
            samples: SamplePolicy::default(),
            seed: 1,
            threads: 1,
            checkpoint: None,
            load: None,
        }
    }

    #[track_caller]
    fn assert_reason(op: &OpPlan, needle: &str) {
        assert!(op.reason.contains(needle), "{needle:?} not in {:?}", op.reason);
    }

    #[test]
    fn n_of_m_takes_the_sparse_path_only_when_k_divides() {
        let plan = lower(&slice(Sparsity::NOfM { n: 2, m: 4 }, Precision::Fp32, &[16, 18]));
        assert_eq!(plan.ops[0].path, KernelPath::Sparse);
        assert_eq!(plan.ops[1].path, KernelPath::DenseFallback);
        assert_reason(&plan.ops[1], "not a multiple");
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
        assert_reason(&plan.ops[0], "CSR");
        let block = Sparsity::Block {
            rows: 4,
            cols: 8,
            density: 0.1,
        };
        // N = 8 in the test slice; K = 16 tiles, K = 12 does not.
        let plan = lower(&slice(block, Precision::Fp32, &[16, 12]));
        assert_eq!(plan.ops[0].path, KernelPath::Sparse);
        assert_eq!(plan.ops[1].path, KernelPath::DenseFallback);
        assert_reason(&plan.ops[1], "do not tile");
    }

    /// Issue 20: int8 block sparsity runs sparse (it fell back to dense while int8 had no
    /// block kernel), and falls back only where the blocks do not tile.
    #[test]
    fn issue_20_int8_blocks_take_the_sparse_path_where_they_tile() {
        let block = Sparsity::Block {
            rows: 4,
            cols: 4,
            density: 0.5,
        };
        let plan = lower(&slice(block, Precision::Int8, &[16, 18]));
        assert_eq!(plan.ops[0].path, KernelPath::Sparse);
        assert_reason(&plan.ops[0], "int8 blocks");
        assert_eq!(plan.ops[1].path, KernelPath::DenseFallback);
        assert_reason(&plan.ops[1], "do not tile");
    }

    #[test]
    fn issue_3_reduced_precisions_take_the_sparse_kernels() {
        for p in [Precision::Fp16, Precision::Bf16, Precision::Int8] {
            let plan = lower(&slice(Sparsity::NOfM { n: 2, m: 4 }, p, &[16, 18]));
            assert_eq!(plan.ops[0].path, KernelPath::Sparse, "{p:?}");
            assert_eq!(plan.ops[1].path, KernelPath::DenseFallback, "{p:?}");
            let plan = lower(&slice(Sparsity::Unstructured { density: 0.5 }, p, &[16]));
            assert_eq!(plan.ops[0].path, KernelPath::Sparse, "{p:?}");
        }
        let plan = lower(&slice(Sparsity::NOfM { n: 2, m: 4 }, Precision::Fp16, &[16]));
        assert_reason(&plan.ops[0], "fp16");
    }

    /// Issue 20: bf16 blocks of whole 16-row panels and K-pairs name the bf16 kernel they
    /// run on; other block shapes say they widen.
    #[test]
    fn issue_20_bf16_blocks_name_the_kernel_they_run_on() {
        let block = |rows, cols| Sparsity::Block {
            rows,
            cols,
            density: 0.5,
        };
        let mut panels = slice(block(16, 16), Precision::Bf16, &[32]);
        panels.ops[0].n = 32;
        let plan = lower(&panels);
        assert_eq!(plan.ops[0].path, KernelPath::Sparse);
        assert_reason(&plan.ops[0], "K-pairs of 16-row panels on vdpbf16ps");
        let plan = lower(&slice(block(8, 16), Precision::Bf16, &[32]));
        assert_eq!(plan.ops[0].path, KernelPath::Sparse);
        assert_reason(&plan.ops[0], "bf16 storage widened to f32 panels");
    }

    /// Issue 20: 16-bit unstructured slices name the 16-bit CSR they run on, and when it
    /// does not (no AVX-512, K past 65536).
    #[test]
    fn issue_20_16_bit_unstructured_names_the_16_bit_csr() {
        for precision in [Precision::Bf16, Precision::Fp16] {
            let plan = lower(&slice(Sparsity::Unstructured { density: 0.1 }, precision, &[64]));
            assert_eq!(plan.ops[0].path, KernelPath::Sparse);
            assert_reason(
                &plan.ops[0],
                &format!("unstructured {} CSR (16-bit values", precision.as_str()),
            );
            assert_reason(&plan.ops[0], "K ≤ 65536, else f32 values");
        }
    }
}
