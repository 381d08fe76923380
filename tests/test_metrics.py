"""Metrics after a scripted run: a worker and a jobs process in multiprocess mode, added up the way
``GET /metrics`` adds them; and the worker metrics in this process."""

from __future__ import annotations

import pytest
from django_prometheus.testutils import assert_metric_diff, get_metric, save_registry
from prometheus_client import CollectorRegistry, multiprocess

import forqapp
from forqapp import metrics

from .workerproc import WorkerProc


def collected(directory) -> CollectorRegistry:
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))
    return registry


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_worker_and_jobs_metrics_add_up_across_processes(tmp_path):
    directory = tmp_path / "prom"
    directory.mkdir()
    w = WorkerProc(tmp_path, env={"PROMETHEUS_MULTIPROC_DIR": str(directory)})
    forqapp.send_many("work", ["ok", "ok", "ok", "boom", "fatal"])
    forqapp.send("jsonq", "{}")
    result = w.run("--burst", "--concurrency", "2")
    assert result.returncode == 0, result.stderr
    assert w.run("run", "failed", command="forq_jobs").returncode == 0
    registry = collected(directory)

    def value(name, **labels):
        return registry.get_sample_value(name, labels)

    regular = {"queue_type": "regular"}
    assert value("forq_messages_consumed_total", queue_name="work", **regular) == 5
    assert value("forq_messages_consumed_total", queue_name="jsonq", **regular) == 1
    assert value("forq_messages_acked_total", queue_name="work", **regular) == 3
    assert value("forq_messages_nacked_total", queue_name="work", **regular) == 1
    assert value("forq_worker_handled_total", queue_name="work", outcome="fail") == 1
    assert value("forq_worker_handled_total", queue_name="work", outcome="ack") == 3
    assert value("forq_worker_handler_duration_seconds_count", queue_name="work") == 5
    assert value("forq_messages_moved_to_dlq_total", reason="failed") == 1
    assert value("forq_job_runs_total", job="failed", result="ok") == 1
    # Live gauges of exited processes are dropped (mark_process_dead): nothing in flight.
    assert not value("forq_worker_in_flight", queue_name="work")


def test_worker_metric_helpers():
    before = save_registry()
    metrics.handled("m", "ack", 0.002)
    metrics.in_flight("m", 2)
    metrics.in_flight("m", -1)
    assert_metric_diff(before, 1, "forq_worker_handled_total", queue_name="m", outcome="ack")
    assert get_metric("forq_worker_in_flight", queue_name="m") == 1
    assert get_metric("forq_worker_handler_duration_seconds_bucket", queue_name="m", le="0.005") >= 1
    metrics.in_flight("m", -1)


@pytest.mark.django_db(transaction=True)
def test_fail_counts_a_failed_message_per_queue():
    forqapp.send("failing", "x")
    before = save_registry()
    forqapp.fail(forqapp.receive("failing"), "no way")
    assert_metric_diff(before, 1, "forq_messages_failed_total", queue_name="failing", queue_type="regular")


HOLD_METRICS_DIRECTORY = """
import os, sys, time
from pathlib import Path
import django
django.setup()
from forqapp.server.serving import _metrics_directory
directory = _metrics_directory(Path(sys.argv[1]))
(directory / f"counter_{os.getpid()}.db").write_text("a running server's counts")
print("ready", flush=True)
time.sleep(120)
"""


def test_a_second_server_keeps_the_metrics_of_one_running(tmp_path, monkeypatch):
    """Audit: every forq_serve emptied var/prometheus as it started, so a second server of the same
    checkout (or one restarted beside another) wiped the running one's counts from /metrics. It
    is emptied only when no other server holds it."""
    import os
    import subprocess
    import sys

    from forqapp.server import serving

    holder = subprocess.Popen([sys.executable, "-c", HOLD_METRICS_DIRECTORY, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"})
    try:
        assert holder.stdout.readline().strip() == "ready"
        monkeypatch.setattr(serving, "_metrics_lock", None)
        directory = serving._metrics_directory(tmp_path)
        assert (directory / f"counter_{holder.pid}.db").read_text() == "a running server's counts"  # kept
        os.close(serving._metrics_lock)
        serving._metrics_lock = None
    finally:
        holder.kill()
        holder.communicate()
    directory = serving._metrics_directory(tmp_path)  # alone now: a fresh start
    os.close(serving._metrics_lock)
    assert directory.is_dir() and not list(directory.iterdir())


def test_a_lone_server_start_keeps_the_counts_while_a_worker_runs(tmp_path, monkeypatch):
    """Audit: a forq_serve starting alone emptied the whole directory, also the files of a
    forq_worker still running on it (its counts vanished from /metrics until it restarted); then it
    removed the files of processes gone, and the totals fell by what they had counted, which
    Prometheus reads as a reset (``increase()`` counted the running worker's history again). While
    another process still writes there, only the live gauges of the processes gone go; alone, all
    their files."""
    import os
    import subprocess
    import sys

    from forqapp.server import serving

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "prometheus").mkdir()
        (tmp_path / "prometheus" / f"counter_{worker.pid}.db").write_text("a running worker's")
        (tmp_path / "prometheus" / f"counter_{dead_pid}.db").write_text("a server gone: its counts")
        (tmp_path / "prometheus" / f"gauge_livesum_{dead_pid}.db").write_text("a server gone: its in-flight")
        monkeypatch.setattr(serving, "_metrics_lock", None)
        directory = serving._metrics_directory(tmp_path)
        os.close(serving._metrics_lock)
        assert sorted(p.name for p in directory.iterdir()) == [f"counter_{dead_pid}.db", f"counter_{worker.pid}.db"]
    finally:
        worker.kill()
        worker.wait()
    monkeypatch.setattr(serving, "_metrics_lock", None)
    directory = serving._metrics_directory(tmp_path)  # nobody else writes there now: a fresh start
    os.close(serving._metrics_lock)
    assert not list(directory.iterdir())


KILLED_WORKER = """
from forqapp import metrics
metrics.in_flight("slow", 2)
metrics.handled("slow", "ack")
print("counted", flush=True)
import time; time.sleep(60)
"""


def test_a_killed_workers_in_flight_gauge_leaves_the_sum(tmp_path, monkeypatch):
    """Audit: a forq_worker killed -9 never marked its live gauges dead, so /metrics showed its
    in-flight messages for ever. A scrape drops the live gauges of processes gone (their counters
    stay: they are totals)."""
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "tests.settings"}
    worker = subprocess.Popen([sys.executable, "-c", "import django; django.setup()\n" + KILLED_WORKER],
                              stdout=subprocess.PIPE, text=True, env=env)
    assert worker.stdout.readline().strip() == "counted"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    before = metrics.exposition()[0].decode()
    assert 'forq_worker_in_flight{queue_name="slow"} 2.0' in before
    os.kill(worker.pid, signal.SIGKILL)
    worker.communicate()
    after = metrics.exposition()[0].decode()
    assert 'forq_worker_in_flight{queue_name="slow"}' not in after
    assert 'forq_worker_handled_total{outcome="ack",queue_name="slow"} 1.0' in after


# --- message groups ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_groups_with_ready_messages_per_queue_and_claims_held_back_by_group_limits():
    from forqapp import services
    from forqapp.worker import jobs

    services.configure_queue("mg", group_concurrency=1)
    for group in ("a", "a", "b", "c"):
        forqapp.send("mg", "x", group=group)
    forqapp.send("mg", "no group")
    forqapp.send("mg-other", "y", group="z")
    jobs.queue_depth()
    assert get_metric("forq_queue_groups_ready", queue_name="mg") == 3
    assert get_metric("forq_queue_groups_ready", queue_name="mg-other") == 1
    claimed = services.claim_many("mg", 10)  # a, b, c once each, and the one without a group
    assert len(claimed) == 4
    jobs.queue_depth()
    assert get_metric("forq_queue_groups_ready", queue_name="mg") == 1  # "a"'s second message waits
    # A claim whose group's turn came while the group is at its limit is held back and counted,
    # reason "group" (a send to group "b" makes its turn come; "b"'s message is in flight).
    forqapp.send("mg", "x", group="b")
    before = save_registry()
    assert services.claim_many("mg", 10) == []
    assert_metric_diff(before, 1, "forq_claims_throttled_total", queue_name="mg", reason="group")
    for m in claimed:
        services.ack(m)
    services.ack(services.claim("mg"))
    services.ack(services.claim("mg"))
    jobs.queue_depth()
    assert get_metric("forq_queue_groups_ready", queue_name="mg") == 0  # seen before, now without: 0
