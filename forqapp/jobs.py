"""Forq's background jobs (SPEC §2): each a plain function returning how many messages it handled,
and a :class:`Scheduler` that runs them all on Forq's intervals.

Run them with ``manage.py forq_jobs`` (one long-running process), one at a time from cron with
``manage.py forq_jobs run NAME``, or inside a worker with ``manage.py forq_worker --with-jobs``.
The SQL lives in the store; sweeps work in batches of 1,000 rows, one short write transaction each,
and never touch a message in processing (except ``stale``, whose business that is).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import OperationalError, close_old_connections, connections

from . import metrics, services
from .conf import forq_settings

logger = logging.getLogger(__name__)


def expired(*, dry_run: bool = False, using: str | None = None) -> int:
    """Expired regular messages → their DLQ (``message_expired``)."""
    return services.move_expired_to_dlq(dry_run=dry_run, using=using)


def failed(*, dry_run: bool = False, using: str | None = None) -> int:
    """Failed regular messages → their DLQ (``max_attempts_reached``)."""
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


_depth_labels: set = set()


def queue_depth(*, dry_run: bool = False, using: str | None = None) -> int:
    """Refresh the ``forq_queue_depth`` gauge (and the UI's depth history, when installed).
    Returns the number of queues."""
    global _depth_labels
    depths = services.queue_depths(using=using)
    if dry_run:
        return len(depths)
    _depth_labels = metrics.set_queue_depths(depths, _depth_labels)
    try:
        from .ui.history import record_depth_samples
    except ImportError:
        pass
    else:
        try:
            record_depth_samples(depths)
        except Exception:  # the gauge is set; the UI's history must not fail the job
            logger.exception("forqapp job queue-depth: recording the depth history failed")
    return len(depths)


@dataclass(frozen=True)
class Job:
    name: str
    func: Callable[..., int]
    interval: float  # seconds, Forq's
    metrics_only: bool = False

    def every(self) -> float:
        """The interval in force: ``FORQ_JOB_INTERVALS[name]`` if set; the stale job also runs at
        least every half visibility timeout, so a crashed worker's messages come back in time."""
        overrides = getattr(settings, "FORQ_JOB_INTERVALS", None) or {}
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
        Job("queue-depth", queue_depth, 30, metrics_only=True),
    )
}


def run(name: str, *, dry_run: bool = False, using: str | None = None) -> int:
    """Run one job by name; returns its count. Counted in ``forq_job_runs_total``."""
    job = JOBS[name]
    try:
        n = job.func(dry_run=dry_run, using=using)
    except Exception:
        if not dry_run:
            metrics.job_ran(name, False)
        raise
    if not dry_run:
        metrics.job_ran(name, True)
    return n


def enabled_jobs() -> list[Job]:
    """The jobs the scheduler runs: queue-depth only when metrics are on (or the UI keeps history)."""
    jobs = []
    for job in JOBS.values():
        if job.metrics_only and not (forq_settings.FORQ_METRICS_ENABLED or _ui_history_installed()):
            continue
        jobs.append(job)
    return jobs


def _ui_history_installed() -> bool:
    try:
        from .ui import history  # noqa: F401
    except ImportError:
        return False
    return True


class Scheduler:
    """Runs every enabled job once at start, then each on its interval, until :meth:`stop`.

    A failing job is logged and tried again at its next turn; it never stops the others.
    """

    def __init__(self, jobs: list[Job] | None = None, *, using: str | None = None):
        self.jobs = jobs if jobs is not None else enabled_jobs()
        self.using = using
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start_thread(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run_forever, name="forq-jobs", daemon=True)
        self._thread.start()
        return self._thread

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run_forever(self) -> None:
        next_run = {job.name: time.monotonic() for job in self.jobs}
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                for job in self.jobs:
                    if self._stop.is_set():
                        break
                    if now >= next_run[job.name]:
                        self._run_one(job)
                        next_run[job.name] = time.monotonic() + job.every()
                if not self.jobs:
                    self._stop.wait(1.0)
                    continue
                self._stop.wait(max(0.0, min(next_run.values()) - time.monotonic()))
        finally:
            connections.close_all()

    def _run_one(self, job: Job) -> None:
        close_old_connections()
        started = time.monotonic()
        try:
            n = run(job.name, using=self.using)
        except OperationalError:
            logger.exception("forqapp job %s failed (database); retrying at its next turn", job.name)
            connections[self.using or services.alias()].close()
            return
        except Exception:
            logger.exception("forqapp job %s failed; retrying at its next turn", job.name)
            return
        level = logging.INFO if n and job.name != "queue-depth" else logging.DEBUG
        logger.log(level, "forqapp job %s: %d in %.3fs", job.name, n, time.monotonic() - started)
