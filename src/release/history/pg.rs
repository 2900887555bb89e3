//! The team backend (issue 22): a PostgreSQL database that ephemeral CI runners share,
//! reached through the maintained sync client (rust-postgres, the crate rustc-perf runs
//! beside rusqlite), without TLS: a unix socket, a private network or a CI service
//! container, as the README says.
//!
//! Same logical schema as SQLite, in PostgreSQL's dialect ([`POSTGRES_MIGRATIONS`], the
//! version kept in a one-row `schema_version` table). Several writers at once (the shards of
//! one CI run) each write their run in one transaction; identity ids never collide. Two
//! processes opening a fresh database at once migrate under a transaction-scoped advisory
//! lock: one creates the schema, the other waits and finds nothing to do.

use super::queries::{Conn, FromRow, Param};
use super::{HistoryError, HistoryLocation, PostgresUrl};
use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, GenericClient, NoTls, Statement};
use std::cell::{RefCell, RefMut};
use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

/// How long connecting may take when the URL does not say (`connect_timeout=N`): an
/// unreachable server is an error within seconds, not a hung CI job.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The advisory lock migrations hold (any fixed number; these are "sparsegate" in ASCII).
const MIGRATION_LOCK: i64 = 0x7370_6172_7365_6761;

/// Schema migrations, in order, the PostgreSQL twins of [`super::MIGRATIONS`] (same count,
/// same tables and columns): after migration `i` the `schema_version` row says `i + 1`.
/// Integers are BIGINT (Rust `i64`), reals DOUBLE PRECISION, `git_dirty` a BOOLEAN.
pub const POSTGRES_MIGRATIONS: &[&str] = &[
    r"
CREATE TABLE runs (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    recorded_at TEXT NOT NULL,
    command TEXT NOT NULL,
    verdict TEXT NOT NULL,
    exit_code BIGINT NOT NULL,
    git_commit TEXT,
    git_branch TEXT,
    git_dirty BOOLEAN,
    tool_version TEXT NOT NULL,
    lock_json TEXT NOT NULL
);
CREATE TABLE run_packs (
    run_id BIGINT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    pack TEXT NOT NULL,
    digest TEXT NOT NULL,
    path TEXT NOT NULL,
    PRIMARY KEY (run_id, pack)
);
CREATE TABLE guardrails (
    run_id BIGINT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    position BIGINT NOT NULL,
    pack TEXT NOT NULL,
    slice TEXT NOT NULL,
    metric TEXT NOT NULL,
    rule TEXT NOT NULL,
    severity TEXT NOT NULL,
    verdict TEXT NOT NULL,
    value DOUBLE PRECISION,
    ci_low DOUBLE PRECISION,
    ci_high DOUBLE PRECISION,
    baseline DOUBLE PRECISION,
    p_value DOUBLE PRECISION,
    samples BIGINT NOT NULL,
    PRIMARY KEY (run_id, position)
);
CREATE INDEX guardrails_series ON guardrails (pack, slice, metric, run_id);
CREATE TABLE metrics (
    run_id BIGINT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    pack TEXT NOT NULL,
    slice TEXT NOT NULL,
    metric TEXT NOT NULL,
    unit TEXT NOT NULL,
    median DOUBLE PRECISION NOT NULL,
    ci_low DOUBLE PRECISION,
    ci_high DOUBLE PRECISION,
    n BIGINT NOT NULL,
    runs BIGINT NOT NULL,
    PRIMARY KEY (run_id, pack, slice, metric)
);
CREATE INDEX metrics_series ON metrics (pack, slice, metric, run_id);
",
    r"
-- Issue 23: whether the run's output set was written (`written`, or `failed: <why>`).
ALTER TABLE runs ADD COLUMN outputs TEXT;
",
];

/// An open PostgreSQL history. The sync client needs `&mut` for every statement; the
/// history's readers take `&self`, hence the cell (one connection, one thread at a time).
pub(super) struct Postgres {
    client: RefCell<Client>,
    url: PostgresUrl,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Postgres {
    /// Connect (within [`CONNECT_TIMEOUT`] unless the URL says otherwise) and bring the
    /// schema up to date. A malformed URL, an unreachable server and a refused login are
    /// each their own error, with the password kept out of every message.
    pub(super) fn open(url: &PostgresUrl) -> Result<Postgres, HistoryError> {
        let mut config = postgres::Config::from_str(url.secret()).map_err(|e| HistoryError::BadUrl {
            location: HistoryLocation::Postgres(url.clone()),
            message: url.scrub(&chain(&e)),
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("sparsegate");
        }
        let client = config.connect(NoTls).map_err(|e| HistoryError::Connect {
            location: HistoryLocation::Postgres(url.clone()),
            message: url.scrub(&chain(&e)),
            hint: connect_hint(&e),
        })?;
        let db = Postgres {
            client: RefCell::new(client),
            url: url.clone(),
        };
        db.migrate()?;
        Ok(db)
    }

    fn error(&self) -> impl Fn(postgres::Error) -> HistoryError + '_ {
        pg_error(&self.url)
    }

    pub(super) fn schema_version(&self) -> Result<i64, HistoryError> {
        let mut client = self.client.borrow_mut();
        let row = client
            .query_one("SELECT version FROM schema_version", &[])
            .map_err(self.error())?;
        row.try_get(0).map_err(self.error())
    }

    /// Apply the migrations the database lacks, in one transaction under the migration
    /// lock (PostgreSQL's DDL is transactional: a failed migration leaves nothing behind).
    fn migrate(&self) -> Result<(), HistoryError> {
        let err = self.error();
        let known = POSTGRES_MIGRATIONS.len() as i64;
        let mut client = self.client.borrow_mut();
        let mut tx = client.transaction().map_err(&err)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .map_err(&err)?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")
            .map_err(&err)?;
        let version: Option<i64> = tx
            .query_opt("SELECT version FROM schema_version", &[])
            .map_err(&err)?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(&err)?;
        let version = match version {
            Some(v) => v,
            None => {
                tx.execute("INSERT INTO schema_version (version) VALUES (0)", &[])
                    .map_err(&err)?;
                0
            }
        };
        if version > known {
            return Err(HistoryError::NewerSchema {
                location: HistoryLocation::Postgres(self.url.clone()),
                found: version,
                known,
            });
        }
        for migration in &POSTGRES_MIGRATIONS[version as usize..] {
            tx.batch_execute(migration).map_err(&err)?;
        }
        if version < known {
            tx.execute("UPDATE schema_version SET version = $1", &[&known])
                .map_err(&err)?;
        }
        tx.commit().map_err(&err)
    }

    /// Begin writing a run: a transaction, which the returned [`Pending`] commits.
    pub(super) fn begin(&mut self) -> Result<Pending<'_>, HistoryError> {
        let url = &self.url;
        let tx = self.client.get_mut().transaction().map_err(pg_error(url))?;
        Ok(Pending {
            tx: RefCell::new(tx),
            url,
        })
    }

    /// The shared queries' connection.
    pub(super) fn conn(&self) -> PgConn<'_, Client> {
        PgConn::new(self.client.borrow_mut(), &self.url)
    }

    /// Whether the server has closed the connection (it is then of no further use).
    pub(super) fn is_closed(&self) -> bool {
        self.client.borrow().is_closed()
    }
}

/// A run being written inside an open PostgreSQL transaction ([`super::PendingRun`]);
/// dropped, the transaction rolls back.
pub(super) struct Pending<'h> {
    tx: RefCell<postgres::Transaction<'h>>,
    url: &'h PostgresUrl,
}

impl std::fmt::Debug for Pending<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("url", self.url)
            .finish_non_exhaustive()
    }
}

impl<'h> Pending<'h> {
    /// The shared queries' connection, inside the transaction.
    pub(super) fn conn(&self) -> PgConn<'_, postgres::Transaction<'h>> {
        PgConn::new(self.tx.borrow_mut(), self.url)
    }

    pub(super) fn commit(self) -> Result<(), HistoryError> {
        self.tx.into_inner().commit().map_err(pg_error(self.url))
    }
}

/// A connection (or transaction) the shared queries run on. Each statement is prepared once
/// for as long as this lives (a run's rows are inserted through one), its `?N` placeholders
/// written as PostgreSQL's `$N`.
pub(super) struct PgConn<'a, C> {
    client: RefMut<'a, C>,
    url: &'a PostgresUrl,
    prepared: HashMap<&'static str, Statement>,
}

impl<'a, C: GenericClient> PgConn<'a, C> {
    fn new(client: RefMut<'a, C>, url: &'a PostgresUrl) -> PgConn<'a, C> {
        PgConn {
            client,
            url,
            prepared: HashMap::new(),
        }
    }

    fn statement(&mut self, sql: &'static str) -> Result<Statement, HistoryError> {
        if let Some(statement) = self.prepared.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self
            .client
            .prepare(&dollar_placeholders(sql))
            .map_err(pg_error(self.url))?;
        self.prepared.insert(sql, statement.clone());
        Ok(statement)
    }
}

/// The parameters as PostgreSQL binds them.
fn bind<'p>(params: &'p [&dyn Param]) -> Vec<&'p (dyn ToSql + Sync)> {
    params.iter().map(|p| p.postgres()).collect()
}

impl<C: GenericClient> Conn for PgConn<'_, C> {
    fn execute(&mut self, sql: &'static str, params: &[&dyn Param]) -> Result<(), HistoryError> {
        let statement = self.statement(sql)?;
        self.client
            .execute(&statement, &bind(params))
            .map(drop)
            .map_err(pg_error(self.url))
    }

    fn query<T: FromRow>(
        &mut self,
        sql: &'static str,
        params: &[&dyn Param],
    ) -> Result<Vec<T>, HistoryError> {
        let statement = self.statement(sql)?;
        let err = pg_error(self.url);
        let rows = self.client.query(&statement, &bind(params)).map_err(&err)?;
        rows.iter()
            .map(T::from_row)
            .collect::<Result<Vec<_>, _>>()
            .map_err(&err)
    }

    fn query_one<T: FromRow>(&mut self, sql: &'static str, params: &[&dyn Param]) -> Result<T, HistoryError> {
        let statement = self.statement(sql)?;
        let err = pg_error(self.url);
        let row = self.client.query_one(&statement, &bind(params)).map_err(&err)?;
        T::from_row(&row).map_err(&err)
    }
}

/// `sql` with its `?N` placeholders written `$N` (outside quoted strings and identifiers).
fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            (None, '?') if chars.peek().is_some_and(char::is_ascii_digit) => {
                out.push('$');
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// What to check when connecting failed, by what the server or the client said.
fn connect_hint(e: &postgres::Error) -> &'static str {
    let code = e.code();
    if code == Some(&SqlState::INVALID_PASSWORD)
        || code == Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
        || chain(e).contains("password missing")
    {
        "check the user and password in the URL (postgres://USER:PASSWORD@HOST/DATABASE) and the server's pg_hba.conf"
    } else if code == Some(&SqlState::INVALID_CATALOG_NAME) {
        "create the database first (`createdb NAME`), or name an existing one in the URL"
    } else if chain(e).contains("TLS") {
        "this build connects without TLS: use sslmode=disable (or prefer) over a trusted network or a unix socket"
    } else {
        "check that the server runs and that the URL's host and port reach it (connecting gives up after 10 s \
         unless the URL sets connect_timeout=SECONDS)"
    }
}

/// The error and its causes on one line (the client's own `Display` leaves the server's
/// message and the OS error to its sources).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string().replace('\n', " "));
        source = cause.source();
    }
    text
}

/// Maps a client error to one that names the (redacted) location, scrubbed of the password.
fn pg_error(url: &PostgresUrl) -> impl Fn(postgres::Error) -> HistoryError + '_ {
    move |e| HistoryError::Postgres {
        location: HistoryLocation::Postgres(url.clone()),
        message: url.scrub(&chain(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::dollar_placeholders;

    #[test]
    fn placeholders_become_dollar_numbers_outside_quotes() {
        assert_eq!(
            dollar_placeholders("SELECT a || '?1' FROM t WHERE b = ?1 AND c = ?12 AND \"?2\" = ?"),
            "SELECT a || '?1' FROM t WHERE b = $1 AND c = $12 AND \"?2\" = ?"
        );
    }
}
