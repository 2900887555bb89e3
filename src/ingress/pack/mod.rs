//! The scenario-pack file format: the serde types *are* the contract.
//!
//! The JSON Schema under `schemas/scenario-pack.schema.json` is derived from these types
//! (schemars) and drift-checked by a test, so the schema and the loader can never disagree.
//! Fields that need a value check beyond their type (a sparsity string, a percentage) stay
//! strings here and are parsed by the semantic checks, which can then point at the exact
//! line and column of the offending value.

mod backends;

pub use crate::domain::Precision;
pub use backends::Backend;
pub(crate) use backends::check_backend;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Version of the pack format this build understands.
pub const PACK_SCHEMA_VERSION: u32 = 1;

/// One YAML scenario pack: who owns it, what it measures, and what must hold.
///
/// Top-level keys starting with `x-` (and the `anchors` key) are reserved for YAML anchors
/// and shared blocks; the loader ignores them after merge keys are expanded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("patternProperties" = { "^x-": {} }))]
pub struct PackFile {
    /// Pack format version; must be 1.
    pub schema_version: u32,
    /// Stable pack name: used in slice ids and golden baseline paths.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_-]*$"), length(min = 1, max = 64))]
    pub name: String,
    /// Free text for the memo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// People accountable for the verdict, each with a role; at least one.
    #[schemars(length(min = 1))]
    pub owners: Vec<Owner>,
    /// What triggers a rollback and what to do then; the memo quotes it.
    pub rollback: Rollback,
    /// Which owner role acts on failures of each concern (issue 24): keys `lowering`,
    /// `kernel`, `quality`, `serving`, `harness`; values are roles some owner holds.
    /// Unrouted concerns go to the role named after the concern when an owner holds it
    /// (`compiler`, `accelerator`, `model-optimization`, `serving`, `owner`), else to
    /// `owner`, else to the first owner.
    #[serde(default, skip_serializing_if = "Routing::is_empty")]
    pub routing: Routing,
    /// What the machine must have for the pack to run at all (issue 25), e.g.
    /// `[nvidia-gpu]`: `validate` and `gate` refuse the pack (exit 2) where one is missing,
    /// instead of running slices that can only fail.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub requires: Vec<Requirement>,
    /// Metadata that must match for evidence to be comparable.
    #[serde(default)]
    pub lock: LockPolicy,
    /// How many samples to take, and how long to spend.
    #[serde(default)]
    pub samples: SamplePolicy,
    /// Seed for every random choice (input data, bootstrap resampling).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Guardrails applied to every slice, in addition to each slice's own.
    #[serde(default)]
    pub guardrails: Vec<Guardrail>,
    /// The workload slices; a slice listing several sparsities or precisions expands into
    /// one slice per combination.
    #[schemars(length(min = 1))]
    pub slices: Vec<SliceSpec>,
    /// A home for YAML anchors (`anchors: {shape: &shape {...}}`); ignored by the runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchors: Option<serde_json::Value>,
}

/// Something a machine must have for a pack to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Requirement {
    /// An NVIDIA GPU the driver exposes (what a `backend: command` slice running CUDA
    /// needs).
    NvidiaGpu,
}

impl Requirement {
    /// The name packs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Requirement::NvidiaGpu => "nvidia-gpu",
        }
    }
}

fn default_seed() -> u64 {
    0x5eed
}

/// An accountable person and their role in sign-off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Owner {
    /// Display name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Contact, also the identity used for signatures.
    #[schemars(length(min = 3))]
    pub email: String,
    /// Role in sign-off, e.g. `owner`, `release-manager`, `reviewer`. It names the role's
    /// signature file, so it is a plain name (issue 23: a role with `/` and `..` once made
    /// `memo sign` write outside the output directory).
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_-]*$"), length(min = 1, max = 64))]
    pub role: String,
}

/// When to roll back and how; a gate without a rollback plan is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rollback {
    /// The condition that triggers a rollback, in words a release manager can act on; the
    /// memo quotes it as the description of `when`.
    #[schemars(length(min = 1))]
    pub trigger: String,
    /// The same condition, machine-checked (issue 24): a boolean expression over the ids of
    /// the pack's guardrails, e.g. `block-speedup or no-fallback`, with `and`, `or`, `not`
    /// and parentheses. A guardrail id is true when that guardrail failed on some slice,
    /// false when it passed on every slice it applies to, and unknown otherwise. When the
    /// expression is true the rollback trigger has fired and the gate fails; when it is
    /// unknown the gate cannot pass. Without `when` the memo says the trigger is free text
    /// and was not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub when: Option<String>,
    /// What to do when it fires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

/// Owner roles per concern (see [`PackFile::routing`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Routing {
    /// Lowering and dense fallbacks: the compiler sparsity pass owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lowering: Option<String>,
    /// Kernel speed: the accelerator architecture owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// Model quality: the model optimization lead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<String>,
    /// Latency under load: the serving performance owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<String>,
    /// Slices that did not run: the pack owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness: Option<String>,
}

impl Routing {
    /// Whether no concern is routed explicitly.
    pub fn is_empty(&self) -> bool {
        self == &Routing::default()
    }

    /// The role routed explicitly for `concern`, if any.
    pub fn role_for(&self, concern: crate::domain::Concern) -> Option<&str> {
        use crate::domain::Concern;
        match concern {
            Concern::Lowering => self.lowering.as_deref(),
            Concern::Kernel => self.kernel.as_deref(),
            Concern::Quality => self.quality.as_deref(),
            Concern::Serving => self.serving.as_deref(),
            Concern::Harness => self.harness.as_deref(),
        }
    }
}

/// Which parts of the environment must match a golden baseline.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LockPolicy {
    /// Refuse to gate from a dirty git work tree.
    #[serde(default)]
    pub require_clean_git: bool,
    /// Worker threads for the CPU kernels; defaults to the machine's available parallelism.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub threads: Option<u32>,
    /// Compare against golden baselines measured on another checkpoint (issue 21): the
    /// changed files are then listed as environment drift in the memo. Off by default: a
    /// baseline blessed on one checkpoint is refused against another.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_artifact_change: bool,
    /// The pack's own stack, locked like the built-in fields (issue 24): CUDA, driver,
    /// framework and compiler versions read from an environment variable or a command's
    /// output, recorded in the evidence and compared with a baseline's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub fields: Vec<LockField>,
}

/// One pack-defined lock field: exactly one of `env` or `command`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LockField {
    /// The field's name in the lock, e.g. `cuda`, `torch`.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_.-]*$"), length(min = 1, max = 64))]
    pub name: String,
    /// Read the value from this environment variable (`unset` when it is not set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$"), length(min = 1, max = 128))]
    pub env: Option<String>,
    /// Or from what this program prints (no shell; run in the pack's directory, 10 s at
    /// most, its stdout trimmed, whitespace collapsed, at most 256 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub command: Option<Vec<String>>,
}

/// Sampling budget for each slice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SamplePolicy {
    /// Minimum warm-up iterations before timing; warm-up continues until timings settle.
    #[serde(default = "default_warmup")]
    #[schemars(range(min = 0, max = 10000))]
    pub warmup: u32,
    /// Samples (paired slice/comparator iterations) to take at least.
    #[serde(default = "default_min_samples")]
    #[schemars(range(min = 3, max = 100000))]
    pub min: u32,
    /// Samples to take at most.
    #[serde(default = "default_max_samples")]
    #[schemars(range(min = 3, max = 100000))]
    pub max: u32,
    /// Wall-clock budget per slice, in seconds; sampling stops at `min` samples or the
    /// budget, whichever comes later, and never past `max`.
    #[serde(default = "default_time_budget")]
    #[schemars(range(min = 0.001, max = 86400.0))]
    pub time_budget_s: f64,
    /// Drop outliers (beyond Tukey's 3·IQR fences or with a MAD z-score above 3.5) before
    /// judging baseline-relative guardrails. Off by default: outliers are always flagged
    /// and counted in the verdict's detail, but a slow sample is often the regression
    /// itself, so removing it must be a decision the pack owner writes down.
    #[serde(default)]
    pub drop_outliers: bool,
    /// Independent runs per slice (DESIGN.md §6): each warms up afresh, then samples the
    /// slice, its dense comparator and a small calibration workload interleaved. The run
    /// is the unit of replication; with 2 or more, baseline-relative rules use run-level
    /// statistics. The sample counts and the time budget above apply to each run.
    #[serde(default = "default_runs")]
    #[schemars(range(min = 1, max = 1000))]
    pub runs: u32,
    /// Most runs the gate may plan for this slice from its golden baseline. When set (and
    /// at least `runs`), `runs` is the minimum: before anything runs, the gate estimates
    /// from the baseline's between-run spread how many runs per side make each
    /// baseline-relative margin detectable (80% power at the guardrail's confidence) and
    /// runs that many, capped here; when even the cap cannot resolve the margin it says so
    /// before spending the time. Unset: exactly `runs` runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_runs: Option<u32>,
    /// How runs are separated: `process` (each run in a fresh child process of sparsegate,
    /// so process-level speed modes are sampled; the default with 2 or more runs) or
    /// `in_process` (runs repeat inside the gate's process; faster, but every run shares
    /// one speed mode, and the memo says so; the default for a single run, where there is
    /// no between-run spread to sample).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_mode: Option<RunMode>,
    /// Sequential sampling over runs (issue 5): take `runs` runs, then keep adding one run
    /// at a time while a blocking guardrail is undecided, up to `max_runs` (required, above
    /// `runs`). Each look reads the intervals at an O'Brien–Fleming alpha-spending level,
    /// so the error rates stay valid however many looks are taken; verdicts say which look
    /// decided them. Replaces run planning for the slice.
    #[serde(default)]
    pub sequential: bool,
}

impl SamplePolicy {
    /// The run mode in force: the pack's choice, else `process` for 2 or more runs (the
    /// run is the unit of replication, so runs must be able to differ as processes do)
    /// and `in_process` for one.
    pub fn effective_run_mode(&self) -> RunMode {
        self.run_mode.unwrap_or(if self.runs >= 2 {
            RunMode::Process
        } else {
            RunMode::InProcess
        })
    }
}

/// How a slice's runs are separated from one another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunMode {
    /// Every run in the gate's own process, one after another: each warms up afresh, but
    /// all share the process's speed mode (memory layout, frequency, scheduler placement).
    InProcess,
    /// Every run in a fresh child process of sparsegate (`sparsegate __run-slice`), which
    /// prepares the slice, checks it, warms up and samples on its own: process-level speed
    /// modes are sampled, as the run-level statistics assume.
    Process,
}

impl RunMode {
    /// The name used in packs and the memo.
    pub fn as_str(self) -> &'static str {
        match self {
            RunMode::InProcess => "in_process",
            RunMode::Process => "process",
        }
    }
}

fn default_runs() -> u32 {
    1
}

fn default_warmup() -> u32 {
    3
}
fn default_min_samples() -> u32 {
    10
}
fn default_max_samples() -> u32 {
    50
}
fn default_time_budget() -> f64 {
    5.0
}

impl Default for SamplePolicy {
    fn default() -> Self {
        Self {
            warmup: default_warmup(),
            min: default_min_samples(),
            max: default_max_samples(),
            time_budget_s: default_time_budget(),
            drop_outliers: false,
            runs: default_runs(),
            max_runs: None,
            run_mode: None,
            sequential: false,
        }
    }
}

/// One workload cell before matrix expansion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SliceSpec {
    /// Stable id; expanded slices get `<id>-<sparsity>-<precision>`.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_-]*$"), length(min = 1, max = 64))]
    pub id: String,
    /// Free text for the memo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// What to compute (backends `cpu` and `sim`; required there, refused elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Workload")]
    pub workload: Option<Workload>,
    /// Weight sparsity patterns to test: `dense`, `N:M` (e.g. `2:4`),
    /// `{unstructured: {sparsity: 90%}}` (or `{density: 10%}`), or
    /// `{block: {size: 16x16, density: 25%}}` (or `sparsity: 75%`). Density is the share of
    /// weights kept, sparsity the share removed; a bare fraction (`unstructured:0.9`) is
    /// refused as ambiguous. Backends `cpu` and `sim` need at least one; `command` and
    /// `import` slices take none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sparsity: Vec<SparsityEntry>,
    /// Precisions to test.
    #[serde(default = "default_precisions")]
    #[schemars(length(min = 1))]
    pub precision: Vec<Precision>,
    /// Where it runs.
    #[serde(default = "default_backend")]
    pub backend: Backend,
    /// For `backend: sim`: the accelerator preset, a built-in name (`a100`, `h100`, `h200`,
    /// `sparseloop-stc`, `systolic-32-os`, ...) or a preset YAML file relative to the pack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub preset: Option<String>,
    /// For `backend: command`: the benchmark command to run and its optional comparator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "CommandSpec")]
    pub command: Option<CommandSpec>,
    /// For `backend: import`: which result file, in which format, holds this slice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "ImportSpec")]
    pub import: Option<ImportSpec>,
    /// Serve the slice as requests arriving at a target rate through a bounded queue, so
    /// `latency` (and its p50/p95/p99) is request latency with queueing and `drop_rate` the
    /// share of requests the full queue turned away, instead of timing back-to-back
    /// iterations against the comparator. On `cpu` the kernels serve each request, on `sim`
    /// the simulated accelerator (its deterministic service time), on `command` one
    /// invocation of the command. A list (one entry per arrival pattern) expands into one
    /// slice per entry, its id ending in the pattern (`-steady`, `-bursts`), so the memo can
    /// say when a workload regresses only under bursts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Loads")]
    pub load: Option<Loads>,
    /// Guardrails for this slice (added to the pack-level ones).
    #[serde(default)]
    pub guardrails: Vec<Guardrail>,
    /// How a model workload (`workload.mlp`) reaches each sparsity: in one shot or along a
    /// gradual ramp with fine-tuning, recorded step by step for the memo. Only for model
    /// workloads; defaults to one shot with one fine-tuning epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // Not nullable in the schema: an unknown key inside is then reported as such, located.
    #[schemars(with = "PruningSpec")]
    pub pruning: Option<PruningSpec>,
    /// Operator-aware precision policies for a model workload's inference, one slice per
    /// policy (in place of the `precision` axis, `<id>-<sparsity>-<policy name>`): a
    /// default format for every layer and per-layer exceptions, e.g.
    /// `{name: mixed, default: int8, keep: {fc2: fp32}}`. Training stays fp32 and every
    /// policy of a spec starts from the same trained model; the policy decides the numerics
    /// the model is *evaluated* in (accuracy, quality_delta, per-layer drift against the fp32
    /// dense reference). Only for model workloads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub precision_policies: Vec<PrecisionPolicy>,
}

/// One entry of a slice's `sparsity` list (issue 24): a string (`dense`, `2:4`, or the
/// command-line form `unstructured:sparsity=90%`) or an explicit mapping that names which
/// share its percentage is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SparsityEntry {
    /// `dense`, `N:M`, or `unstructured:density=P%` / `block:RxC:sparsity=P%`.
    Text(String),
    /// `{unstructured: {sparsity: 90%}}` or `{unstructured: {density: 10%}}`.
    Unstructured {
        /// Which share of the weights is kept or removed, anywhere in the matrix.
        unstructured: ShareSpec,
    },
    /// `{block: {size: 16x16, density: 25%}}` or `{block: {size: 16x16, sparsity: 75%}}`.
    Block {
        /// The block shape and which share of blocks is kept or removed.
        block: BlockSpec,
    },
}

/// Exactly one of `density` (share kept) and `sparsity` (share removed), as a percentage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShareSpec {
    /// Share of weights kept, a percentage in (0%, 100%], e.g. `10%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub density: Option<String>,
    /// Share of weights removed, a percentage in [0%, 100%), e.g. `90%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparsity: Option<String>,
}

/// A block pattern: blocks of `size` (`RxC`) weights kept or dropped together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BlockSpec {
    /// Block shape `RxC`, e.g. `16x16`.
    pub size: String,
    /// Share of blocks kept, a percentage in (0%, 100%], e.g. `25%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub density: Option<String>,
    /// Share of blocks removed, a percentage in [0%, 100%), e.g. `75%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparsity: Option<String>,
}

impl ShareSpec {
    /// The share it names and its text, or why it names none or both.
    fn share(&self) -> Result<(crate::domain::sparsity::Share, &str), ShareError> {
        use crate::domain::sparsity::Share;
        match (&self.density, &self.sparsity) {
            (Some(d), None) => Ok((Share::Density, d)),
            (None, Some(s)) => Ok((Share::Sparsity, s)),
            (Some(_), Some(_)) => Err(ShareError::Both),
            (None, None) => Err(ShareError::Neither),
        }
    }
}

/// A share block that does not name exactly one of `density` and `sparsity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum ShareError {
    #[error("sets both `density` and `sparsity`; they are one number (density = 100% − sparsity)")]
    Both,
    #[error("needs `density` (share kept) or `sparsity` (share removed)")]
    Neither,
}

impl SparsityEntry {
    /// The sparsity this entry spells.
    ///
    /// # Errors
    ///
    /// What is wrong with it, with the accepted forms as the hint; the bare fractions
    /// (`unstructured:0.9`) are refused with their explicit rewrite.
    pub fn resolve(&self) -> Result<crate::domain::Sparsity, crate::domain::SparsityError> {
        use crate::domain::Sparsity;
        use crate::domain::sparsity::{block_shape, density_of};
        let plain = |message: String, hint: &str| crate::domain::SparsityError {
            message,
            hint: hint.to_owned(),
        };
        match self {
            SparsityEntry::Text(s) => s.parse(),
            SparsityEntry::Unstructured { unstructured } => {
                let (share, text) = unstructured.share().map_err(|m| {
                    plain(
                        format!("`unstructured` {m}"),
                        "e.g. `{unstructured: {sparsity: 90%}}`",
                    )
                })?;
                Ok(Sparsity::Unstructured {
                    density: density_of(share, text)?,
                })
            }
            SparsityEntry::Block { block } => {
                let (rows, cols) = block_shape(&block.size)
                    .map_err(|e| plain(e.to_string(), "e.g. `{block: {size: 16x16, density: 25%}}`"))?;
                let spec = ShareSpec {
                    density: block.density.clone(),
                    sparsity: block.sparsity.clone(),
                };
                let (share, text) = spec.share().map_err(|m| {
                    plain(
                        format!("`block` {m}"),
                        "e.g. `{block: {size: 16x16, density: 25%}}`",
                    )
                })?;
                Ok(Sparsity::Block {
                    rows,
                    cols,
                    density: density_of(share, text)?,
                })
            }
        }
    }

    /// Where in the entry a problem with its value sits, relative to the entry's pointer:
    /// the percentage of a mapping, the string itself otherwise.
    pub fn value_pointer(&self) -> &'static str {
        match self {
            SparsityEntry::Text(_) => "",
            SparsityEntry::Unstructured { unstructured } => {
                if unstructured.density.is_some() {
                    "/unstructured/density"
                } else {
                    "/unstructured/sparsity"
                }
            }
            SparsityEntry::Block { block } => {
                if block.density.is_some() {
                    "/block/density"
                } else {
                    "/block/sparsity"
                }
            }
        }
    }
}

impl From<&str> for SparsityEntry {
    fn from(s: &str) -> Self {
        SparsityEntry::Text(s.to_owned())
    }
}

/// Per-layer precision of a model's inference. `default` alone puts every operator in one
/// format (e.g. all-int8), which is expressible on purpose so the memo can show what it
/// costs; `keep` holds the layers that need another format (typically the logits layer in
/// fp32). int8 layers use symmetric per-output-channel weight scales and a per-tensor
/// activation scale calibrated on the validation split; fp16/bf16 layers store weights and
/// activations in 16 bits and accumulate in f32; biases stay f32.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrecisionPolicy {
    /// Name of the policy: the last part of its slice's id.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_-]*$"), length(min = 1, max = 32))]
    pub name: String,
    /// Precision of every layer not listed in `keep`.
    pub default: Precision,
    /// Per-layer overrides by layer name (`fc1`, `fc2` for the MLP).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub keep: std::collections::BTreeMap<String, Precision>,
}

impl PrecisionPolicy {
    /// The precision `layer` runs in under this policy.
    pub fn precision_of(&self, layer: &str) -> Precision {
        self.keep.get(layer).copied().unwrap_or(self.default)
    }

    /// The policy in words for the memo, e.g. `int8, fc2 fp32`.
    pub fn describe(&self) -> String {
        let mut text = self.default.as_str().to_owned();
        for (layer, p) in &self.keep {
            text.push_str(&format!(", {layer} {}", p.as_str()));
        }
        text
    }
}

/// A pruning schedule: how the trained dense model is pruned to the slice's sparsity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PruningSpec {
    /// `one_shot` prunes to the target at once; `gradual` follows the cubic ramp of Zhu &
    /// Gupta (2017) over `steps` steps.
    pub schedule: PruningScheduleKind,
    /// Pruning steps of a `gradual` schedule (at least 2); a `one_shot` schedule has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub steps: Option<u32>,
    /// Fine-tuning epochs after each step, with the pruning mask held fixed.
    #[serde(default = "default_finetune_epochs")]
    #[schemars(range(max = 1000))]
    pub finetune_epochs: u32,
    /// For unstructured sparsity: keep the same fraction in every row (`per_row`, what the
    /// CSR kernel balances best) or the largest weights of the whole layer (`global`).
    #[serde(default)]
    pub scope: PruningScope,
}

fn default_finetune_epochs() -> u32 {
    1
}

/// The shape of a pruning schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PruningScheduleKind {
    /// Prune to the target sparsity in one step, then fine-tune.
    OneShot,
    /// Ramp the sparsity up along the cubic schedule, fine-tuning after every step. N:M
    /// patterns ramp as unstructured per-row sparsity and take their N:M form at the last
    /// step.
    Gradual,
}

/// Which weights compete for survival under unstructured pruning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PruningScope {
    /// The same kept fraction in every output row.
    #[default]
    PerRow,
    /// The largest magnitudes of the whole layer, rows free to differ.
    Global,
}

/// A user's benchmark command (`backend: command`). It is run once per sample and prints
/// its metrics as JSON lines, contract version 1 (`docs/command-backend.md`):
/// `{"sparsegate": 1, "metric": "latency", "unit": "s", "value": 0.0123}` or
/// `"samples": [...]` instead of `"value"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandSpec {
    /// Program and arguments, run directly (no shell): `[sh, bench.sh, "4000"]`.
    #[schemars(length(min = 1))]
    pub argv: Vec<String>,
    /// Working directory, relative to the pack's directory (default: the pack's directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Extra environment variables, added to sparsegate's own environment.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// Seconds one invocation may take; past it the whole process group is killed and the
    /// slice fails at the execution stage.
    #[serde(default = "default_command_timeout")]
    #[schemars(range(min = 0.001, max = 86400.0))]
    pub timeout_s: f64,
    /// The comparator command, run interleaved with this one (A B, B A, …) under the same
    /// timeout, so `effective_speedup` is a same-moment ratio of `latency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparator: Option<ComparatorCommand>,
    /// The baseline build of this benchmark (issue 22): the previous version, e.g. the
    /// same program built from the pull request's merge base. Its invocations are
    /// interleaved with this command's in the same session (candidate and baseline
    /// alternate which goes first), and `regress_at_most` on `latency` is then decided on
    /// the per-pair ratios candidate/baseline, run-aware, instead of against the golden
    /// baseline (which stays in the memo as history). `cwd` and `env` default to the
    /// command's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<ComparatorCommand>,
}

/// Another process run beside a `command` slice's own: its comparator (a different
/// computation, for `effective_speedup`) or its baseline build (the previous version of
/// the same computation, for `regress_at_most`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComparatorCommand {
    /// Program and arguments.
    #[schemars(length(min = 1))]
    pub argv: Vec<String>,
    /// Working directory relative to the pack (default: the slice command's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Extra environment variables (default: the slice command's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<std::collections::BTreeMap<String, String>>,
}

fn default_command_timeout() -> f64 {
    60.0
}

/// Results measured by another tool (`backend: import`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportSpec {
    /// The result file relative to the pack; for `criterion`, the criterion output
    /// directory (usually `target/criterion`).
    #[schemars(length(min = 1))]
    pub file: String,
    /// Which tool wrote it.
    pub format: ImportFormat,
    /// The entry that is this slice: a Google Benchmark `run_name`, a criterion benchmark
    /// id (`group/function`), a hyperfine command (or its `--command-name`), a
    /// pytest-benchmark `name` or `fullname`. Required for those formats; refused for the
    /// GPU trace formats (`torch_profiler`, `nsys_sqlite`), whose whole file is the slice
    /// (narrow it with `ranges`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub benchmark: Option<String>,
    /// The entry to compare against (same file); gives `effective_speedup`. Benchmark
    /// formats only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub comparator: Option<String>,
    /// GPU trace formats only: regular expressions (Rust `regex` syntax, unanchored) that
    /// classify a kernel by its name as a sparse or a dense GEMM, added to the built-in
    /// patterns (docs/gpu-traces.md). Sparse is tried first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "KernelPatterns")]
    pub kernels: Option<KernelPatterns>,
    /// GPU trace formats only: a regular expression (unanchored) over the names of the
    /// trace's ranges (torch `record_function` / `user_annotation`, NVTX ranges); only the
    /// ranges it matches count: the kernels launched inside them make `fallback_rate`, the
    /// counters, the per-range table and the latency samples (one per occurrence), e.g.
    /// `"^layer0$"` to prove one layer ran sparse. Default: every kernel, every range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub ranges: Option<String>,
}

/// Extra kernel-name patterns of a GPU trace import: `{sparse: ["my_sp_kernel"], dense:
/// ["my_gemm"]}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KernelPatterns {
    /// Patterns of sparse GEMM kernels (the sparse path ran).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sparse: Vec<String>,
    /// Patterns of dense GEMM kernels (the dense path ran: a fallback where sparse was
    /// meant).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dense: Vec<String>,
}

/// One load, or a load matrix: the same workload under several arrival patterns, one slice
/// each (issue 24).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Loads {
    /// One serving loop; the slice id is unchanged.
    One(LoadSpec),
    /// One slice per entry, each id ending in its arrival pattern; a pattern at most once.
    Matrix(#[schemars(length(min = 1, max = 3))] Vec<LoadSpec>),
}

impl Loads {
    /// The entries, in pack order, with whether they form a matrix.
    pub fn entries(&self) -> (&[LoadSpec], bool) {
        match self {
            Loads::One(l) => (std::slice::from_ref(l), false),
            Loads::Matrix(ls) => (ls, true),
        }
    }
}

/// Latency under load: `load: {arrivals: bursts, rate_hz: 200, queue: 8, requests: 704,
/// burst: 16}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    /// How requests arrive: evenly spaced, a Poisson process, or bursts.
    pub arrivals: ArrivalKind,
    /// Mean arrival rate, requests per second.
    #[schemars(range(min = 0.001, max = 1000000.0))]
    pub rate_hz: f64,
    /// Most requests in the system (waiting or in service); an arrival that finds it full
    /// is dropped and counted.
    #[serde(default = "default_queue")]
    #[schemars(range(min = 1, max = 1000000))]
    pub queue: u32,
    /// Requests offered; default: the 662 that MLPerf LoadGen's early stopping needs for a
    /// p99 claim at 99% confidence (fewer are refused when a p99 guardrail is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000000))]
    pub requests: Option<u64>,
    /// Requests per burst (`arrivals: bursts` only; default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub burst: Option<u32>,
}

fn default_queue() -> u32 {
    64
}

/// The arrival process of a `load`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalKind {
    /// Evenly spaced at the rate.
    Steady,
    /// Exponential gaps at the rate (seeded).
    Poisson,
    /// Groups of `burst` requests arriving together, groups spaced so the mean is the rate.
    Bursts,
}

/// Result formats `backend: import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ImportFormat {
    /// `--benchmark_format=json` (or `--benchmark_out`) output of Google Benchmark.
    GoogleBenchmark,
    /// criterion's saved `<dir>/<id>/new/sample.json`.
    Criterion,
    /// hyperfine `--export-json`.
    Hyperfine,
    /// pytest-benchmark `--benchmark-json` (with `--benchmark-save-data` for raw samples).
    PytestBenchmark,
    /// The PyTorch profiler's Chrome trace (`prof.export_chrome_trace(path)`): GPU kernels
    /// classified sparse / dense GEMM / other (docs/gpu-traces.md).
    TorchProfiler,
    /// Nsight Systems' SQLite export (`nsys export --type sqlite`): the same from
    /// `CUPTI_ACTIVITY_KIND_KERNEL` and `NVTX_EVENTS`.
    NsysSqlite,
}

impl ImportFormat {
    /// The name used in packs.
    pub fn as_str(self) -> &'static str {
        match self {
            ImportFormat::GoogleBenchmark => "google_benchmark",
            ImportFormat::Criterion => "criterion",
            ImportFormat::Hyperfine => "hyperfine",
            ImportFormat::PytestBenchmark => "pytest_benchmark",
            ImportFormat::TorchProfiler => "torch_profiler",
            ImportFormat::NsysSqlite => "nsys_sqlite",
        }
    }

    /// Whether this is a GPU profile (kernels and ranges) rather than benchmark results.
    pub fn is_trace(self) -> bool {
        matches!(self, ImportFormat::TorchProfiler | ImportFormat::NsysSqlite)
    }
}

fn default_precisions() -> Vec<Precision> {
    vec![Precision::Fp32]
}
fn default_backend() -> Backend {
    Backend::Cpu
}

/// What a slice computes: a sequence of operators timed together as one sample, or a
/// model trained on a real dataset whose quality is measured too. Exactly one of `ops` and
/// `mlp`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// The operators, in execution order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1))]
    pub ops: Vec<OpSpec>,
    /// A small multi-layer perceptron trained deterministically on an embedded dataset:
    /// gives the slice `accuracy` and `quality_delta` evidence next to its speed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "MlpSpec")]
    pub mlp: Option<MlpSpec>,
    /// A named production model's GEMMs (research file §E), expanded at ingress into ops
    /// named after its layers, e.g. `{name: bert-base, tokens: 128, layers: [qkv, ffn1]}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "NamedModelSpec")]
    pub model: Option<NamedModelSpec>,
    /// The checkpoint that ships (issue 21): its safetensors weights, read at ingress (every
    /// header checked, every file digested), verified tensor by tensor against the slice's
    /// `sparsity`, and timed on its own weights. The ops are its selected 2-D `.weight`
    /// tensors at `tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "CheckpointSpec")]
    pub checkpoint: Option<CheckpointSpec>,
}

/// A checkpoint workload: `checkpoint: {weights: model.safetensors, config: config.json,
/// layers: "model.layers.*.mlp.*", tokens: [1, 16, 512]}`, or `checkpoint: {graph:
/// model.onnx, tokens: 16}` for an ONNX graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSpec {
    /// A `.safetensors` file, or the `model.safetensors.index.json` of a sharded one,
    /// relative to the pack (and inside its directory tree). Give this or `graph`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub weights: Option<String>,
    /// An ONNX model (`.onnx`), relative to the pack (and inside its directory tree), instead
    /// of `weights`: every node is listed in the supported layer matrix, and its GEMMs
    /// (MatMul, Gemm, Conv with a constant weight) are verified and timed on their
    /// initializers. Ops inside control-flow subgraphs (`If` branches, `Loop` bodies) are
    /// listed as unsupported, never run. Weights in external data files are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub graph: Option<String>,
    /// The Hugging Face `config.json`, relative to the pack: its sizes are checked, and its
    /// `sparsity_config` (compressed-tensors) says which modules the checkpoint claims are
    /// sparse and which it left dense (`ignore`), and with which `sparsity_structure`: every
    /// tensor the claim covers is verified against it, and a slice testing a pattern the
    /// claim does not imply is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub config: Option<String>,
    /// Which tensors are the slice's ops: a pattern over tensor names where `*` matches any
    /// run of characters (e.g. `model.layers.*.mlp.*`); every 2-D `.weight` tensor when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub layers: Option<String>,
    /// Tokens: the M of every op (`y[N×M] = W[N×K] · x[K×M]`). A list (e.g. `[1, 16, 512]`)
    /// times every layer at each count and reports, per layer, the token count at which the
    /// sparse path stops winning (its break-even).
    pub tokens: TokenCounts,
    /// A classifier head the checkpoint defines, evaluated on a labelled dataset file: the
    /// slice gets `accuracy` and `quality_delta` (against the same head in a dense
    /// `reference` checkpoint) measured on the shipped weights themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "EvalSpec")]
    pub eval: Option<EvalSpec>,
}

/// `eval: {dataset: eval.safetensors, head: [classifier.fc1, classifier.fc2], reference:
/// dense.safetensors}`: quality measured on a checkpoint's own classifier (issue 21).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvalSpec {
    /// A safetensors file, relative to the pack (and inside its tree), holding `x` (F32,
    /// `[samples, features]`) and `y` (U8 class labels, `[samples]`).
    #[schemars(length(min = 1))]
    pub dataset: String,
    /// The head's Linear modules in execution order, each with `<module>.weight` (`[out,
    /// in]`) and `<module>.bias` (`[out]`) in the checkpoint; ReLU between layers, the last
    /// layer's outputs are the class logits.
    #[schemars(length(min = 1, max = 16))]
    pub head: Vec<String>,
    /// The dense checkpoint (safetensors, relative to the pack) holding the same head before
    /// pruning: the reference `quality_delta` is paired against, sample by sample.
    #[schemars(length(min = 1))]
    pub reference: String,
}

/// One token count (at least 1), or a list of 1 to 16 of them (ascending after ingress,
/// duplicates dropped): the M of a checkpoint's or a named model's ops. Several time every
/// layer at each count, as ops named `<layer>@<tokens>`, and the evidence reports per layer
/// where the sparse path's speedup crosses 1 (its break-even). The memory budget bounds the
/// counts on the CPU, and the simulator's 2^32 limit on a GEMM dimension on `backend: sim`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum TokenCounts {
    /// Every op at this M.
    One(#[schemars(range(min = 1))] u64),
    /// Every op at each of these M (one op per layer and count).
    Many(
        #[schemars(length(min = 1, max = 16))]
        #[schemars(inner(range(min = 1)))]
        Vec<u64>,
    ),
}

impl TokenCounts {
    /// The counts, ascending, each once.
    pub fn counts(&self) -> Vec<u64> {
        let mut counts = match self {
            TokenCounts::One(t) => vec![*t],
            TokenCounts::Many(ts) => ts.clone(),
        };
        counts.sort_unstable();
        counts.dedup();
        counts
    }
}

/// The GEMMs of one layer of a named transformer (or all distinct ResNet-50 convolutions)
/// at a token count: full size on `backend: sim`, a scaled-down `tokens` on `backend: cpu`
/// (the weights keep their real shape; the ingress memory budget refuses what will not fit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NamedModelSpec {
    /// The model: `bert-base`, `bert-large`, `gpt2-small`, `llama-2-7b`, `opt-175b` or
    /// `resnet-50`.
    pub name: super::shapes::ModelName,
    /// Tokens (batch × sequence) for transformers, images for ResNet-50: the M of each GEMM
    /// (times the output pixels for ResNet-50). A list (e.g. `[1, 16, 512]`) runs every
    /// layer at each count and reports its break-even, as for a checkpoint.
    pub tokens: TokenCounts,
    /// Only these layers (by name, e.g. `[qkv, down]`); all of them when absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<String>,
    /// How the CPU backend draws the weights; `uniform` (the default) unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "WeightSpec")]
    pub weights: Option<WeightSpec>,
}

impl NamedModelSpec {
    /// The GEMMs of the selected layers at each token count, in model order per count;
    /// named `<layer>@<tokens>` when there are several counts.
    pub fn ops(&self) -> Vec<crate::domain::GemmOp> {
        let counts = self.tokens.counts();
        let several = counts.len() > 1;
        counts
            .iter()
            .flat_map(|&t| {
                self.name.select(t, &self.layers).into_iter().map(move |mut op| {
                    if several {
                        op.name = format!("{}@{t}", op.name);
                    }
                    op
                })
            })
            .collect()
    }
}

/// The distribution of generated weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WeightSpec {
    /// `uniform` (what `ops` workloads use) or `gaussian_outliers`.
    pub distribution: WeightDistributionKind,
    /// For `gaussian_outliers`: the fraction of weights drawn as outliers, in [0, 0.5].
    #[serde(default = "default_outlier_fraction")]
    #[schemars(range(min = 0.0, max = 0.5))]
    pub outlier_fraction: f64,
    /// For `gaussian_outliers`: how many standard deviations an outlier's magnitude is.
    #[serde(default = "default_outlier_scale")]
    #[schemars(range(min = 1.0, max = 1000.0))]
    pub outlier_scale: f64,
}

fn default_outlier_fraction() -> f64 {
    0.001
}
fn default_outlier_scale() -> f64 {
    20.0
}

/// Weight distributions the CPU workload can draw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WeightDistributionKind {
    /// Uniform in [-1, 1): the synthetic default.
    #[default]
    Uniform,
    /// Standard normal, with a seeded `outlier_fraction` of weights replaced by
    /// ±`outlier_scale` (times a uniform factor in [1, 2)): the heavy-tailed weights of
    /// trained LLMs, whose few large weights dominate pruning and quantisation error.
    GaussianOutliers,
}

/// A one-hidden-layer MLP classifier (`input → hidden → ReLU → classes`), trained with
/// seeded mini-batch SGD with momentum on the dataset's training split. Its two linear
/// layers are the slice's ops (`fc1`, `fc2`), run at the test split's size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MlpSpec {
    /// The embedded dataset.
    pub dataset: DatasetName,
    /// Hidden width of the dense model.
    #[schemars(range(min = 4, max = 4096))]
    pub hidden: u32,
    /// Training epochs of the dense model (and of the equal-latency dense model).
    #[serde(default = "default_epochs")]
    #[schemars(range(min = 1, max = 1000))]
    pub epochs: u32,
    /// Mini-batch size.
    #[serde(default = "default_batch")]
    #[schemars(range(min = 1, max = 1024))]
    pub batch: u32,
    /// SGD learning rate (momentum 0.9).
    #[serde(default = "default_learning_rate")]
    #[schemars(range(min = 0.000001, max = 10.0))]
    pub learning_rate: f64,
    /// Also find the dense hidden width whose measured latency fits the sparse model's
    /// (bisection on interleaved timings), train it the same way, and report its accuracy:
    /// whether pruning beat simply training a smaller dense model.
    #[serde(default)]
    pub equal_latency: bool,
}

fn default_epochs() -> u32 {
    20
}
fn default_batch() -> u32 {
    32
}
fn default_learning_rate() -> f64 {
    0.05
}

/// Datasets embedded in the binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DatasetName {
    /// The 8×8 handwritten digits scikit-learn distributes (UCI Optical Recognition of
    /// Handwritten Digits, CC BY 4.0): 1,797 samples, 64 features, 10 classes.
    Digits,
}

/// One operator of a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "lowercase")]
pub enum OpSpec {
    /// A linear layer `Y[M×N] = X[M×K] · Wᵀ` with the weight `W[N×K]` (out × in features)
    /// carrying the sparsity; M is tokens (batch × sequence).
    Gemm(GemmSpec),
}

/// A GEMM shape in the convention of the research tables: M tokens, N output features,
/// K input (reduction) features.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GemmSpec {
    /// Name for the memo's layer matrix, e.g. `qkv`.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Tokens (rows of X and Y).
    #[schemars(range(min = 1))]
    pub m: u64,
    /// Output features (rows of W).
    #[schemars(range(min = 1))]
    pub n: u64,
    /// Input features: the reduction dimension, along which N:M sparsity is applied.
    #[schemars(range(min = 1))]
    pub k: u64,
}

/// A rule over a metric. Exactly one of `at_most`, `at_least`, `regress_at_most` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Guardrail {
    /// A name for the guardrail, unique in the pack, that `rollback.when` refers to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_-]*$"), length(min = 1, max = 64))]
    pub id: Option<String>,
    /// A metric name from DESIGN.md §2, e.g. `latency`, `effective_speedup`.
    pub metric: String,
    /// Absolute upper bound on the metric (its median, with interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_most: Option<f64>,
    /// Absolute lower bound on the metric (its median, with interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_least: Option<f64>,
    /// Largest tolerated regression against the golden baseline, as a percentage string
    /// such as `5%`; the direction of "worse" follows the metric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regress_at_most: Option<String>,
    /// Confidence of the interval the verdict is read from, in (0.5, 1).
    #[serde(default = "default_confidence")]
    #[schemars(range(min = 0.5, max = 0.9999))]
    pub confidence: f64,
    /// `block` (default) fails the gate; `warn` only reports.
    #[serde(default)]
    pub severity: Severity,
}

fn default_confidence() -> f64 {
    0.95
}

/// Whether a failing guardrail blocks the release.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// A failure fails the gate (exit 1).
    #[default]
    Block,
    /// A failure is reported as a warning (exit 0).
    Warn,
}
