#!/usr/bin/env bash
# moto's own SQS tests (moto 5.0.20's tests/test_sqs/test_sqs.py, in moto's "server mode") against
# forqapp's SQS endpoint, and, in the same run, against moto's own server for the reference count.
#
# forqapp: `forq_serve` with the SQS listener, SQLite in a temporary directory, FORQ_SQS_ACCOUNT_ID
# set to moto's 123456789012 and FORQ_SQS_MAX_MESSAGE_BYTES to 262144 (below), behind
# bench/moto/proxy.py (moto's /moto-api/reset deletes every queue, STS GetCallerIdentity answered,
# each request re-signed for forqapp's root key; see its docstring).
#
#     bench/moto/run.sh                      # both runs; a summary line each at the end
#     bench/moto/run.sh -k fifo              # extra pytest arguments, for both runs
#     ONLY=forqapp bench/moto/run.sh -x      # forqapp only (or ONLY=moto)
#     PROTOCOL=query bench/moto/run.sh       # with boto3 1.28.80, which speaks SQS's query protocol
#
# It needs its own venv with moto[server]==5.0.20, boto3, pytest and freezegun (MOTO_VENV, default
# var/moto-venv, or var/moto-venv-query: built from PyPI when absent) and moto's sdist, which has the tests (MOTO_SRC,
# default var/moto-src: fetched with `pip download` when absent). Not part of `make test`: it takes
# minutes and its figure is a measurement, not a gate. JUnit files land in bench/results/moto/.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PY=${PY:-$ROOT/.venv/bin/python}
MOTO_VERSION=5.0.20
PROTOCOL=${PROTOCOL:-json}
case $PROTOCOL in
  json) CLIENTS="boto3"; MOTO_VENV=${MOTO_VENV:-$ROOT/var/moto-venv} ;;
  query) CLIENTS="boto3==1.28.80 botocore==1.31.80"; MOTO_VENV=${MOTO_VENV:-$ROOT/var/moto-venv-query} ;;
  *) echo "PROTOCOL is json or query" >&2; exit 2 ;;
esac
MOTO_SRC=${MOTO_SRC:-$ROOT/var/moto-src}
ONLY=${ONLY:-}
RESULTS=$ROOT/bench/results/moto
mkdir -p "$RESULTS" "$ROOT/var"

if [ ! -x "$MOTO_VENV/bin/pytest" ]; then
  python3 -m venv "$MOTO_VENV"
  "$MOTO_VENV/bin/pip" install --quiet "moto[sqs,server]==$MOTO_VERSION" $CLIENTS pytest freezegun
fi
if [ ! -d "$MOTO_SRC/tests/test_sqs" ]; then
  tmp=$(mktemp -d)
  "$MOTO_VENV/bin/pip" download --quiet --no-deps --no-binary :all: "moto==$MOTO_VERSION" -d "$tmp"
  mkdir -p "$MOTO_SRC" && tar xzf "$tmp"/moto-*.tar.gz -C "$MOTO_SRC" --strip-components=1
  rm -rf "$tmp"
fi

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "nothing listens on port $1 (see $RESULTS)" >&2; return 1; }

WORK=$(mktemp -d)
PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

run_tests() {  # $1 name, $2 endpoint, rest: pytest args
  local name=$1 endpoint=$2; shift 2
  (cd "$MOTO_SRC" && AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_DEFAULT_REGION=us-east-1 \
     TEST_SERVER_MODE=true TEST_SERVER_MODE_ENDPOINT="$endpoint" \
     "$MOTO_VENV/bin/python" -m pytest -p no:cacheprovider -q -o addopts= \
       tests/test_sqs/test_sqs.py --junitxml="$RESULTS/$name.xml" "$@" > "$RESULTS/$name.log" 2>&1) || true
  echo "$name ($PROTOCOL): $(tail -1 "$RESULTS/$name.log")"
}

if [ "$ONLY" != moto ]; then
  export FORQ_DB_PATH=$WORK/forq.sqlite3 FORQ_AUTH_SECRET=$("$PY" -c "import secrets; print(secrets.token_hex(24))") FORQ_SQS_ACCOUNT_ID=123456789012
  # moto 5.0.20 predates SQS's 1 MiB messages (August 2025): its tests expect 262,144 bytes, SQS's
  # limit of the time, which forqapp's setting gives (FORQ_SQS_MAX_MESSAGE_BYTES=1048576 for today's).
  export FORQ_SQS_MAX_MESSAGE_BYTES=${FORQ_SQS_MAX_MESSAGE_BYTES:-262144}
  export FORQ_SERVE_JOBS=false PROMETHEUS_MULTIPROC_DIR=$WORK/metrics
  mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
  "$PY" manage.py migrate --verbosity 0
  api=$(free_port); sqs=$(free_port); proxy=$(free_port)
  FORQ_API_ADDR=127.0.0.1:$api FORQ_SQS_ADDR=127.0.0.1:$sqs setsid "$PY" manage.py forq_serve --no-ui \
    > "$RESULTS/forqapp-server.log" 2>&1 &
  PIDS+=($!)
  wait_port "$sqs"
  setsid "$MOTO_VENV/bin/python" bench/moto/proxy.py "$proxy" "http://127.0.0.1:$sqs" > "$RESULTS/proxy.log" 2>&1 &
  PIDS+=($!)
  wait_port "$proxy"
  run_tests forqapp "http://127.0.0.1:$proxy" "$@"
fi
if [ "$ONLY" != forqapp ]; then
  moto=$(free_port)
  setsid "$MOTO_VENV/bin/moto_server" -p "$moto" > "$RESULTS/moto-server.log" 2>&1 &
  PIDS+=($!)
  wait_port "$moto"
  run_tests moto "http://127.0.0.1:$moto" "$@"
fi
