"""Wake-ups for consumers waiting on empty queues (HTTP long polls, ``receive(wait=…)``, workers).

One :class:`Notifier` per process and database. While anyone waits, its thread watches the database
for writes from any process through :func:`forqapp.services.wake_version` (how is the store's
business, :attr:`forqapp.store.Store.wakeups`: SQLite's ``PRAGMA data_version``, which changes when
another connection commits and costs no I/O, checked every ``FORQ_WAKE_POLL_MS`` (5 ms); PostgreSQL's
``LISTEN`` notifications) — and a write in this process wakes it at once. On a change it asks the
database (a read, no write lock) how many messages are due in the queues people wait on, and wakes
that many waiters per queue, oldest waiter first, so a produce never stampedes a herd of consumers. Every ``FORQ_WAKE_FALLBACK_MS`` it checks anyway, which is how delayed messages
that become due are noticed. Nobody waiting: the thread sleeps and touches nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable

from django.db import connections, transaction

from .. import errors
from ..conf import forq_settings
from . import base, wakeups

logger = logging.getLogger("forqapp.notify")


class _Waiter:
    """A thread waiting for a message in one of ``queues``."""

    __slots__ = ("queues", "event")

    def __init__(self, queues: tuple[str, ...], event: threading.Event | None = None):
        self.queues = queues
        self.event = event or threading.Event()

    def wake(self) -> None:
        self.event.set()


class _AsyncWaiter:
    """A coroutine waiting for a message in one of ``queues``, woken in its own event loop."""

    __slots__ = ("queues", "loop", "future")

    def __init__(self, queues: tuple[str, ...], loop: asyncio.AbstractEventLoop):
        self.queues = queues
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()

    def wake(self) -> None:
        self.loop.call_soon_threadsafe(_resolve, self.future)


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class Notifier:
    def __init__(self, alias: str):
        self.alias = alias
        self._cond = threading.Condition()
        self._waiters: dict[str, deque[_Waiter | _AsyncWaiter]] = {}
        self._kicked = False
        self._thread: threading.Thread | None = None

    # -- waiting ---------------------------------------------------------------------------

    def wait(self, queue: str, timeout: float) -> None:
        """Block until a message may be due in ``queue`` (or ``timeout`` seconds pass)."""
        self.wait_any((queue,), timeout)

    def wait_any(self, queues: Iterable[str], timeout: float, event: threading.Event | None = None) -> None:
        """Block until a message may be due in any of ``queues`` (or ``timeout`` seconds pass);
        ``event``: the caller's, which it may set to end the wait itself (a worker told to stop)."""
        waiter = _Waiter(tuple(queues), event)
        self._add(waiter)
        try:
            waiter.event.wait(timeout)
        finally:
            self._remove(waiter)

    async def wait_async(self, queue: str, timeout: float) -> None:
        waiter = _AsyncWaiter((queue,), asyncio.get_running_loop())
        self._add(waiter)
        try:
            await asyncio.wait_for(waiter.future, timeout)
        except TimeoutError:
            pass
        finally:
            self._remove(waiter)

    def kick(self) -> None:
        """Something was written in this process: look now rather than at the next poll."""
        if not self._waiters:
            return  # nobody waits (read without the lock: a waiter that comes now kicks itself)
        with self._cond:
            self._kicked = True
            self._cond.notify()

    def wake_all(self) -> None:
        with self._cond:
            waiters = {w for ws in self._waiters.values() for w in ws}
            self._waiters.clear()
        for waiter in waiters:
            waiter.wake()

    def waiting(self) -> int:
        """How many waits are registered, per queue waited on."""
        with self._cond:
            return sum(len(w) for w in self._waiters.values())

    def _add(self, waiter: _Waiter | _AsyncWaiter) -> None:
        with self._cond:
            for queue in waiter.queues:
                self._waiters.setdefault(queue, deque()).append(waiter)
            self._kicked = True  # a new waiter may already have something due
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name=f"forq-notifier-{self.alias}", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _remove(self, waiter: _Waiter | _AsyncWaiter) -> None:
        with self._cond:
            self._unlink(waiter)

    def _unlink(self, waiter: _Waiter | _AsyncWaiter) -> None:
        for queue in waiter.queues:
            waiters = self._waiters.get(queue)
            if waiters is not None:
                try:
                    waiters.remove(waiter)
                except ValueError:
                    pass  # already woken
                if not waiters:
                    del self._waiters[queue]

    # -- the watching thread ---------------------------------------------------------------

    def _run(self) -> None:
        last_version = None
        last_check = 0.0
        recheck_at: int | None = None
        while True:
            try:
                with self._cond:
                    while not self._waiters:
                        self._cond.wait()
                    kicked, self._kicked = self._kicked, False
                    wanted = {q: len(w) for q, w in self._waiters.items()}
                version = wakeups.wake_version(using=self.alias)
                now = time.monotonic()
                fallback = forq_settings.FORQ_WAKE_FALLBACK_MS / 1000
                slot_came = recheck_at is not None and base.now_ms() >= recheck_at
                if kicked or version != last_version or now - last_check >= fallback or slot_came:
                    last_version, last_check = version, now
                    due = wakeups.due(list(wanted), max(wanted.values()), using=self.alias)
                    recheck_at = due.recheck_at  # a rate-limited queue's next slot: look again then
                    if due.counts:
                        self._wake(due.counts)
                with self._cond:
                    if not self._kicked and self._waiters:
                        self._cond.wait(wakeups.wake_poll_interval(using=self.alias))
            except Exception as e:
                # a full disk, a server restarting: one line a second, not a traceback each try
                errors.log_failure(logger, "forqapp notifier (checking for due messages)", e, "retrying")
                with contextlib.suppress(Exception):
                    connections[self.alias].close()
                time.sleep(0.5)

    def _wake(self, due: dict[str, int]) -> None:
        with self._cond:
            for queue, n in due.items():
                while n > 0 and self._waiters.get(queue):
                    waiter = self._waiters[queue][0]
                    self._unlink(waiter)
                    waiter.wake()
                    n -= 1


_notifiers: dict[str, Notifier] = {}
_notifiers_lock = threading.Lock()


def notifier_for(alias: str) -> Notifier:
    """This process's notifier for the database ``alias`` (created on first use)."""
    try:
        return _notifiers[alias]
    except KeyError:
        with _notifiers_lock:
            return _notifiers.setdefault(alias, Notifier(alias))


def waited_on(alias: str) -> Notifier | None:
    """This process's notifier for ``alias`` when somebody waits on it now, else None."""
    notifier = _notifiers.get(alias)
    return notifier if notifier is not None and notifier._waiters else None


def notifiers() -> list[Notifier]:
    """Every notifier of this process (one per database that had a waiter or a write)."""
    with _notifiers_lock:
        return list(_notifiers.values())


def kick(using: str) -> None:
    """Messages became ready: wake this process's waiters now rather than at the next poll, once
    the write is visible (on commit when inside the caller's ``atomic()``; never on rollback).
    Nobody waiting in this process (the usual send): nothing to do, at the cost of a dict lookup —
    a waiter that comes meanwhile looks at the database itself when it starts."""
    notifier = waited_on(using)
    if notifier is None:
        return
    if connections[using].in_atomic_block:
        transaction.on_commit(notifier.kick, using=using)
    else:
        notifier.kick()
