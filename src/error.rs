//! The library's error type. Every variant is a user-facing condition (bad input, refused
//! environment, internal error); a failed guardrail is not an error. The binary maps
//! errors to exit codes, and adds the flags a hint can point to: a library message says
//! what is wrong, never which command-line flag to use.

use crate::ingress::{FieldDiff, PackError};
use miette::Diagnostic;
use std::path::PathBuf;

/// Result with the library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can stop a sparsegate command before it reaches a verdict.
#[derive(Debug, thiserror::Error, Diagnostic)]
#[non_exhaustive]
pub enum Error {
    /// A pack failed to load; carries every located problem.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Pack(#[from] Box<PackError>),

    /// A file could not be read, written or parsed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    File(#[from] crate::files::FileError),

    /// A history was asked for where none was recorded.
    #[error("no run history at {}", path.display())]
    #[diagnostic(
        code(sparsegate::usage),
        help("`sparsegate gate` records one; read another history")
    )]
    NoHistory {
        /// Where it was looked for.
        path: PathBuf,
    },

    /// A trend names a slice that several packs recorded.
    #[error("slice `{slice}` was recorded by several packs: {}", packs.join(", "))]
    #[diagnostic(code(sparsegate::usage), help("choose one of the packs"))]
    AmbiguousSlice {
        /// The slice id.
        slice: String,
        /// The packs that recorded it.
        packs: Vec<String>,
    },

    /// A memo with several owner roles was signed without naming one.
    #[error("this memo has several owner roles; say which one you sign for")]
    #[diagnostic(code(sparsegate::usage), help("its roles: {}", roles.join(", ")))]
    AmbiguousRole {
        /// The memo's roles, sorted.
        roles: Vec<String>,
    },

    /// A golden baseline's `expires_at` has passed.
    #[error("{0}")]
    #[diagnostic(
        code(sparsegate::usage),
        help("re-measure and review it with `sparsegate bless`, then commit it")
    )]
    ExpiredBaseline(crate::validate::golden::GoldenError),

    /// Two shards measured the same slice.
    #[error("{0}")]
    #[diagnostic(
        code(sparsegate::usage),
        help("give each shard a distinct index of the same shard count")
    )]
    OverlappingShards(crate::execute::shards::ShardError),

    /// A slice's golden baseline does not exist.
    #[error("no golden baseline for slice `{slice}` of pack `{pack}` (expected {})", path.display())]
    #[diagnostic(
        code(sparsegate::missing_baseline),
        help("record one with `sparsegate bless {pack_path}`, review it, and commit it")
    )]
    MissingBaseline {
        /// The pack name.
        pack: String,
        /// The slice id.
        slice: String,
        /// Where the baseline was expected.
        path: PathBuf,
        /// The pack file, for the hint.
        pack_path: String,
    },

    /// A baseline's content does not match its recorded digest, or its format is unknown.
    #[error("golden baseline {} is not trustworthy: {reason}", path.display())]
    #[diagnostic(
        code(sparsegate::corrupt_baseline),
        help("baselines are written only by `sparsegate bless`; restore it from git or bless again")
    )]
    CorruptBaseline {
        /// The baseline file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },

    /// The environment differs from a baseline's in locked fields.
    #[error("environment does not match the golden baseline {}:\n{}", baseline.display(), describe_drift(fields))]
    #[diagnostic(
        code(sparsegate::env_drift),
        help("timings are only comparable under the same lock: bless a baseline on this machine")
    )]
    EnvironmentDrift {
        /// The baseline file.
        baseline: PathBuf,
        /// Every differing lock field.
        fields: Vec<FieldDiff>,
    },

    /// A checkpoint slice's files differ from those its baseline was blessed on.
    #[error("the checkpoint differs from the one golden baseline {} was blessed on:\n{}", baseline.display(), describe_drift(fields))]
    #[diagnostic(
        code(sparsegate::artifact_changed),
        help(
            "bless a baseline on this checkpoint, or set `lock: {{allow_artifact_change: true}}` in the pack \
             to compare across checkpoints on purpose (the memo then lists what changed)"
        )
    )]
    ArtifactChanged {
        /// The baseline file.
        baseline: PathBuf,
        /// Each file whose digest differs.
        fields: Vec<FieldDiff>,
    },

    /// The pack requires a clean git work tree and it is not.
    #[error(
        "pack `{pack}` requires a clean git work tree (lock.require_clean_git), but it has uncommitted changes"
    )]
    #[diagnostic(
        code(sparsegate::dirty_tree),
        help("commit or stash your changes, or set lock.require_clean_git: false")
    )]
    DirtyWorkTree {
        /// The pack name.
        pack: String,
    },

    /// Two packs (or a pack and merged evidence) disagree in a way that makes the request
    /// meaningless.
    #[error("{message}")]
    #[diagnostic(code(sparsegate::usage), help("{hint}"))]
    Usage {
        /// What is wrong.
        message: String,
        /// What to do about it.
        hint: String,
    },

    /// A signed memo failed verification: every problem found.
    #[error("memo in {} failed verification:\n{}", dir.display(), problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    #[diagnostic(
        code(sparsegate::verify),
        help("do not trust this memo; re-run the gate and collect the signatures again")
    )]
    Verification {
        /// The memo's directory.
        dir: PathBuf,
        /// What failed.
        problems: Vec<String>,
    },

    /// The simulator was asked something it cannot answer: an unknown preset, a bad preset
    /// file, a malformed shape, a precision the part lacks.
    #[error("{problem}")]
    #[diagnostic(code(sparsegate::sim), help("{hint}"))]
    Sim {
        /// What the simulator refused.
        problem: crate::sim::SimError,
        /// What to do about it.
        hint: String,
    },

    /// A measured GPU grid (`sim --measured`, issue 25) is not in the format or cannot be
    /// compared.
    #[error("{}{position}: {message}", path.display())]
    #[diagnostic(
        code(sparsegate::measured),
        help(
            "make the grid with benches/gpu/h200_measure.py; its format is schemas/gpu-measurement.schema.json"
        )
    )]
    Measured {
        /// The grid file.
        path: PathBuf,
        /// `:line:col` where the parser stopped, or empty.
        position: String,
        /// What is wrong (never the file's content).
        message: String,
    },

    /// The run history could not be opened, read or written (for `history` and `trend`;
    /// `gate` only warns).
    #[error(transparent)]
    #[diagnostic(transparent)]
    History(#[from] crate::release::history::HistoryError),

    /// A trend could not be computed.
    #[error(transparent)]
    #[diagnostic(code(sparsegate::trend))]
    Trend(#[from] crate::release::trend::TrendError),

    /// A memo template failed to render (a bug in a template).
    #[error("cannot render {template}: {message}")]
    #[diagnostic(code(sparsegate::render))]
    Render {
        /// The template name.
        template: String,
        /// The renderer's message.
        message: String,
    },
}

fn describe_drift(fields: &[FieldDiff]) -> String {
    fields
        .iter()
        .map(|d| format!("  {}: baseline `{}`, now `{}`", d.field, d.baseline, d.current))
        .collect::<Vec<_>>()
        .join("\n")
}

impl From<crate::sim::SimError> for Error {
    fn from(problem: crate::sim::SimError) -> Self {
        use crate::sim::SimError as S;
        let hint = match &problem {
            S::UnknownPreset { .. } => {
                "pass a built-in preset name or the path of a preset YAML file (format: schemas/accelerator-preset.schema.json)"
            }
            S::ReadPreset { .. } => "check that the preset file exists and is readable",
            S::BadPreset { .. } => {
                "preset files follow schemas/accelerator-preset.schema.json; the built-ins under scenarios/presets/ are examples"
            }
            S::UnsupportedPrecision { .. } => {
                "choose a precision the preset lists under macs_per_cycle_per_unit (or the systolic precisions)"
            }
            S::BadLayer { .. } => "e.g. a 2048x4096x4096 GEMM at 2:4 sparsity in fp16",
            S::BadTraffic { .. } => "e.g. poisson:200 arrivals per second, served for 1000 requests",
        };
        Error::Sim {
            problem,
            hint: hint.to_owned(),
        }
    }
}

impl From<PackError> for Error {
    fn from(e: PackError) -> Self {
        Error::Pack(Box::new(e))
    }
}

impl From<crate::validate::golden::GoldenError> for Error {
    fn from(e: crate::validate::golden::GoldenError) -> Self {
        use crate::validate::golden::GoldenError as G;
        match e {
            G::File(e) => Error::File(e),
            G::Corrupt { path, reason } => Error::CorruptBaseline { path, reason },
            expired @ G::Expired { .. } => Error::ExpiredBaseline(expired),
        }
    }
}

impl From<crate::release::ReleaseError> for Error {
    fn from(e: crate::release::ReleaseError) -> Self {
        use crate::release::ReleaseError as R;
        match e {
            R::File(e) => Error::File(e),
            R::Render { template, message } => Error::Render { template, message },
            R::Signing { message, hint } => Error::Usage { message, hint },
            R::AmbiguousRole { roles } => Error::AmbiguousRole { roles },
            R::Verification { dir, problems } => Error::Verification { dir, problems },
            e @ R::PackChanged { .. } => Error::Usage {
                message: e.to_string(),
                hint: "sign a memo from the pack it was gated on; re-run the gate if the pack changed".into(),
            },
            R::Pack(e) => Error::Pack(e),
        }
    }
}
