"""Health and the background jobs' work (docs: how-to/jobs.md): thin wrappers over the store's
job SQL, counting metrics."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import socket
import threading
from typing import TypeVar

from django.db import connections

from .. import errors, metrics, store
from ..conf import forq_settings
from . import base
from .base import STAGE_TTL_MS, _store
from .notify import kick

T = TypeVar("T")
logger = logging.getLogger("forqapp.health")

# --- health ---------------------------------------------------------------------------------


def healthy(*, using: str | None = None) -> bool:
    try:
        _store(using).ping()
        return True
    except Exception:  # noqa: BLE001 - any failure to reach the database is "unhealthy"
        return False


#: How long ``/healthcheck`` waits for the database's answer before it answers 503 itself: a load
#: balancer must hear the truth at once, not its own timeout, when the database is out of reach.
HEALTH_TIMEOUT_S = 2.0
# Kernel-level bounds on the probe's own PostgreSQL socket (TCP_USER_TIMEOUT, ms): a ping sent into
# a cut link fails after this instead of TCP's retransmissions for a quarter of an hour.
HEALTH_TCP_USER_TIMEOUT_MS = 5000
_health_pool: concurrent.futures.ThreadPoolExecutor | None = None
_health_pending: concurrent.futures.Future[str | None] | None = None
_health_lock = threading.Lock()


def _health_probe(using: str | None) -> str | None:
    """The ping, on the probe's own thread and connection: None when the database answered, else
    why not (:func:`forqapp.errors.unavailable`'s words, or the error's type)."""
    st = _store(using)
    try:
        _bound_socket(st.alias)
        st.ping()
        return None
    except Exception as exc:  # noqa: BLE001 - any failure to reach the database is "unhealthy"
        with contextlib.suppress(Exception):
            connections[st.alias].close()  # a broken connection is not kept for the next probe
        return errors.unavailable(exc) or f"the database answered {type(exc).__name__}"


def _bound_socket(alias: str) -> None:
    """TCP_USER_TIMEOUT on the probe's PostgreSQL connection (opened now if need be), so a probe
    stuck on a cut link ends by itself and the next one reconnects."""
    connection = connections[alias]
    if connection.vendor != "postgresql" or not hasattr(socket, "TCP_USER_TIMEOUT"):
        return
    connection.ensure_connection()
    fd = connection.connection.pgconn.socket
    sock = socket.socket(fileno=os.dup(fd))
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, HEALTH_TCP_USER_TIMEOUT_MS)
    finally:
        sock.close()  # the duplicate only; the option belongs to the socket both name


async def health(*, using: str | None = None, timeout_s: float | None = None) -> str | None:
    """``/healthcheck``'s answer: None when the database answered a ping within ``timeout_s``
    (:data:`HEALTH_TIMEOUT_S`), else why not, said in one log line a second. The ping runs on a
    thread of its own, never queued behind the requests on the database threads, and one at a
    time: while a ping hangs on a database out of reach, every health check waits on that same ping
    for at most ``timeout_s``, so a load balancer that polls often adds no threads nor connections."""
    global _health_pool, _health_pending
    with _health_lock:
        if _health_pool is None:
            _health_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="forq-health")
        if _health_pending is None or _health_pending.done():
            _health_pending = _health_pool.submit(_health_probe, using)
        pending = _health_pending
    limit = HEALTH_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        reason = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(pending)), limit)
    except TimeoutError:
        reason = f"the database did not answer a ping within {limit:g} s"
    if reason is not None:
        errors.say_unavailable(logger, "forqapp healthcheck", reason, "answered 503")
    return reason


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
    n = st.move_expired_to_dlq(now, forq_settings.dlq_ttl_ms, forq_settings.queue_ttl_ms)
    metrics.moved_to_dlq("expired", n)
    st.delete_expired_dedup(now)
    return n


def move_failed_to_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Failed regular messages → their DLQ (failure_reason max_attempts_reached, or fatal_error for a consumer's)."""
    st = _store(using)
    if dry_run:
        return st.count_failed(False)
    n = st.move_failed_to_dlq(base.now_ms(), forq_settings.dlq_ttl_ms, forq_settings.queue_ttl_ms)
    metrics.moved_to_dlq("failed", n)
    return n


def recover_stale(*, dry_run: bool = False, using: str | None = None) -> int:
    """Deliveries whose lease has ended → ready (or failed when out of attempts). A safety net: a
    receive takes such a delivery by itself. Also drops the message groups' rows left without
    messages (not counted: they are not messages), which a claim would drop only at their turn."""
    st = _store(using)
    if dry_run:
        return st.count_stale(base.now_ms())
    n = st.recover_stale(base.now_ms(), forq_settings.FORQ_MAX_ATTEMPTS)
    metrics.stale_recovered(n)
    st.drop_empty_groups()
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
