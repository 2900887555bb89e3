//! What validation concludes, per guardrail: the rows of the memo's validation matrix.

use crate::domain::metric::Metric;
use crate::domain::stage::Stage;
use crate::domain::verdict::{Bottleneck, Verdict};
use crate::ingress::{Location, Rule, Severity};
use serde::{Deserialize, Serialize};

/// The verdict on one guardrail of one slice, with the numbers behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuardrailOutcome {
    /// The pack's name.
    pub pack: String,
    /// The slice id.
    pub slice: String,
    /// The metric judged.
    pub metric: Metric,
    /// The rule, e.g. `at_least 1.2`.
    pub rule: Rule,
    /// The guardrail's `id`, when the pack gave it one (`rollback.when` refers to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guardrail: Option<String>,
    /// pass, warn, fail or inconclusive.
    pub verdict: Verdict,
    /// What the evidence says before severity softens it: pass, fail or inconclusive
    /// (an advisory guardrail's `warn` is one of the last two). The rollback trigger and
    /// the contradictions read this, so an undecided check is never called a failure.
    #[serde(default = "undecided")]
    pub finding: Verdict,
    /// Whether a failure blocks.
    pub severity: Severity,
    /// The measured value (median for sampled metrics).
    pub value: Option<f64>,
    /// The golden baseline's value, for baseline-relative rules.
    pub baseline: Option<f64>,
    /// Lower end of the interval the verdict was read from (for baseline rules: of the
    /// ratio candidate/baseline).
    pub ci_low: Option<f64>,
    /// Upper end of that interval.
    pub ci_high: Option<f64>,
    /// p-value of the test behind the verdict, where there is one. For `regress_at_most`
    /// on samples: the bootstrap p-value of "the regression is within the margin" (the
    /// hypothesis a `fail` rejects), Holm-adjusted across the gate's blocking
    /// baseline-relative guardrails when there are two or more; the Mann–Whitney p-value of
    /// "no change" is in the detail.
    pub p_value: Option<f64>,
    /// Interval confidence.
    pub confidence: f64,
    /// Samples the verdict used.
    pub samples: usize,
    /// Where the slice spends its time.
    pub bottleneck: Option<Bottleneck>,
    /// The stage a failure is attributed to (lowering for speed lost to fallbacks,
    /// execution for a slice that did not run, validation otherwise).
    pub stage: Stage,
    /// One sentence a release manager can read.
    pub detail: String,
    /// Where the guardrail is declared.
    pub location: Option<Location>,
    /// For `regress_at_most`: what the candidate was compared with (issue 22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yardstick: Option<Yardstick>,
    /// For an undecided guardrail: what left it undecided where more samples of the same
    /// kind would not settle it (absent: the interval straddles the bound at this sample
    /// size, or the quality split cannot resolve it). The summary and the brief advise from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undecided_by: Option<Undecided>,
}

fn undecided() -> Verdict {
    Verdict::Inconclusive
}

impl GuardrailOutcome {
    /// Whether the guardrail failed (`Some(true)`), held (`Some(false)`) or is undecided.
    pub fn failed(&self) -> Option<bool> {
        match self.finding {
            Verdict::Fail => Some(true),
            Verdict::Pass => Some(false),
            Verdict::Inconclusive | Verdict::Warn => None,
        }
    }
}

/// What decided a baseline-relative guardrail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Yardstick {
    /// The baseline build, measured in this session interleaved with the candidate: the
    /// per-pair ratios decided (the golden baseline, if any, is context in the detail).
    BaselineBuild,
    /// The golden baseline, blessed in an earlier session.
    Golden,
}

/// Why a baseline-relative timing guardrail is undecided although its own interval would
/// have failed or passed: the between-session state, not the sample size (issue 22).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Undecided {
    /// The golden baseline's between-session drift could explain the change.
    SessionDrift,
    /// The two sessions got different shares of their cores, which could explain the
    /// change (or hide one).
    Contention,
}

/// Everything validation concluded for one gate run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assessment {
    /// One row per slice × guardrail, in pack and slice order.
    pub outcomes: Vec<GuardrailOutcome>,
    /// Per slice with evidence: the bottleneck class with its numbers, the roofline point
    /// and the fallback impact, in slice order.
    #[serde(default)]
    pub diagnoses: Vec<super::diagnosis::SliceDiagnosis>,
    /// Evidence pointing two ways, one sentence each (see `contradictions.rs`).
    #[serde(default)]
    pub contradictions: Vec<String>,
    /// Per slice that trained a model: its quality against the dense references.
    #[serde(default)]
    pub quality: Vec<super::quality::QualityComparison>,
    /// Load slices that fail under bursts while their steady (or Poisson) sibling at the
    /// same mean rate holds (issue 24, see `under_burst.rs`).
    #[serde(default)]
    pub under_burst: Vec<super::under_burst::BurstRegression>,
}

crate::of_slice!(GuardrailOutcome: pack, slice);
