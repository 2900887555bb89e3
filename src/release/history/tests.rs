//! The history's behaviour on both backends: every test here runs against SQLite, and its
//! `…_postgres` twin against the server `SPARSEGATE_TEST_POSTGRES` names (issue 22), each in a
//! database of its own; without a server the twin prints `SKIPPED:`.

use super::pg_scratch::ScratchDb;
use super::*;
use crate::domain::verdict::Verdict;
use crate::execute::{MetricSamples, PackRecord, SliceEvidence};
use crate::ingress::Environment;
use rusqlite::Connection;

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
    crate::release::decide(
        &[],
        &crate::validate::Assessment {
            outcomes: vec![],
            diagnoses: vec![],
            contradictions: vec![],
            quality: vec![],
            under_burst: vec![],
        },
        vec![],
    )
}

/// A fresh history of either backend, with raw access for the tests' own checks.
enum Fixture {
    Sqlite(tempfile::TempDir),
    Postgres(ScratchDb),
}

impl Fixture {
    fn sqlite() -> Fixture {
        Fixture::Sqlite(tempfile::tempdir().unwrap())
    }

    fn postgres(test: &str) -> Option<Fixture> {
        ScratchDb::create(test).map(Fixture::Postgres)
    }

    fn location(&self) -> HistoryLocation {
        match self {
            Fixture::Sqlite(dir) => HistoryLocation::Sqlite(dir.path().join("h/history.db")),
            Fixture::Postgres(db) => HistoryLocation::new(db.url.clone()),
        }
    }

    fn open(&self) -> History {
        History::open(&self.location()).unwrap()
    }

    /// The one integer `query` returns (the same SQL in both dialects).
    fn scalar(&self, query: &str) -> i64 {
        match self {
            Fixture::Sqlite(_) => {
                let location = self.location();
                Connection::open(location.sqlite_path().unwrap())
                    .unwrap()
                    .query_row(query, [], |r| r.get(0))
                    .unwrap()
            }
            Fixture::Postgres(db) => db.client().query_one(query, &[]).unwrap().get(0),
        }
    }

    /// Pretend a newer sparsegate wrote the (already created) database.
    fn set_schema_version(&self, version: i64) {
        match self {
            Fixture::Sqlite(_) => {
                let location = self.location();
                Connection::open(location.sqlite_path().unwrap())
                    .unwrap()
                    .pragma_update(None, "user_version", version)
                    .unwrap();
            }
            Fixture::Postgres(db) => {
                db.client()
                    .execute("UPDATE schema_version SET version = $1", &[&version])
                    .unwrap();
            }
        }
    }

    fn known_version(&self) -> i64 {
        match self {
            Fixture::Sqlite(_) => MIGRATIONS.len() as i64,
            Fixture::Postgres(_) => POSTGRES_MIGRATIONS.len() as i64,
        }
    }
}

/// Each test body once per backend: `fn sqlite_name / postgres_name (fixture) { … }`.
macro_rules! on_both_backends {
    ($($(#[$doc:meta])* fn $sqlite:ident / $postgres:ident ($fixture:ident) $body:block)*) => {$(
        $(#[$doc])*
        #[test]
        fn $sqlite() {
            let $fixture = Fixture::sqlite();
            $body
        }
        $(#[$doc])*
        #[test]
        fn $postgres() {
            let Some($fixture) = Fixture::postgres(stringify!($postgres)) else { return };
            $body
        }
    )*};
}

on_both_backends! {
    fn a_recorded_run_comes_back_as_a_series_point
        / a_recorded_run_comes_back_as_a_series_point_postgres (fx) {
        let mut h = fx.open();
        assert_eq!(h.schema_version().unwrap(), fx.known_version());
        let a = h
            .record("gate", "2026-01-01T00:00:00Z", &evidence(1.0), &decision())
            .unwrap();
        let b = h
            .record("gate", "2026-01-02T00:00:00Z", &evidence(2.0), &decision())
            .unwrap();
        assert!(b > a);
        assert!(h.has_run(a).unwrap() && !h.has_run(b + 1).unwrap());
        let (source, series) = h.series(Some("p"), "s1", "latency").unwrap();
        assert_eq!(source, SeriesSource::Metric);
        assert_eq!(series.iter().map(|p| p.value).collect::<Vec<_>>(), [1.0, 2.0]);
        assert_eq!(series[1].recorded_at, "2026-01-02T00:00:00Z");
        let (_, counter) = h.series(None, "s1", "fallback_rate").unwrap();
        assert_eq!(counter.len(), 2);
        let runs = h.runs(Some("p"), 10).unwrap();
        assert_eq!(runs.iter().map(|r| r.id).collect::<Vec<_>>(), [b, a]);
        assert_eq!(runs[0].packs, ["p@sha256:00"]);
        assert_eq!(runs[0].exit_code, 0);
        assert!(h.runs(Some("other"), 10).unwrap().is_empty());
        assert_eq!(h.runs(None, 1).unwrap().len(), 1);
        assert_eq!(h.packs_with_slice("s1").unwrap(), ["p"]);
        assert_eq!(h.metric_names("s1").unwrap(), ["fallback_rate", "latency"]);
        assert_eq!(h.slice_names().unwrap(), ["p/s1"]);
    }

    /// A guardrail-only value (quality drift recorded by the gate) is a series too.
    fn guardrail_values_form_a_series_when_no_metric_has_the_name
        / guardrail_values_form_a_series_when_no_metric_has_the_name_postgres (fx) {
        use crate::domain::metric::Metric;
        use crate::domain::stage::Stage;
        use crate::ingress::{Rule, Severity};
        let mut h = fx.open();
        assert_eq!(h.last_baseline(Some("p"), "s1", "quality_delta").unwrap(), None);
        let mut last = 0;
        for value in [-0.001, -0.002, -0.03] {
            let mut d = decision();
            d.guardrails.push(crate::validate::GuardrailOutcome {
                pack: "p".into(),
                slice: "s1".into(),
                guardrail: None,
                metric: Metric::QualityDelta,
                rule: Rule::AtLeast { bound: -0.01 },
                verdict: Verdict::Pass,
                finding: Verdict::Pass,
                severity: Severity::Block,
                value: Some(value),
                baseline: Some(value * 10.0),
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
                undecided_by: None,
            });
            last = h.record("gate", "t", &evidence(1.0), &d).unwrap();
        }
        assert_eq!(
            h.last_baseline(None, "s1", "quality_delta").unwrap(),
            Some((last, -0.3))
        );
        let (source, series) = h.series(Some("p"), "s1", "quality_delta").unwrap();
        assert_eq!(source, SeriesSource::Guardrail);
        assert_eq!(
            series.iter().map(|p| p.value).collect::<Vec<_>>(),
            [-0.001, -0.002, -0.03]
        );
    }

    /// A run whose write fails part-way (here: the same slice twice violates the metrics
    /// key after the run row was inserted) leaves nothing behind: the transaction is atomic.
    fn a_failed_write_leaves_no_partial_run
        / a_failed_write_leaves_no_partial_run_postgres (fx) {
        let mut h = fx.open();
        h.record("gate", "t", &evidence(1.0), &decision()).unwrap();
        let mut broken = evidence(1.0);
        broken.slices.push(broken.slices[0].clone());
        assert!(h.record("gate", "t", &broken, &decision()).is_err());
        assert_eq!(fx.scalar("SELECT count(*) FROM runs"), 1);
        assert_eq!(
            fx.scalar("SELECT count(*) FROM metrics WHERE run_id NOT IN (SELECT id FROM runs)"),
            0
        );
        // The connection is still usable after the failed transaction.
        h.record("gate", "t", &evidence(1.0), &decision()).unwrap();
        assert_eq!(fx.scalar("SELECT count(*) FROM runs"), 2);
    }

    /// Shards of one CI run recording at once, each opening the (fresh) database at the same
    /// moment: the migrations run once, every run lands under its own id, nothing is orphaned.
    fn concurrent_writers_all_land_and_the_database_stays_intact
        / concurrent_writers_all_land_and_the_database_stays_intact_postgres (fx) {
        let location = fx.location();
        let start = std::sync::Barrier::new(4);
        std::thread::scope(|s| {
            for t in 0..4 {
                let (location, start) = (&location, &start);
                s.spawn(move || {
                    start.wait();
                    let mut h = History::open(location).unwrap();
                    for i in 0..10 {
                        h.record("gate", "t", &evidence(f64::from(t * 10 + i)), &decision())
                            .unwrap();
                    }
                });
            }
        });
        assert_eq!(fx.scalar("SELECT count(*) FROM runs"), 40);
        assert_eq!(fx.scalar("SELECT count(DISTINCT id) FROM runs"), 40);
        assert_eq!(fx.scalar("SELECT count(*) FROM metrics"), 80);
        assert_eq!(
            fx.scalar("SELECT count(*) FROM metrics WHERE run_id NOT IN (SELECT id FROM runs)"),
            0
        );
        assert_eq!(fx.open().schema_version().unwrap(), fx.known_version());
        if let Some(path) = location.sqlite_path() {
            let check: String = Connection::open(path)
                .unwrap()
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .unwrap();
            assert_eq!(check, "ok");
        }
    }

    fn a_database_from_a_newer_sparsegate_is_refused
        / a_database_from_a_newer_sparsegate_is_refused_postgres (fx) {
        drop(fx.open());
        fx.set_schema_version(99);
        let err = History::open(&fx.location()).unwrap_err();
        assert!(
            matches!(err, HistoryError::NewerSchema { found: 99, .. }),
            "{err}"
        );
    }

    /// A run begun but never finished (the gate was killed before its outputs were in
    /// place) leaves no record; one finished records what became of its outputs.
    fn a_pending_run_is_recorded_only_when_finished
        / a_pending_run_is_recorded_only_when_finished_postgres (fx) {
        let mut h = fx.open();
        let pending = h.begin_record("gate", "t", &evidence(1.0), &decision()).unwrap();
        let (_, series) = pending.series(Some("p"), "s1", "latency").unwrap();
        assert_eq!(series.len(), 1, "the pending run is in its own series");
        drop(pending);
        assert_eq!(fx.scalar("SELECT count(*) FROM runs"), 0);
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

/// Issue 23: the database is a file sparsegate writes; a link is not followed.
#[test]
fn a_symlinked_database_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("victim.db");
    std::os::unix::fs::symlink(&target, dir.path().join("history.db")).unwrap();
    let err = History::open(&HistoryLocation::Sqlite(dir.path().join("history.db"))).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(!target.exists());
}

/// "Same logical schema": PostgreSQL's migrations end with the tables and columns SQLite's do.
#[test]
fn postgres_migrations_build_the_same_tables_and_columns_as_sqlite() {
    assert_eq!(POSTGRES_MIGRATIONS.len(), MIGRATIONS.len());
    let Some(fx) = Fixture::postgres("postgres_migrations_build_the_same_tables_and_columns_as_sqlite")
    else {
        return;
    };
    drop(fx.open());
    let sqlite = Fixture::sqlite();
    drop(sqlite.open());
    let conn = Connection::open(sqlite.location().sqlite_path().unwrap()).unwrap();
    let mut want: Vec<(String, String)> = conn
        .prepare(
            "SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p
              WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%'",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    want.push(("schema_version".into(), "version".into()));
    want.sort();
    let Fixture::Postgres(db) = &fx else {
        unreachable!()
    };
    let mut got: Vec<(String, String)> = db
        .client()
        .query(
            "SELECT table_name::text, column_name::text FROM information_schema.columns
              WHERE table_schema = current_schema()",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    got.sort();
    assert_eq!(got, want);
}

/// Issue 22: a server that is not there is an error naming the location, never with the
/// URL's password, and with a hint about the server (no server needed: port 1 refuses).
#[test]
fn an_unreachable_postgres_server_is_an_error_without_the_password() {
    let location = HistoryLocation::new("postgres://ada:hunter2@127.0.0.1:1/history?connect_timeout=5");
    let err = History::open(&location).unwrap_err();
    let text = format!("{err} {err:?} {}", miette::Diagnostic::help(&err).unwrap());
    assert!(matches!(err, HistoryError::Connect { .. }), "{text}");
    assert!(text.contains("postgres://ada:***@127.0.0.1:1/history"), "{text}");
    assert!(text.contains("server runs"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

/// A URL the client cannot parse is refused before any connection, password redacted.
#[test]
fn a_malformed_postgres_url_is_refused_without_the_password() {
    let location = HistoryLocation::new("postgres://ada:hunter2@db:notaport/history");
    let err = History::open(&location).unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(matches!(err, HistoryError::BadUrl { .. }), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

/// A wrong password is refused by the server: an error saying so, naming neither password.
#[test]
fn a_wrong_postgres_password_is_refused_without_printing_it_postgres() {
    let Some(db) = ScratchDb::create("a_wrong_postgres_password_is_refused_without_printing_it_postgres")
    else {
        return;
    };
    let HistoryLocation::Postgres(good) = HistoryLocation::new(db.url.clone()) else {
        unreachable!()
    };
    let password = good
        .passwords()
        .first()
        .expect("the test URL carries a password")
        .to_string();
    let wrong = db.url.replace(&password, "not-the-password");
    let err = History::open(&HistoryLocation::new(wrong)).unwrap_err();
    let text = format!("{err} {err:?} {}", miette::Diagnostic::help(&err).unwrap());
    assert!(matches!(err, HistoryError::Connect { .. }), "{text}");
    assert!(text.contains("password"), "{text}");
    assert!(
        !text.contains(&password) && !text.contains("not-the-password"),
        "{text}"
    );
}
