"""The database lease that lets one jobs scheduler per database run the jobs: the store's
acquire/renew/release statements on their own, and two schedulers sharing one database."""

from __future__ import annotations

import os
import threading
import time

import pytest
from django.db import connections

from forqapp import services
from forqapp.models import Lease
from forqapp.worker import jobs

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "test-lease"


def test_one_holder_until_it_expires_or_releases():
    assert services.acquire_lease(NAME, "a", 60_000)
    assert not services.acquire_lease(NAME, "b", 60_000)  # a holds it
    assert services.acquire_lease(NAME, "a", 60_000)  # a renews
    assert services.lease_holder(NAME)[0] == "a"
    assert not services.release_lease(NAME, "b")  # only the holder gives it up
    assert services.release_lease(NAME, "a")
    assert services.lease_holder(NAME) is None
    assert services.acquire_lease(NAME, "b", 60_000)  # released: taken at once
    assert not services.acquire_lease(NAME, "a", 60_000)


def test_an_expired_lease_is_taken_over_and_its_old_holder_cannot_renew_it():
    assert services.acquire_lease(NAME, "a", -1)  # expired the moment it was taken
    assert services.acquire_lease(NAME, "b", 60_000)
    assert not services.acquire_lease(NAME, "a", 60_000)
    assert Lease.objects.get(name=NAME).holder == "b"


def test_a_holder_known_dead_is_replaced_at_once():
    assert services.acquire_lease(NAME, "a", 60_000)
    assert not services.acquire_lease(NAME, "b", 60_000, replacing="c")
    assert services.acquire_lease(NAME, "b", 60_000, replacing="a")
    assert services.lease_holder(NAME)[0] == "b"


def test_racing_acquirers_get_one_holder():
    barrier = threading.Barrier(8)
    won = []

    def race(holder):
        try:
            barrier.wait()
            if services.acquire_lease(NAME, holder, 60_000):
                won.append(holder)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=race, args=(f"h{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(won) == 1
    assert services.lease_holder(NAME)[0] == won[0]


def test_dead_holder_detection_is_for_this_machine_only():
    here = jobs._holder_id()
    host, namespace, _, token = here.rsplit(":", 3)
    assert not jobs._dead_here(here)  # this process
    assert not jobs._dead_here(f"{host}:{namespace}:{os.getppid()}:{token}")  # alive
    dead = _dead_pid()
    assert jobs._dead_here(f"{host}:{namespace}:{dead}:{token}")
    assert not jobs._dead_here(f"elsewhere:{namespace}:{dead}:{token}")  # another host: can't tell
    assert not jobs._dead_here("garbage")


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


class Probe:
    """A job that records which scheduler ran it, and when."""

    def __init__(self):
        self.calls: list[tuple[str, float]] = []

    def job(self, who: str) -> jobs.Job:
        def probe(*, dry_run=False, using=None) -> int:
            self.calls.append((who, time.monotonic()))
            return 0

        return jobs.Job("probe", probe, 0.02)

    def by(self, who: str) -> list[float]:
        return [t for w, t in self.calls if w == who]


def wait_for(predicate, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def short_lease(settings):
    settings.FORQ_JOBS_LEASE_MS = 900  # renewed every 0.3 s; a silent holder stops after 0.45 s


def test_two_schedulers_run_the_jobs_once_and_the_other_takes_over_when_the_holder_stops(short_lease):
    probe = Probe()
    changes: list[tuple[str, bool]] = []
    first = jobs.Scheduler([probe.job("first")], on_lease=lambda held: changes.append(("first", held)))
    first.start_thread()
    wait_for(lambda: len(probe.by("first")) >= 3, "the first scheduler to run the jobs")
    second = jobs.Scheduler([probe.job("second")], on_lease=lambda held: changes.append(("second", held)))
    second.start_thread()
    try:
        wait_for(lambda: ("second", False) in changes, "the second scheduler to stand by")
        time.sleep(1.0)  # several renewals, many job turns
        assert probe.by("second") == []
        assert first.running_jobs and not second.running_jobs
        first.stop()
        first.join(10)
        stopped = time.monotonic()
        wait_for(lambda: probe.by("second"), "the second scheduler to take over")
        assert ("second", True) in changes
        assert max(probe.by("first")) < stopped
        assert services.lease_holder(jobs.LEASE)[0] == second.lease.holder
    finally:
        first.stop()
        second.stop()
        first.join(10)
        second.join(10)
    assert services.lease_holder(jobs.LEASE) is None  # released on stop


def test_a_holder_that_cannot_renew_stops_before_another_takes_its_lease_over(short_lease):
    probe = Probe()
    first = jobs.Scheduler([probe.job("first")])
    second = jobs.Scheduler([probe.job("second")])
    first.start_thread()
    wait_for(lambda: probe.by("first"), "the first scheduler to run the jobs")
    second.start_thread()
    try:
        time.sleep(0.5)
        assert probe.by("second") == []
        first.lease.renew = lambda: first.lease.held  # cut off from the database: renewals fail
        wait_for(lambda: probe.by("second"), "the second scheduler to take the expired lease over")
        assert max(probe.by("first")) < min(probe.by("second"))  # never both at once
        assert not first.running_jobs
    finally:
        first.stop()
        second.stop()
        first.join(10)
        second.join(10)


def test_a_scheduler_without_a_lease_runs_regardless(short_lease):
    assert services.acquire_lease(jobs.LEASE, "someone-else", 60_000)
    probe = Probe()
    scheduler = jobs.Scheduler([probe.job("free")], lease=False)
    scheduler.start_thread()
    try:
        wait_for(lambda: probe.by("free"), "the scheduler to run the job")
    finally:
        scheduler.stop()
        scheduler.join(10)


def test_a_raw_sqlite_error_while_renewing_does_not_end_the_lease_thread(short_lease, monkeypatch, caplog):
    """The store's SQLite statements raise sqlite3's own errors ("database or disk is full", "database
    is locked" past the busy timeout), not Django's: the lease thread once died of one, and the jobs
    stopped for good while the lease row still named the process. It says so in one line, not a
    traceback each second, and its standing by names the failure, not another holder."""
    import logging
    import sqlite3

    caplog.set_level(logging.INFO, logger="forqapp")
    probe = Probe()
    said = []
    scheduler = jobs.Scheduler([probe.job("only")], on_lease=lambda running: said.append(scheduler.lease_line(running)))
    real_acquire = services.acquire_lease
    failing = threading.Event()

    def acquire(*args, **kwargs):
        if failing.is_set():
            raise sqlite3.OperationalError("database or disk is full")
        return real_acquire(*args, **kwargs)

    monkeypatch.setattr(services, "acquire_lease", acquire)
    scheduler.start_thread()
    try:
        wait_for(lambda: probe.by("only"), "the scheduler to run the jobs")
        failing.set()
        wait_for(lambda: not scheduler.running_jobs, "the failed renewals to end the lease here")
        assert scheduler.lease._thread.is_alive()
        wait_for(lambda: len(said) >= 2, "the scheduler to say it stands by")
        assert said[1] == ("forq_jobs: standing by: the jobs lease cannot be renewed (the database's disk is "
                           "full); trying again every second"), said
        time.sleep(0.5)  # more failed renewals, unsaid
        failures = [r for r in caplog.records if "renewing the lease" in r.getMessage()]
        assert len(failures) == 1 and not failures[0].exc_info, [r.getMessage() for r in failures]
        failing.clear()  # the disk has room again
        ran = len(probe.by("only"))
        wait_for(lambda: len(probe.by("only")) > ran, "the jobs to run again")
        assert scheduler.running_jobs
        assert any("can be renewed again" in r.getMessage() for r in caplog.records)
        assert said[-1].startswith("forq_jobs: running the jobs")
    finally:
        scheduler.stop()
        scheduler.join(10)


def test_a_renewal_failing_and_recovering_again_and_again_is_said_once_a_minute(short_lease, monkeypatch, caplog):
    """On a disk that is all but full a renewal fails, the next works, and so on: each run of
    failures must not be a line of its own (one a second, as the lease is asked for again)."""
    import logging
    import sqlite3

    caplog.set_level(logging.WARNING, logger="forqapp")
    real_acquire = services.acquire_lease
    fail = [True, False, True, False, True, False]

    def acquire(*args, **kwargs):
        if fail and fail.pop(0):
            raise sqlite3.OperationalError("database or disk is full")
        return real_acquire(*args, **kwargs)

    monkeypatch.setattr(services, "acquire_lease", acquire)
    lease = jobs.JobsLease()
    for _ in range(6):
        lease.renew()
    said = [r.getMessage() for r in caplog.records if "lease" in r.getMessage()]
    assert said == [
        "forqapp jobs: renewing the lease forq-jobs failed: the database's disk is full; trying again every "
        "second (this line at most once a minute)",
        "forqapp jobs: the lease forq-jobs can be renewed again",
    ], said
    assert lease.held and lease.failure is None
    lease.stop()
