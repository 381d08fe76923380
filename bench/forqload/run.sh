#!/usr/bin/env bash
# Forq-style load against forq_serve: N consumers and N producers saturating one queue with 100-byte
# messages (as the issue's harness; -size to change), over HTTP/1.1 and over h2c (HTTP/2 cleartext,
# one multiplexed connection). Prints throughput, errors, duplicate deliveries, latencies, and the
# server's memory: PSS of its whole process tree idle and the most seen under load.
#
#   bench/forqload/run.sh [--ref REV] [--pairs N] [--idle N] [--server-cpus LIST] [--client-cpus LIST]
#                         [--duration 8s] [-c 10] [-p 10] [-size 100]
#
# Then, over HTTP/1.1, the idle long polls' cost (issue 15): the producers alone (-c 0), without and
# with --idle N (default 200; 0 skips it) long polls held open on an empty queue, and the wake-up of
# a poll waiting on an empty queue by a produce (send to delivery, p50/p99), measured meanwhile.
#
# --ref REV: also serve the tree of git revision REV (e.g. the commit before an optimisation) with
# the same venv, alternating REV and this checkout --pairs times (default 1): the machine's own
# reference in the same run. Every server gets a fresh temporary SQLite file.
# Each round ends with the raw reference: the same load on the database alone, the same table
# (bench/forqload/raw_sqlite.py), and each HTTP/1.1 figure of the round divided by it (SQLite only).
# With DATABASE_URL=postgres://user@host:port/anything set, every server gets a fresh PostgreSQL
# database forq_load_bench on that server (dropped and made anew) instead of an SQLite file.
# --server-cpus / --client-cpus LIST: run the server / the load client under `taskset -c LIST` (e.g.
# --server-cpus 0 --client-cpus 1, then --server-cpus 0,1 --client-cpus 1: does the server use a
# second core when it has one?). Each load also prints the cores the server's tree kept busy
# (its CPU seconds while the load ran, over the load's wall time).
# Needs Go and golang.org/x/net: Debian's golang-go and golang-golang-x-net-dev (installed when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
ref="" pairs=1 idle=200 server_cpus="" client_cpus=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ref) ref=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --idle) idle=$2; shift 2 ;;
    --server-cpus) server_cpus=$2; shift 2 ;;
    --client-cpus) client_cpus=$2; shift 2 ;;
    *) break ;;
  esac
done
scripts/bootstrap.sh
if ! command -v go >/dev/null || [ ! -d /usr/share/gocode/src/golang.org/x/net/http2 ]; then
  echo "==> installing golang-go golang-golang-x-net-dev (Debian packages)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go golang-golang-x-net-dev >/dev/null
fi
work=$(mktemp -d)
server=""
trap '[ -n "$server" ] && kill -TERM "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
GOPATH=/usr/share/gocode GO111MODULE=off GOCACHE="$work/gocache" go build -o "$work/forqload" bench/forqload/main.go
if [ -n "$ref" ]; then
  mkdir "$work/ref" && git archive "$ref" | tar -x -C "$work/ref"
fi
export DJANGO_SETTINGS_MODULE=project.settings FORQ_UI_ENABLED=${FORQ_UI_ENABLED:-false} \
       FORQ_AUTH_SECRET=forq-load-secret-at-least-32-characters
py=$root/.venv/bin/python
pin_server=() pin_client=()
[ -n "$server_cpus" ] && pin_server=(taskset -c "$server_cpus")
[ -n "$client_cpus" ] && pin_client=(taskset -c "$client_cpus")
pg_admin=${DATABASE_URL:-}  # the database to connect to while making forq_load_bench

# serve DIR LABEL: one server from the tree DIR, both protocols, memory idle and under load.
serve() {
  local dir=$1 label=$2 port db
  shift 2
  port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  db=$(mktemp -p "$work" -u forq-XXXX.sqlite3)
  if [ -n "$pg_admin" ]; then
    $py - "$pg_admin" <<'PY'
import sys
import psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    conn.execute("DROP DATABASE IF EXISTS forq_load_bench WITH (FORCE)")
    conn.execute("CREATE DATABASE forq_load_bench")
PY
    export DATABASE_URL="${pg_admin%/*}/forq_load_bench"
  fi
  (cd "$dir" && FORQ_DB_PATH=$db $py manage.py migrate -v0)
  (cd "$dir" && exec env FORQ_DB_PATH=$db FORQ_API_ADDR="127.0.0.1:$port" FORQ_UI_ADDR="127.0.0.1:$((port + 1))" \
     "${pin_server[@]}" $py manage.py forq_serve > "$work/serve.log" 2>&1) &
  server=$!
  for _ in $(seq 1 150); do curl -fs -o /dev/null "http://127.0.0.1:$port/healthcheck" && break; sleep 0.2; done
  sleep 1
  echo "== $label ($dir)"
  echo "  memory idle: $($py bench/forqload/pss.py "$server")"
  for proto in "" "-http2"; do
    $py bench/forqload/pss.py "$server" --watch 4 > "$work/pss" &
    local cpu0 t0 cpu1 t1
    cpu0=$($py bench/forqload/pss.py "$server" --cpu-seconds) t0=$(date +%s.%N)
    "${pin_client[@]}" "$work/forqload" -api "http://127.0.0.1:$port" -auth "$FORQ_AUTH_SECRET" $proto "$@" \
      | tee "$work/load"
    if [ -z "$proto" ]; then  # (HTTP/1.1: what the raw reference is set against)
      echo "$label|$(sed -n 's/.*produced \([0-9]*\)\/s consumed \([0-9]*\)\/s.*/\1 \2/p' "$work/load")" >> "$work/rates"
    fi
    cpu1=$($py bench/forqload/pss.py "$server" --cpu-seconds) t1=$(date +%s.%N)
    wait $!
    echo "  memory under load (max of 4 s of samples): $(cat "$work/pss")"
    echo "  the server's CPU while the load ran: $(awk "BEGIN { printf \"%.2f\", ($cpu1 - $cpu0) / ($t1 - $t0) }") cores busy"
  done
  if [ "$idle" -gt 0 ]; then
    local alone with
    "${pin_client[@]}" "$work/forqload" -api "http://127.0.0.1:$port" -auth "$FORQ_AUTH_SECRET" -backlog 0 -wake "$@" -c 0 \
      | tee "$work/alone" | grep -E "10p|wake"
    "${pin_client[@]}" "$work/forqload" -api "http://127.0.0.1:$port" -auth "$FORQ_AUTH_SECRET" -backlog 0 -wake -idle "$idle" "$@" -c 0 \
      | tee "$work/with" | grep -E "10p|wake|idle"
    alone=$(sed -n 's/.*produced \([0-9]*\)\/s.*/\1/p' "$work/alone")
    with=$(sed -n 's/.*produced \([0-9]*\)\/s.*/\1/p' "$work/with")
    echo "  producers keep $(awk "BEGIN { printf \"%.0f\", 100 * $with / $alone }")% of their rate with $idle idle long polls open"
  fi
  kill -TERM "$server"; wait "$server" || true; server=""
}

# raw: the same load on the database alone (bench/forqload/raw_sqlite.py: threads, no HTTP, the same
# messages table, forqapp's pragmas), on the server's cores, and each HTTP/1.1 figure of the round
# divided by it. SQLite only.
raw() {
  [ -n "$pg_admin" ] && return
  local db
  db=$(mktemp -p "$work" -u raw-XXXX.sqlite3)
  FORQ_DB_PATH=$db $py manage.py migrate -v0
  echo "== raw sqlite3 on the same table (no HTTP, no server; bench/forqload/raw_sqlite.py)"
  FORQ_DB_PATH=$db "${pin_server[@]}" $py bench/forqload/raw_sqlite.py "$db" "$@" | tee "$work/raw"
  local raw_p raw_c
  read -r raw_p raw_c < <(sed -n 's/.*produced \([0-9]*\)\/s consumed \([0-9]*\)\/s.*/\1 \2/p' "$work/raw")
  while IFS='|' read -r label rates; do
    read -r p c <<< "$rates"
    echo "  $label over HTTP/1.1 ÷ raw sqlite3: produced ×$(awk "BEGIN { printf \"%.2f\", $p / $raw_p }")," \
         "consumed ×$(awk "BEGIN { printf \"%.2f\", $c / $raw_c }")"
  done < "$work/rates"
  rm -f "$work/rates" "$db" "$db-wal" "$db-shm"
}

for _ in $(seq 1 "$pairs"); do
  if [ -n "$ref" ]; then serve "$work/ref" "reference $ref" "$@"; fi
  serve "$root" "this checkout" "$@"
  raw "$@"
done
