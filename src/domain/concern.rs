//! Who must act on a failure (issue 24): every guardrail outcome belongs to one concern,
//! and a pack routes each concern to an owner role (`routing:`), so the memo's first screen
//! names the people who can fix what failed instead of a list of statistics.

use serde::{Deserialize, Serialize};

/// The part of the sparse stack a failing guardrail points at.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Concern {
    /// Lowering and fallback: ops that did not get a sparse kernel, weights that break the
    /// pattern, coverage of the checkpoint's FLOPs.
    Lowering,
    /// Kernel speed: latency, throughput, speedup over dense, energy and the hardware
    /// counters of a slice that ran sparse.
    Kernel,
    /// Model quality: accuracy and its change against the dense reference.
    Quality,
    /// Latency under load: the tail and drops of a slice serving requests.
    Serving,
    /// The measurement itself: a slice that did not run or whose harness failed.
    Harness,
}

impl Concern {
    /// Every concern, in the order the memo lists them.
    pub const ALL: [Concern; 5] = [
        Concern::Lowering,
        Concern::Kernel,
        Concern::Quality,
        Concern::Serving,
        Concern::Harness,
    ];

    /// The name used in packs (`routing:` keys) and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Concern::Lowering => "lowering",
            Concern::Kernel => "kernel",
            Concern::Quality => "quality",
            Concern::Serving => "serving",
            Concern::Harness => "harness",
        }
    }

    /// Who usually owns it, in words, for the memo.
    pub fn owner_title(self) -> &'static str {
        match self {
            Concern::Lowering => "compiler sparsity pass owner",
            Concern::Kernel => "accelerator architecture owner",
            Concern::Quality => "model optimization lead",
            Concern::Serving => "serving performance owner",
            Concern::Harness => "pack owner",
        }
    }

    /// The owner role a pack without a `routing:` entry for this concern routes it to, when
    /// some owner holds that role; otherwise the role `owner`, then the first owner.
    pub fn default_role(self) -> &'static str {
        match self {
            Concern::Lowering => "compiler",
            Concern::Kernel => "accelerator",
            Concern::Quality => "model-optimization",
            Concern::Serving => "serving",
            Concern::Harness => "owner",
        }
    }
}

super::by_name::display_as!(Concern, as_str);
