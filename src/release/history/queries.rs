//! Every statement the history runs after its schema is in place, written once for both
//! backends (issue 22: the record, series and listing queries had been written twice, once
//! per dialect, and a fix to one could miss the other).
//!
//! The SQL here is the part of the language SQLite (3.44 or newer; the bundled one is 3.50)
//! and PostgreSQL read alike:
//! - placeholders are `?N`; the PostgreSQL backend rewrites them to `$N`;
//! - an optional filter is `CAST(?N AS TEXT) IS NULL OR …`: PostgreSQL must know the type of
//!   a parameter that is only compared with NULL;
//! - `string_agg(… ORDER BY …)` and `INSERT … RETURNING` (both in SQLite since 3.44/3.35).
//!
//! What does differ stays with each backend behind [`Conn`]: connecting, the migrations and
//! where the schema version is kept, transactions, and the client's error type.

use super::{HistoryError, RunRecord, RunRow, SeriesPoint, SeriesSource, split_packs};

/// A value both clients can bind as a parameter.
pub(super) trait Param {
    /// As SQLite binds it.
    fn sqlite(&self) -> &dyn rusqlite::ToSql;
    /// As PostgreSQL binds it.
    fn postgres(&self) -> &(dyn postgres::types::ToSql + Sync);
}

impl<T: rusqlite::ToSql + postgres::types::ToSql + Sync> Param for T {
    fn sqlite(&self) -> &dyn rusqlite::ToSql {
        self
    }

    fn postgres(&self) -> &(dyn postgres::types::ToSql + Sync) {
        self
    }
}

/// A column type both clients can read.
pub(super) trait Column: rusqlite::types::FromSql + for<'a> postgres::types::FromSql<'a> {}

impl<T: rusqlite::types::FromSql + for<'a> postgres::types::FromSql<'a>> Column for T {}

/// A result row of either client.
pub(super) trait Row {
    /// The client's error.
    type Error;
    /// Column `index` (from 0) as a `T`.
    fn get<T: Column>(&self, index: usize) -> Result<T, Self::Error>;
}

impl Row for rusqlite::Row<'_> {
    type Error = rusqlite::Error;

    fn get<T: Column>(&self, index: usize) -> Result<T, rusqlite::Error> {
        rusqlite::Row::get(self, index)
    }
}

impl Row for postgres::Row {
    type Error = postgres::Error;

    fn get<T: Column>(&self, index: usize) -> Result<T, postgres::Error> {
        self.try_get(index)
    }
}

/// What a result row reads as, the same from either client.
pub(super) trait FromRow: Sized {
    /// The row's columns, in the order the query selects them.
    fn from_row<R: Row>(row: &R) -> Result<Self, R::Error>;
}

impl FromRow for i64 {
    fn from_row<R: Row>(row: &R) -> Result<i64, R::Error> {
        row.get(0)
    }
}

impl FromRow for String {
    fn from_row<R: Row>(row: &R) -> Result<String, R::Error> {
        row.get(0)
    }
}

impl FromRow for (i64, f64) {
    fn from_row<R: Row>(row: &R) -> Result<(i64, f64), R::Error> {
        Ok((row.get(0)?, row.get(1)?))
    }
}

impl FromRow for RunRow {
    fn from_row<R: Row>(r: &R) -> Result<RunRow, R::Error> {
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
    }
}

impl FromRow for SeriesPoint {
    fn from_row<R: Row>(r: &R) -> Result<SeriesPoint, R::Error> {
        Ok(SeriesPoint {
            run_id: r.get(0)?,
            recorded_at: r.get(1)?,
            git_commit: r.get(2)?,
            value: r.get(3)?,
            ci_low: r.get(4)?,
            ci_high: r.get(5)?,
        })
    }
}

/// A connection, or an open transaction, of either backend. Statements are the `&'static`
/// texts of this file, so a backend may prepare each once and keep it.
pub(super) trait Conn {
    /// Run a statement that returns no rows.
    fn execute(&mut self, sql: &'static str, params: &[&dyn Param]) -> Result<(), HistoryError>;
    /// Every row a query returns.
    fn query<T: FromRow>(&mut self, sql: &'static str, params: &[&dyn Param])
    -> Result<Vec<T>, HistoryError>;
    /// The one row a query returns (the client's error when there is none).
    fn query_one<T: FromRow>(&mut self, sql: &'static str, params: &[&dyn Param]) -> Result<T, HistoryError>;
}

const INSERT_RUN: &str = "
    INSERT INTO runs (recorded_at, command, verdict, exit_code, git_commit, git_branch, git_dirty,
                      tool_version, lock_json)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
    RETURNING id";

const INSERT_PACK: &str = "INSERT INTO run_packs (run_id, pack, digest, path) VALUES (?1, ?2, ?3, ?4)";

const INSERT_GUARDRAIL: &str = "
    INSERT INTO guardrails (run_id, position, pack, slice, metric, rule, severity, verdict,
                            value, ci_low, ci_high, baseline, p_value, samples)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

const INSERT_METRIC: &str = "
    INSERT INTO metrics (run_id, pack, slice, metric, unit, median, ci_low, ci_high, n, runs)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

const SET_OUTPUTS: &str = "UPDATE runs SET outputs = ?1 WHERE id = ?2";

const RUNS: &str = "
    SELECT id, recorded_at, command, verdict, exit_code, git_commit, git_dirty,
           (SELECT string_agg(pack || '@' || digest, ',' ORDER BY pack)
              FROM run_packs WHERE run_id = runs.id),
           outputs
      FROM runs
     WHERE CAST(?1 AS TEXT) IS NULL
        OR EXISTS (SELECT 1 FROM run_packs WHERE run_id = runs.id AND pack = ?1)
     ORDER BY id DESC
     LIMIT ?2";

const METRIC_SERIES: &str = "
    SELECT m.run_id, r.recorded_at, r.git_commit, m.median, m.ci_low, m.ci_high
      FROM metrics m JOIN runs r ON r.id = m.run_id
     WHERE m.slice = ?1 AND m.metric = ?2 AND (CAST(?3 AS TEXT) IS NULL OR m.pack = ?3)
     ORDER BY m.run_id, m.pack";

/// A guardrail's value per run: the first guardrail on the metric that judged a value.
const GUARDRAIL_SERIES: &str = "
    SELECT g.run_id, r.recorded_at, r.git_commit, g.value, g.ci_low, g.ci_high
      FROM guardrails g JOIN runs r ON r.id = g.run_id
     WHERE g.slice = ?1 AND g.metric = ?2 AND (CAST(?3 AS TEXT) IS NULL OR g.pack = ?3)
       AND g.value IS NOT NULL
       AND g.position = (SELECT min(position) FROM guardrails h
                          WHERE h.run_id = g.run_id AND h.pack = g.pack AND h.slice = g.slice
                            AND h.metric = g.metric AND h.value IS NOT NULL)
     ORDER BY g.run_id, g.pack";

const LAST_BASELINE: &str = "
    SELECT run_id, baseline FROM guardrails
     WHERE slice = ?1 AND metric = ?2 AND (CAST(?3 AS TEXT) IS NULL OR pack = ?3)
       AND baseline IS NOT NULL
     ORDER BY run_id DESC, position
     LIMIT 1";

const PACKS_WITH_SLICE: &str = "SELECT DISTINCT pack FROM metrics WHERE slice = ?1 ORDER BY pack";

const METRIC_NAMES: &str = "
    SELECT metric FROM metrics WHERE slice = ?1
    UNION SELECT metric FROM guardrails WHERE slice = ?1
    ORDER BY 1";

const SLICE_NAMES: &str = "SELECT DISTINCT pack || '/' || slice FROM metrics ORDER BY 1";

const HAS_RUN: &str = "SELECT id FROM runs WHERE id = ?1";

/// Insert one run's rows (inside the caller's transaction); returns the run id.
pub(super) fn insert_run(c: &mut impl Conn, run: &RunRecord) -> Result<i64, HistoryError> {
    let run_id: i64 = c.query_one(
        INSERT_RUN,
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
    )?;
    for (name, digest, path) in &run.packs {
        c.execute(INSERT_PACK, &[&run_id, name, digest, path])?;
    }
    for g in &run.guardrails {
        c.execute(
            INSERT_GUARDRAIL,
            &[
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
            ],
        )?;
    }
    for m in &run.metrics {
        c.execute(
            INSERT_METRIC,
            &[
                &run_id, &m.pack, &m.slice, &m.metric, &m.unit, &m.median, &m.ci_low, &m.ci_high, &m.n,
                &m.runs,
            ],
        )?;
    }
    Ok(run_id)
}

/// Record what became of run `run_id`'s outputs.
pub(super) fn set_outputs(c: &mut impl Conn, run_id: i64, outputs: &str) -> Result<(), HistoryError> {
    c.execute(SET_OUTPUTS, &[&outputs, &run_id])
}

/// [`super::History::runs`].
pub(super) fn runs(c: &mut impl Conn, pack: Option<&str>, limit: usize) -> Result<Vec<RunRow>, HistoryError> {
    c.query(RUNS, &[&pack, &(limit as i64)])
}

/// [`super::History::series`]: the metric's medians, else the guardrail's values.
pub(super) fn series(
    c: &mut impl Conn,
    pack: Option<&str>,
    slice: &str,
    metric: &str,
) -> Result<(SeriesSource, Vec<SeriesPoint>), HistoryError> {
    let params: [&dyn Param; 3] = [&slice, &metric, &pack];
    let metrics = c.query(METRIC_SERIES, &params)?;
    if !metrics.is_empty() {
        return Ok((SeriesSource::Metric, metrics));
    }
    Ok((SeriesSource::Guardrail, c.query(GUARDRAIL_SERIES, &params)?))
}

/// [`super::History::last_baseline`].
pub(super) fn last_baseline(
    c: &mut impl Conn,
    pack: Option<&str>,
    slice: &str,
    metric: &str,
) -> Result<Option<(i64, f64)>, HistoryError> {
    Ok(c.query(LAST_BASELINE, &[&slice, &metric, &pack])?
        .into_iter()
        .next())
}

/// [`super::History::packs_with_slice`].
pub(super) fn packs_with_slice(c: &mut impl Conn, slice: &str) -> Result<Vec<String>, HistoryError> {
    c.query(PACKS_WITH_SLICE, &[&slice])
}

/// [`super::History::metric_names`].
pub(super) fn metric_names(c: &mut impl Conn, slice: &str) -> Result<Vec<String>, HistoryError> {
    c.query(METRIC_NAMES, &[&slice])
}

/// [`super::History::slice_names`].
pub(super) fn slice_names(c: &mut impl Conn) -> Result<Vec<String>, HistoryError> {
    c.query(SLICE_NAMES, &[])
}

/// [`super::History::has_run`].
pub(super) fn has_run(c: &mut impl Conn, id: i64) -> Result<bool, HistoryError> {
    Ok(!c.query::<i64>(HAS_RUN, &[&id])?.is_empty())
}
