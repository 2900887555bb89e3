//! The embedded backend: one SQLite file (rusqlite, bundled), no server, safe for several
//! gate processes at once. Concurrency and crash safety come from SQLite itself: the
//! database runs in WAL mode with a busy timeout, and each run is written in one immediate
//! transaction. The schema is versioned with `PRAGMA user_version` and upgraded by the
//! ordered [`MIGRATIONS`].

use super::queries::{Conn, FromRow, Param};
use super::{HistoryError, HistoryLocation};
use rusqlite::Connection;
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

    /// Begin writing a run: an immediate transaction ([`Sqlite::begin_immediate`]).
    pub(super) fn begin(&mut self) -> Result<Pending<'_>, HistoryError> {
        let path = self.path.clone();
        let tx = self.begin_immediate()?;
        Ok(Pending { tx, path })
    }

    /// The shared queries' connection.
    pub(super) fn conn(&self) -> SqliteConn<'_> {
        SqliteConn {
            conn: &self.conn,
            path: &self.path,
        }
    }
}

/// A run being written inside an open SQLite transaction ([`super::PendingRun`]); dropped,
/// the transaction rolls back.
#[derive(Debug)]
pub struct Pending<'h> {
    tx: rusqlite::Transaction<'h>,
    path: PathBuf,
}

impl Pending<'_> {
    /// The shared queries' connection, inside the transaction.
    pub(super) fn conn(&self) -> SqliteConn<'_> {
        SqliteConn {
            conn: &self.tx,
            path: &self.path,
        }
    }

    pub(super) fn commit(self) -> Result<(), HistoryError> {
        self.tx.commit().map_err(sql_error(&self.path))
    }
}

/// A connection (or transaction) the shared queries run on; statements are prepared once
/// per connection (rusqlite's statement cache).
pub(super) struct SqliteConn<'a> {
    conn: &'a Connection,
    path: &'a Path,
}

impl SqliteConn<'_> {
    fn statement(&self, sql: &str) -> Result<rusqlite::CachedStatement<'_>, HistoryError> {
        self.conn.prepare_cached(sql).map_err(sql_error(self.path))
    }
}

/// The parameters as SQLite binds them.
fn bind<'p>(params: &'p [&dyn Param]) -> Vec<&'p dyn rusqlite::ToSql> {
    params.iter().map(|p| p.sqlite()).collect()
}

impl Conn for SqliteConn<'_> {
    fn execute(&mut self, sql: &'static str, params: &[&dyn Param]) -> Result<(), HistoryError> {
        self.statement(sql)?
            .execute(bind(params).as_slice())
            .map(drop)
            .map_err(sql_error(self.path))
    }

    fn query<T: FromRow>(
        &mut self,
        sql: &'static str,
        params: &[&dyn Param],
    ) -> Result<Vec<T>, HistoryError> {
        let sql_err = sql_error(self.path);
        let mut stmt = self.statement(sql)?;
        let rows = stmt
            .query_map(bind(params).as_slice(), |r| T::from_row(r))
            .map_err(sql_err)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(sql_err)
    }

    fn query_one<T: FromRow>(&mut self, sql: &'static str, params: &[&dyn Param]) -> Result<T, HistoryError> {
        self.statement(sql)?
            .query_row(bind(params).as_slice(), |r| T::from_row(r))
            .map_err(sql_error(self.path))
    }
}

/// Maps a SQLite error to one that names the database file.
fn sql_error(path: &Path) -> impl Fn(rusqlite::Error) -> HistoryError + Copy + '_ {
    |source| HistoryError::Sql {
        path: path.to_owned(),
        source,
    }
}
