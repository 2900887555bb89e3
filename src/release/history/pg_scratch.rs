//! Test support (the library's unit tests and the CLI tests, which include this file by
//! path): a fresh PostgreSQL database per test on the server `SPARSEGATE_TEST_POSTGRES`
//! names (`.ci/postgres.sh` starts one and sets it), dropped when the test ends, so tests
//! running in parallel never see each other's runs. Without the variable a test prints a
//! `SKIPPED:` line and does nothing: a skip shows in the test output.

use postgres::{Client, NoTls};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The variable naming the test server (a `postgres://` URL with rights to create databases).
pub const TEST_POSTGRES_ENV: &str = "SPARSEGATE_TEST_POSTGRES";

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A database of its own for one test; dropped (with `DROP DATABASE … WITH (FORCE)`) at the end.
pub struct ScratchDb {
    server: String,
    name: String,
    /// Its URL (the server's, with this database), password included.
    pub url: String,
}

impl ScratchDb {
    /// A fresh database for `test`, or `None` (after printing why) when no server is set.
    /// A server that is set but cannot be reached fails the test.
    pub fn create(test: &str) -> Option<ScratchDb> {
        let Ok(server) = std::env::var(TEST_POSTGRES_ENV) else {
            // Straight to the process's stderr, past the test harness's capture of `println!`:
            // a skip shows in `cargo test`'s output even though the test passes.
            let _ = writeln!(
                std::io::stderr().lock(),
                "SKIPPED: {test}: {TEST_POSTGRES_ENV} is not set, so there is no PostgreSQL server to test \
                 against (.ci/postgres.sh starts one and sets it)"
            );
            return None;
        };
        let tag: String = test
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(30)
            .collect();
        let name = format!(
            "sg_{tag}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        admin(&server)
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .unwrap_or_else(|e| panic!("cannot create test database {name}: {e:?}"));
        let url = with_database(&server, &name);
        Some(ScratchDb { server, name, url })
    }

    /// A client on this database, for a test's own checks.
    pub fn client(&self) -> Client {
        Client::connect(&self.url, NoTls).expect("connect to the test database")
    }
}

impl Drop for ScratchDb {
    fn drop(&mut self) {
        let _ = admin(&self.server)
            .batch_execute(&format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name));
    }
}

fn admin(server: &str) -> Client {
    Client::connect(server, NoTls)
        .unwrap_or_else(|e| panic!("{TEST_POSTGRES_ENV} is set but its server cannot be reached: {e:?}"))
}

/// `url` with its database (the path after the authority) replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let authority = before_query.split_once('/').map_or(before_query, |(a, _)| a);
    let mut out = format!("{scheme}://{authority}/{name}");
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}
