"""Consume: claim, receive (waiting for a message if asked), peek."""

from __future__ import annotations

from typing import Any, TypeVar

from .. import errors, metrics, validation, vocab
from ..errors import ForqError
from . import base, waiting
from .base import ReceivedMessage, _store
from .policies import policy

T = TypeVar("T")

# --- consume --------------------------------------------------------------------------------


def _claim(queue: str, limit: int, visibility_timeout: Any, random: bool, using: str | None,
           redriven: list[ReceivedMessage] | None = None,
           throttled: list[str] | None = None, group_batch: bool = False,
           draining: bool = False) -> list[ReceivedMessage]:
    st = _store(using)
    pol = policy(queue, using=st.alias)
    if pol.paused:
        return []
    visibility = pol.visibility_timeout_ms if visibility_timeout is None else \
        validation.duration_ms(visibility_timeout, "visibility_timeout", *vocab.VISIBILITY_S)
    now = base.now_ms()
    claimed = st.claim(queue, now, limit, visibility_ms=visibility, max_attempts=pol.max_attempts,
                       dlq_ttl_ms=_dead_letter_ttl_ms(pol, st.alias), order="random" if random else pol.ordering,
                       max_in_flight=pol.max_in_flight, rate_interval_us=pol.rate_interval_us,
                       group_concurrency=pol.group_concurrency, group_rate_us=pol.group_rate_interval_us,
                       group_batch=group_batch)
    if claimed.throttled:
        metrics.throttled(queue, claimed.throttled)
        if throttled is not None:
            throttled.append(claimed.throttled)
    elif draining and throttled is not None and not claimed.deliveries and pol.group_rate_interval_us is not None:
        # Nothing, and no group's turn due: a group waiting out its group_rate slot has ready
        # messages all the same (its turn within one interval), which a caller draining the queue
        # (forq_worker --burst) must wait for. (Not a claim the limits held back: not counted.)
        turn = st.next_group_turn(queue)
        if turn is not None and abs(turn - now) <= -(-pol.group_rate_interval_us // 1000):
            throttled.append("group")
    metrics.redriven(queue, claimed.redriven)
    if redriven is not None:
        redriven += [ReceivedMessage.from_row(d) for d in claimed.redriven_messages]
    if claimed.deliveries:
        metrics.consumed(queue, len(claimed.deliveries))
    return [ReceivedMessage.from_row(d) for d in claimed.deliveries]


def _dead_letter_ttl_ms(pol: Any, using: str) -> int:
    """How long a dead letter of a queue of policy ``pol`` is kept where it goes: its own DLQ's
    retention; where the queue names another queue, that queue's (a DLQ's: its regular queue's
    DLQ retention), as a message sent there gets (the jobs' moves count it alike)."""
    target = pol.dead_letter_queue
    if target is None:
        return int(pol.dlq_retention_ms)
    if vocab.is_dlq(target):
        return policy(vocab.base_of(target), using=using).dlq_retention_ms
    return policy(target, using=using).retention_ms


def claim(queue: str, *, visibility_timeout: Any = None, random: bool = False,
          using: str | None = None) -> ReceivedMessage | None:
    """Take the next due message of ``queue`` now (by its policy's order), or None (no waiting)."""
    queue = validation.queue_name(queue)
    got = _claim(queue, 1, visibility_timeout, random, using)
    return got[0] if got else None


def claim_many(queue: str, limit: int, *, visibility_timeout: Any = None, random: bool = False,
               using: str | None = None, redriven: list[ReceivedMessage] | None = None,
               throttled: list[str] | None = None, group_batch: bool = False,
               draining: bool = False) -> list[ReceivedMessage]:
    """Take up to ``limit`` due messages of ``queue`` now (no waiting). Used-up messages the claim
    moves to the DLQ instead are appended to ``redriven`` when given (as they are now: in the DLQ,
    attempts 0, no receipt; only this claim sees them): how forq_worker's task runners learn of a
    task whose worker died during its last attempt. A claim the queue's ``max_in_flight`` or
    ``rate`` held back appends its reason (``"concurrency"``, ``"rate"``) to ``throttled``; with
    ``draining`` (a caller that stops when nothing is due: ``forq_worker --burst``), so does an empty
    claim while a group waits out its ``group_rate`` slot (``"group"``: one more read).
    ``group_batch`` (the SQS face's FIFO receive): after a group's first message, its next ones in
    order, for this receiver alone, as SQS returns as many of one group as it can; the group gives
    nothing to others until all of them are settled or given back (:meth:`forqapp.store.Store.claim`)."""
    queue = validation.queue_name(queue)
    return _claim(queue, limit, visibility_timeout, random, using, redriven, throttled, group_batch, draining)


def receive(queue: str, wait: float = 0, *, visibility_timeout: Any = None, random: bool = False,
            using: str | None = None) -> ReceivedMessage | None:
    """Take the next due message of ``queue``, waiting up to ``wait`` seconds for one
    (:func:`forqapp.services.waiting.claim`). ``visibility_timeout`` (0 s to 12 h) overrides the queue's
    lease for this receive; ``random`` picks at random among the due messages."""
    if not wait:  # nothing to wait for: one claim (what waiting.claim would do, without its steps)
        return claim(queue, visibility_timeout=visibility_timeout, random=random, using=using)


    return waiting.claim(lambda: claim(queue, visibility_timeout=visibility_timeout, random=random, using=using),
                         (queue,), wait, using=using)


def receive_many(queue: str, max_messages: int, *, wait: float = 0, visibility_timeout: Any = None,
                 random: bool = False, using: str | None = None, group_batch: bool = False) -> list[ReceivedMessage]:
    """Take up to ``max_messages`` due messages of ``queue`` in one statement, waiting up to
    ``wait`` seconds for the first. ``group_batch``: a message group's next messages after its
    first, in order, all for this consumer (as an SQS FIFO receive; see :func:`claim_many`)."""


    if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
        raise ForqError(errors.BODY_INVALID, "max_messages must be a positive integer")
    got = waiting.claim(
        lambda: claim_many(queue, max_messages, visibility_timeout=visibility_timeout, random=random,
                           using=using, group_batch=group_batch) or None,
        (queue,), wait, using=using)
    return got or []


def peek(queue: str, id: str | None = None, *, using: str | None = None) -> ReceivedMessage | None:  # noqa: A002
    """The message a receive would get now (or message ``id`` of ``queue``, in any state, with its
    ``failure_reason`` and ``last_error``), changing nothing; its ``receipt`` is None."""
    queue = validation.queue_name(queue)
    message_id = None if id is None else validation.message_id(id)
    st = _store(using)
    if message_id is None:  # a claim takes the messages without a group first, then the groups in turn
        now, pol = base.now_ms(), policy(queue, using=st.alias)
        row = st.peek(queue, now, pol.ordering) or st.peek_grouped(
            queue, now, pol.group_concurrency, pol.group_rate_interval_us)
        return ReceivedMessage.from_row(row) if row else None
    found = st.peek_message(queue, message_id)  # one message, looked at: why it failed too
    if found is None:
        return None
    message = ReceivedMessage.from_row(found[0])
    message.failure_reason, message.last_error = found[1], found[2]
    return message
