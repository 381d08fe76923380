"""The queue's operations: validation → store (SQL) → metrics and wake-ups.

The HTTP API, the Python API (:mod:`forqapp.api` re-exported from ``forqapp``), the worker, the
admin, the UI pages and the jobs all call these functions; none of them writes SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from django.db import connections, transaction

from . import db, errors, ids, metrics, store, utils, validation
from .conf import forq_settings
from .errors import ForqError
from .store import Delivery, NewMessage, StagedMessage, Store
from .vocab import SNAPSHOT_COLUMNS, base_of

T = TypeVar("T")


now_ms = utils.now_ms  # Forq's clock (Unix ms), here for the callers that always took it from services


def alias() -> str:
    return str(forq_settings.FORQ_DATABASE)


def _store(using: str | None = None) -> Store:
    return store.for_alias(using or alias())


@dataclass
class ReceivedMessage:
    """A delivered message. ``receipt`` names this delivery: ack/nack must echo it."""

    id: str
    queue: str
    content: str
    attempts: int
    receipt: int

    @classmethod
    def from_row(cls, row: Delivery) -> ReceivedMessage:
        return cls(id=row.id, queue=row.queue, content=row.content, attempts=row.attempts, receipt=row.receipt)

    def json(self) -> Any:
        """``content`` parsed as JSON."""
        import json

        return json.loads(self.content)


# --- produce --------------------------------------------------------------------------------


def _new_row(message_id: str, queue: str, content: Any, process_after: Any, now: int, ttl_ms: int,
             limit: int | None = None) -> NewMessage:
    due = validation.process_after(process_after, now)
    return NewMessage(message_id, queue, validation.content(content, limit), due, now, due + ttl_ms)


def _refuse_nul(st: Store, contents: Iterable[str]) -> None:
    if not st.text_holds_nul and any("\x00" in c for c in contents):
        raise ForqError(errors.BODY_INVALID, "content with NUL characters cannot be stored on this database")


def _insert(st: Store, rows: list[NewMessage]) -> None:
    _refuse_nul(st, (r.content for r in rows))
    st.insert(rows)


def _kick(using: str) -> None:
    """Messages became ready: wake this process's waiters now rather than at the next poll, once
    the write is visible (on commit when inside the caller's ``atomic()``; never on rollback)."""
    from .notify import notifier_for

    notifier = notifier_for(using)
    if connections[using].in_atomic_block:
        transaction.on_commit(notifier.kick, using=using)
    else:
        notifier.kick()


def _after_produce(using: str, queue: str, count: int) -> None:
    metrics.produced(queue, count)
    _kick(using)


def send(queue: str, content: str, process_after: int | None = None, *, using: str | None = None) -> str:
    """Put one message on ``queue``; returns its id. Inside the caller's ``transaction.atomic()`` on
    the same database, the message commits or rolls back with the caller's own writes."""
    queue = validation.queue_name(queue, produce=True)
    now = now_ms()
    row = _new_row(ids.new_id(), queue, content, process_after, now, forq_settings.queue_ttl_ms)
    st = _store(using)
    _insert(st, [row])
    _after_produce(st.alias, queue, 1)
    return row.id


# ``NewMessage(...)`` runs a generated ``__new__`` (~0.4 µs); building the tuple directly costs a
# third of that, which shows on send_many's 100,000+ rows a second.
_new_message: Callable[[tuple[str, str, str, int, int, int]], NewMessage] = partial(tuple.__new__, NewMessage)


def send_many(queue: str, contents: Iterable[Any], process_after: int | None = None, *,
              using: str | None = None) -> list[str]:
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
        else _new_message((message_id, queue, content(item, limit), due, now, due + ttl))
        for message_id, item in zip(ids.new_ids(len(contents)), contents, strict=True)
    ]
    if not rows:
        return []
    st = _store(using)
    with transaction.atomic(using=st.alias):
        _insert(st, rows)
    _after_produce(st.alias, queue, len(rows))
    return [r.id for r in rows]


# --- consume --------------------------------------------------------------------------------


def claim(queue: str, *, using: str | None = None) -> ReceivedMessage | None:
    """Take the oldest due message of ``queue`` now, or None (no waiting)."""
    queue = validation.queue_name(queue)
    row = _store(using).claim(queue, now_ms())
    if row is None:
        return None
    metrics.consumed(queue, 1)
    return ReceivedMessage.from_row(row)


def claim_many(queue: str, limit: int, *, using: str | None = None) -> list[ReceivedMessage]:
    queue = validation.queue_name(queue)
    rows = _store(using).claim_many(queue, now_ms(), limit)
    if rows:
        metrics.consumed(queue, len(rows))
    return [ReceivedMessage.from_row(r) for r in rows]


def receive(queue: str, wait: float = 0, *, using: str | None = None) -> ReceivedMessage | None:
    """Take the oldest due message of ``queue``, waiting up to ``wait`` seconds for one
    (:func:`forqapp.waiting.claim`)."""
    from . import waiting

    return waiting.claim(lambda: claim(queue, using=using), (queue,), wait, using=using)


def _settled(done: bool) -> None:
    if not done:
        raise ForqError(errors.NOT_FOUND_MESSAGE, "no such delivery (wrong receipt, queue or id)")


def ack(message: ReceivedMessage, *, using: str | None = None) -> None:
    ack_delivery(message.queue, message.id, message.receipt, using=using)


def nack(message: ReceivedMessage, error: str | BaseException | None = None, *, using: str | None = None) -> None:
    """Retry later (Forq's backoff); ``error`` (an exception or text) is kept as the message's
    ``last_error``, which goes with it to the DLQ."""
    nack_delivery(message.queue, message.id, message.receipt, using=using, error=error)


def ack_delivery(queue: str, message_id: str, receipt: int, *, using: str | None = None) -> None:
    queue, message_id = validation.queue_name(queue), validation.message_id(message_id)
    _settled(_store(using).ack(queue, message_id, receipt))
    metrics.acked(queue, 1)


def nack_delivery(queue: str, message_id: str, receipt: int, *, using: str | None = None,
                  error: str | BaseException | None = None) -> None:
    queue, message_id = validation.queue_name(queue), validation.message_id(message_id)
    _settled(_store(using).nack(queue, message_id, receipt, now_ms(), forq_settings.FORQ_MAX_ATTEMPTS,
                                forq_settings.FORQ_BACKOFF_MS, describe_error(error)))
    metrics.nacked(queue, 1)


def ack_many(queue: str, deliveries: Iterable[tuple[str, int]], *, using: str | None = None) -> int:
    """Ack [(id, receipt)] in one transaction; returns how many were still current."""
    queue = validation.queue_name(queue)
    valid = [(validation.message_id(m), int(r)) for m, r in deliveries]
    st = _store(using)
    with transaction.atomic(using=st.alias):
        n = st.ack_many(queue, valid)
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
    queue, message_id = validation.queue_name(message.queue), validation.message_id(message.id)
    _settled(_store(using).fail(queue, message_id, message.receipt, now_ms(), describe_error(error)))
    metrics.failed(queue)


def release(message: ReceivedMessage, *, using: str | None = None) -> bool:
    """Give back a claimed message that no consumer saw (its attempt is not counted)."""
    st = _store(using)
    done = st.release(message.queue, message.id, message.receipt, now_ms())
    if done:
        _kick(st.alias)
    return done


def release_many(queue: str, deliveries: Iterable[tuple[str, int]], *, using: str | None = None) -> int:
    """Give back [(id, receipt)] claimed but never seen by a consumer, in one transaction (their
    attempts are not counted); returns how many were still current."""
    queue = validation.queue_name(queue)
    valid = [(validation.message_id(m), int(r)) for m, r in deliveries]
    if not valid:
        return 0
    st = _store(using)
    with transaction.atomic(using=st.alias):
        n = st.release_many(queue, valid, now_ms())
        if n:
            _kick(st.alias)
    return n


def extend(message: ReceivedMessage, *, using: str | None = None) -> bool:
    """Renew the lease of a delivery (heartbeat); updates ``message.receipt``. False if it was lost."""
    receipt = _store(using).extend(message.queue, message.id, message.receipt, now_ms())
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
    st = _store(using)
    n = st.requeue(dlq, message_id, now_ms(), forq_settings.queue_ttl_ms)
    if n:
        metrics.requeued(base_of(dlq), n)
        _kick(st.alias)
    return n


def delete_dead(dlq: str, message_id: str | None = None, *, using: str | None = None) -> int:
    """Delete one message (or all) of a DLQ."""
    dlq = validation.dlq_name(dlq)
    if message_id is not None:
        message_id = validation.message_id(message_id)
    n = _store(using).delete_dlq(dlq, message_id)
    metrics.cleaned_up("deleted_by_user", n)
    return n


# --- bulk (the Spark connector) -------------------------------------------------------------

STAGE_TTL_MS = 24 * 3_600_000


def stage(queue: str, token: str, items: Iterable[dict[str, Any]], *, using: str | None = None) -> int:
    """Write messages (``{"content", "processAfter"?}`` dicts) that stay invisible until
    :func:`publish_staged` (or are discarded)."""
    queue = validation.queue_name(queue, produce=True)
    now = now_ms()
    items = list(items)
    limit = forq_settings.FORQ_MAX_CONTENT_BYTES
    content, process_after = validation.content, validation.process_after
    rows = [
        StagedMessage(message_id, content(item.get("content"), limit),
                      process_after(item.get("processAfter"), now))
        for message_id, item in zip(ids.new_ids(len(items)), items, strict=True)
    ]
    st = _store(using)
    _refuse_nul(st, (r.content for r in rows))
    with transaction.atomic(using=st.alias):
        st.stage(token, queue, rows, now)
    return len(rows)


def publish_staged(staged: Sequence[tuple[str, str]], *, using: str | None = None) -> int:
    """Make all rows staged under [(token, queue)] visible, in one transaction."""
    st = _store(using)
    with transaction.atomic(using=st.alias):
        published = st.publish_staged(staged, now_ms(), forq_settings.queue_ttl_ms,
                                      forq_settings.FORQ_PROCESS_AFTER_PAST_TOLERANCE_MS)
    for queue, n in published.items():
        if n:
            _after_produce(st.alias, queue, n)
    return sum(published.values())


def discard_staged(staged: Sequence[tuple[str, str]], *, using: str | None = None) -> int:
    st = _store(using)
    with transaction.atomic(using=st.alias):
        return st.discard_staged(staged)


def snapshot_page(queue: str, after: str = "", upto: str | None = None, limit: int = 1000, *,
                  using: str | None = None) -> list[dict[str, Any]]:
    queue = validation.queue_name(queue)
    rows = _store(using).snapshot_page(queue, after, upto, limit)
    return [dict(zip(SNAPSHOT_COLUMNS, r, strict=True)) for r in rows]


def snapshot_bounds(queue: str, *, using: str | None = None) -> dict[str, Any]:
    queue = validation.queue_name(queue)
    count, lo, hi = _store(using).snapshot_bounds(queue)
    return {"count": count, "minId": lo, "maxId": hi}


# --- API-key throttle -----------------------------------------------------------------------


def auth_blocked(address: str, *, using: str | None = None) -> bool:
    """Is ``address`` refused for too many wrong keys? (Shared by every process and host.)"""
    return _store(using).auth_blocked_until(address[:100]) > now_ms()


def auth_retry_after(address: str, *, using: str | None = None) -> int:
    """Whole seconds until ``address`` may try a key again (a 429's ``Retry-After``); 0: not blocked."""
    left_ms = _store(using).auth_blocked_until(address[:100]) - now_ms()
    return max(0, -(-left_ms // 1000))  # rounded up: retrying at once after would still be refused


def auth_failed(address: str, *, using: str | None = None) -> None:
    """Count a wrong key from ``address``: the ``FORQ_AUTH_MAX_FAILURES``-th within
    ``FORQ_AUTH_FAILURE_WINDOW_S`` blocks it for ``FORQ_AUTH_BLOCK_S``."""
    _store(using).auth_failed(address[:100], now_ms(), forq_settings.FORQ_AUTH_FAILURE_WINDOW_S * 1000,
                   forq_settings.FORQ_AUTH_MAX_FAILURES, forq_settings.FORQ_AUTH_BLOCK_S * 1000)


# --- login throttle (the API-key throttle's table, under "login-…" keys) ----------------------


def login_blocked_until(keys: Iterable[str], *, using: str | None = None) -> int:
    """Until when (Unix ms) a login is refused for any of ``keys`` (:mod:`forqapp.login_throttle`'s
    address and username keys); 0 when it is not."""
    st = _store(using)
    until = max((st.auth_blocked_until(key[:100]) for key in keys), default=0)
    return until if until > now_ms() else 0


def login_failed(keys: Iterable[str], *, using: str | None = None) -> int:
    """Count a failed login against each of ``keys``: the ``FORQ_LOGIN_MAX_FAILURES``-th within
    ``FORQ_LOGIN_FAILURE_WINDOW_S`` blocks that key for ``FORQ_LOGIN_BLOCK_S``. Returns until when
    the login is now blocked (Unix ms, or 0)."""
    st = _store(using)
    now = now_ms()
    window = forq_settings.FORQ_LOGIN_FAILURE_WINDOW_S * 1000
    limit = forq_settings.FORQ_LOGIN_MAX_FAILURES
    block = forq_settings.FORQ_LOGIN_BLOCK_S * 1000
    return max((st.login_failed(key[:100], now, window, limit, block) for key in keys), default=0)


# --- health ---------------------------------------------------------------------------------


def healthy(*, using: str | None = None) -> bool:
    try:
        _store(using).ping()
        return True
    except Exception:  # noqa: BLE001 - any failure to reach the database is "unhealthy"
        return False


# --- background jobs (README, "Background jobs"): thin wrappers over the store's job SQL, counting metrics ---------


def move_expired_to_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Expired regular messages (ready or failed, never processing) → their DLQ."""
    st = _store(using)
    if dry_run:
        return st.count_expired(now_ms(), False)
    n = st.move_expired_to_dlq(now_ms(), forq_settings.dlq_ttl_ms)
    metrics.moved_to_dlq("expired", n)
    return n


def move_failed_to_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Failed regular messages → their DLQ (failure_reason max_attempts_reached)."""
    st = _store(using)
    if dry_run:
        return st.count_failed(False)
    n = st.move_failed_to_dlq(now_ms(), forq_settings.dlq_ttl_ms)
    metrics.moved_to_dlq("failed", n)
    return n


def recover_stale(*, dry_run: bool = False, using: str | None = None) -> int:
    """Deliveries older than the visibility timeout → ready (or failed when out of attempts)."""
    st = _store(using)
    visibility = forq_settings.FORQ_VISIBILITY_TIMEOUT_MS
    if dry_run:
        return st.count_stale(now_ms(), visibility)
    n = st.recover_stale(now_ms(), visibility, forq_settings.FORQ_MAX_ATTEMPTS)
    metrics.stale_recovered(n)
    if n:
        _kick(st.alias)
    return n


def delete_expired_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Expired DLQ messages → deleted. Also deletes rows staged by Spark jobs that never published
    nor discarded them within ``STAGE_TTL_MS`` (they were never messages: not counted)."""
    st = _store(using)
    now = now_ms()
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


def queue_depths(*, using: str | None = None) -> list[store.QueueDepth]:
    """(queue, is_dlq, messages) for every queue."""
    st = _store(using)
    return st.queue_depths()


# --- wake-ups (the notifier's reads) and the database threads -------------------------------


def wake_version(*, using: str | None = None) -> int:
    """A number that changes when another connection commits something that may make a message
    due (see :attr:`forqapp.store.Store.wakeups`)."""
    return _store(using).data_version()


def due_counts(queues: Sequence[str], limit: int, *, using: str | None = None) -> dict[str, int]:
    """How many messages (up to ``limit`` each) are due now in ``queues``; queues with none are
    left out. A read: takes no write lock."""
    return _store(using).has_due(queues, now_ms(), limit)


def wake_poll_interval(*, using: str | None = None) -> float:
    """Seconds the notifier sleeps between :func:`wake_version` checks while consumers wait."""
    return _store(using).poll_interval(forq_settings.FORQ_WAKE_POLL_MS / 1000)


def default_db_threads(*, using: str | None = None) -> int:
    """The async API's database threads when ``FORQ_DB_THREADS`` is unset."""
    return _store(using).default_db_threads


async def run_async(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run a service function (``fn``) on one of the database threads of :mod:`forqapp.db`, whose
    Django connections stay open: how the async API calls the services."""
    return await db.run(fn, *args, **kwargs)


def startup_problems(*, using: str | None = None) -> list[str]:
    """What stops a server from starting on the database, before it is even opened."""
    return _store(using).startup_problems()


# --- leases -----------------------------------------------------------------------------------


def acquire_lease(name: str, holder: str, ttl_ms: int, *, replacing: str = "", using: str | None = None) -> bool:
    """Take or renew the named lease for ``holder`` (one atomic statement); False while another
    live holder has it. ``replacing`` names a holder the caller knows is dead: taken over at once."""
    return _store(using).lease_acquire(name, holder, now_ms(), int(ttl_ms), replacing)


def lease_holder(name: str, *, using: str | None = None) -> store.LeaseHolder | None:
    """(holder, expires_at in Unix ms) of the named lease, or None when nobody holds it."""
    return _store(using).lease_holder(name)


def release_lease(name: str, holder: str, *, using: str | None = None) -> bool:
    """Give the named lease up if ``holder`` has it."""
    return _store(using).lease_release(name, holder)
