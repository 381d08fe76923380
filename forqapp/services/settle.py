"""Settle a delivery: ack, nack, fail, release, change its visibility, defer, extend its lease."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from django.db import transaction

from .. import errors, metrics, validation, vocab
from ..conf import forq_settings
from ..errors import ForqError
from ..store import (
    Store,
)
from . import base
from .base import ReceivedMessage, _refuse_nul, _store
from .notify import kick
from .policies import policy

T = TypeVar("T")

def _slot_freed(st: Store, queue: str) -> None:
    """A delivery of ``queue`` ended: if the queue has a concurrency limit, its waiters (in every
    process) look again — on PostgreSQL a settle that makes nothing ready would not tell them."""
    if policy(queue, using=st.alias).max_in_flight is not None:
        st.notify(queue)
        kick(st.alias, (queue,))


def _settled(done: bool) -> None:
    if not done:
        raise ForqError(errors.NOT_FOUND_MESSAGE, "no such delivery (wrong receipt, queue or id)")


def ack(message: ReceivedMessage, *, using: str | None = None) -> None:
    ack_delivery(message.queue, message.id, _receipt(message), using=using)


def nack(message: ReceivedMessage, error: str | BaseException | None = None, *, using: str | None = None) -> None:
    """Retry later (the queue's backoff); ``error`` (an exception or text) is kept as the
    message's ``last_error``, which goes with it to the DLQ."""
    nack_delivery(message.queue, message.id, _receipt(message), using=using, error=error)


def _receipt(message: ReceivedMessage | validation.Delivery) -> int:
    if message.receipt is None:
        raise ForqError(errors.RECEIPT_MISSING, "a peeked message has no receipt: receive it first")
    return message.receipt


# A message id as forqapp writes it (lowercase canonical UUID text): valid as it is. Anything else
# goes through validation.message_id, which accepts the other spellings of a UUID (and refuses the rest).
_CANONICAL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _message_id(value: object) -> str:
    if type(value) is str and _CANONICAL_ID.fullmatch(value):
        return value
    return validation.message_id(value)


def ack_delivery(queue: str, message_id: str, receipt: int, *, using: str | None = None) -> None:
    queue, message_id = validation.queue_name(queue), _message_id(message_id)
    st = _store(using)
    _settled(st.ack(queue, message_id, receipt))
    metrics.acked(queue, 1)
    _slot_freed(st, queue)


def nack_delivery(queue: str, message_id: str, receipt: int, *, using: str | None = None,
                  error: str | BaseException | None = None) -> None:
    queue, message_id = validation.queue_name(queue), validation.message_id(message_id)
    st = _store(using)
    pol = policy(queue, using=st.alias)
    _settled(st.nack(queue, message_id, receipt, base.now_ms(), pol.max_attempts, pol.backoff_ms,
                     describe_error(error), pol.jitter))
    metrics.nacked(queue, 1)
    _slot_freed(st, queue)


def ack_many(queue_or_messages: str | Iterable[ReceivedMessage], deliveries: Iterable[tuple[str, int]] = (), *,
             using: str | None = None) -> int:
    """Ack many deliveries in one transaction — ``ack_many(messages)``, or ``ack_many(queue,
    [(id, receipt)])`` — returns how many were still current."""
    n = 0
    for queue, pairs in _by_queue(queue_or_messages, deliveries).items():
        st = _store(using)
        with transaction.atomic(using=st.alias):
            done = st.ack_many(queue, pairs)
            if done:
                _slot_freed(st, queue)
        metrics.acked(queue, done)
        n += done
    return n


def nack_many(messages: Iterable[ReceivedMessage], error: str | BaseException | None = None, *,
              using: str | None = None) -> int:
    """Nack many deliveries in one transaction; returns how many were still current."""
    return sum(settle_many("nack", queue, pairs, error=error, using=using).count(True)
               for queue, pairs in _by_queue(messages, ()).items())


def _by_queue(queue_or_messages: str | Iterable[ReceivedMessage], deliveries: Iterable[tuple[str, int]]
              ) -> dict[str, list[tuple[str, int]]]:
    if isinstance(queue_or_messages, str):
        queue = validation.queue_name(queue_or_messages)
        return {queue: [(validation.message_id(m), int(r)) for m, r in deliveries]}
    out: dict[str, list[tuple[str, int]]] = {}
    for m in queue_or_messages:
        out.setdefault(validation.queue_name(m.queue), []).append((validation.message_id(m.id), _receipt(m)))
    return out


def settle_many(action: str, queue: str, deliveries: Sequence[tuple[str, int]], *, seconds: Any = None,
                error: str | BaseException | None = None, using: str | None = None) -> list[bool]:
    """``action`` (``"ack"``, ``"nack"`` or ``"change_visibility"`` to ``seconds``) on each of
    [(id, receipt)] of ``queue``, in one transaction; one bool each: was the delivery current?"""
    queue = validation.queue_name(queue)
    valid = [(validation.message_id(m), int(r)) for m, r in deliveries]
    st = _store(using)
    now = base.now_ms()
    with transaction.atomic(using=st.alias):
        if action == "ack":
            done = [st.ack(queue, m, r) for m, r in valid]
            metrics.acked(queue, done.count(True))
        elif action == "nack":
            pol = policy(queue, using=st.alias)
            text = describe_error(error)
            done = [st.nack(queue, m, r, now, pol.max_attempts, pol.backoff_ms, text, pol.jitter) for m, r in valid]
            metrics.nacked(queue, done.count(True))
        elif action == "change_visibility":
            ms = validation.duration_ms(seconds, "visibility_timeout", *vocab.VISIBILITY_S)
            done = st.change_visibility(queue, valid, now, ms)
            if ms == 0 and any(done):
                kick(st.alias, (queue,))
        else:
            raise ValueError(f"unknown action {action!r}")
        if any(done):
            _slot_freed(st, queue)
    return done


MAX_ERROR_CHARS = vocab.ERROR_TEXT_MAX  # a consumer's error is a diagnosis, not a log: keep rows small


def describe_error(error: str | BaseException | None) -> str | None:
    """``last_error`` text: an exception as ``module.Class: message`` (builtins unqualified)."""
    if error is None:
        return None
    if isinstance(error, BaseException):
        cls = type(error)
        name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
        error = f"{name}: {error}" if str(error) else name
    return str(error)[:MAX_ERROR_CHARS]


def fail(message: ReceivedMessage, error: str | BaseException | None = None, *, using: str | None = None,
         used_up: bool = False) -> None:
    """Fail a delivery at once, without retries: the failed job moves it to the DLQ with the
    failure reason ``fatal_error``. ``error`` (an exception or text) is kept as ``last_error``.
    ``used_up``: the consumer's own attempt limit is reached (one lower than the queue's, as a
    task's ``@retries``): the reason is then ``max_attempts_reached``, and it counts as a nack."""
    queue, message_id = validation.queue_name(message.queue), validation.message_id(message.id)
    st = _store(using)
    _settled(st.fail(queue, message_id, _receipt(message), base.now_ms(), describe_error(error), used_up=used_up))
    if used_up:
        metrics.nacked(queue, 1)
    else:
        metrics.failed(queue)
    _slot_freed(st, queue)


def release(message: ReceivedMessage, *, using: str | None = None) -> bool:
    """Give back a claimed message that no consumer saw (its attempt is not counted)."""
    st = _store(using)
    done = st.release(message.queue, message.id, _receipt(message), base.now_ms())
    if done:
        kick(st.alias, (message.queue,))
    return done


def release_many(queue: str, deliveries: Iterable[tuple[str, int]], *, using: str | None = None) -> int:
    """Give back [(id, receipt)] claimed but never seen by a consumer, in one transaction (their
    attempts are not counted); returns how many were still current."""
    queue = validation.queue_name(queue)
    valid = [(validation.message_id(m), int(r)) for m, r in deliveries]
    if not valid:
        return 0
    st = _store(using)
    with transaction.atomic(using=st.alias):
        n = st.release_many(queue, valid, base.now_ms())
        if n:
            kick(st.alias, (queue,))
    return n


def change_visibility(message: ReceivedMessage | Iterable[ReceivedMessage], seconds: Any, *,
                      using: str | None = None) -> int:
    """End the lease of a delivery (or of each of a list, in one transaction) ``seconds`` (0 s to
    12 h, or a timedelta) from now: more time to work, or, with 0, back to the queue at once (the
    attempt stays counted). The receipt stays the same. Returns how many were still current; a
    single message that was not raises ``ForqError`` (``not_found.message``)."""
    if isinstance(message, ReceivedMessage):
        done = settle_many("change_visibility", message.queue, [(message.id, _receipt(message))],
                           seconds=seconds, using=using)
        _settled(done[0])
        ms = validation.duration_ms(seconds, "visibility_timeout", *vocab.VISIBILITY_S)
        message.lease_expires_at = base.now_ms() + ms
        return 1
    return sum(settle_many("change_visibility", queue, pairs, seconds=seconds, using=using).count(True)
               for queue, pairs in _by_queue(message, ()).items())


def defer(message: ReceivedMessage | validation.Delivery, delay: Any = 0, *, state: str | None = None,
          using: str | None = None) -> None:
    """Put a delivered message back on its queue ``delay`` (seconds or timedelta) from now, keeping
    its id and attempts, behind the messages of its priority already waiting, with ``state`` (text; None keeps what was saved) given to its next delivery
    as ``message.state``: a long job saves its progress and lets others have a turn. Fenced by the
    receipt, like ack (``not_found.message`` when the delivery is no longer current). ``message``: a
    received message, or a face's :class:`~forqapp.validation.Delivery` (its queue, id and receipt)."""
    queue, message_id = validation.queue_name(message.queue), validation.message_id(message.id)
    delay_ms = validation.duration_ms(delay, "delay", 0, forq_settings.FORQ_PROCESS_AFTER_MAX_MS / 1000)
    if state is not None and not isinstance(state, str):
        raise ForqError(errors.BODY_INVALID, "state must be a string (JSON-encode other values)")
    st = _store(using)
    if state is not None:  # the same rules as content: valid text, at most FORQ_MAX_CONTENT_BYTES
        _refuse_nul(st, [validation.content(state, forq_settings.FORQ_MAX_CONTENT_BYTES)])
    _settled(st.defer(queue, message_id, _receipt(message), base.now_ms(), delay_ms, state))
    metrics.deferred(queue)
    kick(st.alias, (queue,))  # a slot freed, or the message is due again


def extend(message: ReceivedMessage, *, using: str | None = None) -> bool:
    """Renew the lease of a delivery for its queue's visibility timeout (the worker's heartbeat), or
    for the longer lease its receive took (``visibility_timeout=``): an extend never shortens the
    lease a receive asked for. False if the delivery is no longer current."""
    st = _store(using)
    ms = policy(message.queue, using=st.alias).visibility_timeout_ms
    if message.lease_ms is not None:
        ms = max(ms, message.lease_ms)  # the lease the receive took
    now = base.now_ms()
    done = st.change_visibility(message.queue, [(message.id, _receipt(message))], now, ms)[0]
    if done:
        message.lease_expires_at = now + ms
    return done
