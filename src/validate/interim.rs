//! Sequential sampling over runs (issue 5): a slice with `samples.sequential` keeps adding
//! runs while its blocking guardrails are undecided, up to `samples.max_runs`.
//!
//! Validity under repeated looks: the looks are at run counts n₁ < n₂ < … ≤ `max_runs`,
//! and look k reads each guardrail's interval at confidence `1 − αₖ`, where αₖ is the
//! increment of the Lan–DeMets O'Brien–Fleming spending function at information
//! `nₖ / max_runs` ([`SequentialLook`]). The chance that *any* look's interval misses the
//! truth is at most Σαₖ ≤ α (union bound), so a false `fail` (and a false `pass`) over all
//! looks stays within the guardrail's `1 − confidence`, whatever the correlation between
//! looks. The final verdict is read at the last look's level, never at the full α again.
//! Runs (not samples) are the looks: they are the unit of replication, so each look adds
//! independent information and the run-level intervals stay honest.

use super::assess::judge;
use super::golden::Baseline;
use super::looks::{at_look, look_for};
use super::{AssessOptions, GuardrailOutcome};
use crate::domain::verdict::Verdict;
use crate::execute::{SliceEvidence, StopDecision};
use crate::ingress::{Severity, Slice};

/// The interim check the execution loop asks after each run from `samples.runs` on
/// (`ev.looks` holds the earlier looks; this one is at `ev.runs.len()` runs): decided when
/// every blocking guardrail passes or fails at this look's level. Advisory guardrails
/// never keep a slice sampling. `alpha` is the smallest α any guardrail spent here.
pub fn interim_look(slice: &Slice, ev: &SliceEvidence, baseline: Option<&Baseline>) -> StopDecision {
    let looks: Vec<u32> = ev
        .looks
        .iter()
        .map(|l| l.runs)
        .chain([ev.runs.len() as u32])
        .collect();
    let mut decided = true;
    let mut alpha = f64::INFINITY;
    let opts = AssessOptions::default();
    for (i, g) in slice.guardrails.iter().enumerate() {
        if g.severity != Severity::Block {
            continue;
        }
        let Some(look) = look_for(g, slice, &looks) else {
            decided = false;
            continue;
        };
        alpha = alpha.min(look.alpha);
        let outcome: GuardrailOutcome =
            judge(slice, i, &at_look(g, &look), (Some(ev), None), baseline, &opts);
        decided &= matches!(outcome.verdict, Verdict::Pass | Verdict::Fail);
    }
    StopDecision {
        decided,
        alpha: if alpha.is_finite() { alpha } else { 0.0 },
    }
}
