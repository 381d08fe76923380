"""Bulk endpoints of the HTTP API, for the Spark connector (:mod:`forqapp.spark`) and other batch
clients: batch produce, staged (exactly-once) batch writes, claim/ack/release many, snapshot reads.

Same auth, error codes and headers as every API view (:func:`forqapp.api.plumbing.endpoint`); the
request rules live in :mod:`forqapp.validation`; each view calls one service function.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from .. import errors, services, validation, vocab
from ..errors import ForqError
from ..services import waiting
from .plumbing import endpoint, json_body, require

# --- produce ---------------------------------------------------------------------------------

#: The fields of a bulk message (a batch produce's or a staged write's): the services check their
#: values (``content``'s size, ``processAfter``'s range, ``priority`` -1000..1000, ``attributes``
#: ≤ 10 string pairs, ``group`` a message group's name); any other field refuses the request, rather than be dropped by one endpoint
#: and honoured by the other.
BULK_FIELDS = frozenset({"content", "processAfter", "priority", "attributes", "group"})


def bulk_items(body: dict) -> list[dict[str, Any]]:
    """The ``messages`` of a batch produce or a staged write, each of :data:`BULK_FIELDS` only."""
    items = validation.batch_items(body)
    for item in items:
        if not item.keys() <= BULK_FIELDS:
            unknown = ", ".join(sorted(map(str, item.keys() - BULK_FIELDS)))
            raise ForqError(errors.BODY_INVALID, f"unknown message field(s): {unknown} "
                            f"(a bulk message has {', '.join(sorted(BULK_FIELDS))})")
    return items


@endpoint("POST", action="produce")
async def batch(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v1/queues/{queue}/messages/batch`` ``{"messages": [{"content", "processAfter"?,
    "priority"?, "attributes"?, "group"?}]}`` → 200 ``{"ids": [...]}`` (one transaction; one bad item refuses
    the batch)."""
    validation.queue_name(queue, produce=True)
    items = bulk_items(json_body(request))
    message_ids = await services.run_async(services.send_many, queue, items) if items else []
    return JsonResponse({"ids": message_ids})


@endpoint("POST", action="produce")
async def stage(request: HttpRequest, queue: str, token: str) -> HttpResponse:
    """``POST /api/v1/queues/{queue}/staged/{token}`` → 200 ``{"staged": n}``: invisible until
    published. Same messages as a batch produce."""
    validation.queue_name(queue, produce=True)
    validation.token(token)
    items = bulk_items(json_body(request))
    n = await services.run_async(services.stage, queue, token, items) if items else 0
    return JsonResponse({"staged": n})


def _require_produce(request: HttpRequest, pairs: list[tuple[str, str]]) -> None:
    """A scoped key publishes or discards staged writes only on queues it may produce to (403)."""
    for queue in {queue for _, queue in pairs}:
        require(request, queue, "produce")


@endpoint("POST", action="produce", scope="view")
async def publish(request: HttpRequest) -> HttpResponse:
    """``POST /api/v1/staged/publish`` ``{"staged": [{"token", "queue"}], "sink"?: {"queue", "id",
    "batch"}}`` → ``{"published": n}``, all in one transaction. Publishing a token again publishes
    nothing more. With ``sink`` (a Spark streaming query's micro-batch) the answer also says
    ``"replayed"``: true when that query published this batch or a later one before (then nothing
    is published, and the staged rows are discarded)."""
    body = json_body(request)
    pairs = validation.staged_pairs(body)
    sink = validation.sink_batch(body)
    _require_produce(request, pairs + ([("", sink[0])] if sink else []))
    if sink is None:
        n = await services.run_async(services.publish_staged, pairs) if pairs else 0
        return JsonResponse({"published": n})
    published = await services.run_async(services.publish_sink_batch, pairs, *sink)
    return JsonResponse({"published": published or 0, "replayed": published is None})


@endpoint("POST", action="produce", scope="view")
async def discard(request: HttpRequest) -> HttpResponse:
    """``POST /api/v1/staged/discard`` ``{"staged": [{"token", "queue"}]}`` → ``{"discarded": n}``."""
    pairs = validation.staged_pairs(json_body(request))
    _require_produce(request, pairs)
    n = await services.run_async(services.discard_staged, pairs) if pairs else 0
    return JsonResponse({"discarded": n})


# --- consume ---------------------------------------------------------------------------------


@endpoint("POST", waits=("POST",), action="consume")
async def claim(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v1/queues/{queue}/messages/claim`` ``{"max": n, "wait": s}`` → 200
    ``{"messages": [{"id", "content", "attempts", "receipt", "priority", "attributes", "dedup_id",
    "sequence", "received_at", "first_received_at", "lease_expires_at", "group"}]}`` (times in Unix ms), in the
    queue's order (priority first, then FIFO or LIFO); with ``wait``, waits up to that many seconds
    for the first message (an empty list when none came). ``"throttled"`` (``"concurrency"`` or
    ``"rate"``) says the queue's ``max_in_flight`` or ``rate`` held the claim back."""
    queue = validation.queue_name(queue)
    body = json_body(request)
    limit, wait = validation.claim_limit(body), validation.claim_wait(body)
    throttled: list[str] = []  # why the queue's policy held a claim back (its last word counts)

    def take(name: str, n: int) -> list:
        del throttled[:]
        return services.claim_many(name, n, throttled=throttled)

    messages = await waiting.claim_async(take, queue, wait, limit, nothing=[])
    answer: dict = {"messages": [
        {"id": m.id, "content": m.content, "attempts": m.attempts, "receipt": str(m.receipt),
         "priority": m.priority, "attributes": m.attributes or None, "dedup_id": m.dedup_id,
         "sequence": m.sequence, "received_at": m.received_at, "first_received_at": m.first_received_at,
         "lease_expires_at": m.lease_expires_at, "group": m.group}
        for m in messages
    ]}
    if throttled:
        answer["throttled"] = throttled[-1]
    return JsonResponse(answer)


@endpoint("POST", action="consume")
async def ack(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v1/queues/{queue}/messages/ack`` ``{"deliveries": [{"id", "receipt"}]}`` →
    ``{"acked": n}``: how many were still current (the others were redelivered or are gone)."""
    queue = validation.queue_name(queue)
    deliveries = validation.deliveries(json_body(request))
    n = await services.run_async(services.ack_many, queue, deliveries) if deliveries else 0
    return JsonResponse({"acked": n})


@endpoint("POST", action="consume")
async def release(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v1/queues/{queue}/messages/release`` ``{"deliveries": [...]}`` →
    ``{"released": n}``: give claimed messages back (ready at once, the attempt not counted)."""
    queue = validation.queue_name(queue)
    deliveries = validation.deliveries(json_body(request))
    n = await services.run_async(services.release_many, queue, deliveries) if deliveries else 0
    return JsonResponse({"released": n})


# --- snapshot --------------------------------------------------------------------------------


@endpoint("GET", action="read")
async def snapshot(request: HttpRequest, queue: str) -> HttpResponse:
    """``GET /api/v1/queues/{queue}/snapshot?after=&upto=&limit=`` → ``{"messages": [...],
    "next": id|null}`` (or, with ``format=columns``, ``{"columns": {name: [values]}, "count",
    "next"}``): rows with ``after < id <= upto`` in id order; ``next`` is the ``after`` of
    the following page (null on the last). A read: no lease taken, nothing changed.

    The keys are :data:`forqapp.vocab.SNAPSHOT_COLUMNS`: times in Unix ms, ``status`` its code,
    ``attributes`` an object of strings (null when the message has none)."""
    queue = validation.queue_name(queue)
    after = validation.optional_message_id(request.GET.get("after")) or ""
    upto = validation.optional_message_id(request.GET.get("upto"))
    limit = validation.page_limit(request.GET.get("limit"))
    shape = validation.page_format(request.GET.get("format"))
    rows = await services.run_async(services.snapshot_page, queue, after, upto, limit)
    nxt = rows[-1]["id"] if len(rows) == limit else None
    if shape == "columns":  # {"columns": {name: [values]}}: smaller and faster to encode and decode
        columns = {key: [r[key] for r in rows] for key in vocab.SNAPSHOT_COLUMNS}
        columns["attributes"] = _attributes(columns["attributes"])
        return JsonResponse({"columns": columns, "count": len(rows), "next": nxt})
    for row, attributes in zip(rows, _attributes([r["attributes"] for r in rows]), strict=True):
        row["attributes"] = attributes
    return JsonResponse({"messages": rows, "next": nxt})


def _attributes(texts: list[str | None]) -> list[dict[str, str] | None]:
    """The stored attributes (JSON text, or NULL when none) as objects: the API does not make its
    clients parse JSON inside JSON."""
    if not any(texts):
        return [None] * len(texts)
    loads = json.loads
    return [loads(t) if t else None for t in texts]


@endpoint("GET", action="read")
async def snapshot_bounds(request: HttpRequest, queue: str) -> HttpResponse:
    """``GET /api/v1/queues/{queue}/snapshot/bounds`` → ``{"count", "minId", "maxId"}``."""
    queue = validation.queue_name(queue)
    return JsonResponse(await services.run_async(services.snapshot_bounds, queue))
