"""The ``forq`` data source for PySpark (``pyspark.sql.datasource``): batch write, snapshot read,
streaming read. Runs on the driver and on executors: no Django, HTTP only (:mod:`.client`).

* **Write** (append only; ``delivery=atLeastOnce`` sends batches straight to the queue instead,
  faster, but a retried task sends its rows again): each task attempt stages its rows under a token of its own; the job's
  ``commit`` publishes every token in one transaction, ``abort`` discards them. A failed or
  retried task attempt's token is never published: no duplicates, nothing visible before commit.
  Columns: ``content`` (string), optional ``processAfter`` (Unix ms), ``priority`` (integer,
  -1000..1000) and ``attributes`` (map<string, string>, up to 10 pairs); a null is "not given".
  (:mod:`.write`.)
* **Streaming write** (``writeStream``; the "append" output mode; "update" through
  :func:`forqapp.spark.foreach_batch`, as Spark refuses it for a Python data source): exactly once per
  micro-batch, the query known by the id Spark keeps in its checkpoint. See :mod:`.sink`.
* **Snapshot read**: partitions are id ranges of the queue as it was when the read was planned
  (ids are UUIDv7, so ranges are time ranges), each read in keyset pages. No lease, no change.
* **Streaming read**: the driver claims up to ``maxMessagesPerBatch`` messages per micro-batch
  and acks them only once the batch is committed (at-least-once). See :class:`ForqStreamReader`
  (:mod:`.stream`).
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    InputPartition,
)
from pyspark.sql.types import (
    StructType,
)

from .. import vocab  # Django-free, like this package
from .options import ForqOptionError, ForqOptions
from .sink import ForqStreamWriter
from .stream import ForqStreamReader
from .write import ForqWriter

logger = logging.getLogger("forqapp.spark")

_SPARK_TYPES = {
    "id": "STRING", "queue": "STRING", "content": "STRING", "status": "STRING", "attempts": "INT",
    "received_at": "TIMESTAMP", "process_after": "TIMESTAMP", "failure_reason": "STRING",
    "priority": "INT", "attributes": "MAP<STRING, STRING>", "dedup_id": "STRING", "sequence": "BIGINT",
    "first_received_at": "TIMESTAMP", "last_error": "STRING", "group": "STRING",
}
SNAPSHOT_SCHEMA = ", ".join(f"{name} {_SPARK_TYPES[name]}" for name in vocab.SNAPSHOT_COLUMNS)
ROWS_PER_PARTITION = 250_000  # snapshot read: default partitioning


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

    def streamWriter(self, schema: StructType, overwrite: bool) -> ForqStreamWriter:
        if overwrite:
            raise ForqOptionError('format "forq" streaming writes take the "append" output mode (a queue cannot be '
                                  'overwritten: "complete" mode would resend every row each batch; for "update", '
                                  "which Spark itself refuses for a Python data source, use "
                                  "forqapp.spark.foreach_batch)")
        if self.forq.batch_id is not None:
            raise ForqOptionError('forq option \'batchId\' is for df.write inside foreachBatch: a streaming '
                                  "write (writeStream.format(\"forq\")) numbers its micro-batches itself")
        return ForqStreamWriter(self.forq, schema)


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


@functools.cache
def _arrow_types() -> dict[str, Any]:
    """Each snapshot column's Arrow type, as :data:`SNAPSHOT_SCHEMA` declares it (timestamps: µs, UTC)."""
    import pyarrow as pa

    by_spark = {"STRING": pa.string(), "INT": pa.int32(), "BIGINT": pa.int64(),
                "TIMESTAMP": pa.timestamp("us", tz="UTC"), "MAP<STRING, STRING>": pa.map_(pa.string(), pa.string())}
    return {name: by_spark[_SPARK_TYPES[name]] for name in vocab.SNAPSHOT_COLUMNS}


def _snapshot_batch(columns: dict[str, list]):
    """A page of columns from the server as an Arrow batch of :data:`SNAPSHOT_SCHEMA`: ``status``
    codes become their labels, Unix ms become timestamps, ``attributes`` objects become maps. A
    column the server does not send (one from before it existed) is all nulls."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(columns["id"])
    arrays = []
    for name, arrow_type in _arrow_types().items():
        values = columns.get(name)
        if values is None:
            arrays.append(pa.nulls(n, arrow_type))
        elif name == "status":
            arrays.append(pc.take(pa.array(vocab.STATUS_LABELS), pa.array(values, pa.int8())))  # by status code
        elif pa.types.is_timestamp(arrow_type):
            arrays.append(pc.multiply(pa.array(values, pa.int64()), 1000).cast(arrow_type))
        else:
            arrays.append(pa.array(values, arrow_type))
    return pa.RecordBatch.from_arrays(arrays, names=list(vocab.SNAPSHOT_COLUMNS))


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

