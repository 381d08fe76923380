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
    another process still writes there, only the gauges of the processes gone go (a stale depth or
    in-flight count would stay until overwritten); alone, all their files."""
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
        (tmp_path / "prometheus" / f"gauge_mostrecent_{dead_pid}.db").write_text("a server gone: its depths")
        (tmp_path / "prometheus" / "forq-top-queues.json").write_text("{}")  # what /metrics's scrapes remember
        monkeypatch.setattr(serving, "_metrics_lock", None)
        directory = serving._metrics_directory(tmp_path)
        os.close(serving._metrics_lock)
        assert sorted(p.name for p in directory.iterdir()) == [
            f"counter_{dead_pid}.db", f"counter_{worker.pid}.db", "forq-top-queues.json"]
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


class _Source:
    """A registry's stand-in: per queue, its depth (a gauge) and counts (a counter, by outcome)."""

    def __init__(self):
        self.depth: dict[str, float] = {}
        self.counts: dict[tuple[str, str], float] = {}

    def collect(self):
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

        depth = GaugeMetricFamily("forq_queue_depth", "d", labels=["queue_name", "queue_type"])
        for queue, value in sorted(self.depth.items()):
            depth.add_metric([queue, "regular"], value)
        handled = CounterMetricFamily("forq_worker_handled", "h", labels=["queue_name", "outcome"])
        for (queue, outcome), value in sorted(self.counts.items()):
            handled.add_metric([queue, outcome], value)
        return [depth, handled]


@pytest.mark.parametrize("shared", [False, True], ids=["one process", "two processes, one directory"])
def test_folded_counters_only_grow_and_add_up_as_queues_move_in_and_out_of_the_top(tmp_path, shared):
    """Audit: a queue entering or leaving the FORQ_METRICS_TOP_QUEUES deepest took its whole count
    out of (or into) queue_name="(other)", which Prometheus reads as a reset (rate() counted the
    history again). Over random depths and counts: every counter series only grows, and at every
    scrape the series add up to the exact totals, a series gone (its queue folded again) counted at
    its last value (where it resumes: sum(rate()) is exact)."""
    import random

    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from forqapp.metrics import top

    rnd = random.Random(7)
    source = _Source()
    top.forget()
    scrapes = [top.TopQueues(source, 3, str(tmp_path) if shared else None) for _ in range(2 if shared else 1)]
    queues = [f"q{i}" for i in range(8)]
    seen: dict[tuple, float] = {}
    others_seen = moved = 0
    kept_before: set[str] = set()
    for step in range(300):
        for _ in range(rnd.randint(1, 6)):
            key = (rnd.choice(queues[: 4 + step // 50]), rnd.choice(["ack", "nack"]))  # queues come later
            source.counts[key] = source.counts.get(key, 0) + rnd.randint(1, 3)
        for queue in {q for q, _ in source.counts}:
            source.depth[queue] = rnd.randint(0, 100)
        text = generate_latest(scrapes[step % len(scrapes)]).decode()
        exposed = {(s.labels["queue_name"], s.labels["outcome"]): s.value
                   for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "forq_worker_handled_total"}
        for series, value in exposed.items():
            assert value >= seen.get(series, 0), (step, series, value, seen.get(series))  # never falls
            seen[series] = value
        for outcome in ("ack", "nack"):  # a series gone (its queue folded again) stays where it stopped
            assert sum(v for (q, o), v in seen.items() if o == outcome) == sum(
                v for (q, o), v in source.counts.items() if o == outcome), (step, outcome)
        kept = {q for q, _ in exposed if q != "(other)"}
        moved += bool(kept_before and kept != kept_before)
        kept_before = kept
        others_seen += any(q == "(other)" for q, _ in exposed)
    assert moved > 100 and others_seen > 200  # the queues did move, and were folded
    if shared:
        assert (tmp_path / top.STATE_FILE).exists()
    top.forget()


def test_a_worker_with_metrics_on_and_no_shared_directory_says_its_counts_are_unseen(settings, monkeypatch):
    """Audit: a forq_worker or forq_jobs started without PROMETHEUS_MULTIPROC_DIR while metrics are
    on counted in its own memory, which /metrics (another process) never reads, and said nothing."""
    from forqapp.server import process

    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    settings.FORQ_METRICS_ENABLED = False
    assert process.unshared_metrics("forq_worker") is None  # metrics off: nothing to say
    settings.FORQ_METRICS_ENABLED = True
    note = process.unshared_metrics("forq_worker")
    assert note is not None and note.startswith("forq_worker: metrics are on") and "PROMETHEUS_MULTIPROC_DIR" in note
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "/run/forq-metrics")
    assert process.unshared_metrics("forq_jobs") is None


def test_a_scrape_answers_when_its_memory_cannot_be_written(tmp_path, monkeypatch, caplog):
    """A full disk (the metrics directory beside the database's) failed the state file's write, and
    with it every scrape: /metrics went dark just when it was needed. The scrape answers; the next
    one finds the same moves again."""
    import errno
    import os

    from prometheus_client import generate_latest

    from forqapp import errors
    from forqapp.metrics import top

    source = _Source()
    for n in range(5):
        source.counts[(f"q{n}", "ack")] = n + 1
        source.depth[f"q{n}"] = n
    real_replace = os.replace

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(top.os, "replace", full)
    errors._said.clear()
    text = generate_latest(top.TopQueues(source, 2, str(tmp_path))).decode()
    assert 'forq_worker_handled_total{outcome="ack",queue_name="(other)"} 6.0' in text  # q0..q2: 1+2+3
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []  # no temporary left
    assert any("served without keeping it" in r.getMessage() for r in caplog.records)
    monkeypatch.setattr(top.os, "replace", real_replace)
    generate_latest(top.TopQueues(source, 2, str(tmp_path)))
    assert (tmp_path / top.STATE_FILE).exists()  # kept once the disk has room
