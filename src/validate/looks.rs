//! The looks of sequential sampling: which look a guardrail is read at, the guardrail as
//! read there, and the sentence that says so. The assessment and the interim check both
//! read them (see `interim.rs` for why the error rates hold).

use crate::domain::Metric;
use crate::execute::SliceEvidence;
use crate::ingress::{GuardrailSpec, Slice};
use crate::stats::SequentialLook;

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
    let samples = ev.metrics.get(Metric::Latency).map_or(0, |m| m.samples.len());
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
