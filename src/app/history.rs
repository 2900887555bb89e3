//! `history`, and recording a decided `gate`/`merge` run into the run history.

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

/// The run history one `gate` or `merge` reads before it decides (the session-drift
/// estimate) and then records into, opened at most once: on PostgreSQL one connection
/// serves both (issue 22: the gate connected twice). An SQLite file that does not exist yet
/// is not created to be read; recording creates it.
#[derive(Debug)]
pub(super) struct CommandHistory<'o> {
    location: Option<&'o HistoryLocation>,
    opened: Option<Result<History, HistoryError>>,
}

impl<'o> CommandHistory<'o> {
    /// The history at `location` (none when `None`), not yet opened.
    pub(super) fn new(location: Option<&'o HistoryLocation>) -> CommandHistory<'o> {
        CommandHistory {
            location,
            opened: None,
        }
    }

    /// The history to read, if there is one and it opens. A history that cannot be read is
    /// no reason to refuse a gate (the caller assumes what it would have estimated); why it
    /// failed is kept and reported when the run is recorded.
    pub(super) fn readable(&mut self) -> Option<&History> {
        let location = self.location?;
        if self.opened.is_none() {
            if location.sqlite_path().is_some_and(|p| !p.is_file()) {
                return None;
            }
            self.opened = Some(History::open(location));
        }
        self.opened.as_ref()?.as_ref().ok()
    }

    /// The history to record into: the one opened to be read, unless the server closed its
    /// connection while the slices ran (then it is opened anew), or opened now.
    fn for_recording(&mut self, location: &HistoryLocation) -> Result<History, HistoryError> {
        match self.opened.take() {
            Some(Ok(history)) if !history.is_lost() => Ok(history),
            Some(Err(error)) => Err(error),
            Some(Ok(_)) | None => History::open(location),
        }
    }
}

/// Run `write` (which writes the run's outputs) with the run recorded in `history`, if
/// one is configured: the run is inserted first, inside a transaction, so `write` can read
/// the series with this run in it (the memo's trend charts end with it), and committed
/// after `write` returns, with what became of the outputs (`written` or `failed: <why>`).
/// A run killed before that leaves no record (issue 23: the history recorded runs whose
/// outputs never appeared). A history that cannot be opened only loses the record.
pub(super) fn recording<T>(
    command: &str,
    evidence: &Evidence,
    decision: &Decision,
    history: &mut CommandHistory<'_>,
    write: impl FnOnce(Option<&PendingRun<'_>>) -> Result<T>,
) -> (Result<T>, HistoryOutcome) {
    let Some(location) = history.location else {
        return (write(None), HistoryOutcome::Off);
    };
    let failed = |error| HistoryOutcome::Failed {
        location: location.clone(),
        error,
    };
    let mut history = match history.for_recording(location) {
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
