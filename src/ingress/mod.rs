//! Stage 1, request ingress: YAML packs in, validated and expanded slices out, plus the
//! environment they will run under. Nothing here executes a workload.
//!
//! Loading is multi-pass so every error surfaces early and located (see `load.rs`):
//! YAML → JSON value (anchors and merge keys expanded, duplicate keys refused) → JSON Schema
//! (every error, mapped back to `file:line:col`) → typed [`PackFile`] → semantic checks →
//! matrix expansion into [`Slice`]s.

pub mod applicability;
pub mod bf16_pick;
pub mod checkpoint;
pub mod environment;
pub mod model;
pub mod pack;
pub mod pack_set;
pub mod report;
pub mod shard;
pub mod workspace;

mod decidable;
mod diagnostic;
mod expand;
mod ids;
mod load;
mod semantic;
mod span;
mod trigger;

pub use applicability::NotApplicable;
pub use diagnostic::{Location, PackDiagnostic, PackError};
pub use environment::{Environment, FieldDiff, GitInfo, KernelPathsUsed, MachineRoofs, PrecisionPeak};
crate::of_slice!(Slice: pack, id);

#[cfg(test)]
pub(crate) use expand::mlp_ops as expand_mlp_ops;
pub use expand::pack_threads;
pub use load::{PACK_SCHEMA_JSON, load_pack, pack_schema, parse_pack};
pub use model::{MLP_LAYERS, ModelTask, PruningPlan};
pub use pack::{Backend, PackFile, Severity};
pub use trigger::{TriggerExpr, TriggerSyntaxError};

// The shared vocabulary lives on the domain floor; re-exported here for the pack's users.
pub use crate::domain::{GemmOp, Precision, Sparsity, SparsityError, shapes};

use crate::domain::metric::Metric;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// Largest total operand memory (bytes) a single op may ask for. A pack asking for more is
/// refused at ingress, before anything is allocated.
pub const MEMORY_BUDGET_BYTES: u64 = 4 << 30;

/// The directory a pack's relative paths resolve against.
pub(crate) fn pack_dir(pack_file: &str) -> std::path::PathBuf {
    match std::path::Path::new(pack_file).parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    }
}

/// A pack that passed every check, with its slices expanded.
#[derive(Debug, Clone)]
pub struct LoadedPack {
    /// The file it came from.
    pub path: PathBuf,
    /// Its exact text, kept for diagnostics that point into it.
    pub source: String,
    /// `sha256:<hex>` of the file bytes: recorded in evidence, baselines and the memo.
    pub digest: String,
    /// The typed pack.
    pub file: PackFile,
    /// One entry per workload × sparsity × precision × backend, in pack order.
    pub slices: Vec<Slice>,
    /// `rollback.when`, parsed: what the release stage evaluates over the guardrails.
    pub trigger: Option<TriggerExpr>,
    /// Located problems that do not stop the pack: `validate` and `gate` print them
    /// (issue 24: a margin the runs are unlikely to resolve, a slice that gates nothing).
    pub warnings: Vec<PackDiagnostic>,
    /// Guardrail ids that only the slices `gate --slice` left out carry: the release stage
    /// does not hold a rollback trigger undecided for want of them. Empty unless narrowed.
    pub left_out: std::collections::BTreeSet<String>,
}

/// One workload cell after matrix expansion: what to run and what must hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Slice {
    /// The pack's name.
    pub pack: String,
    /// Stable id: `<spec id>-<sparsity tag>-<precision>`, e.g. `bert-qkv-2of4-fp32`.
    pub id: String,
    /// The operators, in order.
    pub ops: Vec<GemmOp>,
    /// The weight sparsity under test.
    pub sparsity: Sparsity,
    /// The precision under test.
    pub precision: Precision,
    /// Where it runs, with that backend's own settings.
    pub backend: SliceBackend,
    /// Pack-level guardrails followed by the slice's own, less those that cannot apply to
    /// this cell.
    pub guardrails: Vec<GuardrailSpec>,
    /// The guardrails left off this cell because they cannot mean anything here (a speedup
    /// bound on the dense cell), each with its reason (issue 24, `applicability.rs`).
    pub not_applicable: Vec<NotApplicable>,
    /// Sampling budget.
    pub samples: pack::SamplePolicy,
    /// Seed for this slice's inputs and resampling: derived from the pack seed and the id,
    /// so adding a slice never changes another's data.
    pub seed: u64,
    /// Worker threads for the CPU kernels.
    pub threads: usize,
    /// The checkpoint whose tensors are the ops (`workload.checkpoint`), shared by the
    /// slices of its spec.
    pub checkpoint: Option<std::sync::Arc<checkpoint::CheckpointWorkload>>,
    /// Requests served under load (`load:`), on whichever backend runs the slice; `None`
    /// for back-to-back timing.
    pub load: Option<LoadPlan>,
}

/// Where a slice runs, each backend with its own settings (checked and resolved at
/// ingress), so execution matches on one value instead of reading optional fields.
///
/// A backend's pack side is its file in `pack/backends/`, which resolves its block into the
/// arm here; its executor is a file in `execute/` with one arm in `execute::execute_slice_on`
/// (docs/architecture.md, "Where a change goes").
#[derive(Debug, Clone, PartialEq)]
pub enum SliceBackend {
    /// The built-in CPU kernels on the slice's GEMM ops, interleaved with the dense
    /// comparator.
    Kernels {
        /// How the slice's weights are drawn.
        weights: WeightDistribution,
    },
    /// The CPU kernels serving requests under load (the slice's `load`).
    Serving {
        /// How the slice's weights are drawn.
        weights: WeightDistribution,
    },
    /// A model trained, pruned and timed on the CPU kernels; its layers are the slice's ops
    /// (at the test split's size).
    Model(Box<ModelTask>),
    /// The simulated accelerator, with the preset named by the slice.
    Sim(Box<crate::sim::Preset>),
    /// The user's own benchmark command (resolved against the pack's directory).
    Command(CommandSlice),
    /// Results another tool already measured (resolved against the pack's directory).
    Import(ImportSlice),
}

impl SliceBackend {
    /// The pack's name for this backend.
    pub fn kind(&self) -> Backend {
        match self {
            SliceBackend::Kernels { .. } | SliceBackend::Serving { .. } | SliceBackend::Model(_) => {
                Backend::Cpu
            }
            SliceBackend::Sim(_) => Backend::Sim,
            SliceBackend::Command(_) => Backend::Command,
            SliceBackend::Import(_) => Backend::Import,
        }
    }

    /// The accelerator preset of a simulated slice.
    pub fn preset(&self) -> Option<&crate::sim::Preset> {
        match self {
            SliceBackend::Sim(p) => Some(p),
            _ => None,
        }
    }

    /// The model task of a model slice.
    pub fn model(&self) -> Option<&ModelTask> {
        match self {
            SliceBackend::Model(m) => Some(m),
            _ => None,
        }
    }

    /// How the CPU kernels draw the slice's weights (uniform where the backend draws none).
    pub fn weights(&self) -> WeightDistribution {
        match self {
            SliceBackend::Kernels { weights } | SliceBackend::Serving { weights, .. } => *weights,
            _ => WeightDistribution::Uniform,
        }
    }
}

/// How the CPU backend draws a slice's weights (seeded from the slice seed either way).
///
/// Trained LLM weights are not uniform: they are roughly Gaussian with a few large-magnitude
/// outliers, and those few weights dominate both magnitude pruning (they always survive) and
/// per-channel quantisation (they set the scale). Gating production shapes on uniform
/// weights would hide exactly the error that matters, so a named model can ask for
/// `gaussian_outliers`. (The research file gives no outlier statistics; the defaults,
/// 0.1 % of weights at 20σ, are a stated assumption, not a measurement.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "distribution")]
pub enum WeightDistribution {
    /// Uniform with variance 1/K: the synthetic default.
    #[default]
    Uniform,
    /// Normal with variance 1/K; a `fraction` of weights (chosen by the seed) replaced by
    /// ±`scale`·σ times a uniform factor in [1, 2).
    GaussianOutliers {
        /// Fraction of weights that are outliers.
        fraction: f64,
        /// Outlier magnitude in standard deviations.
        scale: f64,
    },
}

impl WeightDistribution {
    /// The distribution a pack's `weights:` block asks for.
    pub fn from_spec(spec: Option<&pack::WeightSpec>) -> WeightDistribution {
        match spec {
            None => WeightDistribution::Uniform,
            Some(w) => match w.distribution {
                pack::WeightDistributionKind::Uniform => WeightDistribution::Uniform,
                pack::WeightDistributionKind::GaussianOutliers => WeightDistribution::GaussianOutliers {
                    fraction: w.outlier_fraction,
                    scale: w.outlier_scale,
                },
            },
        }
    }
}

/// A slice's serving loop (`load:`), checked at ingress: the CPU kernels, the simulated
/// accelerator or the user's command serve the requests (issue 24).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoadPlan {
    /// The seeded arrival process (shared with the simulator's queue model).
    pub arrivals: crate::domain::Arrivals,
    /// Most requests in the system at once; arrivals beyond it are dropped.
    pub queue: u32,
    /// Requests offered.
    pub requests: u64,
    /// Whether this is a cell of a load matrix (`load:` as a list), whose slice id ends in
    /// the arrival pattern (`-steady`, `-poisson`, `-bursts`).
    #[serde(default)]
    pub matrix: bool,
}

impl LoadPlan {
    /// The id suffix of a load matrix cell (`-bursts`), empty for a single `load:`.
    pub fn id_suffix(&self) -> String {
        if self.matrix {
            format!("-{}", self.arrivals.pattern())
        } else {
            String::new()
        }
    }
}

/// One process to start: argv, working directory and extra environment, all resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandInvocation {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Working directory (the pack's directory joined with the pack's `cwd`).
    pub cwd: PathBuf,
    /// Variables added to the inherited environment.
    pub env: std::collections::BTreeMap<String, String>,
}

impl CommandInvocation {
    /// The argv as one shell-like line, for messages and the memo.
    pub fn display(&self) -> String {
        self.argv
            .iter()
            .map(|a| {
                if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
                    format!("'{}'", a.replace('\'', "'\\''"))
                } else {
                    a.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A `command` slice's processes and the limit on each invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandSlice {
    /// The benchmark under test.
    pub candidate: CommandInvocation,
    /// The comparator, interleaved with the candidate.
    pub comparator: Option<CommandInvocation>,
    /// The baseline build of the benchmark, interleaved with the candidate (issue 22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<CommandInvocation>,
    /// Seconds one invocation may run before its process group is killed.
    pub timeout_s: f64,
}

/// An `import` slice's source of results.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportSlice {
    /// The result file (or criterion directory), resolved against the pack's directory.
    pub path: PathBuf,
    /// The tool that wrote it.
    pub format: pack::ImportFormat,
    /// The entry that is this slice.
    pub benchmark: String,
    /// The comparator entry, if any.
    pub comparator: Option<String>,
    /// For a GPU trace format: the kernel and range patterns, checked at ingress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceRules>,
}

/// Compile one kernel or range pattern as the trace readers use it (with a size limit, so
/// a pack cannot make matching expensive): ingress checks it, execution matches with it.
pub fn compile_pattern(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
}

/// The patterns of a GPU trace import, as written in the pack (each one compiles: ingress
/// checked them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRules {
    /// The pack's extra sparse-kernel patterns.
    pub sparse: Vec<String>,
    /// The pack's extra dense-kernel patterns.
    pub dense: Vec<String>,
    /// Which ranges count; `None`: all.
    pub ranges: Option<String>,
}

/// A guardrail after parsing, with where it was declared.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardrailSpec {
    /// The pack's name for it (`id:`), which `rollback.when` refers to.
    pub id: Option<String>,
    /// The metric it constrains.
    pub metric: Metric,
    /// The rule.
    pub rule: Rule,
    /// Interval confidence, in (0.5, 1).
    pub confidence: f64,
    /// Block or warn.
    pub severity: Severity,
    /// Where the guardrail is declared (its `metric:` key), for annotations.
    pub location: Option<Location>,
}

/// What a guardrail demands of its metric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Rule {
    /// The metric must not exceed this value.
    AtMost {
        /// The bound.
        bound: f64,
    },
    /// The metric must not fall below this value.
    AtLeast {
        /// The bound.
        bound: f64,
    },
    /// The metric must not get worse than the golden baseline by more than this fraction.
    RegressAtMost {
        /// Tolerated regression, e.g. 0.05 for `5%`.
        margin: f64,
    },
}

impl Rule {
    /// Whether the rule needs a golden baseline.
    pub fn needs_baseline(&self) -> bool {
        matches!(self, Rule::RegressAtMost { .. })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Rule::AtMost { bound } => write!(f, "at_most {bound}"),
            Rule::AtLeast { bound } => write!(f, "at_least {bound}"),
            Rule::RegressAtMost { margin } => write!(f, "regress_at_most {}%", margin * 100.0),
        }
    }
}
