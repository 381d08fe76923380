"""Forq's background jobs (docs: how-to/jobs.md): each a plain function returning how many messages it handled,
and a :class:`Scheduler` that runs them all on Forq's intervals.

Run them with ``manage.py forq_serve`` (by default), ``manage.py forq_jobs`` (one long-running
process), one at a time from cron with ``manage.py forq_jobs run NAME``, or inside a worker with
``manage.py forq_worker --with-jobs``. However many of those long-running schedulers run on one
database, only the one holding the database lease ``forq-jobs`` (:class:`JobsLease`) runs jobs;
the others stand by and take over when it stops.

The SQL lives in the store; sweeps work in batches of 1,000 rows, one short write transaction each,
and never touch a message in processing (except ``stale``, whose business that is).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connections

from .. import errors, metrics, services, vocab
from ..conf import forq_settings
from ..server import process
from ..services import clock
from ..services import schedules as schedules_module
from ..services.db import database_errors
from ..tasks.discovery import uses_forq_backend

logger = logging.getLogger("forqapp.jobs")


def _close_old_connections() -> None:
    """Django's ``close_old_connections()`` before a job or a lease renewal, except that a working
    SQLite connection is kept past ``CONN_MAX_AGE``: its default, 0, would open the file again (and
    set its pragmas, and parse every statement again) for each run of each one-second job, which was
    most of an idle server's CPU. A connection with an error since, or left outside autocommit, is
    still closed (PostgreSQL's too when it ages out, as before)."""
    for conn in connections.all(initialized_only=True):
        if (conn.vendor == "sqlite" and conn.connection is not None and not conn.errors_occurred
                and conn.get_autocommit() == conn.settings_dict["AUTOCOMMIT"]):
            continue
        conn.close_if_unusable_or_obsolete()


def expired(*, dry_run: bool = False, using: str | None = None) -> int:
    """Expired regular messages → their DLQ (``message_expired``)."""
    return services.move_expired_to_dlq(dry_run=dry_run, using=using)


def failed(*, dry_run: bool = False, using: str | None = None) -> int:
    """Failed regular messages → their DLQ (``max_attempts_reached``, or ``fatal_error`` for a consumer's)."""
    return services.move_failed_to_dlq(dry_run=dry_run, using=using)


def stale(*, dry_run: bool = False, using: str | None = None) -> int:
    """Messages in processing for longer than the visibility timeout → ready (or failed)."""
    return services.recover_stale(dry_run=dry_run, using=using)


def expired_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Delete expired DLQ messages."""
    return services.delete_expired_dlq(dry_run=dry_run, using=using)


def failed_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Delete failed DLQ messages."""
    return services.delete_failed_dlq(dry_run=dry_run, using=using)


def db_optimize(*, dry_run: bool = False, using: str | None = None) -> int:
    """``PRAGMA optimize`` (SQLite). Returns 0."""
    return services.optimize_database(dry_run=dry_run, using=using)


def schedules(*, dry_run: bool = False, using: str | None = None) -> int:
    """Send the messages of every schedule whose tick has come (``forqapp.schedule``). Returns how
    many."""
    return schedules_module.run_due(dry_run=dry_run, using=using)


def task_results(*, dry_run: bool = False, using: str | None = None) -> int:
    """Delete the Django Tasks backend's results older than its ``result_retention``
    (:mod:`forqapp.tasks`); 0 without such a backend. Returns how many."""
    if not uses_forq_backend():
        return 0
    from ..tasks.results import prune

    return prune(dry_run=dry_run, using=using)


def moves(*, dry_run: bool = False, using: str | None = None) -> int:
    """Run the due batches of message move tasks (DLQ redrives: ``forqapp.start_move``, SQS's
    StartMessageMoveTask) for up to a second. Returns how many messages moved (with ``dry_run``: how
    many tasks are running)."""
    return services.run_moves(dry_run=dry_run, using=using)


_depth_labels: set = set()
_in_flight_labels: set = set()
_groups_labels: set = set()


def queue_depth(*, dry_run: bool = False, using: str | None = None) -> int:
    """Refresh the ``forq_queue_depth``, ``forq_queue_in_flight`` and ``forq_queue_groups_ready`` gauges and
    record the depth history (the UI's charts). Returns the number of queues."""
    global _depth_labels, _in_flight_labels, _groups_labels
    depths = services.queue_depths(using=using)
    if dry_run:
        return len(depths)
    _depth_labels = metrics.set_queue_depths(depths, _depth_labels)
    _in_flight_labels = metrics.set_in_flight(services.in_flight_counts(using=using), _in_flight_labels)
    _groups_labels = metrics.set_groups_ready(services.ready_group_counts(using=using), _groups_labels)
    from ..services import history  # models: loaded when the job runs, not when jobs is imported

    try:
        history.record_depth_samples(depths)
    except Exception as exc:  # noqa: BLE001 - the gauge is set; the history must not fail the job
        errors.log_failure(logger, "forqapp job queue-depth (recording its history)", exc, "not recorded")
    return len(depths)


@dataclass(frozen=True)
class Job:
    name: str
    func: Callable[..., int]
    interval: float  # seconds, Forq's

    def every(self) -> float:
        """The interval in force: ``FORQ_JOB_INTERVALS[name]`` if set; the stale job also runs at
        least every half visibility timeout, so a crashed worker's messages come back in time."""
        overrides = forq_settings.FORQ_JOB_INTERVALS
        if self.name in overrides:
            return float(overrides[self.name])
        if self.name == "stale":
            return min(self.interval, max(0.1, forq_settings.FORQ_VISIBILITY_TIMEOUT_MS / 2000))
        return self.interval


JOBS: dict[str, Job] = {
    job.name: job
    for job in (
        Job("expired", expired, 5 * 60),
        Job("failed", failed, 6 * 60),
        Job("stale", stale, 3 * 60),
        Job("expired-dlq", expired_dlq, 62 * 60),
        Job("failed-dlq", failed_dlq, 89 * 60),
        Job("db-optimize", db_optimize, 60 * 60),
        Job("queue-depth", queue_depth, 30),
        Job("schedules", schedules, 1),
        Job("moves", moves, 1),
        Job("task-results", task_results, 60 * 60),
    )
}


# What each job's count means, for its log line: `forqapp job "failed" moved 1 failed message(s)
# to their DLQ`, not `forqapp job failed: 1` (read as an error).
DONE = {
    "expired": "moved %d expired message(s) to their DLQ",
    "failed": "moved %d failed message(s) to their DLQ",
    "stale": "took back %d message(s) whose lease ended unsettled (ready again, or failed when out of attempts)",
    "expired-dlq": "deleted %d expired DLQ message(s)",
    "failed-dlq": "deleted %d failed DLQ message(s)",
    "db-optimize": "optimized the database (%d)",
    "queue-depth": "recorded the depth of %d queue(s)",
    "schedules": "sent %d scheduled message(s)",
    "moves": "moved %d message(s) of move tasks",
    "task-results": "deleted %d task result(s) past their retention",
}


def run(name: str, *, dry_run: bool = False, using: str | None = None) -> int:
    """Run one job by name; returns its count. Counted in ``forq_job_runs_total``."""
    return _run(JOBS[name], dry_run=dry_run, using=using)


def _run(job: Job, *, dry_run: bool = False, using: str | None = None) -> int:
    try:
        n = job.func(dry_run=dry_run, using=using)
    except Exception:
        if not dry_run:
            metrics.job_ran(job.name, False)
        raise
    if not dry_run:
        metrics.job_ran(job.name, True)
    return n


def enabled_jobs() -> list[Job]:
    """The jobs the scheduler runs: every one (queue-depth feeds the depth history, metrics or not)."""
    return list(JOBS.values())


LEASE = vocab.JOBS_LEASE  # the database lease whose holder runs the jobs


def _pid_namespace() -> str:
    """The PID namespace's inode on Linux (containers on one host share its name but not their
    PIDs), else ""."""
    try:
        return re.sub(r"\D", "", os.readlink("/proc/self/ns/pid"))
    except OSError:
        return ""


_HERE = (socket.gethostname()[:120], _pid_namespace())


def _holder_id() -> str:
    """``host:pid-namespace:pid:random``: unique per process, and says where the process runs."""
    return f"{_HERE[0]}:{_HERE[1]}:{os.getpid()}:{secrets.token_hex(4)}"


def _dead_here(holder: str) -> bool:
    """Whether ``holder`` was a process of this machine (same host name and PID namespace) that
    has gone: a scheduler restarted after a crash then takes its lease over at once instead of
    waiting for it to expire. Any doubt (another host, a PID in use) answers False: wait."""
    try:
        host, namespace, pid, _ = holder.rsplit(":", 3)
        pid_number = int(pid)
    except ValueError:
        return False
    if (host, namespace) != _HERE or pid_number == os.getpid():
        return False
    return not process.alive(pid_number)


class JobsLease:
    """The database lease that lets one scheduler per database run the jobs.

    A thread of its own renews it every third of ``FORQ_JOBS_LEASE_MS`` (so a long job never lets
    it lapse) and, while someone else holds it or after a failed renewal, asks again every second
    (so a released lease is taken at once). :attr:`held` turns False by itself half a lease after
    the last renewal that succeeded: a holder cut off from the database stops starting jobs well
    before another process may take the lease over, even with the hosts' clocks seconds apart.
    """

    def __init__(self, name: str = LEASE, *, using: str | None = None):
        self.name = name
        self.using = using
        self.holder = _holder_id()
        self._valid_until = 0.0  # time.monotonic()
        self._retry_soon = True
        self.failure: str | None = None  # why the last renewal failed (None: it did not)
        self._failure_said = -60.0  # time.monotonic() of the last line about a failure
        self._failure_told = False  # whether this run of failures was said
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> bool:
        return time.monotonic() < self._valid_until

    def renew(self) -> bool:
        """Take or renew the lease now; whether this process holds it."""
        ttl_ms = forq_settings.FORQ_JOBS_LEASE_MS
        started = time.monotonic()
        _close_old_connections()
        try:
            ok = services.acquire_lease(self.name, self.holder, ttl_ms, using=self.using)
            if not ok:
                current = services.lease_holder(self.name, using=self.using)
                if current and _dead_here(current[0]):
                    ok = services.acquire_lease(self.name, self.holder, ttl_ms, replacing=current[0],
                                                using=self.using)
                    if ok:  # (said once it is done: a takeover a full disk refuses is tried each second)
                        logger.warning("forqapp jobs: lease %s was held by %s, a process that is gone; "
                                       "taken over", self.name, current[0])
        except Exception as exc:  # noqa: BLE001 - Django's DatabaseError, or sqlite3's from the store's
            # own connection (a full disk, a lock held past the busy timeout): this thread must not
            # die, or the jobs stop for good while the lease row still names this process.
            self._renewal_failed(exc)
            with contextlib.suppress(Exception):
                connections[self.using or services.alias()].close()
            self._retry_soon = True
            return self.held
        clock.keep_in_step(self.using)  # the database's clock, measured again each minute (FORQ_CLOCK)
        if self.failure is not None:
            if self._failure_told:
                logger.warning("forqapp jobs: the lease %s can be renewed again", self.name)
            self.failure, self._failure_told = None, False
        self._valid_until = started + ttl_ms / 2000 if ok else 0.0
        self._retry_soon = not self.held  # e.g. a statement that waited long for SQLite's lock
        return ok

    def _renewal_failed(self, exc: Exception) -> None:
        """Say it at most once a minute, however often it fails and recovers (it is tried every
        second): a database that cannot serve (a full disk) in one line; anything else with its
        traceback. The recovery is said only after a failure that was."""
        reason = errors.unavailable(exc)
        self.failure = reason or f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        if now - self._failure_said < 60:
            return
        self._failure_said, self._failure_told = now, True
        if reason is not None:
            logger.warning("forqapp jobs: renewing the lease %s failed: %s; trying again every second "
                           "(this line at most once a minute)", self.name, reason)
        else:
            logger.exception("forqapp jobs: renewing the lease %s failed; trying again every second "
                             "(this line at most once a minute)", self.name)

    def start(self) -> None:
        """Try once now, then keep trying/renewing on a thread until :meth:`stop`."""
        self.renew()
        self._thread = threading.Thread(target=self._keep, name="forq-jobs-lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and give the lease up, so another scheduler takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._valid_until = 0.0
        try:
            services.release_lease(self.name, self.holder, using=self.using)
        except Exception:  # noqa: BLE001 - it expires by itself
            logger.warning("forqapp jobs: could not release the lease %s; it expires by itself", self.name)

    def _keep(self) -> None:
        try:
            while not self._stop.wait(self._pause()):
                self.renew()
        finally:
            connections.close_all()  # this thread's connections

    def _pause(self) -> float:
        third = max(0.01, forq_settings.FORQ_JOBS_LEASE_MS / 3000)
        return min(1.0, third) if self._retry_soon else third


class Scheduler:
    """Runs every enabled job once at start, then each on its interval, until :meth:`stop`.

    With ``lease=True`` (the default) it runs jobs only while it holds the database lease
    (:class:`JobsLease`): several schedulers on one database, on any hosts, run them once. One that
    gains the lease runs every job at once (the previous holder may have stopped long ago); one that
    loses it starts no further job. ``on_lease(bool)`` is called each time that changes (and once
    at start). A failing job is logged and tried again at its next turn; it never stops the others.
    """

    def __init__(self, jobs: list[Job] | None = None, *, using: str | None = None, lease: bool = True,
                 on_lease: Callable[[bool], None] | None = None):
        self.jobs = jobs if jobs is not None else enabled_jobs()
        self.using = using
        self.lease = JobsLease(using=using) if lease else None
        self.on_lease = on_lease
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def install_signal_handlers(self, name: str = "forq_jobs") -> None:
        """First SIGTERM/SIGINT: :meth:`stop` (the lease is given up, so a standby takes over at
        once); a second exits at once (:mod:`forqapp.server.process`). Beside a worker that installed
        them first, it only adds its stop."""
        process.on_stop(self.stop)
        process.install_signal_handlers(name, doing="stopping")

    @property
    def running_jobs(self) -> bool:
        """Whether this scheduler may run jobs now (holds the lease, or has none)."""
        return self.lease is None or self.lease.held

    def start_thread(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run_forever, name="forq-jobs", daemon=True)
        self._thread.start()
        return self._thread

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run_forever(self) -> None:
        running = None  # whether this scheduler runs the jobs; None until first known
        next_run: dict[str, float] = {}
        try:
            if self.lease is not None:
                self.lease.start()
            while not self._stop.is_set():
                if self.running_jobs != running:
                    running = self.running_jobs
                    next_run = {job.name: time.monotonic() for job in self.jobs}
                    self._lease_changed(running)
                if not running:
                    self._stop.wait(0.2)  # the lease thread asks for the lease; see when it has it
                    continue
                now = time.monotonic()
                for job in self.jobs:
                    if self._stop.is_set() or not self.running_jobs:
                        break
                    if now >= next_run[job.name]:
                        self._run_one(job)
                        next_run[job.name] = time.monotonic() + job.every()
                until_next = min(next_run.values(), default=time.monotonic() + 1.0) - time.monotonic()
                # With a lease, look at it at least every second, to say at once when it is lost.
                self._stop.wait(max(0.0, min(until_next, 1.0) if self.lease is not None else until_next))
        finally:
            if self.lease is not None:
                self.lease.stop()
            connections.close_all()

    def _lease_changed(self, running: bool) -> None:
        if self.on_lease is not None:  # its owner reports it (forq_jobs prints it)
            self.on_lease(running)
        elif self.lease is not None:
            if running:
                logger.info("forqapp jobs: this process runs the jobs (it holds the lease %s as %s)",
                            self.lease.name, self.lease.holder)
            else:
                logger.info("forqapp jobs: %s", self.standing_by())

    def standing_by(self) -> str:
        """Why this scheduler runs no jobs now (it has a lease that it does not hold)."""
        failure = self.lease.failure if self.lease is not None else None
        if failure is not None:
            return f"standing by: the jobs lease cannot be renewed ({failure}); trying again every second"
        return "standing by: another process holds the database's jobs lease and runs the jobs"

    def lease_line(self, running: bool) -> str:
        """What forq_jobs, forq_serve and forq_worker --with-jobs print when the lease changes hands."""
        return "forq_jobs: " + ("running the jobs (this process holds the database's jobs lease)" if running
                                else self.standing_by())

    def _run_one(self, job: Job) -> None:
        _close_old_connections()
        started = time.monotonic()
        try:
            n = _run(job, using=self.using)
        except database_errors() as exc:  # a database away: one line a second, not a traceback a turn
            errors.log_failure(logger, f"forqapp job {job.name}", exc, "retrying at its next turn")
            with contextlib.suppress(Exception):
                connections[self.using or services.alias()].close()
            return
        except Exception as exc:  # noqa: BLE001 - a job's bug must not stop the others
            errors.log_failure(logger, f"forqapp job {job.name}", exc, "retrying at its next turn")
            return
        level = logging.INFO if n and job.name != "queue-depth" else logging.DEBUG
        logger.log(level, 'forqapp job "%s" %s in %.3fs', job.name, DONE.get(job.name, "done: %d") % n,
                   time.monotonic() - started)


class ServerJobs:
    """The jobs of a ``forq_serve`` API worker (:mod:`forqapp.api.asgi`): a :class:`Scheduler`
    thread, whose lease changes are said on stdout as the ``forq_jobs`` command says them, and its
    jobs logged at ``verbosity``. Each worker of each server runs one; the lease picks the one that
    runs the jobs. :meth:`stop` gives the lease up (at the worker's lifespan shutdown)."""

    def __init__(self, verbosity: int = 1):
        self.verbosity = verbosity
        self.ran = False  # whether this worker ran the jobs at some point
        process.configure_logging(verbosity, __name__)
        self.scheduler = Scheduler(on_lease=self._on_lease)

    def _say(self, line: str) -> None:
        if self.verbosity >= 1:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def _on_lease(self, running: bool) -> None:
        self.ran = self.ran or running
        self._say(self.scheduler.lease_line(running))

    def start(self) -> None:
        self.scheduler.start_thread()

    def stop(self) -> None:
        """Stop the scheduler and wait for it: its job in progress ends, and the lease is given up
        (another server's scheduler takes over at once). Blocks: call it off the event loop."""
        self.scheduler.stop()
        self.scheduler.join()
        if self.ran:
            process.mark_dead()  # this worker's live gauges, as forq_jobs did
            self._say("forq_jobs: stopped")
