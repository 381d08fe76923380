"""Health and the background jobs' work (docs: how-to/jobs.md): thin wrappers over the store's
job SQL, counting metrics."""

from __future__ import annotations

from typing import TypeVar

from .. import metrics, store
from ..conf import forq_settings
from . import base
from .base import STAGE_TTL_MS, _store
from .notify import kick

T = TypeVar("T")

# --- health ---------------------------------------------------------------------------------


def healthy(*, using: str | None = None) -> bool:
    try:
        _store(using).ping()
        return True
    except Exception:  # noqa: BLE001 - any failure to reach the database is "unhealthy"
        return False


# --- background jobs (docs: how-to/jobs.md): thin wrappers over the store's job SQL, counting metrics ---------


def move_expired_to_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Expired regular messages (ready or failed, never processing) → their DLQ. Also forgets
    dedup ids whose window has ended (not counted: they are not messages), so the dedup table
    holds about a window's sends and this job's interval more, not an hour's (it ran with the
    62-minute ``expired-dlq`` before)."""
    st = _store(using)
    if dry_run:
        return st.count_expired(base.now_ms(), False)
    now = base.now_ms()
    n = st.move_expired_to_dlq(now, forq_settings.dlq_ttl_ms)
    metrics.moved_to_dlq("expired", n)
    st.delete_expired_dedup(now)
    return n


def move_failed_to_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Failed regular messages → their DLQ (failure_reason max_attempts_reached)."""
    st = _store(using)
    if dry_run:
        return st.count_failed(False)
    n = st.move_failed_to_dlq(base.now_ms(), forq_settings.dlq_ttl_ms)
    metrics.moved_to_dlq("failed", n)
    return n


def recover_stale(*, dry_run: bool = False, using: str | None = None) -> int:
    """Deliveries whose lease has ended → ready (or failed when out of attempts). A safety net: a
    receive takes such a delivery by itself."""
    st = _store(using)
    if dry_run:
        return st.count_stale(base.now_ms())
    n = st.recover_stale(base.now_ms(), forq_settings.FORQ_MAX_ATTEMPTS)
    metrics.stale_recovered(n)
    if n:
        kick(st.alias)
    return n


def delete_expired_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Expired DLQ messages → deleted. Also deletes rows staged by Spark jobs that never published
    nor discarded them within ``STAGE_TTL_MS`` (they were never messages: not counted)."""
    st = _store(using)
    now = base.now_ms()
    if dry_run:
        return st.count_expired(now, True)
    n = st.delete_expired_dlq(now)
    metrics.cleaned_up("expired", n)
    st.delete_abandoned_staged(now - STAGE_TTL_MS)
    return n


def delete_failed_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    st = _store(using)
    if dry_run:
        return st.count_failed(True)
    n = st.delete_failed_dlq()
    metrics.cleaned_up("failed", n)
    return n


def optimize_database(*, dry_run: bool = False, using: str | None = None) -> int:
    """``PRAGMA optimize`` on SQLite (the store decides what "optimize" means for its database)."""
    st = _store(using)
    if not dry_run:
        st.optimize()
    return 0


def in_flight_counts(*, using: str | None = None) -> dict[str, int]:
    """{queue: messages under a live lease} for every queue that has any."""
    return _store(using).in_flight_by_queue(base.now_ms())


def ready_group_counts(*, using: str | None = None) -> dict[str, int]:
    """{queue: message groups with ready messages} for every queue that has any."""
    return _store(using).ready_groups_by_queue()


def queue_depths(*, using: str | None = None) -> list[store.QueueDepth]:
    """(queue, is_dlq, messages) for every queue."""
    st = _store(using)
    return st.queue_depths()
