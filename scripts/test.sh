#!/usr/bin/env bash
# `make test`: installs what the tests need (requirements-dev.txt, Java, Chromium, the AWS SDKs for
# JavaScript), checks the code
# (ruff, mypy, the docs site builds, no model change without its migration), then runs the whole
# suite on SQLite, the tasks tests under Django 6, the SQS tests with a query-protocol boto3, and the
# suite on PostgreSQL. Every phase runs, whatever failed before it; one summary at the end says which
# passed, failed or were skipped, and the exit status is 1 if any failed. Tests that need Java
# (Spark), Chromium (browser) or PostgreSQL skip with a reason where those can't be installed; on CI
# (CI=true) a missing one is a failure instead.
#
# A new phase is one line below: `phase "its name" command args...` (a command that exits with
# $PHASE_SKIP, 75, is "skipped": see scripts/phases.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/phases.sh
PY=.venv/bin/python
# The suite runs in FORQ_TEST_WORKERS processes at once (pytest-xdist; 0: in one, as plain pytest):
# its time goes mostly to waiting on the servers and workers its tests start, not to the CPU, so
# more processes than cores pay (on 2 cores, the SQLite suite: 6m34s with 2, 5m29s with 3, back to
# back). Each has a database of its own (pytest-django names it after the worker: test_…_gw0);
# tests/conftest.py says which tests go to which.
PARALLEL=(-n "${FORQ_TEST_WORKERS:-3}")

system_deps() { scripts/ensure-system-deps.sh || return "$PHASE_SKIP"; }
migrations() {
  FORQ_DB_PATH=:memory: DJANGO_SETTINGS_MODULE=tests.settings $PY manage.py makemigrations --check --dry-run
}
# The docs site builds strictly (a broken link or reference is an error).
docs() { NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir site; }
# The Django Tasks backend serves Django 6's django.tasks too (Python 3.12, a venv of its own): its
# tests there, and a smoke of the queue, schedules, defer, Python API and admin tests (about a minute).
django6() {
  # shellcheck disable=SC2046
  scripts/test-django6.sh $(ls tests/test_tasks*.py | grep -v _browser) tests/test_schedules.py tests/test_defer.py \
    tests/test_python_api.py tests/test_admin.py -m "not browser"
}
# SQS's query protocol, as SDKs from before SQS's JSON protocol speak it: tests/test_sqs.py again with
# boto3 1.28.80 (botocore 1.31.80, the last on the query protocol) in a venv of its own, on SQLite.
sqs_query() { env -u DATABASE_URL scripts/sqs-query-venv.sh tests/test_sqs.py "${PARALLEL[@]}" "$@"; }
# All but the Spark tests, whose server keeps an SQLite file of its own, and the tests marked
# sqlite_only, which start their own processes on SQLite whatever DATABASE_URL says (the same run
# again: the tutorial on a fresh startproject, make run's banner, the test-run hygiene).
postgres() {
  local url rc=0
  url=$(scripts/ensure-postgres.sh) || rc=$?
  [ "$rc" -eq 3 ] && return "$PHASE_SKIP"  # unavailable here (it said why); under CI=true it exits 1
  [ "$rc" -eq 0 ] || return "$rc"
  DATABASE_URL=$url $PY -m pytest -p no:cacheprovider "${PARALLEL[@]}" -m "not spark and not sqlite_only" "$@"
}

phase "install requirements-dev.txt" scripts/bootstrap.sh requirements-dev.txt
phase "system packages (Java, Chromium)" system_deps
phase "JavaScript SDKs (npm ci in tests/js)" scripts/ensure-js-deps.sh
phase "ruff" .venv/bin/ruff check .
phase "mypy" .venv/bin/mypy forqapp
phase "docs (mkdocs build --strict)" docs
phase "migrations match the models" migrations
phase "tests on SQLite" $PY -m pytest -p no:cacheprovider "${PARALLEL[@]}" "$@"
phase "tests under Django 6" django6
phase "SQS on the query protocol (boto3 1.28.80)" sqs_query
phase "tests on PostgreSQL" postgres "$@"
# Several hosts on one machine (network namespaces, a PostgreSQL of its own), faults 1, 2 and 6 of the
# rehearsal (about three minutes); skipped by pytest, with the reason, without root or `ip netns`.
phase "network rehearsal (tests/test_rehearsal.py)" env FORQ_REHEARSAL=1 $PY -m pytest -p no:cacheprovider \
  -m rehearsal tests/test_rehearsal.py
phases_summary
