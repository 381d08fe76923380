"""SQS's dead-letter queue actions on forqapp's move tasks (:mod:`forqapp.services.moves`):
``StartMessageMoveTask``, ``ListMessageMoveTasks``, ``CancelMessageMoveTask`` and
``ListDeadLetterSourceQueues``. Each is ``(ctx, body) -> answer`` like the actions of
:mod:`forqapp.sqs.actions`, whose table lists them. Scopes: starting and cancelling a task need
``manage`` on its source queue (and ``produce`` on a destination given), listing needs ``read``."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from .. import errors, keys, services, validation, vocab
from ..errors import ForqError
from ..vocab import Bounds
from . import queues, redrive
from .protocol import SqsError, invalid, missing

#: The grant each action needs on its queue (the source queue; ListDeadLetterSourceQueues' queue).
NEEDS = {
    "StartMessageMoveTask": keys.MANAGE, "CancelMessageMoveTask": keys.MANAGE, "ListMessageMoveTasks": keys.READ,
    "ListDeadLetterSourceQueues": keys.READ,
}


def _integer(body: dict[str, Any], name: str, bounds: Bounds) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not validation.is_integer(value) or value not in bounds:
        raise invalid(f"Value {json.dumps(value)[:100]} for parameter {name} is invalid. Reason: Must be an "
                      f"integer between {bounds.lo:.0f} and {bounds.hi:.0f}.")
    return int(value)


def _queue_of_arn(body: dict[str, Any], name: str) -> str:
    """forqapp's name of the existing queue whose ARN is ``body[name]``."""
    arn = body.get(name)
    if arn is None:
        raise missing(name)
    sqs_name = redrive.arn_name(arn)
    if sqs_name is None:
        raise invalid(f"Value {str(arn)[:200]} for parameter {name} is invalid. Reason: must be a queue's ARN.")
    if not queues.URL_NAME.fullmatch(sqs_name) or str(arn).split(":")[4] != queues.account():
        # (another account's queue is none here, as an unknown queue of this one)
        raise SqsError("ResourceNotFoundException", f"The resource that you specified for the {name} parameter "
                       "doesn't exist.", 404)
    forq_name = queues.to_forq(sqs_name, str(arn).split(":")[3])  # (in the ARN's region)
    try:
        queues.existing(forq_name, fresh=True)
    except SqsError:
        raise SqsError("ResourceNotFoundException", f"The resource that you specified for the {name} parameter "
                       "doesn't exist.", 404) from None
    return forq_name


def _move_error(exc: ForqError) -> SqsError:
    if exc.code == errors.MOVE_RUNNING:
        return SqsError("UnsupportedOperation", "There is already a task running. Only one active task is allowed "
                        "for a source queue arn at a given time.")
    if exc.code == errors.NOT_FOUND_MOVE:
        return SqsError("ResourceNotFoundException", "Task does not exist.", 404)
    return queues.forq_error(exc)


def start_message_move_task(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    """A move task of a dead-letter queue (``SourceArn``: a queue that is some queue's dead-letter
    queue, as SQS requires), to ``DestinationArn`` (any queue but the source, a dead-letter queue
    included: its messages are then that DLQ's, as SendMessage to it stores them) or each message
    back to its source queue, at ``MaxNumberOfMessagesPerSecond`` (1 to 500) at most."""
    source = _queue_of_arn(body, "SourceArn")
    ctx.need(source, keys.MANAGE)
    destination = _queue_of_arn(body, "DestinationArn") if body.get("DestinationArn") is not None else None
    if destination is not None:
        ctx.need(destination, keys.PRODUCE)
        if destination == source:
            raise invalid("The destination must be another queue than the source.")
    rate = _integer(body, "MaxNumberOfMessagesPerSecond", vocab.MOVE_RATE)
    if not services.dead_letter_sources(source):
        raise invalid("Source queue must be configured as a Dead Letter Queue.")
    try:
        task = services.start_move(source, destination, rate, to_dlq=True)  # (a DLQ is a queue like any)
    except ForqError as exc:
        raise _move_error(exc) from exc
    return {"TaskHandle": _handle(task.handle, source, ctx)}


def _handle(handle: str, source: str, ctx: Any) -> str:
    """SQS's TaskHandle: opaque; here the task's handle and its source's ARN, base64 JSON."""
    text = json.dumps({"taskId": handle, "sourceArn": ctx.origin.arn(source)}, separators=(",", ":"))
    return base64.b64encode(text.encode()).decode()


def _task_of(handle: object) -> str:
    try:
        decoded = json.loads(base64.b64decode(str(handle).encode(), validate=True))
        task = decoded["taskId"]
        if not isinstance(task, str):
            raise TypeError(task)
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise SqsError("ResourceNotFoundException", "Task does not exist.", 404) from None
    return task


def list_message_move_tasks(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    """The latest ``MaxResults`` (1 to 10; 1 when absent) move tasks of ``SourceArn``, newest first."""
    source = _queue_of_arn(body, "SourceArn")
    ctx.need(source, keys.READ)
    limit = _integer(body, "MaxResults", vocab.MOVE_LIST) or 1
    results = []
    for task in services.list_moves(source, limit):
        entry: dict[str, Any] = {
            "Status": task.status, "SourceArn": ctx.origin.arn(task.source),
            "ApproximateNumberOfMessagesMoved": task.moved, "ApproximateNumberOfMessagesToMove": task.to_move,
            "StartedTimestamp": task.started_at,
        }
        if task.running:  # (SQS gives the handle of a running task alone)
            entry["TaskHandle"] = _handle(task.handle, source, ctx)
        if task.destination is not None:
            entry["DestinationArn"] = ctx.origin.arn(task.destination)
        if task.rate is not None:
            entry["MaxNumberOfMessagesPerSecond"] = task.rate
        if task.failure_reason:
            entry["FailureReason"] = task.failure_reason
        results.append(entry)
    return {"Results": results}


def cancel_message_move_task(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    """Cancel the running task ``TaskHandle`` names; answers how many messages it had moved."""
    if body.get("TaskHandle") is None:
        raise missing("TaskHandle")
    handle = _task_of(body["TaskHandle"])
    try:
        ctx.need(services.move_info(handle).source, keys.MANAGE)
        task = services.cancel_move(handle)
    except ForqError as exc:
        raise _move_error(exc) from exc
    return {"ApproximateNumberOfMessagesMoved": task.moved}


def _token(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode()


def list_dead_letter_source_queues(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    """The queues whose RedrivePolicy names ``QueueUrl``'s queue (forqapp: whose dead letters go
    there), as ``queueUrls``, by name; pages of ``MaxResults`` (1 to 1000) with ``NextToken``."""
    name = queues.name_from_url(body.get("QueueUrl"), ctx.origin.region)
    ctx.need(name, keys.READ)
    queues.existing(name, fresh=True)
    limit = _integer(body, "MaxResults", vocab.SQS_SOURCES_MAX)
    after = ""
    if body.get("NextToken") not in (None, ""):
        if limit is None:
            raise invalid("MaxResults must be given with NextToken")
        token = str(body["NextToken"])
        try:
            after = base64.urlsafe_b64decode(token.encode()).decode()
        except (binascii.Error, ValueError):
            after = ""
        if not after or _token(after) != token:
            raise invalid("Invalid NextToken value.")
    sources = [q for q in services.dead_letter_sources(name)
               # (a queue's own <name>-dlq is its target only while it has a redrive policy, and
               # only once it is a queue: not SQS's placeholder for a DLQ created before it)
               if q != vocab.base_of(name) or (queues.known(q, fresh=True).exists
                                               and services.queue_info(q).policy["max_attempts"] != "unlimited")]
    names = sorted(queues.to_sqs(q) for q in sources
                   if ctx.key.allows(q, keys.READ) and queues.URL_NAME.fullmatch(queues.to_sqs(q))
                   and queues.in_region(q, ctx.origin.region))
    shown = [n for n in names if n > after]
    page = shown[:limit] if limit else shown[:int(vocab.SQS_SOURCES_MAX.hi)]
    out: dict[str, Any] = {"queueUrls": [ctx.origin.url(queues.to_forq(n)) for n in page]}
    if limit and len(shown) > limit:
        out["NextToken"] = _token(page[-1])
    return out
