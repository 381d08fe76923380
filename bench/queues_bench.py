"""Queues benchmark (issue 12): the in-process Python API with priorities and attributes, against
the design before issue 12 measured in the same run, and the claim with 1,000,000 messages queued.

    .venv/bin/python bench/queues_bench.py [--rounds 5] [--messages 5000] [--deep 1000000]

Everything runs on SQLite files in a temporary directory, in subprocesses, with 100-byte messages;
figures are messages per second of wall time and, less sensitive to other load on the machine,
per CPU second of the benchmark's process.

**Part 1, before/after.** The commit before issue 12 (``--before-ref``, 08c7627) is checked out
into a git worktree (``--before``, default /tmp/bench-before; created and removed by this script
unless it exists already) that shares this checkout's ``.venv``. Each round runs three workloads,
each in a fresh subprocess on a fresh database (each version migrated once, then copied): ``send``
one message at a time, ``services.claim`` + ``ack`` of those until the queue is empty, then
``send_many`` (10,000 a call):

* ``before``: plain messages on the old design;
* ``after, plain``: the same calls on this checkout;
* ``after, priority+attributes``: ``send(queue, content, priority=<random -10..10>,
  attributes=<3 keys>)`` (and the same dicts for ``send_many``, built before the clock starts, as the
  raw runs' rows are), then the same claim+ack.

* ``raw sqlite3, plain`` and ``raw sqlite3, priority+attributes``: the same workloads as the
  statements this checkout's SQLite store runs (its SQL text), on ``sqlite3`` directly with the rows
  prepared beforehand: SQLite's own share, the floor under forqapp's Python.

Rounds alternate the order of the runs (machine drift falls on all of them); the table shows
each figure's median over the rounds and its ratio to ``before`` (the target: within 10%). Each
measure starts after ``gc.collect()``, so that the cycle collector's work on the inputs built
before the clock (25,000 dicts for the rich ``send_many``) is not charged to it.

**Part 2, depth (this checkout).** A queue of 1,000 messages and one of ``--deep`` (filled with
``send_many``, 10,000 a call, priorities -10..10 and 3 attributes each), then claim+ack of the same
number of messages from each, FIFO and LIFO (``configure_queue(ordering=...)``), alternating; and
``EXPLAIN QUERY PLAN`` of the claim's pick (``forqapp.store.sqlite.PICK``) on the deep queue.

**Part 3, what a claim steps over (four designs).** Claim+ack on a queue with nothing ahead of
its due messages, with ``--ahead`` deliveries in flight ahead of them, with ``--ahead`` messages
delayed by an hour ahead of them (sent first), and with ``--ahead`` deliveries whose leases have
ended (claimed with a 0 s lease: due again, each claim takes one of them). The designs: before issue
12 (``--before-ref``: no leases in the claim), one claim index for ready and leased rows
(``--one-index-ref``, migration 0011), leases in an index of their own but the ready rows due or not
in the claim index (``--leases-apart-ref``, migration 0012), and this checkout (the ready rows
written to come due later in an index of their own, by the time they come due: migration 0013; the
lease index holding the leased rows alone: migration 0014).
With ``--database-url`` (a PostgreSQL server), part 3 runs there instead, a fresh database per
design, per second of wall time.
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
BEFORE_REF = "08c7627"  # the last commit before issue 12's work
ONE_INDEX_REF = "d716992"  # the last commit whose claim index held ready and leased rows together
LEASES_APART_REF = "7bf6102"  # the last commit whose claim index held the ready rows due or not together

# --- the workloads, run in a subprocess under each checkout -------------------------------------

# Both workloads' clock: each measure's rate in wall time (out) and per CPU second (cpu). Each starts
# after a full collection, so that the cycle collector's debt for what was built before the clock
# is not charged to the measure: 25,000 new dicts for the rich send_many (they contain a dict, so
# the collector tracks them) set off a full collection of the heap during it (50-64 ms, 2-2.6 µs a
# message), where plain strings and the raw runs' tuples of strings and numbers leave no such debt.
TIMED = r"""
import gc
out, cpu = {}, {}

def timed(name, count, fn, *args):
    gc.collect()
    t, c = time.perf_counter(), time.process_time()
    result = fn(*args)
    out[name] = count / (time.perf_counter() - t)
    cpu[name] = count / (time.process_time() - c)
    return result
"""

# argv: mode ("plain" | "rich"), messages. Prints {"send": per s, "send_many": ..., "claim+ack": ...}.
ROUND = r"""
import json, random, sys, time
import django
django.setup()
import forqapp
from forqapp import services

mode, n = sys.argv[1], int(sys.argv[2])
content = "x" * 100
rng = random.Random(12)
if mode == "rich":
    prio = [rng.randint(-10, 10) for _ in range(n)]
    attrs = [{"tenant": f"t-{rng.randrange(1000)}", "kind": rng.choice(("email", "sms", "push")),
              "trace": f"{rng.getrandbits(64):016x}"} for _ in range(n)]

def send(queue):
    if mode == "rich":
        for p, a in zip(prio, attrs):
            forqapp.send(queue, content, priority=p, attributes=a)
    else:
        for _ in range(n):
            forqapp.send(queue, content)

def batches(total):  # send_many's argument for each call, built before the clock starts (as the raw rows)
    out = []
    for start in range(0, total, 10_000):
        k = min(10_000, total - start)
        if mode == "rich":
            out.append([{"content": content, "priority": prio[i % n], "attributes": attrs[i % n]}
                        for i in range(start, start + k)])
        else:
            out.append([content] * k)
    return out

def send_many(queue, items):
    for batch in items:
        forqapp.send_many(queue, batch)

def drain(queue):
    claim, ack, k = services.claim, forqapp.ack, 0
    while (m := claim(queue)) is not None:
        ack(m)
        k += 1
    return k

# warm up: imports, statement caches, the queue's policy row
send_many("warm", batches(200)); drain("warm")
for _ in range(200):
    forqapp.send("warm", content)
drain("warm")

""" + TIMED + r"""
timed("send", n, send, "single")
assert timed("claim+ack", n, drain, "single") == n
timed("send_many", 5 * n, send_many, "bulk", batches(5 * n))  # (not drained: the database is thrown away)
print(json.dumps({"wall": out, "cpu": cpu}))
"""

# argv: mode ("raw-plain" | "raw-rich"), messages. The same three workloads, as the statements this
# checkout's SQLite store runs (its SQL text: the counter, INSERT, the claim, ACK, the multi-row
# VALUES of a batch's shared values) on sqlite3 directly, rows prepared beforehand: SQLite's own
# share, no Python around it.
RAW = r"""
import json, random, sqlite3, sys, time
import django
django.setup()
from django.conf import settings
from forqapp import ids
from forqapp.store import sqlite as S

mode, n = sys.argv[1], int(sys.argv[2])
conn = sqlite3.connect(settings.DATABASES["default"]["NAME"], isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL"); conn.execute("PRAGMA synchronous=NORMAL")
rng = random.Random(12)
now = int(time.time() * 1000)
def rows(queue, count):
    out = []
    for message_id in ids.new_ids(count):  # time-ordered, as the store's rows (random ids cost 3x more)
        rich = mode == "raw-rich"
        attrs = json.dumps({"tenant": f"t-{rng.randrange(1000)}", "kind": rng.choice(("email", "sms", "push")),
                            "trace": f"{rng.getrandbits(64):016x}"}, separators=(",", ":")) if rich else None
        out.append((message_id, queue, "x" * 100, now, now, now + 86_400_000,
                    rng.randint(-10, 10) if rich else 0, attrs, None))
    return out

def counter(queue, k):
    if not conn.execute(S.BUMP_SEQUENCE, (k, queue)).rowcount:
        return conn.execute(S.NEXT_SEQUENCE, {"queue": queue, "n": k, "now": now}).fetchall()[0][0]
    return conn.execute(S.LAST_SEQUENCE, (queue,)).fetchone()[0]

def send(batch):
    for r in batch:
        conn.execute("BEGIN IMMEDIATE")
        seq = counter(r[1], 1)
        conn.execute(S.INSERT, (r[0], r[1], 0, r[2], r[3], r[4], r[4], *r[5:], seq))
        conn.execute("COMMIT")

def drain(queue):
    k = 0
    params = {"queue": queue, "now": now + 1, "limit": 1, "visibility": 30_000, "max": 5, "dlq_ttl": 86_400_000,
              "ended_among": 100}
    while rows_ := conn.execute(S.CLAIM_ONE, params).fetchall():
        conn.execute(S.ACK, (rows_[0][0], queue, rows_[0][4]))
        k += 1
    return k

def send_many(batches):  # a call's rows share queue, times and expiry: the store's shared-values statement
    for batch in batches:
        conn.execute("BEGIN IMMEDIATE")
        first = counter(batch[0][1], len(batch)) - len(batch) + 1
        params = [v for r in batch for v in (r[0], r[2], r[6], r[7])]
        for done, size in S._chunks(len(batch), S.SHARED_CHUNK):
            conn.execute(S.insert_shared(size, 0), [*S.shared_values(batch[0][1], now, now, now + 86_400_000,
                                                                     first + done),
                                                    *params[4 * done:4 * (done + size)]])
        conn.execute("COMMIT")

""" + TIMED + r"""
send(rows("warm", 200)); drain("warm")
single, bulk = rows("single", n), rows("bulk", 5 * n)
timed("send", n, send, single)
assert timed("claim+ack", n, drain, "single") == n
timed("send_many", 5 * n, send_many, [bulk[i:i + 10_000] for i in range(0, 5 * n, 10_000)])
print(json.dumps({"wall": out, "cpu": cpu}))
"""

# argv: deep, shallow, per_measure, rounds. Fills two queues, then measures claim+ack on each.
DEPTH = r"""
import json, random, sqlite3, sys, time
import django
django.setup()
from django.db import connection
import forqapp
from forqapp import services
from forqapp.store import sqlite as store_sql

deep, shallow, k, rounds = (int(a) for a in sys.argv[1:5])
rng = random.Random(7)
content = "x" * 100
out = {"fill": {}, "rates": {}, "plans": {}}

def items(count):
    return [{"content": content, "priority": rng.randint(-10, 10),
             "attributes": {"tenant": f"t-{rng.randrange(1000)}", "kind": "email", "trace": f"{i:016x}"}}
            for i in range(count)]

def fill(queue, total):
    t = time.perf_counter()
    left = total
    while left:
        batch = min(left, 10_000)
        forqapp.send_many(queue, items(batch))
        left -= batch
    return time.perf_counter() - t

def claim_ack(queue, count):
    claim, ack = services.claim, forqapp.ack
    t, c = time.perf_counter(), time.process_time()
    for _ in range(count):
        ack(claim(queue))
    return count / (time.perf_counter() - t), count / (time.process_time() - c)

out["fill"]["deep"] = fill("deep", deep)
fill("shallow", shallow)
with connection.cursor() as cur:
    cur.execute("ANALYZE")  # what a long-running database has (forq_jobs' optimize runs it)
claim_ack("deep", 200); claim_ack("shallow", 200)  # warm up
for r in range(rounds):
    for order in (("fifo", "lifo") if r % 2 == 0 else ("lifo", "fifo")):
        for queue in (("shallow", "deep") if r % 2 == 0 else ("deep", "shallow")):
            forqapp.configure_queue(queue, ordering=order)
            if queue == "shallow":  # keep it at `shallow` messages: top up what the last round took
                missing = shallow - forqapp.queue_info(queue).counts["ready"]
                if missing > 0:
                    forqapp.send_many(queue, items(missing))
            out["rates"].setdefault(f"{queue} {order}", []).append(claim_ack(queue, k))
info = forqapp.queue_info("deep")
out["deep_left"] = info.counts["ready"]

db = connection.settings_dict["NAME"]
conn = sqlite3.connect(db)
now = int(time.time() * 1000)
for order in ("fifo", "lifo"):
    sql = store_sql.PICK[order]
    params = {"queue": "deep", "now": now, "limit": 1, "among": 100, "max": 0, "ended_among": 100}
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    out["plans"][order] = [r[-1] for r in rows]
    t = time.perf_counter()
    for _ in range(1000):
        conn.execute(sql, params).fetchall()
    out["plans"][order + " µs"] = (time.perf_counter() - t) * 1000
conn.close()
print(json.dumps(out))
"""


# argv: ahead, due, claims, rounds. The same calls on both checkouts (send_many's process_after and
# claim_many exist in both). Prints {"nothing": [per s, ...], "in flight": [...], "delayed": [...]}.
AHEAD = r"""
import json, sys, time
import django
django.setup()
import forqapp
from forqapp import services

ahead, due, k, rounds, ended = (int(a) for a in sys.argv[1:6])
clock = time.perf_counter if sys.argv[6] == "wall" else time.process_time  # PostgreSQL: its server's CPU too
content = "x" * 100

def claim_ack(queue):
    claim, ack = services.claim, forqapp.ack
    t = clock()
    for _ in range(k):
        ack(claim(queue))
    return k / (clock() - t)

def fill(queue, total, process_after=None):
    for start in range(0, total, 10_000):
        forqapp.send_many(queue, [content] * min(10_000, total - start), process_after)

in_hour = int(time.time() * 1000) + 3_600_000
fill("nothing", due)
fill("in-flight", ahead)
assert len(services.claim_many("in-flight", ahead)) == ahead  # held: leased, not acked
fill("in-flight", due)
fill("delayed", ahead, in_hour)  # sent first, due in an hour
fill("delayed", due)
queues = ["nothing", "in-flight", "delayed"]
if ended:  # leases of 0 s: ended at once, due again ahead of the others (a design that claims them)
    fill("ended", ahead)
    assert len(services.claim_many("ended", ahead, visibility_timeout=0)) == ahead
    fill("ended", due)
    queues.append("ended")
from django.db import connection
if connection.vendor == "postgresql":  # fresh planner statistics, as the server's optimize job keeps them
    with connection.cursor() as cur:
        cur.execute("ANALYZE messages")
claim_ack("nothing")  # warm up
out = {}
for r in range(rounds):
    for queue in queues if r % 2 == 0 else queues[::-1]:
        out.setdefault(queue, []).append(claim_ack(queue))
print(json.dumps(out))
"""


def env_for(root: Path, db: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    return {**base, "DJANGO_SETTINGS_MODULE": "project.settings", "FORQ_DB_PATH": str(db),
            "PYTHONPATH": str(root), "FORQ_METRICS_ENABLED": "false"}


_templates: dict[Path, Path] = {}


def fresh_db(root: Path, tmp: Path, name: str) -> Path:
    """A freshly migrated database of ``root``'s schema: migrated once, then copied."""
    if root not in _templates:
        template = tmp / f"template-{len(_templates)}.sqlite3"
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=root, env=env_for(root, template),
                       check=True)
        with sqlite3.connect(template) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        _templates[root] = template
    db = tmp / f"{name}.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    shutil.copyfile(_templates[root], db)
    return db


def fresh_pg(root: Path, url: str, name: str) -> dict[str, str]:
    """The environment of ``root`` on a new PostgreSQL database ``name`` (dropped first) of the
    server of ``url``, migrated."""
    import psycopg

    parts = urlsplit(url)
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    env = {**env_for(root, Path("/nonexistent")), "DATABASE_URL": urlunsplit(parts._replace(path="/" + name))}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=root, env=env, check=True)
    return env


def drop_pg(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(urlunsplit(urlsplit(url)._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(root: Path, db: Path | dict[str, str], script: str, *args: object) -> dict:
    env = db if isinstance(db, dict) else env_for(root, db)
    proc = subprocess.run([sys.executable, "-c", script, *map(str, args)], cwd=root, env=env,
                          capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{root}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ensure_worktree(path: Path, ref: str) -> bool:
    """Check ``ref`` out at ``path`` (sharing this checkout's .venv); False when it was there."""
    if (path / "manage.py").exists():
        return False
    subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=ROOT, check=True,
                   capture_output=True)
    (path / ".venv").symlink_to(ROOT / ".venv")
    return True


def part1(args, tmp: Path) -> None:
    before = Path(args.before)
    created = ensure_worktree(before, args.before_ref)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=before, capture_output=True,
                                text=True, check=True).stdout.strip()
        runs = {"before": (before, "plain"), "after, plain": (ROOT, "plain"),
                "after, priority+attributes": (ROOT, "rich"),
                "raw sqlite3, plain (this store's SQL)": (ROOT, "raw-plain"),
                "raw sqlite3, priority+attributes": (ROOT, "raw-rich")}
        results: dict[str, list[dict]] = {name: [] for name in runs}
        started = time.perf_counter()
        for r in range(args.rounds):
            names = list(runs) if r % 2 == 0 else list(reversed(runs))
            for name in names:
                root, mode = runs[name]
                db = fresh_db(root, tmp, "round")
                results[name].append(run(root, db, RAW if mode.startswith("raw") else ROUND, mode, args.messages))
            print(f"  round {r + 1}/{args.rounds} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    finally:
        if created and not args.keep_worktree:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=True)

    print(f"\n## Part 1: in-process API, before ({args.before_ref} = {commit}) and after, same run\n")
    print(f"SQLite file, 100-byte messages; {args.messages:,} `send`, then claim+ack of them, then "
          f"{5 * args.messages:,} by `send_many` (10,000 a call); median of {args.rounds} alternating "
          "rounds, each in a fresh process on a fresh database. Messages per second of wall time, and per "
          "CPU second of the benchmark's process (less sensitive to other load on the machine); in "
          "brackets the ratio to before (✗: more than 10% slower).\n")
    ops = ("send", "claim+ack", "send_many")
    print("| messages/s | " + " | ".join(f"{op} (wall)" for op in ops) + " | "
          + " | ".join(f"{op} (CPU)" for op in ops) + " |")
    print("| --- |" + " ---: |" * (2 * len(ops)))
    med = {clock: {name: {op: statistics.median(x[clock][op] for x in rows) for op in ops}
                   for name, rows in results.items()} for clock in ("wall", "cpu")}
    for name in runs:
        cells = []
        for clock in ("wall", "cpu"):
            for op in ops:
                value = med[clock][name][op]
                cell = f"{value:,.0f}"
                if name != "before":
                    ratio = value / med[clock]["before"][op]
                    cell += f" ({ratio:.2f}×{'' if ratio >= 0.9 else ' ✗'})"
                cells.append(cell)
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nSpread of the wall-time rates over the rounds (min–max): " + "; ".join(
        f"{name} {op} {min(x['wall'][op] for x in rows):,.0f}–{max(x['wall'][op] for x in rows):,.0f}"
        for name, rows in results.items() for op in ops))


def part2(args, tmp: Path) -> None:
    db = fresh_db(ROOT, tmp, "depth")
    t = time.perf_counter()
    out = run(ROOT, db, DEPTH, args.deep, args.shallow, args.per_measure, args.depth_rounds)
    elapsed = time.perf_counter() - t
    fill = out["fill"]["deep"]
    print(f"\n## Part 2: claim+ack with {args.deep:,} messages queued vs {args.shallow:,}\n")
    print(f"Filled with `send_many` (10,000 a call, priorities -10..10, 3 attributes): {args.deep:,} in "
          f"{fill:.1f} s ({args.deep / fill:,.0f}/s). Then `services.claim` + `ack` of {args.per_measure:,} "
          f"messages per measure, {args.depth_rounds} rounds alternating queue and order (median); "
          f"{elapsed:.0f} s in all; {out['deep_left']:,} left in the deep queue.\n")
    print(f"| claim+ack | {args.shallow:,} queued | {args.deep:,} queued | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for clock, label in ((0, "per s"), (1, "per CPU-s")):
        for order in ("fifo", "lifo"):
            shallow = statistics.median(x[clock] for x in out["rates"][f"shallow {order}"])
            deep = statistics.median(x[clock] for x in out["rates"][f"deep {order}"])
            print(f"| {order.upper()}, {label} | {shallow:,.0f} | {deep:,.0f} | {deep / shallow:.2f}× |")
    for order in ("fifo", "lifo"):
        print(f"\nEXPLAIN QUERY PLAN of `PICK[{order!r}]` on the {args.deep:,}-message queue "
              f"(the pick alone: {out['plans'][order + ' µs']:.1f} µs):\n")
        for line in out["plans"][order]:
            print(f"    {line}")


def part3(args, tmp: Path) -> None:
    designs = {"before issue 12": (Path(args.before), args.before_ref, 0),
               "one claim index": (Path(args.one_index), args.one_index_ref, 1),
               "leases apart": (Path(args.leases_apart), args.leases_apart_ref, 1)}
    created = []
    try:
        results = {}
        for root, ref, _ in designs.values():
            if ensure_worktree(root, ref):
                created.append(root)
        for n, (name, (root, _, ended)) in enumerate([*designs.items(), ("this checkout", (ROOT, "", 1))]):
            if args.database_url:
                env = fresh_pg(root, args.database_url, f"forq_bench_ahead_{n}")
                try:
                    results[name] = run(root, env, AHEAD, args.ahead, 2 * args.ahead, args.ahead_claims, 3, ended,
                                        "wall")
                finally:
                    drop_pg(args.database_url, f"forq_bench_ahead_{n}")
            else:
                db = fresh_db(root, tmp, f"ahead-{n}")
                results[name] = run(root, db, AHEAD, args.ahead, 2 * args.ahead, args.ahead_claims, 3, ended,
                                    "cpu")
    finally:
        for root in created if not args.keep_worktree else []:
            subprocess.run(["git", "worktree", "remove", "--force", str(root)], cwd=ROOT, check=True)
    where = "PostgreSQL, per second of wall time" if args.database_url else "SQLite, per CPU second"
    print(f"\n## Part 3: what a claim steps over (four designs, same run; {where})\n")
    print(f"A queue of {2 * args.ahead:,} due messages, and ahead of them (sent first) nothing, {args.ahead:,} "
          f"messages in flight (claimed, not acked), {args.ahead:,} messages delayed by an hour, or "
          f"{args.ahead:,} deliveries whose leases have ended. `services.claim` + `ack` of {args.ahead_claims} "
          f"messages, {where.split(', ')[1]} (median of 3); in brackets, the ratio to the leases-apart design "
          f"(the one this checkout replaces).\n")
    queues = ("nothing", "in-flight", "delayed", "ended")
    print(f"| claim+ack {'per s' if args.database_url else 'per CPU-s'} | nothing ahead | {args.ahead:,} in flight ahead | {args.ahead:,} delayed ahead "
          f"| {args.ahead:,} ended leases ahead |")
    print("| --- | ---: | ---: | ---: | ---: |")
    reference = results["leases apart"]
    for name, out in results.items():
        cells = []
        for q in queues:
            if q not in out:
                cells.append("(not claimable)")
                continue
            figure = statistics.median(out[q])
            ratio = "" if name == "leases apart" else f" ({figure / statistics.median(reference[q]):.2f}×)"
            cells.append(f"{figure:,.0f}{ratio}")
        print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="part 1: alternating rounds (default 5)")
    parser.add_argument("--messages", type=int, default=5_000, help="part 1: messages per round (default 5,000)")
    parser.add_argument("--before", default="/tmp/bench-before", help="worktree of the design before issue 12")
    parser.add_argument("--before-ref", default=BEFORE_REF)
    parser.add_argument("--one-index", default="/tmp/bench-one-index", help="part 3: worktree of --one-index-ref")
    parser.add_argument("--one-index-ref", default=ONE_INDEX_REF)
    parser.add_argument("--leases-apart", default="/tmp/bench-leases-apart",
                        help="part 3: worktree of --leases-apart-ref")
    parser.add_argument("--leases-apart-ref", default=LEASES_APART_REF)
    parser.add_argument("--keep-worktree", action="store_true", help="do not remove a worktree this run created")
    parser.add_argument("--deep", type=int, default=1_000_000, help="part 2: messages in the deep queue")
    parser.add_argument("--shallow", type=int, default=1_000)
    parser.add_argument("--per-measure", type=int, default=500, help="part 2: claim+ack per measure")
    parser.add_argument("--depth-rounds", type=int, default=7)
    parser.add_argument("--ahead", type=int, default=10_000, help="part 3: messages ahead of the due ones")
    parser.add_argument("--ahead-claims", type=int, default=100, help="part 3: claim+ack per measure")
    parser.add_argument("--skip", choices=("part1", "part2", "part3"), action="append", default=[])
    parser.add_argument("--database-url", help="part 3 on PostgreSQL: a server URL (a fresh database per design "
                                               "is made on it, and dropped)")
    args = parser.parse_args()
    if shutil.which("git") is None:
        sys.exit("git is needed (the before checkout is a git worktree)")
    tmp = Path(tempfile.mkdtemp(prefix="forq-queues-bench-"))
    started = time.perf_counter()
    try:
        if "part1" not in args.skip:
            part1(args, tmp)
        if "part2" not in args.skip:
            part2(args, tmp)
        if "part3" not in args.skip:
            part3(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n({time.perf_counter() - started:.0f} s in all, {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
