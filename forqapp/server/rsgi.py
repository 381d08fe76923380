"""RSGI, granian's native interface, for an application written for ASGI: the API listener's.

Granian serves RSGI with less work per request than ASGI: no scope dictionary built for every
request, the body received in one call, the response given in one synchronous call instead of two
awaited messages. The API's hot calls (:mod:`forqapp.api.fastpath`) use it directly; everything else
goes through these adapters to the same ASGI code:

* :func:`asgi_scope` — the ASGI scope of an RSGI request. RSGI gives the path percent-decoded, with
  no raw path: an escaped slash (``%2F``) arrives as ``/`` (see :func:`escaped_slash_paths`);
* :class:`BodyReceive` — ASGI ``receive`` over the RSGI protocol: the body's chunks, then, once it
  is read, the client's disconnect. Granian ends a body with one empty chunk; a body that broke off
  (the client went away, malformed chunked framing) ends with two, which is told as
  ``http.disconnect`` (the readers refuse it: 400), as ASGI does;
* :class:`DisconnectReceive` — the same for a request whose body is not read: its disconnect alone;
* :class:`ResponseSend` — ASGI ``send`` that answers through the protocol;
* :class:`Lifespan` — an ASGI lifespan handler run from RSGI's ``__rsgi_init__`` and
  ``__rsgi_del__``, which granian calls where it would send ``lifespan.startup`` and
  ``lifespan.shutdown``: before the worker serves, and once it stops.

Bodies with a ``Content-Length`` are read whole (:func:`forqapp.server.intake.read_declared`); these
adapters read the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

Message = dict[str, Any]


def address(value: str) -> tuple[str, int]:
    """("host", port) of RSGI's "host:port" (an IPv6 host in brackets or not)."""
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else 0


def asgi_scope(scope: Any) -> dict[str, Any]:
    """The ASGI HTTP scope of the RSGI request ``scope``."""
    path = scope.path
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": scope.http_version,
        "method": scope.method,
        "scheme": scope.scheme,
        "path": path,
        "raw_path": path.encode("utf-8", "surrogateescape"),
        "query_string": scope.query_string.encode("utf-8", "surrogateescape"),
        "root_path": "",
        "headers": [(name.encode("latin-1"), value.encode("utf-8", "surrogateescape"))
                    for name, value in scope.headers.items()],
        "client": address(scope.client),
        "server": address(scope.server),
    }


def escaped_slash_paths(path: str, marker: str = "/queues/") -> Iterator[str]:
    """The paths ``path`` may have been before RSGI decoded an escaped slash in the segment after
    ``marker`` (a queue's name: "a/b" sent as ``a%2Fb``), shortest name first: for
    ``/api/v1/queues/a/b/messages``, ``/api/v1/queues/a%2Fb/messages``, then
    ``/api/v1/queues/a%2Fb%2Fmessages``."""
    head, found, rest = path.partition(marker)
    if not found:
        return
    parts = rest.split("/")
    for joined in range(2, len(parts) + 1):
        yield head + marker + "/".join(["%2F".join(parts[:joined]), *parts[joined:]])


class BodyReceive:
    """ASGI ``receive`` over an RSGI HTTP protocol: the body in chunks, then the disconnect."""

    def __init__(self, protocol: Any):
        self.protocol = protocol
        self.chunks: Any = None
        self.read = False

    async def __call__(self) -> Message:
        if self.read:
            await self.protocol.client_disconnect()
            return {"type": "http.disconnect"}
        if self.chunks is None:
            self.chunks = self.protocol.__aiter__()
        try:
            chunk = await self.chunks.__anext__()
        except StopAsyncIteration:
            return self._ended(complete=True)
        if chunk:
            return {"type": "http.request", "body": chunk, "more_body": True}
        try:  # an empty chunk: the end, complete when nothing follows it
            await self.chunks.__anext__()
        except StopAsyncIteration:
            return self._ended(complete=True)
        return self._ended(complete=False)

    def disconnect_future(self) -> asyncio.Future[Any] | None:
        """Once the body is read, the client's disconnect as granian gives it (see
        :meth:`DisconnectReceive.disconnect_future`); before, None."""
        return self.protocol.client_disconnect() if self.read else None

    def _ended(self, complete: bool) -> Message:
        self.read = True
        if complete:
            return {"type": "http.request", "body": b"", "more_body": False}
        return {"type": "http.disconnect"}


class DisconnectReceive:
    """ASGI ``receive`` for a request whose body is not read: the client's disconnect."""

    def __init__(self, protocol: Any):
        self.protocol = protocol

    async def __call__(self) -> Message:
        await self.protocol.client_disconnect()
        return {"type": "http.disconnect"}

    def disconnect_future(self) -> asyncio.Future[Any] | None:
        """The client's disconnect as granian gives it: an asyncio future, done when the client
        leaves (cancel it to stop watching)."""
        return self.protocol.client_disconnect()


class ResponseSend:
    """ASGI ``send`` answering through an RSGI HTTP protocol: the response once its last body
    message came (granian sets ``Content-Length``: the application's is left out)."""

    def __init__(self, protocol: Any):
        self.protocol = protocol
        self.status = 500
        self.headers: list[tuple[str, str]] = []
        self.body: list[bytes] = []

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = [(name.decode("latin-1"), value.decode("latin-1"))
                            for name, value in message.get("headers", ()) if name.lower() != b"content-length"]
        elif message["type"] == "http.response.body":
            self.body.append(message.get("body", b""))
            if not message.get("more_body", False):
                self.protocol.response_bytes(self.status, self.headers, b"".join(self.body))


class Lifespan:
    """Runs an ASGI lifespan handler (``handler(receive, send)``) for RSGI: :meth:`startup` from
    ``__rsgi_init__``, :meth:`shutdown` from ``__rsgi_del__``, each on granian's event loop while
    it is not running. A startup that fails raises: the worker does not serve."""

    def __init__(self, handler: Callable[[Callable[[], Awaitable[Message]],
                                          Callable[[Message], Awaitable[None]]], Awaitable[None]]):
        self.handler = handler
        self.inbox: asyncio.Queue[Message] | None = None
        self.task: asyncio.Future[Any] | None = None
        self.answered: asyncio.Future[Any] | None = None

    def startup(self, loop: asyncio.AbstractEventLoop) -> None:
        answer = self._ask(loop, {"type": "lifespan.startup"}, start=True)
        if answer["type"] != "lifespan.startup.complete":
            raise RuntimeError(f"lifespan startup failed: {answer.get('message', '')}")

    def shutdown(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.task is None:
            return
        self._ask(loop, {"type": "lifespan.shutdown"})
        loop.run_until_complete(self.task)

    def _ask(self, loop: asyncio.AbstractEventLoop, message: Message, start: bool = False) -> Message:
        async def ask() -> Message:
            if start:
                self.inbox = asyncio.Queue()
                self.task = asyncio.ensure_future(self.handler(self.inbox.get, self._send))
            assert self.inbox is not None and self.task is not None
            answered: asyncio.Future[Any] = loop.create_future()
            self.answered = answered
            self.inbox.put_nowait(message)
            await asyncio.wait([answered, self.task], return_when=asyncio.FIRST_COMPLETED)
            if answered.done():
                return answered.result()
            self.task.result()  # the handler ended without an answer: its error, if any
            return {"type": "lifespan.failed"}

        return loop.run_until_complete(ask())

    async def _send(self, message: Message) -> None:
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(message)
