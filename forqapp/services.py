"""The queue's operations: validation → store (SQL) → metrics and wake-ups.

The HTTP API, the Python API (:mod:`forqapp.api` re-exported from ``forqapp``), the worker, the
admin, the UI pages and the jobs all call these functions; none of them writes SQL.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction

from . import errors, ids, metrics, store, validation
from .conf import forq_settings
from .errors import ForqError
from .models import DLQ_SUFFIX


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def alias() -> str:
    return forq_settings.FORQ_DATABASE


def _db(using: str | None = None):
    connection = connections[using or alias()]
    return store.for_connection(connection), store.raw(connection), connection


def queue_type(queue: str) -> str:
    return "dlq" if queue.endswith(DLQ_SUFFIX) else "regular"


@dataclass
class ReceivedMessage:
    """A delivered message. ``receipt`` names this delivery: ack/nack must echo it."""

    id: str
    queue: str
    content: str
    attempts: int
    receipt: int

    @classmethod
    def from_row(cls, row) -> ReceivedMessage:
        return cls(id=row[0], queue=row[1], content=row[2], attempts=row[3], receipt=row[4])

    def json(self) -> Any:
        """``content`` parsed as JSON."""
        import json

        return json.loads(self.content)


# --- produce --------------------------------------------------------------------------------


def _new_row(message_id: str, queue: str, content: Any, process_after: Any, now: int, ttl_ms: int,
             limit: int | None = None) -> tuple:
    due = validation.process_after(process_after, now)
    return (message_id, queue, validation.content(content, limit), due, now, due + ttl_ms)


def _refuse_nul(st, contents) -> None:
    if not st.TEXT_HOLDS_NUL and any("\x00" in c for c in contents):
        raise ForqError(errors.BODY_INVALID, "content with NUL characters cannot be stored on this database")


def _insert(st, conn, rows: list[tuple]) -> None:
    _refuse_nul(st, (r[2] for r in rows))
    st.insert(conn, rows)


def _after_produce(connection, queue: str, count: int) -> None:
    metrics.produced(queue, count)
    from .notify import notifier_for

    notifier = notifier_for(connection.alias)
    if connection.in_atomic_block:
        transaction.on_commit(notifier.kick, using=connection.alias)
    else:
        notifier.kick()


def send(queue: str, content: str, process_after: int | None = None, *, using: str | None = None) -> str:
    """Put one message on ``queue``; returns its id. Inside the caller's ``transaction.atomic()`` on
    the same database, the message commits or rolls back with the caller's own writes."""
    queue = validation.queue_name(queue, produce=True)
    now = now_ms()
    row = _new_row(ids.new_id(), queue, content, process_after, now, forq_settings.queue_ttl_ms)
    st, conn, connection = _db(using)
    _insert(st, conn, [row])
    _after_produce(connection, queue, 1)
    return row[0]


def send_many(queue: str, contents, process_after: int | None = None, *, using: str | None = None) -> list[str]:
    """Put many messages on ``queue`` in one transaction; returns their ids, in order.

    ``contents`` holds strings, or ``{"content": ..., "processAfter": ...}`` dicts."""
    queue = validation.queue_name(queue, produce=True)
    now = now_ms()
    ttl = forq_settings.queue_ttl_ms
    contents = list(contents)
    limit = forq_settings.FORQ_MAX_CONTENT_BYTES  # read once: settings are looked up on access
    due = validation.process_after(process_after, now)
    content = validation.content
    rows = [
        _new_row(message_id, queue, item.get("content"), item.get("processAfter"), now, ttl, limit)
        if isinstance(item, dict)
        else (message_id, queue, content(item, limit), due, now, due + ttl)
        for message_id, item in zip(ids.new_ids(len(contents)), contents, strict=True)
    ]
    if not rows:
        return []
    st, conn, connection = _db(using)
    with transaction.atomic(using=connection.alias):
        _insert(st, conn, rows)
    _after_produce(connection, queue, len(rows))
    return [r[0] for r in rows]


# --- consume --------------------------------------------------------------------------------


def claim(queue: str, *, using: str | None = None) -> ReceivedMessage | None:
    """Take the oldest due message of ``queue`` now, or None (no waiting)."""
    queue = validation.queue_name(queue)
    st, conn, _ = _db(using)
    row = st.claim(conn, queue, now_ms())
    if row is None:
        return None
    metrics.consumed(queue, 1)
    return ReceivedMessage.from_row(row)


def claim_many(queue: str, limit: int, *, using: str | None = None) -> list[ReceivedMessage]:
    queue = validation.queue_name(queue)
    st, conn, _ = _db(using)
    rows = st.claim_many(conn, queue, now_ms(), limit)
    if rows:
        metrics.consumed(queue, len(rows))
    return [ReceivedMessage.from_row(r) for r in rows]


def receive(queue: str, wait: float = 0, *, using: str | None = None) -> ReceivedMessage | None:
    """Take the oldest due message of ``queue``, waiting up to ``wait`` seconds for one."""
    from .notify import notifier_for

    deadline = time.monotonic() + wait
    notifier = notifier_for(using or alias())
    while True:
        message = claim(queue, using=using)
        remaining = deadline - time.monotonic()
        if message is not None or remaining <= 0:
            return message
        notifier.wait(queue, remaining)


def _settle(op: str, queue: str, message_id: str, receipt: int, using: str | None, *args) -> None:
    queue = validation.queue_name(queue)
    message_id = validation.message_id(message_id)
    st, conn, _ = _db(using)
    if not getattr(st, op)(conn, queue, message_id, receipt, *args):
        raise ForqError(errors.NOT_FOUND_MESSAGE, "no such delivery (wrong receipt, queue or id)")


def ack(message: ReceivedMessage, *, using: str | None = None) -> None:
    ack_delivery(message.queue, message.id, message.receipt, using=using)


def nack(message: ReceivedMessage, error: str | BaseException | None = None, *, using: str | None = None) -> None:
    """Retry later (Forq's backoff); ``error`` (an exception or text) is kept as the message's
    ``last_error``, which goes with it to the DLQ."""
    nack_delivery(message.queue, message.id, message.receipt, using=using, error=error)


def ack_delivery(queue: str, message_id: str, receipt: int, *, using: str | None = None) -> None:
    _settle("ack", queue, message_id, receipt, using)
    metrics.acked(queue, 1)


def nack_delivery(queue: str, message_id: str, receipt: int, *, using: str | None = None,
                  error: str | BaseException | None = None) -> None:
    _settle("nack", queue, message_id, receipt, using, now_ms(), forq_settings.FORQ_MAX_ATTEMPTS,
            tuple(forq_settings.FORQ_BACKOFF_MS), describe_error(error))
    metrics.nacked(queue, 1)


def ack_many(queue: str, deliveries, *, using: str | None = None) -> int:
    """Ack [(id, receipt)] in one transaction; returns how many were still current."""
    queue = validation.queue_name(queue)
    deliveries = [(validation.message_id(m), int(r)) for m, r in deliveries]
    st, conn, connection = _db(using)
    with transaction.atomic(using=connection.alias):
        n = st.ack_many(conn, queue, deliveries)
    metrics.acked(queue, n)
    return n


MAX_ERROR_CHARS = 2_000  # a consumer's error is a diagnosis, not a log: keep rows small


def describe_error(error: str | BaseException | None) -> str | None:
    """``last_error`` text: an exception as ``module.Class: message`` (builtins unqualified)."""
    if error is None:
        return None
    if isinstance(error, BaseException):
        cls = type(error)
        name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
        error = f"{name}: {error}" if str(error) else name
    return str(error)[:MAX_ERROR_CHARS]


def fail(message: ReceivedMessage, error: str | BaseException | None = None, *, using: str | None = None) -> None:
    """Fail a delivery at once, without retries: the failed job moves it to the DLQ with the
    failure reason ``fatal_error``. ``error`` (an exception or text) is kept as ``last_error``."""
    _settle("fail", message.queue, message.id, message.receipt, using, now_ms(), describe_error(error))


def release(message: ReceivedMessage, *, using: str | None = None) -> bool:
    """Give back a claimed message that no consumer saw (its attempt is not counted)."""
    st, conn, connection = _db(using)
    done = st.release(conn, message.queue, message.id, message.receipt, now_ms())
    if done:
        from .notify import notifier_for

        notifier_for(connection.alias).kick()
    return done


def extend(message: ReceivedMessage, *, using: str | None = None) -> bool:
    """Renew the lease of a delivery (heartbeat); updates ``message.receipt``. False if it was lost."""
    st, conn, _ = _db(using)
    receipt = st.extend(conn, message.queue, message.id, message.receipt, now_ms())
    if receipt is None:
        return False
    message.receipt = receipt
    return True


# --- admin: dead-letter queues --------------------------------------------------------------


def requeue(dlq: str, message_id: str | None = None, *, using: str | None = None) -> int:
    """Move one message (or all) of a DLQ back to its queue, ready, keeping its FIFO place."""
    dlq = validation.dlq_name(dlq)
    if message_id is not None:
        message_id = validation.message_id(message_id)
    st, conn, connection = _db(using)
    n = st.requeue(conn, dlq, message_id, now_ms(), forq_settings.queue_ttl_ms)
    if n:
        metrics.requeued(dlq.removesuffix(DLQ_SUFFIX), n)
        from .notify import notifier_for

        notifier_for(connection.alias).kick()
    return n


def delete_dead(dlq: str, message_id: str | None = None, *, using: str | None = None) -> int:
    """Delete one message (or all) of a DLQ."""
    dlq = validation.dlq_name(dlq)
    if message_id is not None:
        message_id = validation.message_id(message_id)
    st, conn, _ = _db(using)
    n = st.delete_dlq(conn, dlq, message_id)
    metrics.cleaned_up("deleted_by_user", n)
    return n


# --- bulk (the Spark connector) -------------------------------------------------------------

STAGE_TTL_MS = 24 * 3_600_000


def stage(queue: str, token: str, items, *, using: str | None = None) -> int:
    """Write messages (``{"content", "processAfter"?}`` dicts) that stay invisible until
    :func:`publish_staged` (or are discarded)."""
    queue = validation.queue_name(queue, produce=True)
    now = now_ms()
    items = list(items)
    limit = forq_settings.FORQ_MAX_CONTENT_BYTES
    content, process_after = validation.content, validation.process_after
    rows = [
        (message_id, content(item.get("content"), limit), process_after(item.get("processAfter"), now))
        for message_id, item in zip(ids.new_ids(len(items)), items, strict=True)
    ]
    st, conn, connection = _db(using)
    _refuse_nul(st, (r[1] for r in rows))
    with transaction.atomic(using=connection.alias):
        st.stage(conn, token, queue, rows, now)
    return len(rows)


def publish_staged(staged, *, using: str | None = None) -> int:
    """Make all rows staged under [(token, queue)] visible, in one transaction."""
    st, conn, connection = _db(using)
    with transaction.atomic(using=connection.alias):
        published = st.publish_staged(conn, staged, now_ms(), forq_settings.queue_ttl_ms)
    for queue, n in published.items():
        if n:
            _after_produce(connection, queue, n)
    return sum(published.values())


def discard_staged(staged, *, using: str | None = None) -> int:
    st, conn, connection = _db(using)
    with transaction.atomic(using=connection.alias):
        return st.discard_staged(conn, staged)


def snapshot_page(queue: str, after: str = "", upto: str | None = None, limit: int = 1000, *,
                  using: str | None = None) -> list[dict]:
    queue = validation.queue_name(queue)
    st, conn, _ = _db(using)
    keys = ("id", "queue", "content", "status", "attempts", "received_at", "process_after",
            "failure_reason")
    return [dict(zip(keys, r, strict=True)) for r in st.snapshot_page(conn, queue, after, upto, limit)]


def snapshot_bounds(queue: str, *, using: str | None = None) -> dict:
    queue = validation.queue_name(queue)
    st, conn, _ = _db(using)
    count, lo, hi = st.snapshot_bounds(conn, queue)
    return {"count": count, "minId": lo, "maxId": hi}


# --- API-key throttle -----------------------------------------------------------------------


def auth_blocked(address: str, *, using: str | None = None) -> bool:
    """Is ``address`` refused for too many wrong keys? (Shared by every process and host.)"""
    st, conn, _ = _db(using)
    return st.auth_blocked_until(conn, address[:100]) > now_ms()


def auth_retry_after(address: str, *, using: str | None = None) -> int:
    """Whole seconds until ``address`` may try a key again (a 429's ``Retry-After``); 0: not blocked."""
    st, conn, _ = _db(using)
    left_ms = st.auth_blocked_until(conn, address[:100]) - now_ms()
    return max(0, -(-left_ms // 1000))  # rounded up: retrying at once after would still be refused


def auth_failed(address: str, *, using: str | None = None) -> None:
    """Count a wrong key from ``address``: the ``FORQ_AUTH_MAX_FAILURES``-th within
    ``FORQ_AUTH_FAILURE_WINDOW_S`` blocks it for ``FORQ_AUTH_BLOCK_S``."""
    st, conn, _ = _db(using)
    st.auth_failed(conn, address[:100], now_ms(), int(forq_settings.FORQ_AUTH_FAILURE_WINDOW_S) * 1000,
                   int(forq_settings.FORQ_AUTH_MAX_FAILURES), int(forq_settings.FORQ_AUTH_BLOCK_S) * 1000)


def login_blocked_until(keys, *, using: str | None = None) -> int:
    """Until when (Unix ms) a login is refused for any of ``keys`` (:mod:`forqapp.login_throttle`'s
    address and username keys); 0 when it is not."""
    st, conn, _ = _db(using)
    until = max((st.auth_blocked_until(conn, key[:100]) for key in keys), default=0)
    return until if until > now_ms() else 0


def login_failed(keys, *, using: str | None = None) -> int:
    """Count a failed login against each of ``keys``: the ``FORQ_LOGIN_MAX_FAILURES``-th within
    ``FORQ_LOGIN_FAILURE_WINDOW_S`` blocks that key for ``FORQ_LOGIN_BLOCK_S``. Returns until when
    the login is now blocked (Unix ms, or 0)."""
    st, conn, _ = _db(using)
    now = now_ms()
    window = int(forq_settings.FORQ_LOGIN_FAILURE_WINDOW_S) * 1000
    limit = int(forq_settings.FORQ_LOGIN_MAX_FAILURES)
    block = int(forq_settings.FORQ_LOGIN_BLOCK_S) * 1000
    return max((st.login_failed(conn, key[:100], now, window, limit, block) for key in keys), default=0)


# --- health ---------------------------------------------------------------------------------


def healthy(*, using: str | None = None) -> bool:
    try:
        st, conn, _ = _db(using)
        st.ping(conn)
        return True
    except Exception:  # noqa: BLE001 - any failure to reach the database is "unhealthy"
        return False


# --- background jobs (issue 3): thin wrappers over the store's job SQL, counting metrics ---------


def move_expired_to_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Expired regular messages (ready or failed, never processing) → their DLQ."""
    st, conn, _ = _db(using)
    if dry_run:
        return st.count_expired(conn, now_ms(), False)
    n = st.move_expired_to_dlq(conn, now_ms(), forq_settings.dlq_ttl_ms)
    metrics.moved_to_dlq("expired", n)
    return n


def move_failed_to_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Failed regular messages → their DLQ (failure_reason max_attempts_reached)."""
    st, conn, _ = _db(using)
    if dry_run:
        return st.count_failed(conn, False)
    n = st.move_failed_to_dlq(conn, now_ms(), forq_settings.dlq_ttl_ms)
    metrics.moved_to_dlq("failed", n)
    return n


def recover_stale(*, dry_run: bool = False, using: str | None = None) -> int:
    """Deliveries older than the visibility timeout → ready (or failed when out of attempts)."""
    st, conn, connection = _db(using)
    visibility = int(forq_settings.FORQ_VISIBILITY_TIMEOUT_MS)
    if dry_run:
        return st.count_stale(conn, now_ms(), visibility)
    n = st.recover_stale(conn, now_ms(), visibility, int(forq_settings.FORQ_MAX_ATTEMPTS))
    metrics.stale_recovered(n)
    if n:
        from .notify import notifier_for

        notifier_for(connection.alias).kick()
    return n


def delete_expired_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Expired DLQ messages → deleted. Also deletes rows staged by Spark jobs that never published
    nor discarded them within ``STAGE_TTL_MS`` (they were never messages: not counted)."""
    st, conn, _ = _db(using)
    now = now_ms()
    if dry_run:
        return st.count_expired(conn, now, True)
    n = st.delete_expired_dlq(conn, now)
    metrics.cleaned_up("expired", n)
    st.delete_abandoned_staged(conn, now - STAGE_TTL_MS)
    return n


def delete_failed_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    st, conn, _ = _db(using)
    if dry_run:
        return st.count_failed(conn, True)
    n = st.delete_failed_dlq(conn)
    metrics.cleaned_up("failed", n)
    return n


def optimize_database(*, dry_run: bool = False, using: str | None = None) -> int:
    """``PRAGMA optimize`` on SQLite (the store decides what "optimize" means for its database)."""
    st, conn, _ = _db(using)
    if not dry_run and hasattr(st, "optimize"):
        st.optimize(conn)
    return 0


def queue_depths(*, using: str | None = None) -> list[tuple[str, bool, int]]:
    """(queue, is_dlq, messages) for every queue."""
    st, conn, _ = _db(using)
    return st.queue_depths(conn)


# --- leases -----------------------------------------------------------------------------------


def acquire_lease(name: str, holder: str, ttl_ms: int, *, replacing: str = "", using: str | None = None) -> bool:
    """Take or renew the named lease for ``holder`` (one atomic statement); False while another
    live holder has it. ``replacing`` names a holder the caller knows is dead: taken over at once."""
    st, conn, _ = _db(using)
    return st.lease_acquire(conn, name, holder, now_ms(), int(ttl_ms), replacing)


def lease_holder(name: str, *, using: str | None = None) -> tuple[str, int] | None:
    """(holder, expires_at in Unix ms) of the named lease, or None when nobody holds it."""
    st, conn, _ = _db(using)
    return st.lease_holder(conn, name)


def release_lease(name: str, holder: str, *, using: str | None = None) -> bool:
    """Give the named lease up if ``holder`` has it."""
    st, conn, _ = _db(using)
    return st.lease_release(conn, name, holder)
