"""Enqueue a CSV or Parquet file into a queue, exactly once per run.

    python -m forqapp.spark.examples.bulk_load --url http://localhost:8080 --api-key … \\
        --queue emails orders.csv [--priority-column urgency] [--attributes customer,region]

Each row becomes one message: the ``--column`` column (default ``content``) as is, or, with
``--json``, the whole row as a JSON object. An integer ``processAfter`` column (Unix ms), if any,
delays the message. ``--priority-column`` names an integer column (-1000..1000) that becomes the
message's priority; ``--attributes`` names up to 10 columns whose values (as strings; nulls left
out) become the message's attributes. Nothing is visible until the whole file is written; a failed
run enqueues nothing.
"""

from __future__ import annotations

import argparse
import sys

from ._session import add_connection_arguments, run, session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forqapp.spark.examples.bulk_load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_connection_arguments(parser)
    parser.add_argument("file", help="a .csv (with a header line) or .parquet file or directory")
    parser.add_argument("--column", default="content", help="the column holding the message (default: content)")
    parser.add_argument("--json", action="store_true", help="send each whole row as a JSON object")
    parser.add_argument("--batch-size", type=int, default=500, help="messages per request (default 500)")
    parser.add_argument("--priority-column", help="an integer column to use as each message's priority")
    parser.add_argument("--attributes", default="", help="comma-separated columns to send as attributes")
    args = parser.parse_args(argv)
    if not args.api_key:
        parser.error("--api-key (or FORQ_AUTH_SECRET) is required")
    spark, owned = session("forq-bulk-load", args.master)
    try:
        from pyspark.sql import functions as F

        path = args.file
        if path.lower().endswith(".csv"):
            df = spark.read.option("header", True).option("inferSchema", True).csv(path)
        else:
            df = spark.read.parquet(path)
        has_after = "processAfter" in df.columns
        attributes = [c.strip() for c in args.attributes.split(",") if c.strip()]
        for name in [args.priority_column, *attributes]:
            if name and name not in df.columns:
                parser.error(f"no column {name!r} in {path} (columns: {', '.join(df.columns)})")
        if args.json:
            body = F.to_json(F.struct(*[c for c in df.columns if c != "processAfter"]))
        elif args.column in df.columns:
            body = F.col(args.column).cast("string")
        else:
            parser.error(f"no column {args.column!r} in {path} (columns: {', '.join(df.columns)}); "
                         "use --column NAME or --json")
        columns = [body.alias("content")]
        if has_after:
            columns.append(F.col("processAfter").cast("long"))
        if args.priority_column:
            columns.append(F.col(args.priority_column).cast("int").alias("priority"))
        if attributes:
            pairs = F.create_map(*[x for name in attributes for x in (F.lit(name), F.col(name).cast("string"))])
            columns.append(F.map_filter(pairs, lambda k, v: v.isNotNull()).alias("attributes"))
        out = df.select(*columns)
        out = out.where(F.col("content").isNotNull() & (F.col("content") != ""))
        out = out.cache()
        n = out.count()
        out.write.format("forq").options(url=args.url, apiKey=args.api_key, queue=args.queue,
                                         batchSize=str(args.batch_size)).mode("append").save()
    finally:
        if owned:
            spark.stop()
    print(f"enqueued {n:,} messages from {args.file} into {args.queue}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
