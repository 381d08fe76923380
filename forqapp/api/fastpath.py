"""Forq's hot calls — produce, consume (the long poll) and ack — answered straight from the request's
scope (RSGI's, as ``forq_serve`` serves the API, or ASGI's), without Django's request, resolver and
response objects.

Under Forq's load these three are nearly every request, and the API process's event loop is its
bottleneck: building an ``ASGIRequest``, resolving the URL, the endpoint wrapper and an
``HttpResponse`` cost more of it than the call itself. :class:`FastPath` takes a request only when
everything about it is ordinary: one of the three routes with the right method, a path with no
percent-escapes, and exactly one ``X-API-Key`` that is known without a query (the root key, or a
scoped key in this process's cache) and allows the call on the queue. Anything else — a wrong or
unknown key (401, the throttle), a scope refusal (403), a wrong method (405), an odd path — goes
the general way (:mod:`forqapp.api.views` through :mod:`forqapp.api.plumbing`), which answers it.

What it does is the views' own (it calls :func:`forqapp.api.views.send_body`, ``take`` and
``ack_receipt``, as the views do): the same validation and service calls through
:mod:`forqapp.services.groupcommit`, the same error codes, and byte for byte the same answers, security
headers included (``tests/test_fastpath.py`` compares both ways on every case it makes).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from .. import errors
from ..errors import ForqError
from ..keys import cache as key_cache
from . import plumbing, views
from .plumbing import BodyRefused

logger = logging.getLogger("forqapp.api")

_ROUTE = re.compile(r"/api/v1/queues/([^/]+)/messages(?:/([^/]+)/ack)?")
_KEY_HEADER = b"x-api-key"
_RECEIPT_HEADER = b"x-forq-receipt"

Headers = list[tuple[str, str]]
Answer = tuple[int, Headers, bytes]  # status, headers, body
Taken = tuple[str, str, str | None, str | None]  # call, queue, message id, receipt


def _headers(*extra: tuple[str, str]) -> Headers:
    """``extra``, then the headers :func:`forqapp.api.plumbing.secure` adds."""
    return [*extra, *plumbing.security_headers()]


def _route(path: str, method: str) -> tuple[str, str, str, str | None] | None:
    """(call, the key's action it needs, queue, message id) of a hot call's path and method."""
    if not path.startswith("/api/v1/queues/"):
        return None
    match = _ROUTE.fullmatch(path)
    if match is None:
        return None
    queue, message_id = match.groups()
    if message_id is not None and method == "POST":
        return "ack", "consume", queue, message_id
    if message_id is None and method == "POST":
        return "produce", "produce", queue, None
    if message_id is None and method == "GET":
        return "consume", "consume", queue, None
    return None


def _granted(token: str, queue: str, action: str) -> bool:
    """Whether ``token`` is a key known without a query that allows ``action`` on ``queue``."""
    try:
        key = key_cache.for_token_cached(token)
    except Exception:  # noqa: BLE001 - whatever it is, the general path answers it
        return False
    return key is not None and key is not key_cache.MISS and key.allows(queue, action)


def _taken(route: tuple[str, str, str, str | None] | None, headers: Iterable[tuple[Any, Any]],
           key_name: bytes | str, receipt_name: bytes | str) -> Taken | None:
    """What the fast path takes of a request on a hot route: exactly one key, known and allowing
    the call, and at most one receipt (the names and values as the interface gives them: ASGI's
    bytes, RSGI's text)."""
    if route is None:
        return None
    token = receipt = None
    for name, value in headers:
        if name == key_name:
            if token is not None:
                return None  # twice: the general path joins them, as Django does
            token = value
        elif name == receipt_name:
            if receipt is not None:
                return None
            receipt = value
    if token is None:
        return None
    call, action, queue, message_id = route
    if not _granted(_text(token), queue, action):
        return None
    return call, queue, message_id, None if receipt is None else _text(receipt)


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


class FastPath:
    """Routes and answers the hot calls for :class:`forqapp.api.asgi.APIApplication`."""

    def __init__(self, unless_disconnected: Callable[..., Awaitable[Any]]):
        self._unless_disconnected = unless_disconnected

    def take(self, scope: dict[str, Any]) -> Taken | None:
        """(call, queue, message id, receipt header) when this ASGI request is one the fast path
        answers, else None (the general path will)."""
        raw = scope.get("raw_path")
        if raw is not None and b"%" in raw:
            return None
        return _taken(_route(scope["path"], scope["method"]), scope["headers"], _KEY_HEADER, _RECEIPT_HEADER)

    def take_rsgi(self, scope: Any) -> Taken | None:
        """The same for an RSGI request (its path comes percent-decoded: what the views would
        see of it, but for an escaped slash, which fails the route here as a slash does)."""
        return _taken(_route(scope.path, scope.method), scope.headers.items(), "x-api-key", "x-forq-receipt")

    async def answer(self, taken: Taken, read_body: Callable[[], Awaitable[bytes]],
                     receive: Callable[[], Awaitable[dict[str, Any]]], method: str, path: str) -> Answer | None:
        """The answer to a request :meth:`take` took (None: the client went away): ``read_body()``
        gives its body (under the server's bounds), ``receive`` its disconnect."""
        call, queue, message_id, receipt = taken
        try:
            if call == "produce":
                return await self._produce(queue, read_body)
            if call == "consume":
                return await self._unless_disconnected(self._consume(queue), receive)
            return await self._ack(queue, message_id or "", receipt)
        except ForqError as exc:
            return _error(exc.code, exc.status, exc.headers)
        except Exception as exc:
            reason = errors.unavailable(exc)
            if reason is not None:
                errors.say_unavailable(logger, f"{method} {path}", reason)
                return _error(errors.UNHEALTHY, 503, {"Retry-After": errors.UNAVAILABLE_RETRY_AFTER})
            logger.exception("%s %s failed", method, path)
            return _error(errors.INTERNAL)

    async def _produce(self, queue: str, read_body: Callable[[], Awaitable[bytes]]) -> Answer:
        try:
            body = await read_body()
        except BodyRefused as exc:
            return _error(exc.code, exc.status)
        await views.send_body(queue, body)
        return 204, _headers(), b""

    async def _consume(self, queue: str) -> Answer:
        message = await views.take(queue)
        if message is None:
            return 204, _headers(), b""
        body = json.dumps(views.delivered(message))  # as JsonResponse writes it
        receipt = str(message.receipt)
        return 200, _headers(("Content-Type", "application/json"), ("X-Forq-Receipt", receipt)), body.encode()

    async def _ack(self, queue: str, message_id: str, receipt: str | None) -> Answer:
        await views.ack_receipt(queue, message_id, receipt)
        return 204, _headers(), b""


def encoded(headers: Headers) -> list[tuple[bytes, bytes]]:
    """``headers`` as ASGI gives them."""
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]


def _error(code: str, status: int | None = None, headers: dict[str, str] | None = None) -> Answer:
    response = plumbing.secure(plumbing.error_response(code, status, headers))
    return response.status_code, list(response.items()), response.content
