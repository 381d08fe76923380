"""Forq's HTTP API (SPEC §1) as async Django views.

Each view parses and validates the request, calls one service function on a database thread and
maps the outcome to Forq's status codes. ``forq_serve`` routes these paths straight to the views
(:mod:`forqapp.asgi`); mounted with ``include("forqapp.urls")`` they run under any Django server.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from pathlib import Path

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse

from .. import db, errors, services, validation
from ..conf import forq_settings
from ..errors import ForqError
from ..notify import notifier_for
from .auth import client_address, key_matches

logger = logging.getLogger("forqapp.api")

RECEIPT_HEADER = "X-Forq-Receipt"


def error_response(code: str, status: int | None = None, headers: dict[str, str] | None = None) -> JsonResponse:
    return JsonResponse({"code": code}, status=status or errors.STATUS[code], headers=headers)


def secure(response: HttpResponse) -> HttpResponse:
    response["X-Content-Type-Options"] = "nosniff"
    response["X-Frame-Options"] = "DENY"
    response["Referrer-Policy"] = "no-referrer"
    if forq_settings.FORQ_ENV == "pro":
        response["Strict-Transport-Security"] = "max-age=31536000; includeSubDomains"
    if response.status_code == 204:
        del response["Content-Type"]  # no body, no type (Django sets text/html on every response)
    return response


async def _authorize(request: HttpRequest, secret_setting: str) -> None:
    if key_matches(request.headers.get("X-API-Key"), getattr(forq_settings, secret_setting)):
        return  # a valid key always passes, even from a throttled address (and costs no query)
    address = client_address(request)
    retry_after = await db.run(services.auth_retry_after, address)
    if retry_after:
        raise ForqError(errors.TOO_MANY_REQUESTS, headers={"Retry-After": str(retry_after)})
    await db.run(services.auth_failed, address)
    raise ForqError(errors.UNAUTHORIZED)


async def _check_headers(request: HttpRequest, methods: tuple[str, ...], key: str | None) -> None:
    """What is refused from the request line and headers alone: a wrong method, a wrong key."""
    if request.method not in methods:
        raise ForqError(errors.METHOD_NOT_ALLOWED, headers={"Allow": ", ".join(methods)})
    if key:
        await _authorize(request, key)


def _refusal(request: HttpRequest, exc: Exception) -> HttpResponse:
    """The JSON answer to a view's exception: Forq's code, never a bare 500 for bad input."""
    if isinstance(exc, ForqError):
        return error_response(exc.code, exc.status, exc.headers)
    if isinstance(exc, RequestDataTooBig):  # under Django's own handler: DATA_UPLOAD_MAX_MEMORY_SIZE
        return error_response(errors.CONTENT_EXCEEDS_LIMIT, 413)
    if isinstance(exc, SuspiciousOperation):  # e.g. TooManyFieldsSent (DATA_UPLOAD_MAX_NUMBER_FIELDS)
        return error_response(errors.BODY_INVALID)
    logger.error("%s %s failed", request.method, request.path, exc_info=exc)
    return error_response(errors.INTERNAL)


def endpoint(*methods: str, key: str | None = "FORQ_AUTH_SECRET"):
    """Method check, API key, Forq's error mapping and security headers, for every API view.

    The method and key are checked before the view reads the body; forqapp's ASGI app runs the same
    check (:func:`early_refusal`) before it even receives the body, so a wrong key costs no memory."""

    def decorate(view):
        @functools.wraps(view)
        async def wrapper(request: HttpRequest, **kwargs) -> HttpResponse:
            response: HttpResponse
            try:
                await _check_headers(request, methods, key)  # again under the ASGI app: a valid key is a compare
                response = await view(request, **kwargs)
            except Exception as exc:  # noqa: BLE001 - mapped to Forq's codes; unexpected ones logged, 500
                response = _refusal(request, exc)
            return secure(response)

        wrapper.csrf_exempt = True
        wrapper.forq_endpoint = (methods, key)
        return wrapper

    return decorate


async def early_refusal(request: HttpRequest, view) -> HttpResponse | None:
    """The answer ``view`` would give from the request's headers alone (405, 401, 429), or None.
    forqapp's ASGI app asks this before it receives the body: a client with a wrong key, or from a
    throttled address, is answered at once and never has its body buffered."""
    spec = getattr(view, "forq_endpoint", None)
    if spec is None:
        return None
    try:
        await _check_headers(request, *spec)
    except Exception as exc:  # noqa: BLE001 - as in the view itself
        return secure(_refusal(request, exc))
    return None


def _json_body(request: HttpRequest) -> dict:
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested ~1,000 deep
        raise ForqError(errors.BODY_INVALID, "body is not JSON") from None
    if not isinstance(body, dict):
        raise ForqError(errors.BODY_INVALID, "body is not a JSON object")
    return body


def _receipt(request: HttpRequest) -> int:
    return validation.receipt(request.headers.get(RECEIPT_HEADER))


# --- health and metrics ----------------------------------------------------------------------


@endpoint("GET", "HEAD", key=None)
async def healthcheck(request: HttpRequest) -> HttpResponse:
    if await db.run(services.healthy):
        return HttpResponse(status=204)
    return error_response(errors.UNHEALTHY)


@endpoint("GET", key="FORQ_METRICS_AUTH_SECRET")
async def metrics(request: HttpRequest) -> HttpResponse:
    from ..metrics import exposition

    body, content_type = exposition()
    return HttpResponse(body, content_type=content_type)


async def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: 404 unless ``FORQ_METRICS_ENABLED`` (checked before the key)."""
    if not forq_settings.FORQ_METRICS_ENABLED:
        return secure(HttpResponse(status=404))
    return await metrics(request)


metrics_view.csrf_exempt = True

@functools.cache
def _openapi_document() -> bytes:
    """forqapp/api/openapi.json, with the bulk endpoints' paths (openapi_bulk.json) merged in."""
    here = Path(__file__).parent
    document = json.loads((here / "openapi.json").read_text())
    bulk = here / "openapi_bulk.json"
    if bulk.exists():
        extra = json.loads(bulk.read_text())
        document["paths"].update(extra.get("paths", {}))
        for kind, items in extra.get("components", {}).items():
            document["components"].setdefault(kind, {}).update(items)
    return json.dumps(document).encode()


@endpoint("GET", key=None)
async def openapi(request: HttpRequest) -> HttpResponse:
    return HttpResponse(_openapi_document(), content_type="application/json")


# --- messages --------------------------------------------------------------------------------


@endpoint("GET", "POST")
async def messages(request: HttpRequest, queue: str) -> HttpResponse:
    if request.method == "POST":
        return await produce(request, queue)
    return await consume(request, queue)


async def produce(request: HttpRequest, queue: str) -> HttpResponse:
    validation.queue_name(queue, produce=True)
    body = _json_body(request)
    await db.run(services.send, queue, body.get("content"), body.get("processAfter"))
    return HttpResponse(status=204)


async def claim_for_client(claim, *args):
    """Run ``claim`` (one message or a list) on a database thread. If the waiting request is
    cancelled meanwhile (its client went away), whatever the claim took is given back rather than
    lost to a closed connection (the attempt is not counted)."""
    future = db.submit(claim, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        def give_back(f: asyncio.Future) -> None:
            if f.cancelled() or f.exception() is not None or not f.result():
                return
            result = f.result()
            for message in result if isinstance(result, list) else [result]:
                db.pool().submit(services.release, message)

        future.add_done_callback(give_back)
        raise


def watch_disconnect(request: HttpRequest) -> None:
    """About to wait: under forqapp's ASGI app, a client that goes away now cancels the view.
    (Under Django's own ASGI handler, Django cancels async views on disconnect by itself.)"""
    watch = getattr(request, "forq_watch", None)
    if watch is not None:
        watch.arm()


_draining = False


def drain() -> None:
    """The server is stopping: long polls stop waiting (they answer 204)."""
    global _draining
    _draining = True
    notifier_for(services.alias()).wake_all()


async def consume(request: HttpRequest, queue: str) -> HttpResponse:
    validation.queue_name(queue)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + forq_settings.FORQ_LONG_POLL_SECONDS
    notifier = notifier_for(services.alias())
    while not _draining:
        message = await claim_for_client(services.claim, queue)
        if message is not None:
            response = JsonResponse(
                {"id": message.id, "content": message.content, "receipt": str(message.receipt)}
            )
            response[RECEIPT_HEADER] = str(message.receipt)
            return response
        remaining = deadline - loop.time()
        if remaining <= 0:
            return HttpResponse(status=204)
        watch_disconnect(request)
        await notifier.wait_async(queue, remaining)
    return HttpResponse(status=204)


@endpoint("POST")
async def ack(request: HttpRequest, queue: str, message_id: str) -> HttpResponse:
    queue, message_id, receipt = _delivery(request, queue, message_id)
    await db.run(services.ack_delivery, queue, message_id, receipt)
    return HttpResponse(status=204)


@endpoint("POST")
async def nack(request: HttpRequest, queue: str, message_id: str) -> HttpResponse:
    queue, message_id, receipt = _delivery(request, queue, message_id)
    await db.run(services.nack_delivery, queue, message_id, receipt)
    return HttpResponse(status=204)


def _delivery(request: HttpRequest, queue: str, message_id: str) -> tuple[str, str, int]:
    return validation.queue_name(queue), validation.message_id(message_id), _receipt(request)


def not_found(request: HttpRequest | None, exception=None, **kwargs) -> HttpResponse:
    """No such endpoint: 404 JSON, as every answer of the API (Forq's SDKs parse the body)."""
    return secure(error_response(errors.NOT_FOUND_ROUTE))


not_found.csrf_exempt = True


async def unknown_path(request: HttpRequest) -> HttpResponse:
    """Any other path under ``api/v1/`` (the last route): the same JSON 404."""
    return not_found(request)


unknown_path.csrf_exempt = True

