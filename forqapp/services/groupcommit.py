"""Group commit: the async API's hot writes of one process share database transactions.

Forq commits once per request. Under load, forqapp's API process has many produces, claims and
acks in flight at once, each of which would cost a hand-off to a database thread, a hand-off back
to the event loop and a commit of its own. :func:`run` instead queues the call; every call queued
while the database thread is busy (or in the same turn of the event loop) goes to the thread in
one hand-off and runs inside one transaction (Django's ``atomic()``: ``BEGIN IMMEDIATE`` …
``COMMIT`` on SQLite), and each caller gets its own outcome once that transaction has committed.
With one request in flight nothing changes: the call runs alone, exactly as
:func:`forqapp.services.db.run` would run it.

What a caller sees does not change either:

* **Stored means committed.** A call's result (the API's 204) is given only after the
  transaction it ran in committed. The wake-up of waiting consumers (``_kick``) runs on commit.
* **One caller's error is its own.** A call that raises :class:`forqapp.errors.ForqError` (a bad
  receipt, a full queue, a paused queue) changed nothing or rolled its own savepoint back (the
  services' own ``atomic()`` blocks nest), so the others commit. Any other exception (a database
  error, a full disk, a bug) rolls the whole group back, and every call of it runs again alone,
  each with its own transaction and its own outcome.
* **Order.** The calls of a group run in the order they were made. On SQLite (one database
  thread) groups run one after the other; on PostgreSQL up to ``FORQ_DB_THREADS`` groups run at
  once, as that many requests would have.

Only calls that are short and safe inside a transaction come here (the API's single send, claim,
ack and nack); everything else keeps :func:`forqapp.services.db.run`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from concurrent.futures import Future as ThreadFuture
from typing import Any, TypeVar

from django.db import connections, transaction

from ..conf import hot
from ..errors import ForqError
from . import db
from .base import _store

T = TypeVar("T")

Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]
Outcome = tuple[bool, Any]  # (True, result) or (False, exception)


def _alone(call: Call) -> Outcome:
    fn, args, kwargs = call
    try:
        return True, db._call(fn, args, kwargs)
    except Exception as exc:  # handed to its caller
        return False, exc


def run_group(calls: list[Call]) -> list[Outcome]:
    """On a database thread: ``calls`` in one transaction, each call's outcome in order (see the
    module's docstring), under the store's writer lock (several API processes on one SQLite file
    take turns at once). Never raises."""
    alias = hot("FORQ_DATABASE")
    with _store(alias).writer_lock():
        return _run_group(calls, alias)


def _run_group(calls: list[Call], alias: str) -> list[Outcome]:
    if len(calls) == 1:
        return [_alone(calls[0])]
    outcomes: list[Outcome] = []
    try:
        with transaction.atomic(using=alias):
            for fn, args, kwargs in calls:
                try:
                    outcomes.append((True, fn(*args, **kwargs)))
                except ForqError as exc:
                    outcomes.append((False, exc))
    except Exception:  # the group rolled back: each call again on its own
        connections[alias].close_if_unusable_or_obsolete()
        return [_alone(call) for call in calls]
    return outcomes


class Group:
    """The calls of one event loop waiting for the database: at most ``width`` groups run at once
    (the database threads; one on SQLite), and the next group is whatever queued meanwhile."""

    def __init__(self, loop: asyncio.AbstractEventLoop, width: int):
        self.loop = loop
        self.width = width
        self.queued: list[tuple[Call, asyncio.Future[Any]]] = []
        self.running = 0
        self.scheduled = False
        self.sizes = 0  # calls sent, and groups sent (their ratio: the average group size)
        self.groups = 0

    def add(self, call: Call) -> asyncio.Future[Any]:
        future = self.loop.create_future()
        self.queued.append((call, future))
        if self.running < self.width and not self.scheduled:
            # at the end of this turn of the loop: the calls made in the same turn go together
            self.scheduled = True
            self.loop.call_soon(self._send)
        return future

    def _send(self) -> None:
        self.scheduled = False
        if not self.queued or self.running >= self.width:
            return
        batch, self.queued = self.queued, []
        self.running += 1
        self.sizes += len(batch)
        self.groups += 1
        done = db.pool().submit(run_group, [call for call, _ in batch])
        done.add_done_callback(lambda f: self.loop.call_soon_threadsafe(self._finish, batch, f))

    def _finish(self, batch: list[tuple[Call, asyncio.Future[Any]]], done: ThreadFuture) -> None:
        self.running -= 1
        try:
            outcomes = done.result()
        except BaseException as exc:  # the thread pool itself failed (shut down): every caller hears
            outcomes = [(False, exc)] * len(batch)
        for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
            if future.cancelled():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
        if self.queued:
            self._send()


_groups: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Group] = weakref.WeakKeyDictionary()


def group() -> Group:
    """The running event loop's group."""
    loop = asyncio.get_running_loop()
    found = _groups.get(loop)
    if found is None:
        found = _groups[loop] = Group(loop, db.width())
    return found


def submit(fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]:
    """Queue ``fn(*args, **kwargs)`` for the next group; an awaitable future of its outcome."""
    return group().add((fn, args, kwargs))


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await submit(fn, *args, **kwargs)
