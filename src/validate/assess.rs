//! Guardrail verdicts: every guardrail of every slice, read from the evidence (and the
//! golden baseline where the rule needs one), with the stage a failure is attributed to and
//! the slice's bottleneck class.

use super::contention::{Contention, account_for_contention};
use super::contradictions::contradictions;
use super::diagnosis::diagnose_all;
use super::golden::Baselines;
use super::looks::{at_look, describe_look, look_for};
use super::observe::Observed;
use super::observe::observe;
use super::outcome::{Assessment, GuardrailOutcome, Yardstick};
use super::power_check::note_for;
use super::rules::{
    Judgement, absolute, absolute_by_run, normalise_by_calibration, paired_regression, pairs_decide, quality,
    regression,
};
use super::session_drift::{account_for_drift, drifts};
use crate::domain::metric::{Metric, Series};
use crate::domain::stage::Stage;
use crate::domain::verdict::Verdict;
use crate::domain::{Counter, OfSlice};
use crate::execute::{Evidence, SliceEvidence};
use crate::ingress::{GuardrailSpec, Rule, Severity, Slice};
use crate::stats::{Bootstrap, DEFAULT_RESAMPLES, holm};

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
/// - a failed speed guardrail in a slice with dense fallbacks is attributed to lowering;
/// - **multiple comparisons**: the gate fails when *any* blocking guardrail fails, so the
///   chance of a false failure grows with their number. The p-values of the fail
///   hypotheses of all blocking baseline-relative guardrails of the run (each "the
///   regression is within the margin", from its bootstrap) are Holm-adjusted together;
///   `p_value` holds the adjusted value and a `fail` stands only when the adjusted p is
///   below `1 − confidence` (otherwise it becomes `inconclusive`, and the detail says
///   why). Holm rather than widening every interval Bonferroni-style: it controls the
///   family-wise false-failure rate just as well, is uniformly more powerful, and leaves
///   the intervals in the memo at the confidence the pack asked for. `pass` verdicts need
///   no correction: the gate passes only when *every* guardrail passes (an
///   intersection–union test, valid at level α without adjustment). With a single such
///   guardrail nothing is adjusted.
/// - every baseline-relative detail states the smallest regression its evidence could
///   detect (80% power), and warns when the baseline's spread says that `samples.max`
///   cannot resolve the margin at all (see [`super::power_check`]).
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
    let diagnoses = diagnose_all(slices, &evidence.slices, evidence.environment.roofs.as_ref());
    let class_of = |slice: &Slice| {
        diagnoses
            .iter()
            .find(|d| d.same_slice(slice))
            .and_then(|d| d.class)
    };
    let mut outcomes: Vec<GuardrailOutcome> = slices
        .iter()
        .flat_map(|slice| {
            let ev = evidence.slice(&slice.pack, &slice.id);
            let baseline = baselines.get(&slice.slice_key());
            let bottleneck = class_of(slice);
            slice.guardrails.iter().enumerate().map(move |(i, g)| {
                // A slice sampled sequentially is read at its last look's level.
                let looks: Vec<u32> = ev
                    .map(|e| e.looks.iter().map(|l| l.runs).collect())
                    .unwrap_or_default();
                match look_for(g, slice, &looks).zip(ev) {
                    Some((look, e)) => {
                        let mut o = judge(slice, i, &at_look(g, &look), (ev, bottleneck), baseline, opts);
                        o.detail.push_str(&describe_look(g, &look, e, looks.len() - 1));
                        o
                    }
                    None => judge(slice, i, g, (ev, bottleneck), baseline, opts),
                }
            })
        })
        .collect();
    correct_for_multiplicity(&mut outcomes);
    let contradictions = contradictions(&evidence.slices, &outcomes);
    Assessment {
        under_burst: super::under_burst::regressions_under_burst(slices, &outcomes),
        outcomes,
        diagnoses,
        contradictions,
        quality: super::quality::compare_all(&evidence.slices),
    }
}

/// Holm across the blocking baseline-relative guardrails that have a p-value (see
/// [`assess`]).
fn correct_for_multiplicity(outcomes: &mut [GuardrailOutcome]) {
    let family: Vec<usize> = outcomes
        .iter()
        .enumerate()
        .filter(|(_, o)| {
            o.severity == Severity::Block
                && matches!(o.rule, Rule::RegressAtMost { .. })
                && o.p_value.is_some()
        })
        .map(|(i, _)| i)
        .collect();
    if family.len() < 2 {
        return;
    }
    let ps: Vec<f64> = family.iter().filter_map(|&i| outcomes[i].p_value).collect();
    let Ok(adjusted) = holm(&ps) else {
        return;
    };
    let m = family.len();
    for (&i, adj) in family.iter().zip(adjusted) {
        let o = &mut outcomes[i];
        let alpha = 1.0 - o.confidence;
        o.p_value = Some(adj);
        if o.verdict == Verdict::Fail && adj >= alpha {
            o.verdict = Verdict::Inconclusive;
            o.finding = Verdict::Inconclusive;
            o.stage = Stage::Validation;
            o.detail.push_str(&format!(
                "; Holm-adjusted across {m} blocking baseline guardrails: p = {} ≥ {}, so not a failure after \
                 correction: inconclusive",
                super::describe::num(adj),
                super::describe::num(alpha)
            ));
        } else {
            o.detail.push_str(&format!(
                "; Holm-adjusted p = {} across {m} blocking baseline guardrails",
                super::describe::num(adj)
            ));
        }
    }
}

/// An absolute rule: run-aware for `effective_speedup` measured in two or more runs (per-run
/// paired ratios, see [`absolute_by_run`]), the sample-level order-statistic rule otherwise.
fn absolute_rule(
    metric: Metric,
    ev: &SliceEvidence,
    obs: &Observed,
    bound: f64,
    upper: bool,
    confidence: f64,
) -> Judgement {
    if metric == Metric::EffectiveSpeedup
        && let Some(groups) = ev.metrics.get(metric).and_then(|m| m.by_run())
        && groups.len() >= 2
        && let Some(j) = absolute_by_run(metric, &groups, bound, upper, confidence)
    {
        return j;
    }
    absolute(metric, obs, bound, upper, confidence)
}

/// Latency observations of both sides divided by their runs' calibration medians, when the
/// metric is a latency, both the evidence and the baseline carry calibration samples, and
/// both took them with the same kind of probe (a stream past the cache normalises a
/// memory-bound slice, the FMA GEMM a compute-bound one; dividing by different probes would
/// compare two machines' different resources). With the probe, for the memo.
fn calibrated(
    metric: Metric,
    ev: &SliceEvidence,
    obs: &Observed,
    b: &super::golden::Baseline,
    base: &Observed,
) -> Option<(Observed, Observed, Probe)> {
    if !matches!(
        metric,
        Metric::Latency | Metric::LatencyP50 | Metric::LatencyP95 | Metric::LatencyP99
    ) {
        return None;
    }
    let (cal_c, cal_b) = (
        ev.metrics.get(Series::Calibration)?,
        b.metrics.get(Series::Calibration)?,
    );
    let (probe, probe_b) = (Probe::of(&ev.counters), Probe::of(&b.counters));
    if probe.streams() != probe_b.streams() {
        return None;
    }
    let norm = |o: &Observed, cal| match o {
        Observed::Sampled { samples, runs, q } => Some(Observed::Sampled {
            samples: normalise_by_calibration(samples, runs, cal)?,
            runs: runs.clone(),
            q: *q,
        }),
        Observed::Point(_) => None,
    };
    Some((norm(obs, cal_c)?, norm(base, cal_b)?, probe))
}

/// The calibration probe a run took, as its counters record it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Probe {
    /// Bytes read per sample; 0 (or unrecorded, before issue 22): the FMA GEMM.
    stream_bytes: f64,
}

impl Probe {
    fn of(counters: &crate::domain::Counters) -> Probe {
        Probe {
            stream_bytes: counters
                .get(Counter::CalibrationStreamBytes)
                .copied()
                .unwrap_or(0.0),
        }
    }

    fn streams(self) -> bool {
        self.stream_bytes > 0.0
    }

    /// What the memo says the latency was divided by.
    fn describe(self) -> String {
        if self.streams() {
            format!(
                "a {:.0} MiB read past the last-level cache, since the slice streams from memory",
                self.stream_bytes / f64::from(1u32 << 20)
            )
        } else {
            "the in-cache 48³ FMA GEMM".to_owned()
        }
    }
}

/// Seed of guardrail `index` of a slice: distinct per guardrail so two bootstraps in one
/// slice do not share draws, stable as long as the pack does not reorder them.
fn guardrail_seed(slice_seed: u64, index: usize) -> u64 {
    slice_seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// What a `regress_at_most` guardrail is decided against: the baseline build when the
/// slice's evidence holds one and the metric can be paired, else the golden baseline.
fn yardstick(g: &GuardrailSpec, ev: Option<&SliceEvidence>) -> Option<Yardstick> {
    if !matches!(g.rule, Rule::RegressAtMost { .. }) {
        return None;
    }
    let paired = ev.is_some_and(|e| e.baseline_build.is_some() && pairs_decide(g.metric));
    Some(if paired {
        Yardstick::BaselineBuild
    } else {
        Yardstick::Golden
    })
}

pub(crate) fn judge(
    slice: &Slice,
    index: usize,
    g: &GuardrailSpec,
    (ev, bottleneck): (Option<&SliceEvidence>, Option<crate::domain::verdict::Bottleneck>),
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
            guardrail: g.id.clone(),
            metric: g.metric,
            rule: g.rule,
            verdict,
            finding: j.verdict,
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
            // The detail reads the underlying check ("…: fail"); say why the verdict is milder.
            yardstick: yardstick(g, ev),
            undecided_by: j.undecided_by,
            detail: if verdict == Verdict::Warn {
                format!(
                    "{} (advisory guardrail: reported as warn, never blocks)",
                    j.detail
                )
            } else {
                j.detail
            },
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
    let had_fallbacks =
        plan_fallback > 0.0 || ev.counters.get(Metric::FallbackRate).is_some_and(|&r| r > 0.0);
    let quality_bound = match g.rule {
        Rule::AtMost { bound } => Some((bound, true)),
        Rule::AtLeast { bound } => Some((bound, false)),
        Rule::RegressAtMost { .. } => None,
    };
    let j = match (&ev.quality, quality_bound) {
        (Some(q), Some((bound, upper))) if matches!(g.metric, Metric::Accuracy | Metric::QualityDelta) => {
            quality(g.metric, q, bound, upper, g.confidence)
        }
        _ => judge_measured(slice, index, g, ev, baseline, opts, plan_fallback),
    };
    // Ops falling back to dense is decided at lowering: a failed fallback guardrail, or a
    // speed guardrail failing on a slice that fell back, has its root cause there.
    // A speed failure in a slice with fallbacks is lowering's: the dense fallback, not the
    // kernel, lost the speed.
    let lowering_caused = g.metric == Metric::FallbackRate || (g.metric.is_speed() && had_fallbacks);
    let stage = if j.verdict == Verdict::Fail && lowering_caused {
        Stage::Lowering
    } else {
        Stage::Validation
    };
    row(j, stage, bottleneck)
}

/// A rule over measured samples or counters (everything but quality bounds).
fn judge_measured(
    slice: &Slice,
    index: usize,
    g: &GuardrailSpec,
    ev: &SliceEvidence,
    baseline: Option<&super::golden::Baseline>,
    opts: &AssessOptions,
    plan_fallback: f64,
) -> Judgement {
    match observe(g.metric, &ev.metrics, &ev.counters, Some(plan_fallback)) {
        Err(why) => Judgement::inconclusive(format!("{why}: inconclusive")),
        Ok(obs) => match g.rule {
            Rule::AtMost { bound } => absolute_rule(g.metric, ev, &obs, bound, true, g.confidence),
            Rule::AtLeast { bound } => absolute_rule(g.metric, ev, &obs, bound, false, g.confidence),
            Rule::RegressAtMost { margin } if yardstick(g, Some(ev)) == Some(Yardstick::BaselineBuild) => {
                paired_rule(slice, index, g, ev, baseline, opts, margin)
            }
            Rule::RegressAtMost { margin } => match baseline {
                None => Judgement::inconclusive("no baseline: inconclusive".into()),
                Some(b) => match observe(g.metric, &b.metrics, &b.counters, None) {
                    Err(why) => Judgement::inconclusive(format!("baseline: {why}: inconclusive")),
                    Ok(base) => {
                        let boot = Bootstrap::new(opts.resamples, guardrail_seed(slice.seed, index));
                        let judge = |quantity, c: &Observed, b: &Observed| {
                            regression(
                                quantity,
                                c,
                                b,
                                margin,
                                g.confidence,
                                boot,
                                slice.samples.drop_outliers,
                            )
                        };
                        // The judgement, and the interval of the raw (not normalised) ratio,
                        // which is what contention stretches.
                        let (mut j, raw_ci) = match calibrated(g.metric, ev, &obs, b, &base) {
                            Some((c_norm, b_norm, probe)) => {
                                let raw = judge(g.metric.into(), &obs, &base);
                                // Issue 24: a normalised latency is a ratio to the calibration
                                // GEMM, not seconds.
                                let normalised = super::rules::Quantity {
                                    name: g.metric.name(),
                                    unit: "× calibration",
                                    better: g.metric.better(),
                                };
                                let mut j = judge(normalised, &c_norm, &b_norm);
                                j.value = raw.value;
                                j.baseline = raw.baseline;
                                j.detail = format!(
                                    "calibration-normalised (latency ÷ the median of its run's calibration probe, \
                                     both sides: {}): {}; raw, not normalised: {} (ratio CI {})",
                                    probe.describe(),
                                    j.detail,
                                    raw.verdict,
                                    raw.ci
                                        .map_or_else(|| "?".into(), |c| super::describe::range(c.0, c.1))
                                );
                                (j, raw.ci)
                            }
                            None => {
                                let mut j = judge(g.metric.into(), &obs, &base);
                                let (now, then) = (Probe::of(&ev.counters), Probe::of(&b.counters));
                                if now.streams() != then.streams() {
                                    j.detail.push_str(&format!(
                                        "; not calibration-normalised: this run's probe was {}, the baseline's {}",
                                        now.describe(),
                                        then.describe()
                                    ));
                                }
                                let ci = j.ci;
                                (j, ci)
                            }
                        };
                        if let Some(drift) = b.session_drift.as_ref().filter(|_| drifts(g.metric)) {
                            account_for_drift(&mut j, drift, g.metric.better(), margin, g.confidence);
                        }
                        if let Some(c) =
                            Contention::of(&ev.counters, &b.counters).filter(|_| drifts(g.metric))
                        {
                            account_for_contention(&mut j, raw_ci, c, g.metric.better(), margin);
                        }
                        if let Some(note) = note_for(slice, g.metric, margin, g.confidence, b)
                            .filter(|n| !n.plan.margin_resolvable)
                        {
                            j.detail.push_str(&format!("; {}", note.message));
                        }
                        j
                    }
                },
            },
        },
    }
}

/// `regress_at_most` against the baseline build of this session (issue 22); the golden
/// baseline, when there is one, is judged too and reported as history beside it.
fn paired_rule(
    slice: &Slice,
    index: usize,
    g: &GuardrailSpec,
    ev: &SliceEvidence,
    golden: Option<&super::golden::Baseline>,
    opts: &AssessOptions,
    margin: f64,
) -> Judgement {
    let Some(paired) = &ev.baseline_build else {
        return Judgement::inconclusive("internal: no baseline build: inconclusive".into());
    };
    let latency = ev
        .metrics
        .get(Metric::Latency)
        .and_then(|m| crate::stats::median(&m.samples).ok());
    let mut j = paired_regression(g.metric, paired, latency, margin, g.confidence);
    let context = match golden {
        None => "no golden baseline".to_owned(),
        Some(b) => {
            // The golden comparison, as it would have decided without the baseline build.
            let mut spec = g.clone();
            spec.severity = Severity::Block;
            let without = SliceEvidence {
                baseline_build: None,
                gpu_kernels: None,
                ..ev.clone()
            };
            let gj = judge_measured(
                slice,
                index,
                &spec,
                &without,
                Some(b),
                opts,
                ev.plan.fallback_rate(),
            );
            format!(
                "golden baseline blessed {}: ratio CI {}, {}",
                b.blessed_at,
                gj.ci
                    .map_or_else(|| "?".into(), |c| super::describe::range(c.0, c.1)),
                gj.verdict
            )
        }
    };
    j.detail.push_str(&format!(
        "; yardstick: the baseline build (golden timings are history here: {context})"
    ));
    j
}
