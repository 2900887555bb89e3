//! Golden baselines: stored evidence under `golden/<pack>/<slice>.json`, written only by
//! `bless`, atomically, with an integrity digest so a hand edit is detected.

use crate::execute::MetricSamples;
use crate::ingress::Environment;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the baseline file format.
pub const BASELINE_SCHEMA_VERSION: u32 = 1;

/// The recorded evidence of one slice that later runs are compared with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// Format version.
    pub schema_version: u32,
    /// The pack's name.
    pub pack: String,
    /// The slice id.
    pub slice: String,
    /// `sha256:<hex>` of the pack file it was blessed from.
    pub pack_digest: String,
    /// When it was blessed (RFC 3339, UTC).
    pub blessed_at: String,
    /// Who blessed it (git user, else `$USER`).
    pub blessed_by: String,
    /// The environment it was measured under; its lock must match later runs.
    pub environment: Environment,
    /// Raw samples per metric.
    pub metrics: BTreeMap<String, MetricSamples>,
    /// Run counters (fallback rate, metadata overhead, …).
    pub counters: BTreeMap<String, f64>,
    /// `sha256:<hex>` over the canonical JSON of every other field.
    pub digest: String,
}

/// Baselines by (pack name, slice id).
pub type Baselines = BTreeMap<(String, String), Baseline>;
