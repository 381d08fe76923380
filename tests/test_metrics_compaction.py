"""The files of processes gone, merged at scrape time (forqapp.metrics.compaction): every sample of
a scrape is the same before and after, whatever step a compaction is killed at; a live process's
files are never touched; scrapers compact in turn."""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.parser import text_string_to_metric_families

from forqapp import metrics
from forqapp.metrics import compaction, top
from forqapp.server import process

DEAD = 5_000_000  # above any pid_max (Linux's highest is 2**22): never a live process
QUEUES = [f"q{i}" for i in range(6)]
BUCKETS = ["0.005", "0.05", "0.5", "5.0", "+Inf"]


def _key(metric: str, name: str, labels: dict[str, str], help_text: str = "h") -> str:
    return mmap_key(metric, name, list(labels), list(labels.values()), help_text)


def write(path, values: dict[str, tuple[float, float]]) -> None:
    """A process's file, as prometheus_client writes it (renamed into place: never read half made)."""
    temporary = f"{path}.writing"
    mapped = MmapedDict(temporary)
    for key, (value, timestamp) in values.items():
        mapped.write_value(key, value, timestamp)
    mapped.close()
    os.replace(temporary, path)


def dead_process(directory, pid: int, rnd: random.Random) -> None:
    """The files a short process leaves: counters, a histogram, depth gauges (most recent), its
    in-flight gauge (live: dropped by the scrape). Values in eighths: sums exact in any order."""
    counters, histogram, depths = {}, {}, {}
    for queue in rnd.sample(QUEUES, rnd.randint(1, 4)):
        labels = {"queue_name": queue, "queue_type": "regular"}
        counters[_key("forq_messages_produced", "forq_messages_produced_total", labels)] = (rnd.randint(0, 50), 0.0)
        counters[_key("forq_messages_acked", "forq_messages_acked_total", labels)] = (rnd.randint(0, 50), 0.0)
        for le in rnd.sample(BUCKETS, rnd.randint(1, len(BUCKETS))):
            histogram[_key("forq_worker_handler_duration_seconds", "forq_worker_handler_duration_seconds_bucket",
                           {"le": le, "queue_name": queue})] = (rnd.randint(1, 9), 0.0)
        histogram[_key("forq_worker_handler_duration_seconds", "forq_worker_handler_duration_seconds_sum",
                       {"queue_name": queue})] = (rnd.randint(1, 800) / 8, 0.0)
        depths[_key("forq_queue_depth", "forq_queue_depth", labels)] = (rnd.randint(0, 99), rnd.uniform(1e9, 2e9))
    counters[_key("forq_job_runs", "forq_job_runs_total", {"job": "cleanup", "result": "ok"})] = (1.0, 0.0)
    write(directory / f"counter_{pid}.db", counters)
    if rnd.random() < 0.8:
        write(directory / f"histogram_{pid}.db", histogram)
    write(directory / f"gauge_mostrecent_{pid}.db", depths)
    if rnd.random() < 0.3:
        write(directory / f"gauge_livesum_{pid}.db", {_key("forq_worker_in_flight", "forq_worker_in_flight",
                                                           {"queue_name": "q0"}): (3.0, 0.0)})


def scrape() -> dict[tuple, float]:
    text = metrics.exposition()[0].decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def uncompacted(monkeypatch) -> dict[tuple, float]:
    with monkeypatch.context() as m:
        m.setattr(compaction, "MINIMUM_DEAD_FILES", 10**9)
        return scrape()


def pid_files(directory) -> set[str]:
    return {p.name for p in directory.iterdir() if process._METRICS_FILE_PID.search(p.name)}


@pytest.fixture
def directory(tmp_path, monkeypatch):
    directory = tmp_path / "prom"
    directory.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    monkeypatch.setattr(compaction, "_said_full", False)
    top.forget(str(directory))
    return directory


@pytest.mark.parametrize("folded", [False, True], ids=["every queue", "3 queues and (other)"])
def test_a_scrape_is_the_same_before_and_after_compactions(directory, monkeypatch, settings, folded):
    """Audit: every scrape read every file of every process that ever counted (a cron job each
    minute: ~4,000 a day), so scrapes grew slower without bound. The files of the processes gone are
    merged into one archive per kind; over random processes and rounds (the archives merged again),
    every sample — counters, histograms, most-recent gauges, the folding of queues outside the top —
    is the same before and after, and the files gone are the merged ones."""
    if folded:
        settings.FORQ_METRICS_TOP_QUEUES = 3
    rnd = random.Random(11)
    pid = DEAD
    for round_ in range(5):
        for _ in range(rnd.randint(8, 30)):
            pid += 1
            dead_process(directory, pid, rnd)
        uncompacted(monkeypatch)  # (a queue that left the top shows its series a last time here)
        before = uncompacted(monkeypatch)
        assert before == uncompacted(monkeypatch)  # (a scrape changes nothing by itself then)
        assert len(pid_files(directory)) >= 8
        after = scrape()
        assert after == before, round_
        assert pid_files(directory) == set(), round_  # every file of the dead merged (live gauges dropped)
        names = {p.name for p in directory.iterdir()}
        assert {"counter_archive.db", "gauge_mostrecent_archive.db"} <= names
        assert not [n for n in names if n.endswith(".new") or n == compaction.MANIFEST]
        assert scrape() == before
    if folded:
        assert any(labels == (("queue_name", "(other)"), ("queue_type", "regular")) for _, labels in before)


def test_fewer_dead_files_than_the_minimum_are_read_as_they_are(directory):
    rnd = random.Random(3)
    for pid in range(DEAD, DEAD + 2):
        dead_process(directory, pid, rnd)
    scrape()
    assert {n for n in pid_files(directory) if n.startswith("counter_")} == {f"counter_{DEAD}.db",
                                                                             f"counter_{DEAD + 1}.db"}


def compact_killed_at(directory, step: str, nth: int) -> None:
    """A compaction in a forked process killed (os._exit: nothing cleaned up) at its ``nth`` ``step``."""
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        seen = {"n": 0}

        def killed(name):
            if name == step:
                seen["n"] += 1
                if seen["n"] == nth:
                    os._exit(9)

        compaction._step = killed
        try:
            compaction.compact(str(directory))
        finally:
            os._exit(0)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 9, "the step was never reached"


STEPS = [("read", 1), ("space reserved", 1), ("archive written", 1), ("archive written", 3), ("manifest written", 1),
         ("archive renamed", 1), ("archive renamed", 2), ("merged deleted", 1), ("merged deleted", 20),
         ("manifest deleted", 1)]


@pytest.mark.parametrize("step,nth", STEPS, ids=[f"{s} #{n}" for s, n in STEPS])
def test_a_compaction_killed_at_any_step_loses_and_doubles_nothing(directory, monkeypatch, step, nth):
    """A process killed (os._exit: nothing cleaned up) at each step of a compaction — a second
    compaction too, over the archives of a first —: the next scrape finishes or undoes it and reads
    every sample once, and a reader that cannot finish it (compaction.Collector alone) reads the
    same."""
    rnd = random.Random(5)
    for pid in range(DEAD, DEAD + 12):
        dead_process(directory, pid, rnd)
    scrape()  # a first compaction: the archives exist
    for pid in range(DEAD + 12, DEAD + 30):
        dead_process(directory, pid, rnd)
    before = uncompacted(monkeypatch)
    compact_killed_at(directory, step, nth)
    assert _read_without_finishing(directory) == {k: v for k, v in before.items()
                                                  if k[0] != "forq_metrics_queues_folded"}
    assert scrape() == before
    assert pid_files(directory) == set()
    assert not [p for p in directory.iterdir() if p.name.endswith(".new") or p.name == compaction.MANIFEST]
    assert scrape() == before


def _read_without_finishing(directory) -> dict[tuple, float]:
    """The samples compaction.Collector reads as the directory is (no compaction finished first),
    the live gauges of the dead dropped as the scrape drops them."""
    from prometheus_client import CollectorRegistry, generate_latest

    for pid, files in process.metrics_files_of_the_dead(str(directory)).items():
        if any(os.path.basename(f).startswith("gauge_live") for f in files):
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid, str(directory))
    registry = CollectorRegistry()
    registry.register(compaction.Collector(None, path=str(directory)))
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_full_disk_serves_the_scrape_uncompacted_and_says_so_once(directory, monkeypatch, caplog):
    rnd = random.Random(8)
    for pid in range(DEAD, DEAD + 10):
        dead_process(directory, pid, rnd)
    before = uncompacted(monkeypatch)
    files = pid_files(directory)

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(compaction.os, "posix_fallocate", full)
        assert scrape() == before
        assert scrape() == before
    assert pid_files(directory) == files  # nothing merged, nothing lost
    assert not [p.name for p in directory.iterdir()
                if "archive" in p.name or p.name.startswith(compaction.MANIFEST)]  # no archive, .new, manifest
    said = [r for r in caplog.records if "could not compact" in r.getMessage()]
    assert len(said) == 1 and "No space left on device" in said[0].getMessage()
    assert scrape() == before  # room again: compacted
    assert pid_files(directory) == set()


LIVE_WRITER = """
import os, sys, time
from prometheus_client import Counter, Histogram
c = Counter("forq_live_total", "l", ["queue_name"])
h = Histogram("forq_live_seconds", "l", ["queue_name"])
c.labels("q0").inc(3)
h.labels("q0").observe(0.25)
print("counted", flush=True)
sys.stdin.readline()
c.labels("q0").inc(4)
print("counted", flush=True)
time.sleep(60)
"""


def test_a_live_process_files_are_never_touched(directory, monkeypatch):
    """A process still running keeps its files as they are (it writes them through a map): its
    counts stay its own and keep growing; once it is gone, its files are merged like any other."""
    rnd = random.Random(2)
    for pid in range(DEAD, DEAD + 10):
        dead_process(directory, pid, rnd)
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    live = subprocess.Popen([sys.executable, "-c", LIVE_WRITER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert live.stdout.readline().strip() == "counted"
        mine = {n for n in pid_files(directory) if n.endswith(f"_{live.pid}.db")}
        assert mine == {f"counter_{live.pid}.db", f"histogram_{live.pid}.db"}
        contents = {n: (directory / n).read_bytes() for n in mine}
        after = scrape()
        assert pid_files(directory) == mine
        assert {n: (directory / n).read_bytes() for n in mine} == contents
        assert after[("forq_live_total", (("queue_name", "q0"),))] == 3
        live.stdin.write("more\n")
        live.stdin.flush()
        assert live.stdout.readline().strip() == "counted"
        assert scrape()[("forq_live_total", (("queue_name", "q0"),))] == 7  # still counting in its file
    finally:
        live.kill()
        live.communicate()
    before = uncompacted(monkeypatch)
    monkeypatch.setattr(compaction, "MINIMUM_DEAD_FILES", 1)
    assert scrape() == before  # gone now: merged too
    assert pid_files(directory) == set()
    assert before[("forq_live_seconds_bucket", (("le", "0.25"), ("queue_name", "q0")))] == 1


def test_two_scrapers_at_once_compact_in_turn(directory, monkeypatch):
    """Scrapes at once (threads here: a flock is per open file, as between processes) while
    processes keep ending: each reads every count once — between the processes ended when it started
    and those begun when it ended — and none fails on a file another one merged away."""
    monkeypatch.setattr(compaction, "MINIMUM_DEAD_FILES", 2)
    rnd = random.Random(4)
    ended = {"n": 0, "begun": 0}
    results: list[tuple[int, float, int]] = []
    failures: list[BaseException] = []
    stop = threading.Event()
    job = ("forq_job_runs_total", (("job", "cleanup"), ("result", "ok")))

    def scraper():
        try:
            while not stop.is_set():
                low = ended["n"]
                value = scrape().get(job, 0)
                results.append((low, value, ended["begun"]))
        except BaseException as exc:  # noqa: BLE001 (reported below)
            failures.append(exc)

    threads = [threading.Thread(target=scraper) for _ in range(3)]
    for t in threads:
        t.start()
    pid = DEAD
    try:
        while (len(results) < 30 or len({v for _, v, _ in results}) < 10 or ended["n"] < 100) and (
                ended["n"] < 3000 and not failures):
            ended["begun"] += 1
            dead_process(directory, pid, rnd)
            pid += 1
            ended["n"] += 1
            time.sleep(0.002)  # (the scrapers' turn)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not failures, failures
    assert len(results) >= 30
    assert len({value for _, value, _ in results}) >= 10  # scrapes while processes ended
    for low, value, high in results:
        assert low <= value <= high, (low, value, high)  # never a file twice, never one lost
    assert scrape()[job] == ended["n"]


def test_archives_are_no_process_to_the_bookkeeping(directory):
    """An archive's name has no pid: it is never "a file of the dead" (its live gauges marked, its
    counters removed by a start) nor a writer alive; prometheus_client reads its type from it."""
    rnd = random.Random(1)
    for pid in range(DEAD, DEAD + 9):
        dead_process(directory, pid, rnd)
    scrape()
    (directory / compaction.MANIFEST).write_text('{"archives": {}, "merged": []}')
    assert process.metrics_files_of_the_dead(str(directory)) == {}
    assert not process.metrics_writers_alive(str(directory))
    (directory / compaction.MANIFEST).unlink()


def _lone_start(tmp_path, monkeypatch):
    from forqapp.server import serving

    monkeypatch.setattr(serving, "_metrics_lock", None)
    directory = serving._metrics_directory(tmp_path)
    os.close(serving._metrics_lock)
    monkeypatch.setattr(serving, "_metrics_lock", None)
    return directory


def test_a_lone_server_start_removes_the_archives_unless_a_worker_runs(tmp_path, monkeypatch):
    """A forq_serve starting alone removes the files of the processes gone (a fresh start): their
    archives and a compaction left unfinished go with them. While a forq_worker writes there still,
    the counters' archives (and a manifest: the next scrape finishes it) stay, the gauges' go, as
    the gauges of the processes gone do."""
    directory = tmp_path / "prometheus"
    directory.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    rnd = random.Random(6)
    for pid in range(DEAD, DEAD + 9):
        dead_process(directory, pid, rnd)
    scrape()
    for name in ("counter_archive.db.new", compaction.MANIFEST):
        (directory / name).write_text("a compaction killed midway")
    archives = {"counter_archive.db", "histogram_archive.db", "gauge_mostrecent_archive.db"}
    assert archives <= {p.name for p in directory.iterdir()}
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (directory / f"counter_{worker.pid}.db").write_text("a running worker's")
        _lone_start(tmp_path, monkeypatch)
        assert {p.name for p in directory.iterdir()} >= {"counter_archive.db", "histogram_archive.db",
                                                         "counter_archive.db.new", compaction.MANIFEST}
        assert "gauge_mostrecent_archive.db" not in {p.name for p in directory.iterdir()}
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    _lone_start(tmp_path, monkeypatch)
    assert [p.name for p in directory.iterdir()] == [top.STATE_FILE + ".lock"]  # (a lock file stays)


def test_an_archive_is_read_as_its_kind(directory):
    """Each kind merges the way prometheus_client adds it up: the lowest of gauge_min, the highest
    of gauge_max, the sum of gauge_sum, the latest of gauge_mostrecent (by its timestamp)."""
    for mode, values in {"min": [4, 2, 7], "max": [4, 9, 1], "sum": [1, 2, 3], "mostrecent": [5, 6, 8]}.items():
        key = _key(mode, mode, {"queue_name": "q0"})
        for i, value in enumerate(values):
            timestamp = {0: 20.0, 1: 30.0, 2: 10.0}[i]
            write(directory / f"gauge_{mode}_{DEAD + 10 * len(mode) + i}.db", {key: (value, timestamp)})
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    def values():
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(directory))
        return {(m.name, m._multiprocess_mode): [s.value for s in m.samples] for m in registry.collect()}

    before = values()
    assert compaction.compact(str(directory), minimum=1) == 12
    assert pid_files(directory) == set()
    assert values() == before == {("min", "min"): [2], ("max", "max"): [9], ("sum", "sum"): [6],
                                  ("mostrecent", "mostrecent"): [6]}


@pytest.mark.parametrize("step,nth", [("archive renamed", 1), ("merged deleted", 1), ("merged deleted", 6)])
def test_the_flow_pages_read_of_throttled_claims_counts_each_once(directory, step, nth):
    """The staff pages' throttled claims (forqapp.ui.flow) read the counter files themselves: with a
    compaction stopped between its archive's rename and the last merged file's deletion, the merged
    files are left out as a scrape leaves them out, not counted twice."""
    from forqapp.ui import flow

    for pid in range(DEAD, DEAD + 10):
        write(directory / f"counter_{pid}.db", {
            _key("forq_claims_throttled", flow.SAMPLE, {"queue_name": "limited", "reason": "rate"}): (3.0, 0.0)})
    before = flow._read_multiprocess(str(directory))
    assert before == {"limited": {"rate": 30}}
    compact_killed_at(directory, step, nth)
    assert flow._read_multiprocess(str(directory)) == before
    scrape()  # finishes the compaction
    assert flow._read_multiprocess(str(directory)) == before


def test_the_flow_pages_read_waits_for_a_scrapes_compaction(directory, monkeypatch):
    """A scrape's compaction (under the scrapes' lock) that renames its archive while the staff
    pages read the counter files: the read holds the lock shared, so the compaction waits for it,
    and the read counts each claim once (it read the archive and the merged files: twice)."""
    from forqapp.ui import flow

    for pid in range(DEAD, DEAD + 10):
        write(directory / f"counter_{pid}.db", {
            _key("forq_claims_throttled", flow.SAMPLE, {"queue_name": "limited", "reason": "rate"}): (3.0, 0.0)})
    real_glob = flow.glob.glob
    children = []

    script = ("import os, sys, django; django.setup()\n"
              "from forqapp.metrics import compaction, top\n"
              "compaction._step = lambda name: os._exit(9) if name == 'archive renamed' else None\n"
              "with top.folds(sys.argv[1]):\n    compaction.compact(sys.argv[1])\n")

    def compaction_meanwhile(pattern):
        # (a process of its own, not a fork: a fork would hold this reader's lock too)
        child = subprocess.Popen([sys.executable, "-c", script, str(directory)])
        children.append(child)
        with __import__("contextlib").suppress(subprocess.TimeoutExpired):
            child.wait(3)  # (it ends at once when nothing holds it back)
        return real_glob(pattern)

    monkeypatch.setattr(flow.glob, "glob", compaction_meanwhile)
    assert flow._read_multiprocess(str(directory)) == {"limited": {"rate": 30}}
    monkeypatch.setattr(flow.glob, "glob", real_glob)
    assert [child.wait(30) for child in children] == [9]  # it ran once the read let go, and was killed
    assert flow._read_multiprocess(str(directory)) == {"limited": {"rate": 30}}
