"""One function per SQS action: checked input → :mod:`forqapp.services` → SQS's answer.

Each runs on a database thread (synchronous), except ReceiveMessage's wait, which the ASGI app
does as a coroutine (:func:`receive_plan` before, :func:`receive_answer` after). Scopes: sends need
``produce``, receives and settles ``consume``, queue changes ``manage``, reads ``read``."""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import keys, services, validation, vocab
from ..errors import ForqError
from ..keys import Key
from ..models import Message, Queue
from ..vocab import DLQ_SUFFIX, Bounds, base_of, is_dlq
from . import attempts, digests, messages, moves, permissions, protocol, queues, receipts, tags
from .protocol import SqsError, invalid, missing
from .queues import Origin

logger = logging.getLogger("forqapp.sqs")
BATCH_MAX = vocab.SQS_BATCH_MAX
LIST_QUEUES_MAX = Bounds(1, 1000)  # ListQueues' MaxResults
_ENTRY_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")


@dataclass(frozen=True)
class Context:
    key: Key
    origin: Origin

    def need(self, queue: str, action: str, why: str = "") -> None:
        if not self.key.allows(queue, action):
            raise SqsError("AccessDenied", f"The key {self.key.access_key_id} may not {action} on queue {queue}"
                           + (f" ({why})" if why else ""), 403)


def _queue(ctx: Context, body: dict[str, Any], action: str) -> tuple[str, queues.Known]:
    """The queue ``QueueUrl`` names, if it exists and the key may do ``action`` on it. The queue
    actions (manage, read) look now; the message actions trust what this process read within
    :data:`forqapp.sqs.queues.CACHE_S`."""
    name = queues.name_from_url(body.get("QueueUrl"), ctx.origin.region)
    ctx.need(name, action)
    return name, queues.existing(name, fresh=action in (keys.MANAGE, keys.READ))


def _integer(body: dict[str, Any], name: str, bounds: Bounds, default: int | None = None) -> int | None:
    """The integer parameter ``name`` within ``bounds`` (SQS's limits, :mod:`forqapp.vocab`), in
    SQS's words when it is not; ``default`` when absent."""
    value = body.get(name)
    if value is None:
        return default
    if not validation.is_integer(value):
        raise invalid(f"Value {json.dumps(value)[:100]} for parameter {name} is invalid. Reason: Must be an integer.")
    if value not in bounds:
        raise invalid(f"Value {value} for parameter {name} is invalid. Reason: Must be between "
                      f"{bounds.lo} and {bounds.hi}.")
    return value


def _entries(body: dict[str, Any], entry_type: str) -> list[dict[str, Any]]:
    entries = body.get("Entries")
    if not entries:
        raise SqsError("EmptyBatchRequest", f"There should be at least one {entry_type} in the request.")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise invalid("Entries must be a list of maps")
    if len(entries) > BATCH_MAX:
        raise SqsError("TooManyEntriesInBatchRequest", f"Maximum number of entries per request are {BATCH_MAX}. "
                       f"You have sent {len(entries)}.")
    seen = set()
    for entry in entries:
        entry_id = entry.get("Id")
        if not isinstance(entry_id, str) or not _ENTRY_ID.fullmatch(entry_id):
            raise SqsError("InvalidBatchEntryId", "A batch entry id can only contain alphanumeric characters, "
                           "hyphens and underscores. It can be at most 80 letters long.")
        if entry_id in seen:
            raise SqsError("BatchEntryIdsNotDistinct", f"Id {entry_id} repeated.")
        seen.add(entry_id)
    return entries


# --- queues ---------------------------------------------------------------------------------------


def _same(attr: str, value: Any, shown: str | None) -> bool:
    """Whether a CreateQueue's checked attribute ``value`` is what the queue has (``shown``, as
    GetQueueAttributes answers it): the JSON ones compared as JSON, whatever their spacing."""
    if value is None and attr != "RedrivePolicy":  # given empty (none), or SqsManagedSseEnabled false
        return shown is None or (attr == "SqsManagedSseEnabled" and shown == "false")
    if attr in ("RedriveAllowPolicy", "Policy"):
        if shown is None:
            return False
        return json.loads(shown) == (json.loads(value) if attr == "Policy" else value)
    if attr != "RedrivePolicy":
        return shown == str(value)
    if value is None or shown is None:
        return value is None and shown is None
    have = json.loads(shown)
    return (have["maxReceiveCount"] == value["maxReceiveCount"]
            and have["deadLetterTargetArn"].rsplit(":", 1)[-1] == value["deadLetterTargetArn"].rsplit(":", 1)[-1])


def create_queue(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """Idempotent with the same attributes (those given are compared); ``QueueNameExists`` when a
    given attribute differs. A new queue gets SQS's defaults (visibility 30 s, retention 4 days, no
    redrive); a queue made by another face keeps its policy. ``<name>-dlq`` may be created before
    ``<name>``: a placeholder row holds it until any face makes ``<name>`` (:data:`queues.HIDDEN`)."""
    given = body.get("Attributes")
    name = queues.check_name(body.get("QueueName"), isinstance(given, dict) and given.get("FifoQueue") == "true",
                             ctx.origin.region)
    ctx.need(name, keys.MANAGE)
    given_tags = tags.check(body.get("tags"), queues.to_sqs(name), required=False)
    info = queues.known(name, fresh=True)
    dlq = is_dlq(name)
    attributes = queues.parse_attributes(name, given, queues.own(info.meta, dlq))
    if (dlq and "dlq" in info.meta) or (not dlq and info.exists):
        have = queues.current(name, ctx.origin, set(attributes))
        for attr, value in attributes.items():
            if not _same(attr, value, have.get(attr)):
                raise SqsError("QueueNameExists", f"A queue already exists with the same name and a different value "
                               f"for attribute {attr}")
        return {"QueueUrl": ctx.origin.url(name)}
    if dlq:
        # Without its queue (none, or deleted), a placeholder row holds the DLQ's attributes and
        # no policy of the queue's (created later by any face, it gets that face's defaults):
        # queues.apply decides, the row locked.
        meta = dict(info.meta)
        meta["dlq"] = dict(meta.get("dlq") or {})
        queues.apply(name, attributes, meta)
    else:
        fresh = {"VisibilityTimeout": queues.DEFAULTS["VisibilityTimeout"],
                 "MessageRetentionPeriod": queues.DEFAULTS["MessageRetentionPeriod"], "RedrivePolicy": None}
        queues.apply(name, {**fresh, **attributes}, {k: v for k, v in info.meta.items() if k == "dlq"}, created=True)
    tags.created(name, given_tags)  # (a queue that exists keeps its tags, as SQS)
    return {"QueueUrl": ctx.origin.url(name)}


def get_queue_url(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    name = queues.check_name(body.get("QueueName"), region=ctx.origin.region)
    owner = body.get("QueueOwnerAWSAccountId")
    ctx.need(name, keys.READ)
    if owner not in (None, queues.account()):
        raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
    queues.existing(name, fresh=True)
    return {"QueueUrl": ctx.origin.url(name)}


def _token(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode()


def _after(token: object) -> str:
    """The queue name (SQS's) a ``NextToken`` made by :func:`_token` carries; anything else (which
    the lenient base64 decoder would read as an empty name, restarting at page 1) is refused."""
    try:
        name = base64.b64decode(str(token).encode(), altchars=b"-_", validate=True).decode()
    except (binascii.Error, ValueError):
        name = ""
    if not queues.URL_NAME.fullmatch(name) or _token(name) != token:
        raise invalid("Invalid NextToken value.")
    return name


def list_queues(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """The queues by their SQS names (a FIFO queue's DLQ ``<name>-dlq.fifo``), in that order."""
    prefix = body.get("QueueNamePrefix")
    prefix = "" if prefix is None else prefix
    if not isinstance(prefix, str):
        raise invalid("QueueNamePrefix must be a string")
    limit = _integer(body, "MaxResults", LIST_QUEUES_MAX)
    after = ""
    if body.get("NextToken") not in (None, ""):  # (an empty one: the first page)
        if limit is None:
            raise invalid("MaxResults must be given with NextToken")
        after = _after(body["NextToken"])
    names: set[str] = set()
    for name, meta, last_sequence, updated_at, max_attempts, target in Queue.objects.using(
            services.alias()).values_list("name", "sqs_attributes", "last_sequence", "updated_at", "max_attempts",
                                          "dead_letter_queue"):
        meta = meta or {}
        if not queues.is_placeholder(meta, last_sequence, updated_at):
            names.add(name)  # (a placeholder with messages is added with them below)
        if "dlq" in meta or (not queues.is_placeholder(meta, last_sequence, updated_at)
                             and queues.DLQ_DELETED not in meta and queues.redrives_to_own(max_attempts, target)):
            names.add(name + DLQ_SUFFIX)
    for depth in services.queue_depths():
        names.add(depth.queue)
    by_sqs_name = {queues.to_sqs(n): n for n in names if queues.in_region(n, ctx.origin.region)}
    shown = sorted(n for n in by_sqs_name if n.startswith(prefix) and n > after and queues.URL_NAME.fullmatch(n)
                   and ctx.key.allows(by_sqs_name[n], keys.READ))
    out: dict[str, Any] = {}
    page = shown[:limit] if limit else shown[:int(LIST_QUEUES_MAX.hi)]
    if page:
        out["QueueUrls"] = [ctx.origin.url(by_sqs_name[n]) for n in page]
    if limit and len(shown) > limit:
        out["NextToken"] = _token(page[-1])
    return out


def delete_queue(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """DeleteQueue deletes the queue and its messages, never another queue's: a dead-letter queue
    (``<name>-dlq`` or any other) keeps its messages, as on SQS, and a ``<name>-dlq`` made through
    SQS its attributes and tags too."""
    name, info = _queue(ctx, body, keys.MANAGE)
    base = base_of(name)
    if is_dlq(name):
        # The DLQ alone: its messages, its attributes, and the placeholder row that held it if no
        # other face has made ``<name>`` a queue since; never ``<name>`` itself.
        services.delete_dead(name)
        if not (info.placeholder and queues.drop_placeholder(base, info.meta)):
            meta = {k: v for k, v in info.meta.items() if k not in ("dlq", queues.HIDDEN)}
            # (deleted, as on SQS, also where <name>'s redrive policy names it: queues.DLQ_DELETED)
            queues.save_meta(base, {**meta, queues.DLQ_DELETED: True})
            tags.drop(name)
    else:
        queues.delete_queue(base)  # (a <name>-dlq made through SQS stays, a queue of its own)
    queues.forget(base)
    return {}


def purge_queue(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    name, _ = _queue(ctx, body, keys.MANAGE)
    if is_dlq(name):
        services.delete_dead(name)
    else:
        services.purge(name)
    return {}


def get_queue_attributes(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    name, _ = _queue(ctx, body, keys.READ)
    wanted = queues.wanted_names(body.get("AttributeNames"))
    if wanted == set():
        return {}
    values = queues.current(name, ctx.origin, wanted)
    return {"Attributes": values} if values else {}


def set_queue_attributes(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    name, info = _queue(ctx, body, keys.MANAGE)
    if body.get("Attributes") is None:
        raise missing("Attributes")
    attributes = queues.parse_attributes(name, body.get("Attributes"), queues.own(info.meta, is_dlq(name)))
    if attributes:
        queues.apply(name, attributes, info.meta)
    return {}


# --- messages -------------------------------------------------------------------------------------


_NO_DEDUP_ID = "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly"


def _message(entry: dict[str, Any], name: str, meta: dict[str, Any], limit: int,
             sender: str) -> tuple[validation.SendEntry, dict[str, Any]]:
    """(the message to send, a typed input; the answer's digests) of one SendMessage (or batch
    entry) to queue ``name`` (its SQS attributes ``meta``). On a FIFO queue: ``MessageGroupId`` is required, a
    deduplication id (given, or the body's SHA-256 with ``ContentBasedDeduplication``) is kept for
    :data:`messages.DEDUP_WINDOW_S` in the queue's ``DeduplicationScope``, and only the queue's
    ``DelaySeconds`` applies, as SQS. ``sender``: the SenderId kept with it (the key's access key id)."""
    body = messages.check_body(entry.get("MessageBody"), limit)
    fifo = queues.is_fifo(name)
    group = entry.get("MessageGroupId")
    if group is not None:
        group = messages.token(group, "MessageGroupId")
    if not fifo and entry.get("MessageDeduplicationId") is not None:
        raise invalid("The request includes parameter MessageDeduplicationId, which is only valid for FIFO queues.")
    if fifo:
        given = _integer(entry, "DelaySeconds", vocab.SQS_DELAY_S)
        if given:  # (0 is accepted: no delay of its own)
            raise invalid(f"Value {given} for parameter DelaySeconds is invalid. Reason: The request include "
                          "parameter that is not valid for this queue type.")
        if group is None:
            raise missing("MessageGroupId")
    delay = int(meta.get("DelaySeconds", 0)) if fifo else \
        _integer(entry, "DelaySeconds", vocab.SQS_DELAY_S, int(meta.get("DelaySeconds", 0)))
    attributes = messages.check_attributes(entry.get("MessageAttributes"))
    if attributes and messages.size(body, attributes) > limit:
        raise messages.too_large(limit)  # (SQS counts the attributes in the message's size)
    system = messages.check_system_attributes(entry.get("MessageSystemAttributes"))
    options: dict[str, Any] = {}
    if group is not None:
        options["group"] = messages.to_group(group)
    if fifo:
        assert group is not None
        fifo_attributes = queues.fifo_attributes(meta)
        dedup_id = entry.get("MessageDeduplicationId")
        if dedup_id is not None:
            dedup_id = messages.token(dedup_id, "MessageDeduplicationId")
        elif fifo_attributes["ContentBasedDeduplication"] == "true":
            dedup_id = messages.content_dedup_id(body)
        else:
            raise invalid(_NO_DEDUP_ID)
        options["dedup_id"] = messages.dedup_key(dedup_id, group, fifo_attributes["DeduplicationScope"])
        options["dedup_window"] = messages.DEDUP_WINDOW_S
    send = validation.SendEntry(body, delay=delay or None, attributes=messages.to_forq(attributes, system, sender),
                                **options)
    answer = {"MD5OfMessageBody": digests.md5_of_body(body)}
    md5 = digests.md5_of_attributes(attributes)
    if md5 is not None:
        answer["MD5OfMessageAttributes"] = md5
    md5 = digests.md5_of_attributes(system)
    if md5 is not None:
        answer["MD5OfMessageSystemAttributes"] = md5
    return send, answer


def _sent(name: str, result: services.SendResult) -> dict[str, Any]:
    """What a send answers of ``result``: its ``MessageId``, and on a FIFO queue its
    ``SequenceNumber``; a duplicate is answered with the first send's (while that message is held:
    once it is deleted, its sequence is no longer known, and the answer has none)."""
    out = {"MessageId": result.id}
    if queues.is_fifo(name):
        sequence = result.sequence
        if result.deduplicated:
            original = services.peek(name, result.id)
            sequence = original.sequence if original is not None else 0
        if sequence:
            out["SequenceNumber"] = messages.sequence_number(sequence)
    return out


def send_message(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    name, info = _queue(ctx, body, keys.PRODUCE)
    item, answer = _message(body, name, queues.own(info.meta, is_dlq(name)),
                            queues.max_message_size(info.meta, is_dlq(name)), ctx.key.access_key_id)
    try:
        (result,) = queues.send(name, [item])
    except ForqError as exc:
        raise queues.forq_error(exc) from None
    return {**answer, **_sent(name, result)}


def _fifo_batch(entries: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """What SQS refuses of a FIFO queue's SendMessageBatch as a whole, not entry by entry (nothing is
    sent): an entry without ``MessageGroupId`` (``InvalidParameterValue`` "The request must contain
    the parameter MessageGroupId.": AWS's code for a batch, where SendMessage's is
    ``MissingParameter``), or without ``MessageDeduplicationId`` on a queue without
    ``ContentBasedDeduplication``."""
    if any(entry.get("MessageGroupId") is None for entry in entries):
        raise invalid("The request must contain the parameter MessageGroupId.")
    if queues.fifo_attributes(meta)["ContentBasedDeduplication"] != "true" and \
            any(entry.get("MessageDeduplicationId") is None for entry in entries):
        raise invalid(_NO_DEDUP_ID)


def send_message_batch(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    name, info = _queue(ctx, body, keys.PRODUCE)
    entries = _entries(body, "SendMessageBatchRequestEntry")
    limit = queues.max_message_size(info.meta, is_dlq(name))  # each message's: the queue's MaximumMessageSize
    cap = queues.content_cap()  # the whole batch's: the service's, whatever the queue's (as SQS)
    total = sum(messages.raw_size(e) for e in entries)
    if total > cap:
        raise SqsError("BatchRequestTooLong", f"Batch requests cannot be longer than {cap} bytes. "
                       f"You have sent {total} bytes.")
    meta = queues.own(info.meta, is_dlq(name))
    if queues.is_fifo(name):
        _fifo_batch(entries, meta)
    failed, valid = [], []
    for entry in entries:
        try:
            valid.append((entry["Id"], *_message(entry, name, meta, limit, ctx.key.access_key_id)))
        except SqsError as exc:
            failed.append(exc.entry(entry["Id"]))
    successful = []
    if valid:
        try:
            results = queues.send(name, [item for _, item, _ in valid])
        except ForqError as exc:
            error = queues.forq_error(exc)
            failed += [error.entry(entry_id) for entry_id, _, _ in valid]
        else:
            successful = [{"Id": entry_id, **_sent(name, result), **answer}
                          for (entry_id, _, answer), result in zip(valid, results, strict=True)]
    return {"Successful": successful, "Failed": failed}


@dataclass(frozen=True)
class ReceivePlan:
    queue: str
    max_messages: int
    wait: int
    visibility: int | None
    system: set[str]
    keep: Callable[[str], bool]
    attempt: str | None = None  # ReceiveRequestAttemptId (a FIFO queue's)
    retry: list[services.ReceivedMessage] | None = None  # that attempt's messages, to answer again


def receive_plan(ctx: Context, body: dict[str, Any]) -> ReceivePlan:
    name, info = _queue(ctx, body, keys.CONSUME)
    own = (info.meta.get("dlq") or {}) if is_dlq(name) else info.meta
    max_messages = _integer(body, "MaxNumberOfMessages", vocab.SQS_MAX_MESSAGES, 1)
    wait = _integer(body, "WaitTimeSeconds", vocab.SQS_WAIT_S, int(own.get("ReceiveMessageWaitTimeSeconds", 0)))
    visibility = _integer(body, "VisibilityTimeout", vocab.SQS_VISIBILITY_S)
    if visibility is None and is_dlq(name) and "VisibilityTimeout" in own:
        visibility = int(own["VisibilityTimeout"])  # a DLQ's lease is its queue's unless set on the DLQ
    system, keep = messages.system_names(body), messages.attribute_filter(body.get("MessageAttributeNames"))
    attempt = body.get("ReceiveRequestAttemptId")
    if attempt is not None:
        attempt = messages.token(attempt, "ReceiveRequestAttemptId")
    if attempt is None or not queues.is_fifo(name):  # (SQS: a FIFO queue's only)
        return ReceivePlan(name, max_messages or 1, wait or 0, visibility, system, keep)
    return ReceivePlan(name, max_messages or 1, wait or 0, visibility, system, keep, attempt,
                       attempts.retried(name, ctx.key.access_key_id, attempt, visibility))


def take(queue: str, plan: ReceivePlan) -> list[services.ReceivedMessage]:
    """One claim of up to ``plan.max_messages`` of ``queue`` (on a database thread)."""
    return services.claim_many(queue, plan.max_messages, visibility_timeout=plan.visibility,
                               group_batch=queues.is_fifo(queue))  # (as many of one group as it can, as SQS)


Encoded = tuple[int, list[tuple[bytes, bytes]], bytes]


def receive_answer(ctx: Context, plan: ReceivePlan, got: list[services.ReceivedMessage],
                   encode: Callable[[dict[str, Any]], Encoded] = protocol.answer) -> Encoded:
    """ReceiveMessage's answer, encoded by ``encode`` (the JSON protocol's, or the query
    protocol's XML) for the messages claimed (on a database thread). The
    claim has committed: if the answer cannot be made, every message claimed is given back (its
    receive not counted) before the error goes up, so none stays leased undelivered."""
    try:
        if plan.attempt is not None and plan.retry is None:
            attempts.remember(plan.queue, ctx.key.access_key_id, plan.attempt, got)
        if not got:
            return encode({})
        sources: dict[str, str] = {}
        if "DeadLetterQueueSourceArn" in plan.system:  # where each dead letter came from, as it remembers
            sources = services.message_sources(plan.queue, [m.id for m in got])
        own = base_of(plan.queue) if is_dlq(plan.queue) else None
        fifo = queues.is_fifo(plan.queue)
        return encode({"Messages": [
            messages.received(m, plan.queue, plan.system, plan.keep, _arn(ctx, sources.get(m.id, own)), fifo)
            for m in got]})
    except Exception:
        try:
            services.release_many(plan.queue, [(m.id, m.receipt) for m in got if m.receipt is not None])
        except Exception:
            logger.exception("SQS ReceiveMessage on %s: could not give back %d messages", plan.queue, len(got))
        raise


def _arn(ctx: Context, queue: str | None) -> str | None:
    return None if queue is None else ctx.origin.arn(queue)


def delete_message(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    name, _ = _queue(ctx, body, keys.CONSUME)
    handle = receipts.parse(body.get("ReceiptHandle"), name)
    # A stale handle (the message was received again, or is gone) succeeds without deleting, as SQS.
    services.settle_many("ack", name, [(handle.message_id, handle.receipt)])
    return {}


def delete_message_batch(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    name, _ = _queue(ctx, body, keys.CONSUME)
    entries = _entries(body, "DeleteMessageBatchRequestEntry")
    failed, valid = [], []
    for entry in entries:
        try:
            valid.append((entry["Id"], receipts.parse(entry.get("ReceiptHandle"), name)))
        except SqsError as exc:
            failed.append(exc.entry(entry["Id"]))
    if valid:  # one statement; stale handles succeed without deleting, as SQS
        services.ack_many(name, [(h.message_id, h.receipt) for _, h in valid])
    return {"Successful": [{"Id": entry_id} for entry_id, _ in valid], "Failed": failed}


def _not_inflight() -> SqsError:
    return SqsError("MessageNotInflight", "The message referred to isn't in flight (its receipt handle is stale).")


def _stale(queue: str, handles: list[tuple[str, receipts.Handle]]) -> dict[str, SqsError]:
    """Why each of ``handles`` (entry id, handle) changed nothing, as SQS answers it: its message
    deleted, or received again since (the handle names an older delivery) → ``InvalidParameterValue``
    (SQS's "Message does not exist or is not available for visibility timeout change"); the
    handle's delivery is the message's last, but its lease is over (or was ended) →
    ``MessageNotInflight``."""
    last = dict(Message.objects.using(services.alias()).filter(
        queue=queue, id__in=[h.message_id for _, h in handles]).values_list("id", "processing_started_at"))
    out = {}
    for entry_id, handle in handles:
        if handle.message_id in last and last[handle.message_id] in (None, handle.receipt):
            out[entry_id] = _not_inflight()
        else:
            out[entry_id] = invalid(f"Value {receipts.make(queue, handle.message_id, handle.receipt)} for parameter "
                                    "ReceiptHandle is invalid. Reason: Message does not exist or is not available "
                                    "for visibility timeout change.")
    return out


MAX_VISIBILITY_S = int(vocab.SQS_VISIBILITY_S.hi)  # a delivery's lease, and its leases in all


def _visibility(entry: dict[str, Any], handle: receipts.Handle) -> int:
    """The ``VisibilityTimeout`` of a ChangeMessageVisibility: 0 to 12 hours, and (as SQS) at most
    12 hours after the delivery's receive in all (the receipt is the time of that receive, ms)."""
    if entry.get("VisibilityTimeout") is None:
        raise missing("VisibilityTimeout")
    seconds = _integer(entry, "VisibilityTimeout", vocab.SQS_VISIBILITY_S)
    assert seconds is not None
    if services.now_ms() + seconds * 1000 - handle.receipt > MAX_VISIBILITY_S * 1000:
        raise invalid(f"Value {seconds} for parameter VisibilityTimeout is invalid. Reason: Total "
                      f"VisibilityTimeout for the message is beyond the limit [{MAX_VISIBILITY_S} seconds].")
    return seconds


def change_message_visibility(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    name, _ = _queue(ctx, body, keys.CONSUME)
    handle = receipts.parse(body.get("ReceiptHandle"), name)
    seconds = _visibility(body, handle)
    (done,) = services.settle_many("change_visibility", name, [(handle.message_id, handle.receipt)], seconds=seconds)
    if not done:
        raise _stale(name, [("", handle)])[""]
    return {}


def change_message_visibility_batch(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    name, _ = _queue(ctx, body, keys.CONSUME)
    entries = _entries(body, "ChangeMessageVisibilityBatchRequestEntry")
    failed: list[dict[str, Any]] = []
    # One settle a (seconds, n-th handle of its message): two handles of one message (an old
    # delivery's and the current one's) go to two settles, each answered for its own receipt.
    by_seconds: dict[tuple[int, int], list[tuple[str, receipts.Handle]]] = {}
    seen: dict[str, int] = {}
    for entry in entries:
        try:
            handle = receipts.parse(entry.get("ReceiptHandle"), name)
            seconds = _visibility(entry, handle)
        except SqsError as exc:
            failed.append(exc.entry(entry["Id"]))
            continue
        nth = seen[handle.message_id] = seen.get(handle.message_id, -1) + 1
        by_seconds.setdefault((seconds, nth), []).append((entry["Id"], handle))
    successful = []
    stale: list[tuple[str, receipts.Handle]] = []
    for (seconds, _), items in by_seconds.items():
        done = services.settle_many("change_visibility", name, [(h.message_id, h.receipt) for _, h in items],
                                    seconds=seconds)
        for (entry_id, handle), ok in zip(items, done, strict=True):
            if ok:
                successful.append({"Id": entry_id})
            else:
                stale.append((entry_id, handle))
    if stale:
        why = _stale(name, stale)
        failed += [why[entry_id].entry(entry_id) for entry_id, _ in stale]
    return {"Successful": successful, "Failed": failed}


def unsupported(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    raise SqsError("UnsupportedOperation", "This action is not supported by forqapp's SQS endpoint")


ACTIONS: dict[str, Callable[[Context, dict[str, Any]], dict[str, Any]]] = {
    "CreateQueue": create_queue,
    "GetQueueUrl": get_queue_url,
    "ListQueues": list_queues,
    "DeleteQueue": delete_queue,
    "PurgeQueue": purge_queue,
    "GetQueueAttributes": get_queue_attributes,
    "SetQueueAttributes": set_queue_attributes,
    "SendMessage": send_message,
    "SendMessageBatch": send_message_batch,
    "DeleteMessage": delete_message,
    "DeleteMessageBatch": delete_message_batch,
    "ChangeMessageVisibility": change_message_visibility,
    "ChangeMessageVisibilityBatch": change_message_visibility_batch,
    "TagQueue": tags.tag_queue,
    "UntagQueue": tags.untag_queue,
    "ListQueueTags": tags.list_queue_tags,
    "AddPermission": permissions.add_permission,
    "RemovePermission": permissions.remove_permission,
    "ListDeadLetterSourceQueues": moves.list_dead_letter_source_queues,
    "StartMessageMoveTask": moves.start_message_move_task,
    "ListMessageMoveTasks": moves.list_message_move_tasks,
    "CancelMessageMoveTask": moves.cancel_message_move_task,
}
RECEIVE = "ReceiveMessage"
#: The grant each action needs on its queue (ListQueues needs none: it lists what the key may read).
NEEDS: dict[str, str] = {
    "CreateQueue": keys.MANAGE, "GetQueueUrl": keys.READ, "DeleteQueue": keys.MANAGE, "PurgeQueue": keys.MANAGE,
    "GetQueueAttributes": keys.READ, "SetQueueAttributes": keys.MANAGE, "SendMessage": keys.PRODUCE,
    "SendMessageBatch": keys.PRODUCE, "DeleteMessage": keys.CONSUME, "DeleteMessageBatch": keys.CONSUME,
    "ChangeMessageVisibility": keys.CONSUME, "ChangeMessageVisibilityBatch": keys.CONSUME, RECEIVE: keys.CONSUME,
    "TagQueue": keys.MANAGE,
    "UntagQueue": keys.MANAGE,
    "ListQueueTags": keys.READ,
    "AddPermission": keys.MANAGE,
    "RemovePermission": keys.MANAGE,
    **moves.NEEDS,
}


def refused_by_grants(key: Key, action: str) -> SqsError | None:
    """``AccessDenied`` when no grant of ``key`` allows what ``action`` needs on any queue: known
    from the headers (the queue is named in the body), so the body need not be received."""
    need = NEEDS.get(action)
    if need is None or key.root or any(need in grant.actions for grant in key.grants):
        return None
    return SqsError("AccessDenied", f"The key {key.access_key_id} may not {need} on any queue", 403)
UNSUPPORTED: tuple[str, ...] = ()
