//! Paired baseline runs (issue 22): the previous build of what a slice measures, run in
//! the same session as the candidate and interleaved with it, so that a regression is a
//! same-moment ratio. Against a golden baseline blessed in another session, a runner that
//! is 5–10% slower today cried wolf (1 of 14 A/A gates failed, a +3% change inside a 5%
//! margin failed 2 of 3 times); the same-session paired ratio was right every time, as
//! it is for sparse vs dense (DESIGN.md §6).
//!
//! A *pair* is one candidate measurement and one baseline measurement taken back to back,
//! alternating which goes first: for `backend: command`, one invocation of each; for the
//! built-in kernels with a baseline binary, one run (a fresh process) of each. Execution
//! records the pairs; validate judges them.

use super::MetricSamples;
use serde::{Deserialize, Serialize};

/// Which side of a pair ran first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PairOrder {
    /// The candidate, then the baseline.
    CandidateFirst,
    /// The baseline, then the candidate.
    BaselineFirst,
}

impl PairOrder {
    /// The order of pair `i`: alternating, starting with the candidate, so that a
    /// first-mover effect (cache, frequency) cancels in the ratios.
    pub fn of_pair(i: usize) -> PairOrder {
        if i.is_multiple_of(2) {
            PairOrder::CandidateFirst
        } else {
            PairOrder::BaselineFirst
        }
    }
}

/// The baseline build's side of a slice's evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BaselineRuns {
    /// What ran as the baseline: the baseline command line, or the baseline binary with
    /// the version it reported.
    pub source: String,
    /// The baseline's latency of each pair, seconds, tagged with the run it belongs to.
    pub latency: MetricSamples,
    /// Candidate latency / baseline latency of each pair (same order and runs as
    /// `latency`): above 1 is a slowdown.
    pub ratio: MetricSamples,
    /// Which side ran first in each pair, in order.
    pub order: Vec<PairOrder>,
    /// What the pairs are: `invocation` (one invocation of each command) or `run` (one
    /// fresh process of each binary).
    pub pair_unit: String,
}

impl BaselineRuns {
    /// Empty, for `source`, pairing by `pair_unit`.
    pub fn new(source: String, pair_unit: &str) -> BaselineRuns {
        BaselineRuns {
            source,
            latency: MetricSamples::single_run("s", vec![]),
            ratio: MetricSamples::single_run("x", vec![]),
            order: Vec::new(),
            pair_unit: pair_unit.to_owned(),
        }
    }

    /// Record one pair of run `run`: the candidate's and the baseline's latency.
    pub fn push(&mut self, run: u32, order: PairOrder, candidate_s: f64, baseline_s: f64) {
        self.latency.samples.push(baseline_s);
        self.latency.runs.push(run);
        self.ratio.samples.push(candidate_s / baseline_s);
        self.ratio.runs.push(run);
        self.order.push(order);
    }
}
