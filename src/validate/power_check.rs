//! Before running: can the pack's sample budget resolve each baseline-relative margin?
//!
//! A gate that is bound to come out inconclusive (or to miss the regression it is meant to
//! catch) should say so before spending the time (issue 5, issue 9). The estimate comes
//! from the golden baseline's own spread (see [`stats::plan_from_baseline`]): with
//! `samples.max` values per side (or, for a baseline recorded in several runs, as many runs
//! as the baseline has), is an unchanged candidate shown within the margin with 80%
//! probability, and what is the smallest regression failed with 80% power?

use super::golden::Baselines;
use super::observe::{Observed, observe};
use crate::domain::OfSlice;
use crate::domain::metric::{Better, Metric};
use crate::ingress::{Rule, Severity, Slice};
use crate::stats::{self, PowerPlan};
use serde::{Deserialize, Serialize};

/// The power estimate for one baseline-relative guardrail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerNote {
    /// The pack name.
    pub pack: String,
    /// The slice id.
    pub slice: String,
    /// The guardrail's metric.
    pub metric: Metric,
    /// The guardrail's margin.
    pub margin: f64,
    /// What the budget can resolve.
    pub plan: PowerPlan,
    /// Whether `per_side` counts runs (a multi-run baseline) rather than samples.
    pub per_run: bool,
    /// One sentence for the memo (a warning when the margin is not resolvable).
    pub message: String,
}

/// Power estimates for every `regress_at_most` guardrail on a sampled metric whose slice
/// has a baseline, in slice and guardrail order. Guardrails on counters (exact values) or
/// without a usable baseline are skipped.
pub fn power_check(slices: &[Slice], baselines: &Baselines) -> Vec<PowerNote> {
    let mut out = Vec::new();
    for slice in slices {
        let Some(b) = baselines.get(&slice.slice_key()) else {
            continue;
        };
        for g in &slice.guardrails {
            let Rule::RegressAtMost { margin } = g.rule else {
                continue;
            };
            if let Some(note) = note_for(slice, g.metric, margin, g.confidence, b) {
                out.push(note);
            }
        }
    }
    out
}

/// How many runs a slice should take, planned from its golden baseline (issue 9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPlan {
    /// The pack name.
    pub pack: String,
    /// The slice id.
    pub slice: String,
    /// Runs per side that resolve every baseline-relative margin of the slice (80% power
    /// at each guardrail's confidence), from the baseline's between-run spread.
    pub needed: usize,
    /// Runs it will take: `needed` within `[samples.runs, samples.max_runs]`.
    pub runs: u32,
    /// The pack's cap (`samples.max_runs`).
    pub cap: u32,
}

crate::of_slice!(RunPlan: pack, slice);

/// For a slice whose pack sets `samples.max_runs` and whose baseline was recorded in
/// several runs: the runs its `regress_at_most` margins need, and the runs to take.
/// `None` when there is nothing to plan from (no cap, no run-grouped baseline, no such
/// guardrail); the caller then takes `samples.runs` runs.
pub fn plan_runs(slice: &Slice, baselines: &Baselines) -> Option<RunPlan> {
    if slice.samples.sequential {
        return None; // sequential sampling decides the run count as it goes
    }
    let cap = slice.samples.max_runs?;
    let b = baselines.get(&slice.slice_key())?;
    let needed = slice
        .guardrails
        .iter()
        // Advisory guardrails report; they do not spend the pack's run budget.
        .filter(|g| g.severity == Severity::Block)
        .filter_map(|g| match g.rule {
            Rule::RegressAtMost { margin } => note_for(slice, g.metric, margin, g.confidence, b),
            _ => None,
        })
        .filter(|note| note.per_run)
        // An unresolvable plan (no finite run count) asks for everything the cap allows.
        .map(|note| note.plan.needed_per_side.unwrap_or(usize::MAX))
        .max()?;
    let floor = slice.samples.runs.max(1);
    let runs = u32::try_from(needed)
        .unwrap_or(u32::MAX)
        .clamp(floor, cap.max(floor));
    Some(RunPlan {
        pack: slice.pack.clone(),
        slice: slice.id.clone(),
        needed,
        runs,
        cap,
    })
}

/// The note for one guardrail, if its metric is sampled in the baseline.
pub(crate) fn note_for(
    slice: &Slice,
    metric: Metric,
    margin: f64,
    confidence: f64,
    b: &super::golden::Baseline,
) -> Option<PowerNote> {
    let Ok(Observed::Sampled { samples, runs, q }) = observe(metric, &b.metrics, &b.counters, None) else {
        return None;
    };
    let groups = if runs.len() == samples.len() {
        stats::group_by_run("baseline", &samples, &runs).ok()?
    } else {
        vec![samples]
    };
    let per_run = groups.len() > 1;
    let per_side = if per_run {
        // The pack's planned runs; a single-run pack against a run-grouped baseline keeps
        // the baseline's run count.
        if slice.samples.runs >= 2 {
            slice.samples.runs as usize
        } else {
            groups.len()
        }
    } else {
        slice.samples.max as usize
    };
    // Higher-is-better metrics regress downwards: the limit 1 − m is, on the log scale, a
    // margin of 1/(1 − m) − 1 in the other direction.
    let m = if metric.better() == Better::Lower {
        margin
    } else {
        1.0 / (1.0 - margin) - 1.0
    };
    let plan = stats::plan_from_baseline(&groups, q, m, confidence, per_side, slice.seed).ok()?;
    let unit = if per_run { "runs" } else { "samples" };
    let message = if plan.margin_resolvable {
        format!(
            "power: with {per_side} {unit} per side the baseline's spread resolves the {}% margin \
             (unchanged passes with p ≈ {}; smallest regression failed with 80% power ≈ {}%)",
            super::describe::num(margin * 100.0),
            super::describe::num(plan.pass_probability),
            super::describe::num(plan.mde * 100.0)
        )
    } else {
        format!(
            "warning: with {per_side} {unit} per side ({}) the baseline's spread cannot resolve the \
             {}% margin: an unchanged candidate passes with p ≈ {} only, and the smallest regression failed with \
             80% power is ≈ {}%; {} {unit} per side would be needed (or a wider margin)",
            match (per_run, slice.samples.max_runs) {
                (true, Some(_)) => "planned up to samples.max_runs",
                (true, None) => "samples.runs",
                (false, _) => "samples.max",
            },
            super::describe::num(margin * 100.0),
            super::describe::num(plan.pass_probability),
            super::describe::num(plan.mde * 100.0),
            plan.needed_per_side
                .map_or_else(|| "more".to_owned(), |n| n.to_string())
        )
    };
    Some(PowerNote {
        pack: slice.pack.clone(),
        slice: slice.id.clone(),
        metric,
        margin,
        plan,
        per_run,
        message,
    })
}
