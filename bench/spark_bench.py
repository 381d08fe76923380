"""Spark connector benchmark: 1,000,000 rows from a DataFrame into a queue (batch write, committed
in one publish), then a snapshot read of them back into Spark; then the streaming sink: the same
rows as files landing in a folder, streamed into another queue (``writeStream.format("forq")``, a
micro-batch per ``--files-per-batch`` files), with its same-run reference: the batch writer
writing those same files.

    python bench/spark_bench.py                 # serves forqapp itself on a temporary database
    python bench/spark_bench.py --rows 200000 --url http://127.0.0.1:8080 --api-key ...

Targets (2 cores): write >= 50,000 msg/s end to end into SQLite; snapshot read >= 100,000 rows/s.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench-secret-0123456789abcdef-0123456789"  # noqa: S105 - a throwaway local server


def serve(directory: Path, workers: int) -> tuple[str, subprocess.Popen]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, FORQ_AUTH_SECRET=SECRET, FORQ_DB_PATH=str(directory / "forq.sqlite3"),
               DJANGO_SETTINGS_MODULE="project.settings", FORQ_API_ADDR=f"127.0.0.1:{port}",
               FORQ_UI_ENABLED="false")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    proc = subprocess.Popen([sys.executable, "manage.py", "forq_serve", "--no-ui", "--api-workers", str(workers)],
                            cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "/healthcheck", timeout=1)  # noqa: S310
            return url, proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("forqapp did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--url", help="a running forqapp API (default: serve one on a temporary database)")
    parser.add_argument("--api-key", default=SECRET)
    parser.add_argument("--queue", default="bench-spark")
    parser.add_argument("--batch-size", type=int, default=5000, help="messages per staged request")
    parser.add_argument("--partitions", type=int, default=2, help="write tasks and read partitions")
    parser.add_argument("--content-bytes", type=int, default=100)
    parser.add_argument("--delivery", default="exactlyOnce", choices=["exactlyOnce", "atLeastOnce"])
    parser.add_argument("--api-workers", type=int, default=2, help="server processes (when serving itself)")
    parser.add_argument("--files", type=int, default=10, help="streaming sink: files the rows land in")
    parser.add_argument("--files-per-batch", type=int, default=2, help="streaming sink: files per micro-batch")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, str(ROOT))
    proc = None
    tmp = tempfile.TemporaryDirectory(prefix="forq-spark-bench-")
    url = args.url
    if url is None:
        url, proc = serve(Path(tmp.name), args.api_workers)
    try:
        from pyspark.sql import SparkSession

        from forqapp.spark import register

        spark = (SparkSession.builder.master("local[2]").appName("forq-spark-bench")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        options = {"url": url, "apiKey": args.api_key, "queue": args.queue}
        pad = "x" * max(0, args.content_bytes - 20)
        df = spark.range(0, args.rows, 1, args.partitions).selectExpr(
            f"concat('{{\"n\":', id, ',\"p\":\"{pad}\"}}') AS content").cache()
        df.count()  # materialise the input, so the write measures the connector and the server
        # warm-up: the first Python data source use spawns Spark's lookup workers (~15 s)
        spark.range(1).selectExpr("'warm-up' AS content").write.format("forq") \
            .options(**{**options, "queue": args.queue + "-warmup"}).mode("append").save()

        started = time.perf_counter()
        df.write.format("forq").options(**options, batchSize=str(args.batch_size), delivery=args.delivery) \
            .mode("append").save()
        write_s = time.perf_counter() - started

        read = spark.read.format("forq").options(**options, numPartitions=str(args.partitions),
                                                   pageSize="10000").load()
        started = time.perf_counter()
        read.write.format("noop").mode("overwrite").save()  # reads every row and column
        read_s = time.perf_counter() - started
        n = read.count()  # what the read covers (untimed: a second read); the rate is of these rows

        # The streaming sink: the rows land as files; the reference is the batch writer on them.
        landing = Path(tmp.name) / "landing"
        df.repartition(args.files).write.parquet(str(landing))
        files = spark.read.parquet(str(landing))
        written = {"batchSize": str(args.batch_size), "delivery": args.delivery}
        started = time.perf_counter()
        files.write.format("forq").options(**{**options, "queue": args.queue + "-files"}, **written) \
            .mode("append").save()
        files_s = time.perf_counter() - started
        stream = spark.readStream.schema(files.schema).option("maxFilesPerTrigger", args.files_per_batch) \
            .parquet(str(landing))
        started = time.perf_counter()
        query = stream.writeStream.format("forq").options(**{**options, "queue": args.queue + "-stream"}, **written) \
            .option("checkpointLocation", str(Path(tmp.name) / "checkpoint")).trigger(availableNow=True).start()
        query.awaitTermination()
        stream_s = time.perf_counter() - started
        batches = len(query.recentProgress)
        spark.stop()
        from forqapp.spark.client import ForqClient

        with ForqClient(url, args.api_key) as client:
            landed = {q: client.snapshot_bounds(args.queue + q)["count"] for q in ("-files", "-stream")}
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        tmp.cleanup()
    print(f"rows: {args.rows:,}  content: {args.content_bytes} B  partitions: {args.partitions}  "
          f"batchSize: {args.batch_size}  api workers: {args.api_workers if args.url is None else '?'}")
    print(f"batch write ({args.delivery}, DataFrame -> queue): {write_s:6.1f} s  {args.rows / write_s:10,.0f} msg/s")
    print(f"snapshot read (queue -> DataFrame, {n:,} rows):   {read_s:6.1f} s  {n / read_s:10,.0f} rows/s")
    print(f"batch write of {args.files} files (reference):      {files_s:6.1f} s  {args.rows / files_s:10,.0f} msg/s"
          f"  ({landed['-files']:,} in the queue)")
    print(f"streaming sink ({args.delivery}, {batches} micro-batches): {stream_s:6.1f} s  "
          f"{args.rows / stream_s:10,.0f} msg/s  ({landed['-stream']:,} in the queue)  "
          f"x{files_s / stream_s:.2f} of the reference")


if __name__ == "__main__":
    main()
