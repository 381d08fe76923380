"""Tasks in ``manage.py forq_worker`` processes (issue 14 point 2): a worker killed mid-task
(kill -9) → the task runs again after its lease, in another worker, with one SUCCESSFUL result;
a long task keeps its lease (heartbeat) and runs once."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from forqapp import services
from forqapp.tasks.compat import TaskResultStatus
from forqapp.tasks.models import TaskRecord
from forqapp.worker.runner import Worker
from tests.tasksapp import tasks
from tests.workerproc import WorkerProc

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def events(log) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_worker_killed_mid_task_leaves_it_to_the_next_with_one_result(tmp_path):
    services.configure_queue("tasks-default", visibility_timeout=2)  # a short lease: the retry comes soon
    result = tasks.sleepy.enqueue(60)
    procs = WorkerProc(tmp_path, env={"DJANGO_SETTINGS_MODULE": "tests.tasksapp.settings"})
    try:
        first = procs.start("tasks-default", "-v0")
        wait_for(lambda: any(e["event"] == "sleepy-start" for e in events(procs.log)), 30, "the first run")
        assert tasks.sleepy.get_result(result.id).status == TaskResultStatus.RUNNING
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
        second = procs.run("tasks-default", "--max-messages", "1", "-v0", timeout=60)
        assert second.returncode == 0, second.stderr
    finally:
        procs.stop_all()
    runs = [e for e in events(procs.log) if e["event"] == "sleepy-start"]
    assert [r["attempt"] for r in runs] == [1, 2] and runs[0]["pid"] != runs[1]["pid"]
    done = tasks.sleepy.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 2
    assert done.attempts == 2 and done.worker_ids[0] == "unknown"  # the killed worker never reported
    assert f":{runs[1]['pid']}:" in done.worker_ids[1]
    assert TaskRecord.objects.filter(id=result.id, status="SUCCESSFUL").count() == 1


def test_a_long_task_keeps_its_lease_and_runs_once():
    from forqapp.tasks.discovery import with_consumers

    services.configure_queue("tasks-default", visibility_timeout=1)  # the task runs 3 leases long
    tasks.CALLS.clear()
    result = tasks.slow.enqueue(3, key="long")
    counts = Worker(with_consumers({}), concurrency=2, burst=True).run()
    assert counts == {"ack": 1}
    assert [c for c in tasks.CALLS if c[0] == "slow-start"] == [("slow-start", {"key": "long"})]
    done = tasks.slow.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.attempts == 1


# An idle forq_worker whose wait for work is 30 s long (forqapp.worker.IDLE_WAIT_S is 1 s; long here,
# so that a stop that waits it out shows), run as manage.py would.
LONG_IDLE_WORKER = """
import sys
import forqapp.worker.runner
forqapp.worker.runner.IDLE_WAIT_S = 30.0
from django.core.management import execute_from_command_line
execute_from_command_line(["manage.py", "forq_worker", "-v1"])
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_idle_worker_stops_at_once_on_sigterm_or_sigint(tmp_path, signum):
    """Audit: an idle forq_worker exited about 1 s after SIGTERM — the stop waited for its wait on
    the notifier to end. The stop now ends that wait: exit well inside a 30 s idle wait."""
    import subprocess
    import sys

    procs = WorkerProc(tmp_path, env={"DJANGO_SETTINGS_MODULE": "tests.tasksapp.settings"})
    err = tmp_path / "idle.err"
    with open(err, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-c", LONG_IDLE_WORKER], cwd=str(procs.env["PYTHONPATH"]),
                                env=procs.env, stdout=subprocess.DEVNULL, stderr=stderr,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_for(lambda: "thread(s) on" in err.read_text(), 30, "the worker to start")
        os.kill(proc.pid, signum)
        started = time.monotonic()
        try:
            code = proc.wait(20)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert code is not None and took < 10, f"still running {took:.1f} s into a 30 s idle wait after the signal"
    assert code == 0, err.read_text()
    assert f"{signal.Signals(signum).name} received" in err.read_text()
