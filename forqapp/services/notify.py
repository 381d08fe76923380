"""Wake-ups for consumers waiting on empty queues (HTTP long polls, ``receive(wait=…)``, workers).

One :class:`Notifier` per process and database. While anyone waits, its thread sleeps until
something may have changed: another process's commit (the store's :meth:`~forqapp.store.Store.change_fd`:
SQLite's database file and write-ahead log watched with inotify, PostgreSQL's ``LISTEN`` socket;
where there is none, ``PRAGMA data_version`` polled every ``FORQ_WAKE_POLL_MS``), a write or a new
waiter in this process (its bell), or the next time something comes due by the clock (a delayed
message, a lease's end, a rate slot, a group's turn). Then it asks the database (a read, no write
lock) how many messages are due in the queues people wait on, and wakes that many waiters per queue,
oldest waiter first, so a produce never stampedes a herd of consumers. Every
``FORQ_WAKE_FALLBACK_MS`` it checks anyway (on SQLite, only if the database's commit counter moved
since its last look). Nobody waiting: the thread sleeps and touches nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
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
        self.future: asyncio.Future[bool] = loop.create_future()  # True: woken; False: its time is up

    def wake(self) -> None:
        self.loop.call_soon_threadsafe(_resolve, self.future, True)


def _resolve(future: asyncio.Future[bool], woken: bool) -> None:
    if not future.done():
        future.set_result(woken)


#: After a write is seen whose commit is not visible yet, the version is read again after each of
#: these (seconds): a commit follows its last write within microseconds, or an fsync later.
SETTLE_S = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256)

#: The most quiet queues a notifier remembers (it forgets them all at once past this, and at each change).
QUIET_MAX = 100_000


class Notifier:
    def __init__(self, alias: str):
        self.alias = alias
        self._cond = threading.Condition()
        self._waiters: dict[str, deque[_Waiter | _AsyncWaiter]] = {}
        self._pending: set[str] = set()  # queues to check now (written here, or newly waited on)
        self._unlooked: set[str] = set()  # queues of new waiters not looked at (they were quiet)
        self._full = False  # check every waited queue as soon as the pacing allows
        # Queues a check found with nothing due, each with when something of it comes due by the
        # clock (Unix ms; None: nothing does), as of data version ``_quiet_version``: until a
        # commit or that time, a new waiter on one needs no check, and a consumer may wait first.
        self._quiet: dict[str, int | None] = {}
        self._quiet_version: int | None = None
        self._thread: threading.Thread | None = None
        self.checks = 0  # checks run (tests, benchmarks): full ones and targeted ones
        self.full_checks = 0
        self.sleeps = 0  # times the watching thread slept (tests: idle waiters cost no polling)
        self._bell_r, self._bell_w = os.pipe()  # rung to end the watching thread's sleep
        os.set_blocking(self._bell_r, False)
        os.set_blocking(self._bell_w, False)

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

    async def wait_async(self, queue: str, timeout: float,
                         loop: asyncio.AbstractEventLoop | None = None) -> bool:
        """As :meth:`wait`, in the running event loop (``loop``, when the caller has it: asking for
        it costs a system call); whether it was woken (False: ``timeout`` passed). A timer
        resolves the waiter's future (cheaper than ``asyncio.wait_for``'s task)."""
        loop = loop or asyncio.get_running_loop()
        waiter = _AsyncWaiter((queue,), loop)
        self._add(waiter)
        timer = loop.call_later(timeout, _resolve, waiter.future, False)
        try:
            return await waiter.future
        finally:
            timer.cancel()
            self._remove(waiter)

    def quiet(self, queue: str) -> bool:
        """Whether ``queue`` had nothing due when last looked at, and nothing this notifier has seen
        since can have changed that: a hint for a consumer to wait before it claims (its wait's own
        look at the queue is exact). Read without the lock."""
        return _quiet_at(self._quiet, queue, base.now_ms())

    def kick(self, queues: Iterable[str] | None = None) -> None:
        """Something was written in this process to ``queues`` (None: to queues unknown): look now
        rather than at the next poll — at just the written queues somebody waits on; a write to
        queues nobody here waits on costs nothing (a waiter that comes later looks itself)."""
        if not self._waiters and not self._quiet:
            return  # nobody waits (read without the lock: a waiter that comes now kicks itself)
        if queues is not None:
            queues = tuple(queues)
            waiters, quiet = self._waiters, self._quiet
            if not any(q in waiters or q in quiet for q in queues):
                return  # (the same read, per queue: a write to a queue nobody here knows costs no lock)
        with self._cond:
            if queues is None:
                self._full = True
                self._quiet = {}
            else:
                for queue in queues:
                    self._quiet.pop(queue, None)  # (what a look found there is old now)
                waited = [q for q in queues if q in self._waiters]
                if not waited:
                    return
                self._pending.update(waited)
            self._cond.notify()
        self._ring()

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
            # A new waiter may already have something due: the thread looks — unless each of its
            # queues is quiet for good (nothing due, nothing to come by the clock) as of the last
            # data version the thread read. Then only a commit can change that, and a commit
            # wakes the thread, which then looks at the queues of such waiters at once.
            look = any(self._quiet.get(queue, 0) is not None for queue in waiter.queues)
            (self._pending if look else self._unlooked).update(waiter.queues)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name=f"forq-notifier-{self.alias}", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        if look:
            self._ring()

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
        """Targeted checks (the queues of this process's writes, a new waiter's queues) at once;
        full checks (every waited queue: another process's commit seen through the data version,
        the fallback timer, a delayed message's, a lease's, a rate slot's or a group's time) at most
        once per pacing interval — the poll interval, or twenty times the CPU the last paced check
        took when that is longer, so that many waited queues under a stream of commits cost the
        process at most about 5 % of a core (waiting for the database's answer costs nobody: a
        slow round trip does not slow the pace). Where the store names the queues of another
        process's commits (PostgreSQL), those commits bring paced checks of the waited queues
        they named instead of full ones. Between them it sleeps on the store's change
        descriptor (another process's commit), its bell (this process's writes and waiters) and
        the next time something comes due: idle waiters cost no CPU."""
        last_version: int | None = None
        last_full = 0.0  # when the last full check ran (monotonic): the fallback counts from it
        last_paced = 0.0  # when the last paced check ran (a full one, or one of the changed queues)
        took = 0.0  # the last paced check's duration (this thread's CPU seconds)
        recheck_at: int | None = None
        stale = True  # a change seen that no full check has looked at yet
        changed: set[str] = set()  # waited queues that changes named (PostgreSQL), not looked at yet
        settle: float | None = None  # a write seen, its commit not yet: look again after this long
        settings_at = -1.0  # when the intervals were last read from the settings
        poll = fallback = 0.0
        exact = False  # the store's version is a commit counter (wakeups.wake_exact)
        while True:
            try:
                with self._cond:
                    while not self._waiters:
                        self._cond.wait()
                        stale = True
                    pending, self._pending = self._pending, set()
                    forget = self._full
                    if self._full:
                        stale, self._full = True, False
                now = time.monotonic()
                if pending or now - settings_at >= 0.25:  # (settings cost more to read than the version)
                    poll = wakeups.wake_poll_interval(using=self.alias)
                    fallback = forq_settings.FORQ_WAKE_FALLBACK_MS / 1000
                    exact = wakeups.wake_exact(using=self.alias)
                    settings_at = now
                if wakeups.wake_drain(using=self.alias):
                    settle = SETTLE_S[0]
                version = wakeups.wake_version(using=self.alias)
                named = wakeups.wake_changes(using=self.alias)  # (None: any queue may have changed)
                fd = wakeups.wake_fd(using=self.alias)  # (after the version: PostgreSQL listens first)
                noted = named is not None and version != last_version  # notifications came
                if version != last_version:
                    settle = None
                    if named is None:
                        stale = True
                    else:
                        last_version = version  # (the named queues alone are looked at)
                with self._cond:  # (new waiters read it under the lock: see _add)
                    if forget or len(self._quiet) > QUIET_MAX or (
                            named is None and version != self._quiet_version):
                        self._quiet = {}  # (a new dict: readers without the lock keep the old one)
                        self._quiet_version = version
                        pending |= self._unlooked  # something may have come for them since
                    elif named:
                        for queue in named:
                            self._quiet.pop(queue, None)  # (what a look found there is old now)
                        self._quiet_version = version
                        pending |= self._unlooked & named
                        changed.update(q for q in named if q in self._waiters)
                    self._unlooked = set()  # (else: still quiet as of this version)
                pace = max(poll, 20 * took)  # the least time between paced checks
                if recheck_at is not None and base.now_ms() >= recheck_at:
                    stale = True
                if now - last_full >= fallback:
                    if exact and not stale:
                        # SQLite: the version read above is the one the last full look read, so
                        # nothing was committed since: its answer stands (what it read of cached
                        # settings that another process may have changed, it looks at again
                        # itself: see wakeups.due), and idle waiters cost no reads. The timer still
                        # bounds a change inotify missed (the version is read at each wake).
                        last_full = now
                    else:
                        stale = True
                if stale and now - last_paced >= pace:
                    cpu = time.thread_time()
                    with self._cond:
                        wanted = {q: len(w) for q, w in self._waiters.items()}
                    if wanted:
                        due = wakeups.due(list(wanted), max(wanted.values()), using=self.alias)
                        self.full_checks += 1
                        self.checks += 1
                        recheck_at = due.recheck_at  # something comes due by the clock: look again then
                        self._remember_quiet(due.quiet)
                        if due.counts:
                            self._wake(due.counts)
                    last_version, stale = version, False
                    last_full = last_paced = time.monotonic()
                    took = time.thread_time() - cpu  # its CPU: waits on the database cost nobody
                    pending.clear()  # the full check looked at them
                    changed.clear()
                elif changed and now - last_paced >= pace:
                    # Commits elsewhere that named their queues: a look at those alone, paced as a full one.
                    cpu = time.thread_time()
                    looked, recheck_at = self._look_at(changed, recheck_at)
                    changed.clear()
                    last_paced = time.monotonic()
                    took = time.thread_time() - cpu
                    pending.difference_update(looked)
                if pending:
                    # A queue quiet as of the version read above needs no look (nothing came), only
                    # a look again when something of it comes due by the clock.
                    now_ms = base.now_ms()
                    quiet = self._quiet
                    for queue in [q for q in pending if _quiet_at(quiet, q, now_ms)]:
                        pending.discard(queue)
                        until = quiet.get(queue)
                        if until is not None:
                            recheck_at = until if recheck_at is None else min(recheck_at, until)
                if pending:
                    _, recheck_at = self._look_at(pending, recheck_at)
                with self._cond:
                    if self._pending or self._full or not self._waiters:
                        continue
                if stale or changed:  # a paced check is owed: sleep until the pacing allows it
                    self._sleep(pace - (time.monotonic() - last_paced), None)
                    continue
                timeout = fallback - (time.monotonic() - last_full)
                if recheck_at is not None:
                    timeout = min(timeout, (recheck_at - base.now_ms()) / 1000)
                if fd is None or noted:
                    # (noted: let the next notifications gather for a poll interval rather than
                    # waking for each: a stream of commits elsewhere costs a read per interval)
                    self._sleep(min(timeout, poll), None)
                    continue
                if wakeups.wake_drain(using=self.alias):
                    settle = SETTLE_S[0]
                if wakeups.wake_version(using=self.alias) != last_version:
                    continue  # (a change that came in with the checks' answers is no longer on the descriptor)
                if settle is not None:
                    # A write was seen and its commit is not visible yet (SQLite: the frames reach
                    # the write-ahead log, then the commit; nothing more will fire): look again soon.
                    self._sleep(min(timeout, settle), None)
                    settle = next((s for s in SETTLE_S if s > settle), None)
                    continue
                self._sleep(timeout, fd)
            except Exception as e:
                # a full disk, a server restarting: one line a second, not a traceback each try
                errors.log_failure(logger, "forqapp notifier (checking for due messages)", e, "retrying")
                with contextlib.suppress(Exception):
                    connections[self.alias].close()
                with self._cond:
                    self._full = True  # what was committed meanwhile went unseen: forget every look
                time.sleep(0.5)

    def _look_at(self, queues: set[str], recheck_at: int | None) -> tuple[set[str], int | None]:
        """A targeted check, one read for the waited ones of ``queues``: those it looked at, and
        ``recheck_at`` or, when sooner, when something of theirs comes due by the clock."""
        with self._cond:
            wanted = {q: len(self._waiters[q]) for q in queues if q in self._waiters}
        if wanted:
            due = wakeups.due(list(wanted), max(wanted.values()), using=self.alias)
            self.checks += 1
            self._remember_quiet(due.quiet)
            if due.recheck_at is not None:
                recheck_at = due.recheck_at if recheck_at is None else min(recheck_at, due.recheck_at)
            if due.counts:
                self._wake(due.counts)
        return set(wanted), recheck_at

    def _remember_quiet(self, quiet: dict[str, int | None]) -> None:
        """What a check just found quiet, as of the version read before it (an older look's view
        of those queues, once written here, is replaced)."""
        if quiet:
            with self._cond:
                self._quiet.update(quiet)

    def _ring(self) -> None:
        """Interrupt the watching thread's sleep (a kick, a new waiter)."""
        try:
            os.write(self._bell_w, b"\0")
        except BlockingIOError:
            pass  # the pipe is full: it rings already

    def _sleep(self, timeout: float, fd: int | None) -> None:
        """Until the bell rings, ``fd`` is readable, or ``timeout`` seconds pass."""
        poller = select.poll()
        poller.register(self._bell_r, select.POLLIN)
        if fd is not None:
            poller.register(fd, select.POLLIN)
        poller.poll(max(0, int(timeout * 1000) + 1))
        self.sleeps += 1
        try:
            while os.read(self._bell_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _wake(self, due: dict[str, int]) -> None:
        with self._cond:
            for queue, n in due.items():
                while n > 0 and self._waiters.get(queue):
                    waiter = self._waiters[queue][0]
                    self._unlink(waiter)
                    waiter.wake()
                    n -= 1


def _quiet_at(quiet: dict[str, int | None], queue: str, now_ms: int) -> bool:
    until = quiet.get(queue, 0)  # (0: not known to be quiet)
    return until is None or until > now_ms


_notifiers: dict[str, Notifier] = {}
_notifiers_lock = threading.Lock()


def _forget_after_fork() -> None:
    """A forked child starts with no notifier: its parent's thread did not follow it, and their
    bells must not be shared."""
    global _notifiers_lock
    _notifiers.clear()
    _notifiers_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


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


def kick(using: str, queues: Iterable[str] | None = None) -> None:
    """Messages became ready in ``queues`` (None: in queues unknown, so every waited one is
    looked at): wake this process's waiters now rather than at the next poll, once
    the write is visible (on commit when inside the caller's ``atomic()``; never on rollback).
    Nobody waiting in this process (the usual send): nothing to do, at the cost of a dict lookup —
    a waiter that comes meanwhile looks at the database itself when it starts."""
    notifier = waited_on(using)
    if notifier is None:
        return
    if queues is not None:
        queues = tuple(queues)
    if connections[using].in_atomic_block:
        transaction.on_commit(lambda: notifier.kick(queues), using=using)
    else:
        notifier.kick(queues)
