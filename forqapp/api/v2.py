"""The v2 HTTP API (``/api/v2/``): queues as resources, SQS-grade messages.

Beyond Forq's API (:mod:`forqapp.api.views`, :mod:`forqapp.api.bulk`, both unchanged): send one
message or a batch of up to 10 (priority, attributes, deduplication, delay, retention; per-entry
results, one transaction); receive up to 10 with a long poll and a visibility override; ack, nack
and change the visibility of deliveries by receipt, one or a batch; defer one with saved state;
peek; each queue's policy (get, put, patch, delete; flow control: ``max_in_flight``, ``rate``),
the queue list with counts, purge; a DLQ's requeue and delete (one or all); schedules (list, get,
put, delete, run now).

Same API key, throttle and security headers as v1 (:func:`forqapp.api.plumbing.endpoint`), but
errors are ``{"code", "message"}``. Fields are snake_case, durations are seconds (numbers), times
Unix ms. Unknown fields are refused (a misspelt ``prority`` must not pass silently). Each view
parses its request once, into :mod:`forqapp.validation`'s typed inputs (bounds from the one table
of limits in :mod:`forqapp.vocab`), calls one service function and shapes the answer.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .. import errors, services, validation, vocab
from ..conf import forq_settings, send_limits
from ..errors import ForqError
from ..services import groupcommit, schedules, waiting
from ..validation import Delivery, PolicyChange, ReceiveOptions, ScheduleInput, SendEntry
from .plumbing import View, endpoint, json_body, key_of, secure

# The answer's ``message`` when the error carries none of its own (the plumbing's refusals).
MESSAGES = {
    errors.UNAUTHORIZED: "missing or wrong X-API-Key",
    errors.FORBIDDEN: "this API key has no grant for this action on this queue",
    errors.TOO_MANY_REQUESTS: "too many wrong keys from this address: retry after Retry-After seconds",
    errors.METHOD_NOT_ALLOWED: "method not allowed on this path (see Allow)",
    errors.CONTENT_EXCEEDS_LIMIT: "the body is over the size limit",
    errors.BODY_INVALID: "the body is invalid",
    errors.REQUEST_TIMEOUT: "the body arrived too slowly",
    errors.NOT_FOUND_ROUTE: "no such endpoint",
    errors.NOT_FOUND_MESSAGE: "no such message or delivery",
    errors.NOT_FOUND_QUEUE: "no such queue",
    errors.NOT_FOUND_SCHEDULE: "no such schedule",
    errors.QUEUE_FULL: "the queue is full (its max_length)",
    errors.INTERNAL: "unexpected failure; details are in the server log",
    errors.UNHEALTHY: "the database cannot serve this now (full disk, busy, or out of reach): retry after Retry-After seconds",
}


# --- answers --------------------------------------------------------------------------------------


def problem(code: str, message: str | None = None, status: int | None = None,
            headers: dict[str, str] | None = None) -> JsonResponse:
    """A v2 error answer: ``{"code", "message"}``."""
    if not message or message == code:
        message = MESSAGES.get(code, code)
    return JsonResponse({"code": code, "message": message}, status=status or errors.STATUS.get(code, 400),
                        headers=headers)


def _explained(response: HttpResponse) -> HttpResponse:
    """The plumbing's own refusals (401, 405, 429, 413, 500) are ``{"code"}``: add the message."""
    if response.status_code < 400 or not response.get("Content-Type", "").startswith("application/json"):
        return response
    body = json.loads(response.content)
    if "message" in body:
        return response
    body["message"] = MESSAGES.get(body.get("code", ""), "")
    response.content = json.dumps(body).encode()
    return response


def v2_endpoint(*methods: str, waits: tuple[str, ...] = (), action: str | dict[str, str] | None = None,
                scope: str = "queue") -> Callable[[View], View]:
    """:func:`forqapp.api.plumbing.endpoint` (method, key and its grant, throttle, headers), with v2's errors."""

    def decorate(view: View) -> View:
        @functools.wraps(view)
        async def answering(request: HttpRequest, **kwargs: Any) -> HttpResponse:
            try:
                return await view(request, **kwargs)
            except ForqError as exc:
                return problem(exc.code, str(exc), exc.status, exc.headers)

        guarded = endpoint(*methods, waits=waits, action=action, scope=scope)(answering)

        @functools.wraps(guarded)  # keeps forq_endpoint and csrf_exempt, which the ASGI app reads
        async def wrapper(request: HttpRequest, **kwargs: Any) -> HttpResponse:
            return _explained(await guarded(request, **kwargs))

        wrapper.forq_explain = _explained  # type: ignore[attr-defined]  # for the ASGI app's early refusals
        return wrapper

    return decorate


@csrf_exempt
async def unknown_path(request: HttpRequest) -> HttpResponse:
    """Any other path under ``api/v2/``: a JSON 404."""
    return secure(problem(errors.NOT_FOUND_ROUTE, "no such endpoint under /api/v2/"))


# --- reading requests -----------------------------------------------------------------------------


def _no_fields(request: HttpRequest) -> None:
    """An endpoint that takes no field: its body is empty or ``{}`` (an empty form post, which
    Django's test client sends, carries no JSON: not looked at)."""
    if not (request.content_type or "").startswith("multipart/"):
        _body(request, (), empty_ok=True)


def _body(request: HttpRequest, allowed: Iterable[str], *, empty_ok: bool = False) -> dict[str, Any]:
    """The request's JSON object (an empty body is ``{}`` where ``empty_ok``)."""
    try:
        empty = not request.body.strip()
    except ValueError:  # Django sizes the body by a Content-Length it reads as a number
        raise ForqError(errors.BODY_INVALID, "Content-Length is not a number") from None
    if empty_ok and empty:
        return {}
    return validation.fields(json_body(request), "the body", allowed)


def _entries(body: dict[str, Any]) -> list[Any]:
    entries = body.get("entries")
    if not isinstance(entries, list) or len(entries) not in vocab.V2_ENTRIES:
        raise ForqError(errors.BODY_INVALID, f"entries must be a list of 1 to {vocab.V2_MAX_ENTRIES} items")
    return entries


def _settling(request: HttpRequest, queue: str, message_id: str,
              allowed: tuple[str, ...]) -> tuple[Delivery, dict[str, Any]]:
    """(the delivery a settle of one message names: the path's queue and id, the body's receipt;
    the body), checked in that order."""
    queue = validation.queue_name(queue)
    message_id = validation.message_id(message_id)
    body = _body(request, allowed)
    return Delivery.parse(queue, message_id, body.get("receipt"), receipt_name="receipt"), body


def _regular(queue: str) -> str:
    """A queue the resource endpoints manage: a DLQ is part of its queue (``dlq_retention``,
    ``counts.dlq``), with no policy of its own; receive and peek take DLQ names."""
    queue = validation.queue_name(queue)
    if vocab.is_dlq(queue):
        raise ForqError(errors.PRODUCE_TO_DLQ, f"{queue!r} is a dead-letter queue: it is managed with "
                        f"its queue, {vocab.base_of(queue)!r}")
    return queue


def _error(value: object) -> str | None:
    """A nack's failure reason, kept as the message's ``last_error``."""
    return None if value is None else validation.text(value, "error", 0, vocab.ERROR_TEXT_MAX)


def _failure(index: int, exc: ForqError) -> dict[str, Any]:
    """A batch entry's refusal: ``{"index", "code", "message"}``."""
    text = str(exc)
    return {"index": index, "code": exc.code, "message": text if text != exc.code else MESSAGES.get(text, text)}


def _delay(value: object) -> float:
    """A defer's delay: seconds from now until the message is due again (default 0: at once)."""
    return 0 if value is None else validation.seconds(value, "delay", validation.delay_bounds(send_limits()))


def _state(value: object) -> str | None:
    """A defer's ``state``: text saved for the next delivery, by content's rules (at most
    ``FORQ_MAX_CONTENT_BYTES``, storable); None keeps what was saved."""
    if value is None:
        return None
    if not isinstance(value, str) or not validation.is_text(value):
        raise ForqError(errors.BODY_INVALID, "state must be a string (JSON-encode other values), or null to keep the saved one")
    if "\x00" in value and not services.content_storable(value):  # PostgreSQL's text holds no NUL
        raise ForqError(errors.BODY_INVALID, "state with NUL characters cannot be stored on this database")
    limit = forq_settings.FORQ_MAX_CONTENT_BYTES
    if len(value.encode("utf-8")) > limit:
        raise ForqError(errors.CONTENT_EXCEEDS_LIMIT, f"state is over {limit} bytes")
    return value


def _schedule_name(name: str) -> str:
    """The ``{name}`` of a schedule's path: one no schedule can bear (not 1 to 100 of A-Z a-z 0-9
    . _ : -) is no schedule (404), and never reaches the database (PostgreSQL's text holds no NUL)."""
    if not validation.SCHEDULE_NAME.fullmatch(name):
        raise ForqError(errors.NOT_FOUND_SCHEDULE, "no such schedule (a schedule's name is 1 to 100 of "
                        "A-Z a-z 0-9 . _ : -)")
    return name


# --- shaping answers ------------------------------------------------------------------------------


def message_json(m: services.ReceivedMessage) -> dict[str, Any]:
    """A message as v2 shows it (``receipt`` as a string: 64-bit integers lose digits in JavaScript;
    null on a peek; ``state``: what a defer saved, null when none)."""
    return {
        "id": m.id, "content": m.content, "attempts": m.attempts,
        "receipt": None if m.receipt is None else str(m.receipt),
        "priority": m.priority, "attributes": m.attributes or {}, "dedup_id": m.dedup_id,
        "sequence": m.sequence, "received_at": m.received_at, "first_received_at": m.first_received_at,
        "lease_expires_at": m.lease_expires_at, "state": m.state, "group": m.group,
    }


def queue_json(info: services.QueueInfo) -> dict[str, Any]:
    return {
        "name": info.name, "policy": info.policy, "overrides": info.overrides,
        "paused": info.paused, "counts": dict(info.counts), "last_sequence": info.last_sequence,
        "created_at": info.created_at, "groups": info.groups,
    }


# --- queues ---------------------------------------------------------------------------------------


@v2_endpoint("GET", action="read", scope="view")
async def queues(request: HttpRequest) -> HttpResponse:
    """``GET /api/v2/queues`` → ``{"queues": [queue]}``: every queue, its policy and counts."""
    infos = await services.run_async(services.list_queues)
    key = key_of(request)  # a scoped key sees the queues it may read
    return JsonResponse({"queues": [queue_json(info) for info in infos if key is None or key.allows(info.name, "read")]})


@v2_endpoint("GET", "PUT", "PATCH", "DELETE",
             action={"GET": "read", "PUT": "manage", "PATCH": "manage", "DELETE": "manage"})
async def queue(request: HttpRequest, queue: str) -> HttpResponse:
    """``/api/v2/queues/{queue}``: GET its policy and counts; PUT its whole policy (absent fields
    follow the global settings); PATCH some fields; DELETE it with its messages (its dead-letter
    queue is a queue of its own: its messages stay)."""
    queue = _regular(queue)
    if request.method == "DELETE":
        if not await services.run_async(services.delete_queue, queue):
            raise ForqError(errors.NOT_FOUND_QUEUE, f"no queue {queue!r}")
        return HttpResponse(status=204)
    if request.method == "GET":
        info = await services.run_async(services.queue_info, queue)
    else:
        change = PolicyChange.parse(json_body(request), replace=request.method == "PUT")
        info = await services.run_async(services.configure_queue, queue, change)
    return JsonResponse(queue_json(info))


@v2_endpoint("POST", action="manage")
async def purge(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v2/queues/{queue}/purge`` → ``{"purged": n}``: every message of the queue (not its
    DLQ's) deleted, whatever its state; of a DLQ (``orders-dlq``, which needs manage on the DLQ),
    every dead message (:func:`forqapp.services.delete_dead`)."""
    queue = validation.queue_name(queue)
    _no_fields(request)
    clear = services.delete_dead if vocab.is_dlq(queue) else services.purge
    return JsonResponse({"purged": await services.run_async(clear, queue)})


# --- dead-letter queues: requeue, delete ------------------------------------------------------------


@v2_endpoint("POST", action="manage")
async def requeue(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v2/queues/{dlq}/requeue`` ``{"id"?}`` (an empty body is fine) → ``{"requeued": n}``:
    the DLQ's message ``id`` (404 when it is not there), or every one, back to its queue, ready,
    keeping its place (:func:`forqapp.services.requeue`). 400 ``bad_request.dlq_only_operation``
    unless the name is a DLQ's."""
    queue = validation.dlq_name(queue)
    body = _body(request, ("id",), empty_ok=True)
    message_id = None if body.get("id") is None else validation.message_id(body["id"])
    n = await services.run_async(services.requeue, queue, message_id)
    if message_id is not None and not n:
        raise ForqError(errors.NOT_FOUND_MESSAGE, f"no message {message_id} in {queue!r} that no consumer holds")
    return JsonResponse({"requeued": n})


# --- send -----------------------------------------------------------------------------------------


@v2_endpoint("POST", action="produce")
async def send(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v2/queues/{queue}/messages`` → 201 ``{"id", "sequence", "deduplicated": false}``
    (``Location``: the message); a deduplicated send creates nothing: 200, the original's id."""
    queue = validation.queue_name(queue, produce=True)
    entry = _send_entry(_body(request, SendEntry.FIELDS))
    (result,) = await groupcommit.run(services.send_entries, queue, [entry])
    if result.deduplicated:
        return JsonResponse(_sent(result))
    response = JsonResponse(_sent(result), status=201)
    response["Location"] = f"{request.path.rstrip('/')}/{result.id}"
    return response


def _send_entry(item: object) -> SendEntry:
    return SendEntry.parse(item, now=services.now_ms(), limits=send_limits(), storable=services.content_storable)


def _sent(result: services.SendResult) -> dict[str, Any]:
    return {"id": result.id, "sequence": result.sequence, "deduplicated": result.deduplicated}


@v2_endpoint("POST", action="produce")
async def send_batch(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v2/queues/{queue}/messages/batch`` ``{"entries": [message]}`` (1 to 10) → 200
    ``{"successful": [{"index", "id", "sequence", "deduplicated"}], "failed": [{"index", "code",
    "message"}]}``. Each entry is checked on its own; the valid ones are sent in one transaction. A
    refusal of the whole batch (the queue is full) is the request's error, and sends nothing."""
    queue = validation.queue_name(queue, produce=True)
    entries = _entries(_body(request, ("entries",)))
    valid: list[tuple[int, SendEntry]] = []
    failed = []
    for index, item in enumerate(entries):
        try:
            valid.append((index, _send_entry(item)))
        except ForqError as exc:
            failed.append(_failure(index, exc))
    results = await services.run_async(services.send_entries, queue, [e for _, e in valid]) if valid else []
    successful = [{"index": index, **_sent(result)} for (index, _), result in zip(valid, results, strict=True)]
    return JsonResponse({"successful": successful, "failed": failed})


# --- receive, peek --------------------------------------------------------------------------------


@v2_endpoint("POST", waits=("POST",), action="consume")
async def receive(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v2/queues/{queue}/receive`` ``{"max_messages", "wait", "visibility_timeout",
    "random"}`` (all optional; an empty body is fine) → ``{"messages": [...]}``, highest priority
    first; with ``wait``, a long poll of up to that many seconds for the first message."""
    queue = validation.queue_name(queue)
    body = _body(request, ReceiveOptions.FIELDS, empty_ok=True)
    options = ReceiveOptions.parse(body, longest_wait=forq_settings.FORQ_LONG_POLL_SECONDS)
    take = functools.partial(services.receive_many, max_messages=options.max_messages,
                             visibility_timeout=options.visibility_timeout, random=options.random)
    messages = await waiting.claim_async(take, queue, float(options.wait), nothing=[])
    return JsonResponse({"messages": [message_json(m) for m in messages]})


@v2_endpoint("GET", action="read")
async def peek(request: HttpRequest, queue: str) -> HttpResponse:
    """``GET /api/v2/queues/{queue}/peek`` → ``{"message": message | null}``: what a receive would
    get now, with no receipt; nothing changes."""
    queue = validation.queue_name(queue)
    found = await services.run_async(services.peek, queue)
    return JsonResponse({"message": None if found is None else message_json(found)})


@v2_endpoint("GET", "DELETE", action={"GET": "read", "DELETE": "manage"})
async def message(request: HttpRequest, queue: str, message_id: str) -> HttpResponse:
    """``GET /api/v2/queues/{queue}/messages/{id}`` → the message, in whatever state (404 when it
    is gone); no receipt, nothing changes. ``DELETE`` → 204: a DLQ's message deleted (400
    ``bad_request.dlq_only_operation`` on another queue, whose messages an ack deletes)."""
    if request.method == "DELETE":
        queue, message_id = validation.dlq_name(queue), validation.message_id(message_id)
        if not await services.run_async(services.delete_dead, queue, message_id):
            raise ForqError(errors.NOT_FOUND_MESSAGE, f"no message {message_id} in {queue!r}")
        return HttpResponse(status=204)
    queue, message_id = validation.queue_name(queue), validation.message_id(message_id)
    found = await services.run_async(services.peek, queue, message_id)
    if found is None:
        raise ForqError(errors.NOT_FOUND_MESSAGE, f"no message {message_id} in {queue!r}")
    return JsonResponse({**message_json(found), "failure_reason": found.failure_reason, "last_error": found.last_error})


# --- settle by receipt: one ------------------------------------------------------------------------


@v2_endpoint("POST", action="consume")
async def ack(request: HttpRequest, queue: str, message_id: str) -> HttpResponse:
    """``POST …/messages/{id}/ack`` ``{"receipt"}`` → 204: done, the message is deleted."""
    delivery, _ = _settling(request, queue, message_id, ("receipt",))
    await groupcommit.run(services.ack_delivery, delivery.queue, delivery.id, delivery.receipt)
    return HttpResponse(status=204)


@v2_endpoint("POST", action="consume")
async def nack(request: HttpRequest, queue: str, message_id: str) -> HttpResponse:
    """``POST …/messages/{id}/nack`` ``{"receipt", "error"?}`` → 204: retried after the queue's
    backoff, or dead-lettered when out of attempts; ``error`` is kept as the failure reason."""
    delivery, body = _settling(request, queue, message_id, ("receipt", "error"))
    error = _error(body.get("error"))
    await groupcommit.run(services.nack_delivery, delivery.queue, delivery.id, delivery.receipt, error=error)
    return HttpResponse(status=204)


@v2_endpoint("POST", action="consume")
async def change_visibility(request: HttpRequest, queue: str, message_id: str) -> HttpResponse:
    """``POST …/messages/{id}/change-visibility`` ``{"receipt", "visibility_timeout"}`` → 204: the
    lease now ends that many seconds from now (0: released, receivable at once)."""
    delivery, body = _settling(request, queue, message_id, ("receipt", "visibility_timeout"))
    seconds = validation.visibility(body.get("visibility_timeout"))
    (done,) = await services.run_async(services.settle_many, "change_visibility", delivery.queue,
                                       [(delivery.id, delivery.receipt)], seconds=seconds)
    if not done:
        raise ForqError(errors.NOT_FOUND_MESSAGE, "no such delivery (wrong receipt, queue or id)")
    return HttpResponse(status=204)


@v2_endpoint("POST", action="consume")
async def defer(request: HttpRequest, queue: str, message_id: str) -> HttpResponse:
    """``POST …/messages/{id}/defer`` ``{"receipt", "delay"?, "state"?}`` → 204: the same message
    (id, attempts) back on its queue ``delay`` seconds from now (default 0), behind the others of
    its priority, with ``state`` saved for its next delivery (null or absent: the saved one kept).
    Fenced by the receipt, like ack (:func:`forqapp.services.defer`)."""
    delivery, body = _settling(request, queue, message_id, ("receipt", "delay", "state"))
    delay, state = _delay(body.get("delay")), _state(body.get("state"))
    await services.run_async(services.defer, delivery, delay, state=state)
    return HttpResponse(status=204)


# --- settle by receipt: batches ---------------------------------------------------------------------


async def _settle_batch(request: HttpRequest, queue: str, action: str) -> HttpResponse:
    """``{"entries": [{"id", "receipt"}]}`` (1 to 10; a nack may add ``error``, a change of
    visibility needs ``visibility_timeout``) → ``{"successful": [{"index", "id"}], "failed":
    [{"index", "code", "message"}]}``, the valid entries settled in one transaction."""
    queue = validation.queue_name(queue)
    extra = {"nack": ("error",), "change_visibility": ("visibility_timeout",)}.get(action, ())
    body = _body(request, ("entries", *extra))
    entries = _entries(body)
    seconds = validation.visibility(body.get("visibility_timeout")) if action == "change_visibility" else None
    error = _error(body.get("error"))
    valid: list[tuple[int, Delivery]] = []
    failed = []
    for index, item in enumerate(entries):
        try:
            valid.append((index, Delivery.entry(queue, item)))
        except ForqError as exc:
            failed.append(_failure(index, exc))
    done = await services.run_async(services.settle_many, action, queue, [(d.id, d.receipt) for _, d in valid],
                                    seconds=seconds, error=error) if valid else []
    successful = []
    for (index, delivery), ok in zip(valid, done, strict=True):
        if ok:
            successful.append({"index": index, "id": delivery.id})
        else:
            failed.append(_failure(index, ForqError(
                errors.NOT_FOUND_MESSAGE, "no such delivery (wrong receipt, or the message is gone)")))
    failed.sort(key=lambda f: f["index"])
    return JsonResponse({"successful": successful, "failed": failed})


@v2_endpoint("POST", action="consume")
async def ack_batch(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v2/queues/{queue}/messages/ack``: ack up to 10 deliveries."""
    return await _settle_batch(request, queue, "ack")


@v2_endpoint("POST", action="consume")
async def nack_batch(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v2/queues/{queue}/messages/nack``: nack up to 10 deliveries (``error``: the
    failure reason kept on each)."""
    return await _settle_batch(request, queue, "nack")


@v2_endpoint("POST", action="consume")
async def change_visibility_batch(request: HttpRequest, queue: str) -> HttpResponse:
    """``POST /api/v2/queues/{queue}/messages/change-visibility``: up to 10 deliveries' leases now end
    ``visibility_timeout`` seconds from now (0: released)."""
    return await _settle_batch(request, queue, "change_visibility")


# --- schedules ------------------------------------------------------------------------------------


@v2_endpoint("GET", action="read", scope="all")
async def schedule_list(request: HttpRequest) -> HttpResponse:
    """``GET /api/v2/schedules`` → ``{"schedules": [schedule]}``, by name."""
    infos = await services.run_async(schedules.list_schedules)
    return JsonResponse({"schedules": [info.json() for info in infos]})


@v2_endpoint("GET", "PUT", "DELETE", action={"GET": "read", "PUT": "manage", "DELETE": "manage"}, scope="all")
async def schedule(request: HttpRequest, name: str) -> HttpResponse:
    """``/api/v2/schedules/{name}``: GET it (404 ``not_found.schedule``); PUT it whole, creating or
    replacing it (``{"queue", "content", "cron" | "every", "catch_up"?, "priority"?, "attributes"?,
    "paused"?}``; a schedule whose timing is unchanged keeps its next tick) → 200 the schedule;
    DELETE it → 204."""
    if request.method == "PUT":
        given = ScheduleInput.parse(_body(request, validation.SCHEDULE_FIELDS), storable=services.content_storable)
        info = await services.run_async(schedules.schedule, name, **given.fields)
        return JsonResponse(info.json())
    name = _schedule_name(name)
    if request.method == "DELETE":
        if not await services.run_async(schedules.unschedule, name):
            raise ForqError(errors.NOT_FOUND_SCHEDULE, f"no schedule {name!r}")
        return HttpResponse(status=204)
    return JsonResponse((await services.run_async(schedules.get, name)).json())


@v2_endpoint("POST", action="manage", scope="all")
async def run_schedule(request: HttpRequest, name: str) -> HttpResponse:
    """``POST /api/v2/schedules/{name}/run`` → 201 ``{"id"}`` (``Location``: the message): the
    schedule's message sent now, outside its ticks (also when paused); its next tick is unchanged."""
    _no_fields(request)
    queue, message_id = await services.run_async(_run_now, _schedule_name(name))
    response = JsonResponse({"id": message_id}, status=201)
    api = request.path.rsplit("/schedules/", 1)[0]  # /api/v2, under whatever prefix the project mounts
    response["Location"] = f"{api}/queues/{queue}/messages/{message_id}"
    return response


def _run_now(name: str) -> tuple[str, str]:
    """(the queue, the id) of the message :func:`forqapp.services.schedules.run_now` sent."""
    queue = schedules.get(name).queue
    return queue, schedules.run_now(name)
