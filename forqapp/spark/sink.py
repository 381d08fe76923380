"""The ``forq`` format's streaming write, ``df.writeStream.format("forq")``
(:class:`ForqStreamWriter`): exactly once per micro-batch. No Django, HTTP only (:mod:`.client`).

* ``delivery=exactlyOnce`` (the default): each task attempt stages its rows under a token of its
  own, as the batch writer does; ``commit(messages, batchId)`` publishes the batch's tokens in one
  transaction, and in that same transaction the server records that this query published batch
  ``batchId`` into the queue. A batch the query published before, or an earlier one, publishes
  nothing (Spark replays the last batch after a crash or a restart from the checkpoint: its rows
  are dropped). ``abort`` discards the staged rows; rows of attempts that never reported back stay
  invisible until the server's cleanup deletes them (after 24 hours).
* The query is named by its ``checkpointLocation`` option (Spark passes it to the sink), hashed:
  two queries writing one queue have two checkpoints, so two names, and each keeps its own last
  batch. A checkpoint set through ``spark.sql.streaming.checkpointLocation`` is not passed to
  sinks; Spark keeps such a query's checkpoint in ``<that folder>/<queryName>``, so its
  ``queryName`` (which Spark does pass) names it. With neither, ``exactlyOnce`` is refused: a
  restart could not be told from another query.
* ``delivery=atLeastOnce``: rows go straight to the queue as tasks write them; a retried task or a
  replayed batch sends them again.
"""

from __future__ import annotations

import hashlib
import logging

from pyspark.sql.datasource import DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from .options import ForqOptionError, ForqOptions
from .write import ForqCommitMessage, Stager, _task_token

logger = logging.getLogger("forqapp.spark")

# TODO(groups): the ``group`` column, once the core has message groups, goes through the shared
# write path (write.py: WRITE_OPTIONAL and _WRITE_RULES); nothing here needs to change for it.


def sink_id(checkpoint_location: str | None, query_name: str | None = None) -> str | None:
    """The name the server records a query's batches under: a hash of its checkpoint location, else
    of its query name (a token: ``[A-Za-z0-9._-]``, 100 characters at most, whatever the path
    holds); None with neither."""
    if checkpoint_location:
        return "cp-" + hashlib.sha256(checkpoint_location.rstrip("/").encode()).hexdigest()[:40]
    if query_name:
        return "qn-" + hashlib.sha256(query_name.encode()).hexdigest()[:40]
    return None


def _batch_id() -> str:
    """The micro-batch a task writes (Spark's local property), for a readable token."""
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return (ctx and ctx.getLocalProperty("streaming.sql.batchId")) or "x"
    except Exception:  # noqa: BLE001 - only a name: the token is unique without it
        return "x"


class ForqStreamWriter(Stager, DataSourceStreamArrowWriter):
    """``df.writeStream.format("forq")``: a micro-batch's rows, published once when Spark commits it."""

    def __init__(self, options: ForqOptions, schema: StructType):
        super().__init__(options, schema)
        self.sink = sink_id(options.checkpoint_location, options.query_name)
        if options.exactly_once and self.sink is None:
            raise ForqOptionError(
                'format "forq" streaming writes with delivery=exactlyOnce need the query\'s '
                '.option("checkpointLocation", ...) (or a .queryName(...) with spark.sql.streaming.checkpointLocation): '
                "it names the query, so that a batch replayed after a restart is not published twice "
                "(or set delivery=atLeastOnce)")

    def _token(self) -> str:
        return _task_token(f"{self.job}-b{_batch_id()}")

    def commit(self, messages, batchId: int) -> None:  # noqa: N803 - Spark passes it by this name
        """Spark committed micro-batch ``batchId``: publish its rows, once."""
        if not self.options.exactly_once:
            return  # delivery=atLeastOnce: every row was visible as soon as it was sent
        if not any(isinstance(m, ForqCommitMessage) and m.count for m in messages):
            self._discard(messages)  # tokens with no rows: nothing to publish, nothing to record
            return
        sink = self.sink
        assert sink is not None  # (checked in __init__ for exactlyOnce)
        published = self._publish(messages, lambda client, staged: client.publish_batch(
            staged, self.options.queue, sink, batchId))
        if published is None:
            logger.info("forq: batch %d of query %s was published before: nothing published again",
                        batchId, sink)
        else:
            logger.info("forq: batch %d: published %d messages to %s", batchId, published, self.options.queue)

    def abort(self, messages, batchId: int) -> None:  # noqa: N803
        """The micro-batch failed: nothing of it was published; drop what its tasks staged."""
        self._discard(messages)
