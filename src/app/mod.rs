//! The commands, as library functions: one file per command, each stringing the stages
//! together and returning typed results. No argument parsing and no printing happen here;
//! progress is reported through a callback so the binary decides how (and whether) to show
//! it. Logic that is not orchestration lives in the stage that owns it.

mod bench;
mod bless;
mod gate;
mod history;
mod memo;
mod merge;
mod outputs;
mod refusals;
mod run;
mod serve_run;
mod sim;
mod stats;
mod trend;
mod validate;

#[cfg(test)]
mod tests;

pub use bench::{bench, bench_sweep};
pub use bless::bless;
pub use gate::{GateReport, gate};
pub use history::{HistoryOutcome, default_history_path, history_runs};
pub use memo::{sign_memo, verify_memo};
pub use merge::merge;
pub use outputs::{check_out_dir, is_output};
pub use run::{run, write_evidence};
pub use serve_run::serve_run;
pub use sim::{check_measured, simulate};
pub use stats::compare_samples;
pub use trend::trend;
pub use validate::validate_packs;

// Kept at their old `app::` paths; the logic lives in the floor and in ingress/release.
pub use crate::files::to_json;
pub use crate::ingress::pack_set::select_shard;
pub use crate::release::memo_trends::MEMO_TREND_RUNS;

use crate::error::Result;
use crate::execute::{RunLauncher, RunProgress, SliceEvidence};
use crate::ingress::pack_set;
use crate::ingress::{Environment, LoadedPack, Slice};
use crate::validate::{PowerNote, RunPlan};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Settings shared by the commands that run slices.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where golden baselines live (`golden/` by default).
    pub golden_dir: PathBuf,
    /// Compare against baselines taken under a different lock (the memo says so).
    pub allow_env_drift: bool,
    /// Where to look for the git repository whose state is recorded.
    pub work_dir: PathBuf,
    /// How `process`-mode runs are started (the binary injects one that spawns
    /// `sparsegate __run-slice`). Without one, every run takes place in this process and
    /// the evidence says `in_process`.
    pub run_launcher: Option<Arc<dyn RunLauncher>>,
    /// The run history `gate` and `merge` record into (an SQLite file or a PostgreSQL
    /// URL); `None` records nothing.
    pub history: Option<crate::release::history::HistoryLocation>,
    /// The baseline build (issue 22): another sparsegate binary whose runs are
    /// interleaved with the candidate's on the built-in kernels' slices, so
    /// `regress_at_most` is decided on same-session paired ratios.
    pub baseline_build: Option<BaselineBuild>,
    /// Where `gate` and `merge` also write the short PR comment (`--pr-comment`), and
    /// what it links to.
    pub pr_comment: Option<PrCommentTarget>,
    /// `gate` narrowed to reproduce a failure (`--slice`, `--runs`, `--pack-digest`).
    pub focus: crate::ingress::pack_set::Focus,
}

/// The PR comment's file and its link to the full memo (issue 22).
#[derive(Debug, Clone)]
pub struct PrCommentTarget {
    /// Written atomically after the output set, wherever it is.
    pub path: PathBuf,
    /// The memo's web page (`--memo-url`, the CI job); without one the comment names
    /// the output directory's `memo.md`.
    pub link: Option<crate::release::MemoLink>,
}

/// A baseline binary that answered the child-run protocol handshake, and how to start its
/// runs (the binary injects a launcher for `BASELINE __run-slice`).
#[derive(Debug, Clone)]
pub struct BaselineBuild {
    /// Starts one run of the baseline build.
    pub launcher: Arc<dyn RunLauncher>,
    /// What the evidence and the memo call it.
    pub source: String,
}

/// Progress of a run, for the binary to display.
#[derive(Debug)]
pub enum Progress<'a> {
    /// A slice is about to run.
    SliceStarted {
        /// The slice.
        slice: &'a Slice,
        /// 1-based position.
        index: usize,
        /// Slices in the run.
        total: usize,
    },
    /// A slice is running: after each run (and, for a command slice, each sample), where
    /// it stands (issue 24). The binary decides how often to show it.
    SliceRunning {
        /// The slice.
        slice: &'a Slice,
        /// Runs done and planned, samples so far, elapsed.
        at: RunProgress,
    },
    /// A slice finished.
    SliceFinished {
        /// What it measured.
        evidence: &'a SliceEvidence,
    },
    /// Before running: a located warning of a pack that loaded (issue 24: a margin its runs
    /// are unlikely to resolve, a slice that gates nothing); `validate` prints the same.
    PackWarning {
        /// The warning, located in its pack.
        warning: &'a crate::ingress::PackDiagnostic,
    },
    /// Before running: a baseline-relative guardrail whose margin the sample budget cannot
    /// resolve, estimated from the baseline's spread (it is also in the verdict's detail).
    PowerWarning {
        /// The estimate and its sentence.
        note: &'a PowerNote,
    },
    /// Before running: the run count planned for a slice from its baseline's between-run
    /// spread (`samples.max_runs`).
    RunsPlanned {
        /// The plan.
        plan: &'a RunPlan,
    },
}

/// Every slice of `packs`, in pack order.
fn all_slices(packs: &[LoadedPack]) -> impl Iterator<Item = &Slice> {
    packs.iter().flat_map(|p| p.slices.iter())
}

/// Load every pack, stopping at the first that is invalid, and refuse packs that cannot be
/// run together.
pub fn load_packs(paths: &[PathBuf]) -> Result<Vec<LoadedPack>> {
    let packs = pack_set::load_packs(paths).map_err(refusals::pack_set)?;
    // An import slice's results file is input like the pack: read before anything runs.
    for pack in &packs {
        for slice in &pack.slices {
            crate::execute::check_import(slice).map_err(|e| refusals::import(&pack.path, slice, e))?;
        }
    }
    Ok(packs)
}

/// The environment `packs` run under, refused when they cannot share one lock.
fn capture_environment(packs: &[LoadedPack], work_dir: &Path) -> Result<Environment> {
    pack_set::capture_environment(packs, work_dir).map_err(refusals::pack_set)
}
