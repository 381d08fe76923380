"""Forq's hot calls — produce, consume (the long poll) and ack — answered straight from the ASGI
scope, without Django's request, resolver and response objects.

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

import functools
import json
import logging
import re
from collections.abc import Awaitable, Callable
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

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]  # status, headers, body


def _headers(*extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    """``extra``, then the headers :func:`forqapp.api.plumbing.secure` adds."""
    return [*extra, *_encoded(plumbing.security_headers())]


@functools.cache
def _encoded(headers: tuple[tuple[str, str], ...]) -> tuple[tuple[bytes, bytes], ...]:
    return tuple((name.encode("latin-1"), value.encode("latin-1")) for name, value in headers)


class FastPath:
    """Routes and answers the hot calls for :class:`forqapp.api.asgi.APIApplication`."""

    def __init__(self, read_body: Callable[..., Awaitable[bytes]],
                 unless_disconnected: Callable[..., Awaitable[Any]]):
        self._read_body = read_body
        self._unless_disconnected = unless_disconnected

    def take(self, scope: dict[str, Any]) -> tuple[str, str, str | None, bytes | None] | None:
        """(call, queue, message id, receipt header) when this request is one the fast path
        answers, else None (the general path will)."""
        path = scope["path"]
        if not path.startswith("/api/v1/queues/"):
            return None
        raw = scope.get("raw_path")
        if raw is not None and b"%" in raw:
            return None
        match = _ROUTE.fullmatch(path)
        if match is None:
            return None
        queue, message_id = match.groups()
        method = scope["method"]
        if message_id is not None and method == "POST":
            call, action = "ack", "consume"
        elif message_id is None and method == "POST":
            call, action = "produce", "produce"
        elif message_id is None and method == "GET":
            call, action = "consume", "consume"
        else:
            return None
        token = receipt = None
        for name, value in scope["headers"]:
            if name == _KEY_HEADER:
                if token is not None:
                    return None  # twice: the general path joins them, as Django does
                token = value
            elif name == _RECEIPT_HEADER:
                if receipt is not None:
                    return None
                receipt = value
        if token is None:
            return None
        try:
            key = key_cache.for_token_cached(token.decode("latin-1"))
        except Exception:  # noqa: BLE001 - whatever it is, the general path answers it
            return None
        if key is None or key is key_cache.MISS or not key.allows(queue, action):
            return None
        return call, queue, message_id, receipt

    async def answer(self, taken: tuple[str, str, str | None, bytes | None], scope: dict[str, Any],
                     receive: Callable[[], Awaitable[dict[str, Any]]]) -> Answer | None:
        """The answer to a request :meth:`take` took (None: the client went away)."""
        call, queue, message_id, receipt = taken
        try:
            if call == "produce":
                return await self._produce(queue, scope, receive)
            if call == "consume":
                return await self._unless_disconnected(self._consume(queue), receive)
            return await self._ack(queue, message_id or "", receipt)
        except ForqError as exc:
            return _error(exc.code, exc.status, exc.headers)
        except Exception as exc:
            reason = errors.unavailable(exc)
            if reason is not None:
                errors.say_unavailable(logger, f"{scope['method']} {scope['path']}", reason)
                return _error(errors.UNHEALTHY, 503, {"Retry-After": errors.UNAVAILABLE_RETRY_AFTER})
            logger.exception("%s %s failed", scope["method"], scope["path"])
            return _error(errors.INTERNAL)

    async def _produce(self, queue: str, scope: dict[str, Any],
                       receive: Callable[[], Awaitable[dict[str, Any]]]) -> Answer | None:
        try:
            body = await self._read_body(scope, receive)
        except BodyRefused as exc:
            return _error(exc.code, exc.status)
        await views.send_body(queue, body)
        return 204, _headers(), b""

    async def _consume(self, queue: str) -> Answer:
        message = await views.take(queue)
        if message is None:
            return 204, _headers(), b""
        body = json.dumps(views.delivered(message))  # as JsonResponse writes it
        receipt = str(message.receipt).encode()
        return 200, _headers((b"Content-Type", b"application/json"), (b"X-Forq-Receipt", receipt)), body.encode()

    async def _ack(self, queue: str, message_id: str, receipt: bytes | None) -> Answer:
        await views.ack_receipt(queue, message_id, None if receipt is None else receipt.decode("latin-1"))
        return 204, _headers(), b""


def _error(code: str, status: int | None = None, headers: dict[str, str] | None = None) -> Answer:
    response = plumbing.secure(plumbing.error_response(code, status, headers))
    return (response.status_code, [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.items()],
            response.content)
