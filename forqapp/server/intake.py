"""Request bodies under ``forq_serve``'s bounds, for its three listeners (the API's, the SQS
endpoint's and the UI's ASGI apps): one implementation, each face words the refusals its own way.

* :func:`refuse_declared` — a ``Content-Length`` over the cap is refused from the headers, before
  any byte of the body is received;
* :func:`read_body` — the body, cut off when it passes the cap (413), when it arrives too slowly
  (408: not complete within ``FORQ_BODY_TIMEOUT_S``, or, after ``FORQ_BODY_GRACE_S``, under
  ``FORQ_BODY_MIN_RATE_BYTES_S`` on average), when it ends before it is complete (400), and when
  its client address already has ``FORQ_BODY_SLOW_PER_ADDRESS`` bodies still arriving after the
  grace (429): a normal client sends its body at once and never meets any of them;
* :func:`client_address` — the address the limits count against (with
  ``FORQ_TRUST_PROXY_HEADERS``, the rightmost ``X-Forwarded-For``);
* :func:`quiet_client_faults` — Django's refusal of a request with too many query or form fields
  (``DATA_UPLOAD_MAX_NUMBER_FIELDS``), an invalid ``Host`` and the like is the client's fault: a 400 and one line at
  WARNING in the log, not a traceback.

The slow bodies are counted per process (a listener's own connections and memory are what they
hold); nothing here touches the database.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, BinaryIO, Protocol, TypeVar, cast

from ..conf import hot
from ..services import waiting
from . import process, rsgi

T = TypeVar("T")

logger = logging.getLogger("forqapp.intake")

Receive = Callable[[], Awaitable[dict[str, Any]]]

TOO_LARGE, TOO_SLOW, INCOMPLETE, TOO_MANY = "too_large", "too_slow", "incomplete", "too_many"
STATUS = {TOO_LARGE: 413, TOO_SLOW: 408, INCOMPLETE: 400, TOO_MANY: 429}

_slow: dict[str, int] = {}  # client address -> its bodies still arriving after the grace


class BodyRefused(Exception):
    """The body is not read whole; ``reason`` says why (:data:`TOO_LARGE`, :data:`TOO_SLOW`,
    :data:`INCOMPLETE`, :data:`TOO_MANY`), ``status`` the HTTP status that says it."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason, self.status = reason, STATUS[reason]


def header(scope: dict[str, Any], name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower case), or None."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return value
    return None


def refuse_declared(scope: dict[str, Any], limit: int) -> None:
    """Raise :class:`BodyRefused` (413) when the request's ``Content-Length`` is over ``limit``."""
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and (len(declared) > 18 or int(declared) > limit):
        raise BodyRefused(TOO_LARGE)


def client_address(scope: dict[str, Any]) -> str:
    """The client's address; with ``FORQ_TRUST_PROXY_HEADERS``, the rightmost ``X-Forwarded-For``
    (as :func:`forqapp.api.auth.client_address` reads it from a Django request)."""
    if hot("FORQ_TRUST_PROXY_HEADERS"):
        forwarded = b",".join(v for k, v in scope.get("headers", ()) if k == b"x-forwarded-for")
        hops = [h.strip() for h in forwarded.decode("latin-1").split(",") if h.strip()]
        if hops:
            return hops[-1]
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class _Timing:
    """The time bounds of one body (``FORQ_BODY_*``), and its count among its address's slow bodies
    once it is still arriving after the grace."""

    def __init__(self, address: Callable[[], str]):
        self.loop = asyncio.get_running_loop()
        self.start = self.loop.time()
        self.last = self.start + float(hot("FORQ_BODY_TIMEOUT_S"))
        self.grace = self.start + float(hot("FORQ_BODY_GRACE_S"))
        self.rate = float(hot("FORQ_BODY_MIN_RATE_BYTES_S") or 0)
        self.address = address
        self.slow: str | None = None  # the address this body counts against, once past the grace
        self.crowded = False
        self.timer: asyncio.TimerHandle | None = None
        self.deadline: asyncio.Timeout | None = None

    def watch_grace(self) -> None:
        """Count this body among its address's slow ones if it is still arriving after the grace."""
        if self.timer is None and self.grace < self.last:
            self.timer = self.loop.call_at(self.grace, self._past_grace)

    def _past_grace(self) -> None:
        slow = self.slow = self.address()
        count = _slow[slow] = _slow.get(slow, 0) + 1
        if count > int(hot("FORQ_BODY_SLOW_PER_ADDRESS")) and self.deadline is not None:
            self.crowded = True
            self.deadline.reschedule(self.loop.time())  # cut off now

    def refused(self, scope_method: str, scope_path: str, size: int | str) -> BodyRefused:
        """What a body cut off by its deadline is refused as (and the log line that says so):
        ``size``, the bytes received, or words for them when they could not be counted."""
        if self.crowded:
            logger.info("%s %s: one more slow body from %s, cut off", scope_method, scope_path, self.slow)
            return BodyRefused(TOO_MANY)
        logger.info("%s %s: body too slow (%s bytes in %.1f s), cut off", scope_method, scope_path, size,
                    self.loop.time() - self.start)
        return BodyRefused(TOO_SLOW)

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.slow is not None:
            left = _slow[self.slow] - 1
            if left:
                _slow[self.slow] = left
            else:
                del _slow[self.slow]


async def read_body(scope: dict[str, Any], receive: Receive, limit: int | None,
                    into: BinaryIO | None = None) -> bytes:
    """The whole body, at most ``limit`` bytes (None: no cap), returned, or written to ``into``
    (then b"" is returned). Raises :class:`BodyRefused` as soon as the body is
    known to exceed it (413, from the ``Content-Length`` before anything is received), when it
    arrives too slowly (408), when it ends before it is complete (400: the client went away, or
    its chunked framing was malformed, which granian reports so), and when it is still arriving
    after the grace while its address already has ``FORQ_BODY_SLOW_PER_ADDRESS`` such bodies (429).

    Too slow: not complete within ``FORQ_BODY_TIMEOUT_S``, or, after ``FORQ_BODY_GRACE_S``, less
    than ``FORQ_BODY_MIN_RATE_BYTES_S`` received on average. Each chunk moves the deadline on by
    the time it buys at that rate; a client that holds, sends nothing."""
    if limit is not None:
        refuse_declared(scope, limit)
    return await _read_chunks(scope["method"], scope["path"], receive, limit, into, lambda: client_address(scope))


async def _read_chunks(method: str, path: str, receive: Receive, limit: int | None, into: BinaryIO | None,
                       address: Callable[[], str]) -> bytes:
    """:func:`read_body`'s reading, once the headers passed."""
    timing = _Timing(address)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout_at(min(timing.last, timing.grace) if timing.rate else timing.last) as deadline:
            timing.deadline = deadline
            if not timing.rate:
                timing.watch_grace()
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise BodyRefused(INCOMPLETE)
                chunk = message.get("body", b"")
                size += len(chunk)
                if limit is not None and size > limit:
                    raise BodyRefused(TOO_LARGE)
                if into is None:
                    chunks.append(chunk)
                elif chunk:
                    into.write(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
                if timing.rate:
                    deadline.reschedule(min(timing.last, timing.grace + size / timing.rate))
                    timing.watch_grace()  # a body in pieces: watch for the grace
    except TimeoutError:
        raise timing.refused(method, path, size) from None
    finally:
        timing.close()


async def read_declared(method: str, path: str, whole: Callable[[], Awaitable[bytes]], declared: int,
                        address: Callable[[], str]) -> bytes:
    """A body of a known length (``declared``: its ``Content-Length``, already found within the
    cap), read from ``whole`` (RSGI's protocol: the server reads exactly that many bytes, and tells
    if the body breaks off) under :func:`read_body`'s time bounds: refused (408) when not complete
    within ``FORQ_BODY_TIMEOUT_S`` or, after ``FORQ_BODY_GRACE_S``, under
    ``FORQ_BODY_MIN_RATE_BYTES_S`` on average; (429) when it is still arriving after the grace
    while its address (``address()``) has ``FORQ_BODY_SLOW_PER_ADDRESS`` such bodies; (400) when it
    breaks off.

    A body of at most one second's worth at the minimum rate (1 KiB by default: the API's usual
    message) is received whole, in one call (``whole()``: the hot path's), by the deadline its
    length allows (the grace and at most a second more); a longer one in the chunks it arrives in,
    its deadline moved on by each as :func:`read_body` does, so a client that announces 100 KB and
    trickles a byte a second is cut off after the grace (it was held the whole
    ``FORQ_BODY_TIMEOUT_S``, the length it announced buying it the time)."""
    if not declared:
        return b""
    rate = float(hot("FORQ_BODY_MIN_RATE_BYTES_S") or 0)
    if rate and declared > rate and hasattr(whole, "__aiter__"):
        try:
            return await _read_chunks(method, path, rsgi.BodyReceive(whole), None, None, address)
        except RuntimeError:  # granian's RSGIProtocolClosed, as below
            raise BodyRefused(INCOMPLETE) from None
    timing = _Timing(address)
    end = min(timing.last, timing.grace + declared / rate) if rate else timing.last
    try:
        async with asyncio.timeout_at(end) as deadline:
            timing.deadline = deadline
            timing.watch_grace()
            return await whole()
    except TimeoutError:
        raise timing.refused(method, path, f"fewer than its {declared}") from None
    except RuntimeError:  # granian's RSGIProtocolClosed: the client went away, or its framing broke
        raise BodyRefused(INCOMPLETE) from None
    finally:
        timing.close()


class DisconnectWatch:
    """Cancels a waiting view's task when its client disconnects (ASGI ``http.disconnect``): the
    :class:`forqapp.services.waiting.Caller` of a request that may wait, armed when it starts to wait."""

    def __init__(self, receive: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        self.task: asyncio.Task | None = None
        self.receive = receive
        self.listener: asyncio.Future[Any] | None = None
        self.disconnected = False

    def arm(self) -> None:
        if self.listener is not None:
            return
        # RSGI's disconnect is a future: a callback on it is all it takes (a listener task cost the
        # event loop about as much as the rest of an idle long poll's asking again).
        future = getattr(self.receive, "disconnect_future", lambda: None)()
        if future is not None:
            self.listener = future
            future.add_done_callback(self._gone)
            return
        # (the task's loop: asyncio.ensure_future asks os.getpid() each time)
        loop = self.task.get_loop() if self.task is not None else asyncio.get_running_loop()
        self.listener = loop.create_task(self._listen())

    async def _listen(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self._left()

    def _gone(self, future: asyncio.Future[Any]) -> None:
        if not future.cancelled():
            self._left()

    def _left(self) -> None:
        self.disconnected = True
        if self.task is not None:
            self.task.cancel()

    def close(self) -> None:
        """Stop watching, and let go of everything: granian keeps the disconnect future it gave
        (and the callbacks put on it) until the connection closes, and its future is invisible to
        the garbage collector, so a cycle through it (future → callback → this watch → future)
        would never be freed — the request's task, coroutine and protocol with it, once per
        request that waited, on a keep-alive connection: about 3 KB each."""
        listener, self.listener = self.listener, None
        self.task = None
        if listener is None:
            return
        listener.cancel()
        if not isinstance(listener, asyncio.Task):
            listener.remove_done_callback(self._gone)


#: What :func:`unless_disconnected` returns when the client left.
GONE: Any = object()


async def unless_disconnected(view: Awaitable[T], receive: Receive) -> T:
    """Await ``view``, a request's view that may wait, in the caller's own task; if the client
    disconnects while it waits, the task is cancelled where it waits (a claim under way gives back
    what it took) and this returns :data:`GONE`. The disconnect listener starts only when the view
    is about to wait (the waiting module arms the :class:`DisconnectWatch`), so a request answered
    at once pays nothing for it; and the view gets no task of its own (with one, a long poll asking
    again on a quiet queue took 2-19 % more of the event loop's CPU, in three alternating pairs)."""
    task = asyncio.current_task()
    if task is None:  # (not in an asyncio task: nothing to cancel)
        return await view
    watch = DisconnectWatch(receive)
    watch.task = task
    try:
        with waiting.serving(watch):
            return await view
    except asyncio.CancelledError:
        if watch.disconnected:
            task.uncancel()
            return cast(T, GONE)
        raise
    finally:
        watch.close()


class Stoppable(Protocol):
    def stop(self) -> None: ...


class Listener(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


async def lifespan(receive: Receive, send: Callable[[dict[str, Any]], Awaitable[None]],
                   start_jobs: Callable[[], Stoppable | None] | None = None,
                   listeners: Sequence[Listener] = ()) -> None:
    """A listener's ASGI lifespan: from startup, watch for ``forq_serve``'s drain request (and run
    the jobs ``start_jobs`` starts, if any, and the other ``listeners`` served in this process:
    :mod:`forqapp.server.embedded`); at shutdown, drain the waiting requests (each answered at once
    with what it has), stop the other listeners and the jobs, their lease given up while requests
    still finish."""
    watcher: asyncio.Future[None] | None = None
    jobs: Stoppable | None = None
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            watcher = asyncio.ensure_future(waiting.watch_drain_file())
            try:
                for listener in listeners:
                    await listener.start()
            except Exception as exc:  # the worker must not serve without them (granian: "errored, continuing")
                logger.exception("a listener of this process could not start")
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                watcher.cancel()
                return
            jobs = start_jobs() if start_jobs is not None else None
            process.freeze_started()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            waiting.drain()
            if watcher is not None:
                watcher.cancel()
            await asyncio.gather(*(listener.stop() for listener in listeners))
            if jobs is not None:
                await asyncio.to_thread(jobs.stop)
            await send({"type": "lifespan.shutdown.complete"})
            return


_CLIENT_FAULTS = ("TooManyFieldsSent", "TooManyFilesSent", "RequestDataTooBig", "DisallowedRedirect",
                  "DisallowedHost")


def _one_line(record: logging.LogRecord) -> bool:
    if record.levelno > logging.WARNING and record.name.rpartition(".")[2] in _CLIENT_FAULTS:
        if record.name.endswith("DisallowedRedirect") and "exceeding" not in record.getMessage():
            return True  # a redirect a view made to another host: the server's, kept as it is
        record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        record.exc_info = record.exc_text = None
        record.stack_info = None
    return True


def quiet_client_faults() -> None:
    """Make Django's log of a request it refused for its size (too many query or form fields:
    ``DATA_UPLOAD_MAX_NUMBER_FIELDS``; too many files; too big a form; a URL too long to redirect
    to the login page with; a ``Host`` header that is invalid or not in ``ALLOWED_HOSTS``) one line
    at WARNING instead of an ERROR with a traceback. Django answers each 400 itself. For the listener's process (the UI's): a filter on those loggers only."""
    for name in _CLIENT_FAULTS:
        found = logging.getLogger(f"django.security.{name}")
        if _one_line not in found.filters:
            found.addFilter(_one_line)
