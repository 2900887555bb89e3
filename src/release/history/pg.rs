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

use super::{
    HistoryError, HistoryLocation, PostgresUrl, Query, RunRecord, RunRow, SeriesPoint, SeriesSource,
    split_packs,
};
use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, GenericClient, NoTls, Row};
use std::cell::RefCell;
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

    pub(super) fn begin_record(&mut self, run: &RunRecord) -> Result<Pending<'_>, HistoryError> {
        let url = &self.url;
        let err = pg_error(url);
        let mut tx = self.client.get_mut().transaction().map_err(&err)?;
        let run_id: i64 = tx
            .query_one(
                "INSERT INTO runs (recorded_at, command, verdict, exit_code, git_commit, git_branch, git_dirty,
                                   tool_version, lock_json)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 RETURNING id",
                &[
                    &run.recorded_at,
                    &run.command,
                    &run.verdict,
                    &run.exit_code,
                    &run.git_commit,
                    &run.git_branch,
                    &run.git_dirty,
                    &run.tool_version,
                    &run.lock_json,
                ],
            )
            .and_then(|r| r.try_get(0))
            .map_err(&err)?;
        let insert_pack = tx
            .prepare("INSERT INTO run_packs (run_id, pack, digest, path) VALUES ($1, $2, $3, $4)")
            .map_err(&err)?;
        for (name, digest, path) in &run.packs {
            tx.execute(&insert_pack, &[&run_id, name, digest, path])
                .map_err(&err)?;
        }
        let insert_guardrail = tx
            .prepare(
                "INSERT INTO guardrails (run_id, position, pack, slice, metric, rule, severity, verdict,
                                         value, ci_low, ci_high, baseline, p_value, samples)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
            )
            .map_err(&err)?;
        for g in &run.guardrails {
            let params: [&(dyn ToSql + Sync); 14] = [
                &run_id,
                &g.position,
                &g.pack,
                &g.slice,
                &g.metric,
                &g.rule,
                &g.severity,
                &g.verdict,
                &g.value,
                &g.ci_low,
                &g.ci_high,
                &g.baseline,
                &g.p_value,
                &g.samples,
            ];
            tx.execute(&insert_guardrail, &params).map_err(&err)?;
        }
        let insert_metric = tx
            .prepare(
                "INSERT INTO metrics (run_id, pack, slice, metric, unit, median, ci_low, ci_high, n, runs)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .map_err(&err)?;
        for m in &run.metrics {
            let params: [&(dyn ToSql + Sync); 10] = [
                &run_id, &m.pack, &m.slice, &m.metric, &m.unit, &m.median, &m.ci_low, &m.ci_high, &m.n,
                &m.runs,
            ];
            tx.execute(&insert_metric, &params).map_err(&err)?;
        }
        Ok(Pending {
            tx: RefCell::new(tx),
            run_id,
            url,
        })
    }

    pub(super) fn runs(&self, pack: Option<&str>, limit: usize) -> Result<Vec<RunRow>, HistoryError> {
        let err = self.error();
        let rows = self
            .client
            .borrow_mut()
            .query(
                "SELECT id, recorded_at, command, verdict, exit_code, git_commit, git_dirty,
                        (SELECT string_agg(pack || '@' || digest, ',' ORDER BY pack)
                           FROM run_packs WHERE run_id = runs.id),
                        outputs
                   FROM runs
                  WHERE $1::text IS NULL OR EXISTS (SELECT 1 FROM run_packs WHERE run_id = runs.id AND pack = $1)
                  ORDER BY id DESC
                  LIMIT $2",
                &[&pack, &(limit as i64)],
            )
            .map_err(&err)?;
        rows.iter()
            .map(|r| {
                Ok(RunRow {
                    id: r.try_get(0)?,
                    recorded_at: r.try_get(1)?,
                    command: r.try_get(2)?,
                    verdict: r.try_get(3)?,
                    exit_code: r.try_get(4)?,
                    git_commit: r.try_get(5)?,
                    git_dirty: r.try_get(6)?,
                    packs: split_packs(r.try_get(7)?),
                    outputs: r.try_get(8)?,
                })
            })
            .collect::<Result<Vec<_>, postgres::Error>>()
            .map_err(&err)
    }

    pub(super) fn series(
        &self,
        pack: Option<&str>,
        slice: &str,
        metric: &str,
    ) -> Result<(SeriesSource, Vec<SeriesPoint>), HistoryError> {
        series_on(&mut *self.client.borrow_mut(), pack, slice, metric).map_err(self.error())
    }

    pub(super) fn last_baseline(
        &self,
        pack: Option<&str>,
        slice: &str,
        metric: &str,
    ) -> Result<Option<(i64, f64)>, HistoryError> {
        let err = self.error();
        let row = self
            .client
            .borrow_mut()
            .query_opt(
                "SELECT run_id, baseline FROM guardrails
                  WHERE slice = $1 AND metric = $2 AND ($3::text IS NULL OR pack = $3) AND baseline IS NOT NULL
                  ORDER BY run_id DESC, position LIMIT 1",
                &[&slice, &metric, &pack],
            )
            .map_err(&err)?;
        row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .transpose()
            .map_err(&err)
    }

    pub(super) fn strings(&self, query: Query, slice: Option<&str>) -> Result<Vec<String>, HistoryError> {
        let text = match query {
            Query::PacksWithSlice => "SELECT DISTINCT pack FROM metrics WHERE slice = $1 ORDER BY pack",
            Query::MetricNames => {
                "SELECT metric FROM metrics WHERE slice = $1 UNION SELECT metric FROM guardrails WHERE slice = $1
                 ORDER BY 1"
            }
            Query::SliceNames => {
                "SELECT DISTINCT pack || '/' || slice FROM metrics WHERE $1::text IS NULL ORDER BY 1"
            }
        };
        let err = self.error();
        let rows = self.client.borrow_mut().query(text, &[&slice]).map_err(&err)?;
        rows.iter()
            .map(|r| r.try_get(0))
            .collect::<Result<Vec<String>, _>>()
            .map_err(&err)
    }

    pub(super) fn has_run(&self, id: i64) -> Result<bool, HistoryError> {
        self.client
            .borrow_mut()
            .query_opt("SELECT 1 FROM runs WHERE id = $1", &[&id])
            .map(|r| r.is_some())
            .map_err(self.error())
    }
}

/// A run written inside an open PostgreSQL transaction ([`super::PendingRun`]); dropped,
/// the transaction rolls back.
pub(super) struct Pending<'h> {
    tx: RefCell<postgres::Transaction<'h>>,
    pub(super) run_id: i64,
    url: &'h PostgresUrl,
}

impl std::fmt::Debug for Pending<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("run_id", &self.run_id)
            .field("url", self.url)
            .finish_non_exhaustive()
    }
}

impl Pending<'_> {
    pub(super) fn series(
        &self,
        pack: Option<&str>,
        slice: &str,
        metric: &str,
    ) -> Result<(SeriesSource, Vec<SeriesPoint>), HistoryError> {
        series_on(&mut *self.tx.borrow_mut(), pack, slice, metric).map_err(pg_error(self.url))
    }

    /// Commit, with what became of the outputs when `outputs` says.
    pub(super) fn finish(self, outputs: Option<&str>) -> Result<i64, HistoryError> {
        let err = pg_error(self.url);
        let mut tx = self.tx.into_inner();
        if let Some(outputs) = outputs {
            tx.execute(
                "UPDATE runs SET outputs = $1 WHERE id = $2",
                &[&outputs, &self.run_id],
            )
            .map_err(&err)?;
        }
        tx.commit().map_err(&err)?;
        Ok(self.run_id)
    }
}

/// The series of `metric` for `slice` ([`super::History::series`]), as SQLite words it.
fn series_on(
    client: &mut impl GenericClient,
    pack: Option<&str>,
    slice: &str,
    metric: &str,
) -> Result<(SeriesSource, Vec<SeriesPoint>), postgres::Error> {
    let params: [&(dyn ToSql + Sync); 3] = [&slice, &metric, &pack];
    let metrics = client.query(
        "SELECT m.run_id, r.recorded_at, r.git_commit, m.median, m.ci_low, m.ci_high
           FROM metrics m JOIN runs r ON r.id = m.run_id
          WHERE m.slice = $1 AND m.metric = $2 AND ($3::text IS NULL OR m.pack = $3)
          ORDER BY m.run_id, m.pack",
        &params,
    )?;
    if !metrics.is_empty() {
        return Ok((SeriesSource::Metric, points(&metrics)?));
    }
    let guardrails = client.query(
        "SELECT g.run_id, r.recorded_at, r.git_commit, g.value, g.ci_low, g.ci_high
           FROM guardrails g JOIN runs r ON r.id = g.run_id
          WHERE g.slice = $1 AND g.metric = $2 AND ($3::text IS NULL OR g.pack = $3) AND g.value IS NOT NULL
            AND g.position = (SELECT min(position) FROM guardrails h
                               WHERE h.run_id = g.run_id AND h.pack = g.pack AND h.slice = g.slice
                                 AND h.metric = g.metric AND h.value IS NOT NULL)
          ORDER BY g.run_id, g.pack",
        &params,
    )?;
    Ok((SeriesSource::Guardrail, points(&guardrails)?))
}

fn points(rows: &[Row]) -> Result<Vec<SeriesPoint>, postgres::Error> {
    rows.iter()
        .map(|r| {
            Ok(SeriesPoint {
                run_id: r.try_get(0)?,
                recorded_at: r.try_get(1)?,
                git_commit: r.try_get(2)?,
                value: r.try_get(3)?,
                ci_low: r.try_get(4)?,
                ci_high: r.try_get(5)?,
            })
        })
        .collect()
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
