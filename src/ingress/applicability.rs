//! Guardrails that cannot apply to a cell (issue 24).
//!
//! A pack-level `effective_speedup at_least 1.1` over `sparsity: [dense, "2:4"]` used to fail
//! on the `dense` cell by construction: that cell *is* its own comparator, so its speedup is
//! 1 whatever the kernels do. The decision: **expansion leaves such a guardrail off the cell
//! and records a [`NotApplicable`] note on the slice**, which the gate carries into
//! `verdict.json` (`not_applicable`) for the memo. A guardrail the author wrote on a slice
//! whose only cell is dense cannot mean anything anywhere, so validate refuses it
//! (see [`refuse_on_dense_only`]); docs/guardrails.md says the same for users.
//!
//! Meaningless on a dense cell (each is a comparison against the dense comparator or a
//! share of sparse work, so it is fixed by construction there):
//! - `effective_speedup`: comparator time / slice time, the same kernel on both sides → 1;
//! - `energy_delta`: relative energy change vs the comparator → 0;
//! - `sparse_coverage`: share of FLOPs on a sparse kernel → 0.
//!
//! Everything else (latency, throughput, counters such as `fallback_rate`) means the same on
//! a dense cell as on a sparse one and stays. `quality_delta` stays too: its reference is
//! the fp32 dense model, so on a dense int8 or mixed-precision cell it measures the
//! precision's cost (scenarios/mixed-precision.yaml gates exactly that). Only the built-in backends (`cpu`, `sim`) have
//! real dense cells: a `command` or `import` slice is recorded as dense for want of a
//! pattern, and its comparator is the user's own, so nothing is skipped there.

use super::diagnostic::Location;
use super::span::Locator;
use super::{GuardrailSpec, PackDiagnostic, Rule, Sparsity};
use crate::domain::metric::Metric;
use serde::{Deserialize, Serialize};

/// A guardrail left off one cell because it cannot mean anything there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NotApplicable {
    /// The pack name.
    pub pack: String,
    /// The slice (cell) id.
    pub slice: String,
    /// The guardrail's metric.
    pub metric: Metric,
    /// The guardrail's rule.
    pub rule: Rule,
    /// Where the guardrail is declared (its `metric:` key).
    pub location: Option<Location>,
    /// Why it does not apply, one sentence for the memo.
    pub reason: String,
}

/// Why `metric` means nothing on a dense cell, or `None` where it applies.
pub fn meaningless_on_dense(metric: Metric) -> Option<&'static str> {
    match metric {
        Metric::EffectiveSpeedup => {
            Some("a dense cell is its own dense comparator, so its speedup is 1 by construction")
        }
        Metric::EnergyDelta => {
            Some("a dense cell is its own dense comparator, so its energy change is 0 by construction")
        }
        Metric::SparseCoverage => {
            Some("a dense cell runs no sparse kernel, so its sparse coverage is 0 by construction")
        }
        _ => None,
    }
}

/// Split a cell's guardrails into those that apply and notes for those that cannot.
pub(crate) fn split(
    pack: &str,
    slice: &str,
    sparsity: Sparsity,
    built_in: bool,
    guardrails: Vec<GuardrailSpec>,
) -> (Vec<GuardrailSpec>, Vec<NotApplicable>) {
    if !(built_in && sparsity == Sparsity::Dense) {
        return (guardrails, vec![]);
    }
    let mut keep = Vec::with_capacity(guardrails.len());
    let mut notes = Vec::new();
    for g in guardrails {
        match meaningless_on_dense(g.metric) {
            Some(reason) => notes.push(NotApplicable {
                pack: pack.to_owned(),
                slice: slice.to_owned(),
                metric: g.metric,
                rule: g.rule,
                location: g.location.clone(),
                reason: format!("skipped on `{slice}`: {reason}"),
            }),
            None => keep.push(g),
        }
    }
    (keep, notes)
}

/// Refuse a guardrail written on a slice whose every cell is dense, on a metric that means
/// nothing there: it could never apply to any cell, so the author meant something else.
pub(crate) fn refuse_on_dense_only(
    spec: &super::pack::SliceSpec,
    base: &str,
    sparsities: &[Sparsity],
    loc: &Locator,
    diags: &mut Vec<PackDiagnostic>,
) {
    if !spec.backend.runs_workload()
        || sparsities.is_empty()
        || sparsities.iter().any(|s| *s != Sparsity::Dense)
    {
        return;
    }
    for (j, g) in spec.guardrails.iter().enumerate() {
        let Ok(metric) = g.metric.parse::<Metric>() else {
            continue;
        };
        if let Some(reason) = meaningless_on_dense(metric) {
            diags.push(loc.at_value(
                &format!("{base}/guardrails/{j}/metric"),
                format!(
                    "`{}` cannot apply to slice `{}`: its only sparsity is `dense`, and {reason}",
                    metric.name(),
                    spec.id
                ),
                Some(format!(
                    "add the sparse pattern it is meant to judge (e.g. `sparsity: [dense, \"2:4\"]`; the dense \
                     cell then skips it with a note), or judge the dense cell by `latency` or `throughput_gflops` \
                     instead of `{}`",
                    metric.name()
                )),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingress::Severity;

    fn guardrail(metric: Metric) -> GuardrailSpec {
        GuardrailSpec {
            id: None,
            metric,
            rule: Rule::AtLeast { bound: 1.1 },
            confidence: 0.95,
            severity: Severity::Block,
            location: None,
        }
    }

    // Issue 24: a speedup bound on the dense cell failed by construction.
    #[test]
    fn a_speedup_bound_is_skipped_on_a_dense_cell_with_a_note_and_kept_elsewhere() {
        let both = || vec![guardrail(Metric::EffectiveSpeedup), guardrail(Metric::Latency)];
        let (keep, notes) = split("p", "s-dense-fp32", Sparsity::Dense, true, both());
        assert_eq!(keep.len(), 1);
        assert_eq!(keep[0].metric, Metric::Latency);
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].metric, Metric::EffectiveSpeedup);
        assert!(
            notes[0].reason.contains("speedup is 1 by construction"),
            "{}",
            notes[0].reason
        );
        let (keep, notes) = split("p", "s-2of4-fp32", Sparsity::NOfM { n: 2, m: 4 }, true, both());
        assert_eq!((keep.len(), notes.len()), (2, 0));
        // A command slice is "dense" only for want of a pattern: nothing is skipped.
        let (keep, notes) = split("p", "cmd", Sparsity::Dense, false, both());
        assert_eq!((keep.len(), notes.len()), (2, 0));
    }
}
