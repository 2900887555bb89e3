//! Guardrail verdicts: every guardrail of every slice, read from the evidence (and the
//! golden baseline where the rule needs one), with the stage a failure is attributed to and
//! the slice's bottleneck class.

use super::bottleneck::classify;
use super::golden::Baselines;
use super::observe::observe;
use super::outcome::{Assessment, GuardrailOutcome};
use super::rules::{Judgement, absolute, regression};
use super::stats::{Bootstrap, DEFAULT_RESAMPLES};
use crate::execute::{Evidence, SliceEvidence};
use crate::ingress::{GuardrailSpec, Rule, Severity, Slice};
use crate::metric::Metric;
use crate::stage::Stage;
use crate::verdict::Verdict;

/// Tunables of the assessment. The defaults are what the gate uses; tests and the
/// calibration study lower the resample count to stay fast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssessOptions {
    /// Bootstrap resamples for baseline-relative rules.
    pub resamples: usize,
}

impl Default for AssessOptions {
    fn default() -> Self {
        AssessOptions {
            resamples: DEFAULT_RESAMPLES,
        }
    }
}

/// Judge every guardrail of every slice, in slice and guardrail order, with the default
/// options. Pure: the same inputs always give the same assessment (bootstraps are seeded
/// from each slice's seed).
///
/// Per guardrail:
/// - no evidence for the slice, or a recorded failure: `fail` (attributed to the failure's
///   stage, execution when the slice is missing);
/// - `at_most` / `at_least` on a sampled metric: the distribution-free order-statistic
///   interval of its median (or p50/p95/p99 of `latency`) at the guardrail's confidence —
///   pass when the whole interval satisfies the bound, fail when it wholly violates it,
///   inconclusive otherwise or when there are too few samples for any interval; on a
///   counter (`fallback_rate`, `metadata_overhead`): a direct comparison;
/// - `regress_at_most`: see the ratio rule in `rules/regression.rs` (bootstrap interval of
///   candidate/baseline against `1 ± margin`, Mann–Whitney p and Hodges–Lehmann shift
///   reported); no baseline gives inconclusive;
/// - `severity: warn` turns any non-pass verdict into `warn`, keeping the numbers;
/// - a failed speed guardrail in a slice with dense fallbacks is attributed to lowering.
pub fn assess(slices: &[Slice], evidence: &Evidence, baselines: &Baselines) -> Assessment {
    assess_with(slices, evidence, baselines, &AssessOptions::default())
}

/// [`assess`] with explicit options.
pub fn assess_with(
    slices: &[Slice],
    evidence: &Evidence,
    baselines: &Baselines,
    opts: &AssessOptions,
) -> Assessment {
    let outcomes = slices
        .iter()
        .flat_map(|slice| {
            let ev = evidence.slice(&slice.pack, &slice.id);
            let baseline = baselines.get(&(slice.pack.clone(), slice.id.clone()));
            slice
                .guardrails
                .iter()
                .enumerate()
                .map(move |(i, g)| judge(slice, i, g, ev, baseline, opts))
        })
        .collect();
    Assessment { outcomes }
}

/// Speed metrics: a failure on one of these in a slice with fallbacks is attributed to
/// lowering, because the dense fallback, not the kernel, lost the speed.
fn is_speed(metric: Metric) -> bool {
    matches!(
        metric,
        Metric::Latency
            | Metric::LatencyP50
            | Metric::LatencyP95
            | Metric::LatencyP99
            | Metric::ThroughputGflops
            | Metric::EffectiveSpeedup
    )
}

/// Seed of guardrail `index` of a slice: distinct per guardrail so two bootstraps in one
/// slice do not share draws, stable as long as the pack does not reorder them.
fn guardrail_seed(slice_seed: u64, index: usize) -> u64 {
    slice_seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn judge(
    slice: &Slice,
    index: usize,
    g: &GuardrailSpec,
    ev: Option<&SliceEvidence>,
    baseline: Option<&super::golden::Baseline>,
    opts: &AssessOptions,
) -> GuardrailOutcome {
    let row = |j: Judgement, stage: Stage, bottleneck| {
        let verdict = match (j.verdict, g.severity) {
            (Verdict::Pass, _) | (_, Severity::Block) => j.verdict,
            (_, Severity::Warn) => Verdict::Warn,
        };
        GuardrailOutcome {
            pack: slice.pack.clone(),
            slice: slice.id.clone(),
            metric: g.metric,
            rule: g.rule,
            verdict,
            severity: g.severity,
            value: j.value,
            baseline: j.baseline,
            ci_low: j.ci.map(|c| c.0),
            ci_high: j.ci.map(|c| c.1),
            p_value: j.p_value,
            confidence: g.confidence,
            samples: j.samples,
            bottleneck,
            stage,
            detail: j.detail,
            location: g.location.clone(),
        }
    };
    let Some(ev) = ev else {
        let j = Judgement {
            verdict: Verdict::Fail,
            ..Judgement::inconclusive("no evidence: the slice did not run".into())
        };
        return row(j, Stage::Execution, None);
    };
    let bottleneck = classify(ev);
    if let Some(failure) = &ev.failure {
        let j = Judgement {
            verdict: Verdict::Fail,
            ..Judgement::inconclusive(format!(
                "the slice failed in {}: {}",
                failure.stage, failure.message
            ))
        };
        return row(j, failure.stage, bottleneck);
    }
    let plan_fallback = ev.plan.fallback_rate();
    let had_fallbacks = plan_fallback > 0.0 || ev.counters.get("fallback_rate").is_some_and(|&r| r > 0.0);
    let j = match observe(g.metric, &ev.metrics, &ev.counters, Some(plan_fallback)) {
        Err(why) => Judgement::inconclusive(format!("{why}: inconclusive")),
        Ok(obs) => match g.rule {
            Rule::AtMost { bound } => absolute(g.metric, &obs, bound, true, g.confidence),
            Rule::AtLeast { bound } => absolute(g.metric, &obs, bound, false, g.confidence),
            Rule::RegressAtMost { margin } => match baseline {
                None => Judgement::inconclusive("no baseline: inconclusive".into()),
                Some(b) => match observe(g.metric, &b.metrics, &b.counters, None) {
                    Err(why) => Judgement::inconclusive(format!("baseline: {why}: inconclusive")),
                    Ok(base) => regression(
                        g.metric,
                        &obs,
                        &base,
                        margin,
                        g.confidence,
                        Bootstrap::new(opts.resamples, guardrail_seed(slice.seed, index)),
                    ),
                },
            },
        },
    };
    // Ops falling back to dense is decided at lowering: a failed fallback guardrail, or a
    // speed guardrail failing on a slice that fell back, has its root cause there.
    let lowering_caused = g.metric == Metric::FallbackRate || (is_speed(g.metric) && had_fallbacks);
    let stage = if j.verdict == Verdict::Fail && lowering_caused {
        Stage::Lowering
    } else {
        Stage::Validation
    };
    row(j, stage, bottleneck)
}
