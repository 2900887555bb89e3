//! The metric vocabulary (DESIGN.md §2): names are stable because packs, baselines and
//! reports all use them.

use super::by_name::by_name;
use serde::{Deserialize, Serialize};

/// Which way is "better" for a metric; decides what a regression is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    /// Smaller is better (latency, energy, bytes).
    Lower,
    /// Larger is better (throughput, speedup, accuracy).
    Higher,
}

macro_rules! metrics {
    ($($variant:ident => $name:literal, $unit:literal, $better:ident, $doc:literal;)*) => {
        /// A metric known to sparsegate. Ordered by name, so that maps keyed by metrics
        /// serialize as the string-keyed maps they replaced did.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Metric {
            $(#[doc = $doc] $variant,)*
        }

        impl Metric {
            /// Every metric, in declaration order.
            pub const ALL: &'static [Metric] = &[$(Metric::$variant,)*];

            /// The stable name used in packs, baselines and reports.
            pub fn name(self) -> &'static str {
                match self { $(Metric::$variant => $name,)* }
            }

            /// The unit its values are expressed in.
            pub fn unit(self) -> &'static str {
                match self { $(Metric::$variant => $unit,)* }
            }

            /// Which direction is an improvement.
            pub fn better(self) -> Better {
                match self { $(Metric::$variant => Better::$better,)* }
            }
        }
    };
}

metrics! {
    Latency => "latency", "s", Lower, "Wall time of one workload iteration.";
    LatencyP50 => "latency_p50", "s", Lower, "Median latency.";
    LatencyP95 => "latency_p95", "s", Lower, "95th percentile latency.";
    LatencyP99 => "latency_p99", "s", Lower, "99th percentile latency.";
    ThroughputGflops => "throughput_gflops", "GFLOP/s", Higher, "Dense-equivalent GFLOP per second.";
    EffectiveSpeedup => "effective_speedup", "x", Higher, "Comparator time / slice time, paired within one run.";
    QualityDelta => "quality_delta", "fraction", Higher, "Quality of the slice minus its dense reference.";
    Accuracy => "accuracy", "fraction", Higher, "Classifier accuracy.";
    EnergyJ => "energy_j", "J", Lower, "Energy per iteration.";
    EnergyDelta => "energy_delta", "fraction", Lower, "Relative energy change vs the comparator.";
    TcOccupancy => "tc_occupancy", "fraction", Higher, "Tensor-core occupancy.";
    FallbackRate => "fallback_rate", "fraction", Lower, "Share of ops that fell back to the dense path (GPU trace imports: dense GEMM kernel time / sparse + dense GEMM kernel time).";
    MetadataOverhead => "metadata_overhead", "fraction", Lower, "Sparse metadata bytes / value bytes.";
    DramBytes => "dram_bytes", "B", Lower, "DRAM traffic per iteration.";
    Cycles => "cycles", "cycles", Lower, "Simulated cycles per iteration.";
    PatternViolations => "pattern_violations", "groups", Lower, "Groups (or blocks) of a checkpoint's weights that break the slice's sparsity pattern.";
    SparseCoverage => "sparse_coverage", "fraction", Higher, "Share of a checkpoint's GEMM FLOPs whose weights hold the pattern and run on a sparse kernel.";
    DropRate => "drop_rate", "fraction", Lower, "Requests of a load slice dropped because the queue was full / requests offered (issue 24).";
}

impl Metric {
    /// Every metric, in declaration order.
    pub fn all() -> impl Iterator<Item = Metric> {
        Metric::ALL.iter().copied()
    }

    /// Whether this metric measures speed (time, throughput, speedup): what a kernel or a
    /// fallback gains or loses, as opposed to quality, energy or counts.
    pub fn is_speed(self) -> bool {
        matches!(
            self,
            Metric::Latency
                | Metric::LatencyP50
                | Metric::LatencyP95
                | Metric::LatencyP99
                | Metric::ThroughputGflops
                | Metric::EffectiveSpeedup
        )
    }
}

by_name!(Metric, "metric");
by_name!(Series, "metric");

impl schemars::JsonSchema for Metric {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Metric".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
        schemars::json_schema!({
            "description": "A metric name from the stable vocabulary.",
            "type": "string",
            "enum": names,
        })
    }
}

/// A sampled series in evidence: a metric's samples, or the calibration GEMM's timings kept
/// beside them to see machine drift (a series, not a metric: no guardrail names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Series {
    /// The samples of a metric.
    Metric(Metric),
    /// Timings of the fixed calibration GEMM, one per sample.
    Calibration,
}

impl Series {
    /// Every series: the metrics, then the calibration timings.
    pub fn all() -> impl Iterator<Item = Series> {
        Metric::all().map(Series::Metric).chain([Series::Calibration])
    }

    /// The stable name stored in evidence and baselines.
    pub fn name(self) -> &'static str {
        match self {
            Series::Metric(m) => m.name(),
            Series::Calibration => "calibration",
        }
    }
}

impl From<Metric> for Series {
    fn from(m: Metric) -> Self {
        Series::Metric(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Metric::ALL {
            assert_eq!(m.name().parse::<Metric>().unwrap(), *m);
        }
        assert!("latency_p42".parse::<Metric>().is_err());
    }

    #[test]
    fn series_names_round_trip_through_json_keys() {
        for k in Series::all() {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.name()));
            assert_eq!(serde_json::from_str::<Series>(&json).unwrap(), k);
        }
        assert!(serde_json::from_str::<Series>("\"calibrate\"").is_err());
    }
}
