"""Test-suite hygiene: a test run leaves no SQLite files behind (its test database's -wal and -shm
files included), and removes none it did not make."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

INNER_TEST = '''
import pytest

import forqapp


@pytest.mark.django_db(transaction=True)
def test_waits_on_the_queue():
    forqapp.send("jobs", "x")
    assert forqapp.receive("jobs", wait=0.2) is not None
    # The long poll's notifier thread keeps its connection open until the process exits: without
    # a clean-up the test database's -wal and -shm files stay behind.
    assert forqapp.receive("jobs", wait=0.2) is None
'''


@pytest.mark.sqlite_only  # (its inner run drops DATABASE_URL)
@pytest.mark.parametrize("parallel", [(), ("-n", "2")], ids=["one process", "pytest-xdist -n 2"])
def test_a_test_run_removes_its_sqlite_files(tmp_path, parallel):
    if parallel:
        pytest.importorskip("xdist", reason="pytest-xdist is not installed (requirements-dev.txt)")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "test_inner.py").write_text(INNER_TEST)
    # Two tests, so that each of two workers makes a test database of its own (….test_gw0, _gw1).
    (tmp_path / "run" / "test_inner_too.py").write_text(INNER_TEST)
    db_path = tmp_path / "db" / "forq.sqlite3"
    db_path.parent.mkdir()
    db_path.write_bytes(b"")  # a FORQ_DB_PATH the caller names is theirs: kept
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DATABASE_URL"))}
    env.update(FORQ_DB_PATH=str(db_path), PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.conftest", "-q", *parallel,
         "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), str(tmp_path / "run")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(p.name for p in db_path.parent.iterdir()) == ["forq.sqlite3"]
