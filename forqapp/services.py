"""The queue's operations: validation → store (SQL) → metrics and wake-ups.

The HTTP API, the Python API (:mod:`forqapp.api` re-exported from ``forqapp``), the worker, the
admin, the UI pages and the jobs all call these functions; none of them writes SQL.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from functools import partial
from itertools import chain, repeat
from typing import Any, NamedTuple, NoReturn, TypeVar

from django.db import connections, transaction

from . import conf, db, errors, ids, limits, metrics, store, utils, validation, vocab
from . import policy as policy_module
from .conf import forq_settings
from .errors import ForqError
from .policy import Policy
from .store import (
    POLICY_COLUMNS,
    Delivery,
    MessageRow,
    NewMessage,
    QueueCounts,
    QueueRow,
    StagedMessage,
    Store,
)
from .vocab import SNAPSHOT_COLUMNS, base_of

T = TypeVar("T")


now_ms = utils.now_ms  # Forq's clock (Unix ms), here for the callers that always took it from services


_hot_setting = conf.hot  # settings every send, claim and ack reads, resolved once


def alias() -> str:
    return str(_hot_setting("FORQ_DATABASE"))


def _store(using: str | None = None) -> Store:
    return store.for_alias(using or alias())


@dataclass
class ReceivedMessage:
    """A delivered (or peeked) message. ``receipt`` names this delivery: ack/nack must echo it (None
    for a peek). Times are Unix ms; ``lease_expires_at`` is when the lease ends (None: not leased)."""

    id: str
    queue: str
    content: str
    attempts: int
    receipt: int | None
    priority: int = 0
    attributes: dict[str, str] = field(default_factory=dict)
    dedup_id: str | None = None
    sequence: int = 0
    received_at: int = 0
    first_received_at: int | None = None
    lease_expires_at: int | None = None
    state: str | None = None  # saved by forqapp.defer(message, state=…)
    # Why it failed (``max_attempts_reached``, ``message_expired``, ``fatal_error``) and the last
    # error a consumer gave: on a peek of one message by its id (forqapp.peek(queue, id)), else None.
    failure_reason: str | None = None
    last_error: str | None = None
    # The lease the receive took (ms), which extend() renews for at least: not derived from
    # lease_expires_at, which each renewal moves on (a heartbeat would lengthen it every time).
    lease_ms: int | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_row(cls, row: Delivery) -> ReceivedMessage:
        message = cls(row.id, row.queue, row.content, row.attempts, row.receipt, row.priority,
                      validation.decode_attributes(row.attributes), row.dedup_id, row.sequence,
                      row.received_at, row.first_received_at, row.lease_expires_at, row.state)
        if row.receipt is not None and row.lease_expires_at is not None:
            message.lease_ms = row.lease_expires_at - row.receipt
        return message

    def json(self) -> Any:
        """``content`` parsed as JSON."""
        return json.loads(self.content)


@dataclass(frozen=True)
class SendResult:
    """What a send did: the message's id, sequence and ``received_at`` (the send time it holds,
    Unix ms), or, when ``deduplicated``, the id of the message its dedup id already named (and
    sequence 0, received_at None: nothing was created)."""

    id: str
    sequence: int
    deduplicated: bool = False
    received_at: int | None = None


# --- queue policy ------------------------------------------------------------------------------

_policies: dict[tuple[str, str], tuple[float, Policy]] = {}


def policy(queue: str, *, using: str | None = None) -> Policy:
    """``queue``'s policy (a DLQ's is its regular queue's), read at most every
    :data:`forqapp.policy.CACHE_S` seconds by each process."""
    name = base_of(queue)
    st = _store(using)
    key = (st.alias, name)
    cached = _policies.get(key)
    now = time.monotonic()
    if cached is not None and now - cached[0] < policy_module.CACHE_S:
        return cached[1]
    resolved = policy_module.resolve(st.queue_get(name))
    _policies[key] = (now, resolved)
    return resolved


def forget_policies() -> None:
    """Drop this process's cached policies (after a change, and in tests)."""
    _policies.clear()


def _ensure_queue(st: Store, queue: str) -> None:
    """Before the first send to ``queue`` (its cached policy says it has no row): make its row
    within ``FORQ_MAX_QUEUES`` (``queue.limit_reached`` beyond), and read its policy again next."""
    limits.ensure_queue(st, queue)
    _policies.pop((st.alias, base_of(queue)), None)


# --- produce --------------------------------------------------------------------------------


def content_storable(text: str, *, using: str | None = None) -> bool:
    """Whether the queue's database can store ``text`` (PostgreSQL's ``text`` cannot hold U+0000)."""
    return _store(using).text_holds_nul or "\x00" not in text


def _refuse_nul(st: Store, contents: Iterable[str]) -> None:
    if not st.text_holds_nul and any("\x00" in c for c in contents):
        raise ForqError(errors.BODY_INVALID, "content with NUL characters cannot be stored on this database")


def _kick(using: str) -> None:
    """Messages became ready: wake this process's waiters now rather than at the next poll, once
    the write is visible (on commit when inside the caller's ``atomic()``; never on rollback).
    Nobody waiting in this process (the usual send): nothing to do, at the cost of a dict lookup —
    a waiter that comes meanwhile looks at the database itself when it starts."""
    notifier = notify.waited_on(using)
    if notifier is None:
        return
    if connections[using].in_atomic_block:
        transaction.on_commit(notifier.kick, using=using)
    else:
        notifier.kick()


def _after_produce(using: str, queue: str, count: int) -> None:
    metrics.produced(queue, count)
    _kick(using)


SEND_OPTIONS = ("process_after", "delay", "priority", "attributes", "dedup_id", "dedup_window", "retention")
_ITEM_KEYS = frozenset({"content", "processAfter", *SEND_OPTIONS})
_PLAIN_KEYS = frozenset({"content", "priority", "attributes"})
_get = dict.get


class _Batch(NamedTuple):
    """send_many's usual batch, a column at a time (:func:`_usual_batch`)."""
    ids: list[str]
    contents: list[str]
    priorities: list[int]
    attributes: list[str | None]


def _usual_batch(items: list[Any], limit: int) -> _Batch | None:
    """send_many's usual batch, checked a column at a time (one C-level pass a field) rather than
    item by item: every item an ASCII string, or every item a dict of ``content`` and at most
    ``priority`` and ``attributes``, all within bounds. Its columns, in the items' order (no tuple
    a message: :meth:`~forqapp.store.Store.insert_batch`); None for any other batch, which
    :func:`_entry` then checks item by item (and raises the exact error)."""
    kinds = set(map(type, items))
    if kinds == {str}:
        contents = items
        priorities = [0] * len(items)
        texts: list[str | None] = [None] * len(items)
    elif kinds == {dict} and _PLAIN_KEYS.issuperset(chain.from_iterable(items)):
        contents = list(map(_get, items, repeat("content")))
        priorities = list(map(_get, items, repeat("priority"), repeat(0)))
        if set(map(type, priorities)) != {int} or min(priorities) < vocab.PRIORITY_MIN \
                or max(priorities) > vocab.PRIORITY_MAX:
            return None
        checked = validation.attributes_many(list(map(_get, items, repeat("attributes"))))
        if checked is None:
            return None
        texts = checked
    else:
        return None
    if set(map(type, contents)) != {str} or not all(map(str.isascii, contents)) or max(map(len, contents)) > limit:
        return None
    return _Batch(ids.new_ids(len(items)), contents, priorities, texts)


def _batch_rows(queue: str, batch: _Batch, now: int, pol: Policy) -> list[MessageRow]:
    """The rows of a usual batch (plain tuples, not NewMessage: see forqapp.store.MessageRow)."""
    return list(zip(batch.ids, repeat(queue), batch.contents, repeat(now), repeat(now),
                    repeat(now + pol.retention_ms), batch.priorities, batch.attributes, repeat(None)))


def _entry(message_id: str, queue: str, item: Any, now: int, pol: Policy, limit: int,
           past_due: bool = False) -> NewMessage:
    """One send's row: ``item`` is the content, or a dict of ``content`` and :data:`SEND_OPTIONS`
    (``processAfter`` too, as Forq's bulk bodies spell it). ``past_due``: see :func:`send_entries`."""
    if not isinstance(item, dict):
        due = now
        return _new_message((message_id, queue, validation.content(item, limit), due, now, due + pol.retention_ms,
                             0, None, None))
    get = item.get
    if not item.keys() <= _ITEM_KEYS:
        unknown = set(item) - _ITEM_KEYS
        raise ForqError(errors.BODY_INVALID, f"unknown field(s): {', '.join(sorted(map(str, unknown)))}")
    # (Each option checked only when given: send_many's rows are mostly content and one or two.)
    content = validation.content(get("content"), limit)  # before the due time, as Forq's SPEC orders them
    process_after, delay, retention = get("process_after"), get("delay"), get("retention")
    if process_after is None:
        process_after = get("processAfter")
    due = now if process_after is None and delay is None else _due(process_after, delay, now, past_due)
    priority, attributes, dedup_id = get("priority"), get("attributes"), get("dedup_id")
    return _new_message((
        message_id, queue, content, due, now,
        (max(due, now) if past_due else due) + (pol.retention_ms if retention is None
               else validation.duration_ms(retention, "retention", 1, validation.YEAR_S)),
        0 if priority is None else validation.priority(priority),
        None if attributes is None else validation.attributes(attributes),
        None if dedup_id is None else validation.dedup_id(dedup_id),
    ))


def _due(process_after: Any, delay: Any, now: int, past_due: bool = False) -> int:
    if delay is not None:
        if process_after is not None:
            raise ForqError(errors.BODY_INVALID, "give process_after or delay, not both")
        return now + validation.duration_ms(delay, "delay", 0, forq_settings.FORQ_PROCESS_AFTER_MAX_MS / 1000)
    if isinstance(process_after, datetime):
        process_after = int(process_after.timestamp() * 1000)
    if past_due and type(process_after) is int and 0 < process_after < now:
        return process_after  # due at once; the time kept (the due order's place)
    return validation.process_after(process_after, now)


# ``NewMessage(...)`` runs a generated ``__new__`` (~0.4 µs); building the tuple directly costs a
# third of that, which shows on send_many's 100,000+ rows a second.
_new_message: Callable[[tuple[Any, ...]], NewMessage] = partial(tuple.__new__, NewMessage)


def send(queue: str, content: str, process_after: int | datetime | None = None, *, delay: Any = None,
         priority: int = 0, attributes: dict[str, str] | None = None, dedup_id: str | None = None,
         dedup_window: Any = None, retention: Any = None, using: str | None = None) -> str:
    """Put one message on ``queue``; returns its id (with a ``dedup_id`` seen within its window:
    the id of the message it named, and nothing is created). Inside the caller's
    ``transaction.atomic()`` on the same database, the message commits or rolls back with the
    caller's own writes (the outbox).

    ``process_after`` (Unix ms or an aware datetime) or ``delay`` (seconds or timedelta) makes it
    due later; ``priority`` (-1000..1000, higher first); ``attributes`` (≤ 10 string pairs);
    ``retention`` (seconds or timedelta) overrides the queue's."""
    if dedup_id is None:
        return _send_one(queue, content, process_after, delay, priority, attributes, retention, using)
    item = {"content": content, "process_after": process_after, "delay": delay, "priority": priority,
            "attributes": attributes, "dedup_id": dedup_id, "retention": retention}
    return send_entries(queue, [item], dedup_window=dedup_window, using=using)[0].id


def _send_one(queue: str, content: str, process_after: int | datetime | None, delay: Any, priority: int,
              attributes: dict[str, str] | None, retention: Any, using: str | None) -> str:
    """:func:`send` without a dedup id (most sends): :func:`send_entries`' checks, in its order, and
    its row for one message, without its batch steps (one row, one store call)."""
    queue = validation.queue_name(queue, produce=True)
    using = using or alias()
    pol = policy(queue, using=using)
    if pol.max_length is not None:  # the length is counted in the produce's transaction
        item = {"content": content, "process_after": process_after, "delay": delay, "priority": priority,
                "attributes": attributes, "retention": retention}
        return send_entries(queue, [item], using=using)[0].id
    st = store.for_alias(using)
    now = now_ms()
    content = validation.content(content, _hot_setting("FORQ_MAX_CONTENT_BYTES"))  # before the due time (SPEC)
    due = now if process_after is None and delay is None else _due(process_after, delay, now)
    if retention is None:
        expires = due + pol.retention_ms
    else:
        expires = due + validation.duration_ms(retention, "retention", 1, validation.YEAR_S)
    priority = validation.priority(priority)
    attributes_json = None if attributes is None else validation.attributes(attributes)
    _refuse_nul(st, (content,))
    if not pol.exists:
        _ensure_queue(st, queue)
    message_id = ids.new_id()
    st.insert_one(_new_message((message_id, queue, content, due, now, expires, priority, attributes_json, None)))
    _after_produce(using, queue, 1)
    return message_id


def send_many(queue: str, items: Iterable[Any], process_after: int | None = None, *,
              using: str | None = None) -> list[str]:
    """Put many messages on ``queue`` in one transaction; returns their ids, in order.

    ``items`` holds strings, or dicts of ``content`` and :func:`send`'s keywords."""
    if process_after is not None:
        items = [{"content": i, "process_after": process_after} if not isinstance(i, dict) else i for i in items]
    return _send_entries(queue, items, None, using, ids_only=True)


def send_entries(queue: str, items: Iterable[Any], *, dedup_window: Any = None,
                 using: str | None = None, past_due: bool = False) -> list[SendResult]:
    """Send ``items`` (contents, or dicts of ``content`` and :data:`SEND_OPTIONS`; a dict may
    carry its own ``dedup_window``) to ``queue`` in one transaction; one :class:`SendResult` each.
    Raises ``ForqError`` (and sends nothing) if any item is invalid, or ``queue.full`` when the
    queue's ``max_length`` would be passed. ``past_due``: a ``process_after`` in the past is kept
    as the message's due time (due at once; its place in a queue ordered by due time; its
    retention counts from now) rather than refused (the Django Tasks backend's past ``run_after``)."""
    return _send_entries(queue, items, dedup_window, using, ids_only=False, past_due=past_due)


def _send_entries(queue: str, items: Iterable[Any], dedup_window: Any, using: str | None, *,
                  ids_only: bool, past_due: bool = False) -> list[Any]:
    """:func:`send_entries`; with ``ids_only``, the ids alone (:func:`send_many`: no result object
    a message on the usual path, which shows at 100,000 messages a second)."""
    queue = validation.queue_name(queue, produce=True)
    now = now_ms()
    items = list(items)
    if not items:
        return []
    st = _store(using)
    pol = policy(queue, using=st.alias)
    limit = _hot_setting("FORQ_MAX_CONTENT_BYTES")
    batch = _usual_batch(items, limit)
    if batch is not None and pol.max_length is None:
        _refuse_nul(st, batch.contents)
        if not pol.exists:
            _ensure_queue(st, queue)
        # atomic on its own, or part of the caller's transaction
        sequences = st.insert_batch(queue, batch.ids, batch.contents, batch.priorities, batch.attributes,
                                    due=now, received=now, expires=now + pol.retention_ms)
        _after_produce(st.alias, queue, len(items))
        if ids_only:
            return batch.ids
        return [SendResult(i, seq, received_at=now) for i, seq in zip(batch.ids, sequences, strict=True)]
    windows = None
    rows: list[MessageRow]  # (fields by place: id 0, …)
    if batch is not None:
        rows = _batch_rows(queue, batch, now, pol)
    else:
        rows = [_entry(mid, queue, item, now, pol, limit, past_due)
                for mid, item in zip(ids.new_ids(len(items)), items, strict=True)]
        if any(r[8] for r in rows):  # a dedup id
            windows = [_dedup_window(item, dedup_window, pol) for item in items]
    _refuse_nul(st, (r[2] for r in rows))
    if not pol.exists:  # (a queue with a max_length has its row)
        _ensure_queue(st, queue)
    if windows is None and pol.max_length is None:
        sequences = st.insert(rows)  # atomic on its own, or part of the caller's transaction
        _after_produce(st.alias, queue, len(rows))
        if ids_only:
            return [r[0] for r in rows]
        return [SendResult(r[0], seq, received_at=now) for r, seq in zip(rows, sequences, strict=True)]
    results: list[SendResult | None] = [None] * len(rows)
    with transaction.atomic(using=st.alias):
        fresh = []
        if windows is not None:
            for i, (row, window) in enumerate(zip(rows, windows, strict=True)):
                original = st.dedup(queue, row[8], row[0], now, window) if row[8] else None
                if original is None:
                    fresh.append(i)
                else:
                    results[i] = SendResult(original, 0, deduplicated=True)
        else:
            fresh = list(range(len(rows)))
        if fresh and pol.max_length is not None and \
                st.queue_length(queue, pol.max_length) + len(fresh) > pol.max_length:
            _refuse_full(queue, pol.max_length, len(fresh))
        sequences = st.insert([rows[i] for i in fresh]) if fresh else []
    for i, seq in zip(fresh, sequences, strict=True):
        results[i] = SendResult(rows[i][0], seq, received_at=now)
    metrics.deduplicated(queue, len(rows) - len(fresh))
    if fresh:
        _after_produce(st.alias, queue, len(fresh))
    return [r.id if ids_only else r for r in results if r is not None]


def _refuse_full(queue: str, max_length: int, n: int) -> NoReturn:
    """``queue.full`` for ``n`` messages that would pass the queue's ``max_length`` (counted)."""
    metrics.refused_full(queue, n)
    raise ForqError(errors.QUEUE_FULL, f"queue {queue!r} holds its max_length of {max_length} messages")


def _dedup_window(item: Any, default: Any, pol: Policy) -> int:
    window = item.get("dedup_window", default) if isinstance(item, dict) else default
    if window is None:
        return pol.dedup_window_ms
    return validation.duration_ms(window, "dedup_window", 0.001, 12 * 3600)


# --- consume --------------------------------------------------------------------------------


def _claim(queue: str, limit: int, visibility_timeout: Any, random: bool, using: str | None,
           redriven: list[ReceivedMessage] | None = None,
           throttled: list[str] | None = None) -> list[ReceivedMessage]:
    st = _store(using)
    pol = policy(queue, using=st.alias)
    if pol.paused:
        return []
    visibility = pol.visibility_timeout_ms if visibility_timeout is None else \
        validation.duration_ms(visibility_timeout, "visibility_timeout", 0, vocab.VISIBILITY_MAX_S)
    claimed = st.claim(queue, now_ms(), limit, visibility_ms=visibility, max_attempts=pol.max_attempts,
                       dlq_ttl_ms=pol.dlq_retention_ms, order="random" if random else pol.ordering,
                       max_in_flight=pol.max_in_flight, rate_interval_us=pol.rate_interval_us)
    if claimed.throttled:
        metrics.throttled(queue, claimed.throttled)
        if throttled is not None:
            throttled.append(claimed.throttled)
    metrics.redriven(queue, claimed.redriven)
    if redriven is not None:
        redriven += [ReceivedMessage.from_row(d) for d in claimed.redriven_messages]
    if claimed.deliveries:
        metrics.consumed(queue, len(claimed.deliveries))
    return [ReceivedMessage.from_row(d) for d in claimed.deliveries]


def claim(queue: str, *, visibility_timeout: Any = None, random: bool = False,
          using: str | None = None) -> ReceivedMessage | None:
    """Take the next due message of ``queue`` now (by its policy's order), or None (no waiting)."""
    queue = validation.queue_name(queue)
    got = _claim(queue, 1, visibility_timeout, random, using)
    return got[0] if got else None


def claim_many(queue: str, limit: int, *, visibility_timeout: Any = None, random: bool = False,
               using: str | None = None, redriven: list[ReceivedMessage] | None = None,
               throttled: list[str] | None = None) -> list[ReceivedMessage]:
    """Take up to ``limit`` due messages of ``queue`` now (no waiting). Used-up messages the claim
    moves to the DLQ instead are appended to ``redriven`` when given (as they are now: in the DLQ,
    attempts 0, no receipt; only this claim sees them): how forq_worker's task runners learn of a
    task whose worker died during its last attempt. A claim the queue's ``max_in_flight`` or
    ``rate`` held back appends its reason (``"concurrency"``, ``"rate"``) to ``throttled``."""
    queue = validation.queue_name(queue)
    return _claim(queue, limit, visibility_timeout, random, using, redriven, throttled)


def receive(queue: str, wait: float = 0, *, visibility_timeout: Any = None, random: bool = False,
            using: str | None = None) -> ReceivedMessage | None:
    """Take the next due message of ``queue``, waiting up to ``wait`` seconds for one
    (:func:`forqapp.waiting.claim`). ``visibility_timeout`` (0 s to 12 h) overrides the queue's
    lease for this receive; ``random`` picks at random among the due messages."""
    if not wait:  # nothing to wait for: one claim (what waiting.claim would do, without its steps)
        return claim(queue, visibility_timeout=visibility_timeout, random=random, using=using)
    from . import waiting

    return waiting.claim(lambda: claim(queue, visibility_timeout=visibility_timeout, random=random, using=using),
                         (queue,), wait, using=using)


def receive_many(queue: str, max_messages: int, *, wait: float = 0, visibility_timeout: Any = None,
                 random: bool = False, using: str | None = None) -> list[ReceivedMessage]:
    """Take up to ``max_messages`` due messages of ``queue`` in one statement, waiting up to
    ``wait`` seconds for the first."""
    from . import waiting

    if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
        raise ForqError(errors.BODY_INVALID, "max_messages must be a positive integer")
    got = waiting.claim(
        lambda: claim_many(queue, max_messages, visibility_timeout=visibility_timeout, random=random,
                           using=using) or None,
        (queue,), wait, using=using)
    return got or []


def peek(queue: str, id: str | None = None, *, using: str | None = None) -> ReceivedMessage | None:  # noqa: A002
    """The message a receive would get now (or message ``id`` of ``queue``, in any state, with its
    ``failure_reason`` and ``last_error``), changing nothing; its ``receipt`` is None."""
    queue = validation.queue_name(queue)
    message_id = None if id is None else validation.message_id(id)
    st = _store(using)
    if message_id is None:
        row = st.peek(queue, now_ms(), policy(queue, using=st.alias).ordering)
        return ReceivedMessage.from_row(row) if row else None
    found = st.peek_message(queue, message_id)  # one message, looked at: why it failed too
    if found is None:
        return None
    message = ReceivedMessage.from_row(found[0])
    message.failure_reason, message.last_error = found[1], found[2]
    return message


def _slot_freed(st: Store, queue: str) -> None:
    """A delivery of ``queue`` ended: if the queue has a concurrency limit, its waiters (in every
    process) look again — on PostgreSQL a settle that makes nothing ready would not tell them."""
    if policy(queue, using=st.alias).max_in_flight is not None:
        st.notify(queue)
        _kick(st.alias)


def _settled(done: bool) -> None:
    if not done:
        raise ForqError(errors.NOT_FOUND_MESSAGE, "no such delivery (wrong receipt, queue or id)")


def ack(message: ReceivedMessage, *, using: str | None = None) -> None:
    ack_delivery(message.queue, message.id, _receipt(message), using=using)


def nack(message: ReceivedMessage, error: str | BaseException | None = None, *, using: str | None = None) -> None:
    """Retry later (the queue's backoff); ``error`` (an exception or text) is kept as the
    message's ``last_error``, which goes with it to the DLQ."""
    nack_delivery(message.queue, message.id, _receipt(message), using=using, error=error)


def _receipt(message: ReceivedMessage) -> int:
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
    _settled(st.nack(queue, message_id, receipt, now_ms(), pol.max_attempts, pol.backoff_ms,
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
    now = now_ms()
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
            ms = validation.duration_ms(seconds, "visibility_timeout", 0, vocab.VISIBILITY_MAX_S)
            done = st.change_visibility(queue, valid, now, ms)
            if ms == 0 and any(done):
                _kick(st.alias)
        else:
            raise ValueError(f"unknown action {action!r}")
        if any(done):
            _slot_freed(st, queue)
    return done


MAX_ERROR_CHARS = 2_000  # a consumer's error is a diagnosis, not a log: keep rows small


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
    _settled(st.fail(queue, message_id, _receipt(message), now_ms(), describe_error(error), used_up=used_up))
    if used_up:
        metrics.nacked(queue, 1)
    else:
        metrics.failed(queue)
    _slot_freed(st, queue)


def release(message: ReceivedMessage, *, using: str | None = None) -> bool:
    """Give back a claimed message that no consumer saw (its attempt is not counted)."""
    st = _store(using)
    done = st.release(message.queue, message.id, _receipt(message), now_ms())
    if done:
        _kick(st.alias)
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
        n = st.release_many(queue, valid, now_ms())
        if n:
            _kick(st.alias)
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
        ms = validation.duration_ms(seconds, "visibility_timeout", 0, vocab.VISIBILITY_MAX_S)
        message.lease_expires_at = now_ms() + ms
        return 1
    return sum(settle_many("change_visibility", queue, pairs, seconds=seconds, using=using).count(True)
               for queue, pairs in _by_queue(message, ()).items())


def defer(message: ReceivedMessage, delay: Any = 0, *, state: str | None = None, using: str | None = None) -> None:
    """Put a delivered message back on its queue ``delay`` (seconds or timedelta) from now, keeping
    its id and attempts, behind the messages of its priority already waiting, with ``state`` (text; None keeps what was saved) given to its next delivery
    as ``message.state``: a long job saves its progress and lets others have a turn. Fenced by the
    receipt, like ack (``not_found.message`` when the delivery is no longer current)."""
    queue, message_id = validation.queue_name(message.queue), validation.message_id(message.id)
    delay_ms = validation.duration_ms(delay, "delay", 0, forq_settings.FORQ_PROCESS_AFTER_MAX_MS / 1000)
    if state is not None and not isinstance(state, str):
        raise ForqError(errors.BODY_INVALID, "state must be a string (JSON-encode other values)")
    st = _store(using)
    if state is not None:  # the same rules as content: valid text, at most FORQ_MAX_CONTENT_BYTES
        _refuse_nul(st, [validation.content(state)])
    _settled(st.defer(queue, message_id, _receipt(message), now_ms(), delay_ms, state))
    metrics.deferred(queue)
    _kick(st.alias)  # a slot freed, or the message is due again


def extend(message: ReceivedMessage, *, using: str | None = None) -> bool:
    """Renew the lease of a delivery for its queue's visibility timeout (the worker's heartbeat), or
    for the longer lease its receive took (``visibility_timeout=``): an extend never shortens the
    lease a receive asked for. False if the delivery is no longer current."""
    st = _store(using)
    ms = policy(message.queue, using=st.alias).visibility_timeout_ms
    if message.lease_ms is not None:
        ms = max(ms, message.lease_ms)  # the lease the receive took
    now = now_ms()
    done = st.change_visibility(message.queue, [(message.id, _receipt(message))], now, ms)[0]
    if done:
        message.lease_expires_at = now + ms
    return done


# --- queues -----------------------------------------------------------------------------------


@dataclass
class QueueInfo:
    """A queue's policy (``policy``: every field resolved; ``overrides``: those the queue sets
    itself), state and counts (ready, delayed, in_flight, failed, dlq)."""

    name: str
    policy: dict[str, Any]
    overrides: dict[str, Any]
    paused: bool
    counts: dict[str, int]
    last_sequence: int
    created_at: int | None

    def json(self) -> dict[str, Any]:
        return asdict(self)


def _info(name: str, row: QueueRow | None, counts: QueueCounts) -> QueueInfo:
    pol = policy_module.resolve(row)
    return QueueInfo(name, pol.public(), pol.overrides, pol.paused, counts._asdict(),
                     row.last_sequence if row else 0, row.created_at if row else None)


def configure_queue(name: str, *, using: str | None = None, **fields: Any) -> QueueInfo:
    """Set ``name``'s policy fields (creating the queue if needed): ``max_attempts`` (≥ 1 or
    ``"unlimited"``), ``backoff`` (a list of ms, or ``{"base_ms", "max_ms", "jitter"}``),
    ``visibility_timeout``, ``retention``, ``dlq_retention``, ``dedup_window`` (seconds or
    timedelta), ``max_length``, ``ordering`` (``"fifo"``/``"lifo"``/``"due"``), ``paused``. Fields not given
    keep their value; None resets one to the global setting."""
    name = validation.queue_name(name, produce=True)
    changes = validation.policy(fields)
    st = _store(using)
    with transaction.atomic(using=st.alias):
        row = st.queue_get(name)
        current = {c: getattr(row, c) for c in (*POLICY_COLUMNS, "paused")} if row else {}
        if row is None:
            limits.ensure_queue(st, name)
        st.queue_put(name, {**current, **changes}, now_ms())
    forget_policies()
    if row is not None and row.paused and changes.get("paused") is False:
        _kick(st.alias)  # consumers waiting on a paused queue look again
    return queue_info(name, using=st.alias)


def declare_queue(name: str, fields: dict[str, Any], *, using: str | None = None) -> QueueInfo:
    """Make ``name``'s policy exactly ``fields`` (the others follow the global settings):
    ``FORQ_QUEUES``' declarative form. Idempotent."""
    name = validation.queue_name(name, produce=True)
    st = _store(using)
    # Not held to FORQ_MAX_QUEUES: the project's own configuration (migrate must not fail because
    # clients made the other queues); its queues count toward the limit, and E050 keeps it within.
    st.queue_put(name, validation.policy(fields), now_ms())
    forget_policies()
    return queue_info(name, using=st.alias)


def queue_info(name: str, *, using: str | None = None) -> QueueInfo:
    """``name``'s policy, state and counts; raises ``ForqError`` (``not_found.queue``) for a queue
    that has neither a row nor messages."""
    name = validation.queue_name(name, produce=True)
    st = _store(using)
    row = st.queue_get(name)
    info = _info(name, row, st.queue_counts(name, now_ms()))
    if row is None and not any(info.counts.values()):
        raise ForqError(errors.NOT_FOUND_QUEUE, f"no queue {name!r}")
    return info


def list_queues(*, using: str | None = None) -> list[QueueInfo]:
    """Every queue (with a row, or with messages), by name."""
    st = _store(using)
    now = now_ms()
    rows = {r.name: r for r in st.queue_list()}
    names = set(rows) | {base_of(d.queue) for d in st.queue_depths()}
    counts = st.state_counts(now, [q for n in names for q in (n, n + vocab.DLQ_SUFFIX)])  # one read for all
    return [_info(n, rows.get(n), store.queue_counts_of(counts, n)) for n in sorted(names)]


def purge(name: str, *, using: str | None = None) -> int:
    """Delete every message of queue ``name`` (in any state; its DLQ is kept); returns how many."""
    name = validation.queue_name(name, produce=True)
    n = _store(using).purge(name)
    metrics.cleaned_up("purged", n)
    return n


def delete_queue(name: str, *, using: str | None = None) -> bool:
    """Delete queue ``name``: its policy, its messages and its DLQ's. A later produce creates it
    again (its sequence numbers never go back). False if there was no such queue."""
    name = validation.queue_name(name, produce=True)
    done = _store(using).queue_delete(name, now_ms())
    forget_policies()
    return done


# --- admin: dead-letter queues --------------------------------------------------------------


def requeue(dlq: str, message_id: str | None = None, *, using: str | None = None) -> int:
    """Move one message (or all) of a DLQ back to its queue, ready, keeping its FIFO place. A
    message out of attempts that the ``failed`` job has not moved to the DLQ yet is moved first."""
    dlq = validation.dlq_name(dlq)
    if message_id is not None:
        message_id = validation.message_id(message_id)
    st = _store(using)
    retention = policy(dlq, using=st.alias).retention_ms
    n = st.requeue(dlq, message_id, now_ms(), retention)
    if not n and message_id is not None and move_failed_to_dlq(using=st.alias):
        n = st.requeue(dlq, message_id, now_ms(), retention)  # (the failed job's work, done now)
    if n:
        metrics.requeued(base_of(dlq), n)
        _kick(st.alias)
    return n


def delete_dead(dlq: str, message_id: str | None = None, *, using: str | None = None) -> int:
    """Delete one message (or all) of a DLQ."""
    dlq = validation.dlq_name(dlq)
    if message_id is not None:
        message_id = validation.message_id(message_id)
    n = _store(using).delete_dlq(dlq, message_id)
    metrics.cleaned_up("deleted_by_user", n)
    return n


# --- bulk (the Spark connector) -------------------------------------------------------------

STAGE_TTL_MS = 24 * 3_600_000


def stage(queue: str, token: str, items: Iterable[dict[str, Any]], *, using: str | None = None) -> int:
    """Write messages (``{"content", "processAfter"?}`` dicts) that stay invisible until
    :func:`publish_staged` (or are discarded)."""
    queue = validation.queue_name(queue, produce=True)
    now = now_ms()
    items = list(items)
    limit = forq_settings.FORQ_MAX_CONTENT_BYTES
    content, process_after = validation.content, validation.process_after
    rows = [
        StagedMessage(message_id, content(item.get("content"), limit),
                      process_after(item.get("processAfter"), now), validation.priority(item.get("priority")),
                      validation.attributes(item.get("attributes")))
        for message_id, item in zip(ids.new_ids(len(items)), items, strict=True)
    ]
    st = _store(using)
    _refuse_nul(st, (r.content for r in rows))
    with transaction.atomic(using=st.alias):
        st.stage(token, queue, rows, now)
    return len(rows)


def publish_staged(staged: Sequence[tuple[str, str]], *, using: str | None = None) -> int:
    """Make all rows staged under [(token, queue)] visible, in one transaction."""
    st = _store(using)
    by_queue: dict[str, list[tuple[str, str]]] = {}
    for token, queue in staged:
        by_queue.setdefault(queue, []).append((token, queue))
    now = now_ms()
    published: dict[str, int] = {}
    with transaction.atomic(using=st.alias):
        for queue, pairs in by_queue.items():
            pol = policy(queue, using=st.alias)
            if not pol.exists:
                _ensure_queue(st, queue)
            n = st.publish_staged(pairs, now, pol.retention_ms,
                                  forq_settings.FORQ_PROCESS_AFTER_PAST_TOLERANCE_MS).get(queue, 0)
            published[queue] = published.get(queue, 0) + n
            # A queue's max_length holds for a job's rows too: all of them, or none (the whole
            # publish is one transaction, so a refusal leaves every queue as it was).
            if n and pol.max_length is not None and st.queue_length(queue, pol.max_length + 1) > pol.max_length:
                _refuse_full(queue, pol.max_length, n)
    for queue, n in published.items():
        if n:
            _after_produce(st.alias, queue, n)
    return sum(published.values())


def discard_staged(staged: Sequence[tuple[str, str]], *, using: str | None = None) -> int:
    st = _store(using)
    with transaction.atomic(using=st.alias):
        return st.discard_staged(staged)


def snapshot_page(queue: str, after: str = "", upto: str | None = None, limit: int = 1000, *,
                  using: str | None = None) -> list[dict[str, Any]]:
    queue = validation.queue_name(queue)
    rows = _store(using).snapshot_page(queue, after, upto, limit)
    return [dict(zip(SNAPSHOT_COLUMNS, r, strict=True)) for r in rows]


def snapshot_bounds(queue: str, *, using: str | None = None) -> dict[str, Any]:
    queue = validation.queue_name(queue)
    count, lo, hi = _store(using).snapshot_bounds(queue)
    return {"count": count, "minId": lo, "maxId": hi}


# --- API-key throttle -----------------------------------------------------------------------


def auth_blocked(address: str, *, using: str | None = None) -> bool:
    """Is ``address`` refused for too many wrong keys? (Shared by every process and host.)"""
    return _store(using).auth_blocked_until(address[:100]) > now_ms()


def auth_retry_after(address: str, *, using: str | None = None) -> int:
    """Whole seconds until ``address`` may try a key again (a 429's ``Retry-After``); 0: not blocked."""
    left_ms = _store(using).auth_blocked_until(address[:100]) - now_ms()
    return max(0, -(-left_ms // 1000))  # rounded up: retrying at once after would still be refused


def auth_failed(address: str, *, using: str | None = None) -> None:
    """Count a wrong key from ``address``: the ``FORQ_AUTH_MAX_FAILURES``-th within
    ``FORQ_AUTH_FAILURE_WINDOW_S`` blocks it for ``FORQ_AUTH_BLOCK_S``."""
    _store(using).auth_failed(address[:100], now_ms(), forq_settings.FORQ_AUTH_FAILURE_WINDOW_S * 1000,
                   forq_settings.FORQ_AUTH_MAX_FAILURES, forq_settings.FORQ_AUTH_BLOCK_S * 1000)


# --- login throttle (the API-key throttle's table, under "login-…" keys) ----------------------


def login_blocked_until(keys: Iterable[str], *, using: str | None = None) -> int:
    """Until when (Unix ms) a login is refused for any of ``keys`` (:mod:`forqapp.login_throttle`'s
    address and username keys); 0 when it is not."""
    st = _store(using)
    until = max((st.auth_blocked_until(key[:100]) for key in keys), default=0)
    return until if until > now_ms() else 0


def login_failed(keys: Iterable[str], *, using: str | None = None) -> int:
    """Count a failed login against each of ``keys``: the ``FORQ_LOGIN_MAX_FAILURES``-th within
    ``FORQ_LOGIN_FAILURE_WINDOW_S`` blocks that key for ``FORQ_LOGIN_BLOCK_S``. Returns until when
    the login is now blocked (Unix ms, or 0)."""
    st = _store(using)
    now = now_ms()
    window = forq_settings.FORQ_LOGIN_FAILURE_WINDOW_S * 1000
    limit = forq_settings.FORQ_LOGIN_MAX_FAILURES
    block = forq_settings.FORQ_LOGIN_BLOCK_S * 1000
    return max((st.login_failed(key[:100], now, window, limit, block) for key in keys), default=0)


# --- health ---------------------------------------------------------------------------------


def healthy(*, using: str | None = None) -> bool:
    try:
        _store(using).ping()
        return True
    except Exception:  # noqa: BLE001 - any failure to reach the database is "unhealthy"
        return False


# --- background jobs (docs: how-to/jobs.md): thin wrappers over the store's job SQL, counting metrics ---------


def move_expired_to_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Expired regular messages (ready or failed, never processing) → their DLQ. Also forgets
    dedup ids whose window has ended (not counted: they are not messages), so the dedup table
    holds about a window's sends and this job's interval more, not an hour's (it ran with the
    62-minute ``expired-dlq`` before)."""
    st = _store(using)
    if dry_run:
        return st.count_expired(now_ms(), False)
    now = now_ms()
    n = st.move_expired_to_dlq(now, forq_settings.dlq_ttl_ms)
    metrics.moved_to_dlq("expired", n)
    st.delete_expired_dedup(now)
    return n


def move_failed_to_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Failed regular messages → their DLQ (failure_reason max_attempts_reached)."""
    st = _store(using)
    if dry_run:
        return st.count_failed(False)
    n = st.move_failed_to_dlq(now_ms(), forq_settings.dlq_ttl_ms)
    metrics.moved_to_dlq("failed", n)
    return n


def recover_stale(*, dry_run: bool = False, using: str | None = None) -> int:
    """Deliveries whose lease has ended → ready (or failed when out of attempts). A safety net: a
    receive takes such a delivery by itself."""
    st = _store(using)
    if dry_run:
        return st.count_stale(now_ms())
    n = st.recover_stale(now_ms(), forq_settings.FORQ_MAX_ATTEMPTS)
    metrics.stale_recovered(n)
    if n:
        _kick(st.alias)
    return n


def delete_expired_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    """Expired DLQ messages → deleted. Also deletes rows staged by Spark jobs that never published
    nor discarded them within ``STAGE_TTL_MS`` (they were never messages: not counted)."""
    st = _store(using)
    now = now_ms()
    if dry_run:
        return st.count_expired(now, True)
    n = st.delete_expired_dlq(now)
    metrics.cleaned_up("expired", n)
    st.delete_abandoned_staged(now - STAGE_TTL_MS)
    return n


def delete_failed_dlq(*, dry_run: bool = False, using: str | None = None) -> int:
    st = _store(using)
    if dry_run:
        return st.count_failed(True)
    n = st.delete_failed_dlq()
    metrics.cleaned_up("failed", n)
    return n


def optimize_database(*, dry_run: bool = False, using: str | None = None) -> int:
    """``PRAGMA optimize`` on SQLite (the store decides what "optimize" means for its database)."""
    st = _store(using)
    if not dry_run:
        st.optimize()
    return 0


def in_flight_counts(*, using: str | None = None) -> dict[str, int]:
    """{queue: messages under a live lease} for every queue that has any."""
    return _store(using).in_flight_by_queue(now_ms())


def queue_depths(*, using: str | None = None) -> list[store.QueueDepth]:
    """(queue, is_dlq, messages) for every queue."""
    st = _store(using)
    return st.queue_depths()


# --- wake-ups (the notifier's reads) and the database threads -------------------------------


def wake_version(*, using: str | None = None) -> int:
    """A number that changes when another connection commits something that may make a message
    due (see :attr:`forqapp.store.Store.wakeups`)."""
    return _store(using).data_version()


@dataclass
class Due:
    """What waiters may claim now: messages due per queue (up to a limit; queues with none left
    out), and the earliest time (Unix ms) a rate-limited queue's next slot comes, if any."""

    counts: dict[str, int]
    recheck_at: int | None = None


def due(queues: Sequence[str], limit: int, *, using: str | None = None) -> Due:
    """How many messages waiters could claim now in ``queues``: a read, no write lock. Paused
    queues count none, and a limited queue no more than its free slots (none before its next rate
    slot, whose time comes back in :attr:`Due.recheck_at`), so waiters never wake to claim nothing."""
    st = _store(using)
    now = now_ms()
    policies = {q: policy(q, using=st.alias) for q in queues}
    open_queues = [q for q, p in policies.items() if not p.paused]
    counts = st.has_due(open_queues, now, limit) if open_queues else {}
    recheck_at = None
    for queue in [q for q in counts if policies[q].limited]:
        pol = policies[queue]
        state = st.throttle_state(queue, now)
        free = counts[queue]
        if pol.max_in_flight is not None:
            free = min(free, pol.max_in_flight - state.in_flight)
        if pol.rate_interval_us is not None and state.rate_next_at_us > now * 1000:
            slot = -(-state.rate_next_at_us // 1000)
            recheck_at = slot if recheck_at is None else min(recheck_at, slot)
            free = 0
        if free > 0:
            counts[queue] = free
        else:
            del counts[queue]
    return Due(counts, recheck_at)


def due_counts(queues: Sequence[str], limit: int, *, using: str | None = None) -> dict[str, int]:
    """:func:`due`'s counts alone."""
    return due(queues, limit, using=using).counts


def wake_poll_interval(*, using: str | None = None) -> float:
    """Seconds the notifier sleeps between :func:`wake_version` checks while consumers wait."""
    return _store(using).poll_interval(forq_settings.FORQ_WAKE_POLL_MS / 1000)


def default_api_workers(*, using: str | None = None) -> int:
    """``forq_serve``'s API processes when ``FORQ_API_WORKERS`` is unset."""
    return _store(using).default_api_workers


def default_db_threads(*, using: str | None = None) -> int:
    """The async API's database threads when ``FORQ_DB_THREADS`` is unset."""
    return _store(using).default_db_threads


async def run_async(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run a service function (``fn``) on one of the database threads of :mod:`forqapp.db`, whose
    Django connections stay open: how the async API calls the services."""
    return await db.run(fn, *args, **kwargs)


def startup_problems(*, using: str | None = None) -> list[str]:
    """What stops a server from starting on the database, before it is even opened."""
    return _store(using).startup_problems()


# --- leases -----------------------------------------------------------------------------------


def acquire_lease(name: str, holder: str, ttl_ms: int, *, replacing: str = "", using: str | None = None) -> bool:
    """Take or renew the named lease for ``holder`` (one atomic statement); False while another
    live holder has it. ``replacing`` names a holder the caller knows is dead: taken over at once."""
    return _store(using).lease_acquire(name, holder, now_ms(), int(ttl_ms), replacing)


def lease_holder(name: str, *, using: str | None = None) -> store.LeaseHolder | None:
    """(holder, expires_at in Unix ms) of the named lease, or None when nobody holds it."""
    return _store(using).lease_holder(name)


def release_lease(name: str, holder: str, *, using: str | None = None) -> bool:
    """Give the named lease up if ``holder`` has it."""
    return _store(using).lease_release(name, holder)


# (Last: forqapp.notify imports this module.)
from . import notify  # noqa: E402
