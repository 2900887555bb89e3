//! Run history: every `gate` and `merge` decision recorded in an embedded SQLite database,
//! so `sparsegate history` can list runs and `sparsegate trend` can look for change points
//! in any metric or guardrail value over time.
//!
//! Why SQLite (rusqlite, bundled): one file inside the project, no server, safe for several
//! gate processes at once. Concurrency and crash safety come from SQLite itself: the
//! database runs in WAL mode with a busy timeout, and each run is written in one
//! transaction, so a run killed mid-write leaves either the whole run or nothing. The schema
//! is versioned with `PRAGMA user_version` and upgraded by the ordered [`MIGRATIONS`];
//! a database from a newer sparsegate is refused rather than written.

use crate::execute::Evidence;
use crate::release::Decision;
use crate::stats::{median, quantile_ci};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the history lives when neither `--history` nor `SPARSEGATE_HISTORY` says: this
/// path under the root of the git work tree holding the current directory (else under the
/// current directory). Ignored by git (`.gitignore`).
pub const DEFAULT_HISTORY_PATH: &str = ".sparsegate/history.db";

/// Environment variable that overrides the history location.
pub const HISTORY_ENV: &str = "SPARSEGATE_HISTORY";

/// How long a writer waits for another gate's transaction before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Schema migrations, in order; after applying migration `i` the database's
/// `user_version` is `i + 1`. Never edit one that has shipped: append a new one.
pub const MIGRATIONS: &[&str] = &[
    r"
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded_at TEXT NOT NULL,
    command TEXT NOT NULL,
    verdict TEXT NOT NULL,
    exit_code INTEGER NOT NULL,
    git_commit TEXT,
    git_branch TEXT,
    git_dirty INTEGER,
    tool_version TEXT NOT NULL,
    lock_json TEXT NOT NULL
);
CREATE TABLE run_packs (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    pack TEXT NOT NULL,
    digest TEXT NOT NULL,
    path TEXT NOT NULL,
    PRIMARY KEY (run_id, pack)
);
CREATE TABLE guardrails (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    pack TEXT NOT NULL,
    slice TEXT NOT NULL,
    metric TEXT NOT NULL,
    rule TEXT NOT NULL,
    severity TEXT NOT NULL,
    verdict TEXT NOT NULL,
    value REAL,
    ci_low REAL,
    ci_high REAL,
    baseline REAL,
    p_value REAL,
    samples INTEGER NOT NULL,
    PRIMARY KEY (run_id, position)
);
CREATE INDEX guardrails_series ON guardrails (pack, slice, metric, run_id);
CREATE TABLE metrics (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    pack TEXT NOT NULL,
    slice TEXT NOT NULL,
    metric TEXT NOT NULL,
    unit TEXT NOT NULL,
    median REAL NOT NULL,
    ci_low REAL,
    ci_high REAL,
    n INTEGER NOT NULL,
    runs INTEGER NOT NULL,
    PRIMARY KEY (run_id, pack, slice, metric)
);
CREATE INDEX metrics_series ON metrics (pack, slice, metric, run_id);
",
    r"
-- Issue 23: whether the run's output set was written (`written`, or `failed: <why>`);
-- NULL for runs recorded before sparsegate recorded it.
ALTER TABLE runs ADD COLUMN outputs TEXT;
",
];

/// Confidence of the recorded interval of each metric's median.
pub const SUMMARY_CONFIDENCE: f64 = 0.95;

/// Why the history could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// SQLite refused an operation.
    #[error("run history {}: {source}", path.display())]
    Sql {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The directory for the database could not be created.
    #[error("cannot create the directory of run history {}: {source}", path.display())]
    CreateDir {
        /// The database file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The database was written by a newer sparsegate (its schema is ahead of ours).
    #[error(
        "run history {} has schema version {found}; this sparsegate knows up to {known}",
        path.display()
    )]
    NewerSchema {
        /// The database file.
        path: PathBuf,
        /// Its `user_version`.
        found: i64,
        /// The newest version this build knows.
        known: i64,
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
    conn: Connection,
    path: PathBuf,
}

impl History {
    /// Open (creating if needed) the history at `path` and bring its schema up to date.
    ///
    /// Its directory is created through the checked writer's directory walk (issue 23: no
    /// symbolic link below the root the path was given from), and a database file that is
    /// a symbolic link is refused. SQLite opens the file by path, so this is a check, not
    /// a handle: a link swapped in between the check and the open is not caught.
    pub fn open(path: &Path) -> Result<History, HistoryError> {
        let create_dir = |source| HistoryError::CreateDir {
            path: path.to_owned(),
            source,
        };
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        crate::files::TreeDir::open(dir.unwrap_or(Path::new(".")), true)
            .map_err(|e| create_dir(e.into_io()))?;
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(create_dir(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{} is a symbolic link; sparsegate writes only real files",
                    path.display()
                ),
            )));
        }
        let sql = sql_error(path);
        let conn = Connection::open(path).map_err(sql)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        // WAL: readers never block the writer, and a crash mid-transaction is rolled back.
        // Switching the journal mode needs an exclusive lock and SQLite answers BUSY at
        // once, without the busy handler, while another gate is setting up the same new
        // file; retry within the busy timeout.
        let start = std::time::Instant::now();
        loop {
            match conn.pragma_update(None, "journal_mode", "WAL") {
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.code == rusqlite::ErrorCode::DatabaseBusy && start.elapsed() < BUSY_TIMEOUT =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                other => break other.map_err(sql)?,
            }
        }
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(sql)?;
        let mut history = History {
            conn,
            path: path.to_owned(),
        };
        history.migrate()?;
        Ok(history)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self) -> impl Fn(rusqlite::Error) -> HistoryError + '_ {
        sql_error(&self.path)
    }

    /// An immediate (write-locking) transaction, so two gates recording at once queue on
    /// the busy timeout instead of failing on a lock upgrade.
    fn begin_immediate(&mut self) -> Result<rusqlite::Transaction<'_>, HistoryError> {
        self.conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql_error(&self.path))
    }

    /// The schema version of the open database.
    pub fn schema_version(&self) -> Result<i64, HistoryError> {
        self.conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(self.sql())
    }

    /// Apply the migrations the database lacks, each in its own immediate transaction
    /// (two processes opening a fresh database at once: one migrates, the other waits and
    /// then finds nothing to do).
    fn migrate(&mut self) -> Result<(), HistoryError> {
        let known = MIGRATIONS.len() as i64;
        loop {
            let path = self.path.clone();
            let sql = sql_error(&path);
            let tx = self.begin_immediate()?;
            let version: i64 = tx
                .pragma_query_value(None, "user_version", |r| r.get(0))
                .map_err(sql)?;
            if version > known {
                return Err(HistoryError::NewerSchema {
                    path,
                    found: version,
                    known,
                });
            }
            if version == known {
                return Ok(());
            }
            tx.execute_batch(MIGRATIONS[version as usize]).map_err(sql)?;
            tx.pragma_update(None, "user_version", version + 1).map_err(sql)?;
            tx.commit().map_err(sql)?;
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
        let (run_id, path) = (pending.run_id, pending.path.clone());
        pending.tx.commit().map_err(sql_error(&path))?;
        Ok(run_id)
    }

    /// Start recording one gate decision: the run is written inside a transaction that
    /// [`PendingRun::finish`] commits once the run's outputs are written (or failed), so
    /// the memo's trend charts can read the series including this run
    /// ([`PendingRun::series`]) and a run killed before its outputs are in place leaves no
    /// record (issue 23). The transaction holds the database's write lock meanwhile: other
    /// gates recording wait on the busy timeout.
    pub fn begin_record(
        &mut self,
        command: &str,
        recorded_at: &str,
        evidence: &Evidence,
        decision: &Decision,
    ) -> Result<PendingRun<'_>, HistoryError> {
        let path = self.path.clone();
        let sql = sql_error(&path);
        let tx = self.begin_immediate()?;
        let env = &evidence.environment;
        let lock = serde_json::to_string(&env.lock()).unwrap_or_default();
        tx.execute(
            "INSERT INTO runs (recorded_at, command, verdict, exit_code, git_commit, git_branch, git_dirty,
                               tool_version, lock_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                recorded_at,
                command,
                decision.verdict.as_str(),
                i64::from(decision.exit_code.code()),
                env.git.as_ref().map(|g| g.commit.as_str()),
                env.git.as_ref().and_then(|g| g.branch.as_deref()),
                env.git.as_ref().map(|g| g.dirty),
                env.tool_version,
                lock,
            ],
        )
        .map_err(sql)?;
        let run_id = tx.last_insert_rowid();
        for pack in &evidence.packs {
            tx.execute(
                "INSERT INTO run_packs (run_id, pack, digest, path) VALUES (?1, ?2, ?3, ?4)",
                params![run_id, pack.name, pack.digest, pack.path],
            )
            .map_err(sql)?;
        }
        for (position, g) in decision.guardrails.iter().enumerate() {
            tx.execute(
                "INSERT INTO guardrails (run_id, position, pack, slice, metric, rule, severity, verdict,
                                         value, ci_low, ci_high, baseline, p_value, samples)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                params![
                    run_id,
                    position as i64,
                    g.pack,
                    g.slice,
                    g.metric.name(),
                    g.rule.to_string(),
                    enum_name(&g.severity),
                    g.verdict.as_str(),
                    g.value,
                    g.ci_low,
                    g.ci_high,
                    g.baseline,
                    g.p_value,
                    g.samples as i64,
                ],
            )
            .map_err(sql)?;
        }
        let mut insert_metric = tx
            .prepare(
                "INSERT INTO metrics (run_id, pack, slice, metric, unit, median, ci_low, ci_high, n, runs)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )
            .map_err(sql)?;
        for slice in &evidence.slices {
            for (name, m) in &slice.metrics {
                let Ok(mid) = median(&m.samples) else { continue };
                let ci = quantile_ci(&m.samples, 0.5, SUMMARY_CONFIDENCE);
                let runs = m.runs.iter().collect::<BTreeSet<_>>().len().max(1);
                insert_metric
                    .execute(params![
                        run_id,
                        slice.pack,
                        slice.slice,
                        name.name(),
                        m.unit,
                        mid,
                        ci.map(|c| c.0),
                        ci.map(|c| c.1),
                        m.samples.len() as i64,
                        runs as i64,
                    ])
                    .map_err(sql)?;
            }
            // Counters (fallback rate, metadata bytes, …) are one value per run: n = 1.
            for (name, value) in slice
                .counters
                .iter()
                .filter(|(n, v)| v.is_finite() && !n.metric().is_some_and(|m| slice.metrics.contains(m)))
            {
                insert_metric
                    .execute(params![
                        run_id,
                        slice.pack,
                        slice.slice,
                        name.name(),
                        "",
                        value,
                        None::<f64>,
                        None::<f64>,
                        1,
                        1
                    ])
                    .map_err(sql)?;
            }
        }
        drop(insert_metric);
        Ok(PendingRun { tx, run_id, path })
    }

    /// The most recent runs, newest first, optionally only those that ran `pack`.
    pub fn runs(&self, pack: Option<&str>, limit: usize) -> Result<Vec<RunRow>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, recorded_at, command, verdict, exit_code, git_commit, git_dirty,
                        (SELECT group_concat(pack || '@' || digest, ',')
                           FROM (SELECT pack, digest FROM run_packs WHERE run_id = runs.id ORDER BY pack)),
                        outputs
                   FROM runs
                  WHERE ?1 IS NULL OR EXISTS (SELECT 1 FROM run_packs WHERE run_id = runs.id AND pack = ?1)
                  ORDER BY id DESC
                  LIMIT ?2",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map(params![pack, limit as i64], |r| {
                let packs: Option<String> = r.get(7)?;
                Ok(RunRow {
                    id: r.get(0)?,
                    recorded_at: r.get(1)?,
                    command: r.get(2)?,
                    verdict: r.get(3)?,
                    exit_code: r.get(4)?,
                    git_commit: r.get(5)?,
                    git_dirty: r.get(6)?,
                    packs: packs
                        .map(|p| p.split(',').map(str::to_owned).collect())
                        .unwrap_or_default(),
                    outputs: r.get(8)?,
                })
            })
            .map_err(self.sql())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())
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
        series_on(&self.conn, &self.path, pack, slice, metric)
    }

    /// The packs that recorded `slice`, for a helpful error when `--pack` is needed.
    pub fn packs_with_slice(&self, slice: &str) -> Result<Vec<String>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT pack FROM metrics WHERE slice = ?1 ORDER BY pack")
            .map_err(self.sql())?;
        let rows = stmt.query_map(params![slice], |r| r.get(0)).map_err(self.sql())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())
    }

    /// The metric names recorded for `slice`, for a helpful error on an unknown one.
    pub fn metric_names(&self, slice: &str) -> Result<Vec<String>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT metric FROM metrics WHERE slice = ?1 UNION SELECT metric FROM guardrails WHERE slice = ?1
                 ORDER BY 1",
            )
            .map_err(self.sql())?;
        let rows = stmt.query_map(params![slice], |r| r.get(0)).map_err(self.sql())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())
    }

    /// Every slice id recorded (`pack/slice`), for a helpful error on an unknown one.
    pub fn slice_names(&self) -> Result<Vec<String>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT pack || '/' || slice FROM metrics ORDER BY 1")
            .map_err(self.sql())?;
        let rows = stmt.query_map([], |r| r.get(0)).map_err(self.sql())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())
    }

    /// Whether run `id` exists (used by tests and by `trend` to report an empty history).
    pub fn has_run(&self, id: i64) -> Result<bool, HistoryError> {
        self.conn
            .query_row("SELECT 1 FROM runs WHERE id = ?1", params![id], |_| Ok(()))
            .optional()
            .map(|r| r.is_some())
            .map_err(self.sql())
    }
}

/// A run recorded inside an open transaction, waiting for its outputs (see
/// [`History::begin_record`]). Dropped without [`PendingRun::finish`] (the outputs never
/// came, the process was killed), the run is rolled back: it was never recorded.
#[derive(Debug)]
pub struct PendingRun<'h> {
    tx: rusqlite::Transaction<'h>,
    run_id: i64,
    path: PathBuf,
}

impl PendingRun<'_> {
    /// The run's id.
    pub fn run_id(&self) -> i64 {
        self.run_id
    }

    /// [`History::series`], this run included.
    pub fn series(
        &self,
        pack: Option<&str>,
        slice: &str,
        metric: &str,
    ) -> Result<(SeriesSource, Vec<SeriesPoint>), HistoryError> {
        series_on(&self.tx, &self.path, pack, slice, metric)
    }

    /// Commit the run with what became of its outputs (`Err` says why they were not
    /// written); returns the run id.
    pub fn finish(self, outputs: Result<(), String>) -> Result<i64, HistoryError> {
        let path = self.path.clone();
        let sql = sql_error(&path);
        let outputs = match outputs {
            Ok(()) => "written".to_owned(),
            Err(why) => format!("failed: {why}"),
        };
        self.tx
            .execute(
                "UPDATE runs SET outputs = ?1 WHERE id = ?2",
                params![outputs, self.run_id],
            )
            .map_err(sql)?;
        self.tx.commit().map_err(sql)?;
        Ok(self.run_id)
    }
}

/// The series of `metric` for `slice` over `conn` ([`History::series`]).
fn series_on(
    conn: &Connection,
    path: &Path,
    pack: Option<&str>,
    slice: &str,
    metric: &str,
) -> Result<(SeriesSource, Vec<SeriesPoint>), HistoryError> {
    let metrics = query_series(
        conn,
        path,
        "SELECT m.run_id, r.recorded_at, r.git_commit, m.median, m.ci_low, m.ci_high
           FROM metrics m JOIN runs r ON r.id = m.run_id
          WHERE m.slice = ?1 AND m.metric = ?2 AND (?3 IS NULL OR m.pack = ?3)
          ORDER BY m.run_id, m.pack",
        pack,
        slice,
        metric,
    )?;
    if !metrics.is_empty() {
        return Ok((SeriesSource::Metric, metrics));
    }
    let guardrails = query_series(
        conn,
        path,
        "SELECT g.run_id, r.recorded_at, r.git_commit, g.value, g.ci_low, g.ci_high
           FROM guardrails g JOIN runs r ON r.id = g.run_id
          WHERE g.slice = ?1 AND g.metric = ?2 AND (?3 IS NULL OR g.pack = ?3) AND g.value IS NOT NULL
            AND g.position = (SELECT min(position) FROM guardrails h
                               WHERE h.run_id = g.run_id AND h.pack = g.pack AND h.slice = g.slice
                                 AND h.metric = g.metric AND h.value IS NOT NULL)
          ORDER BY g.run_id, g.pack",
        pack,
        slice,
        metric,
    )?;
    Ok((SeriesSource::Guardrail, guardrails))
}

fn query_series(
    conn: &Connection,
    path: &Path,
    query: &str,
    pack: Option<&str>,
    slice: &str,
    metric: &str,
) -> Result<Vec<SeriesPoint>, HistoryError> {
    let sql = sql_error(path);
    let mut stmt = conn.prepare(query).map_err(sql)?;
    let rows = stmt
        .query_map(params![slice, metric, pack], |r| {
            Ok(SeriesPoint {
                run_id: r.get(0)?,
                recorded_at: r.get(1)?,
                git_commit: r.get(2)?,
                value: r.get(3)?,
                ci_low: r.get(4)?,
                ci_high: r.get(5)?,
            })
        })
        .map_err(sql)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(sql)
}

/// The serde name of a unit enum (`block`, `warn`).
fn enum_name<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Maps a SQLite error to one that names the database file.
fn sql_error(path: &Path) -> impl Fn(rusqlite::Error) -> HistoryError + Copy + '_ {
    |source| HistoryError::Sql {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::verdict::Verdict;
    use crate::execute::{MetricSamples, PackRecord, SliceEvidence};
    use crate::ingress::Environment;
    use crate::release::{ExitCode, VerdictCounts};

    fn evidence(latency: f64) -> Evidence {
        let dir = tempfile::tempdir().unwrap();
        let mut metrics = crate::domain::KeyedMap::new();
        metrics.insert(
            crate::domain::Metric::Latency,
            MetricSamples::single_run("s", vec![latency, latency * 1.01, latency * 0.99]),
        );
        let slice = SliceEvidence {
            sparsity: "2:4".into(),
            precision: crate::domain::Precision::Fp16,
            metrics,
            counters: [(crate::domain::Metric::FallbackRate.into(), 0.0)].into(),
            ..SliceEvidence::named("p", "s1")
        };
        Evidence {
            schema_version: 1,
            environment: Environment::capture(1, dir.path()),
            packs: vec![PackRecord {
                name: "p".into(),
                path: "p.yaml".into(),
                digest: "sha256:00".into(),
            }],
            slices: vec![slice],
        }
    }

    fn decision() -> Decision {
        Decision {
            schema_version: 1,
            verdict: Verdict::Pass,
            exit_code: ExitCode::Pass,
            first_failing_stage: None,
            counts: VerdictCounts::default(),
            guardrails: vec![],
            environment_drift: vec![],
            not_applicable: vec![],
        }
    }

    fn run_count(path: &Path) -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_recorded_run_comes_back_as_a_series_point() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = History::open(&dir.path().join("h/history.db")).unwrap();
        assert_eq!(h.schema_version().unwrap(), MIGRATIONS.len() as i64);
        let a = h
            .record("gate", "2026-01-01T00:00:00Z", &evidence(1.0), &decision())
            .unwrap();
        let b = h
            .record("gate", "2026-01-02T00:00:00Z", &evidence(2.0), &decision())
            .unwrap();
        assert!(b > a);
        let (source, series) = h.series(Some("p"), "s1", "latency").unwrap();
        assert_eq!(source, SeriesSource::Metric);
        assert_eq!(series.iter().map(|p| p.value).collect::<Vec<_>>(), [1.0, 2.0]);
        let (_, counter) = h.series(None, "s1", "fallback_rate").unwrap();
        assert_eq!(counter.len(), 2);
        let runs = h.runs(Some("p"), 10).unwrap();
        assert_eq!(runs.iter().map(|r| r.id).collect::<Vec<_>>(), [b, a]);
        assert_eq!(runs[0].packs, ["p@sha256:00"]);
        assert!(h.runs(Some("other"), 10).unwrap().is_empty());
    }

    /// A guardrail-only value (quality drift recorded by the gate) is a series too.
    #[test]
    fn guardrail_values_form_a_series_when_no_metric_has_the_name() {
        use crate::domain::metric::Metric;
        use crate::domain::stage::Stage;
        use crate::ingress::{Rule, Severity};
        let dir = tempfile::tempdir().unwrap();
        let mut h = History::open(&dir.path().join("history.db")).unwrap();
        for value in [-0.001, -0.002, -0.03] {
            let mut d = decision();
            d.guardrails.push(crate::validate::GuardrailOutcome {
                pack: "p".into(),
                slice: "s1".into(),
                metric: Metric::QualityDelta,
                rule: Rule::AtLeast { bound: -0.01 },
                verdict: Verdict::Pass,
                severity: Severity::Block,
                value: Some(value),
                baseline: None,
                ci_low: None,
                ci_high: None,
                p_value: None,
                confidence: 0.95,
                samples: 1,
                bottleneck: None,
                stage: Stage::Validation,
                detail: String::new(),
                location: None,
                yardstick: None,
            });
            h.record("gate", "t", &evidence(1.0), &d).unwrap();
        }
        let (source, series) = h.series(Some("p"), "s1", "quality_delta").unwrap();
        assert_eq!(source, SeriesSource::Guardrail);
        assert_eq!(
            series.iter().map(|p| p.value).collect::<Vec<_>>(),
            [-0.001, -0.002, -0.03]
        );
    }

    /// A run whose write fails part-way (here: the same slice twice violates the metrics
    /// key after the run row was inserted) leaves nothing behind: the transaction is atomic.
    #[test]
    fn a_failed_write_leaves_no_partial_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        let mut h = History::open(&path).unwrap();
        h.record("gate", "t", &evidence(1.0), &decision()).unwrap();
        let mut broken = evidence(1.0);
        broken.slices.push(broken.slices[0].clone());
        assert!(h.record("gate", "t", &broken, &decision()).is_err());
        assert_eq!(run_count(&path), 1);
        let orphans: i64 = Connection::open(&path)
            .unwrap()
            .query_row(
                "SELECT count(*) FROM metrics WHERE run_id NOT IN (SELECT id FROM runs)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(orphans, 0);
    }

    #[test]
    fn concurrent_writers_all_land_and_the_database_stays_intact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        std::thread::scope(|s| {
            for t in 0..4 {
                let path = path.clone();
                s.spawn(move || {
                    let mut h = History::open(&path).unwrap();
                    for i in 0..10 {
                        h.record("gate", "t", &evidence(f64::from(t * 10 + i)), &decision())
                            .unwrap();
                    }
                });
            }
        });
        assert_eq!(run_count(&path), 40);
        let check: String = Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }

    #[test]
    fn a_database_from_a_newer_sparsegate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 99)
            .unwrap();
        let err = History::open(&path).unwrap_err();
        assert!(
            matches!(err, HistoryError::NewerSchema { found: 99, .. }),
            "{err}"
        );
    }

    /// Issue 23: the database is a file sparsegate writes; a link is not followed.
    #[test]
    fn a_symlinked_database_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let target = elsewhere.path().join("victim.db");
        std::os::unix::fs::symlink(&target, dir.path().join("history.db")).unwrap();
        let err = History::open(&dir.path().join("history.db")).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(!target.exists());
    }

    /// A run begun but never finished (the gate was killed before its outputs were in
    /// place) leaves no record; one finished records what became of its outputs.
    #[test]
    fn a_pending_run_is_recorded_only_when_finished() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        let mut h = History::open(&path).unwrap();
        let pending = h.begin_record("gate", "t", &evidence(1.0), &decision()).unwrap();
        let (_, series) = pending.series(Some("p"), "s1", "latency").unwrap();
        assert_eq!(series.len(), 1, "the pending run is in its own series");
        drop(pending);
        assert_eq!(run_count(&path), 0);
        let pending = h.begin_record("gate", "t", &evidence(1.0), &decision()).unwrap();
        pending.finish(Err("cannot write out: disk full".into())).unwrap();
        let runs = h.runs(None, 10).unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(
            runs[0].outputs.as_deref(),
            Some("failed: cannot write out: disk full")
        );
    }
}
