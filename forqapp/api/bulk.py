"""Bulk endpoints of the HTTP API, for the Spark connector (:mod:`forqapp.spark`) and other batch
clients: batch produce, staged (exactly-once) batch writes, claim/ack/release many, snapshot reads.

Same auth, error codes and headers as :mod:`forqapp.api.views` (its ``endpoint`` decorator); each
view validates its input, then calls one service function on a database thread.
"""

from __future__ import annotations

import asyncio
import re

from django.http import HttpRequest, HttpResponse, JsonResponse

from .. import db, errors, services, validation
from ..errors import ForqError
from ..notify import notifier_for
from .views import _json_body, claim_for_client, endpoint, watch_disconnect

MAX_BATCH = 10_000  # messages in one batch produce or staged write (the 2 MiB body cap applies too)
MAX_CLAIM = 10_000  # messages in one claim
MAX_DELIVERIES = 10_000  # deliveries in one ack or release
MAX_STAGED = 10_000  # (token, queue) pairs in one publish or discard
MAX_PAGE = 10_000  # rows in one snapshot page
MAX_WAIT_S = 30.0
SNAPSHOT_FIELDS = ("id", "queue", "content", "status", "attempts", "received_at", "process_after",
                   "failure_reason")

_TOKEN = re.compile(r"[A-Za-z0-9._-]{1,100}")
_LIMIT = re.compile(r"[0-9]{1,5}")


def _invalid(message: str) -> ForqError:
    return ForqError(errors.BODY_INVALID, message)


def _list_field(body: dict, name: str, limit: int) -> list:
    value = body.get(name)
    if not isinstance(value, list):
        raise _invalid(f"{name} must be a list")
    if len(value) > limit:
        raise _invalid(f"{name} holds more than {limit} items")
    return value


def valid_token(value: object) -> str:
    if not isinstance(value, str) or not _TOKEN.fullmatch(value):
        raise _invalid("token must match ^[A-Za-z0-9._-]{1,100}$")
    return value


def _int_field(value: object, name: str, lo: int, hi: int, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _invalid(f"{name} must be an integer from {lo} to {hi}")
    return value


def _items(body: dict) -> list[dict]:
    """The ``messages`` of a batch: every item checked for shape here, for content and
    ``processAfter`` by the service (the whole batch is refused if one item is bad)."""
    items = _list_field(body, "messages", MAX_BATCH)
    for item in items:
        if not isinstance(item, dict):
            raise _invalid("each message must be an object")
    return items


def _staged(body: dict) -> list[tuple[str, str]]:
    pairs = []
    for item in _list_field(body, "staged", MAX_STAGED):
        if not isinstance(item, dict):
            raise _invalid("each staged entry must be an object {token, queue}")
        pairs.append((valid_token(item.get("token")), validation.queue_name(item.get("queue"), produce=True)))
    return pairs


def _deliveries(body: dict) -> list[tuple[str, int]]:
    deliveries = []
    for item in _list_field(body, "deliveries", MAX_DELIVERIES):
        if not isinstance(item, dict):
            raise _invalid("each delivery must be an object {id, receipt}")
        deliveries.append((validation.message_id(item.get("id")), validation.receipt(item.get("receipt"))))
    return deliveries


# --- produce ---------------------------------------------------------------------------------


@endpoint("POST")
async def batch(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v1/queues/{queue}/messages/batch`` → 200 ``{"ids": [...]}`` (one transaction)."""
    validation.queue_name(queue, produce=True)
    items = _items(_json_body(request))
    message_ids = await db.run(services.send_many, queue, items) if items else []
    return JsonResponse({"ids": message_ids})


@endpoint("POST")
async def stage(request: HttpRequest, queue: str, token: str) -> HttpResponse:
    """``POST /api/v1/queues/{queue}/staged/{token}`` → 200 ``{"staged": n}``: invisible until
    published."""
    validation.queue_name(queue, produce=True)
    valid_token(token)
    items = _items(_json_body(request))
    n = await db.run(services.stage, queue, token, items) if items else 0
    return JsonResponse({"staged": n})


@endpoint("POST")
async def publish(request: HttpRequest) -> HttpResponse:
    """``POST /api/v1/staged/publish`` ``{"staged": [{"token", "queue"}]}`` → ``{"published": n}``,
    all in one transaction. Publishing a token again publishes nothing more."""
    pairs = _staged(_json_body(request))
    n = await db.run(services.publish_staged, pairs) if pairs else 0
    return JsonResponse({"published": n})


@endpoint("POST")
async def discard(request: HttpRequest) -> HttpResponse:
    """``POST /api/v1/staged/discard`` ``{"staged": [{"token", "queue"}]}`` → ``{"discarded": n}``."""
    pairs = _staged(_json_body(request))
    n = await db.run(services.discard_staged, pairs) if pairs else 0
    return JsonResponse({"discarded": n})


# --- consume ---------------------------------------------------------------------------------


@endpoint("POST")
async def claim(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v1/queues/{queue}/messages/claim`` ``{"max": n, "wait": s}`` → 200
    ``{"messages": [{"id", "content", "attempts", "receipt"}]}``, oldest first; with ``wait``, waits
    up to that many seconds for the first message (an empty list when none came)."""
    queue = validation.queue_name(queue)
    body = _json_body(request)
    limit = _int_field(body.get("max"), "max", 1, MAX_CLAIM, 100)
    wait = body.get("wait", 0)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= MAX_WAIT_S:
        raise _invalid(f"wait must be a number of seconds from 0 to {MAX_WAIT_S:g}")
    notifier = notifier_for(services.alias())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        messages = await claim_for_client(services.claim_many, queue, limit)
        remaining = deadline - loop.time()
        if messages or remaining <= 0:
            break
        watch_disconnect(request)
        await notifier.wait_async(queue, remaining)
    return JsonResponse({"messages": [
        {"id": m.id, "content": m.content, "attempts": m.attempts, "receipt": str(m.receipt)}
        for m in messages
    ]})


@endpoint("POST")
async def ack(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v1/queues/{queue}/messages/ack`` ``{"deliveries": [{"id", "receipt"}]}`` →
    ``{"acked": n}``: how many were still current (the others were redelivered or are gone)."""
    queue = validation.queue_name(queue)
    deliveries = _deliveries(_json_body(request))
    n = await db.run(services.ack_many, queue, deliveries) if deliveries else 0
    return JsonResponse({"acked": n})


def _release_many(queue: str, deliveries: list[tuple[str, int]]) -> int:
    return sum(
        services.release(services.ReceivedMessage(id=m, queue=queue, content="", attempts=0, receipt=r))
        for m, r in deliveries
    )


@endpoint("POST")
async def release(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v1/queues/{queue}/messages/release`` ``{"deliveries": [...]}`` →
    ``{"released": n}``: give claimed messages back (ready at once, the attempt not counted)."""
    queue = validation.queue_name(queue)
    deliveries = _deliveries(_json_body(request))
    n = await db.run(_release_many, queue, deliveries) if deliveries else 0
    return JsonResponse({"released": n})


# --- snapshot --------------------------------------------------------------------------------


def _id_param(request: HttpRequest, name: str) -> str | None:
    value = request.GET.get(name)
    if value is None or value == "":
        return None
    return validation.message_id(value)


@endpoint("GET")
async def snapshot(request: HttpRequest, queue: str) -> HttpResponse:
    """``GET /api/v1/queues/{queue}/snapshot?after=&upto=&limit=`` → ``{"messages": [...],
    "next": id|null}`` (or, with ``format=columns``, ``{"columns": {name: [values]}, "count",
    "next"}``): rows with ``after < id <= upto`` in id order; ``next`` is the ``after`` of
    the following page (null on the last). A read: no lease taken, nothing changed."""
    queue = validation.queue_name(queue)
    after = _id_param(request, "after") or ""
    upto = _id_param(request, "upto")
    raw_limit = request.GET.get("limit", "1000")
    # At most 5 ASCII digits before int(): Python's int() refuses over 4,300 digits (ValueError).
    if not _LIMIT.fullmatch(raw_limit) or not 1 <= int(raw_limit) <= MAX_PAGE:
        raise _invalid(f"limit must be an integer from 1 to {MAX_PAGE}")
    limit = int(raw_limit)
    shape = request.GET.get("format", "rows")
    if shape not in ("rows", "columns"):
        raise _invalid("format must be rows or columns")
    rows = await db.run(services.snapshot_page, queue, after, upto, limit)
    nxt = rows[-1]["id"] if len(rows) == limit else None
    if shape == "columns":  # {"columns": {name: [values]}}: smaller and faster to encode and decode
        columns = {key: [r[key] for r in rows] for key in SNAPSHOT_FIELDS}
        return JsonResponse({"columns": columns, "count": len(rows), "next": nxt})
    return JsonResponse({"messages": rows, "next": nxt})


@endpoint("GET")
async def snapshot_bounds(request: HttpRequest, queue: str) -> HttpResponse:
    """``GET /api/v1/queues/{queue}/snapshot/bounds`` → ``{"count", "minId", "maxId"}``."""
    queue = validation.queue_name(queue)
    return JsonResponse(await db.run(services.snapshot_bounds, queue))
