"""The Spark connector's bulk operations: staged writes published at once, snapshot pages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from django.db import transaction

from .. import ids, validation
from ..conf import forq_settings, send_limits
from ..store import (
    StagedMessage,
)
from ..vocab import SNAPSHOT_COLUMNS
from . import base
from .base import _refuse_nul, _store
from .policies import policy
from .produce import _after_produce, _refuse_full
from .queues import _ensure_queue

T = TypeVar("T")

# --- bulk (the Spark connector) -------------------------------------------------------------



def stage(queue: str, token: str, items: Iterable[dict[str, Any]], *, using: str | None = None) -> int:
    """Write messages (``{"content", "processAfter"?, "priority"?, "attributes"?, "group"?}`` dicts) that stay invisible until
    :func:`publish_staged` (or are discarded)."""
    queue = validation.queue_name(queue, produce=True)
    now = base.now_ms()
    items = list(items)
    limits = send_limits()
    limit = limits.content_bytes
    content, process_after = validation.content, validation.process_after
    rows = [
        StagedMessage(message_id, content(item.get("content"), limit),
                      process_after(item.get("processAfter"), now, limits), validation.priority(item.get("priority")),
                      validation.attributes(item.get("attributes")), validation.group(item.get("group")))
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
    with transaction.atomic(using=st.alias):
        published = _publish(st, staged)
    return _announce(st, published)


def publish_sink_batch(staged: Sequence[tuple[str, str]], queue: str, sink: str, batch_id: int, *,
                       using: str | None = None) -> int | None:
    """A Spark streaming query's micro-batch: like :func:`publish_staged`, and in the same
    transaction record that query ``sink`` published batch ``batch_id`` into ``queue``. A batch it
    recorded before, or an earlier one (Spark replays a batch after a crash or a restart), publishes
    nothing: its rows are discarded and the answer is None."""
    queue = validation.queue_name(queue, produce=True)
    st = _store(using)
    with transaction.atomic(using=st.alias):
        if not st.record_sink_batch(queue, sink, batch_id, base.now_ms()):
            st.discard_staged(staged)
            return None
        published = _publish(st, staged)
    return _announce(st, published)


def _publish(st: Any, staged: Sequence[tuple[str, str]]) -> dict[str, int]:
    by_queue: dict[str, list[tuple[str, str]]] = {}
    for token, queue in staged:
        by_queue.setdefault(queue, []).append((token, queue))
    now = base.now_ms()
    published: dict[str, int] = {}
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
    return published


def _announce(st: Any, published: dict[str, int]) -> int:
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
