//! `backend: cpu`: the built-in CPU kernels, timed on this machine. Its settings (kernels,
//! serving loop or model task, and the weight distribution) follow from the slice's
//! workload, so the expansion builds them per cell, and it has no block of its own.

use super::{Metric, Precision, Rules};

pub(super) const RULES: Rules = Rules {
    name: "cpu",
    runs_workload: true,
    block: None,
    measures: |metric| {
        metric.is_speed()
            || matches!(
                metric,
                Metric::FallbackRate
                    | Metric::MetadataOverhead
                    // Only under `load` (issue 24).
                    | Metric::DropRate
                    // Only for model workloads; ingress refuses them on `ops` slices.
                    | Metric::Accuracy
                    | Metric::QualityDelta
                    // Only for checkpoint workloads.
                    | Metric::PatternViolations
                    | Metric::SparseCoverage
            )
    },
    // All four: fp16/bf16 as 16-bit storage with f32 accumulation, int8 into exact i32 sums.
    supports_precision: |p| {
        matches!(
            p,
            Precision::Fp32 | Precision::Fp16 | Precision::Bf16 | Precision::Int8
        )
    },
    // The dense kernel on the same weights runs interleaved with every slice.
    has_comparator: |_| true,
    resolve: |_, _| None,
};
