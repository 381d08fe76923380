#!/usr/bin/env bash
# Forq-style load against forq_serve: N consumers and N producers saturating one queue with 1 KiB
# messages, as Forq's own load harness does, over HTTP/1.1 and over h2c (HTTP/2 cleartext, one
# multiplexed connection). Prints throughput, errors, duplicate deliveries and latencies.
#
#   bench/forqload/run.sh [--duration 20s] [-c 10] [-p 10]       # serves forqapp on a temporary SQLite file
#
# Needs Go and golang.org/x/net: Debian's golang-go and golang-golang-x-net-dev (installed when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/bootstrap.sh
if ! command -v go >/dev/null || [ ! -d /usr/share/gocode/src/golang.org/x/net/http2 ]; then
  echo "==> installing golang-go golang-golang-x-net-dev (Debian packages)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go golang-golang-x-net-dev >/dev/null
fi
work=$(mktemp -d)
trap 'kill -TERM "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$work"' EXIT
GOPATH=/usr/share/gocode GO111MODULE=off GOCACHE="$work/gocache" go build -o "$work/forqload" bench/forqload/main.go
port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export DJANGO_SETTINGS_MODULE=project.settings FORQ_DB_PATH="$work/forq.sqlite3" FORQ_UI_ENABLED=false \
       FORQ_API_ADDR="127.0.0.1:$port" FORQ_AUTH_SECRET=forq-load-secret-at-least-32-characters
.venv/bin/python manage.py migrate -v0
.venv/bin/python manage.py forq_serve > "$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do curl -fs -o /dev/null "http://127.0.0.1:$port/healthcheck" && break; sleep 0.2; done
for proto in "" "-http2"; do
  "$work/forqload" -api "http://127.0.0.1:$port" -auth "$FORQ_AUTH_SECRET" $proto "$@"
done
