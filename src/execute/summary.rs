//! What `sparsegate run --json` prints: one line of numbers per slice. The type is the
//! format (`schemas/run-report.schema.json`, drift-checked).

use super::{SliceEvidence, SliceFailure};
use crate::domain::Metric;
use serde::Serialize;

/// One slice's evidence in a few numbers. Fields are in alphabetical order, the order the
/// report has always had on disk.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SliceSummary {
    /// Median of the `effective_speedup` samples, if any.
    pub effective_speedup_median: Option<f64>,
    /// Why the slice produced no (or partial) evidence.
    pub failure: Option<SliceFailure>,
    /// The plan's share of ops on the dense fallback.
    pub fallback_rate: f64,
    /// Median of the `latency` samples, seconds.
    pub latency_median_s: Option<f64>,
    /// The pack's name.
    pub pack: String,
    /// Latency samples taken.
    pub samples: usize,
    /// The slice id.
    pub slice: String,
    /// The sparsity under test.
    pub sparsity: String,
}

impl SliceSummary {
    /// The summary of one slice's evidence.
    pub fn of(s: &SliceEvidence) -> SliceSummary {
        let median = |metric: Metric| {
            s.metrics
                .get(metric)
                .and_then(|m| crate::stats::median(&m.samples).ok())
        };
        SliceSummary {
            effective_speedup_median: median(Metric::EffectiveSpeedup),
            failure: s.failure.clone(),
            fallback_rate: s.plan.fallback_rate(),
            latency_median_s: median(Metric::Latency),
            pack: s.pack.clone(),
            samples: s.metrics.get(Metric::Latency).map_or(0, |m| m.samples.len()),
            slice: s.slice.clone(),
            sparsity: s.sparsity.clone(),
        }
    }
}
