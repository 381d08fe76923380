"""The raw SQLite reference of ``bench/forqload/run.sh``: the load's pattern with no HTTP, no Python
server and no forqapp in between, on the same ``messages`` table (a database that forqapp's
migrations made, with all its indexes, WAL and forqapp's pragmas).

    .venv/bin/python bench/forqload/raw_sqlite.py DB [-c 10] [-p 10] [-duration 8s] [-size 100] [-backlog 1000]

``-p`` producer threads each ``INSERT`` one message per transaction (autocommit), ``-c`` consumer
threads each claim one message (the ``UPDATE … RETURNING`` claim of ``bench/hotpath_bench.py``)
and then delete it by id and claim time (the ack), each thread on its own connection, all at once
for ``-duration``, after ``-backlog`` messages were inserted: forqload's 10c10p on the database
alone. One process: the threads meet at SQLite's write lock through its busy handler (forqapp's
``busy_timeout``), as separate clients of the file would. Prints one line::

    raw sqlite3 10c10p 8s: produced N/s consumed N/s

(run.sh divides forqapp's HTTP/1.1 figures by these). Flags it does not know (forqload's own) are
ignored, so run.sh passes it the same ones.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from hotpath_bench import RAW_CLAIM as CLAIM  # noqa: E402 - the same statements as the in-process floor's
from hotpath_bench import RAW_DELETE as DELETE  # noqa: E402
from hotpath_bench import RAW_INSERT as INSERT  # noqa: E402

QUEUE = "forqload"


def duration(text: str) -> float:
    """Go's duration as forqload takes it: "8s", "500ms", "1m"."""
    for suffix, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    return float(text)


def connect(db: str) -> sqlite3.Connection:
    from forqapp.store.options import sqlite_options

    options = sqlite_options()
    conn = sqlite3.connect(db, timeout=options["timeout"], isolation_level=None, check_same_thread=False)
    for pragma in filter(None, options["init_command"].split(";")):
        conn.execute(pragma)
    return conn


def main() -> None:
    parser = argparse.ArgumentParser(prefix_chars="-")
    parser.add_argument("db")
    parser.add_argument("-c", type=int, default=10)
    parser.add_argument("-p", type=int, default=10)
    parser.add_argument("-duration", type=duration, default=8.0)
    parser.add_argument("-size", type=int, default=100)
    parser.add_argument("-backlog", type=int, default=1000)
    args, _ = parser.parse_known_args()

    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from forqapp import ids

    content = "x" * args.size
    sequence = iter(range(1, 10**12))
    lock = threading.Lock()

    def insert(conn: sqlite3.Connection) -> None:
        (message_id,) = ids.new_ids(1)
        now = int(time.time() * 1000)
        with lock:
            number = next(sequence)
        conn.execute(INSERT, (message_id, QUEUE, content, now, now, now, now + 86_400_000, number))

    setup = connect(args.db)
    for _ in range(args.backlog):
        insert(setup)
    stop_at = [0.0]
    start = threading.Barrier(args.c + args.p + 1)
    produced = [0] * args.p
    consumed = [0] * args.c

    def producer(i: int) -> None:
        conn = connect(args.db)
        start.wait()
        while time.monotonic() < stop_at[0]:
            insert(conn)
            produced[i] += 1

    def consumer(i: int) -> None:
        conn = connect(args.db)
        start.wait()
        while time.monotonic() < stop_at[0]:
            rows = conn.execute(CLAIM, {"queue": QUEUE, "now": int(time.time() * 1000) + 1}).fetchall()
            if rows:
                conn.execute(DELETE, rows[0])
                consumed[i] += 1

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(args.p)]
    threads += [threading.Thread(target=consumer, args=(i,)) for i in range(args.c)]
    for t in threads:
        t.start()
    stop_at[0] = time.monotonic() + args.duration
    t0 = time.monotonic()
    start.wait()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    print(f"raw sqlite3 {args.c}c{args.p}p {args.duration:g}s: produced {sum(produced) / took:.0f}/s "
          f"consumed {sum(consumed) / took:.0f}/s")


if __name__ == "__main__":
    main()
