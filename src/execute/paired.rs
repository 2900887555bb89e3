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

/// What one side of a pair is read as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SideReading {
    /// The median of the side's latencies: a run's samples (`--baseline-bin`), or an
    /// invocation's records (evidence from before issue 22's measurement under load).
    #[default]
    Median,
    /// The fastest of the invocation's `latency` records (`backend: command`, issue 22).
    /// Interference only adds time to a repetition, and a pair is there to compare the two
    /// builds' work, not the share of the CPU each got: measured with four busy processes
    /// on 2 cores (load average 5), an invocation's median of 3 repetitions of a 2.5 ms
    /// loop was 2.3× the loop's time with a 18–50% spread between invocations, its fastest
    /// within 1% of a quiet machine's with a 1–2% spread. The candidate's `latency` samples
    /// (percentiles, the golden comparison) keep every record.
    Fastest,
}

impl SideReading {
    /// How the memo says it.
    pub fn describe(self) -> &'static str {
        match self {
            SideReading::Median => "each side's median",
            SideReading::Fastest => "each side's fastest latency record of the invocation",
        }
    }
}

/// The baseline build's side of a slice's evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BaselineRuns {
    /// What ran as the baseline: the baseline command line, or the baseline binary with
    /// the version it reported.
    pub source: String,
    /// The baseline's latency of each pair (read as `reading`), seconds, tagged with the
    /// run it belongs to.
    pub latency: MetricSamples,
    /// Candidate latency / baseline latency of each pair (same order and runs as
    /// `latency`): above 1 is a slowdown.
    pub ratio: MetricSamples,
    /// Which side ran first in each pair, in order.
    pub order: Vec<PairOrder>,
    /// What the pairs are: `invocation` (one invocation of each command) or `run` (one
    /// fresh process of each binary).
    pub pair_unit: String,
    /// What each side of a pair is read as (`latency` and `ratio` hold these readings).
    #[serde(default)]
    pub reading: SideReading,
}

impl BaselineRuns {
    /// Empty, for `source`, pairing by `pair_unit`, each side read as `reading`.
    pub fn new(source: String, pair_unit: &str, reading: SideReading) -> BaselineRuns {
        BaselineRuns {
            source,
            latency: MetricSamples::single_run("s", vec![]),
            ratio: MetricSamples::single_run("x", vec![]),
            order: Vec::new(),
            pair_unit: pair_unit.to_owned(),
            reading,
        }
    }

    /// The candidate's reading of each pair (ratio × the baseline's), in order.
    pub fn candidate_readings(&self) -> Vec<f64> {
        self.ratio
            .samples
            .iter()
            .zip(&self.latency.samples)
            .map(|(r, b)| r * b)
            .collect()
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
