//! The embedded backend: one SQLite file (rusqlite, bundled), no server, safe for several
//! gate processes at once. Concurrency and crash safety come from SQLite itself: the
//! database runs in WAL mode with a busy timeout, and each run is written in one immediate
//! transaction. The schema is versioned with `PRAGMA user_version` and upgraded by the
//! ordered [`MIGRATIONS`].

use super::{
    HistoryError, HistoryLocation, MetricRow, Query, RunRecord, RunRow, SeriesPoint, SeriesSource,
    split_packs,
};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a writer waits for another gate's transaction before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Schema migrations, in order; after applying migration `i` the database's
/// `user_version` is `i + 1`. Never edit one that has shipped: append a new one (and its
/// PostgreSQL twin in [`super::POSTGRES_MIGRATIONS`]).
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

/// An open SQLite history.
#[derive(Debug)]
pub(super) struct Sqlite {
    conn: Connection,
    path: PathBuf,
}

impl Sqlite {
    /// Open (creating if needed) the database at `path` and bring its schema up to date.
    ///
    /// Its directory is created through the checked writer's directory walk (issue 23: no
    /// symbolic link below the root the path was given from), and a database file that is
    /// a symbolic link is refused. SQLite opens the file by path, so this is a check, not
    /// a handle: a link swapped in between the check and the open is not caught.
    pub(super) fn open(path: &Path) -> Result<Sqlite, HistoryError> {
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
        let mut db = Sqlite {
            conn,
            path: path.to_owned(),
        };
        db.migrate()?;
        Ok(db)
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

    pub(super) fn schema_version(&self) -> Result<i64, HistoryError> {
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
                    location: HistoryLocation::Sqlite(path),
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

    pub(super) fn begin_record(&mut self, run: &RunRecord) -> Result<Pending<'_>, HistoryError> {
        let path = self.path.clone();
        let sql = sql_error(&path);
        let tx = self.begin_immediate()?;
        tx.execute(
            "INSERT INTO runs (recorded_at, command, verdict, exit_code, git_commit, git_branch, git_dirty,
                               tool_version, lock_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                run.recorded_at,
                run.command,
                run.verdict,
                run.exit_code,
                run.git_commit,
                run.git_branch,
                run.git_dirty,
                run.tool_version,
                run.lock_json,
            ],
        )
        .map_err(sql)?;
        let run_id = tx.last_insert_rowid();
        for (name, digest, pack_path) in &run.packs {
            tx.execute(
                "INSERT INTO run_packs (run_id, pack, digest, path) VALUES (?1, ?2, ?3, ?4)",
                params![run_id, name, digest, pack_path],
            )
            .map_err(sql)?;
        }
        for g in &run.guardrails {
            tx.execute(
                "INSERT INTO guardrails (run_id, position, pack, slice, metric, rule, severity, verdict,
                                         value, ci_low, ci_high, baseline, p_value, samples)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                params![
                    run_id, g.position, g.pack, g.slice, g.metric, g.rule, g.severity, g.verdict, g.value,
                    g.ci_low, g.ci_high, g.baseline, g.p_value, g.samples,
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
        for MetricRow {
            pack,
            slice,
            metric,
            unit,
            median,
            ci_low,
            ci_high,
            n,
            runs,
        } in &run.metrics
        {
            insert_metric
                .execute(params![
                    run_id, pack, slice, metric, unit, median, ci_low, ci_high, n, runs
                ])
                .map_err(sql)?;
        }
        drop(insert_metric);
        Ok(Pending { tx, run_id, path })
    }

    pub(super) fn runs(&self, pack: Option<&str>, limit: usize) -> Result<Vec<RunRow>, HistoryError> {
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
                Ok(RunRow {
                    id: r.get(0)?,
                    recorded_at: r.get(1)?,
                    command: r.get(2)?,
                    verdict: r.get(3)?,
                    exit_code: r.get(4)?,
                    git_commit: r.get(5)?,
                    git_dirty: r.get(6)?,
                    packs: split_packs(r.get(7)?),
                    outputs: r.get(8)?,
                })
            })
            .map_err(self.sql())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())
    }

    pub(super) fn series(
        &self,
        pack: Option<&str>,
        slice: &str,
        metric: &str,
    ) -> Result<(SeriesSource, Vec<SeriesPoint>), HistoryError> {
        series_on(&self.conn, &self.path, pack, slice, metric)
    }

    pub(super) fn last_baseline(
        &self,
        pack: Option<&str>,
        slice: &str,
        metric: &str,
    ) -> Result<Option<(i64, f64)>, HistoryError> {
        self.conn
            .query_row(
                "SELECT run_id, baseline FROM guardrails
                  WHERE slice = ?1 AND metric = ?2 AND (?3 IS NULL OR pack = ?3) AND baseline IS NOT NULL
                  ORDER BY run_id DESC, position LIMIT 1",
                params![slice, metric, pack],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(self.sql())
    }

    pub(super) fn strings(&self, query: Query, slice: Option<&str>) -> Result<Vec<String>, HistoryError> {
        let text = match query {
            Query::PacksWithSlice => "SELECT DISTINCT pack FROM metrics WHERE slice = ?1 ORDER BY pack",
            Query::MetricNames => {
                "SELECT metric FROM metrics WHERE slice = ?1 UNION SELECT metric FROM guardrails WHERE slice = ?1
                 ORDER BY 1"
            }
            Query::SliceNames => "SELECT DISTINCT pack || '/' || slice FROM metrics WHERE ?1 IS NULL ORDER BY 1",
        };
        let mut stmt = self.conn.prepare(text).map_err(self.sql())?;
        let rows = stmt.query_map(params![slice], |r| r.get(0)).map_err(self.sql())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())
    }

    pub(super) fn has_run(&self, id: i64) -> Result<bool, HistoryError> {
        self.conn
            .query_row("SELECT 1 FROM runs WHERE id = ?1", params![id], |_| Ok(()))
            .optional()
            .map(|r| r.is_some())
            .map_err(self.sql())
    }
}

/// A run written inside an open SQLite transaction ([`super::PendingRun`]).
#[derive(Debug)]
pub struct Pending<'h> {
    tx: rusqlite::Transaction<'h>,
    pub(super) run_id: i64,
    path: PathBuf,
}

impl Pending<'_> {
    pub(super) fn series(
        &self,
        pack: Option<&str>,
        slice: &str,
        metric: &str,
    ) -> Result<(SeriesSource, Vec<SeriesPoint>), HistoryError> {
        series_on(&self.tx, &self.path, pack, slice, metric)
    }

    /// Commit, with what became of the outputs when `outputs` says.
    pub(super) fn finish(self, outputs: Option<&str>) -> Result<i64, HistoryError> {
        let sql = sql_error(&self.path);
        if let Some(outputs) = outputs {
            self.tx
                .execute(
                    "UPDATE runs SET outputs = ?1 WHERE id = ?2",
                    params![outputs, self.run_id],
                )
                .map_err(sql)?;
        }
        self.tx.commit().map_err(sql)?;
        Ok(self.run_id)
    }
}

/// The series of `metric` for `slice` over `conn` ([`super::History::series`]).
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

/// Maps a SQLite error to one that names the database file.
fn sql_error(path: &Path) -> impl Fn(rusqlite::Error) -> HistoryError + Copy + '_ {
    |source| HistoryError::Sql {
        path: path.to_owned(),
        source,
    }
}
