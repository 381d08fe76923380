"""The ``forq`` Spark connector's classes, without Spark's JVM, against a live forqapp API server
(``forq_serve`` in a subprocess, on a file SQLite database of its own)."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'forqapp[spark]')")
pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'forqapp[spark]')")

from forqapp.spark.client import ForqClient, ForqClientError  # noqa: E402
from forqapp.spark.options import ForqOptionError, ForqOptions  # noqa: E402
from forqapp.spark.source import (  # noqa: E402
    ForqDataSource,
    ForqSnapshotReader,
    ForqStreamReader,
    ForqWriter,
    split_id_range,
)

ROOT = Path(__file__).resolve().parent.parent
SECRET = "spark-test-secret-0123456789abcdef-0123"  # noqa: S105 - a test server's key


class LiveForq:
    def __init__(self, url: str, db_path: Path):
        self.url = url
        self.db_path = db_path
        self.api_key = SECRET

    def client(self) -> ForqClient:
        """A client of the server: close it (``with``), or its socket is left open."""
        return ForqClient(self.url, self.api_key)

    def send_batch(self, queue: str, items: list[dict]) -> list[str]:
        with self.client() as c:
            return c.send_batch(queue, items)

    def options(self, queue: str, **extra) -> dict:
        return {"url": self.url, "apiKey": self.api_key, "queue": queue, **{k: str(v) for k, v in extra.items()}}

    def sql(self, query: str, params=()) -> list:
        with sqlite3.connect(self.db_path, timeout=30) as conn:
            return conn.execute(query, params).fetchall()

    def count(self, queue: str, status: int | None = None) -> int:
        if status is None:
            return self.sql("SELECT COUNT(*) FROM messages WHERE queue = ?", (queue,))[0][0]
        return self.sql("SELECT COUNT(*) FROM messages WHERE queue = ? AND status = ?", (queue, status))[0][0]

    def staged_rows(self, queue: str) -> int:
        return self.sql("SELECT COUNT(*) FROM forq_staged WHERE queue = ?", (queue,))[0][0]

    def add_dead(self, dlq: str, n: int, reason: str = "max_attempts_reached") -> None:
        """Put ``n`` messages straight into a DLQ (as the failed job would)."""
        import uuid

        now = int(time.time() * 1000)
        rows = [(str(uuid.UUID(int=(now << 80) | (7 << 76) | (i << 20) | (2 << 62) >> 0)), dlq, f"dead-{i}",
                 now, now, now, now + 3_600_000, reason) for i in range(n)]
        with sqlite3.connect(self.db_path, timeout=30) as conn:
            conn.executemany(
                """INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                   processing_started_at, failure_reason, received_at, updated_at, expires_after)
                   VALUES (?, ?, 1, ?, 0, 0, ?, NULL, ?, ?, ?, ?)""",
                [(r[0], r[1], r[2], r[3], r[7], r[4], r[5], r[6]) for r in rows],
            )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_live_forq(directory: Path):
    """Migrate a file database and serve the API on a free port; returns (LiveForq, process)."""
    db_path = directory / "forq.sqlite3"
    port = _free_port()
    # Its own SQLite file, read directly below, even in the PostgreSQL run of the suite.
    base = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env = dict(base, FORQ_AUTH_SECRET=SECRET, FORQ_DB_PATH=str(db_path),
               DJANGO_SETTINGS_MODULE="project.settings", FORQ_API_ADDR=f"127.0.0.1:{port}",
               FORQ_UI_ENABLED="false", PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    if (ROOT / "forqapp/management/commands/forq_serve.py").exists():
        command = [sys.executable, "manage.py", "forq_serve", "--no-ui"]
    else:
        command = [sys.executable, "-m", "granian", "--interface", "asgi", "--factory", "--host", "127.0.0.1",
                   "--port", str(port), "--loop", "uvloop", "forqapp.api.asgi:api_application"]
    log = open(directory / "server.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url + "/healthcheck", timeout=1) as response:  # noqa: S310
                if response.status == 204:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_live_forq(proc, log)
            raise RuntimeError("forqapp server did not start: " + (directory / "server.log").read_text()[-2000:])
        time.sleep(0.1)
    return LiveForq(url, db_path), proc, log


def stop_live_forq(proc, log) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture(scope="module")
def live_forq(tmp_path_factory):
    forq, proc, log = start_live_forq(tmp_path_factory.mktemp("forq-spark"))
    yield forq
    stop_live_forq(proc, log)


def _batches(contents: list[str], size: int = 300):
    for i in range(0, len(contents), size):
        yield pa.RecordBatch.from_pydict({"content": contents[i:i + size]})


def _writer(live_forq, queue: str, **extra) -> ForqWriter:
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("content", StringType())])
    return ForqDataSource(live_forq.options(queue, **extra)).writer(schema, overwrite=False)


# --- options ----------------------------------------------------------------------------------


def test_options_parse_case_insensitively():
    opts = ForqOptions.parse({"URL": "http://h:1", "apikey": "k", "Queue": "q", "BATCHSIZE": "42",
                              "maxmessagesperbatch": "7"})
    assert (opts.url, opts.api_key, opts.queue, opts.batch_size, opts.max_messages_per_batch) == (
        "http://h:1", "k", "q", 42, 7)
    assert opts.num_partitions is None


@pytest.mark.parametrize(("options", "message"), [
    ({"apiKey": "k", "queue": "q"}, "'url' is required"),
    ({"url": "ftp://h", "apiKey": "k", "queue": "q"}, "http://"),
    ({"url": "http://h", "queue": "q"}, "'apiKey' is required"),
    ({"url": "http://h", "apiKey": "k"}, "'queue' is required"),
    ({"url": "http://h", "apiKey": "k", "queue": "no spaces"}, "'queue' must match"),
    ({"url": "http://h", "apiKey": "k", "queue": "q", "batchSize": "many"}, "'batchSize' must be an integer"),
    ({"url": "http://h", "apiKey": "k", "queue": "q", "batchSize": "0"}, "'batchSize' must be from 1"),
    ({"url": "http://h", "apiKey": "k", "queue": "q", "numPartitions": "-1"}, "'numPartitions'"),
    ({"url": "http://h", "apiKey": "k", "queue": "q", "waitSeconds": "x"}, "'waitSeconds' must be a number"),
])
def test_bad_options_are_refused_clearly(options, message):
    with pytest.raises(ForqOptionError, match=message):
        ForqOptions.parse(options)


def test_overwrite_and_bad_schemas_are_refused(live_forq):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    source = ForqDataSource(live_forq.options("w"))
    good = StructType([StructField("content", StringType())])
    with pytest.raises(ForqOptionError, match="only appends"):
        source.writer(good, overwrite=True)
    with pytest.raises(ForqOptionError, match='string column "content"'):
        source.writer(StructType([StructField("body", StringType())]), overwrite=False)
    with pytest.raises(ForqOptionError, match='"processAfter" must be an integer'):
        source.writer(StructType([StructField("content", StringType()), StructField("processAfter", StringType())]),
                      overwrite=False)
    assert source.writer(StructType([StructField("content", StringType()), StructField("processAfter", LongType())]),
                         overwrite=False).has_process_after
    with pytest.raises(ForqOptionError, match="dead-letter"):
        ForqDataSource(live_forq.options("w-dlq")).writer(good, overwrite=False)


def test_split_id_range_covers_everything_once():
    import uuid

    ids = sorted(str(uuid.UUID(int=(1_700_000_000_000 + i * 997) << 80 | 0x7000 << 64 | i)) for i in range(500))
    for parts in (1, 2, 3, 7, 64):
        ranges = split_id_range(ids[0], ids[-1], parts)
        assert ranges[0].after == "" and ranges[-1].upto == ids[-1]
        hits = [sum(1 for r in ranges if r.after < i <= r.upto) for i in ids]
        assert hits == [1] * len(ids)
    assert len(split_id_range(ids[0], ids[0], 8)) == 1


# --- bulk API ---------------------------------------------------------------------------------


def test_bulk_endpoints_validate_input(live_forq):
    with live_forq.client() as c:
        with pytest.raises(ForqClientError) as exc:
            c.request("POST", "/api/v1/queues/v/staged/bad%21token", {"messages": []})
        assert (exc.value.status, exc.value.code) == (400, "bad_request.body.invalid")
        with pytest.raises(ForqClientError) as exc:
            c.send_batch("v", [{"content": "ok"}] * 10_001)
        assert exc.value.code in ("bad_request.body.invalid", "bad_request.body.content.exceeds_limit")
        with pytest.raises(ForqClientError) as exc:
            c.send_batch("v", [{"content": "ok"}, {"content": None}])
        assert exc.value.code == "bad_request.body.invalid"
        assert live_forq.count("v") == 0  # one bad item refuses the whole batch
        with pytest.raises(ForqClientError) as exc:
            c.send_batch("v", [{"content": "ok", "processAfter": 1}])
        assert exc.value.code == "bad_request.body.processAfter.in_past"
        with pytest.raises(ForqClientError) as exc:
            c.stage("v-dlq", "t1", [{"content": "x"}])
        assert exc.value.code == "bad_request.queue.produce_to_dlq"
        for body in ({"max": 0}, {"max": "5"}, {"max": 5, "wait": 31}, {"max": 5, "wait": True}):
            with pytest.raises(ForqClientError) as exc:
                c.request("POST", "/api/v1/queues/v/messages/claim", body)
            assert exc.value.code == "bad_request.body.invalid"
        with pytest.raises(ForqClientError) as exc:
            c.ack("v", [("not-a-uuid", "1")])
        assert exc.value.code == "bad_request.messageId.invalid"
        with pytest.raises(ForqClientError) as exc:
            c.request("GET", "/api/v1/queues/v/snapshot?limit=0")
        assert exc.value.code == "bad_request.body.invalid"
        with ForqClient(live_forq.url, "wrong-key-0123456789abcdef0123456789") as wrong, \
                pytest.raises(ForqClientError) as exc:
            wrong.snapshot_bounds("v")
        assert (exc.value.status, exc.value.code) == (401, "unauthorized")
        assert len(c.send_batch("v", [{"content": "a"}, {"content": "b"}])) == 2
        assert c.snapshot_bounds("v")["count"] == 2


def test_claim_ack_release_many(live_forq):
    with live_forq.client() as c:
        c.send_batch("cr", [{"content": f"m{i}"} for i in range(10)])
        got = c.claim("cr", 6)
        assert [m["content"] for m in got] == [f"m{i}" for i in range(6)]
        assert c.ack("cr", [(m["id"], m["receipt"]) for m in got[:3]]) == 3
        assert c.ack("cr", [(m["id"], m["receipt"]) for m in got[:3]]) == 0  # already gone
        assert c.release("cr", [(m["id"], m["receipt"]) for m in got[3:]]) == 3
        assert live_forq.count("cr", status=0) == 7
        started = time.monotonic()
        assert c.claim("cr-empty", 5, wait=0.3) == []
        assert time.monotonic() - started >= 0.25


# --- write ------------------------------------------------------------------------------------


def test_writer_stages_until_commit(live_forq):
    w = _writer(live_forq, "wq", batchSize=100)
    contents = [f"m{i}" for i in range(1000)]
    m1 = w.write(_batches(contents[:600]))
    m2 = w.write(_batches(contents[600:]))
    assert (m1.count, m2.count) == (600, 400) and m1.token != m2.token
    assert live_forq.count("wq") == 0 and live_forq.staged_rows("wq") == 1000
    w.commit([m1, m2])
    assert live_forq.count("wq") == 1000 and live_forq.staged_rows("wq") == 0
    rows = live_forq.sql("SELECT content FROM messages WHERE queue = 'wq'")
    assert sorted(r[0] for r in rows) == sorted(contents)
    w.commit([m1, m2])  # a repeated commit publishes nothing more
    assert live_forq.count("wq") == 1000


def test_writer_abort_discards_and_failed_task_leaves_nothing(live_forq):
    w = _writer(live_forq, "wa", batchSize=50)
    ok = w.write(_batches([f"m{i}" for i in range(200)]))

    def failing():
        yield from _batches([f"x{i}" for i in range(300)], size=100)
        raise RuntimeError("task killed")

    with pytest.raises(RuntimeError):
        w.write(failing())
    assert live_forq.staged_rows("wa") == 200  # the failed attempt dropped its own rows
    w.abort([ok, None])
    assert live_forq.staged_rows("wa") == 0 and live_forq.count("wa") == 0


def test_writer_with_process_after(live_forq):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("content", StringType()), StructField("processAfter", LongType())])
    w = ForqDataSource(live_forq.options("wp")).writer(schema, overwrite=False)
    later = int(time.time() * 1000) + 3_600_000
    batch = pa.RecordBatch.from_pydict({"content": ["now", "later"], "processAfter": [None, later]})
    w.commit([w.write(iter([batch]))])
    rows = dict(live_forq.sql("SELECT content, process_after FROM messages WHERE queue = 'wp'"))
    assert rows["later"] == later and rows["now"] < later


# --- snapshot read ----------------------------------------------------------------------------


def test_snapshot_reader_partitions_and_pages(live_forq):
    for i in range(5):
        live_forq.send_batch("sr", [{"content": f"m{i}-{j}"} for j in range(400)])
        time.sleep(0.002)
    reader = ForqSnapshotReader(ForqOptions.parse(live_forq.options("sr", numPartitions=3, pageSize=150)))
    parts = reader.partitions()
    assert len(parts) == 3
    batches = [b for p in parts for b in reader.read(p)]
    ids = [i for b in batches for i in b.column("id").to_pylist()]
    assert len(ids) == 2000 and len(set(ids)) == 2000
    assert set(batches[0].column("status").to_pylist()) == {"ready"}
    assert live_forq.count("sr", status=0) == 2000  # a read changes nothing
    empty = ForqSnapshotReader(ForqOptions.parse(live_forq.options("nothing-here")))
    assert [b for p in empty.partitions() for b in empty.read(p)] == []


def test_snapshot_reader_reads_a_dlq(live_forq):
    live_forq.add_dead("sd-dlq", 30)
    reader = ForqSnapshotReader(ForqOptions.parse(live_forq.options("sd-dlq")))
    rows = [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
    assert len(rows) == 30
    assert {r["failure_reason"] for r in rows} == {"max_attempts_reached"}


# --- streaming read ---------------------------------------------------------------------------


def _stream(live_forq, queue: str, **extra) -> ForqStreamReader:
    return ForqStreamReader(ForqOptions.parse(live_forq.options(queue, waitSeconds=0, **extra)))


def test_stream_reader_acks_only_on_commit_and_acks_the_last_batch(live_forq):
    live_forq.send_batch("st", [{"content": f"m{i}"} for i in range(25)])
    r = _stream(live_forq, "st", maxMessagesPerBatch=10)
    start = r.initialOffset()
    seen = []
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert end["seq"] == 1 and sum(len(v) for v in end["deliveries"].values()) == 10
    while end != start:
        for p in r.partitions(start, end):
            seen += [row[2] for row in r.read(p)]
        # this batch's messages are claimed, and not acked before its commit
        assert live_forq.count("st", status=1) == len(r._pairs(end))
        nxt = r.latestOffset(end, r.getDefaultReadLimit())  # Spark plans the next batch ...
        r.commit(end)  # ... then commits the previous one
        start, end = end, nxt
    assert sorted(seen) == sorted(f"m{i}" for i in range(25))
    assert live_forq.count("st") == 0  # the last batch was acked too
    r.stop()


def test_stream_reader_restart_releases_uncommitted_batch_and_acks_committed(live_forq):
    live_forq.send_batch("rs", [{"content": f"m{i}"} for i in range(8)])
    r1 = _stream(live_forq, "rs", maxMessagesPerBatch=4)
    o0 = r1.initialOffset()
    o1 = r1.latestOffset(o0, r1.getDefaultReadLimit())
    r1.partitions(o0, o1)
    o2 = r1.latestOffset(o1, r1.getDefaultReadLimit())  # batch 2 planned; its reader then dies
    r1._api().close()  # (its connection goes with it; nothing is released)
    assert live_forq.count("rs", status=1) == 8
    # Restart: Spark committed batch 1 but not batch 2; it re-runs batch 2 from the offset log.
    r2 = _stream(live_forq, "rs", maxMessagesPerBatch=4)
    assert r2.partitions(o1, o2) == []
    assert live_forq.count("rs", status=0) == 4  # batch 2's messages are ready again
    o3 = r2.latestOffset(o2, r2.getDefaultReadLimit())
    assert sorted(row[2] for p in r2.partitions(o2, o3) for row in r2.read(p)) == [f"m{i}" for i in range(4, 8)]
    # batch 1's messages: acked when the restarted reader saw o1 as a committed start
    r3 = _stream(live_forq, "rs")
    r3.latestOffset(o1, r3.getDefaultReadLimit())
    assert live_forq.count("rs") == 4
    r3.stop()  # it claimed nothing: releases nothing
    r2.stop()  # uncommitted deliveries go back
    assert live_forq.count("rs", status=0) == 4


def test_writer_at_least_once_sends_straight_to_the_queue(live_forq):
    w = _writer(live_forq, "al", batchSize=100, delivery="atLeastOnce")
    m = w.write(_batches([f"m{i}" for i in range(250)]))
    assert live_forq.count("al") == 250 and live_forq.staged_rows("al") == 0  # visible at once
    w.commit([m])
    assert live_forq.count("al") == 250
    with pytest.raises(ForqOptionError, match="'delivery' must be"):
        ForqOptions.parse(live_forq.options("al", delivery="maybe"))


def test_writer_refuses_null_content_clearly(live_forq):
    w = _writer(live_forq, "nc")
    batch = pa.RecordBatch.from_pydict({"content": ["ok", None]})
    with pytest.raises(ValueError, match="holds a null"):
        w.write(iter([batch]))
    assert live_forq.count("nc") == 0 and live_forq.staged_rows("nc") == 0
