//! Run history: every `gate` and `merge` decision recorded in a database, so
//! `sparsegate history` can list runs and `sparsegate trend` can look for change points
//! in any metric or guardrail value over time.
//!
//! Two backends behind one type, [`History`]: an embedded SQLite file by default (one file
//! inside the project, no server; [`sqlite`]), and PostgreSQL for a team whose CI runners are
//! ephemeral and share one history (issue 22; [`pg`]). Both hold the same logical schema,
//! each upgraded by its own ordered migration list; both write a run in one transaction
//! (a run killed mid-write leaves the whole run or nothing) and take several writers at
//! once; both refuse a database from a newer sparsegate rather than write it. Past the
//! schema, every statement is written once, in the SQL both read ([`queries`]); a backend
//! only runs it. The rest of the code sees only [`History`], [`PendingRun`] and
//! [`HistoryLocation`].

mod location;
mod pg;
#[cfg(test)]
pub(crate) mod pg_scratch;
mod queries;
mod sqlite;

pub use location::{HistoryLocation, POSTGRES_SCHEMES, PostgresUrl, redact};
pub use pg::POSTGRES_MIGRATIONS;
pub use sqlite::MIGRATIONS;

use crate::execute::Evidence;
use crate::release::Decision;
use crate::stats::{median, quantile_ci};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Where the history lives when neither `--history` nor `SPARSEGATE_HISTORY` says: this
/// path under the root of the git work tree holding the current directory (else under the
/// current directory). Ignored by git (`.gitignore`).
pub const DEFAULT_HISTORY_PATH: &str = ".sparsegate/history.db";

/// Environment variable that overrides the history location (a path or a PostgreSQL URL).
pub const HISTORY_ENV: &str = "SPARSEGATE_HISTORY";

/// Confidence of the recorded interval of each metric's median.
pub const SUMMARY_CONFIDENCE: f64 = 0.95;

/// Why the history could not be opened, read or written. Every message names the location
/// with any password redacted, and text from the PostgreSQL client or server is scrubbed of
/// the URL's password before it is kept.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum HistoryError {
    /// SQLite refused an operation.
    #[error("run history {}: {source}", path.display())]
    #[diagnostic(
        code(sparsegate::history),
        help("check the file's permissions, and that it is a sparsegate run history")
    )]
    Sql {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The directory for the database could not be created.
    #[error("cannot create the directory of run history {}: {source}", path.display())]
    #[diagnostic(code(sparsegate::history), help("check the directory's permissions"))]
    CreateDir {
        /// The database file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The database was written by a newer sparsegate (its schema is ahead of ours).
    #[error("run history {location} has schema version {found}; this sparsegate knows up to {known}")]
    #[diagnostic(
        code(sparsegate::history),
        help("use the sparsegate that wrote it (or a newer one), or record into another history")
    )]
    NewerSchema {
        /// The database.
        location: HistoryLocation,
        /// Its schema version.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// A `postgres://` location that is not a connection URL the client understands.
    #[error("run history {location} is not a valid PostgreSQL URL: {message}")]
    #[diagnostic(
        code(sparsegate::history),
        help(
            "write it as postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (a unix socket directory as \
             the host, percent-encoded: postgres://USER@%2Frun%2Fpostgresql/DATABASE)"
        )
    )]
    BadUrl {
        /// The location, password redacted.
        location: HistoryLocation,
        /// What the client said, scrubbed of the password.
        message: String,
    },
    /// The PostgreSQL server could not be reached, or refused the connection.
    #[error("run history {location}: cannot connect: {message}")]
    #[diagnostic(code(sparsegate::history), help("{hint}"))]
    Connect {
        /// The location, password redacted.
        location: HistoryLocation,
        /// What the client or server said, scrubbed of the password.
        message: String,
        /// What to check, by what went wrong.
        hint: &'static str,
    },
    /// The PostgreSQL server refused a statement.
    #[error("run history {location}: {message}")]
    #[diagnostic(
        code(sparsegate::history),
        help("check that the URL's user may create tables in and write to that database")
    )]
    Postgres {
        /// The location, password redacted.
        location: HistoryLocation,
        /// What the server said, scrubbed of the password.
        message: String,
    },
}

/// One gate decision as recorded: `history --json` prints a list of them, newest first
/// (`schemas/history-report.schema.json`, drift-checked).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct RunRow {
    /// Run id: increases with every recorded run (the series order).
    pub id: i64,
    /// When it was recorded (RFC 3339, UTC).
    pub recorded_at: String,
    /// `gate` or `merge`.
    pub command: String,
    /// Overall verdict.
    pub verdict: String,
    /// The exit code the gate returned.
    pub exit_code: i64,
    /// HEAD commit, when run in a git repository.
    pub git_commit: Option<String>,
    /// Whether the work tree had changes.
    pub git_dirty: Option<bool>,
    /// `name@digest` of every pack, comma separated.
    pub packs: Vec<String>,
    /// What became of the run's output set: `written`, or `failed: <why>` (issue 23: the
    /// run is recorded after its outputs, with the outcome); absent for runs recorded by a
    /// sparsegate before 0.3 that did not record it.
    pub outputs: Option<String>,
}

/// One value of a series: a metric (or guardrail value) of one slice in one run.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SeriesPoint {
    /// The run.
    pub run_id: i64,
    /// When the run was recorded.
    pub recorded_at: String,
    /// HEAD commit of the run.
    pub git_commit: Option<String>,
    /// The value: a metric's median, or a guardrail's judged value.
    pub value: f64,
    /// Interval of the value, where recorded.
    pub ci_low: Option<f64>,
    /// Upper end of that interval.
    pub ci_high: Option<f64>,
}

/// Where a series' values come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SeriesSource {
    /// Medians of a measured metric or counter.
    Metric,
    /// Values a guardrail judged (e.g. `quality_delta`, `accuracy`).
    Guardrail,
}

/// An open run history.
#[derive(Debug)]
pub struct History {
    store: Store,
    location: HistoryLocation,
}

/// The open database of either backend.
#[derive(Debug)]
enum Store {
    Sqlite(sqlite::Sqlite),
    Postgres(pg::Postgres),
}

/// `$body` with `$conn` a [`queries::Conn`] on `$backend` (a [`Store`] or a [`Pending`]):
/// the one place a shared query meets the backend it runs on.
macro_rules! on_backend {
    ($backend:expr, $sqlite:path, $postgres:path, |$conn:ident| $body:expr) => {
        match $backend {
            $sqlite(db) => {
                let $conn = &mut db.conn();
                $body
            }
            $postgres(db) => {
                let $conn = &mut db.conn();
                $body
            }
        }
    };
}

/// [`on_backend`] on a [`History`]'s store.
macro_rules! on_store {
    ($history:expr, |$conn:ident| $body:expr) => {
        on_backend!(&$history.store, Store::Sqlite, Store::Postgres, |$conn| $body)
    };
}

/// [`on_backend`] inside a [`Pending`] transaction.
macro_rules! on_pending {
    ($pending:expr, |$conn:ident| $body:expr) => {
        on_backend!($pending, Pending::Sqlite, Pending::Postgres, |$conn| $body)
    };
}
impl History {
    /// Open (creating if needed) the history at `location` and bring its schema up to date.
    /// See [`sqlite::Sqlite::open`] and [`pg::Postgres::open`] for what each checks.
    pub fn open(location: &HistoryLocation) -> Result<History, HistoryError> {
        let store = match location {
            HistoryLocation::Sqlite(path) => Store::Sqlite(sqlite::Sqlite::open(path)?),
            HistoryLocation::Postgres(url) => Store::Postgres(pg::Postgres::open(url)?),
        };
        Ok(History {
            store,
            location: location.clone(),
        })
    }

    /// Where the history lives.
    pub fn location(&self) -> &HistoryLocation {
        &self.location
    }

    /// Whether the connection is lost: a PostgreSQL server (or the network) closed it since
    /// it was opened. An SQLite file is never lost.
    pub fn is_lost(&self) -> bool {
        match &self.store {
            Store::Sqlite(_) => false,
            Store::Postgres(db) => db.is_closed(),
        }
    }

    /// The schema version of the open database.
    pub fn schema_version(&self) -> Result<i64, HistoryError> {
        match &self.store {
            Store::Sqlite(db) => db.schema_version(),
            Store::Postgres(db) => db.schema_version(),
        }
    }

    /// Record one gate decision with its evidence, in one transaction; returns the run id.
    pub fn record(
        &mut self,
        command: &str,
        recorded_at: &str,
        evidence: &Evidence,
        decision: &Decision,
    ) -> Result<i64, HistoryError> {
        let pending = self.begin_record(command, recorded_at, evidence, decision)?;
        let run_id = pending.1;
        pending.0.commit()?;
        Ok(run_id)
    }

    /// Start recording one gate decision: the run is written inside a transaction that
    /// [`PendingRun::finish`] commits once the run's outputs are written (or failed), so
    /// the memo's trend charts can read the series including this run
    /// ([`PendingRun::series`]) and a run killed before its outputs are in place leaves no
    /// record (issue 23). On SQLite the transaction holds the database's write lock
    /// meanwhile (other gates recording wait on the busy timeout); on PostgreSQL writers do
    /// not wait for each other, and run ids follow the order runs began.
    pub fn begin_record(
        &mut self,
        command: &str,
        recorded_at: &str,
        evidence: &Evidence,
        decision: &Decision,
    ) -> Result<PendingRun<'_>, HistoryError> {
        let record = RunRecord::new(command, recorded_at, evidence, decision);
        let pending = match &mut self.store {
            Store::Sqlite(db) => Pending::Sqlite(db.begin()?),
            Store::Postgres(db) => Pending::Postgres(db.begin()?),
        };
        let run_id = on_pending!(&pending, |c| queries::insert_run(c, &record))?;
        Ok(PendingRun(pending, run_id))
    }

    /// The most recent runs, newest first, optionally only those that ran `pack`.
    pub fn runs(&self, pack: Option<&str>, limit: usize) -> Result<Vec<RunRow>, HistoryError> {
        on_store!(self, |c| queries::runs(c, pack, limit))
    }

    /// The series of `metric` for `slice` (optionally of `pack`), oldest run first: the
    /// metric's recorded medians, or, for a name only guardrails judged (`quality_delta`,
    /// `accuracy`), the guardrail's value (the first guardrail on it per run).
    pub fn series(
        &self,
        pack: Option<&str>,
        slice: &str,
        metric: &str,
    ) -> Result<(SeriesSource, Vec<SeriesPoint>), HistoryError> {
        on_store!(self, |c| queries::series(c, pack, slice, metric))
    }

    /// The golden baseline the most recent run judged `metric` of `slice` against (the run
    /// and the value), for `trend`'s comparison with the last baseline; `None` when no
    /// guardrail on it recorded one.
    pub fn last_baseline(
        &self,
        pack: Option<&str>,
        slice: &str,
        metric: &str,
    ) -> Result<Option<(i64, f64)>, HistoryError> {
        on_store!(self, |c| queries::last_baseline(c, pack, slice, metric))
    }

    /// The packs that recorded `slice`, for a helpful error when `--pack` is needed.
    pub fn packs_with_slice(&self, slice: &str) -> Result<Vec<String>, HistoryError> {
        on_store!(self, |c| queries::packs_with_slice(c, slice))
    }

    /// The metric names recorded for `slice`, for a helpful error on an unknown one.
    pub fn metric_names(&self, slice: &str) -> Result<Vec<String>, HistoryError> {
        on_store!(self, |c| queries::metric_names(c, slice))
    }

    /// Every slice id recorded (`pack/slice`), for a helpful error on an unknown one.
    pub fn slice_names(&self) -> Result<Vec<String>, HistoryError> {
        on_store!(self, |c| queries::slice_names(c))
    }

    /// Whether run `id` exists (used by tests and by `trend` to report an empty history).
    pub fn has_run(&self, id: i64) -> Result<bool, HistoryError> {
        on_store!(self, |c| queries::has_run(c, id))
    }
}

/// A run recorded inside an open transaction, waiting for its outputs (see
/// [`History::begin_record`]). Dropped without [`PendingRun::finish`] (the outputs never
/// came, the process was killed), the run is rolled back: it was never recorded.
#[derive(Debug)]
pub struct PendingRun<'h>(Pending<'h>, i64);

/// The open transaction of either backend.
#[derive(Debug)]
enum Pending<'h> {
    Sqlite(sqlite::Pending<'h>),
    Postgres(pg::Pending<'h>),
}

impl Pending<'_> {
    fn commit(self) -> Result<(), HistoryError> {
        match self {
            Pending::Sqlite(p) => p.commit(),
            Pending::Postgres(p) => p.commit(),
        }
    }
}

impl PendingRun<'_> {
    /// The run's id.
    pub fn run_id(&self) -> i64 {
        self.1
    }

    /// [`History::series`], this run included.
    pub fn series(
        &self,
        pack: Option<&str>,
        slice: &str,
        metric: &str,
    ) -> Result<(SeriesSource, Vec<SeriesPoint>), HistoryError> {
        on_pending!(&self.0, |c| queries::series(c, pack, slice, metric))
    }

    /// Commit the run with what became of its outputs (`Err` says why they were not
    /// written); returns the run id.
    pub fn finish(self, outputs: Result<(), String>) -> Result<i64, HistoryError> {
        let outputs = match outputs {
            Ok(()) => "written".to_owned(),
            Err(why) => format!("failed: {why}"),
        };
        on_pending!(&self.0, |c| queries::set_outputs(c, self.1, &outputs))?;
        self.0.commit()?;
        Ok(self.1)
    }
}

/// One run's rows as both backends insert them: the dialects differ, the content does not.
#[derive(Debug)]
struct RunRecord {
    recorded_at: String,
    command: String,
    verdict: &'static str,
    exit_code: i64,
    git_commit: Option<String>,
    git_branch: Option<String>,
    git_dirty: Option<bool>,
    tool_version: String,
    lock_json: String,
    /// `(name, digest, path)` of every pack.
    packs: Vec<(String, String, String)>,
    guardrails: Vec<GuardrailRow>,
    metrics: Vec<MetricRow>,
}

/// One guardrail outcome of a run, at its position in the decision.
#[derive(Debug)]
struct GuardrailRow {
    position: i64,
    pack: String,
    slice: String,
    metric: String,
    rule: String,
    severity: String,
    verdict: &'static str,
    value: Option<f64>,
    ci_low: Option<f64>,
    ci_high: Option<f64>,
    baseline: Option<f64>,
    p_value: Option<f64>,
    samples: i64,
}

/// One metric's summary (or one counter's value) for one slice of a run.
#[derive(Debug)]
struct MetricRow {
    pack: String,
    slice: String,
    metric: String,
    unit: String,
    median: f64,
    ci_low: Option<f64>,
    ci_high: Option<f64>,
    n: i64,
    runs: i64,
}

impl RunRecord {
    fn new(command: &str, recorded_at: &str, evidence: &Evidence, decision: &Decision) -> RunRecord {
        let env = &evidence.environment;
        let guardrails = decision
            .guardrails
            .iter()
            .enumerate()
            .map(|(position, g)| GuardrailRow {
                position: position as i64,
                pack: g.pack.clone(),
                slice: g.slice.clone(),
                metric: g.metric.name().to_owned(),
                rule: g.rule.to_string(),
                severity: enum_name(&g.severity),
                verdict: g.verdict.as_str(),
                value: g.value,
                ci_low: g.ci_low,
                ci_high: g.ci_high,
                baseline: g.baseline,
                p_value: g.p_value,
                samples: g.samples as i64,
            })
            .collect();
        let mut metrics = Vec::new();
        for slice in &evidence.slices {
            for (name, m) in &slice.metrics {
                let Ok(mid) = median(&m.samples) else { continue };
                let ci = quantile_ci(&m.samples, 0.5, SUMMARY_CONFIDENCE);
                let runs = m.runs.iter().collect::<BTreeSet<_>>().len().max(1);
                metrics.push(MetricRow {
                    pack: slice.pack.clone(),
                    slice: slice.slice.clone(),
                    metric: name.name().to_owned(),
                    unit: m.unit.to_string(),
                    median: mid,
                    ci_low: ci.map(|c| c.0),
                    ci_high: ci.map(|c| c.1),
                    n: m.samples.len() as i64,
                    runs: runs as i64,
                });
            }
            // Counters (fallback rate, metadata bytes, …) are one value per run: n = 1.
            for (name, value) in slice
                .counters
                .iter()
                .filter(|(n, v)| v.is_finite() && !n.metric().is_some_and(|m| slice.metrics.contains(m)))
            {
                metrics.push(MetricRow {
                    pack: slice.pack.clone(),
                    slice: slice.slice.clone(),
                    metric: name.name().to_owned(),
                    unit: String::new(),
                    median: *value,
                    ci_low: None,
                    ci_high: None,
                    n: 1,
                    runs: 1,
                });
            }
        }
        RunRecord {
            recorded_at: recorded_at.to_owned(),
            command: command.to_owned(),
            verdict: decision.verdict.as_str(),
            exit_code: i64::from(decision.exit_code.code()),
            git_commit: env.git.as_ref().map(|g| g.commit.clone()),
            git_branch: env.git.as_ref().and_then(|g| g.branch.clone()),
            git_dirty: env.git.as_ref().map(|g| g.dirty),
            tool_version: env.tool_version.clone(),
            lock_json: serde_json::to_string(&env.lock()).unwrap_or_default(),
            packs: evidence
                .packs
                .iter()
                .map(|p| (p.name.clone(), p.digest.clone(), p.path.to_string()))
                .collect(),
            guardrails,
            metrics,
        }
    }
}

/// Splits the `pack@digest,…` list of a run row.
fn split_packs(packs: Option<String>) -> Vec<String> {
    packs
        .map(|p| p.split(',').map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The serde name of a unit enum (`block`, `warn`).
fn enum_name<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
