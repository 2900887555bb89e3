//! Three-valued verdicts (plus `warn`), per guardrail and overall (DESIGN.md §4).

use serde::{Deserialize, Serialize};

/// The outcome of one guardrail, or of the whole gate.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The rule is shown to hold: the whole interval lies on the good side.
    Pass,
    /// An advisory (`severity: warn`) guardrail did not pass.
    Warn,
    /// Not enough evidence to decide either way.
    Inconclusive,
    /// The rule is shown to be broken: the whole interval lies on the bad side.
    Fail,
}

impl Verdict {
    /// The lowercase name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Warn => "warn",
            Verdict::Inconclusive => "inconclusive",
            Verdict::Fail => "fail",
        }
    }
}

super::by_name::display_as!(Verdict, as_str);

/// Why a slice is slow: where the time goes (DESIGN.md §2).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Bottleneck {
    /// Arithmetic throughput.
    Compute,
    /// Memory traffic.
    MemoryBandwidth,
    /// Idle compute units (tail effects, small shapes).
    Occupancy,
    /// Sparse index/metadata handling.
    Metadata,
    /// Ops that took the dense path.
    Fallback,
    /// Launch and synchronisation overhead.
    Synchronization,
    /// Power or thermal throttling.
    Thermal,
}

impl Bottleneck {
    /// Every class, in vocabulary order.
    pub const ALL: [Bottleneck; 7] = [
        Bottleneck::Compute,
        Bottleneck::MemoryBandwidth,
        Bottleneck::Occupancy,
        Bottleneck::Metadata,
        Bottleneck::Fallback,
        Bottleneck::Synchronization,
        Bottleneck::Thermal,
    ];

    /// The counter under which the simulator records the time it spent bound by this class
    /// (`sim_time_<class>_s`): written by execute, read by validate's diagnosis.
    pub fn sim_time_counter(self) -> &'static str {
        match self {
            Bottleneck::Compute => "sim_time_compute_s",
            Bottleneck::MemoryBandwidth => "sim_time_memory_bandwidth_s",
            Bottleneck::Occupancy => "sim_time_occupancy_s",
            Bottleneck::Metadata => "sim_time_metadata_s",
            Bottleneck::Fallback => "sim_time_fallback_s",
            Bottleneck::Synchronization => "sim_time_synchronization_s",
            Bottleneck::Thermal => "sim_time_thermal_s",
        }
    }
}
