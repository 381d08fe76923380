"""``ReceiveRequestAttemptId`` (FIFO queues): a ReceiveMessage retried with the same id within
SQS's 5 minutes answers the messages (and receipt handles) the first one took, while every one of
them is still held by that delivery (not deleted, its visibility not changed, its lease not over);
otherwise it is a new receive, as SQS does once a message was "modified".

What a receive took is remembered by the process that served it, for the key that asked: a retry
served by another process of the same database (several ``forq_serve`` hosts) is a new receive. A retry
renews the messages' leases (SQS resets their visibility timeout): the retry's
``VisibilityTimeout``, else the queue's."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from .. import services
from ..models import Message, Status
from ..services import ReceivedMessage
from ..vocab import base_of
from .messages import DEDUP_WINDOW_S

MAX_REMEMBERED = 10_000  # receives remembered per process (the oldest forgotten first)

_Key = tuple[str, str, str]  # (queue, access key id, attempt id)
_taken: OrderedDict[_Key, tuple[float, list[ReceivedMessage]]] = OrderedDict()
_lock = threading.Lock()


def remember(queue: str, key_id: str, attempt: str, got: list[ReceivedMessage]) -> None:
    with _lock:
        _taken[(queue, key_id, attempt)] = (time.monotonic(), got)
        _taken.move_to_end((queue, key_id, attempt))
        while len(_taken) > MAX_REMEMBERED:
            _taken.popitem(last=False)


def retried(queue: str, key_id: str, attempt: str, visibility: float | None) -> list[ReceivedMessage] | None:
    """What the receive ``attempt`` took, if it was within 5 minutes and each message is still
    held by that delivery (their leases renewed for ``visibility`` seconds, None: the queue's);
    None otherwise (a new receive)."""
    with _lock:
        found = _taken.get((queue, key_id, attempt))
    if found is None or time.monotonic() - found[0] >= DEDUP_WINDOW_S:
        return None
    got = found[1]
    if not got:
        return None  # (an empty answer: nothing to give again; a new receive may find messages)
    now = services.now_ms()
    held = dict(Message.objects.using(services.alias()).filter(
        queue=queue, id__in=[m.id for m in got], status=Status.PROCESSING, process_after__gt=now,
    ).values_list("id", "processing_started_at"))
    if not all(held.get(m.id) == m.receipt for m in got):
        return None
    if visibility is None:
        visibility = services.policy(base_of(queue)).visibility_timeout_ms / 1000
    renewed = services.settle_many("change_visibility", queue, [(m.id, m.receipt or 0) for m in got],
                                   seconds=visibility)
    return got if all(renewed) else None  # (one settled meanwhile: a new receive)
