//! Three-valued verdicts (plus `warn`), per guardrail and overall (DESIGN.md §4).

use serde::{Deserialize, Serialize};
use std::fmt;

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

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
