"""The Spark connector with scoped keys (issue 16), without Spark's JVM, against a live forqapp server
(the connector's classes as tests/test_spark_connector.py drives them): a writer key that may only
produce, a reader key that may only read, a stream key that may only consume; each refused (403
``forbidden.key_scope``, a clear error) outside its grants."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'forqapp[spark]')")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'forqapp[spark]')")

from forqapp.spark.client import ForqClientError  # noqa: E402
from forqapp.spark.options import ForqOptions  # noqa: E402
from forqapp.spark.source import ForqSnapshotReader, ForqStreamReader  # noqa: E402

from .test_spark_connector import (  # noqa: E402
    ROOT,
    SECRET,
    _batches,
    _writer,
    start_live_forq,
    stop_live_forq,
)


@pytest.fixture(scope="module")
def live_forq(tmp_path_factory):
    forq, proc, log = start_live_forq(tmp_path_factory.mktemp("forq-keys-spark"))
    yield forq
    stop_live_forq(proc, log)


def make_key(live_forq, name: str, *grants: str) -> str:
    """``manage.py forq_keys create`` against the server's database; its last line is the token."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(FORQ_AUTH_SECRET=SECRET, FORQ_DB_PATH=str(live_forq.db_path), DJANGO_SETTINGS_MODULE="project.settings",
               PYTHONPATH=str(ROOT))
    args = [a for g in grants for a in ("--grant", g)]
    out = subprocess.run([sys.executable, "manage.py", "forq_keys", "create", name, *args], cwd=ROOT, env=env,
                         check=True, capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1]


def scoped(live_forq, token: str):
    live_forq.api_key = token
    return live_forq


def test_writer_reader_and_stream_with_least_privilege_keys(live_forq):
    writer_key = make_key(live_forq, "spark-writer", "sk:produce")
    reader_key = make_key(live_forq, "spark-reader", "sk:read")
    stream_key = make_key(live_forq, "spark-stream", "sk:consume")
    try:
        w = _writer(scoped(live_forq, writer_key), "sk", batchSize=100)
        m = w.write(_batches([f"m{i}" for i in range(250)]))
        w.commit([m])
        assert live_forq.count("sk") == 250

        reader = ForqSnapshotReader(ForqOptions.parse(scoped(live_forq, reader_key).options("sk", numPartitions=2)))
        ids = [i for p in reader.partitions() for b in reader.read(p) for i in b.column("id").to_pylist()]
        assert len(set(ids)) == 250

        r = ForqStreamReader(ForqOptions.parse(scoped(live_forq, stream_key).options(
            "sk", waitSeconds=0, maxMessagesPerBatch=100)))
        start = r.initialOffset()
        seen = 0
        end = r.latestOffset(start, r.getDefaultReadLimit())
        while end != start:
            seen += sum(1 for p in r.partitions(start, end) for _ in r.read(p))
            nxt = r.latestOffset(end, r.getDefaultReadLimit())
            r.commit(end)
            start, end = end, nxt
        r.stop()
        assert seen == 250 and live_forq.count("sk") == 0
    finally:
        live_forq.api_key = SECRET


def test_each_key_is_refused_outside_its_grants(live_forq):
    reader_key = make_key(live_forq, "only-read", "other:read")
    writer_key = make_key(live_forq, "only-write", "other:produce")
    try:
        w = _writer(scoped(live_forq, reader_key), "other", batchSize=10)
        with pytest.raises(ForqClientError) as refused:
            w.write(_batches(["x"]))
        assert refused.value.status == 403 and refused.value.code == "forbidden.key_scope"
        reader = ForqSnapshotReader(ForqOptions.parse(scoped(live_forq, writer_key).options("other")))
        with pytest.raises(ForqClientError) as refused:
            [b for p in reader.partitions() for b in reader.read(p)]
        assert refused.value.status == 403
        w = _writer(scoped(live_forq, writer_key), "elsewhere", batchSize=10)
        with pytest.raises(ForqClientError) as refused:
            w.write(_batches(["x"]))
        assert refused.value.status == 403
    finally:
        live_forq.api_key = SECRET
