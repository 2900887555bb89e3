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
use super::stats::SequentialLook;
use super::{AssessOptions, GuardrailOutcome};
use crate::execute::{SliceEvidence, StopDecision};
use crate::ingress::{GuardrailSpec, Severity, Slice};
use crate::verdict::Verdict;

/// The look a guardrail is read at, given the run counts of every look so far (the last
/// being the current one). `None` for evidence not sampled sequentially.
pub(crate) fn look_for(g: &GuardrailSpec, slice: &Slice, looks: &[u32]) -> Option<SequentialLook> {
    let ns: Vec<usize> = looks.iter().map(|&n| n as usize).collect();
    let n_max = slice.samples.max_runs.map_or(0, |m| m as usize).max(*ns.last()?);
    SequentialLook::schedule(1.0 - g.confidence, &ns, n_max)
        .ok()?
        .last()
        .copied()
}

/// The guardrail as read at `look`: the same rule at the look's confidence.
pub(crate) fn at_look(g: &GuardrailSpec, look: &SequentialLook) -> GuardrailSpec {
    GuardrailSpec {
        confidence: look.confidence,
        ..g.clone()
    }
}

/// One sentence for a verdict's detail: which look decided it, after how much evidence.
pub(crate) fn describe_look(
    g: &GuardrailSpec,
    look: &SequentialLook,
    ev: &SliceEvidence,
    index: usize,
) -> String {
    let samples = ev.metrics.get("latency").map_or(0, |m| m.samples.len());
    format!(
        "; sequential: read at look {} of ≤ {} after {} runs ({samples} samples), at this look's α = {} \
         of the guardrail's {} (O'Brien–Fleming spending over runs, union bound)",
        index + 1,
        super::describe::num(look.n as f64 / look.information),
        look.n,
        super::describe::num(look.alpha),
        super::describe::num(1.0 - g.confidence)
    )
}

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
