//! `history`, and recording a decided `gate`/`merge` run into the run history.

use super::Options;
use crate::error::{Error, Result};
use crate::execute::Evidence;
use crate::ingress::workspace::work_tree_root;
use crate::release::Decision;
use crate::release::calendar::now_rfc3339;
use crate::release::history::{
    DEFAULT_HISTORY_PATH, History, HistoryError, HistoryLocation, PendingRun, RunRow,
};
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
        location: HistoryLocation,
        /// The run's id in it.
        run_id: i64,
    },
    /// Recording failed; the gate's outputs are unaffected.
    Failed {
        /// The database.
        location: HistoryLocation,
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
pub fn history_runs(location: &HistoryLocation, pack: Option<&str>, limit: usize) -> Result<Vec<RunRow>> {
    Ok(open_existing_history(location)?.runs(pack, limit)?)
}

/// Run `write` (which writes the run's outputs) with the run recorded in the history, if
/// one is configured: the run is inserted first, inside a transaction, so `write` can read
/// the series with this run in it (the memo's trend charts end with it), and committed
/// after `write` returns, with what became of the outputs (`written` or `failed: <why>`).
/// A run killed before that leaves no record (issue 23: the history recorded runs whose
/// outputs never appeared). A history that cannot be opened only loses the record.
pub(super) fn recording<T>(
    command: &str,
    evidence: &Evidence,
    decision: &Decision,
    options: &Options,
    write: impl FnOnce(Option<&PendingRun<'_>>) -> Result<T>,
) -> (Result<T>, HistoryOutcome) {
    let Some(location) = &options.history else {
        return (write(None), HistoryOutcome::Off);
    };
    let failed = |error| HistoryOutcome::Failed {
        location: location.clone(),
        error,
    };
    let mut history = match History::open(location) {
        Ok(h) => h,
        Err(error) => return (write(None), failed(error)),
    };
    let pending = match history.begin_record(command, &now_rfc3339(), evidence, decision) {
        Ok(p) => p,
        Err(error) => return (write(None), failed(error)),
    };
    let result = write(Some(&pending));
    let outputs = result.as_ref().map(|_| ()).map_err(ToString::to_string);
    let outcome = match pending.finish(outputs) {
        Ok(run_id) => HistoryOutcome::Recorded {
            location: location.clone(),
            run_id,
        },
        Err(error) => failed(error),
    };
    (result, outcome)
}

/// Open an existing history for reading (`history`, `trend`): a missing file is bad input,
/// not an empty history to create. A PostgreSQL database exists by its URL (the server
/// refuses one that does not); its tables are created on first use, an empty history.
pub(super) fn open_existing_history(location: &HistoryLocation) -> Result<History> {
    if let Some(path) = location.sqlite_path()
        && !path.is_file()
    {
        return Err(Error::NoHistory {
            path: path.to_owned(),
        });
    }
    Ok(History::open(location)?)
}
