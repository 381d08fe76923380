#!/usr/bin/env bash
# `make test`: installs what the tests need (requirements-dev.txt, Java, Chromium), checks the code
# (ruff, mypy, no model change without its migration), then runs the whole suite on SQLite and on
# PostgreSQL. Tests that need Java (Spark), Chromium (browser) or PostgreSQL skip with a reason where
# those can't be installed; on CI (CI=true) a missing one is an error instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh requirements-dev.txt
scripts/ensure-system-deps.sh || { [ "${CI:-}" != "true" ] || exit 1; }
PY=.venv/bin/python
echo "==> ruff"
.venv/bin/ruff check .
echo "==> mypy"
.venv/bin/mypy forqapp
# --- docs: the site builds strictly (a broken link or reference is an error) --------------------
echo "==> docs (mkdocs build --strict)"
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir site
# ------------------------------------------------------------------------------------------------
echo "==> migrations match the models"
FORQ_DB_PATH=:memory: DJANGO_SETTINGS_MODULE=tests.settings $PY manage.py makemigrations --check --dry-run
echo "==> tests on SQLite"
$PY -m pytest -p no:cacheprovider "$@"
# The Django Tasks backend serves Django 6's django.tasks too (Python 3.12, a venv of its own): its
# tests there, and a smoke of the queue, schedules, defer, Python API and admin tests (about a minute).
echo "==> tests under Django 6 (scripts/test-django6.sh)"
scripts/test-django6.sh $(ls tests/test_tasks*.py | grep -v _browser) tests/test_schedules.py tests/test_defer.py \
  tests/test_python_api.py tests/test_admin.py -m "not browser"
if scripts/ensure-postgres.sh; then
  echo "==> tests on PostgreSQL"
  DATABASE_URL=${FORQ_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/forq_test} \
    $PY -m pytest -p no:cacheprovider -m "not spark" "$@"
elif [ "${CI:-}" = "true" ]; then
  echo "PostgreSQL is required on CI" >&2
  exit 1
else
  echo "==> skipped the PostgreSQL run: no PostgreSQL reachable and none could be installed"
fi
