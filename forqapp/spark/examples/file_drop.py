"""Files landing in a folder → a queue, each line exactly once, with a streaming query.

    python -m forqapp.spark.examples.file_drop --url http://localhost:8080 --api-key … \\
        --queue landed --inbox /data/inbox --checkpoint /data/checkpoints/landed [--once]

Each line of each file that lands in ``--inbox`` (text files; with ``--json``, JSON lines whose
``content`` field is the message) becomes one message. Write a file elsewhere and move it in whole:
Spark's file source reads a file once it sees it. The query keeps its progress in ``--checkpoint``:
stopped (Ctrl-C), killed or crashed, it starts again from there, and no line is enqueued twice or
lost (``writeStream.format("forq")``: each micro-batch is published once, in one transaction).
``--once`` takes the files there now and exits (``trigger(availableNow=True)``, for cron);
otherwise it looks for new files every ``--every`` seconds until stopped.

Then a worker consumes the queue: in your Django project's ``consumers.py``::

    import forqapp

    @forqapp.consumer("landed")
    def handle(message):              # returning acks, raising retries
        print(message.content)

and ``python manage.py forq_worker landed``.
"""

from __future__ import annotations

import argparse

from ._session import add_connection_arguments, run, session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forqapp.spark.examples.file_drop", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_connection_arguments(parser)
    parser.add_argument("--inbox", required=True, help="the folder files land in")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint folder (keep it)")
    parser.add_argument("--json", action="store_true", help="JSON lines: send each line's content field")
    parser.add_argument("--once", action="store_true", help="take the files there now, then exit")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between looks (default 5)")
    parser.add_argument("--files-per-batch", type=int, default=100, help="files per micro-batch (default 100)")
    args = parser.parse_args(argv)
    if not args.api_key:
        parser.error("--api-key (or FORQ_AUTH_SECRET) is required")
    spark, owned = session("forq-file-drop", args.master)
    try:
        reader = spark.readStream.option("maxFilesPerTrigger", args.files_per_batch)
        if args.json:
            lines = reader.schema("content string").json(args.inbox).where("content IS NOT NULL")
        else:
            lines = reader.text(args.inbox).selectExpr("value AS content")
        writer = lines.writeStream.format("forq").options(url=args.url, apiKey=args.api_key, queue=args.queue) \
            .option("checkpointLocation", args.checkpoint)
        writer = writer.trigger(availableNow=True) if args.once else \
            writer.trigger(processingTime=f"{args.every} seconds")
        query = writer.start()
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()  # the checkpoint keeps what was published: the next run goes on from there
        sent = sum(p.get("numInputRows", 0) for p in query.recentProgress)
        print(f"{args.queue}: {sent} lines from {args.inbox} (this run's last batches)")
        return 0
    finally:
        if owned:
            spark.stop()


if __name__ == "__main__":
    raise SystemExit(run(main))
