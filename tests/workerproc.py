"""Run ``manage.py forq_worker`` / ``forq_jobs`` in a subprocess against the test database file,
with the ``tests.workerapp`` consumers, and read what its handlers logged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import database_env

ROOT = Path(__file__).resolve().parent.parent


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class WorkerProc:
    def __init__(self, tmp_path: Path, overrides: dict | None = None, env: dict | None = None):
        self.log = tmp_path / "handlers.log"
        self.env = {
            **os.environ,
            **database_env(),  # the test database: FORQ_DB_PATH, or DATABASE_URL in the PostgreSQL run
            "DJANGO_SETTINGS_MODULE": "tests.workerapp.settings",
            "FORQ_TEST_LOG": str(self.log),
            "FORQ_TEST_SETTINGS": json.dumps(overrides or {}),
            "PYTHONPATH": str(ROOT),
            **(env or {}),
        }
        self.procs: list[subprocess.Popen] = []
        self.tmp_path = tmp_path

    def start(self, *args: str, command: str = "forq_worker", pipes: bool = False,
              own_group: bool = False) -> subprocess.Popen:
        """A worker process. Its output goes to files (:meth:`output`), never to a pipe nobody reads
        while the test runs (a full pipe would block the worker mid-write, its signal handlers
        too); ``pipes=True`` for a test that reads ``proc.stdout``/``proc.stderr`` as it goes."""
        n = len(self.procs)
        argv = [sys.executable, str(ROOT / "manage.py"), command, *args]
        # SIGINT as a terminal gives it: a test run started in the background (nohup, `&` in a
        # script: SIGINT ignored, and a process that starts with it ignored keeps it so, as forqapp's
        # commands do on purpose) must not change what a worker does with a Ctrl-C.
        sigint: dict = {"preexec_fn": _default_sigint}
        if own_group:  # a process group of its own, as a shell gives a foreground job
            sigint["process_group"] = 0
        if pipes:
            proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, **sigint)
        else:
            with open(self.tmp_path / f"worker-{n}.out", "w") as out, \
                    open(self.tmp_path / f"worker-{n}.err", "w") as err:
                proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=out, stderr=err, text=True, **sigint)
        self.procs.append(proc)
        return proc

    def output(self, proc: subprocess.Popen) -> str:
        """What ``proc`` (started by :meth:`start`) wrote so far, stdout then stderr."""
        n = self.procs.index(proc)
        if proc.stdout is not None:  # started with pipes
            return "(output in its pipes)"
        return "".join((self.tmp_path / f"worker-{n}.{kind}").read_text() for kind in ("out", "err"))

    def run(self, *args: str, command: str = "forq_worker", timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), command, *args],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout,
        )

    def events(self) -> list[tuple[str, str, str, int, str]]:
        """(event, pid, id, attempts, content) for each line the handlers logged."""
        if not self.log.exists():
            return []
        out = []
        for line in self.log.read_text().splitlines():
            event, pid, message_id, attempts, content = line.split(" ", 4)
            out.append((event, pid, message_id, int(attempts), content))
        return out

    def wait_for(self, predicate, timeout: float = 20.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; handler log: {self.events()}")

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
