"""The ``forq`` format's streaming write, ``df.writeStream.format("forq")``
(:class:`ForqStreamWriter`): exactly once per micro-batch. No Django, HTTP only (:mod:`.client`).

* ``delivery=exactlyOnce`` (the default): each task attempt stages its rows under a token of its
  own, as the batch writer does; ``commit(messages, batchId)`` publishes the batch's tokens in one
  transaction, and in that same transaction the server records that this query published batch
  ``batchId`` into the queue. A batch the query published before, or an earlier one, publishes
  nothing (Spark replays the last batch after a crash or a restart from the checkpoint: its rows
  are dropped). ``abort`` discards the staged rows; rows of attempts that never reported back stay
  invisible until the server's cleanup deletes them (after 24 hours).
* The server records a query's batches under Spark's id of the query, which Spark keeps in the
  checkpoint (the same across restarts from it, another for another checkpoint) and hands each
  task (the local property ``sql.streaming.queryId``): two queries writing one queue are two
  records. Where a task has no such id, the ``checkpointLocation`` option (which Spark passes to
  the sink), hashed, names the query, else its ``queryName``; with none of them the batch fails.
* ``delivery=atLeastOnce``: rows go straight to the queue as tasks write them; a retried task or a
  replayed batch sends them again.
"""

from __future__ import annotations

import logging

from pyspark.sql.datasource import DataSourceStreamArrowWriter

from .options import ForqOptionError
from .write import ForqCommitMessage, Stager, _task_token

logger = logging.getLogger("forqapp.spark")


def _local_property(name: str) -> str | None:
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return ctx.getLocalProperty(name) if ctx is not None else None
    except Exception:  # noqa: BLE001 - not in a task (a test): no property
        return None


class ForqStreamWriter(Stager, DataSourceStreamArrowWriter):
    """``df.writeStream.format("forq")``: a micro-batch's rows, published once when Spark commits it."""

    def _token(self) -> str:
        return _task_token(f"{self.job}-b{_local_property('streaming.sql.batchId') or 'x'}")

    def _query(self) -> str | None:
        return _local_property("sql.streaming.queryId")

    def _sink(self, messages) -> str:
        queries = {m.query for m in messages if isinstance(m, ForqCommitMessage)}
        sink = self.options.sink(queries.pop() if len(queries) == 1 else None)
        if sink is None:
            raise ForqOptionError(
                'format "forq" streaming writes with delivery=exactlyOnce need to know the query: set its '
                '.option("checkpointLocation", ...) (or set delivery=atLeastOnce)')
        return sink

    def commit(self, messages, batchId: int) -> None:  # noqa: N803 - Spark passes it by this name
        """Spark committed micro-batch ``batchId``: publish its rows, once."""
        if not self.options.exactly_once:
            return  # delivery=atLeastOnce: every row was visible as soon as it was sent
        self._publish_micro_batch(messages, lambda: self._sink(messages), batchId)

    def abort(self, messages, batchId: int) -> None:  # noqa: N803
        """The micro-batch failed: nothing of it was published; drop what its tasks staged."""
        self._discard(messages)
