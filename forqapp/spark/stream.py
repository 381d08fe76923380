"""The ``forq`` data source's streaming read (:class:`ForqStreamReader`): the driver claims up to
``maxMessagesPerBatch`` messages per micro-batch and acks them only once the batch is committed
(at-least-once); the rows are :data:`~.source.SNAPSHOT_SCHEMA`'s. No Django, HTTP only
(:mod:`.client`).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from .. import vocab  # Django-free, like this package
from .client import ForqClientError
from .options import ForqOptions

logger = logging.getLogger("forqapp.spark")


@dataclass
class MessagesPartition(InputPartition):
    rows: list  # rows of the snapshot schema


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _timestamp(ms: int | None) -> datetime | None:
    return None if ms is None else _EPOCH + timedelta(milliseconds=ms)


def _stream_row(queue: str, m: dict[str, Any]) -> tuple:
    """A claimed message as a row of :data:`~.source.SNAPSHOT_SCHEMA`: it is ``processing`` (leased
    to this query), its ``process_after`` is its lease's end; ``failure_reason`` and ``last_error``
    are not sent by a claim (null). A field the server does not send is null too."""
    get = m.get
    row = {
        "id": m["id"], "queue": queue, "content": m["content"], "status": vocab.Status.PROCESSING.label,
        "attempts": m["attempts"], "received_at": _timestamp(get("received_at")),
        "process_after": _timestamp(get("lease_expires_at")), "failure_reason": None,
        "priority": get("priority"), "attributes": get("attributes") or None, "dedup_id": get("dedup_id"),
        "sequence": get("sequence"), "first_received_at": _timestamp(get("first_received_at")), "last_error": None,
        "group": get("group"),
    }
    return tuple(row[name] for name in vocab.SNAPSHOT_COLUMNS)


# PySpark's process for a streaming source: it calls the reader, and ends with ``reader.stop()``
# in a ``finally`` — which SIGTERM, how Spark ends that process when the query stops, skips.
_SOURCE_RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"


_stopping = threading.Event()  # a SIGTERM unwinds, or the reader's stop() has begun: a SIGTERM must not cut it short


def _unwind(signum: int, frame: Any) -> None:
    # Spark sends SIGTERM twice, a few ms apart: only the first unwinds. A second one raised while
    # the first was unwinding (before stop() began) cut the unwinding short, stop() and all (a
    # stopped query's batch then stayed leased until its lease ended: about one CI run in five).
    # (Spark may also close the socket first: then stop() runs already.)
    if not _stopping.is_set():
        _stopping.set()
        raise SystemExit(128 + signum)


def _stop_on_sigterm() -> None:
    """In the source runner process only (never a driver's or a worker's own process, whose signals
    are theirs), make SIGTERM unwind the runner, so that its ``finally: reader.stop()`` runs and the
    leases of the batch in flight end at once rather than after the queue's visibility timeout."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if getattr(spec, "name", None) != _SOURCE_RUNNER or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _unwind)


class ForqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Consumes a queue, at least once.

    Offsets are ``{"seq": n, "deliveries": {receipt: [id, ...]}}``: ``seq`` counts micro-batches
    that claimed something, ``deliveries`` are the claims of the batch ending there. ``latestOffset``
    claims up to ``maxMessagesPerBatch`` messages (the driver holds them until ``partitions``
    hands them to the executors); they stay leased (in processing) until:

    * ``commit(end)`` — Spark committed the batch: ack them. Spark calls it only when it plans the
      next batch, so after a batch that carried messages the next ``latestOffset`` always moves
      the offset on, even with nothing new (an empty batch): the last batch is acked at once.
    * ``latestOffset(start)`` after a restart — ``start`` is the end of a batch Spark committed:
      ack its deliveries (a no-op when they were acked before; acks check receipts).
    * ``partitions(start, end)`` for a batch this reader never claimed (Spark re-runs the
      uncommitted batch after a restart): its deliveries are released — back to ready at once,
      not counted as an attempt — and the batch is empty; the messages come in a later batch.
    * ``stop()``: the leases of deliveries not acked end now, receipts kept (Spark ends the
      source's process with SIGTERM when the query stops: :func:`_stop_on_sigterm` has it call
      ``stop()``); a restart acks or releases them by those receipts.

    ``trigger(availableNow=True)`` (:meth:`prepareForTriggerAvailableNow`): the query takes at most
    the messages the queue held when it started (fewer if it empties first), commits its last
    batch like any other (the empty batch that follows it), and ends.

    A message whose lease (its queue's visibility timeout, 5 minutes unless the queue's policy
    sets another) runs out before its batch commits is delivered again: keep batches well under
    it, and make sinks idempotent (key on ``id``).

    The queue's policy holds (:meth:`_claim`): leases are its visibility timeout's; a batch held
    until its commit counts towards its ``max_in_flight``; a batch stops claiming once its
    ``max_in_flight`` or ``rate`` holds a claim back, and an ``availableNow`` query held back waits
    for the policy rather than ending early.
    """

    def __init__(self, options: ForqOptions):
        self.options = options
        self._client = None
        self._held: dict[int, list] = {}  # seq → rows claimed for the batch ending at seq
        self._pending: dict[int, list] = {}  # seq → (id, receipt) not yet acked
        self._available_now = False
        self._budget: int | None = None  # availableNow: messages the query may still claim (None: any)
        _stop_on_sigterm()

    def prepareForTriggerAvailableNow(self) -> None:
        """The target: what the queue holds now (its snapshot count, an upper bound; a key without
        the ``read`` grant has none, and the query then ends when the queue is empty)."""
        self._available_now = True
        try:
            self._budget = int(self._api().snapshot_bounds(self.options.queue)["count"])
        except ForqClientError as exc:
            if exc.status != 403:
                raise
            self._budget = None

    def _api(self):
        if self._client is None:
            self._client = self.options.client()
        return self._client

    def initialOffset(self) -> dict:
        return {"seq": 0, "deliveries": {}}

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadMaxRows

        return ReadMaxRows(self.options.max_messages_per_batch)

    @staticmethod
    def _pairs(offset: dict) -> list[tuple[str, str]]:
        return [(i, r) for r, ids in (offset.get("deliveries") or {}).items() for i in ids]

    def latestOffset(self, start: dict, limit=None) -> dict:
        seq = int(start.get("seq", 0))
        if seq not in self._pending and self._pairs(start):
            self._ack(self._pairs(start))  # restarted after Spark committed the batch ending at start
        limit_rows = getattr(limit, "maxRows", None) or self.options.max_messages_per_batch
        limit_rows = min(limit_rows, self.options.max_messages_per_batch)
        if self._budget is not None:
            limit_rows = min(limit_rows, self._budget)
        outstanding = any(s <= seq for s in self._pending)
        wait = 0 if outstanding or self._available_now else self.options.wait_seconds
        claimed, throttled = self._claim(limit_rows, wait)
        if not claimed and throttled and self._available_now and not outstanding and self._budget != 0:
            # The queue's policy held the claim back (its rate, or its max_in_flight taken by other
            # consumers): "no new data" would end an availableNow query before it took what the queue
            # held. Wait for the policy to let a claim through.
            claimed = self._claim_when_allowed(limit_rows)
        if self._budget is not None:
            self._budget -= len(claimed)
        if not claimed:
            if outstanding:
                return {"seq": seq + 1, "deliveries": {}}  # an empty batch, so Spark commits the last
            return start
        end = seq + 1
        self._held[end] = [_stream_row(self.options.queue, m) for m in claimed]
        self._pending[end] = [(m["id"], m["receipt"]) for m in claimed]
        deliveries: dict[str, list[str]] = {}
        for m in claimed:
            deliveries.setdefault(m["receipt"], []).append(m["id"])
        return {"seq": end, "deliveries": deliveries}

    def _claim(self, limit_rows: int, wait: float) -> tuple[list[dict], str | None]:
        """Up to ``limit_rows`` messages, claimed as the queue's policy allows: with its visibility
        timeout (the server's), and no more once its ``max_in_flight`` or ``rate`` held a claim back
        (the reason is returned): the rest comes in later batches, when the policy lets it."""
        claimed: list[dict] = []
        throttled = None
        while len(claimed) < limit_rows:
            got, throttled = self._api().claim_throttled(self.options.queue, min(10_000, limit_rows - len(claimed)),
                                                         wait)
            claimed += got
            wait = 0
            if not got or throttled:
                break
        return claimed, throttled

    def _claim_when_allowed(self, limit_rows: int) -> list[dict]:
        pause = 0.05
        while True:
            time.sleep(pause)
            claimed, throttled = self._claim(limit_rows, 0)
            if claimed or not throttled:
                return claimed
            pause = min(pause * 2, 1.0)

    def partitions(self, start: dict, end: dict) -> list[MessagesPartition]:
        seq = int(end.get("seq", 0))
        rows = self._held.pop(seq, None)
        if rows is None:
            pairs = self._pairs(end)
            if pairs:  # a batch claimed before a restart: give its messages back
                released = self._api().release(self.options.queue, pairs)
                logger.info("forq: released %d messages of an uncommitted batch", released)
            return []
        n = max(1, min(self.options.num_partitions or 1, len(rows)))
        return [MessagesPartition(rows[i::n]) for i in range(n)]

    def read(self, partition: MessagesPartition) -> Iterator[tuple]:  # type: ignore[override]  # as above
        yield from (tuple(r) for r in partition.rows)

    def _ack(self, pairs: list[tuple[str, str]]) -> None:
        for i in range(0, len(pairs), 10_000):
            self._api().ack(self.options.queue, pairs[i:i + 10_000])

    def commit(self, end: dict) -> None:
        seq = int(end.get("seq", 0))
        done = [s for s in self._pending if s <= seq]
        pairs = [p for s in sorted(done) for p in self._pending[s]]
        if pairs:
            self._ack(pairs)
        for s in done:
            self._pending.pop(s, None)
            self._held.pop(s, None)

    def stop(self) -> None:
        """The query stops: the leases of what this reader holds and has not acked end now. Not a
        release: Spark may have committed the last batch (it tells the source only when it plans
        the next one), and a released batch's receipts are gone, so a restart could not ack it and
        delivered it again. With the leases ended the messages can be received at once, and a
        restart from the checkpoint still acks the batch Spark committed (``latestOffset``) or
        releases the one it did not (``partitions``), by the receipts in its offsets."""
        _stopping.set()
        pairs = [p for s in sorted(self._pending) for p in self._pending[s]]
        try:
            if pairs:
                self._api().end_leases(self.options.queue, pairs)
        finally:
            self._pending.clear()
            self._held.clear()
            if self._client is not None:
                self._client.close()
                self._client = None
