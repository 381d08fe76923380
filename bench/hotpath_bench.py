"""In-process hot path (issue 15, targets 3, 4 and 6): forqapp's ``send`` and ``receive`` + ``ack``
against the database's own floor, raw one-row inserts and raw claim+delete on the same ``messages``
table, measured in the same run.

    .venv/bin/python bench/hotpath_bench.py [--rounds 5] [--messages 5000] [--before-ref REF]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/hotpath_bench.py

**SQLite** (no ``DATABASE_URL``): a file in a temporary directory, migrated once per checkout and
copied fresh for every run, so each run has forqapp's ``messages`` table with all its indexes and
WAL. Each run is a fresh process that warms up, then times ``--messages`` one-at-a-time produces of
100-byte messages to one queue, then consumes them one at a time until the queue is empty:

* ``raw sqlite3``: the floor. A plain ``sqlite3`` connection with forqapp's pragmas (the
  ``init_command`` of :func:`forqapp.store.options.sqlite_options`, and ``synchronous`` as the run
  says) in autocommit: one ``INSERT`` per message (ids made before the clock starts, sequence from
  a Python counter), then ``UPDATE … WHERE id = (SELECT … ORDER BY priority DESC, sequence LIMIT 1)
  RETURNING`` + ``DELETE`` by id and receipt (FACTS.md's claim+delete reference);
* ``forqapp``: ``forqapp.send(queue, content)``, then ``forqapp.receive(queue)`` + ``forqapp.ack``;
* ``forqapp before``: the same calls on ``--before-ref`` (default: the commit before this work),
  checked out into a git worktree (``--before``) sharing this checkout's ``.venv``.

Each of these runs with ``synchronous=NORMAL`` (``FORQ_SYNCHRONOUS``' default) and ``FULL`` (the
power-loss mode; ``--no-full`` skips it). Rounds alternate the order of the runs (machine drift falls
on all of them); the tables give medians over the rounds, and the ratios are medians of each round's
ratio (forqapp / raw of the same round and mode). Target 3 of issue 15: both ratios ≥ 0.60.

**PostgreSQL** (``DATABASE_URL`` set): a fresh database ``forq_hotpath_bench`` on that server (made
through its ``postgres`` database, dropped first), migrated by each checkout in turn; the raw floor
is a ``psycopg`` connection in autocommit (``prepare_threshold`` as forqapp's) with one ``INSERT``
per message (``nextval`` of forqapp's sequence) and ``… FOR UPDATE SKIP LOCKED`` claim + ``DELETE``.
``VACUUM`` before each run. ``synchronous`` does not apply.

Figures are messages per second of wall time, and per CPU second of the measuring process (less
sensitive to the other load on the machine; the database server's CPU is not in it on PostgreSQL).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
BEFORE_REF = "8610d2b"  # the last commit before the hot-path work of issue 15
CONTENT = "x" * 100
PG_DB = "forq_hotpath_bench"
COLUMNS = """id, queue, is_dlq, content, status, attempts, process_after, processing_started_at,
             failure_reason, received_at, updated_at, expires_after, priority, attributes, dedup_id, sequence"""
# The raw floor's statements on SQLite (also bench/forqload/raw_sqlite.py's): one row in, the claim of
# the oldest due message without a group (idx_queue_claim's rows), the delete of a claimed one.
RAW_INSERT = f"""INSERT INTO messages ({COLUMNS})
                 VALUES (?, ?, 0, ?, 0, 0, ?, NULL, NULL, ?, ?, ?, 0, NULL, NULL, ?)"""
RAW_CLAIM = """UPDATE messages SET status = 1, attempts = attempts + 1, processing_started_at = :now,
                                   process_after = :now + 30000, updated_at = :now
               WHERE id = (SELECT id FROM messages INDEXED BY idx_queue_claim
                           WHERE queue = :queue AND message_group = '' AND status = 0 AND process_after <= received_at
                             AND process_after <= :now
                           ORDER BY priority DESC, sequence LIMIT 1)
               RETURNING id, processing_started_at"""
RAW_DELETE = "DELETE FROM messages WHERE id = ? AND processing_started_at = ?"

# --- the runs (children) ------------------------------------------------------------------------


def timed(fn, count: int) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    done = fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert done == count, (done, count)
    return {"wall": count / wall, "cpu": count / max(cpu, 1e-9)}


def child_forqapp(n: int) -> dict:
    import django

    django.setup()
    import forqapp

    send, receive, ack = forqapp.send, forqapp.receive, forqapp.ack

    def produce(queue: str, k: int) -> int:
        for _ in range(k):
            send(queue, CONTENT)
        return k

    def consume(queue: str) -> int:
        k = 0
        while (m := receive(queue)) is not None:
            ack(m)
            k += 1
        return k

    produce("warm", 300)
    consume("warm")
    return {"send": timed(lambda: produce("hot", n), n), "consume": timed(lambda: consume("hot"), n)}


def child_raw_sqlite(n: int, db: str, synchronous: str, counter: bool = False) -> dict:
    from forqapp import ids
    from forqapp.store.options import sqlite_options
    from forqapp.store.sqlite import NEXT_SEQUENCE

    options = sqlite_options()
    conn = sqlite3.connect(db, timeout=options["timeout"], isolation_level=None)
    for pragma in filter(None, options["init_command"].split(";")):
        conn.execute(pragma)
    conn.execute(f"PRAGMA synchronous={synchronous}")
    insert, claim, delete = RAW_INSERT, RAW_CLAIM, RAW_DELETE
    sequence = iter(range(1, 10**9))

    def produce(queue: str, k: int) -> int:
        made = ids.new_ids(k)
        now = int(time.time() * 1000)
        run = conn.execute
        if counter:  # forqapp's design: the queue's counter and the row commit together
            take = {"queue": queue, "n": 1, "now": now}
            for message_id in made:
                run("BEGIN IMMEDIATE")
                ((number,),) = run(NEXT_SEQUENCE, take).fetchall()
                run(insert, (message_id, queue, CONTENT, now, now, now, now + 86_400_000, number))
                run("COMMIT")
            return k
        for message_id in made:
            run(insert, (message_id, queue, CONTENT, now, now, now, now + 86_400_000, next(sequence)))
        return k

    def consume(queue: str) -> int:
        k, run = 0, conn.execute
        params = {"queue": queue, "now": int(time.time() * 1000) + 1}
        while rows := run(claim, params).fetchall():
            run(delete, rows[0])
            k += 1
        return k

    produce("warm", 300)
    consume("warm")
    return {"send": timed(lambda: produce("hot", n), n), "consume": timed(lambda: consume("hot"), n)}


def child_raw_postgresql(n: int, url: str) -> dict:
    import psycopg

    from forqapp import ids
    from forqapp.store.options import postgresql_options

    conn = psycopg.connect(url, autocommit=True)
    conn.prepare_threshold = postgresql_options()["prepare_threshold"]
    insert = f"""INSERT INTO messages ({COLUMNS})
                 VALUES (%s, %s, FALSE, %s, 0, 0, %s, NULL, NULL, %s, %s, %s, 0, NULL, NULL,
                         nextval('forq_message_sequence'))"""
    claim = """UPDATE messages SET status = 1, attempts = attempts + 1, processing_started_at = %(now)s,
                                   process_after = %(now)s + 30000, updated_at = %(now)s
               WHERE id = (SELECT id FROM messages
                           WHERE queue = %(queue)s AND message_group = '' AND status = 0 AND process_after <= received_at
                             AND process_after <= %(now)s
                           ORDER BY priority DESC, sequence LIMIT 1 FOR UPDATE SKIP LOCKED)
               RETURNING id, processing_started_at"""
    delete = "DELETE FROM messages WHERE id = %s AND processing_started_at = %s"
    cur = conn.cursor()

    def produce(queue: str, k: int) -> int:
        now = int(time.time() * 1000)
        for message_id in ids.new_ids(k):
            cur.execute(insert, (message_id, queue, CONTENT, now, now, now, now + 86_400_000))
        return k

    def consume(queue: str) -> int:
        k = 0
        params = {"queue": queue, "now": int(time.time() * 1000) + 1}
        while True:
            cur.execute(claim, params)
            rows = cur.fetchall()
            if not rows:
                return k
            cur.execute(delete, rows[0])
            k += 1

    produce("warm", 300)
    consume("warm")
    return {"send": timed(lambda: produce("hot", n), n), "consume": timed(lambda: consume("hot"), n)}


def child(args: argparse.Namespace) -> None:
    if args.child == "forqapp":
        out = child_forqapp(args.messages)
    elif args.database_url:
        out = child_raw_postgresql(args.messages, args.database_url)
    else:
        out = child_raw_sqlite(args.messages, args.db, args.synchronous, counter=args.child == "raw+counter")
    print(json.dumps(out))


# --- the parent -----------------------------------------------------------------------------


def env_for(root: Path, *, db: Path | None = None, url: str | None = None, synchronous: str = "NORMAL") -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env = {**base, "DJANGO_SETTINGS_MODULE": "project.settings", "PYTHONPATH": str(root),
           "FORQ_METRICS_ENABLED": "false", "FORQ_SYNCHRONOUS": synchronous}
    if url:
        env["DATABASE_URL"] = url
    else:
        env["FORQ_DB_PATH"] = str(db)
    return env


def migrate(root: Path, env: dict) -> None:
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=root, env=env, check=True)


class SQLiteFiles:
    """A freshly migrated database file per run: each checkout's schema migrated once, then copied."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.templates: dict[Path, Path] = {}

    def fresh(self, root: Path) -> Path:
        if root not in self.templates:
            template = self.tmp / f"template-{len(self.templates)}.sqlite3"
            migrate(root, env_for(root, db=template))
            with sqlite3.connect(template) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.templates[root] = template
        db = self.tmp / "run.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        shutil.copyfile(self.templates[root], db)
        return db


def with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def fresh_pg_database(url: str) -> str:
    import psycopg

    with psycopg.connect(with_db(url, "postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PG_DB}")
    return with_db(url, PG_DB)


def pg_prepare(url: str) -> None:
    """Between runs: an empty queue table, vacuumed (what autovacuum would have done by now)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM messages")
        conn.execute("VACUUM (ANALYZE) messages")


def run_child(root: Path, kind: str, env: dict, args: argparse.Namespace, db: Path | None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--messages", str(args.messages),
           "--synchronous", env["FORQ_SYNCHRONOUS"]]
    if db is not None:
        cmd += ["--db", str(db)]
    if "DATABASE_URL" in env:
        cmd += ["--database-url", env["DATABASE_URL"]]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{kind} in {root}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ensure_worktree(path: Path, ref: str) -> bool:
    """Check ``ref`` out at ``path`` (sharing this checkout's .venv); False when it was there."""
    if (path / "manage.py").exists():
        return False
    subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=ROOT, check=True,
                   capture_output=True)
    (path / ".venv").symlink_to(ROOT / ".venv")
    return True


def reference_of(name: str) -> str:
    mode = name.rsplit(", ", 1)[1]
    return f"raw, {mode}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--no-full", action="store_true", help="SQLite: skip the synchronous=FULL runs")
    parser.add_argument("--no-before", action="store_true", help="skip the runs of --before-ref")
    parser.add_argument("--before-ref", default=BEFORE_REF)
    parser.add_argument("--before", default="/tmp/hotpath-before", help="worktree of --before-ref")
    parser.add_argument("--child", choices=("forqapp", "raw", "raw+counter"), help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    parser.add_argument("--synchronous", default="NORMAL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    url = os.environ.get("DATABASE_URL") or None
    before = Path(args.before)
    created = False
    if not args.no_before:
        created = ensure_worktree(before, args.before_ref)
    modes = ["NORMAL"] if url or args.no_full else ["NORMAL", "FULL"]
    runs: dict[str, tuple[Path, str, str]] = {}  # name: (root, kind, synchronous)
    for mode in modes:
        label = "PostgreSQL" if url else f"synchronous={mode}"
        runs[f"raw, {label}"] = (ROOT, "raw", mode)
        if not url:
            runs[f"raw + sequence counter, {label}"] = (ROOT, "raw+counter", mode)
        runs[f"forqapp, {label}"] = (ROOT, "forqapp", mode)
        if not args.no_before and mode == "NORMAL":  # (before this work, FORQ_SYNCHRONOUS did not exist)
            runs[f"forqapp before, {label}"] = (before, "forqapp", mode)
    results: dict[str, list[dict]] = {name: [] for name in runs}
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="forq-hotpath-") as tmp:
            files = SQLiteFiles(Path(tmp))
            pg_url = fresh_pg_database(url) if url else None
            migrated: Path | None = None
            for r in range(args.rounds):
                names = list(runs) if r % 2 == 0 else list(reversed(runs))
                for name in names:
                    root, kind, mode = runs[name]
                    if pg_url:
                        if migrated != root:  # (each checkout's schema: migrate to it)
                            migrate(root, env_for(root, url=pg_url))
                            migrated = root
                        pg_prepare(pg_url)
                        results[name].append(run_child(root, kind, env_for(root, url=pg_url), args, None))
                    else:
                        db = files.fresh(root)
                        results[name].append(run_child(root, kind, env_for(root, db=db, synchronous=mode), args, db))
                print(f"  round {r + 1}/{args.rounds} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    finally:
        if created:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=True)

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout.strip()
    where = "PostgreSQL (" + urlsplit(url).netloc.rsplit("@", 1)[-1] + ")" if url else "SQLite (WAL, a file)"
    print(f"\n## In-process hot path on {where}: checkout {commit}, before = {args.before_ref}\n")
    print(f"{args.messages:,} one-at-a-time produces of 100-byte messages, then receive+ack (raw: claim+delete) "
          f"of them; median of {args.rounds} alternating rounds, each run a fresh process on a fresh database. "
          "Messages per second of wall time (and per CPU second of the measuring process); the ratio is "
          "the median of each round's ratio to the raw run of the same round and mode.\n")
    print("| run | send /s | receive+ack /s | send CPU /s | receive+ack CPU /s | send ratio | receive+ack ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    summary = {}
    for name, rows in results.items():
        med = {op: {clock: statistics.median(x[op][clock] for x in rows) for clock in ("wall", "cpu")}
               for op in ("send", "consume")}
        ratios = ["", ""]
        if name != reference_of(name):
            ref = results[reference_of(name)]
            ratios = [statistics.median(x[op]["wall"] / y[op]["wall"] for x, y in zip(rows, ref, strict=True))
                      for op in ("send", "consume")]
            summary[name] = ratios
            target = name.startswith("forqapp,") and not url  # (issue 15 sets none on PostgreSQL)
            ratios = [f"{v:.2f}" + (" ✗" if target and v < 0.60 else "") for v in ratios]
        print(f"| {name} | {med['send']['wall']:,.0f} | {med['consume']['wall']:,.0f} | {med['send']['cpu']:,.0f} "
              f"| {med['consume']['cpu']:,.0f} | {ratios[0]} | {ratios[1]} |")
    if not url and "FULL" in modes:
        print("\nCost of `FORQ_SYNCHRONOUS=FULL` (forqapp's FULL / NORMAL, medians of each round's ratio): ", end="")
        cost = [statistics.median(f[op]["wall"] / n[op]["wall"] for f, n in
                                  zip(results["forqapp, synchronous=FULL"], results["forqapp, synchronous=NORMAL"],
                                      strict=True)) for op in ("send", "consume")]
        print(f"send ×{cost[0]:.2f}, receive+ack ×{cost[1]:.2f}.")
    print(f"\n({time.perf_counter() - started:.0f} s; ✗ marks a forqapp ratio on SQLite under issue 15's 0.60)")


if __name__ == "__main__":
    main()
