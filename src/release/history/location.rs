//! Where a run history lives: an SQLite file (the default) or a PostgreSQL database a team
//! shares (issue 22). A URL may carry a password, so a location never prints one: its
//! `Display` and `Debug` show the URL with the password replaced by `***`.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// The URL schemes that select PostgreSQL; anything else is an SQLite path.
pub const POSTGRES_SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

/// What a redacted password reads as.
const REDACTED: &str = "***";

/// A run-history location, as `--history` or `SPARSEGATE_HISTORY` gave it.
#[derive(Clone, PartialEq, Eq)]
pub enum HistoryLocation {
    /// An embedded SQLite database file.
    Sqlite(PathBuf),
    /// A PostgreSQL server, by its `postgres://` / `postgresql://` URL.
    Postgres(PostgresUrl),
}

impl HistoryLocation {
    /// A PostgreSQL URL for a value with a PostgreSQL scheme, else an SQLite path. Whether
    /// the URL is well formed is checked when the history is opened (exit 2 there).
    pub fn new(value: impl Into<OsString>) -> HistoryLocation {
        let value = value.into();
        match value.to_str() {
            Some(url) if POSTGRES_SCHEMES.iter().any(|s| url.starts_with(s)) => {
                HistoryLocation::Postgres(PostgresUrl(url.to_owned()))
            }
            _ => HistoryLocation::Sqlite(value.into()),
        }
    }

    /// The database file, for an SQLite history.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            HistoryLocation::Sqlite(path) => Some(path),
            HistoryLocation::Postgres(_) => None,
        }
    }
}

impl fmt::Display for HistoryLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistoryLocation::Sqlite(path) => write!(f, "{}", path.display()),
            HistoryLocation::Postgres(url) => write!(f, "{url}"),
        }
    }
}

impl fmt::Debug for HistoryLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistoryLocation::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            HistoryLocation::Postgres(url) => f.debug_tuple("Postgres").field(url).finish(),
        }
    }
}

/// A PostgreSQL connection URL. The full text (password included) is reachable only
/// through [`PostgresUrl::secret`], for the connection itself; every other view is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl(String);

impl PostgresUrl {
    /// The URL as given, password included: only for connecting.
    pub(super) fn secret(&self) -> &str {
        &self.0
    }

    /// The passwords the URL carries (in its user info and in `password=` parameters), so
    /// that messages from the client or the server can be scrubbed of them too.
    pub(super) fn passwords(&self) -> Vec<&str> {
        let (authority, query) = split_url(&self.0);
        let from_userinfo = authority
            .rsplit_once('@')
            .and_then(|(userinfo, _)| userinfo.split_once(':'))
            .map(|(_, password)| password);
        let from_query = query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter_map(|kv| kv.strip_prefix("password="));
        from_userinfo
            .into_iter()
            .chain(from_query)
            .filter(|p| !p.is_empty())
            .collect()
    }

    /// `text` with every occurrence of the URL's passwords replaced by `***`.
    pub(super) fn scrub(&self, text: &str) -> String {
        self.passwords()
            .into_iter()
            .fold(text.to_owned(), |text, password| text.replace(password, REDACTED))
    }
}

impl fmt::Display for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", redact(&self.0))
    }
}

/// The URL's authority (`user:password@host:port`) and query (after `?`), if any.
fn split_url(url: &str) -> (&str, Option<&str>) {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let authority = before_query.split_once('/').map_or(before_query, |(a, _)| a);
    (authority, query)
}

/// `url` with the password of its user info and of any `password=` parameter replaced by
/// `***` (the user, host, port and database stay: they are what a reader needs to see).
pub fn redact(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (before_query, None),
    };
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:{REDACTED}@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let mut out = String::new();
    if let Some(scheme) = scheme {
        out.push_str(scheme);
        out.push_str("://");
    }
    out.push_str(&authority);
    if let Some(path) = path {
        out.push('/');
        out.push_str(path);
    }
    if let Some(query) = query {
        out.push('?');
        let params: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some(("password", _)) => format!("password={REDACTED}"),
                _ => kv.to_owned(),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_schemes_select_postgres_and_anything_else_is_a_path() {
        for url in ["postgres://u@h/db", "postgresql://u@h:5433/db"] {
            assert!(
                matches!(HistoryLocation::new(url), HistoryLocation::Postgres(_)),
                "{url}"
            );
        }
        for path in ["h/history.db", "postgres.db", "mysql://u@h/db", "./postgres://x"] {
            assert_eq!(HistoryLocation::new(path), HistoryLocation::Sqlite(path.into()));
        }
    }

    #[test]
    fn a_location_never_prints_its_password() {
        let cases = [
            (
                "postgres://ada:s3cr%40t@db.example:5432/history",
                "postgres://ada:***@db.example:5432/history",
            ),
            (
                "postgresql://ada:pw@%2Ftmp%2Fsock/history?sslmode=disable&password=pw2",
                "postgresql://ada:***@%2Ftmp%2Fsock/history?sslmode=disable&password=***",
            ),
            ("postgres://ada@h/db", "postgres://ada@h/db"),
            ("postgres://h", "postgres://h"),
        ];
        for (url, shown) in cases {
            let location = HistoryLocation::new(url);
            assert_eq!(location.to_string(), shown);
            assert_eq!(format!("{location:?}"), format!("Postgres({shown:?})"));
        }
        let HistoryLocation::Postgres(url) = HistoryLocation::new("postgres://a:hunter2@h/db?x=1") else {
            unreachable!()
        };
        assert_eq!(url.passwords(), ["hunter2"]);
        assert_eq!(url.scrub("auth failed for hunter2"), "auth failed for ***");
    }
}
