"""Produce: ``send``, ``send_many``, ``send_entries`` (validation → one INSERT per batch → metrics
and wake-ups)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from functools import partial
from itertools import chain, repeat
from typing import Any, NamedTuple, NoReturn, TypeVar

from django.db import transaction

from .. import errors, ids, metrics, store, validation, vocab
from ..conf import send_limits
from ..errors import ForqError
from ..store import (
    MessageRow,
    NewMessage,
)
from ..validation import SendEntry
from . import base
from .base import SendResult, _hot_setting, _refuse_nul, _store, alias
from .notify import kick
from .policies import Policy, policy
from .queues import _ensure_queue

T = TypeVar("T")

# --- produce --------------------------------------------------------------------------------


def content_storable(text: str, *, using: str | None = None) -> bool:
    """Whether the queue's database can store ``text`` (PostgreSQL's ``text`` cannot hold U+0000)."""
    return _store(using).text_holds_nul or "\x00" not in text


def _after_produce(using: str, queue: str, count: int) -> None:
    metrics.produced(queue, count)
    kick(using, (queue,))


SEND_OPTIONS = ("process_after", "delay", "priority", "attributes", "dedup_id", "dedup_window", "retention",
                "group")
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
                    repeat(now + pol.retention_ms), batch.priorities, batch.attributes, repeat(None), repeat(None)))


def _entry(message_id: str, queue: str, item: Any, now: int, pol: Policy, limit: int,
           past_due: bool = False) -> NewMessage:
    """One send's row: ``item`` is the content, a dict of ``content`` and :data:`SEND_OPTIONS`
    (``processAfter`` too, as Forq's bulk bodies spell it), or a face's parsed
    :class:`~forqapp.validation.SendEntry`. ``past_due``: see :func:`send_entries`."""
    if type(item) is SendEntry:
        return _parsed_entry(message_id, queue, item, now, pol)
    if not isinstance(item, dict):
        due = now
        return _new_message((message_id, queue, validation.content(item, limit), due, now, due + pol.retention_ms,
                             0, None, None, None))
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
    priority, attributes, dedup_id, group = get("priority"), get("attributes"), get("dedup_id"), get("group")
    return _new_message((
        message_id, queue, content, due, now,
        (max(due, now) if past_due else due) + (pol.retention_ms if retention is None
               else validation.duration_ms(retention, "retention", *vocab.RETENTION_S)),
        0 if priority is None else validation.priority(priority),
        None if attributes is None else validation.attributes(attributes),
        None if dedup_id is None else validation.dedup_id(dedup_id),
        None if group is None else validation.group(group),
    ))


def _parsed_entry(message_id: str, queue: str, entry: SendEntry, now: int, pol: Policy) -> NewMessage:
    """The row of a send a face parsed already (:meth:`SendEntry.parse`, or the SQS face's own
    rules): its values trusted, only converted (seconds to ms, attributes to their stored text)."""
    if entry.delay is not None:
        due = now + round(entry.delay * 1000)
    else:
        due = entry.process_after or now  # (0, Go's zero value, is now)
    retention = pol.retention_ms if entry.retention is None else round(entry.retention * 1000)
    return _new_message((
        message_id, queue, entry.content, due, now, due + retention, entry.priority or 0,
        validation.attributes_json(entry.attributes), entry.dedup_id, entry.group,
    ))


def _due(process_after: Any, delay: Any, now: int, past_due: bool = False) -> int:
    if delay is not None:
        if process_after is not None:
            raise ForqError(errors.BODY_INVALID, "give process_after or delay, not both")
        return now + validation.duration_ms(delay, "delay", *validation.delay_bounds(send_limits()))
    if isinstance(process_after, datetime):
        process_after = int(process_after.timestamp() * 1000)
    if past_due and type(process_after) is int and 0 < process_after < now:
        return process_after  # due at once; the time kept (the due order's place)
    return validation.process_after(process_after, now, send_limits())


# ``NewMessage(...)`` runs a generated ``__new__`` (~0.4 µs); building the tuple directly costs a
# third of that, which shows on send_many's 100,000+ rows a second.
_new_message: Callable[[tuple[Any, ...]], NewMessage] = partial(tuple.__new__, NewMessage)


def send(queue: str, content: str, process_after: int | datetime | None = None, *, delay: Any = None,
         priority: int = 0, attributes: dict[str, str] | None = None, dedup_id: str | None = None,
         dedup_window: Any = None, retention: Any = None, group: str | None = None,
         using: str | None = None) -> str:
    """Put one message on ``queue``; returns its id (with a ``dedup_id`` seen within its window:
    the id of the message it named, and nothing is created). Inside the caller's
    ``transaction.atomic()`` on the same database, the message commits or rolls back with the
    caller's own writes (the outbox).

    ``process_after`` (Unix ms or an aware datetime) or ``delay`` (seconds or timedelta) makes it
    due later; ``priority`` (-1000..1000, higher first); ``attributes`` (≤ 10 string pairs);
    ``retention`` (seconds or timedelta) overrides the queue's; ``group`` (1-128 characters of
    ``[A-Za-z0-9_.:/=+@-]``) puts it in a message group: claimed in order within the group, under
    the queue's ``group_concurrency`` and ``group_rate``, fairly across groups."""
    if dedup_id is None and group is None:
        return _send_one(queue, content, process_after, delay, priority, attributes, retention, using)
    item = {"content": content, "process_after": process_after, "delay": delay, "priority": priority,
            "attributes": attributes, "dedup_id": dedup_id, "retention": retention, "group": group}
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
    now = base.now_ms()
    content = validation.content(content, _hot_setting("FORQ_MAX_CONTENT_BYTES"))  # before the due time (SPEC)
    due = now if process_after is None and delay is None else _due(process_after, delay, now)
    if retention is None:
        expires = due + pol.retention_ms
    else:
        expires = due + validation.duration_ms(retention, "retention", *vocab.RETENTION_S)
    priority = validation.priority(priority)
    attributes_json = None if attributes is None else validation.attributes(attributes)
    _refuse_nul(st, (content,))
    if not pol.exists:
        _ensure_queue(st, queue)
    message_id = ids.new_id()
    st.insert_one(_new_message((message_id, queue, content, due, now, expires, priority, attributes_json, None,
                                None)))
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
                 using: str | None = None, past_due: bool = False, to_dlq: bool = False) -> list[SendResult]:
    """Send ``items`` (contents, dicts of ``content`` and :data:`SEND_OPTIONS`, or a face's parsed
    :class:`~forqapp.validation.SendEntry`, trusted as parsed; a dict or an entry may carry its own
    ``dedup_window``) to ``queue`` in one transaction; one :class:`SendResult` each.
    Raises ``ForqError`` (and sends nothing) if any item is invalid, or ``queue.full`` when the
    queue's ``max_length`` would be passed. ``past_due``: a ``process_after`` in the past is kept
    as the message's due time (due at once; its place in a queue ordered by due time; its
    retention counts from now) rather than refused (the Django Tasks backend's past ``run_after``).

    ``to_dlq``: ``queue`` may be a dead-letter queue (``<name>-dlq``), which every other send refuses
    (``bad_request.queue.produce_to_dlq``): the SQS face's, where a DLQ is a queue like any. The
    messages are that DLQ's, as a redrive's are (numbered with ``<name>``'s, in its groups and
    deduplication ids of their own, expiring after the queue's ``dlq_retention``; ``max_length``,
    ``<name>``'s own, does not count them)."""
    return _send_entries(queue, items, dedup_window, using, ids_only=False, past_due=past_due, to_dlq=to_dlq)


def _send_entries(queue: str, items: Iterable[Any], dedup_window: Any, using: str | None, *,
                  ids_only: bool, past_due: bool = False, to_dlq: bool = False) -> list[Any]:
    """:func:`send_entries`; with ``ids_only``, the ids alone (:func:`send_many`: no result object
    a message on the usual path, which shows at 100,000 messages a second)."""
    queue = validation.queue_name(queue, produce=not to_dlq)
    now = base.now_ms()
    items = list(items)
    if not items:
        return []
    st = _store(using)
    pol = policy(queue, using=st.alias)
    dlq = to_dlq and vocab.is_dlq(queue)
    if dlq:  # the DLQ's messages: its retention, outside <name>'s max_length
        pol = replace(pol, retention_ms=pol.dlq_retention_ms, max_length=None)
    limit = _hot_setting("FORQ_MAX_CONTENT_BYTES")
    batch = None if dlq else _usual_batch(items, limit)
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
        sequences = st.insert(rows, is_dlq=dlq)  # atomic on its own, or part of the caller's transaction
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
        sequences = st.insert([rows[i] for i in fresh], is_dlq=dlq) if fresh else []
    for i, seq in zip(fresh, sequences, strict=True):
        results[i] = SendResult(rows[i][0], seq, received_at=now)
    metrics.deduplicated(queue, len(rows) - len(fresh))
    if fresh:
        _after_produce(st.alias, queue, len(fresh))
    return [r.id if ids_only else r for r in results if r is not None]


def _refuse_full(queue: str, max_length: int, n: int) -> NoReturn:
    """``queue.full`` for ``n`` messages that would pass the queue's ``max_length`` (counted)."""
    metrics.refused_full(queue, n)
    what = "one more message" if n == 1 else f"{n} more messages"
    raise ForqError(errors.QUEUE_FULL, f"queue {queue!r} has no room for {what} under its max_length of {max_length}")


def _dedup_window(item: Any, default: Any, pol: Policy) -> int:
    if type(item) is SendEntry and item.dedup_window is not None:  # parsed: trusted
        return round(item.dedup_window * 1000)
    window = item.get("dedup_window", default) if isinstance(item, dict) else default
    if window is None:
        return pol.dedup_window_ms
    return validation.duration_ms(window, "dedup_window", *vocab.DEDUP_WINDOW_S)
