//! The closure memo: a JSON model built from the decision and its evidence, rendered to
//! Markdown and HTML by minijinja templates embedded in the binary (so the binary version
//! fully determines the rendering, and the same evidence always renders the same bytes).

use super::error::{ReleaseError, Result};
use super::{Decision, DriftNote, ExitCode, VerdictCounts, charts};
use crate::domain::stage::Stage;
use crate::domain::verdict::{Bottleneck, Verdict};
use crate::domain::{Metric, OfSlice};
use crate::execute::{Evidence, SliceEvidence};
use crate::ingress::pack::Owner;
use crate::ingress::{Environment, LoadedPack};
use crate::lower::KernelPath;
use crate::stats::{median, quantile, quantile_ci};
use crate::validate::golden::{Baselines, class_baseline_path};
use crate::validate::quality::{PairedQuality, QualityComparison};
use crate::validate::{Assessment, GuardrailOutcome, SliceDiagnosis};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Version of the memo model.
pub const MEMO_SCHEMA_VERSION: u32 = 1;

const MARKDOWN_TEMPLATE: &str = include_str!("../../templates/memo.md.j2");
const HTML_TEMPLATE: &str = include_str!("../../templates/memo.html.j2");
const TREND_HTML_TEMPLATE: &str = include_str!("../../templates/memo.trend.html.j2");

/// Partial templates, one per memo section that is developed on its own (so parallel work on
/// the memo merges cleanly); the main templates `include` them by these names.
const PARTIALS: &[(&str, &str)] = &[
    (
        "memo.bottleneck.md",
        include_str!("../../templates/memo.bottleneck.md.j2"),
    ),
    (
        "memo.bottleneck.html",
        include_str!("../../templates/memo.bottleneck.html.j2"),
    ),
    (
        "memo.deployment.md",
        include_str!("../../templates/memo.deployment.md.j2"),
    ),
    (
        "memo.deployment.html",
        include_str!("../../templates/memo.deployment.html.j2"),
    ),
    (
        "memo.checkpoint.md",
        include_str!("../../templates/memo.checkpoint.md.j2"),
    ),
    (
        "memo.checkpoint.html",
        include_str!("../../templates/memo.checkpoint.html.j2"),
    ),
    (
        "memo.fidelity.md",
        include_str!("../../templates/memo.fidelity.md.j2"),
    ),
    (
        "memo.fidelity.html",
        include_str!("../../templates/memo.fidelity.html.j2"),
    ),
    (
        "memo.quality.md",
        include_str!("../../templates/memo.quality.md.j2"),
    ),
    (
        "memo.quality.html",
        include_str!("../../templates/memo.quality.html.j2"),
    ),
];

/// Everything the memo says, as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Memo {
    /// Model version.
    pub schema_version: u32,
    /// The overall verdict.
    pub verdict: Verdict,
    /// Its exit status.
    pub exit_code: ExitCode,
    /// The earliest stage with a blocking failure.
    pub first_failing_stage: Option<Stage>,
    /// Guardrails per verdict.
    pub counts: VerdictCounts,
    /// Where the evidence was taken.
    pub environment: Environment,
    /// The bf16 kernel the run used and how it was chosen (pinned from the golden
    /// baseline, issue 22), where a slice ran bf16 or the pick was pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16_kernel: Option<String>,
    /// The packs gated, with owners and rollback plans.
    pub packs: Vec<MemoPack>,
    /// Per slice: what ran and how.
    pub slices: Vec<MemoSlice>,
    /// The first screen: the call, what failed, who must act, the rollback triggers.
    pub brief: super::Brief,
    /// The validation matrix, one row per guardrail outcome, failures first.
    pub matrix: Vec<MatrixRow>,
    /// The guardrail outcomes behind the matrix, in pack and slice order.
    pub guardrails: Vec<GuardrailOutcome>,
    /// Guardrails left off a cell because they cannot mean anything there, with why.
    #[serde(default)]
    pub not_applicable: Vec<crate::ingress::NotApplicable>,
    /// Evidence that points two ways, spelled out so nobody reads only the headline.
    pub contradictions: Vec<String>,
    /// Who must sign: each owner role and the owners holding it.
    pub sign_off: Vec<SignOff>,
    /// Allowed environment mismatches: called out prominently.
    pub environment_drift: Vec<DriftNote>,
    /// The baselines compared against, with their digests.
    pub baselines: Vec<MemoBaseline>,
    /// The accelerator presets simulated slices ran on: `name sha256:<hex>`.
    pub presets: Vec<String>,
    /// Wall time of all slices, in seconds.
    pub measured_s: f64,
    /// Quality evidence of model slices (issue 7): accuracies with intervals, the pruning
    /// schedule step by step, and the dense model of equal latency.
    #[serde(default)]
    pub quality: Vec<MemoQuality>,
    /// Recent run history per slice, with change points (only when the run was recorded in
    /// a history; taken from the history passed in, never from the clock).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trends: Vec<MemoTrend>,
}

/// One line of the validation matrix: the numbers written once, the statistics behind them
/// one click away (`<details>` in HTML, a numbered note in Markdown).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MatrixRow {
    /// `pack/slice`.
    pub slice: String,
    /// The guardrail's id, when it has one.
    pub guardrail: Option<String>,
    /// The metric.
    pub metric: Metric,
    /// Whether it blocks.
    pub advisory: bool,
    /// The measured value with its unit (`–` when there is none).
    pub value: String,
    /// The bound, e.g. `≥ 1.5x`.
    pub bound: String,
    /// The interval the verdict was read from (`–` when there is none).
    pub interval: String,
    /// The verdict.
    pub verdict: Verdict,
    /// The stage a failure is attributed to.
    pub stage: Stage,
    /// The statistical detail.
    pub detail: String,
    /// `file:line:col` of the guardrail.
    pub location: Option<String>,
    /// 1-based number of the row's note.
    pub note: usize,
}

/// The validation matrix, failures first (then undecided, warned, passed), each group in
/// pack and slice order.
fn matrix(outcomes: &[GuardrailOutcome]) -> Vec<MatrixRow> {
    let rank = |v: Verdict| match v {
        Verdict::Fail => 0,
        Verdict::Inconclusive => 1,
        Verdict::Warn => 2,
        Verdict::Pass => 3,
    };
    let mut sorted: Vec<&GuardrailOutcome> = outcomes.iter().collect();
    sorted.sort_by_key(|o| rank(o.verdict));
    sorted
        .into_iter()
        .enumerate()
        .map(|(i, o)| MatrixRow {
            slice: format!("{}/{}", o.pack, o.slice),
            guardrail: o.guardrail.clone(),
            metric: o.metric,
            advisory: o.severity == crate::ingress::Severity::Warn,
            value: o
                .value
                .map_or_else(|| "–".to_owned(), |v| super::text::with_unit(v, o.metric)),
            bound: super::text::bound(o),
            interval: super::text::interval(o).unwrap_or_else(|| "–".to_owned()),
            verdict: o.verdict,
            stage: o.stage,
            detail: o.detail.clone(),
            location: o
                .location
                .as_ref()
                .map(|l| format!("{}:{}:{}", l.file, l.line, l.col)),
            note: i + 1,
        })
        .collect()
}

/// One slice's recent history of a metric, for the memo's trend chart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoTrend {
    /// Pack name.
    pub pack: String,
    /// Slice id.
    pub slice: String,
    /// The metric charted.
    pub metric: String,
    /// `(run id, value)`, oldest first; the last is this run.
    pub points: Vec<(i64, f64)>,
    /// Indices into `points` where E-divisive means found a change.
    pub change_points: Vec<usize>,
}

/// A model slice's quality evidence, as the memo shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoQuality {
    /// Pack name.
    pub pack: String,
    /// Slice id.
    pub slice: String,
    /// Sparsity pattern.
    pub sparsity: String,
    /// Dataset name.
    pub dataset: String,
    /// Train / validation / test sizes.
    pub split: [usize; 3],
    /// Hidden width of the slice's model.
    pub hidden: usize,
    /// Weight sparsity reached.
    pub achieved_sparsity: f64,
    /// The schedule in words, e.g. `gradual, 4 steps, 2 fine-tuning epochs per step`.
    pub schedule: String,
    /// One row per pruning step.
    pub steps: Vec<MemoPruneStep>,
    /// Median paired inference speedup over the dense kernel.
    pub speedup: Option<f64>,
    /// The slice's model against its dense reference (95% intervals).
    pub versus_dense: Option<PairedQuality>,
    /// The dense model of equal measured latency, when the pack asked for it.
    pub equal_latency: Option<MemoEqualLatency>,
    /// The precision policy the model was evaluated under and each layer's drift from the
    /// fp32 dense reference, when the slice has a `precision_policy`.
    #[serde(default)]
    pub precision: Option<MemoPrecision>,
    /// For quality measured on a shipped checkpoint (issue 21): its head and the reference
    /// checkpoint, in words.
    #[serde(default)]
    pub artifact: Option<String>,
}

/// A model's precision policy and per-layer drift, as the memo shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoPrecision {
    /// The policy in words: the default format, then each layer kept in another one.
    pub policy: String,
    /// One row per layer, in execution order.
    pub layers: Vec<MemoLayerDrift>,
}

/// One layer's drift from the fp32 dense reference on the test split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoLayerDrift {
    /// Layer name.
    pub layer: String,
    /// Format it ran in.
    pub precision: String,
    /// `‖y − y_ref‖ / ‖y_ref‖` of the layer's output.
    pub relative_error: f64,
    /// Cosine similarity of the layer's output with the reference's.
    pub cosine: f64,
    /// Relative error against the same weights in fp32: the precision's own share.
    pub precision_relative_error: f64,
}

/// One pruning step, as the memo shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoPruneStep {
    /// 1-based step.
    pub step: u32,
    /// Sparsity the schedule asked for.
    pub target_sparsity: f64,
    /// Sparsity reached.
    pub achieved_sparsity: f64,
    /// Fine-tuning epochs after the step.
    pub finetune_epochs: u32,
    /// Validation accuracy after fine-tuning.
    pub validation_accuracy: f64,
}

/// The equal-latency comparison, as the memo shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoEqualLatency {
    /// Hidden width of the dense model that fits the sparse model's latency.
    pub hidden: usize,
    /// Its median paired inference time over the sparse model's (≤ 1: fits).
    pub latency_ratio: f64,
    /// The widths probed, `width: ratio`.
    pub probes: String,
    /// The sparse model (candidate) against that dense model (reference), 95% intervals.
    pub comparison: Option<PairedQuality>,
}

/// A gated pack, as the memo shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoPack {
    /// Pack name.
    pub name: String,
    /// File path.
    pub path: String,
    /// `sha256:<hex>` of the file.
    pub digest: String,
    /// The pack's description.
    pub description: Option<String>,
    /// Owners and roles.
    pub owners: Vec<Owner>,
    /// The condition that triggers a rollback.
    pub rollback_trigger: String,
    /// What to do when it fires.
    pub rollback_action: Option<String>,
}

/// A role that must sign the memo, and who holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SignOff {
    /// The role.
    pub role: String,
    /// `Name <email>` of each owner holding it.
    pub holders: Vec<String>,
}

/// A slice, as the memo shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoSlice {
    /// Pack name.
    pub pack: String,
    /// Slice id.
    pub slice: String,
    /// Sparsity pattern.
    pub sparsity: String,
    /// Precision.
    pub precision: String,
    /// What ran, named for the backend: `2:4 · fp32 · CPU kernels`, `command `./bench``.
    #[serde(default)]
    pub what: String,
    /// Share of weights the pattern zeroes (built-in sparse slices only).
    #[serde(default)]
    pub nominal_sparsity: Option<f64>,
    /// The speedup the pattern promises if time scaled with kept weights: 1 / density.
    #[serde(default)]
    pub ideal_speedup: Option<f64>,
    /// Share of the slice's latency spent in ops that fell back to dense.
    #[serde(default)]
    pub fallback_share: Option<f64>,
    /// Timed samples.
    pub samples: usize,
    /// Median latency of the slice's workload, seconds.
    pub latency_s: Option<f64>,
    /// Median of the per-pair speedups over the dense comparator.
    pub speedup: Option<f64>,
    /// 95% order-statistic interval of that median.
    pub speedup_ci: Option<(f64, f64)>,
    /// Latency samples of the slice, summarised.
    pub latency_summary: Option<FiveNumber>,
    /// Latency samples of the interleaved dense comparator, summarised.
    pub comparator_summary: Option<FiveNumber>,
    /// Share of ops that fell back to dense.
    pub fallback_rate: f64,
    /// Metadata bytes per value byte.
    pub metadata_overhead: f64,
    /// Where the time goes, as validation classified it.
    pub bottleneck: Option<Bottleneck>,
    /// The supported layer matrix: every op, its path and why.
    pub ops: Vec<MemoOp>,
    /// For an ONNX graph: the rows of its nodes that are not GEMMs with a readable weight
    /// (`dense` or `unsupported`, with why).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub graph_nodes: Vec<crate::lower::NodePlan>,
    /// Why the slice did not run, if it did not.
    pub failure: Option<String>,
    /// Independent runs the slice was measured in (0 for evidence without run summaries).
    #[serde(default)]
    pub runs: usize,
    /// How the runs were separated (`in_process`), when the slice was measured in runs.
    #[serde(default)]
    pub run_mode: Option<String>,
    /// Noise decomposition of the latency: mean coefficient of variation inside a run, %.
    #[serde(default)]
    pub within_run_cv: Option<f64>,
    /// Noise decomposition of the latency: coefficient of variation of the per-run
    /// medians, % (two or more runs only).
    #[serde(default)]
    pub between_run_cv: Option<f64>,
    /// Validation's diagnosis: the bottleneck class with the numbers behind it, the slice's
    /// roofline point and what its dense fallbacks cost.
    #[serde(default)]
    pub diagnosis: Option<SliceDiagnosis>,
    /// For a checkpoint slice: each tensor's structure as measured (issue 21).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub structure: Vec<crate::execute::structure::TensorStructure>,
    /// The artifact files the slice was measured from, with their digests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<crate::execute::ArtifactRecord>,
    /// For a checkpoint slice at several token counts: each layer's break-even.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub break_even: Vec<crate::execute::LayerBreakEven>,
    /// For a slice served under `load`: its traffic, drops and burst finding (issue 24).
    #[serde(default)]
    pub load: Option<super::memo_load::MemoLoad>,
    /// For a slice that failed, stayed undecided or did not run: the command that runs it
    /// again (issue 22).
    #[serde(default)]
    pub repro: Option<super::repro::Repro>,
}

/// Minimum, quartiles (type 7) and maximum of a sample: enough to draw a box plot.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FiveNumber {
    /// Smallest value.
    pub min: f64,
    /// 25th percentile.
    pub q1: f64,
    /// Median.
    pub median: f64,
    /// 75th percentile.
    pub q3: f64,
    /// Largest value.
    pub max: f64,
}

impl FiveNumber {
    /// The summary of `xs`, or `None` for an empty or non-finite sample.
    pub fn of(xs: &[f64]) -> Option<FiveNumber> {
        let q = |p| quantile(xs, p).ok();
        Some(FiveNumber {
            min: q(0.0)?,
            q1: q(0.25)?,
            median: q(0.5)?,
            q3: q(0.75)?,
            max: q(1.0)?,
        })
    }
}

/// One op in the supported layer matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoOp {
    /// Layer name.
    pub name: String,
    /// `MxNxK`.
    pub shape: String,
    /// `sparse`, `dense` or `dense_fallback`.
    pub path: KernelPath,
    /// Why.
    pub reason: String,
    /// CPU: `‖y − y_ref‖ / ‖y_ref‖` of the op's output against the fp32 dense output of the
    /// unpruned weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative_error: Option<f64>,
    /// CPU: cosine similarity of the op's output with that reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosine: Option<f64>,
}

/// A baseline the run was compared against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoBaseline {
    /// Pack name.
    pub pack: String,
    /// Slice id.
    pub slice: String,
    /// The baseline file, as the gate found it.
    pub path: String,
    /// When it was blessed.
    pub blessed_at: String,
    /// Who blessed it.
    pub blessed_by: String,
    /// Its integrity digest.
    pub digest: String,
}

impl Memo {
    /// Assemble the memo model from what the earlier stages produced.
    pub fn new(
        packs: &[LoadedPack],
        evidence: &Evidence,
        baselines: &Baselines,
        golden_dir: &Path,
        decision: &Decision,
        assessment: &Assessment,
    ) -> Memo {
        let diagnoses = &assessment.diagnoses;
        let slices: Vec<MemoSlice> = evidence
            .slices
            .iter()
            .map(|s| {
                let spec = packs
                    .iter()
                    .flat_map(|p| p.slices.iter())
                    .find(|x| x.pack == s.pack && x.id == s.slice);
                let base = memo_slice(s, decision, diagnoses);
                // The sparse reality check: what the pattern promises against what ran.
                let density = spec
                    .filter(|x| x.backend.kind().runs_workload())
                    .map(|x| x.sparsity.density())
                    .filter(|d| *d > 0.0 && *d < 1.0);
                MemoSlice {
                    what: what_ran(s, spec),
                    load: super::memo_load::memo_load(s, &assessment.under_burst),
                    nominal_sparsity: density.map(|d| 1.0 - d),
                    ideal_speedup: density.map(|d| 1.0 / d),
                    fallback_share: base.diagnosis.as_ref().and_then(|d| d.fallback.latency_share),
                    repro: spec
                        .zip(packs.iter().find(|p| p.file.name == s.pack))
                        .filter(|_| super::repro::needs_repro(s, &decision.guardrails))
                        .map(|(spec, pack)| {
                            super::repro::repro(
                                pack,
                                spec,
                                s,
                                &evidence.environment,
                                golden_dir,
                                !decision.environment_drift.is_empty(),
                            )
                        }),
                    ..base
                }
            })
            .collect();
        Memo {
            schema_version: MEMO_SCHEMA_VERSION,
            verdict: decision.verdict,
            exit_code: decision.exit_code,
            first_failing_stage: decision.first_failing_stage,
            counts: decision.counts,
            environment: evidence.environment.clone(),
            bf16_kernel: bf16_kernel(evidence),
            packs: packs
                .iter()
                .map(|p| MemoPack {
                    name: p.file.name.clone(),
                    path: p.path.display().to_string(),
                    digest: p.digest.clone(),
                    description: p.file.description.clone(),
                    owners: p.file.owners.clone(),
                    rollback_trigger: p.file.rollback.trigger.clone(),
                    rollback_action: p.file.rollback.action.clone(),
                })
                .collect(),
            contradictions: assessment.contradictions.clone(),
            sign_off: sign_off(packs),
            slices,
            brief: decision.brief.clone(),
            matrix: matrix(&decision.guardrails),
            guardrails: decision.guardrails.clone(),
            not_applicable: decision.not_applicable.clone(),
            environment_drift: decision.environment_drift.clone(),
            baselines: baselines
                .values()
                .map(|b| MemoBaseline {
                    pack: b.pack.clone(),
                    slice: b.slice.clone(),
                    path: class_baseline_path(golden_dir, b.runner_class.as_deref(), &b.pack, &b.slice)
                        .display()
                        .to_string(),
                    blessed_at: b.blessed_at.clone(),
                    blessed_by: b.blessed_by.clone(),
                    digest: b.digest.clone(),
                })
                .collect(),
            presets: {
                let mut presets: Vec<String> = all_presets(packs);
                presets.dedup();
                presets
            },
            measured_s: evidence.slices.iter().map(|s| s.wall_time_s).sum(),
            quality: evidence
                .slices
                .iter()
                .filter_map(|s| memo_quality(s, &assessment.quality))
                .collect(),
            trends: Vec::new(),
        }
    }

    /// The memo with trend charts of the slices' recent history.
    pub fn with_trends(mut self, trends: Vec<MemoTrend>) -> Memo {
        self.trends = trends;
        self
    }

    /// The memo as Markdown (`memo.md`).
    pub fn render_markdown(&self) -> Result<String> {
        self.render("memo.md", MARKDOWN_TEMPLATE, minijinja::context! {})
    }

    /// The memo as self-contained HTML (`memo.html`), every pack string escaped; charts
    /// are inline SVG generated here.
    pub fn render_html(&self) -> Result<String> {
        let charts = minijinja::context! { charts => minijinja::context! {
            speedup => minijinja::Value::from_safe_string(charts::speedup_chart(&self.slices)),
            distributions => self
                .slices
                .iter()
                .map(|s| minijinja::Value::from_safe_string(charts::distribution_chart(s)))
                .collect::<Vec<_>>(),
            trends => self
                .trends
                .iter()
                .map(|t| minijinja::Value::from_safe_string(charts::trend_chart(t)))
                .collect::<Vec<_>>(),
            roofline => charts::roofline_charts(&self.slices)
                .into_iter()
                .map(|c| minijinja::context! {
                    machine => c.machine,
                    roofs_source => c.roofs_source,
                    rows => minijinja::Value::from(minijinja::value::Serde(&c.rows)),
                    svg => minijinja::Value::from_safe_string(c.svg),
                })
                .collect::<Vec<_>>(),
        }};
        self.render("memo.html", HTML_TEMPLATE, charts)
    }

    /// Render template `name` with the memo as `memo` and the names of `extra` beside it.
    pub(super) fn render(&self, name: &str, source: &str, extra: minijinja::Value) -> Result<String> {
        // An include's failure is the outer error; what went wrong is down its source chain.
        let render_error = |e: minijinja::Error| {
            let mut message = format!("{e:#}");
            let mut cause = std::error::Error::source(&e);
            while let Some(inner) = cause {
                message.push_str(&format!(": {inner:#}"));
                cause = inner.source();
            }
            ReleaseError::Render {
                template: name.to_owned(),
                message,
            }
        };
        let mut env = minijinja::Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .keep_trailing_newline(true)
            .build()
            .map_err(render_error)?;
        env.set_syntax(syntax);
        env.add_filter("num", format_number);
        // Pack text is escaped for the output's format: HTML by minijinja, Markdown by ours.
        env.set_auto_escape_callback(super::markdown::auto_escape);
        env.set_formatter(super::markdown::markdown_formatter);
        env.add_filter("holder", super::markdown::holder);
        env.add_filter("code", super::markdown::code);
        env.add_template("memo.trend.html.j2", TREND_HTML_TEMPLATE)
            .map_err(render_error)?;
        for (partial, text) in PARTIALS {
            env.add_template(partial, text).map_err(render_error)?;
        }
        env.add_template(name, source).map_err(render_error)?;
        let template = env.get_template(name).map_err(render_error)?;
        template
            .render(minijinja::context! { memo => minijinja::Value::from(minijinja::value::Serde(self)), ..extra })
            .map_err(render_error)
    }
}

/// The memo's bf16 kernel line: where a slice ran bf16, or the gate pinned the kernel
/// from its golden baselines (issue 22), which kernel and how it was chosen.
fn bf16_kernel(evidence: &Evidence) -> Option<String> {
    use crate::ingress::bf16_pick::Bf16Source;
    let pick = evidence.environment.bf16_pick.as_ref()?;
    let ran_bf16 = evidence
        .slices
        .iter()
        .any(|s| s.precision == crate::domain::Precision::Bf16);
    (ran_bf16 || pick.source == Bf16Source::Baseline).then(|| pick.describe())
}

fn all_presets(packs: &[LoadedPack]) -> Vec<String> {
    let mut presets: Vec<String> = packs
        .iter()
        .flat_map(|p| p.slices.iter())
        .filter_map(|s| s.backend.preset())
        .map(|p| format!("{} {}", p.name, p.digest()))
        .collect();
    presets.sort();
    presets
}

fn sign_off(packs: &[LoadedPack]) -> Vec<SignOff> {
    let mut roles: std::collections::BTreeMap<&str, Vec<String>> = std::collections::BTreeMap::new();
    for owner in packs.iter().flat_map(|p| p.file.owners.iter()) {
        let holder = format!("{} <{}>", owner.name, owner.email);
        let holders = roles.entry(owner.role.as_str()).or_default();
        if !holders.contains(&holder) {
            holders.push(holder);
        }
    }
    roles
        .into_iter()
        .map(|(role, holders)| SignOff {
            role: role.to_owned(),
            holders,
        })
        .collect()
}

fn memo_quality(s: &SliceEvidence, comparisons: &[QualityComparison]) -> Option<MemoQuality> {
    let q = s.quality.as_ref()?;
    let judged = comparisons.iter().find(|c| c.same_slice(s));
    let plan = &q.schedule;
    let kind = match plan.schedule {
        crate::ingress::pack::PruningScheduleKind::OneShot => "one shot".to_owned(),
        crate::ingress::pack::PruningScheduleKind::Gradual => {
            format!("gradual (cubic), {} steps", plan.steps)
        }
    };
    let scope = match plan.scope {
        crate::ingress::pack::PruningScope::PerRow => "per row",
        crate::ingress::pack::PruningScope::Global => "global",
    };
    Some(MemoQuality {
        pack: s.pack.clone(),
        slice: s.slice.clone(),
        sparsity: s.sparsity.clone(),
        dataset: q.dataset.clone(),
        split: q.split,
        hidden: q.candidate.hidden,
        achieved_sparsity: q.candidate.sparsity,
        schedule: format!(
            "{kind}, {} fine-tuning epoch(s) per step, mask fixed; unstructured scope {scope}",
            plan.finetune_epochs
        ),
        steps: q
            .steps
            .iter()
            .map(|p| MemoPruneStep {
                step: p.step,
                target_sparsity: p.target_sparsity,
                achieved_sparsity: p.achieved_sparsity,
                finetune_epochs: p.finetune_epochs,
                validation_accuracy: p.validation_accuracy,
            })
            .collect(),
        speedup: s
            .metrics
            .get(Metric::EffectiveSpeedup)
            .and_then(|m| median(&m.samples).ok()),
        versus_dense: judged.and_then(|c| c.versus_dense.clone()),
        equal_latency: q.equal_latency.as_ref().map(|e| MemoEqualLatency {
            hidden: e.dense.hidden,
            latency_ratio: e.latency_ratio,
            probes: e
                .probes
                .iter()
                .map(|(w, r)| format!("{w}: {r:.3}"))
                .collect::<Vec<_>>()
                .join(", "),
            comparison: judged.and_then(|c| c.versus_equal_latency.clone()),
        }),
        precision: q.precision.as_ref().map(|p| MemoPrecision {
            policy: p.policy.describe(),
            layers: p
                .layers
                .iter()
                .map(|l| MemoLayerDrift {
                    layer: l.layer.clone(),
                    precision: l.precision.as_str().to_owned(),
                    relative_error: l.relative_error,
                    cosine: l.cosine,
                    precision_relative_error: l.precision_relative_error,
                })
                .collect(),
        }),
        artifact: q.artifact.as_ref().map(|a| {
            let quote = |names: &[String]| {
                names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let kernels = if a.sparse_layers.is_empty() {
                "every layer on the dense kernel".to_owned()
            } else {
                format!("{} on the slice's sparse kernel", quote(&a.sparse_layers))
            };
            format!(
                "the checkpoint's own head ({}; {kernels}) on {} ({} samples), against the same head in {}; nothing trained or pruned here",
                quote(&a.head),
                format_args!("`{}`", q.dataset),
                q.split[2],
                quote(&a.reference)
            )
        }),
    })
}

/// What a slice measured, named for its backend (issue 24): a command slice is its command
/// and metric, not "dense fp32".
fn what_ran(s: &SliceEvidence, spec: Option<&crate::ingress::Slice>) -> String {
    use crate::ingress::SliceBackend;
    let under_load = if spec.is_some_and(|x| x.load.is_some()) {
        ", serving requests under load"
    } else {
        ""
    };
    let pattern = spec.map_or_else(|| s.sparsity.clone(), |x| x.sparsity.describe());
    let built_in = format!("{pattern} · {}", s.precision.as_str());
    let what = match spec.map(|x| &x.backend) {
        Some(SliceBackend::Command(c)) => {
            let metrics: Vec<&str> = s
                .metrics
                .keys()
                .map(|k| k.name())
                .filter(|m| *m != "calibration")
                .collect();
            format!(
                "command `{}`, reporting {}",
                c.candidate.display(),
                metrics.join(", ")
            )
        }
        Some(SliceBackend::Import(i)) => format!("imported from {} `{}`", i.format.as_str(), i.benchmark),
        Some(SliceBackend::Sim(p)) => format!("{built_in} · simulated on {}", p.name),
        Some(SliceBackend::Model(_)) => format!("{built_in} · trained model on the CPU kernels"),
        Some(SliceBackend::Kernels { .. } | SliceBackend::Serving { .. }) | None => {
            format!("{built_in} · CPU kernels")
        }
    };
    // A merged shard on another kind of runner (issue 22): say which machine measured it.
    let elsewhere = s.measured_on.as_ref().map_or_else(String::new, |e| {
        format!(
            " · measured on {} (runner class {})",
            e.cpu_model,
            e.runner_class()
        )
    });
    format!("{what}{under_load}{elsewhere}")
}

fn memo_slice(s: &SliceEvidence, decision: &Decision, diagnoses: &[SliceDiagnosis]) -> MemoSlice {
    let diagnosis = diagnoses.iter().find(|d| d.same_slice(s));
    let fidelity = |op: &str| s.op_costs.iter().find(|c| c.op == op).and_then(|c| c.fidelity);
    let median = |metric: Metric| s.metrics.get(metric).and_then(|m| median(&m.samples).ok());
    MemoSlice {
        pack: s.pack.clone(),
        slice: s.slice.clone(),
        sparsity: s.sparsity.clone(),
        precision: s.precision.as_str().to_owned(),
        what: String::new(),
        nominal_sparsity: None,
        ideal_speedup: None,
        fallback_share: None,
        samples: s.metrics.get(Metric::Latency).map_or(0, |m| m.samples.len()),
        // Simulated slices carry their (exact) values as counters, not samples.
        latency_s: median(Metric::Latency).or_else(|| s.counters.value(Metric::Latency)),
        speedup: median(Metric::EffectiveSpeedup).or_else(|| s.counters.value(Metric::EffectiveSpeedup)),
        speedup_ci: s
            .metrics
            .get(Metric::EffectiveSpeedup)
            .and_then(|m| quantile_ci(&m.samples, 0.5, 0.95)),
        latency_summary: s
            .metrics
            .get(Metric::Latency)
            .and_then(|m| FiveNumber::of(&m.samples)),
        comparator_summary: s.comparator.as_ref().and_then(|m| FiveNumber::of(&m.samples)),
        runs: s.runs.len(),
        run_mode: s.run_mode.map(|m| m.as_str().to_owned()),
        within_run_cv: diagnosis.and_then(|d| d.within_run_cv),
        between_run_cv: diagnosis.and_then(|d| d.between_run_cv),
        fallback_rate: s.plan.fallback_rate(),
        metadata_overhead: s.counters.value(Metric::MetadataOverhead).unwrap_or(0.0),
        bottleneck: decision
            .guardrails
            .iter()
            .find(|o| o.same_slice(s))
            .and_then(|o| o.bottleneck),
        ops: s
            .plan
            .ops
            .iter()
            .map(|o| MemoOp {
                name: o.op.name.clone(),
                shape: format!("{}x{}x{}", o.op.m, o.op.n, o.op.k),
                path: o.path,
                reason: o.reason.clone(),
                relative_error: fidelity(&o.op.name).map(|f| f.relative_error),
                cosine: fidelity(&o.op.name).map(|f| f.cosine),
            })
            .collect(),
        graph_nodes: s.plan.graph.clone(),
        failure: s.failure.as_ref().map(|f| format!("{}: {}", f.stage, f.message)),
        diagnosis: diagnosis.cloned(),
        structure: s.structure.clone(),
        artifacts: s.artifacts.clone(),
        break_even: s.break_even.clone(),
        load: None,
        repro: None,
    }
}

/// Format a number for people: 4 significant digits, scientific outside [1e-3, 1e6).
fn format_number(value: minijinja::Value) -> String {
    match f64::try_from(value.clone()) {
        Ok(x) => super::text::number(x),
        Err(_) if value.is_none() || value.is_undefined() => "–".to_owned(),
        Err(_) => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::metric::Metric;
    use crate::ingress::{GitInfo, Location, Rule, Severity};
    use std::collections::BTreeMap;

    /// A diagnosis with every section filled: a roofline point, a fallback with its impact.
    fn fixed_diagnosis() -> SliceDiagnosis {
        use crate::validate::{FallbackImpact, RooflinePoint};
        SliceDiagnosis {
            pack: "quickstart".into(),
            slice: "bert-qkv-2of4-fp32".into(),
            class: Some(Bottleneck::Compute),
            rule: "intensity 42.47 FLOP/B ≥ ridge 13.94 FLOP/B".into(),
            roofline: Some(RooflinePoint {
                machine: "cpu".into(),
                roofs_source: "measured at gate time (avx512f, 2 thread(s))".into(),
                peak_gflops: 223.1,
                bandwidth_gbps: 16.0,
                ridge_flop_per_byte: 223.1 / 16.0,
                intensity_flop_per_byte: 42.47,
                achieved_gflops_useful: 79.8,
                achieved_gflops_dense_equivalent: 159.7,
                attainable_gflops: 223.1,
                share_of_attainable: 79.8 / 223.1,
            }),
            fallback: FallbackImpact {
                ops: 2,
                fallback_ops: vec!["odd".into()],
                latency_share: Some(0.4887),
                sparse_ops_speedup: Some(1.5),
                latency_gain: Some(0.1629),
                energy_share: None,
                energy_gain: None,
                note: "per-op latency: medians of 5 interleaved per-op passes after sampling".into(),
            },
            metadata_overhead: 0.0625,
            within_run_cv: Some(2.1),
            between_run_cv: Some(4.3),
        }
    }

    /// The first screen of [`fixed_memo`]: a failed speedup routed to the owner, and a
    /// machine-checked trigger that fired.
    fn fixed_brief(trigger: &str) -> super::super::Brief {
        use super::super::{Action, Brief, Call, Finding, RollbackState, TriggerState};
        Brief {
            call: Call::DoNotShip,
            headline: "Do not ship: the rollback trigger of quickstart fired (speedup below 1.2x).".into(),
            findings: vec![Finding {
                pack: "quickstart".into(),
                slice: "bert-qkv-2of4-fp32".into(),
                guardrail: Some("qkv-speedup".into()),
                metric: Metric::EffectiveSpeedup,
                verdict: Verdict::Fail,
                value: "1.61x".into(),
                bound: "≥ 2.5x".into(),
                interval: Some("[1.58x, 1.64x] @ 95%".into()),
                stage: Stage::Validation,
                concern: crate::domain::Concern::Kernel,
                role: "owner".into(),
            }],
            act: vec![Action {
                pack: "quickstart".into(),
                role: "owner".into(),
                holders: vec!["Ada <ada@example.com>".into()],
                concerns: vec![crate::domain::Concern::Kernel],
                titles: vec!["accelerator architecture owner".into()],
                routed_by: "nobody holds role `accelerator`, so the owner role".into(),
                on: vec!["bert-qkv-2of4-fp32 effective_speedup".into()],
            }],
            rollback: vec![RollbackState {
                pack: "quickstart".into(),
                description: trigger.into(),
                when: Some("qkv-speedup".into()),
                action: Some("ship dense".into()),
                state: TriggerState::Fired,
                why: "qkv-speedup failed".into(),
            }],
        }
    }

    /// A memo with fixed evidence, so its rendering can be snapshotted byte for byte.
    fn fixed_memo(trigger: &str) -> Memo {
        let environment = Environment {
            tool_version: "0.1.0".into(),
            rustc: "rustc 1.95.0".into(),
            kernel_libs: BTreeMap::from([("gemm".into(), "0.19.0".into())]),
            cpu_model: "AMD EPYC (test)".into(),
            cpu_features: vec!["avx2".into(), "fma".into()],
            kernel_paths: BTreeMap::from([
                ("bf16".into(), "widen-f32".into()),
                ("fp32".into(), "avx2-f32".into()),
            ]),
            bf16_pick: None,
            logical_cpus: 2,
            threads: 2,
            os: "linux-x86_64".into(),
            os_release: "6.1".into(),
            git: Some(GitInfo {
                commit: "0123abcd".into(),
                branch: Some("main".into()),
                dirty: false,
            }),
            roofs: Some(crate::ingress::MachineRoofs {
                peak_gflops: 223.1,
                bandwidth_gbps: 16.0,
                isa: "avx512f".into(),
                threads: 2,
                triad_bytes: 134_217_720,
                measured_s: 0.19,
                precision_peaks: vec![crate::ingress::PrecisionPeak {
                    precision: crate::domain::Precision::Bf16,
                    peak_gops: 446.2,
                    instruction: "vdpbf16ps".into(),
                }],
            }),
            stack: BTreeMap::from([("cuda".into(), "12.4".into())]),
        };
        let outcome = |metric, rule, verdict, value, ci: (f64, f64), stage| GuardrailOutcome {
            pack: "quickstart".into(),
            slice: "bert-qkv-2of4-fp32".into(),
            guardrail: None,
            metric,
            rule,
            verdict,
            finding: verdict,
            severity: Severity::Block,
            value: Some(value),
            baseline: None,
            ci_low: Some(ci.0),
            ci_high: Some(ci.1),
            p_value: None,
            confidence: 0.95,
            samples: 40,
            bottleneck: Some(Bottleneck::Compute),
            stage,
            detail: format!("median {value} ({metric})"),
            location: Some(Location {
                file: "scenarios/quickstart.yaml".into(),
                line: 9,
                col: 5,
            }),
            yardstick: None,
            undecided_by: None,
        };
        let guardrails = vec![
            outcome(
                Metric::FallbackRate,
                Rule::AtMost { bound: 0.0 },
                Verdict::Pass,
                0.0,
                (0.0, 0.0),
                Stage::Validation,
            ),
            outcome(
                Metric::EffectiveSpeedup,
                Rule::AtLeast { bound: 2.5 },
                Verdict::Fail,
                1.61,
                (1.58, 1.64),
                Stage::Validation,
            ),
        ];
        Memo {
            schema_version: MEMO_SCHEMA_VERSION,
            verdict: Verdict::Fail,
            exit_code: ExitCode::Fail,
            first_failing_stage: Some(Stage::Validation),
            counts: VerdictCounts {
                pass: 1,
                warn: 0,
                inconclusive: 0,
                fail: 1,
            },
            environment,
            bf16_kernel: None,
            packs: vec![MemoPack {
                name: "quickstart".into(),
                path: "scenarios/quickstart.yaml".into(),
                digest: "sha256:feed".into(),
                description: Some("BERT-base layers".into()),
                owners: vec![Owner {
                    name: "Ada".into(),
                    email: "ada@example.com".into(),
                    role: "owner".into(),
                }],
                rollback_trigger: trigger.into(),
                rollback_action: Some("ship dense".into()),
            }],
            slices: vec![MemoSlice {
                pack: "quickstart".into(),
                slice: "bert-qkv-2of4-fp32".into(),
                sparsity: "2:4".into(),
                precision: "fp32".into(),
                what: "2:4 · fp32 · CPU kernels".into(),
                nominal_sparsity: Some(0.5),
                ideal_speedup: Some(2.0),
                fallback_share: Some(0.4887),
                samples: 40,
                latency_s: Some(0.00123),
                speedup: Some(1.61),
                speedup_ci: Some((1.58, 1.64)),
                latency_summary: FiveNumber::of(&[0.0012, 0.00123, 0.00125, 0.0013]),
                comparator_summary: FiveNumber::of(&[0.0019, 0.00198, 0.0020, 0.0022]),
                fallback_rate: 0.0,
                metadata_overhead: 0.0625,
                bottleneck: Some(Bottleneck::Compute),
                ops: vec![MemoOp {
                    name: "qkv".into(),
                    shape: "128x2304x768".into(),
                    path: KernelPath::Sparse,
                    reason: "2:4 structured kernel".into(),
                    relative_error: Some(0.2871),
                    cosine: Some(0.9579),
                }],
                failure: None,
                runs: 3,
                run_mode: Some("in_process".into()),
                within_run_cv: Some(2.1),
                between_run_cv: Some(4.3),
                diagnosis: Some(fixed_diagnosis()),
                structure: vec![],
                break_even: vec![],
                graph_nodes: vec![],
                load: None,
                repro: None,
                artifacts: vec![],
            }],
            brief: fixed_brief(trigger),
            matrix: matrix(&guardrails),
            guardrails,
            not_applicable: vec![],
            contradictions: vec!["the sparse path is faster than dense on a but slower on b".into()],
            sign_off: vec![SignOff {
                role: "owner".into(),
                holders: vec!["Ada <ada@example.com>".into()],
            }],
            environment_drift: vec![],
            baselines: vec![],
            presets: vec![],
            measured_s: 1.5,
            quality: vec![],
            trends: vec![],
        }
    }

    #[test]
    fn markdown_rendering_is_byte_stable() {
        let memo = fixed_memo("speedup below 1.2x");
        let first = memo.render_markdown().unwrap();
        assert_eq!(first, memo.render_markdown().unwrap());
        insta::assert_snapshot!("memo_md", first);
    }

    /// Issue 22: the PR comment of the fixed memo, byte for byte (its failed guardrail
    /// with value and interval, the fired trigger, the link).
    #[test]
    fn pr_comment_rendering_is_byte_stable() {
        let memo = fixed_memo("speedup below 1.2x");
        let link = super::super::MemoLink::url("https://ci.example.com/jobs/42").unwrap();
        insta::assert_snapshot!("pr_comment_md", memo.render_pr_comment(&link).unwrap());
    }

    #[test]
    fn html_rendering_is_byte_stable() {
        let memo = fixed_memo("speedup below 1.2x");
        insta::assert_snapshot!("memo_html", memo.render_html().unwrap());
    }

    /// The trend partial appears only with history, and renders from the trends passed in.
    #[test]
    fn issue_8_trend_chart_comes_from_the_history_passed_in() {
        let plain = fixed_memo("t").render_html().unwrap();
        assert!(!plain.contains("Run history"));
        let memo = fixed_memo("t").with_trends(vec![MemoTrend {
            pack: "p".into(),
            slice: "s".into(),
            metric: "latency".into(),
            points: vec![(7, 1.0), (8, 1.0), (9, 2.0)],
            change_points: vec![2],
        }]);
        let html = memo.render_html().unwrap();
        assert_eq!(html, memo.render_html().unwrap());
        assert!(html.contains("<h2>Run history</h2>"));
        assert!(html.contains("over the last 3 recorded runs"));
        assert!(html.contains("run 9</text>"));
    }

    /// Issue 6: the HTML memo is self-contained: no scripts, no external resources.
    #[test]
    fn issue_6_html_makes_no_external_requests() {
        let html = fixed_memo("t").render_html().unwrap();
        for needle in ["<script", "src=", "href=", "url(", "@import", "<link", "<iframe"] {
            assert!(!html.contains(needle), "memo.html contains {needle:?}");
        }
    }

    /// Issue 6: the HTML memo draws one roofline per machine with every diagnosed slice
    /// on it, says what is plotted and how the roofs were measured; Markdown gets the table.
    #[test]
    fn issue_6_memo_places_each_slice_on_a_roofline() {
        let mut memo = fixed_memo("t");
        let mut second = memo.slices[0].clone();
        second.slice = "<b>other</b>".into();
        let mut third = second.clone();
        if let Some(r) = second.diagnosis.as_mut().and_then(|d| d.roofline.as_mut()) {
            r.intensity_flop_per_byte = 5.0;
        }
        third.slice = "twin".into();
        memo.slices.extend([second, third]);
        let html = memo.render_html().unwrap();
        assert_eq!(
            html.matches("aria-label=\"Roofline of cpu\"").count(),
            1,
            "{html}"
        );
        // Three slices, two on the same spot: two dots, the shared one labelled `1,3`.
        assert_eq!(html.matches("<circle ").count(), 2, "{html}");
        assert!(html.contains(">1,3</text>"), "{html}");
        assert!(html.contains("y: <strong>useful</strong> GFLOP/s"));
        assert!(html.contains("peak <strong>223.1 GFLOP/s</strong>"));
        assert!(html.contains("&lt;b&gt;other&lt;/b&gt;") && !html.contains("<b>other"));
        assert_eq!(html, memo.render_html().unwrap());
        let md = memo.render_markdown().unwrap();
        assert!(
            md.contains(
                "| quickstart/bert-qkv-2of4-fp32 | cpu | 42.47 | 13.94 | 79.8 | 159.7 | 223.1 | 35.77% |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| 1 of 2 (odd) | 48.87% | 1.5x | 16.29% | not measured |"),
            "{md}"
        );
    }

    /// A CPU with no bf16 or int8 dot-product instruction measures no precision peaks, and
    /// the evidence then omits the field: the roofs line still renders, with the f32 peak
    /// alone. (It failed on "undefined value" on an AVX2 CPU, run under qemu: issue 20.)
    #[test]
    fn the_roofs_line_renders_without_precision_peaks() {
        let mut memo = fixed_memo("t");
        let roofs = memo.environment.roofs.as_mut().unwrap();
        roofs.precision_peaks.clear();
        let omitted = serde_json::to_value(&roofs).unwrap();
        assert!(omitted.get("precision_peaks").is_none(), "{omitted}");
        let md = memo.render_markdown().unwrap();
        assert!(
            md.contains("f32 FMA (avx512f, 16 independent FMA chains per thread on registers, best of 6 trials) and **16 GB/s**"),
            "{md}"
        );
        let html = memo.render_html().unwrap();
        assert!(
            html.contains("best of 6 trials) and <strong>16 GB/s</strong>"),
            "{html}"
        );
    }

    #[test]
    fn html_escapes_pack_strings() {
        let html = fixed_memo("<script>alert(1)</script>").render_html().unwrap();
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"));
    }

    #[test]
    fn numbers_read_well() {
        let f = |x: f64| format_number(minijinja::Value::from(x));
        assert_eq!(f(1.23456), "1.235");
        assert_eq!(f(0.0012346), "0.001235");
        assert_eq!(f(1234.56), "1235");
        assert_eq!(f(2.0), "2");
        assert_eq!(f(1.5e-6), "1.500e-6");
        assert_eq!(f(0.0), "0");
        assert_eq!(format_number(minijinja::Value::from(())), "–");
    }
}
