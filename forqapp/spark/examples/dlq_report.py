"""Report on a dead-letter queue: why messages failed, how many attempts, how old they are.

    python -m forqapp.spark.examples.dlq_report --url http://localhost:8080 --api-key … \\
        --queue emails-dlq --out dlq-report

Reads the DLQ as a snapshot (no message is taken or changed), aggregates by queue and failure
reason (count, attempts, age in hours: mean and max) and by age bucket, and writes
``OUT/by_reason.parquet``, ``OUT/by_age.parquet`` and ``OUT/dlq_report.png`` (the chart needs
matplotlib).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ... import vocab  # Django-free, like this package
from ._session import add_connection_arguments, run, session

AGE_BUCKETS = [(1, "< 1 h"), (6, "1-6 h"), (24, "6-24 h"), (72, "1-3 d"), (None, ">= 3 d")]


def build_report(df):
    """(by_reason, by_age) DataFrames from a snapshot DataFrame of a DLQ."""
    from pyspark.sql import functions as F

    aged = df.withColumn(
        "age_hours",
        (F.unix_micros(F.current_timestamp()) - F.unix_micros("received_at")) / F.lit(3_600_000_000.0),
    ).withColumn("failure_reason", F.coalesce("failure_reason", F.lit("unknown")))
    by_reason = (
        aged.groupBy("queue", "failure_reason")
        .agg(
            F.count("*").alias("messages"),
            F.avg("attempts").alias("avg_attempts"),
            F.max("attempts").alias("max_attempts"),
            F.avg("age_hours").alias("avg_age_hours"),
            F.max("age_hours").alias("max_age_hours"),
            F.min("received_at").alias("oldest"),
        )
        .orderBy(F.desc("messages"))
    )
    bucket = None
    for limit, label in AGE_BUCKETS:
        if limit is None:
            bucket = bucket.otherwise(F.lit(label))
        elif bucket is None:
            bucket = F.when(F.col("age_hours") < limit, F.lit(label))
        else:
            bucket = bucket.when(F.col("age_hours") < limit, F.lit(label))
    order = F.create_map(*[x for i, (_, label) in enumerate(AGE_BUCKETS) for x in (F.lit(label), F.lit(i))])
    by_age = (
        aged.withColumn("age", bucket)
        .groupBy("queue", "age", "failure_reason")
        .agg(F.count("*").alias("messages"))
        .withColumn("_order", order[F.col("age")])
        .orderBy("_order", "failure_reason")
        .drop("_order")
    )
    return by_reason, by_age


def chart(by_reason_rows, by_age_rows, path: Path, title: str) -> bool:
    """Draw the PNG; False (nothing drawn) when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = [f"{r['failure_reason']}\n({r['queue']})" for r in by_reason_rows]
    left.barh(labels, [r["messages"] for r in by_reason_rows], color="#c0392b")
    left.set_xlabel("messages")
    left.set_title("by failure reason")
    left.invert_yaxis()
    reasons = sorted({r["failure_reason"] for r in by_age_rows})
    ages = [label for _, label in AGE_BUCKETS]
    bottom = [0] * len(ages)
    for reason in reasons:
        counts = [sum(r["messages"] for r in by_age_rows if r["age"] == a and r["failure_reason"] == reason)
                  for a in ages]
        right.bar(ages, counts, bottom=bottom, label=reason)
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    right.set_title("by age")
    right.set_ylabel("messages")
    if reasons:
        right.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forqapp.spark.examples.dlq_report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_connection_arguments(parser)
    parser.add_argument("--out", default="dlq-report", help="output directory (default: dlq-report)")
    args = parser.parse_args(argv)
    if not args.api_key:
        parser.error("--api-key (or FORQ_AUTH_SECRET) is required")
    if not vocab.is_dlq(args.queue):
        print(f"note: {args.queue!r} is not a dead-letter queue; reporting on it all the same", file=sys.stderr)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spark, owned = session("forq-dlq-report", args.master)
    try:
        df = spark.read.format("forq").options(url=args.url, apiKey=args.api_key, queue=args.queue).load()
        df = df.drop("content").cache()
        total = df.count()
        by_reason, by_age = build_report(df)
        by_reason.coalesce(1).write.mode("overwrite").parquet(str(out / "by_reason.parquet"))
        by_age.coalesce(1).write.mode("overwrite").parquet(str(out / "by_age.parquet"))
        reason_rows = [r.asDict() for r in by_reason.collect()]
        age_rows = [r.asDict() for r in by_age.collect()]
    finally:
        if owned:
            spark.stop()
    drawn = chart(reason_rows, age_rows, out / "dlq_report.png", f"{args.queue}: {total:,} messages")
    print(f"{args.queue}: {total:,} messages")
    for r in reason_rows:
        print(f"  {r['queue']:<24} {r['failure_reason']:<22} {r['messages']:>9,}  attempts avg "
              f"{r['avg_attempts'] or 0:.1f}  age avg {r['avg_age_hours'] or 0:.1f} h, max {r['max_age_hours'] or 0:.1f} h")
    written = [out / "by_reason.parquet", out / "by_age.parquet"] + ([out / "dlq_report.png"] if drawn else [])
    print("wrote " + ", ".join(map(str, written)))
    if not drawn:
        print("no chart: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
