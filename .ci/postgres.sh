#!/usr/bin/env bash
# A throwaway PostgreSQL server for the run-history tests (issue 22): the history tests run
# against SQLite always and against this server when SPARSEGATE_TEST_POSTGRES names it
# (without it they print SKIPPED).
#
# Sourced (`. .ci/postgres.sh`, as .ci/run does): starts the server, exports
# SPARSEGATE_TEST_POSTGRES, and stops the server and deletes its data directory when the
# sourcing shell exits, on failure too. Run with a command
# (`.ci/postgres.sh cargo test --release --test cli history::`): the command runs with the
# server up, and the server is gone afterwards.
#
# The server is Debian's `postgresql` package (installed when initdb is missing and this
# script may: root or passwordless sudo, apt-get), run as its own unprivileged user
# (`postgres`; initdb refuses root) in a temporary data directory, listening only on a unix
# socket in that directory (no port to collide with), with password authentication so the
# tests can check that a wrong password is refused and that no message prints one.

sparsegate_pg_bin() {
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v initdb)")"
    return 0
  fi
  # Debian keeps the server binaries off PATH, one directory per major version.
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$dir" ] && [ -x "$dir/initdb" ] && echo "$dir"
}

sparsegate_pg_install() {
  local sudo
  if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo=none; fi
  if [ "$sudo" = none ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "NOTICE: no PostgreSQL and no way to install it (not root, no sudo, no apt-get); the PostgreSQL history tests will be SKIPPED" >&2
    return 1
  fi
  echo "installing postgresql for the run-history tests" >&2
  $sudo apt-get install -y postgresql >/dev/null 2>&1 \
    || { $sudo apt-get update >/dev/null 2>&1 && $sudo apt-get install -y postgresql >/dev/null 2>&1; } \
    || { echo "NOTICE: postgresql could not be installed; the PostgreSQL history tests will be SKIPPED" >&2; return 1; }
}

# Stop the server and delete its data directory (idempotent; the EXIT trap calls it).
sparsegate_pg_stop() {
  if [ -n "${SPARSEGATE_PG_DIR:-}" ] && [ -d "$SPARSEGATE_PG_DIR" ]; then
    "${SPARSEGATE_PG_RUN_AS[@]}" "$SPARSEGATE_PG_BIN/pg_ctl" -D "$SPARSEGATE_PG_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$SPARSEGATE_PG_DIR"
  fi
  SPARSEGATE_PG_DIR=""
}

# Start the server; on success SPARSEGATE_TEST_POSTGRES holds its URL. Returns 1 (after a
# NOTICE) when there is no server to be had, 2 when one is installed but will not start.
sparsegate_pg_start() {
  SPARSEGATE_PG_BIN=$(sparsegate_pg_bin) || true
  if [ -z "$SPARSEGATE_PG_BIN" ]; then
    sparsegate_pg_install || return 1
    SPARSEGATE_PG_BIN=$(sparsegate_pg_bin) || true
    [ -n "$SPARSEGATE_PG_BIN" ] || { echo "NOTICE: postgresql installed but initdb not found; the PostgreSQL history tests will be SKIPPED" >&2; return 1; }
  fi
  SPARSEGATE_PG_RUN_AS=()
  if [ "$(id -u)" -eq 0 ]; then
    if ! id postgres >/dev/null 2>&1; then
      echo "NOTICE: running as root and there is no \`postgres\` user to run the server as; the PostgreSQL history tests will be SKIPPED" >&2
      return 1
    fi
    SPARSEGATE_PG_RUN_AS=(runuser -u postgres --)
  fi
  # Short path: a unix socket's path must stay under 108 bytes.
  SPARSEGATE_PG_DIR=$(mktemp -d /tmp/sparsegate-pg.XXXXXX)
  chmod 755 "$SPARSEGATE_PG_DIR"
  local dir=$SPARSEGATE_PG_DIR password
  password=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  printf '%s\n' "$password" >"$dir/pwfile"
  chmod 600 "$dir/pwfile"
  [ "$(id -u)" -ne 0 ] || chown -R postgres "$dir"
  if ! "${SPARSEGATE_PG_RUN_AS[@]}" "$SPARSEGATE_PG_BIN/initdb" -D "$dir/data" -U sparsegate --pwfile="$dir/pwfile" \
    --auth=scram-sha-256 -E UTF8 --no-sync >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    echo "error: initdb failed" >&2
    return 2
  fi
  # fsync off: the data is thrown away at the end, and the tests create a database each.
  if ! "${SPARSEGATE_PG_RUN_AS[@]}" "$SPARSEGATE_PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
    -o "-c listen_addresses='' -k $dir -c fsync=off -c max_connections=200" start >/dev/null; then
    cat "$dir/server.log" >&2
    echo "error: the PostgreSQL server did not start" >&2
    return 2
  fi
  PGPASSWORD=$password "$SPARSEGATE_PG_BIN/psql" -h "$dir" -U sparsegate -d postgres -qAt \
    -c 'CREATE DATABASE sparsegate' >/dev/null || { echo "error: cannot create the test database" >&2; return 2; }
  # The socket directory as the URL's host, percent-encoded (rust-postgres and libpq both read it).
  export SPARSEGATE_TEST_POSTGRES="postgres://sparsegate:${password}@${dir//\//%2F}/sparsegate"
  echo "PostgreSQL $("$SPARSEGATE_PG_BIN/postgres" --version | awk '{print $3}') for the history tests: socket in $dir" >&2
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
  # Sourced: the server lives as long as the sourcing shell.
  trap sparsegate_pg_stop EXIT
  trap 'exit 130' INT TERM
  sparsegate_pg_start || [ $? -eq 1 ]
else
  set -euo pipefail
  trap sparsegate_pg_stop EXIT
  trap 'exit 130' INT TERM
  sparsegate_pg_start || [ $? -eq 1 ]
  "$@"
fi
