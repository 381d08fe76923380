"""The ``forq`` data source on a real SparkSession (``local[2,2]``: two cores, failed tasks retried
once), against a live forqapp server. Slow: the session alone takes 10-25 s to start."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'forqapp[spark]')")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'forqapp[spark]')")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Java is not installed (apt-get install default-jre-headless)", allow_module_level=True)

from tests.test_spark_connector import ROOT, _free_port, start_live_forq, stop_live_forq  # noqa: E402


@pytest.fixture(scope="module")
def live_forq(tmp_path_factory):
    sqs_port = _free_port()  # the same server also speaks SQS (issue 17): one server for every face
    forq, proc, log = start_live_forq(tmp_path_factory.mktemp("forq-spark-it"),
                                      {"FORQ_SQS_ADDR": f"127.0.0.1:{sqs_port}"})
    forq.sqs_url = f"http://127.0.0.1:{sqs_port}"
    yield forq
    stop_live_forq(proc, log)


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession

    from forqapp.spark import register

    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("forqapp-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def _contents(spark, n: int, partitions: int = 2):
    return spark.range(0, n, 1, partitions).selectExpr("concat('m-', id) AS content")


def test_round_trip_10k(spark, live_forq):
    _contents(spark, 10_000).write.format("forq").options(**live_forq.options("rt", batchSize=500)) \
        .mode("append").save()
    assert live_forq.count("rt") == 10_000 and live_forq.staged_rows("rt") == 0
    df = spark.read.format("forq").options(**live_forq.options("rt", numPartitions=4)).load()
    assert df.count() == 10_000
    assert df.select("content").distinct().count() == 10_000
    assert df.select("id").distinct().count() == 10_000
    assert {r.status for r in df.select("status").distinct().collect()} == {"ready"}


def test_task_failure_mid_partition_leaves_no_duplicates(spark, live_forq):
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    @udf("string")
    def flaky(i):
        ctx = TaskContext.get()
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and i == 3000:
            return "x" * 300_000  # over the size limit: this attempt fails after staging 3000 rows
        return f"m-{i}"

    df = spark.range(0, 10_000, 1, 2).select(flaky("id").alias("content"))
    df.write.format("forq").options(**live_forq.options("tf", batchSize=100)).mode("append").save()
    rows = live_forq.sql("SELECT content FROM messages WHERE queue = 'tf'")
    assert len(rows) == 10_000
    assert len({r[0] for r in rows}) == 10_000
    assert live_forq.staged_rows("tf") == 0


def test_aborted_job_publishes_nothing(spark, live_forq):
    from pyspark.sql.functions import udf

    @udf("string")
    def broken(i):
        return "x" * 300_000 if i == 9_000 else f"m-{i}"  # fails every attempt of partition 1

    df = spark.range(0, 10_000, 1, 2).select(broken("id").alias("content"))
    with pytest.raises(Exception, match="bad_request.body.content.exceeds_limit"):
        df.write.format("forq").options(**live_forq.options("ab", batchSize=100)).mode("append").save()
    assert live_forq.count("ab") == 0  # nothing published
    # Partition 1's attempts discarded their own rows; partition 0's, when it finished before
    # the job failed, were discarded by the job's abort. (If the abort killed it mid-write, its
    # rows stay staged - invisible - until the cleanup job deletes them.)
    staged = live_forq.sql("SELECT token, COUNT(*) FROM forq_staged WHERE queue = 'ab' GROUP BY 1")
    assert all("-0-" in token for token, _ in staged), staged


@pytest.mark.parametrize("delivery", ["exactlyOnce", "atLeastOnce"])
def test_write_priority_and_attributes_then_read_them(spark, live_forq, delivery):
    queue = f"pa-{delivery}"
    df = spark.range(0, 1000, 1, 2).selectExpr(
        "concat('m-', id) AS content",
        "CAST(id % 21 - 10 AS INT) AS priority",  # -10..10
        "IF(id % 10 = 0, NULL, map('n', CAST(id AS STRING), 'parity', IF(id % 2 = 0, 'even', 'odd'))) AS attributes",
    )
    df.write.format("forq").options(**live_forq.options(queue, batchSize=300, delivery=delivery)) \
        .mode("append").save()
    assert live_forq.count(queue) == 1000
    assert live_forq.sql(f"SELECT MIN(priority), MAX(priority) FROM messages WHERE queue = '{queue}'") == [(-10, 10)]

    read = spark.read.format("forq").options(**live_forq.options(queue, numPartitions=3)).load()
    types = dict(read.dtypes)
    assert [types[c] for c in ("priority", "attributes", "dedup_id", "sequence", "first_received_at",
                               "last_error")] == ["int", "map<string,string>", "string", "bigint", "timestamp",
                                                  "string"]
    assert read.filter("attributes['parity'] = 'even'").count() == 400  # id % 10 = 0 has none
    assert read.filter("attributes IS NULL").count() == 100
    assert {r.priority: r["count"] for r in read.groupBy("priority").count().collect()} == {
        p: len([i for i in range(1000) if i % 21 - 10 == p]) for p in range(-10, 11)}
    mismatched = read.filter("attributes IS NOT NULL AND concat('m-', attributes['n']) != content").count()
    assert mismatched == 0  # each row's attributes came with it
    ordered = read.select("sequence").orderBy("sequence").collect()
    assert [r.sequence for r in ordered] == list(range(ordered[0].sequence, ordered[0].sequence + 1000))
    assert read.filter("first_received_at IS NOT NULL OR last_error IS NOT NULL OR dedup_id IS NOT NULL").count() == 0


def test_write_a_group_column_then_read_it_in_a_snapshot_and_a_stream(spark, live_forq, tmp_path):
    """Message groups through Spark: the writer's group column, the snapshot's, the stream's."""
    queue = "groups"
    df = spark.range(0, 300, 1, 2).selectExpr(
        "concat('m-', id) AS content", "IF(id % 3 = 0, NULL, concat('tenant-', id % 3)) AS `group`")
    df.write.format("forq").options(**live_forq.options(queue, batchSize=100)).mode("append").save()
    assert live_forq.sql(f"SELECT message_group, COUNT(*) FROM messages WHERE queue = '{queue}' "
                         "GROUP BY message_group ORDER BY message_group") == [("", 100), ("tenant-1", 100),
                                                                              ("tenant-2", 100)]
    read = spark.read.format("forq").options(**live_forq.options(queue)).load()
    assert dict(read.dtypes)["group"] == "string"
    assert {r["group"]: r["count"] for r in read.groupBy("group").count().collect()} == {
        None: 100, "tenant-1": 100, "tenant-2": 100}
    stream = spark.readStream.format("forq").options(**live_forq.options(queue, maxMessagesPerBatch=1000)).load()
    query = stream.select("content", "group").writeStream.format("memory").queryName("grouped") \
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    query.awaitTermination(120)
    rows = spark.sql("SELECT content, `group` FROM grouped").collect()
    assert len(rows) == 300 and all((r["group"] is None) == (int(r.content[2:]) % 3 == 0) for r in rows)


def test_other_save_modes_are_refused(spark, live_forq):
    df = _contents(spark, 10)
    with pytest.raises(Exception, match="only appends"):
        df.write.format("forq").options(**live_forq.options("modes")).mode("overwrite").save()
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        df.write.format("forq").options(**live_forq.options("modes")).mode("error").save()
    assert live_forq.count("modes") == 0


def test_snapshot_counts_for_a_queue_and_its_dlq(spark, live_forq):
    _contents(spark, 1234).write.format("forq").options(**live_forq.options("orders")).mode("append").save()
    live_forq.add_dead("orders-dlq", 40, "max_attempts_reached")
    live_forq.sql("UPDATE messages SET failure_reason = 'message_expired' WHERE queue = 'orders-dlq' "
                  "AND content IN ('dead-1', 'dead-2', 'dead-3')")
    read = spark.read.format("forq")
    assert read.options(**live_forq.options("orders", numPartitions=3)).load().count() == 1234
    dlq = read.options(**live_forq.options("orders-dlq")).load()
    by_reason = {r.failure_reason: r["count"] for r in dlq.groupBy("failure_reason").count().collect()}
    assert by_reason == {"max_attempts_reached": 37, "message_expired": 3}
    assert live_forq.count("orders") == 1234  # still there: a snapshot takes nothing


def test_a_boto3_message_is_read_by_a_spark_snapshot(spark, live_forq):
    """Issue 17: a message sent with boto3 through the SQS listener is a row of ``spark.read``
    (on a queue of 80 characters, SQS's and forqapp's longest name)."""
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config

    sqs = boto3.client("sqs", endpoint_url=live_forq.sqs_url, region_name="eu-west-3",
                       aws_access_key_id="forq-root", aws_secret_access_key=live_forq.api_key,
                       config=Config(retries={"max_attempts": 5, "mode": "standard"}))  # while the listener starts
    name = "from-boto3-" + "s" * 69
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    attributes = {"origin": {"DataType": "String", "StringValue": "boto3"}}
    sent = [sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)["MessageId"]
            for body in ("hello from boto3", "é and 😀 too")]
    rows = spark.read.format("forq").options(**live_forq.options(name)).load() \
        .select("id", "content", "attributes", "status", "attempts").orderBy("id").collect()
    # (the SQS face keeps the sender's access key id among the attributes, as AWS.SenderId)
    kept = {"origin": "boto3", "AWS.SenderId": "forq-root"}
    assert [(r.id, r.content, r.attributes, r.status, r.attempts) for r in rows] == [
        (sent[0], "hello from boto3", kept, "ready", 0),
        (sent[1], "é and 😀 too", kept, "ready", 0),
    ]
    # A snapshot takes nothing: both are still there for an SQS consumer.
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["MessageId"] for m in got) == sent


def _drain(spark, live_forq, queue, sink, checkpoint, per_batch=20, fail=None):
    """Run a stream over ``queue`` into ``sink`` (foreachBatch) until the queue is empty."""
    stream = spark.readStream.format("forq").options(
        **live_forq.options(queue, maxMessagesPerBatch=per_batch, waitSeconds=0.2)).load()
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)) \
        .trigger(processingTime="200 milliseconds").start()
    return query


def test_streaming_acks_only_after_commit(spark, live_forq, tmp_path):
    live_forq.send_batch("sa", [{"content": f"m{i}", "priority": i % 3, "attributes": {"i": str(i)}}
                                for i in range(50)])
    seen, problems = [], []

    def sink(batch_df, batch_id):
        rows = batch_df.collect()
        for r in rows:
            status = live_forq.sql("SELECT status FROM messages WHERE id = ?", (r.id,))
            if status != [(1,)]:
                problems.append((r.id, status))  # must still be leased (not acked) while sinking
            i = int(r.content[1:])
            if (r.priority, r.attributes, r.status) != (i % 3, {"i": str(i)}, "processing") \
                    or r.sequence is None or r.first_received_at is None or r.process_after <= r.first_received_at:
                problems.append((r.id, "columns", r))
        seen.extend(r.content for r in rows)

    query = _drain(spark, live_forq, "sa", sink, tmp_path / "cp")
    try:
        deadline = time.monotonic() + 90
        while (len(seen) < 50 or live_forq.count("sa")) and time.monotonic() < deadline:
            time.sleep(0.2)
        # every message seen, and acked - the last batch too - while the query still runs
        assert sorted(seen) == sorted(f"m{i}" for i in range(50))
        assert live_forq.count("sa") == 0
        assert problems == []
    finally:
        query.stop()


def test_sink_failure_and_restart_lose_nothing(spark, live_forq, tmp_path):
    live_forq.send_batch("sf", [{"content": f"m{i}"} for i in range(60)])
    done: list[str] = []
    batches = {"n": 0}

    def failing_sink(batch_df, batch_id):
        rows = batch_df.collect()
        if rows:
            batches["n"] += 1
            if batches["n"] == 2:
                raise RuntimeError("sink is down")
        done.extend(r.content for r in rows)

    query = _drain(spark, live_forq, "sf", failing_sink, tmp_path / "cp")
    with pytest.raises(Exception, match="sink is down"):
        query.awaitTermination(120)
    assert 0 < len(done) < 60
    assert live_forq.count("sf") == 60 - len(done)  # committed batches acked, the failed one not

    restarted = _drain(spark, live_forq, "sf", lambda df, i: done.extend(r.content for r in df.collect()),
                       tmp_path / "cp")
    try:
        deadline = time.monotonic() + 90
        while (len(set(done)) < 60 or live_forq.count("sf")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert set(done) == {f"m{i}" for i in range(60)}
        assert live_forq.count("sf") == 0
    finally:
        restarted.stop()




def test_example_pipelines(spark, live_forq, tmp_path, capsys):
    from forqapp.spark.examples import bulk_load, dlq_report

    csv = tmp_path / "in.csv"
    csv.write_text('content,customer\nhello,1\nworld,2\n"with, comma",3\n')
    common = ["--url", live_forq.url, "--api-key", live_forq.api_key]
    assert bulk_load.main([*common, "--queue", "loaded", str(csv)]) == 0
    assert sorted(r[0] for r in live_forq.sql("SELECT content FROM messages WHERE queue = 'loaded'")) == [
        "hello", "with, comma", "world"]
    assert bulk_load.main([*common, "--queue", "loaded-rich", "--priority-column", "customer",
                           "--attributes", "customer", str(csv)]) == 0
    assert sorted(live_forq.sql("SELECT content, priority, attributes FROM messages WHERE queue = 'loaded-rich'")) == [
        ("hello", 1, '{"customer":"1"}'), ("with, comma", 3, '{"customer":"3"}'), ("world", 2, '{"customer":"2"}')]
    live_forq.add_dead("report-dlq", 25)
    out = tmp_path / "report"
    assert dlq_report.main([*common, "--queue", "report-dlq", "--out", str(out)]) == 0
    assert (out / "dlq_report.png").stat().st_size > 1000
    by_reason = spark.read.parquet(str(out / "by_reason.parquet")).collect()
    assert [(r.failure_reason, r.messages) for r in by_reason] == [("max_attempts_reached", 25)]
    assert "report-dlq: 25 messages" in capsys.readouterr().out


def test_the_spark_page_pipeline_runs_as_it_is(spark, live_forq, tmp_path, monkeypatch):
    """docs/how-to/spark.md's pipeline.py, as printed, with only its URL and its /data folder
    pointed at this test's server and folder; then its two streaming queries' output is checked."""
    import re

    from tests.test_docs import python_blocks

    text = (ROOT / "docs" / "how-to" / "spark.md").read_text()
    block = next(b for b in python_blocks(text) if b.startswith("# pipeline.py"))
    data = tmp_path / "data"
    (data / "inbox").mkdir(parents=True)
    (data / "inbox" / "a.txt").write_text("x\ny\nx\n")
    code = block.replace("http://forq.internal:8080", live_forq.url).replace('"/data/', f'"{data}/')
    assert "forq.internal" not in code and not re.search(r'"/data', code)
    monkeypatch.setenv("FORQ_AUTH_SECRET", live_forq.api_key)
    exec(compile(code, "pipeline.py", "exec"), {"__name__": "pipeline"})  # noqa: S102 - the docs block, run as printed
    try:
        deadline = time.monotonic() + 120
        while sorted(r[0] for r in live_forq.sql("SELECT content FROM messages WHERE queue = 'counts'")) != [
                "x: 2", "y: 1"]:
            assert time.monotonic() < deadline and all(q.exception() is None for q in spark.streams.active)
            time.sleep(0.2)
        while live_forq.sql("SELECT COUNT(*) FROM messages WHERE queue = 'emails' AND content IN ('x', 'y')") != [(3,)]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        for query in spark.streams.active:
            query.stop()
    assert live_forq.count("emails") == 5  # the two batch writes' "hello", and the file's 3 lines


def test_example_pipelines_say_an_error_in_one_line(spark, live_forq, tmp_path, capsys, monkeypatch):
    from forqapp.spark.examples import _session, bulk_load, dlq_report

    monkeypatch.delenv("FORQ_SPARK_TRACEBACK", raising=False)
    csv = tmp_path / "in.csv"
    csv.write_text("content\nhello\n")
    wrong = ["--url", live_forq.url, "--api-key", "not-the-key-0123456789abcdef-0123456789"]
    assert _session.run(lambda: bulk_load.main([*wrong, "--queue", "nope", str(csv)])) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "HTTP 401 unauthorized" in err and "\n" not in err, err
    assert _session.run(lambda: dlq_report.main([*wrong, "--queue", "x-dlq", "--out", str(tmp_path / "r")])) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "HTTP 401 unauthorized" in err, err
    assert live_forq.count("nope") == 0


def _leased(live_forq, queue: str) -> int:
    """Deliveries of ``queue`` whose lease has not ended."""
    return live_forq.sql("SELECT COUNT(*) FROM messages WHERE queue = ? AND status = 1 AND process_after > ?",
                         (queue, int(time.time() * 1000)))[0][0]


def _restart_and_drain(spark, live_forq, queue: str, checkpoint) -> list[str]:
    """The query again, from ``checkpoint``, until the queue is empty: the ids its sink saw."""
    seen: list[str] = []
    stream = spark.readStream.format("forq").options(
        **live_forq.options(queue, maxMessagesPerBatch=10, waitSeconds=0.2)).load()
    query = stream.writeStream.foreachBatch(lambda df, batch_id: seen.extend(r.id for r in df.collect())) \
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    assert query.awaitTermination(120)
    return seen


def test_a_stopped_query_ends_its_leases_and_a_restart_delivers_the_uncommitted_batch(spark, live_forq, tmp_path):
    """query.stop() while a batch is in its sink: its leases end at once (the reader's stop()), not
    after the visibility timeout, so the messages can be received again; a restart from the
    checkpoint delivers what Spark had not committed, once. (A foreachBatch sink runs in the
    driver: query.stop() waits for it to return, and Spark may commit the batch first. Then the
    restart acks it, and the rest comes once.)

    The ending is best effort, as docs/how-to/spark.md says: Spark ends the source's process, and now and
    then (once in several CI runs) it had not happened. So the stop runs up to twice, on a fresh
    queue, and must end the leases in one of them; a first miss is printed. Nothing is ever lost."""
    misses = []
    for attempt in range(2):
        queue = f"stopq{attempt}"
        ids = live_forq.send_batch(queue, [{"content": f"m{i}"} for i in range(30)])
        entered = threading.Event()
        sunk: list[str] = []

        def slow_sink(batch_df, batch_id, entered=entered, sunk=sunk):
            rows = batch_df.collect()
            if rows:
                sunk.extend(r.id for r in rows)
                entered.set()
                time.sleep(3)

        query = _drain(spark, live_forq, queue, slow_sink, tmp_path / f"cp{attempt}", per_batch=10)
        try:
            assert entered.wait(60)
            assert _leased(live_forq, queue) == 10  # the batch in the sink is leased
        finally:
            query.stop()
        deadline = time.monotonic() + 30
        while _leased(live_forq, queue) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert live_forq.count(queue) == 30  # nothing acked yet
        ended = _leased(live_forq, queue) == 0
        committed = (tmp_path / f"cp{attempt}" / "commits" / "0").exists()
        seen = _restart_and_drain(spark, live_forq, queue, tmp_path / f"cp{attempt}")
        expected = sorted(set(ids) - set(sunk)) if committed else sorted(ids)
        assert sorted(seen) == expected and live_forq.count(queue) == 0  # each message once, none lost
        if ended:
            break
        misses.append(queue)
        print(f"\n{queue}: the stopped query's leases had not ended within 30 s (best effort); again")
    assert len(misses) < 2, misses


def test_a_query_stopped_after_spark_committed_its_batch_is_not_delivered_again(spark, live_forq, tmp_path):
    """Audit: Spark tells the source a batch is committed only when it plans the next one. A query
    stopped between the two (its trigger's wait) released the committed batch, and the restart,
    whose ack of it found the receipts gone, delivered all of it again. The stop now ends the leases
    keeping the receipts, and the restart acks the batch."""
    queue, checkpoint = "stopcommitted", tmp_path / "cp"
    live_forq.send_batch(queue, [{"content": f"m{i}"} for i in range(20)])
    first: list[str] = []
    stream = spark.readStream.format("forq").options(
        **live_forq.options(queue, maxMessagesPerBatch=20, waitSeconds=0.2)).load()
    query = stream.writeStream.foreachBatch(lambda df, batch_id: first.extend(r.id for r in df.collect())) \
        .option("checkpointLocation", str(checkpoint)).trigger(processingTime="60 seconds").start()
    try:
        deadline = time.monotonic() + 60
        while not (checkpoint / "commits" / "0").exists():
            assert time.monotonic() < deadline, "batch 0 never committed"
            time.sleep(0.1)
        assert len(first) == 20 and live_forq.count(queue) == 20  # committed by Spark, not acked yet
    finally:
        query.stop()
    again = _restart_and_drain(spark, live_forq, queue, checkpoint)
    assert again == [] and live_forq.count(queue) == 0  # acked on restart, delivered once


def test_available_now_takes_what_is_there_commits_its_last_batch_and_ends(spark, live_forq, tmp_path):
    live_forq.send_batch("avail", [{"content": f"m{i}"} for i in range(25)])
    seen: list[str] = []

    def sink(batch_df, batch_id):
        seen.extend(r.content for r in batch_df.collect())
        if len(seen) == 10:  # sent while the query runs: not its to take (the target was set at start)
            live_forq.send_batch("avail", [{"content": "late"}])

    stream = spark.readStream.format("forq").options(
        **live_forq.options("avail", maxMessagesPerBatch=10, waitSeconds=5)).load()
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp")) \
        .trigger(availableNow=True).start()
    assert query.awaitTermination(120)  # it ends on its own
    assert sorted(seen) == sorted(f"m{i}" for i in range(25))
    assert live_forq.count("avail", 1) == 0  # the last batch is acked too, none left leased
    assert [r[0] for r in live_forq.sql("SELECT content FROM messages WHERE queue = 'avail'")] == ["late"]


# --- the streaming sink: writeStream.format("forq") ------------------------------------------


def _drop_files(inbox, names, rows: int = 300) -> list[str]:
    """Files landing in ``inbox``, ``rows`` lines each (written aside, then moved in whole, as a
    file source needs); returns every line."""
    lines, start = [], time.time() - 60
    for k, name in enumerate(names):
        body = [f"{name}-{i}" for i in range(rows)]
        tmp = inbox.parent / f".{name}.tmp"
        tmp.write_text("\n".join(body) + "\n")
        os.utime(tmp, (start + k, start + k))  # one a second: the file source takes them in this order
        tmp.rename(inbox / f"{name}.txt")
        lines += body
    return lines


def _file_stream(spark, inbox, content):
    """The lines of the files in ``inbox``, one file per micro-batch, through ``content`` (a column)."""
    return spark.readStream.option("maxFilesPerTrigger", 1).text(str(inbox)).select(content.alias("content"))


def _sink(df, live_forq, queue: str, checkpoint, **extra):
    return df.writeStream.format("forq").options(**live_forq.options(queue, **extra)) \
        .option("checkpointLocation", str(checkpoint))


def test_file_drop_into_the_sink_exactly_once_through_a_task_failure_a_stop_and_a_replay(spark, live_forq, tmp_path):
    """Files → writeStream.format("forq") with a checkpoint: a task fails once after staging part of
    its batch (Spark retries it); the query is stopped mid-stream and restarted from its checkpoint;
    then Spark replays the last batch (its commit log entry lost, as in a crash between the sink's
    commit and Spark's): the queue holds each line once."""
    from pyspark import TaskContext
    from pyspark.sql.functions import col, udf

    from forqapp.spark.options import sink_id

    @udf("string")
    def flaky(line):
        ctx = TaskContext.get()
        if line == "f1-150" and ctx.attemptNumber() == 0:
            return "x" * 300_000  # over the size limit: this attempt fails after staging 100 rows
        return line

    queue, inbox, checkpoint = "drop", tmp_path / "inbox", tmp_path / "cp"
    inbox.mkdir()
    lines = _drop_files(inbox, ["f0", "f1", "f2", "f3", "f4"])
    query = _sink(_file_stream(spark, inbox, flaky(col("value"))), live_forq, queue, checkpoint, batchSize=50) \
        .trigger(processingTime="300 milliseconds").start()
    try:
        deadline = time.monotonic() + 120
        while not (checkpoint / "commits" / "1").exists():  # f0 and f1 (its task retried) are in
            assert query.exception() is None and time.monotonic() < deadline, query.exception()
            time.sleep(0.1)
    finally:
        query.stop()  # mid-stream: a batch may be in flight
    assert 600 <= live_forq.count(queue) < 1500

    lines += _drop_files(inbox, ["f5"])  # more files land while it is stopped
    restarted = _sink(_file_stream(spark, inbox, col("value")), live_forq, queue, checkpoint, batchSize=50) \
        .trigger(availableNow=True).start()
    assert restarted.awaitTermination(120)
    contents = [r[0] for r in live_forq.sql("SELECT content FROM messages WHERE queue = ?", (queue,))]
    assert sorted(contents) == sorted(lines)  # each line once

    # A crash after the sink published its last batch but before Spark wrote that batch's commit:
    # the restart runs the batch again, with the same id. It publishes nothing.
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)  # (Hadoop's checksum of it)
    replayed = _sink(_file_stream(spark, inbox, col("value")), live_forq, queue, checkpoint, batchSize=50) \
        .trigger(availableNow=True).start()
    assert replayed.awaitTermination(120)
    assert (checkpoint / "commits" / str(last)).exists()  # Spark ran it again
    assert live_forq.count(queue) == len(lines) and live_forq.staged_rows(queue) == 0
    # recorded under Spark's id of the query, which the checkpoint keeps
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    assert live_forq.sql("SELECT sink, batch_id FROM forq_sink_batches WHERE queue = ?", (queue,)) == [
        (sink_id(query_id), last)]


def test_an_aborted_micro_batch_leaves_nothing_and_the_restart_publishes_it_once(spark, live_forq, tmp_path):
    from pyspark.sql.functions import col, udf

    poison = tmp_path / "poisoned"
    poison.touch()

    @udf("string")
    def broken(line, poison=str(poison)):
        if line == "g1-299" and os.path.exists(poison):
            return "x" * 300_000  # every attempt fails while the file is there: the batch aborts
        return line

    queue, inbox, checkpoint = "aborts", tmp_path / "inbox", tmp_path / "cp"
    inbox.mkdir()
    lines = _drop_files(inbox, ["g0", "g1", "g2"])
    query = _sink(_file_stream(spark, inbox, broken(col("value"))), live_forq, queue, checkpoint, batchSize=50) \
        .trigger(availableNow=True).start()
    with pytest.raises(Exception, match="exceeds_limit"):
        query.awaitTermination(120)
    assert sorted(r[0] for r in live_forq.sql("SELECT content FROM messages WHERE queue = ?", (queue,))) == \
        sorted(lines[:300])  # g0's batch only: nothing of g1's is visible
    poison.unlink()
    restarted = _sink(_file_stream(spark, inbox, broken(col("value"))), live_forq, queue, checkpoint, batchSize=50) \
        .trigger(availableNow=True).start()
    assert restarted.awaitTermination(120)
    assert sorted(r[0] for r in live_forq.sql("SELECT content FROM messages WHERE queue = ?", (queue,))) == sorted(lines)


def test_update_mode_through_foreach_batch_exactly_once_across_a_stop_and_a_replay(spark, live_forq, tmp_path):
    """An aggregation in the "update" output mode (which Spark refuses for a Python data source's
    writeStream.format) through foreachBatch(forqapp.spark.foreach_batch(...)): each micro-batch's
    updated rows are enqueued once, through a stop, new files and a replayed batch."""
    from pyspark.sql.functions import col, substring

    from forqapp.spark import foreach_batch
    from forqapp.spark.options import sink_id

    queue, inbox, checkpoint = "updates", tmp_path / "inbox", tmp_path / "cp"
    inbox.mkdir()

    def start():
        counts = _file_stream(spark, inbox, substring(col("value"), 1, 2)).groupBy("content").count() \
            .selectExpr("concat(content, ':', CAST(count AS STRING)) AS content")
        return counts.writeStream.outputMode("update") \
            .foreachBatch(foreach_batch(**live_forq.options(queue, batchSize=20), checkpointLocation=str(checkpoint))) \
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()

    def contents():
        return sorted(r[0] for r in live_forq.sql("SELECT content FROM messages WHERE queue = ?", (queue,)))

    _drop_files(inbox, ["u0", "u1"], rows=50)
    query = start()
    query.awaitTermination(120)
    assert query.exception() is None and contents() == ["u0:50", "u1:50"]
    _drop_files(inbox, ["u0b", "u2"], rows=50)  # u0's count changes: update mode emits it again
    query = start()
    query.awaitTermination(120)
    assert contents() == ["u0:100", "u0:50", "u1:50", "u2:50"]

    # A crash after the publish and before Spark's commit log entry: the restart runs the last
    # batch again, with the same id. It publishes nothing.
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    query = start()
    query.awaitTermination(120)
    assert (checkpoint / "commits" / str(last)).exists()  # Spark ran it again
    assert contents() == ["u0:100", "u0:50", "u1:50", "u2:50"] and live_forq.staged_rows(queue) == 0
    assert live_forq.sql("SELECT sink, batch_id FROM forq_sink_batches WHERE queue = ?", (queue,)) == [
        (sink_id(None, str(checkpoint)), last)]


def test_the_sink_refuses_the_complete_output_mode_and_a_key_without_produce(spark, live_forq, tmp_path):
    stream = spark.readStream.format("rate").option("rowsPerSecond", 10).load()
    counts = stream.groupBy().count().selectExpr("CAST(count AS STRING) AS content")
    with pytest.raises(Exception, match='take the "append" output mode'):
        q = _sink(counts, live_forq, "modes-s", tmp_path / "cp1").outputMode("complete").start()
        q.awaitTermination(60)
    lines = stream.selectExpr("CAST(value AS STRING) AS content")
    with pytest.raises(Exception, match="checkpointLocation"):
        lines.writeStream.format("forq").options(**live_forq.options("modes-s")).start().awaitTermination(60)
    assert live_forq.count("modes-s") == 0


def test_the_file_drop_example_enqueues_each_line_once_across_runs(spark, live_forq, tmp_path, capsys):
    from forqapp.spark.examples import file_drop

    inbox, checkpoint = tmp_path / "inbox", tmp_path / "cp"
    inbox.mkdir()
    common = ["--url", live_forq.url, "--api-key", live_forq.api_key, "--queue", "landed", "--inbox", str(inbox),
              "--checkpoint", str(checkpoint), "--once", "--files-per-batch", "1"]
    lines = _drop_files(inbox, ["a", "b"], rows=20)
    assert file_drop.main(common) == 0
    lines += _drop_files(inbox, ["c"], rows=20)
    assert file_drop.main(common) == 0  # the second run takes only the new file
    assert sorted(r[0] for r in live_forq.sql("SELECT content FROM messages WHERE queue = 'landed'")) == sorted(lines)
    assert "landed: 20 lines" in capsys.readouterr().out
