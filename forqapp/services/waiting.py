"""Claim, or wait for a wake-up: the one loop every consumer runs when a queue may be empty.

``services.receive`` (the Python API), the HTTP API's consume and bulk claim, and the worker all
call :func:`claim` (threads) or :func:`claim_async` (the async API): claim now; if nothing came,
wait on the process's notifier (:mod:`forqapp.services.notify`) until a message may be due, the deadline
passes or the process drains; claim again.

Two things end a wait early:

* **drain** (:func:`drain`), process-wide: the server is stopping, so every wait ends at once and
  no new one starts (a long poll answers 204 rather than hold the shutdown for up to 30 s).
  ``forq_serve``'s supervisor, a separate process, asks for it by creating the file named in the
  ``FORQ_DRAIN_FILE`` environment variable; :func:`watch_drain_file` turns that into a drain.
* **the caller leaving**, per request: a server that can tell (forqapp's ASGI app) registers a
  :class:`Caller` with :func:`serving`; it is armed just before the first wait, so requests answered
  at once pay nothing for it, and from then on the caller's departure cancels the waiting coroutine.
  Under Django's own ASGI handler, Django cancels async views on disconnect by itself.

A claim that finishes after its caller left (cancelled while it ran on a database thread) is given
back (:func:`forqapp.services.release`, the attempt not counted) rather than lost to a closed
connection.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar, cast

from ..store import inotify
from . import db, groupcommit
from .base import alias
from .notify import notifier_for, notifiers
from .settle import release_many

T = TypeVar("T")

DRAIN_FILE_ENV = "FORQ_DRAIN_FILE"  # set by forq_serve for its server processes
DRAIN_FILE_POLL_S = 0.2

_drained = threading.Event()


# --- drain ----------------------------------------------------------------------------------------


def drain() -> None:
    """The process is stopping: every wait ends now (its caller gets what it has, usually nothing)
    and no new one starts. Claims still run: a caller that is still connected gets what is due."""
    _drained.set()
    for notifier in notifiers():
        notifier.wake_all()


def draining() -> bool:
    return _drained.is_set()


def _undrain() -> None:
    """For tests that drain in-process."""
    _drained.clear()


async def watch_drain_file(path: str | None = None) -> None:
    """Drain once the file ``path`` (default: ``$FORQ_DRAIN_FILE``) exists. ``forq_serve`` creates
    it when told to stop; the server then waits for in-flight requests before it shuts the app down,
    so waiting long polls must end first. Returns at once when there is no such file to watch."""
    path = path or os.environ.get(DRAIN_FILE_ENV)
    if not path:
        return
    fd = inotify.arrivals(os.path.dirname(path) or ".")
    if fd is None:  # (no inotify here: look every DRAIN_FILE_POLL_S)
        while not os.path.exists(path):
            await asyncio.sleep(DRAIN_FILE_POLL_S)
        drain()
        return
    # Woken by the file's arrival in its directory, not by a timer: an idle server's event loop
    # sleeps (looking five times a second cost it ~1 ms of CPU a second).
    loop = asyncio.get_running_loop()
    arrived = asyncio.Event()
    loop.add_reader(fd, arrived.set)
    try:
        while True:
            arrived.clear()
            inotify.read_all(fd)  # (then look: a file that comes after the look wakes it again)
            if os.path.exists(path):
                break
            await arrived.wait()
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    drain()


# --- the caller of a wait (async) ---------------------------------------------------------------


class Caller(Protocol):
    """What a server tells the waiting loop about the request it serves."""

    def arm(self) -> None:
        """The request is about to wait: from now on, its client leaving cancels the waiting task."""


_caller: ContextVar[Caller | None] = ContextVar("forq_waiting_caller", default=None)


class serving:
    """Run a request's view inside this block (or start its task in it): its waits arm ``caller``.
    (A class, not a generator: it is entered by every long poll.)"""

    __slots__ = ("caller", "token")

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    def __enter__(self) -> None:
        self.token = _caller.set(self.caller)

    def __exit__(self, *exc: object) -> None:
        _caller.reset(self.token)


# --- waiting ----------------------------------------------------------------------------------


def wait(queues: Iterable[str], timeout: float, *, using: str | None = None,
         wake: threading.Event | None = None) -> None:
    """Block until a message may be due in any of ``queues``, ``timeout`` passes, the process
    drains or ``wake`` is set."""
    if timeout > 0 and not draining():
        notifier_for(using or alias()).wait_any(tuple(queues), timeout, wake)


async def wait_async(queue: str, timeout: float, *, using: str | None = None,
                     loop: asyncio.AbstractEventLoop | None = None) -> bool:
    """As :func:`wait`, for one queue, without blocking the event loop (``loop``: the running one,
    when the caller has it); arms the request's caller. Whether it was woken (by a message that
    may be due, or the drain)."""
    if timeout <= 0 or draining():
        return draining()
    caller = _caller.get()
    if caller is not None:
        caller.arm()
    return await notifier_for(using or alias()).wait_async(queue, timeout, loop)


def claim(take: Callable[[], T], queues: Iterable[str], timeout: float, *, using: str | None = None,
          stop: Callable[[], bool] | None = None, wake: threading.Event | None = None) -> T:
    """``take()`` (a claim: a message, a list or a count; falsy when nothing was due), waiting up to
    ``timeout`` seconds for a wake-up on ``queues`` and trying again, until it returns something,
    the time is up or the process drains; ``stop()`` true ends it without a claim. ``wake``: an
    event the caller sets with what makes ``stop()`` true, so that a wait ends at once (cleared
    here before each wait, then ``stop()`` looked at: a stop in between is never missed). A wait
    that ends with its time while each of ``queues`` is still quiet (as :func:`claim_async`'s)
    returns what the claim before it found, without a last claim that would find nothing."""
    queues = tuple(queues)
    deadline = time.monotonic() + timeout
    notifier = notifier_for(using or alias())
    while True:
        result = take()
        remaining = deadline - time.monotonic()
        if result or remaining <= 0 or draining():
            return result
        if wake is not None:
            wake.clear()
        if stop is not None and stop():
            return result
        wait(queues, remaining, using=using, wake=wake)
        if stop is not None and stop():
            return result
        if time.monotonic() >= deadline and all(notifier.quiet(q) for q in queues):
            return result  # its time is up, and a claim now would find nothing


_CLAIM_FIRST: Any = object()


async def claim_async(take: Callable[..., T], queue: str, timeout: float, *args: Any,
                      nothing: Any = _CLAIM_FIRST) -> T:
    """``take(queue, *args)`` on a database thread, waiting up to ``timeout`` seconds for a wake-up
    and trying again, as :func:`claim`. If the caller is cancelled (it left) while a claim runs,
    what the claim took is given back.

    ``nothing``: what ``take`` returns when it finds nothing (None, []), from a caller whose
    request is already validated. Given it, a wait on a queue this process's notifier knows to be
    quiet (:meth:`~forqapp.services.notify.Notifier.quiet`: nothing due when it last looked, no
    commit seen since) starts without a claim, which would be a write transaction that finds
    nothing (an idle long poll asking again): the wait's own look at the queue (a read, or none if
    still quiet) wakes it at once if something is due after all, and it then claims as usual. A
    wait that ends with its time on a queue still quiet returns at once (``nothing``, or what the
    claim before it found), without the last claim."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    notifier = notifier_for(alias())
    if nothing is not _CLAIM_FIRST and timeout > 0 and not draining() and notifier.quiet(queue):
        if not await wait_async(queue, timeout, loop=loop):
            return cast(T, nothing)  # its time is up and nothing came
    while True:
        result = await _claim_for_caller(take, queue, *args)
        remaining = deadline - loop.time()
        if result or remaining <= 0 or draining():
            return result
        if not await wait_async(queue, remaining, loop=loop) and notifier.quiet(queue):
            return result  # its time is up, and a claim now would find nothing


async def _claim_for_caller(take: Callable[..., T], *args: Any) -> T:
    future = groupcommit.submit(take, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        future.add_done_callback(_give_back)
        raise


def _give_back(future: asyncio.Future) -> None:
    """A claim finished after its caller left: release what it took (the attempt not counted)."""
    if future.cancelled() or future.exception() is not None or not future.result():
        return
    result = future.result()
    messages = result if isinstance(result, list) else [result]
    by_queue: dict[str, list[tuple[str, int]]] = {}
    for message in messages:
        by_queue.setdefault(message.queue, []).append((message.id, message.receipt))
    for queue, deliveries in by_queue.items():
        db.pool().submit(release_many, queue, deliveries)

