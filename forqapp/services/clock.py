"""One clock for every host on a PostgreSQL database: the database server's.

Every time column of the queue (a delayed message's due time, a lease's end, a schedule's next run,
a group's turn, a rate limit's next slot) is written and compared with :func:`forqapp.utils.now_ms`,
in whichever process and on whichever host. With ``FORQ_CLOCK = "database"`` (the default) and a
store whose database has a clock of its own (PostgreSQL's server), each process measures how far the
database's clock is from its host's — a few readings of ``clock_timestamp()``, each against the
midpoint of its round trip, the shortest round trip kept (:func:`forqapp.utils.estimate_clock_offset`)
— and ``now_ms()`` adds that offset from then on: hosts whose clocks disagree still agree on every
queue time, so a host 2 s ahead no longer delivers a delayed message 2 s early nor ends other hosts'
leases 2 s early. ``now_ms()`` itself never queries.

When it measures:

* when a connection to the queue's database opens (Django's ``connection_created``: before any
  statement of the caller, outside any transaction), if the last measurement is older than
  :data:`SYNC_EVERY_S` (a process on ``CONN_MAX_AGE = 0`` does not measure on every request);
* from the loops of the long-lived processes (:func:`keep_in_step`): the jobs lease's thread of
  ``forq_serve`` and ``forq_jobs``, and ``forq_worker``'s dispatcher — never inside a transaction.

One offset per process, for the queue's database (``FORQ_DATABASE``): forqapp keeps its queue on
one database. A new measurement replaces the offset only when it differs by more than its own
uncertainty (half its round trip, plus a millisecond): the clock does not jitter by a millisecond
each minute, and a database on the host itself keeps an offset of 0. An offset beyond
:data:`WARN_MS` is logged (the hosts' clocks should be synchronised anyway: NTP), and every
measurement sets the gauge ``forq_clock_offset_seconds``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from django.core.signals import setting_changed
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import metrics, store, utils
from ..conf import forq_settings
from ..utils import ClockEstimate
from .base import alias
from .db import database_errors

logger = logging.getLogger("forqapp.clock")

SYNC_EVERY_S = 60.0  # a process measures again after this long (its loops, or a new connection)
RETRY_S = 5.0  # … or after this, when the last try failed
SAMPLES = 3  # readings per measurement; the one with the shortest round trip counts
WARN_MS = 500  # an offset beyond this is logged
WARN_AGAIN_S = 3600.0  # … again after this long, or at once when it moves by more than WARN_MS
FAILURE_SAID_S = 600.0  # a measurement that fails is said at most this often (the database's own
# unavailability is said by the jobs, the worker and the health check)

_lock = threading.Lock()  # one measurement at a time per process
_next_at: float | None = None  # time.monotonic() when the next measurement is due; None: at once
_warned: tuple[float, int] | None = None  # (time.monotonic(), offset in ms) of the last warning
_failure_said: float | None = None  # time.monotonic() of the last line about a failed measurement
_last: ClockEstimate | None = None  # the last measurement's estimate


def follows_database(using: str | None = None) -> bool:
    """Whether the queue clock follows the database's here: ``FORQ_CLOCK = "database"`` and a
    database with a clock of its own (PostgreSQL)."""
    return forq_settings.FORQ_CLOCK == "database" and store.for_alias(using or alias()).has_clock


def sync(using: str | None = None, *, on: store.Store | None = None) -> ClockEstimate | None:
    """Measure the offset to the database's clock now and follow it (on ``using``'s connection of
    this thread, or on the store ``on``); the estimate, or None where nothing could be read or
    another thread of the process is measuring. Raises the database's errors (the callers below do
    not)."""
    global _next_at, _last
    target = on if on is not None else store.for_alias(using or alias())
    if not _lock.acquire(blocking=False):
        return None  # another thread of this process is measuring (never wait: its link may hang)
    try:
        try:
            estimate = utils.estimate_clock_offset(target.clock_samples(SAMPLES))
        except BaseException:
            _next_at = time.monotonic() + RETRY_S
            raise
        _next_at = time.monotonic() + SYNC_EVERY_S
        if estimate is not None:
            _last = estimate
            _follow(estimate)
        return estimate
    finally:
        _lock.release()


def last_estimate() -> ClockEstimate | None:
    """What the last measurement of this process found (None before the first): the offset it
    follows is within the estimate's uncertainty (half its round trip) plus a millisecond of it."""
    return _last


def _follow(estimate: ClockEstimate) -> None:
    current = utils.database_offset_ms()
    if abs(estimate.offset_us - current * 1000) > estimate.uncertainty_us + 1000:
        utils.set_database_offset_ms(round(estimate.offset_us / 1000))
    offset = utils.database_offset_ms()
    metrics.clock_offset(offset)
    _say(offset)


def _say(offset_ms: int) -> None:
    global _warned
    now = time.monotonic()
    if abs(offset_ms) > WARN_MS:
        if _warned is None or now - _warned[0] >= WARN_AGAIN_S or abs(offset_ms - _warned[1]) > WARN_MS:
            _warned = (now, offset_ms)
            logger.warning(
                "forqapp clock: this host's clock is %.3f s %s the database's; the queue follows the "
                "database's clock (FORQ_CLOCK = \"database\"), but synchronise the hosts' clocks (NTP)",
                abs(offset_ms) / 1000, "behind" if offset_ms > 0 else "ahead of")
    elif _warned is not None:
        _warned = None
        logger.warning("forqapp clock: this host's clock is within %d ms of the database's again", WARN_MS)


def _due() -> bool:
    return _next_at is None or time.monotonic() >= _next_at


def keep_in_step(using: str | None = None) -> None:
    """From a long-lived process's loop, between its units of work: measure again when the last
    measurement is :data:`SYNC_EVERY_S` old, on this thread's open connection. Nothing else costs a
    query (one clock read when it is not due); never opens a connection (opening one measures by
    itself: :func:`on_connection_created`); never inside a transaction; never raises (a failure is
    logged, at most every :data:`FAILURE_SAID_S`, and tried again in :data:`RETRY_S`)."""
    global _next_at
    if not _due():
        return
    name = using or alias()
    try:
        if not follows_database(name):
            _next_at = time.monotonic() + SYNC_EVERY_S
            return
        connection = connections[name]
        if connection.connection is None or connection.in_atomic_block or not connection.get_autocommit():
            return
        sync(name)
    except database_errors() as exc:
        _failed(exc)


def _failed(exc: BaseException) -> None:
    global _failure_said
    now = time.monotonic()
    if _failure_said is not None and now - _failure_said < FAILURE_SAID_S:
        return
    _failure_said = now
    logger.warning("forqapp clock: could not read the database's clock (%s); keeping an offset of %d ms, "
                   "trying again in %.0f s (this line at most every %.0f minutes)", exc,
                   utils.database_offset_ms(), RETRY_S, FAILURE_SAID_S / 60)


def on_connection_created(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """``connection_created``: on the queue's database, measure (when due) on the new connection,
    before the caller's first statement. A connection opened outside autocommit (``AUTOCOMMIT =
    False``) is left alone: a read would open a transaction the caller does not expect."""
    if connection.alias != alias() or not _due():
        return
    try:
        if not follows_database(connection.alias) or connection.in_atomic_block or not connection.get_autocommit():
            return
        sync(on=store.store_class(connection.vendor).on(connection.connection))
    except Exception as exc:  # noqa: BLE001 - a failed measurement must never fail the connection
        _failed(exc)


def forget(**kwargs: Any) -> None:
    """Follow the host's clock again until the next measurement (which is due at once): a test's
    ``FORQ_CLOCK`` or ``FORQ_DATABASE`` change, or a fresh start."""
    global _next_at, _warned, _failure_said, _last
    if kwargs.get("setting") not in (None, "FORQ_CLOCK", "FORQ_DATABASE"):
        return
    utils.set_database_offset_ms(0)
    _next_at, _warned, _failure_said, _last = None, None, None, None


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # (a lock held by another thread at the fork would never be released)


setting_changed.connect(forget, dispatch_uid="forqapp.clock.forget")
os.register_at_fork(after_in_child=_after_fork_in_child)
