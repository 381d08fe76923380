#!/usr/bin/env bash
# `make rehearsal`: the network rehearsal (bench/rehearsal/run.py). Several hosts on this machine in
# network namespaces — a PostgreSQL host with a cluster of its own, API hosts (forq_serve), worker
# hosts (forq_worker), a client host — faults while load runs, then (with --scaling) throughput with
# 1, 2 and 4 hosts. Prints the fault table and the scaling table; tears everything down at the end.
# Needs root, `ip netns` and PostgreSQL's binaries (/usr/lib/postgresql/15/bin); exits 75 otherwise.
#
#   scripts/rehearsal.sh                       # every fault (about 7 minutes)
#   scripts/rehearsal.sh --faults 1,2 --seconds 20
#   scripts/rehearsal.sh --faults '' --scaling  # the scaling table only
#   scripts/rehearsal.sh --faults 0 --pgbouncer # the load through PgBouncer in transaction mode
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m bench.rehearsal.run "$@"
