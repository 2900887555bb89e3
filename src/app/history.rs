//! `history`, and recording a decided `gate`/`merge` run into the run history.

use super::Options;
use crate::error::{Error, Result};
use crate::execute::Evidence;
use crate::ingress::workspace::work_tree_root;
use crate::release::Decision;
use crate::release::calendar::now_rfc3339;
use crate::release::history::{DEFAULT_HISTORY_PATH, History, HistoryError, RunRow};
use std::path::{Path, PathBuf};

/// What became of recording a gate run in the history. A failure to record never changes
/// the verdict or the exit code: the gate decided on its evidence, and a locked or
/// unwritable history is an operations problem the binary reports on stderr.
#[derive(Debug)]
pub enum HistoryOutcome {
    /// No history is configured ([`Options::history`] is `None`).
    Off,
    /// The run was recorded.
    Recorded {
        /// The database.
        path: PathBuf,
        /// The run's id in it.
        run_id: i64,
    },
    /// Recording failed; the gate's outputs are unaffected.
    Failed {
        /// The database.
        path: PathBuf,
        /// Why.
        error: HistoryError,
    },
}

/// The default run-history location for a command run in `work_dir`:
/// [`DEFAULT_HISTORY_PATH`] under the root of the git work tree holding `work_dir`, else
/// under `work_dir` itself.
pub fn default_history_path(work_dir: &Path) -> PathBuf {
    work_tree_root(work_dir).join(DEFAULT_HISTORY_PATH)
}

/// The recorded runs, newest first (the `history` command).
pub fn history_runs(path: &Path, pack: Option<&str>, limit: usize) -> Result<Vec<RunRow>> {
    Ok(open_existing_history(path)?.runs(pack, limit)?)
}

/// Record a decided run in the history, if one is configured.
pub(super) fn record_history(
    command: &str,
    evidence: &Evidence,
    decision: &Decision,
    options: &Options,
) -> HistoryOutcome {
    let Some(path) = &options.history else {
        return HistoryOutcome::Off;
    };
    match History::open(path).and_then(|mut h| h.record(command, &now_rfc3339(), evidence, decision)) {
        Ok(run_id) => HistoryOutcome::Recorded {
            path: path.clone(),
            run_id,
        },
        Err(error) => HistoryOutcome::Failed {
            path: path.clone(),
            error,
        },
    }
}

/// Open an existing history for reading (`history`, `trend`): a missing file is bad input,
/// not an empty history to create.
pub(super) fn open_existing_history(path: &Path) -> Result<History> {
    if !path.is_file() {
        return Err(Error::NoHistory {
            path: path.to_owned(),
        });
    }
    Ok(History::open(path)?)
}
