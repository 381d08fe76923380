#!/usr/bin/env bash
# Make sure the PostgreSQL server of the test suite's PostgreSQL run is reachable, with its role and
# database, and print that DATABASE_URL (the only line on stdout; everything else goes to stderr):
#
#   scripts/ensure-postgres.sh && DATABASE_URL=$FORQ_TEST_DATABASE_URL .venv/bin/pytest
#
# The URL is FORQ_TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/forq_test, as
# scripts/test.sh uses it).
# 1. A server already listening at its host and port is used.
# 2. Else an installed but stopped Debian cluster is started (pg_ctlcluster).
# 3. Else, as root (or with password-less sudo), Debian's `postgresql` is installed with apt-get and
#    its cluster started; as that cluster is new and local, TCP from localhost is trusted.
# Then the URL's role (allowed to create databases: pytest-django makes test_<name>) and database are
# created if missing, and a connection is tried.
#
# Exit status: 0 ready; 3 PostgreSQL is unavailable here, so the run may be skipped (the reason is
# the last line on stderr); 1 under CI=true for the same cases, since CI must run the PostgreSQL suite.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3 || true)"
URL="${FORQ_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/forq_test}"

log() { echo "ensure-postgres: $*" >&2; }
unavailable() {
    log "PostgreSQL unavailable: $*"
    if [ "${CI:-}" = "true" ]; then
        log "CI=true: the PostgreSQL run is required, failing"
        exit 1
    fi
    exit 3
}

[ -n "$PY" ] || unavailable "no Python to parse $URL"
PARSE='import sys
from urllib.parse import unquote, urlsplit
u = urlsplit(sys.argv[1])
print(u.hostname or "127.0.0.1", u.port or 5432, unquote(u.username or "postgres"),
      unquote(u.password or "") or "-", unquote(u.path.lstrip("/")) or "forq_test")'
read -r HOST PORT USER_NAME PASSWORD DB_NAME < <("$PY" -c "$PARSE" "$URL") \
    || unavailable "cannot parse FORQ_TEST_DATABASE_URL=$URL"
[ "$PASSWORD" = "-" ] && PASSWORD=""

# Does anything accept TCP connections at HOST:PORT?
reachable() {
    "$PY" -c 'import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()' \
        "$HOST" "$PORT" >/dev/null 2>&1
}

wait_reachable() {
    for _ in $(seq 1 60); do
        reachable && return 0
        sleep 0.5
    done
    return 1
}

can_be_root() { [ "$(id -u)" -eq 0 ] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

start_clusters() {
    command -v pg_lsclusters >/dev/null 2>&1 || return 1
    local ok=1 version name port status
    while read -r version name port status _; do
        [ -n "$version" ] || continue
        if [ "$status" = "online" ]; then
            ok=0
        else
            log "starting cluster $version/$name (port $port)"
            as_root pg_ctlcluster "$version" "$name" start >&2 && ok=0
        fi
    done < <(pg_lsclusters --no-header 2>/dev/null)
    return $ok
}

# A cluster this script just installed: trust TCP from localhost, as the test URL has no password by
# default. Existing clusters are never touched.
trust_local_tcp() {
    local hba
    for hba in /etc/postgresql/*/*/pg_hba.conf; do
        [ -f "$hba" ] || continue
        grep -q "forq-test" "$hba" && continue
        as_root sed -i '1i host all all 127.0.0.1/32 trust # forq-test\nhost all all ::1/128 trust # forq-test' "$hba"
    done
}

if ! reachable; then
    log "no server at $HOST:$PORT"
    if command -v pg_lsclusters >/dev/null 2>&1 && [ -n "$(pg_lsclusters --no-header 2>/dev/null)" ]; then
        can_be_root || unavailable "a cluster is installed but stopped, and starting it needs root"
        start_clusters || unavailable "pg_ctlcluster could not start the installed cluster"
    else
        can_be_root || unavailable "not installed, and installing Debian's postgresql needs root (or password-less sudo)"
        command -v apt-get >/dev/null 2>&1 || unavailable "not installed, and there is no apt-get to install it"
        log "installing Debian's postgresql with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        as_root apt-get update -qq >&2 || log "apt-get update failed; trying the install anyway"
        as_root apt-get install -y -qq postgresql >&2 || unavailable "apt-get install postgresql failed"
        trust_local_tcp
        start_clusters || unavailable "the new cluster did not start (pg_ctlcluster)"
        while read -r version name _; do
            as_root pg_ctlcluster "$version" "$name" reload >&2 || true
        done < <(pg_lsclusters --no-header 2>/dev/null)
    fi
    wait_reachable || unavailable "started, but nothing accepts connections at $HOST:$PORT"
fi

# Role and database, as a superuser: the postgres OS user over the local socket if we can become it,
# else user postgres over TCP (trust, or PGPASSWORD from the environment).
superuser_psql() {
    if [ "$(id -u)" -eq 0 ] && command -v runuser >/dev/null 2>&1 && id postgres >/dev/null 2>&1 \
        && [ -d /var/run/postgresql ]; then
        (cd / && runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -p "$PORT" "$@")
    else
        psql -X -q -v ON_ERROR_STOP=1 -h "$HOST" -p "$PORT" -U postgres "$@"
    fi
}

if command -v psql >/dev/null 2>&1; then
    superuser_psql -d postgres -v role="$USER_NAME" -v pw="$PASSWORD" -v db="$DB_NAME" >&2 <<'SQL' \
        || log "could not create the role or database as superuser; trying the URL as it is"
SELECT format('CREATE ROLE %I LOGIN CREATEDB', :'role')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('ALTER ROLE %I LOGIN CREATEDB PASSWORD %L', :'role', NULLIF(:'pw', ''))
WHERE :'role' <> 'postgres' AND :'pw' <> '' \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'role')
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
SQL
fi

CHECK='import sys
import psycopg
with psycopg.connect(sys.argv[1], connect_timeout=5) as conn:
    conn.execute("SELECT 1")'
if ! err=$("$PY" -c "$CHECK" "$URL" 2>&1); then
    unavailable "cannot connect to $URL: $(echo "$err" | tail -1)"
fi
log "ready: $URL"
echo "$URL"
