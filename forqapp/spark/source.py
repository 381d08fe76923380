"""The ``forq`` data source for PySpark (``pyspark.sql.datasource``): batch write, snapshot read,
streaming read. Runs on the driver and on executors: no Django, HTTP only (:mod:`.client`).

* **Write** (append only; ``delivery=atLeastOnce`` sends batches straight to the queue instead,
  faster, but a retried task sends its rows again): each task attempt stages its rows under a token of its own; the job's
  ``commit`` publishes every token in one transaction, ``abort`` discards them. A failed or
  retried task attempt's token is never published: no duplicates, nothing visible before commit.
* **Snapshot read**: partitions are id ranges of the queue as it was when the read was planned
  (ids are UUIDv7, so ranges are time ranges), each read in keyset pages. No lease, no change.
* **Streaming read**: the driver claims up to ``maxMessagesPerBatch`` messages per micro-batch
  and acks them only once the batch is committed (at-least-once). See :class:`ForqStreamReader`.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import IntegerType, LongType, ShortType, StringType, StructType

from .. import vocab  # Django-free, like this package
from .options import ForqOptionError, ForqOptions

logger = logging.getLogger("forqapp.spark")

_SPARK_TYPES = {
    "id": "STRING", "queue": "STRING", "content": "STRING", "status": "STRING", "attempts": "INT",
    "received_at": "TIMESTAMP", "process_after": "TIMESTAMP", "failure_reason": "STRING",
    "priority": "INT", "attributes": "MAP<STRING, STRING>", "dedup_id": "STRING", "sequence": "BIGINT",
    "first_received_at": "TIMESTAMP", "last_error": "STRING",
}
SNAPSHOT_SCHEMA = ", ".join(f"{name} {_SPARK_TYPES[name]}" for name in vocab.SNAPSHOT_COLUMNS)
ROWS_PER_PARTITION = 250_000  # snapshot read: default partitioning
MAX_PUBLISH = 10_000  # write: tokens (task outputs) published in one request, one transaction


class ForqDataSource(DataSource):
    """``spark.read/readStream/write.format("forq")``. Options: see :class:`ForqOptions`."""

    @classmethod
    def name(cls) -> str:
        return "forq"

    def __init__(self, options):
        super().__init__(options)
        self.forq = ForqOptions.parse(options)

    def schema(self) -> str:
        return SNAPSHOT_SCHEMA

    def reader(self, schema: StructType) -> ForqSnapshotReader:
        return ForqSnapshotReader(self.forq)

    def writer(self, schema: StructType, overwrite: bool) -> ForqWriter:
        if overwrite:
            raise ForqOptionError('format "forq" only appends to a queue: use .mode("append") '
                                  "(a queue cannot be overwritten)")
        return ForqWriter(self.forq, schema)

    def streamReader(self, schema: StructType) -> ForqStreamReader:
        return ForqStreamReader(self.forq)


# --- batch write -----------------------------------------------------------------------------


@dataclass
class ForqCommitMessage(WriterCommitMessage):
    token: str
    queue: str
    count: int


def _check_write_schema(schema: StructType) -> bool:
    """The DataFrame needs a string ``content``; ``processAfter`` (Unix ms, integral) is optional.
    Returns whether ``processAfter`` is present."""
    fields = {f.name: f for f in schema.fields}
    content = fields.get("content")
    if content is None or not isinstance(content.dataType, StringType):
        raise ForqOptionError('format "forq" writes need a string column "content" (found: '
                              + ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields) + ")")
    pa_field = fields.get("processAfter")
    if pa_field is not None and not isinstance(pa_field.dataType, LongType | IntegerType | ShortType):
        raise ForqOptionError('column "processAfter" must be an integer (Unix ms), not '
                              + pa_field.dataType.simpleString())
    return pa_field is not None


def _task_token(job: str) -> str:
    """A token unique to this task attempt: ``job-partition-attempt-taskAttemptId`` (the last is
    unique in the Spark application, so even a zombie attempt of a retried stage has its own)."""
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
    except Exception:  # noqa: BLE001 - no task context: a random token is unique all the same
        ctx = None
    if ctx is None:
        return f"{job}-x-{uuid.uuid4().hex[:12]}"
    return f"{job}-{ctx.partitionId()}-{ctx.attemptNumber()}-{ctx.taskAttemptId()}"


class ForqWriter(DataSourceArrowWriter):
    def __init__(self, options: ForqOptions, schema: StructType):
        if options.is_dlq:
            raise ForqOptionError(f"cannot write to dead-letter queue {options.queue!r}")
        self.options = options
        self.has_process_after = _check_write_schema(schema)
        self.job = uuid.uuid4().hex[:16]

    def write(self, iterator) -> ForqCommitMessage:
        opts = self.options
        token = _task_token(self.job)
        count = 0
        client = opts.client()
        try:
            for batch in iterator:
                contents = batch.column("content").to_pylist()
                if self.has_process_after:
                    afters = batch.column("processAfter").to_pylist()
                else:
                    afters = None
                if None in contents:  # (an empty string is content: Forq stores it)
                    raise ValueError('format "forq": column "content" holds a null '
                                     "(filter those rows out first)")
                for start in range(0, len(contents), opts.batch_size):
                    chunk = contents[start:start + opts.batch_size]
                    if afters is None:
                        items = [{"content": c} for c in chunk]
                    else:
                        items = [{"content": c} if a is None else {"content": c, "processAfter": a}
                                 for c, a in zip(chunk, afters[start:start + opts.batch_size], strict=True)]
                    body = json.dumps({"messages": items}, separators=(",", ":")).encode()
                    if opts.exactly_once:
                        count += client.stage_raw(opts.queue, token, body)
                    else:  # visible at once; a retried task sends its rows again
                        count += client.send_batch_raw(opts.queue, body)
        except BaseException:
            if not opts.exactly_once:
                raise
            # This attempt's rows will never be published; drop them now rather than leave them
            # to the cleanup job. Best effort: the error that matters is the one re-raised.
            try:
                client.close()
                client.discard([(token, opts.queue)])
            except Exception:  # noqa: BLE001
                logger.warning("could not discard staged token %s", token)
            raise
        finally:
            client.close()
        return ForqCommitMessage(token=token, queue=opts.queue, count=count)

    @staticmethod
    def _staged(messages) -> list[tuple[str, str]]:
        return [(m.token, m.queue) for m in messages if isinstance(m, ForqCommitMessage)]

    def commit(self, messages) -> None:
        """All tasks succeeded: publish every task's rows in one transaction."""
        if not self.options.exactly_once:
            return  # delivery=atLeastOnce: every batch was visible as soon as it was sent
        staged = self._staged(messages)
        if len(staged) > MAX_PUBLISH:
            # one publish request is one transaction; the job is aborted and nothing is visible
            raise ForqOptionError(f'format "forq" publishes at most {MAX_PUBLISH} partitions in one job '
                                  f"(this one has {len(staged)}): coalesce() or repartition() first")
        with self.options.client() as client:
            published = client.publish(staged)
        expected = sum(m.count for m in messages if isinstance(m, ForqCommitMessage))
        logger.info("forq: published %d messages to %s (%d staged)", published, self.options.queue, expected)

    def abort(self, messages) -> None:
        """The job failed: discard what the tasks that reported back staged. An attempt that
        failed discarded its own rows; one killed mid-write (the job aborted under it) may leave
        rows behind: they never become visible, and the server's cleanup job deletes them (staged
        rows expire after 24 h)."""
        staged = self._staged(messages)
        if staged and self.options.exactly_once:
            with self.options.client() as client:
                client.discard(staged)


# --- snapshot read ---------------------------------------------------------------------------


@dataclass
class IdRange(InputPartition):
    after: str  # exclusive; "" = from the start
    upto: str  # inclusive


def _uuid_int(text: str) -> int:
    return uuid.UUID(text).int


def split_id_range(lo: str, hi: str, parts: int) -> list[IdRange]:
    """``parts`` ranges covering ``[lo, hi]`` (ids are UUIDs, compared as canonical text)."""
    a, b = _uuid_int(lo), _uuid_int(hi)
    parts = max(1, min(parts, b - a + 1))
    bounds = [a + (b - a) * i // parts for i in range(1, parts)]
    cuts = [str(uuid.UUID(int=x)) for x in bounds]
    ranges, after = [], ""
    for cut in cuts:
        if cut > after:
            ranges.append(IdRange(after, cut))
            after = cut
    ranges.append(IdRange(after, hi))
    return ranges


def _snapshot_batch(columns: dict[str, list]):
    """A page of columns from the server as an Arrow batch of :data:`SNAPSHOT_SCHEMA`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ts = pa.timestamp("us", tz="UTC")
    status = pa.array(columns["status"], pa.int8())
    names = pa.array(vocab.STATUS_LABELS)  # indexed by the status code
    return pa.RecordBatch.from_arrays(
        [
            pa.array(columns["id"], pa.string()),
            pa.array(columns["queue"], pa.string()),
            pa.array(columns["content"], pa.string()),
            pc.take(names, status),
            pa.array(columns["attempts"], pa.int32()),
            pc.multiply(pa.array(columns["received_at"], pa.int64()), 1000).cast(ts),
            pc.multiply(pa.array(columns["process_after"], pa.int64()), 1000).cast(ts),
            pa.array(columns["failure_reason"], pa.string()),
        ],
        names=list(vocab.SNAPSHOT_COLUMNS),
    )


class ForqSnapshotReader(DataSourceReader):
    def __init__(self, options: ForqOptions):
        self.options = options

    def partitions(self) -> list[IdRange]:
        with self.options.client() as client:
            bounds = client.snapshot_bounds(self.options.queue)
        if not bounds["count"]:
            return [IdRange("", "")]  # empty: read() yields nothing
        parts = self.options.num_partitions or max(1, min(64, -(-bounds["count"] // ROWS_PER_PARTITION)))
        return split_id_range(bounds["minId"], bounds["maxId"], parts)

    def read(self, partition: IdRange) -> Iterator:  # type: ignore[override]  # gets our partitions()
        if not partition.upto:
            return
        opts = self.options
        with opts.client() as client:
            after = partition.after
            while True:
                columns, nxt = client.snapshot_columns(opts.queue, after, partition.upto, opts.page_size)
                if columns["id"]:
                    yield _snapshot_batch(columns)
                if nxt is None:
                    return
                after = nxt


# --- streaming read --------------------------------------------------------------------------


@dataclass
class MessagesPartition(InputPartition):
    rows: list  # rows of the snapshot schema


class ForqStreamReader(DataSourceStreamReader):
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
    * ``stop()``: deliveries not known to be committed are released.

    A message whose lease (forqapp's visibility timeout, 5 minutes) runs out before its batch
    commits is delivered again: keep batches well under it, and make sinks idempotent (key on
    ``id``).
    """

    def __init__(self, options: ForqOptions):
        self.options = options
        self._client = None
        self._held: dict[int, list] = {}  # seq → rows claimed for the batch ending at seq
        self._pending: dict[int, list] = {}  # seq → (id, receipt) not yet acked

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
        outstanding = any(s <= seq for s in self._pending)
        wait = 0 if outstanding else self.options.wait_seconds
        claimed: list[dict] = []
        while len(claimed) < limit_rows:
            got = self._api().claim(self.options.queue, min(10_000, limit_rows - len(claimed)), wait)
            claimed += got
            wait = 0
            if not got:
                break
        if not claimed:
            if outstanding:
                return {"seq": seq + 1, "deliveries": {}}  # an empty batch, so Spark commits the last
            return start
        end = seq + 1
        # Same columns as a snapshot: the message is "processing" (leased to this query); the
        # claim does not return times, so those are null.
        self._held[end] = [(m["id"], self.options.queue, m["content"], vocab.Status.PROCESSING.label, m["attempts"],
                            None, None, None) for m in claimed]
        self._pending[end] = [(m["id"], m["receipt"]) for m in claimed]
        deliveries: dict[str, list[str]] = {}
        for m in claimed:
            deliveries.setdefault(m["receipt"], []).append(m["id"])
        return {"seq": end, "deliveries": deliveries}

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
        pairs = [p for s in sorted(self._pending) for p in self._pending[s]]
        try:
            if pairs:
                self._api().release(self.options.queue, pairs)
        finally:
            self._pending.clear()
            self._held.clear()
            if self._client is not None:
                self._client.close()
                self._client = None
