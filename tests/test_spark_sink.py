"""The streaming sink's writer (``writeStream.format("forq")``, :class:`ForqStreamWriter`) without
Spark's JVM, against a live forqapp server: driven as Spark drives it (tasks' ``write``, then
``commit(messages, batchId)`` or ``abort``). tests/test_spark_integration.py runs it in Spark."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'forqapp[spark]')")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'forqapp[spark]')")

from forqapp.spark.client import ForqClientError  # noqa: E402
from forqapp.spark.options import ForqOptionError, sink_id  # noqa: E402
from forqapp.spark.sink import ForqStreamWriter  # noqa: E402
from forqapp.spark.source import ForqDataSource  # noqa: E402

from .test_keys_spark import make_key, scoped  # noqa: E402
from .test_spark_connector import SECRET, _batches, start_live_forq, stop_live_forq  # noqa: E402


@pytest.fixture(scope="module")
def live_forq(tmp_path_factory):
    forq, proc, log = start_live_forq(tmp_path_factory.mktemp("forq-spark-sink"))
    yield forq
    stop_live_forq(proc, log)


def _stream_writer(live_forq, queue: str, checkpoint: str | None = "/checkpoints/q1", **extra) -> ForqStreamWriter:
    from pyspark.sql.types import StringType, StructField, StructType

    if checkpoint is not None:
        extra["checkpointlocation"] = checkpoint  # (Spark passes it lower-cased)
    schema = StructType([StructField("content", StringType())])
    return ForqDataSource(live_forq.options(queue, **extra)).streamWriter(schema, overwrite=False)


def _contents(live_forq, queue: str) -> list[str]:
    return sorted(r[0] for r in live_forq.sql("SELECT content FROM messages WHERE queue = ?", (queue,)))


def test_a_batch_is_published_on_commit_once_and_a_replay_publishes_nothing(live_forq):
    w = _stream_writer(live_forq, "s1")
    parts = [w.write(_batches([f"b0-{p}-{i}" for i in range(50)])) for p in range(2)]
    assert live_forq.count("s1") == 0 and live_forq.staged_rows("s1") == 100  # invisible until commit
    w.commit(parts, 0)
    assert live_forq.count("s1") == 100 and live_forq.staged_rows("s1") == 0

    # The query restarts from its checkpoint and Spark replays batch 0 (it had not written its
    # commit log): a new writer, new tokens, the same rows; nothing is published again.
    again = _stream_writer(live_forq, "s1")
    replay = [again.write(_batches([f"b0-{p}-{i}" for i in range(50)])) for p in range(2)]
    again.commit(replay, 0)
    assert live_forq.count("s1") == 100 and live_forq.staged_rows("s1") == 0
    # ... and goes on with batch 1; another query (another checkpoint) into the same queue has its own batches.
    again.commit([again.write(_batches(["b1"]))], 1)
    other = _stream_writer(live_forq, "s1", "/checkpoints/q2")
    other.commit([other.write(_batches(["q2-b0"]))], 0)
    assert live_forq.count("s1") == 102
    recorded = live_forq.sql("SELECT sink, batch_id FROM forq_sink_batches WHERE queue = 's1' ORDER BY batch_id")
    # (Outside Spark a task has no query id: the checkpoint location names the query.)
    assert recorded == [(sink_id(None, "/checkpoints/q2"), 0), (sink_id(None, "/checkpoints/q1"), 1)]


def test_a_failed_task_and_an_aborted_batch_leave_nothing(live_forq):
    w = _stream_writer(live_forq, "s2", "/cp/s2", batchSize=10)
    with pytest.raises(ForqClientError, match="exceeds_limit"):
        w.write(_batches(["ok"] * 30 + ["x" * 300_000]))  # staged 30 rows, then failed: drops its own
    assert live_forq.staged_rows("s2") == 0
    done = w.write(_batches([f"m{i}" for i in range(20)]))
    w.abort([done, None], 3)  # Spark aborts batch 3: its other task failed
    assert live_forq.count("s2") == 0 and live_forq.staged_rows("s2") == 0
    # Spark runs batch 3 again (the query restarted): it is published, once.
    w.commit([w.write(_batches([f"m{i}" for i in range(20)]))], 3)
    assert _contents(live_forq, "s2") == sorted(f"m{i}" for i in range(20))


def test_an_empty_batch_records_nothing_and_at_least_once_writes_straight_through(live_forq):
    w = _stream_writer(live_forq, "s3", "/cp/s3")
    w.commit([w.write(_batches([])), None], 0)
    assert live_forq.sql("SELECT COUNT(*) FROM forq_sink_batches WHERE queue = 's3'") == [(0,)]
    w = _stream_writer(live_forq, "s3", None, delivery="atLeastOnce")  # no checkpoint needed
    w.write(_batches(["a", "b"]))
    assert live_forq.count("s3") == 2  # visible as soon as written; a replay would send them again
    w.commit([], 0)
    assert live_forq.count("s3") == 2


def test_options_and_modes_are_checked(live_forq):
    from pyspark.sql.types import StringType, StructField, StructType

    w = _stream_writer(live_forq, "s4", None)  # no checkpoint and no query id: nothing names the query
    with pytest.raises(ForqOptionError, match="checkpointLocation"):
        w.commit([w.write(_batches(["m"]))], 0)
    assert live_forq.count("s4") == 0
    schema = StructType([StructField("content", StringType())])
    with pytest.raises(ForqOptionError, match='take the "append" output mode.*use forqapp.spark.foreach_batch'):
        ForqDataSource(live_forq.options("s4", checkpointLocation="/cp")).streamWriter(schema, overwrite=True)
    with pytest.raises(ForqOptionError, match="dead-letter"):
        _stream_writer(live_forq, "s4-dlq")
    assert sink_id(None, "/cp/x/") == sink_id(None, "/cp/x") != sink_id(None, "/cp/y")
    assert sink_id("id-1", "/cp/x") == sink_id("id-1", "/cp/moved") != sink_id("id-2", "/cp/x")  # Spark's id first
    assert sink_id(None, None, "q") != sink_id(None, None, "r") and sink_id(None, None, None) is None
    assert len(sink_id(None, "s3a://bucket/" + "p" * 500) or "") <= 100
    # a checkpoint from spark.sql.streaming.checkpointLocation is not passed: the query's name is
    w = _stream_writer(live_forq, "s4", None, queryname="orders-in")
    w.commit([w.write(_batches(["m"]))], 0)
    assert live_forq.sql("SELECT sink FROM forq_sink_batches WHERE queue = 's4'") == [(sink_id(None, None, "orders-in"),)]


def test_a_key_needs_produce_and_a_refused_one_says_so(live_forq):
    produce = make_key(live_forq, "sink-writer", "sk-sink:produce")
    consume = make_key(live_forq, "sink-consumer", "sk-sink:consume")
    try:
        w = _stream_writer(scoped(live_forq, produce), "sk-sink")
        w.commit([w.write(_batches(["m"]))], 0)
        assert live_forq.count("sk-sink") == 1
        w = _stream_writer(scoped(live_forq, consume), "sk-sink", "/cp/other")
        with pytest.raises(ForqClientError, match="may not produce to queue 'sk-sink'.*forbidden.key_scope") as refused:
            w.write(_batches(["m"]))
        assert refused.value.status == 403
        w = _stream_writer(scoped(live_forq, "not-a-key-0123456789abcdef-0123456789"), "sk-sink")
        with pytest.raises(ForqClientError, match="API key was refused.*401"):
            w.write(_batches(["m"]))
    finally:
        live_forq.api_key = SECRET
    assert live_forq.count("sk-sink") == 1


def test_a_streaming_write_carries_the_group_column(live_forq):
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("content", StringType()), StructField("group", StringType())])
    w = ForqDataSource(live_forq.options("sg", checkpointlocation="/checkpoints/sg")).streamWriter(
        schema, overwrite=False)
    batch = pa.RecordBatch.from_pydict({"content": ["a", "b", "c"], "group": ["t1", None, "t2"]})
    w.commit([w.write(iter([batch]))], 0)
    assert live_forq.sql("SELECT content, message_group FROM messages WHERE queue = 'sg' ORDER BY content") == [
        ("a", "t1"), ("b", ""), ("c", "t2")]


def _batch_writer(live_forq, queue: str, **extra):
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("content", StringType())])
    return ForqDataSource(live_forq.options(queue, **extra)).writer(schema, overwrite=False)


def test_a_batch_write_with_a_batch_id_publishes_that_micro_batch_once(live_forq):
    """foreachBatch's write (forqapp.spark.foreach_batch): df.write with the query's checkpoint and
    Spark's batch id publishes as the streaming sink does, once per batch id of that query."""
    w = _batch_writer(live_forq, "fb1", checkpointLocation="/cp/fb1", batchId="0")
    parts = [w.write(_batches([f"b0-{p}-{i}" for i in range(30)])) for p in range(2)]
    assert live_forq.count("fb1") == 0  # staged until the job commits
    w.commit(parts)
    assert live_forq.count("fb1") == 60
    again = _batch_writer(live_forq, "fb1", checkpointLocation="/cp/fb1", batchId="0")  # Spark runs batch 0 again
    again.commit([again.write(_batches([f"b0-{p}-{i}" for i in range(30)])) for p in range(2)])
    assert live_forq.count("fb1") == 60 and live_forq.staged_rows("fb1") == 0
    empty = _batch_writer(live_forq, "fb1", checkpointLocation="/cp/fb1", batchId="1")
    empty.commit([empty.write(_batches([]))])  # an empty batch records nothing: batch 1 may still come
    nxt = _batch_writer(live_forq, "fb1", checkpointLocation="/cp/fb1", batchId="1")
    nxt.commit([nxt.write(_batches(["b1"]))])
    assert live_forq.count("fb1") == 61
    assert live_forq.sql("SELECT sink, batch_id FROM forq_sink_batches WHERE queue = 'fb1'") == [
        (sink_id(None, "/cp/fb1"), 1)]
    plain = _batch_writer(live_forq, "fb1")  # without batchId: a batch job, published every time
    plain.commit([plain.write(_batches(["job"]))])
    assert live_forq.count("fb1") == 62


def test_a_batch_id_needs_the_query_and_belongs_to_foreach_batch(live_forq):
    from pyspark.sql.types import StringType, StructField, StructType

    from forqapp.spark import foreach_batch

    with pytest.raises(ForqOptionError, match="checkpointLocation"):
        _batch_writer(live_forq, "fb2", batchId="0")
    with pytest.raises(ForqOptionError, match="must be an integer"):
        _batch_writer(live_forq, "fb2", checkpointLocation="/cp", batchId="x")
    schema = StructType([StructField("content", StringType())])
    with pytest.raises(ForqOptionError, match="foreachBatch"):
        ForqDataSource(live_forq.options("fb2", checkpointLocation="/cp", batchId="0")).streamWriter(schema, False)
    with pytest.raises(ForqOptionError, match="checkpointLocation"):
        foreach_batch(**live_forq.options("fb2"))
    with pytest.raises(ForqOptionError, match="sets the option 'batchId' itself"):
        foreach_batch(**live_forq.options("fb2"), checkpointLocation="/cp", batchId=3)
    with pytest.raises(ForqOptionError, match="unknown forq option 'queu'"):
        foreach_batch(url=live_forq.url, apiKey="k", queu="fb2", checkpointLocation="/cp")
    assert callable(foreach_batch(**live_forq.options("fb2"), delivery="atLeastOnce"))  # needs no query
    assert live_forq.count("fb2") == 0
