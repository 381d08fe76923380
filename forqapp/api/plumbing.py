"""What every API view shares: the :func:`endpoint` decorator (method check, API key and its
throttle, Forq's error mapping, security headers), JSON body parsing and the answers of the edges
(404 for unknown paths). Views hold none of this; they map HTTP to one service call.

The method and key are checked from the request line and headers alone (:func:`early_refusal`),
which forqapp's ASGI app (:mod:`forqapp.api.asgi`) asks before it receives the body.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .. import errors, metrics, services, validation
from ..conf import forq_settings, hot
from ..errors import ForqError
from ..keys import ACTIONS
from ..keys import cache as key_cache
from ..server import intake
from .auth import client_address, key_matches

logger = logging.getLogger("forqapp.api")

RECEIPT_HEADER = "X-Forq-Receipt"

View = Callable[..., Coroutine[Any, Any, HttpResponse]]


@dataclass(frozen=True)
class Endpoint:
    """What :func:`endpoint` declares about a view, for the ASGI app and the route tests."""

    methods: tuple[str, ...]
    key: str | None  # the setting that holds the API key, or None: open
    waits: tuple[str, ...]  # methods that may wait (long polls): cancelled when their client leaves
    # The action (forqapp.keys: produce, consume, manage, read) each method needs, and on what:
    # "queue" the path's queue, "all" every queue (a ``*`` grant), "view" the view checks (key_of).
    # An endpoint that declares none takes the root key only.
    actions: tuple[tuple[str, str], ...] = ()
    scope: str = "queue"

    def action(self, method: str) -> str | None:
        for m, action in self.actions:
            if m == method:
                return action
        return None


def spec(view: object) -> Endpoint | None:
    """The :class:`Endpoint` of an API view, or None for anything else."""
    return getattr(view, "forq_endpoint", None)


def error_response(code: str, status: int | None = None, headers: dict[str, str] | None = None) -> JsonResponse:
    return JsonResponse({"code": code}, status=status or errors.STATUS[code], headers=headers)


_SECURITY_HEADERS = (("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"),
                     ("Referrer-Policy", "no-referrer"))
_HSTS = ("Strict-Transport-Security", "max-age=31536000; includeSubDomains")


def security_headers() -> tuple[tuple[str, str], ...]:
    """The headers every API answer carries (HSTS with ``FORQ_ENV = "pro"``), in their order."""
    return (*_SECURITY_HEADERS, _HSTS) if hot("FORQ_ENV") == "pro" else _SECURITY_HEADERS


def secure(response: HttpResponse) -> HttpResponse:
    for name, value in security_headers():
        response[name] = value
    if response.status_code == 204:
        del response["Content-Type"]  # no body, no type (Django sets text/html on every response)
    return response


# Set on a request whose method and key :func:`early_refusal` passed (under forqapp's ASGI app);
# under any other server the view's wrapper checks them itself.
_HEADERS_CHECKED = "_forq_headers_checked"


API_KEY_SETTING = "FORQ_AUTH_SECRET"  # endpoints under it take scoped keys too (forqapp.keys)
_KEY = "forq_key"  # the request's forqapp.keys.Key, once authenticated


def key_of(request: HttpRequest):
    """The :class:`forqapp.keys.Key` the request authenticated with (None on an open endpoint)."""
    return getattr(request, _KEY, None)


def _bearer(request: HttpRequest) -> str | None:
    """The token of ``Authorization: Bearer <token>`` (how Prometheus's ``authorization`` sends
    its credentials to ``/metrics``), or None."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


async def _authorize(request: HttpRequest, secret_setting: str) -> None:
    given = request.headers.get("X-API-Key")
    if secret_setting == API_KEY_SETTING:
        key = key_cache.for_token_cached(given)  # no query: the root key, or a cached scoped key
        if key is key_cache.MISS:
            key = await services.run_async(key_cache.for_token, given)
        if key is not None:
            setattr(request, _KEY, key)
            return  # a valid key always passes, even from a throttled address
    elif key_matches(given or _bearer(request), getattr(forq_settings, secret_setting)):
        return  # a valid key always passes, even from a throttled address (and costs no query)
    address = client_address(request)
    retry_after = await services.run_async(services.auth_retry_after, address)
    if not retry_after:  # counted, unless concurrent wrong keys blocked the address meanwhile
        retry_after = await services.run_async(services.auth_failed, address)
    if retry_after:
        raise ForqError(errors.TOO_MANY_REQUESTS, headers={"Retry-After": str(retry_after)})
    if secret_setting == API_KEY_SETTING and not forq_settings.FORQ_AUTH_SECRET:
        _say_no_root_key()
    raise ForqError(errors.UNAUTHORIZED)


_said_no_root_key = 0.0


def _say_no_root_key() -> None:
    """A key refused by a process without ``FORQ_AUTH_SECRET`` (a ``runserver`` started in a shell
    that never exported it): every root key is refused there, so say why, once a minute."""
    global _said_no_root_key
    now = time.monotonic()
    if now - _said_no_root_key >= 60:
        _said_no_root_key = now
        logger.warning("an API key was refused, and this process has no FORQ_AUTH_SECRET: only scoped keys "
                       "(forq_keys) are accepted here; export FORQ_AUTH_SECRET where the server starts")


async def _check_headers(request: HttpRequest, endpoint: Endpoint) -> None:
    """What is refused from the request line and headers alone: a wrong method (methods are
    case-sensitive: Django's request has it upper-cased, so ``get`` is read as it came), a wrong key."""
    if _method_as_sent(request) not in endpoint.methods:
        raise ForqError(errors.METHOD_NOT_ALLOWED, headers={"Allow": ", ".join(endpoint.methods)})
    if endpoint.key:
        await _authorize(request, endpoint.key)


def _method_as_sent(request: HttpRequest) -> str:
    scope = getattr(request, "scope", None)  # ASGI's (forq_serve); WSGI's META is its environ
    return str(scope["method"] if scope is not None else request.META.get("REQUEST_METHOD", request.method))


def _check_scope(request: HttpRequest, endpoint: Endpoint, kwargs: dict[str, Any]) -> None:
    """403 ``forbidden.key_scope`` when the request's scoped key lacks the endpoint's grant (after
    the 401 checks; a 403 does not count toward the throttle: the key is right)."""
    key = key_of(request)
    if key is None or key.root or endpoint.scope == "view":
        return
    action = endpoint.action(request.method or "")
    if action is not None:
        if endpoint.scope == "all":
            if key.allows("*", action):
                return
        elif key.allows(kwargs.get("queue", ""), action):
            return
    metrics.api_key_forbidden_total.labels(key.access_key_id, action or "root").inc()
    raise ForqError(errors.FORBIDDEN, f"this key may not {action or 'use this endpoint'}"
                    + (" on every queue" if endpoint.scope == "all" else f" on {kwargs.get('queue', '')!r}"))


def require(request: HttpRequest, queue: str, action: str) -> None:
    """For views that check their own grants (``scope="view"``): 403 unless the key allows it."""
    key = key_of(request)
    if key is not None and not key.allows(queue, action):
        metrics.api_key_forbidden_total.labels(key.access_key_id, action).inc()
        raise ForqError(errors.FORBIDDEN, f"this key may not {action} on {queue!r}")


def _refusal(request: HttpRequest, exc: Exception) -> HttpResponse:
    """The JSON answer to a view's exception: Forq's code, never a bare 500 for bad input."""
    if isinstance(exc, ForqError):
        return error_response(exc.code, exc.status, exc.headers)
    if isinstance(exc, RequestDataTooBig):  # under Django's own handler: DATA_UPLOAD_MAX_MEMORY_SIZE
        return error_response(errors.CONTENT_EXCEEDS_LIMIT, 413)
    if isinstance(exc, SuspiciousOperation):  # e.g. TooManyFieldsSent (DATA_UPLOAD_MAX_NUMBER_FIELDS)
        return error_response(errors.BODY_INVALID)
    reason = errors.unavailable(exc)
    if reason is not None:
        errors.say_unavailable(logger, f"{request.method} {request.path}", reason)
        return error_response(errors.UNHEALTHY, 503, {"Retry-After": errors.UNAVAILABLE_RETRY_AFTER})
    logger.error("%s %s failed", request.method, request.path, exc_info=exc)
    return error_response(errors.INTERNAL)


def endpoint(*methods: str, key: str | None = API_KEY_SETTING, waits: tuple[str, ...] = (),
             action: str | dict[str, str] | None = None, scope: str = "queue") -> Callable[[View], View]:
    """Method check, API key, Forq's error mapping and security headers, for every API view.
    ``waits``: the methods under which the view may wait for a message (:mod:`forqapp.services.waiting`).
    ``action``: what a scoped key needs (one action, or one per method) on ``scope`` (see
    :class:`Endpoint`); the root key (``FORQ_AUTH_SECRET``) may do everything.

    The method and key are checked before the view reads the body; forqapp's ASGI app runs that
    check (:func:`early_refusal`) before it even receives the body, so a wrong key costs no memory,
    and the view then skips it."""
    if action is None:
        actions: tuple[tuple[str, str], ...] = ()
    elif isinstance(action, str):
        actions = tuple((m, action) for m in methods)
    else:
        actions = tuple(action.items())
    if any(a not in ACTIONS for _, a in actions) or scope not in ("queue", "all", "view"):
        raise ValueError(f"unknown action or scope in {actions!r}, {scope!r}")
    declared = Endpoint(methods, key, waits, actions, scope)

    def decorate(view: View) -> View:
        @functools.wraps(view)
        async def wrapper(request: HttpRequest, **kwargs: Any) -> HttpResponse:
            response: HttpResponse
            try:
                if not getattr(request, _HEADERS_CHECKED, False):  # forqapp's ASGI app checked them already
                    await _check_headers(request, declared)
                _check_scope(request, declared, kwargs)
                response = await view(request, **kwargs)
            except Exception as exc:  # noqa: BLE001 - mapped to Forq's codes; unexpected ones logged, 500
                response = _refusal(request, exc)
            return secure(response)

        wrapper.csrf_exempt = True  # type: ignore[attr-defined]
        wrapper.forq_endpoint = declared  # type: ignore[attr-defined]
        return wrapper

    return decorate


async def early_refusal(request: HttpRequest, view: object, kwargs: dict[str, Any] | None = None
                        ) -> HttpResponse | None:
    """The answer ``view`` would give from the request line and headers alone (405, 401, 429, and
    403 for a key without the grant on the path's queue, ``kwargs`` being the route's), or None.
    forqapp's ASGI app asks this before it receives the body: a client with a wrong key, from a
    throttled address, or whose key may not do this, is answered at once and never has its body
    buffered."""
    declared = spec(view)
    if declared is None:
        return None
    try:
        await _check_headers(request, declared)
        if kwargs is not None:
            _check_scope(request, declared, kwargs)
    except Exception as exc:  # noqa: BLE001 - as in the view itself
        return worded(view, secure(_refusal(request, exc)))
    setattr(request, _HEADERS_CHECKED, True)  # the view need not check them again
    return None


def worded(view: object, response: HttpResponse) -> HttpResponse:
    """A refusal given before ``view`` ran (from the headers, or a body not read whole), in the
    view's words: v2's carry a ``message``, v1's the code alone."""
    explain = getattr(view, "forq_explain", None)
    return explain(response) if explain is not None else response


def json_body(request: HttpRequest) -> dict[str, Any]:
    """The request's body, which must be a JSON object (400 ``bad_request.body.invalid`` if not)."""
    return json_object(body_of(request))


def body_of(request: HttpRequest) -> bytes:
    """The request's body (400 ``bad_request.body.invalid`` when Django cannot read it: a
    ``Content-Length`` of "abc" raises ValueError there)."""
    try:
        return request.body
    except ValueError:
        raise ForqError(errors.BODY_INVALID, "body is not JSON") from None


def json_object(raw: bytes) -> dict[str, Any]:
    """``raw`` parsed, which must be a JSON object (400 ``bad_request.body.invalid`` if not)."""
    try:
        body = validation.json_loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested ~1,000 deep
        raise ForqError(errors.BODY_INVALID, "body is not JSON") from None
    if not isinstance(body, dict):
        raise ForqError(errors.BODY_INVALID, "body is not a JSON object")
    return body


@csrf_exempt
def not_found(request: HttpRequest | None, exception: Exception | None = None, **kwargs: Any) -> HttpResponse:
    """No such endpoint: 404 JSON, as every answer of the API (Forq's SDKs parse the body)."""
    return secure(error_response(errors.NOT_FOUND_ROUTE))


@csrf_exempt
async def unknown_path(request: HttpRequest) -> HttpResponse:
    """Any other path under ``api/v1/`` (the last route): the same JSON 404."""
    return not_found(request)


# --- a body the ASGI listener refused to read whole (forqapp.server.intake) -------------------


class BodyRefused(Exception):
    """The body is not read whole: too big (413), too slow (408), incomplete (400), or one slow
    body too many from its address (429)."""

    def __init__(self, code: str, status: int):
        self.code, self.status = code, status


BODY_CODES = {intake.TOO_LARGE: errors.CONTENT_EXCEEDS_LIMIT, intake.TOO_SLOW: errors.REQUEST_TIMEOUT,
               intake.INCOMPLETE: errors.BODY_INVALID, intake.TOO_MANY: errors.TOO_MANY_REQUESTS}
