"""Message groups benchmark: what groups cost a claim, and what the number of groups costs it.

    .venv/bin/python bench/groups_bench.py [--rounds 3] [--messages 5000] [--groups 10000]
        [--deep 1000000] [--deep-groups 100000] [--base-ref 973eda6] [--database-url postgres://…]
        [--parts 123] [--compare REV] [--clock wall|cpu]

Every workload runs in a fresh subprocess on a fresh database (a SQLite file in a temporary
directory; with ``--database-url``, a fresh PostgreSQL database on that server), in-process Python
API, 1-byte messages, one message per claim (``services.claim`` then ``services.ack``). Figures are
claim+ack per second of wall time (``--clock cpu``: of the process's CPU time, user and system, which
a shared machine's other work disturbs less); each table prints its same-run reference and the ratio.

1. **Groups against none.** ``--messages`` messages spread over ``--groups`` groups (sent
   interleaved: one per group in turn), against the same number of messages without a group; no
   group limits (the fair turn alone), then ``group_concurrency=1``. Goal: ≥ 0.70. With
   ``--compare REV``, the same three workloads of the commit ``REV`` too (a temporary git worktree
   sharing this checkout's ``.venv``), in the same rounds, in a table of their own: before and after.
2. **The number of groups.** ``--deep`` messages over ``--deep-groups`` groups against 1,000 messages
   over as many groups in proportion (the same messages per group), then ``--messages`` claim+ack
   from each. Goal: within 10%.
3. **Messages without a group, before and after.** The ungrouped claim+ack of this checkout against
   ``--base-ref`` (the commit before groups, checked out into a temporary git worktree sharing this
   checkout's ``.venv``), same run: the claim path of messages without a group must not be slower.

Rounds alternate the order of the runs; the tables show each figure's median over the rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
BASE_REF = "973eda6"  # the last commit before message groups

WORKLOAD = r'''
import os, sys, time, gc
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
sys.path.insert(0, os.getcwd())
import django; django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
import forqapp
from forqapp import services
mode, n, groups, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if mode == "limited":
    forqapp.configure_queue("b", group_concurrency=1)
if mode == "plain":
    for start in range(0, total, 10_000):
        forqapp.send_many("b", ["x"] * min(10_000, total - start))
else:
    # interleaved: message k in group k % groups
    for start in range(0, total, 10_000):
        forqapp.send_many("b", [{"content": "x", "group": f"g{k % groups}"}
                                for k in range(start, min(total, start + 10_000))])
gc.collect()
clock = time.process_time if os.environ.get("GROUPS_BENCH_CLOCK") == "cpu" else time.perf_counter
t = clock()
for _ in range(n):
    m = services.claim("b")
    services.ack(m)
print(n / (clock() - t))
'''


class Databases:
    """A fresh database per run: a SQLite file, or a PostgreSQL database on ``url``'s server."""

    def __init__(self, url: str | None, clock: str = "wall"):
        self.url, self.clock = url, clock

    def run(self, checkout: Path, *args: object) -> float:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "FORQ_DB_PATH": str(Path(tmp) / "b.sqlite3"), "GROUPS_BENCH_CLOCK": self.clock}
            env.pop("DATABASE_URL", None)
            name = None
            if self.url:
                name = f"forq_groups_bench_{uuid.uuid4().hex[:8]}"
                self._admin(f'CREATE DATABASE "{name}"')
                parts = urlsplit(self.url)
                env["DATABASE_URL"] = urlunsplit(parts._replace(path="/" + name))
            try:
                out = subprocess.run([sys.executable, "-c", WORKLOAD, *map(str, args)], cwd=checkout, env=env,
                                     capture_output=True, text=True)
                if out.returncode:
                    raise RuntimeError(out.stderr[-3000:])
                return float(out.stdout.split()[-1])
            finally:
                if name:
                    self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _admin(self, sql: str) -> None:
        import psycopg

        parts = urlsplit(self.url or "")
        with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
            conn.execute(sql)


def table(title: str, rows: dict[str, list[float]], reference: str) -> None:
    print(f"\n{title}")
    ref = statistics.median(rows[reference])
    for name, values in rows.items():
        median = statistics.median(values)
        print(f"  {name:<48} {median:>9,.0f} /s   x{median / ref:.2f}   ({', '.join(f'{v:,.0f}' for v in values)})")


def worktree(rev: str) -> Path:
    """The commit ``rev`` checked out into a temporary git worktree sharing this checkout's ``.venv``."""
    path = Path(tempfile.mkdtemp(prefix="groups-bench-"))
    subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], cwd=ROOT, check=True, capture_output=True)
    (path / ".venv").symlink_to(ROOT / ".venv")
    return path


def drop_worktree(path: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--deep", type=int, default=1_000_000)
    parser.add_argument("--deep-groups", type=int, default=100_000)
    parser.add_argument("--base-ref", default=BASE_REF)
    parser.add_argument("--database-url", help="run on PostgreSQL (a fresh database per run on this server)")
    parser.add_argument("--parts", default="123")
    parser.add_argument("--compare", metavar="REV", help="part 1 of the commit REV too, in the same rounds")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="per second of wall time, or of the process's CPU time (user + system: steadier "
                             "on a shared machine, blind to waits)")
    args = parser.parse_args()
    db = Databases(args.database_url, args.clock)
    n, per_group = args.messages, args.deep // args.deep_groups
    print(f"groups_bench: {'PostgreSQL' if args.database_url else 'SQLite'}, {args.rounds} round(s), "
          f"claim+ack of {n:,} messages a run, per second of {'CPU' if args.clock == 'cpu' else 'wall'} time")

    if "1" in args.parts:
        checkouts = [("", ROOT)]
        if args.compare:
            checkouts.append((f"{args.compare}: ", worktree(args.compare)))
        try:
            names = ("no group (reference)", f"{args.groups:,} groups, no limit",
                     f"{args.groups:,} groups, group_concurrency=1")
            workloads = (("plain", n, 0, n), ("grouped", n, args.groups, n), ("limited", n, args.groups, n))
            tables = {label: {name: [] for name in names} for label, _ in checkouts}
            for r in range(args.rounds):
                runs = [(label, checkout, name, a) for label, checkout in checkouts
                        for name, a in zip(names, workloads, strict=True)]
                for label, checkout, name, a in (runs if r % 2 == 0 else runs[::-1]):
                    tables[label][name].append(db.run(checkout, *a))
            for label, rows in tables.items():
                table(f"1. {label}claim+ack, {n:,} messages: over {args.groups:,} groups against none "
                      "(goal: >= 0.70)", rows, names[0])
        finally:
            for _label, checkout in checkouts[1:]:
                drop_worktree(checkout)

    if "2" in args.parts:
        small_groups = max(1, 1_000 // per_group)
        small = f"1,000 messages over {small_groups:,} groups (reference)"
        deep = f"{args.deep:,} messages over {args.deep_groups:,} groups"
        rows = {small: [], deep: []}
        for r in range(args.rounds):
            runs = [(small, ("grouped", min(n, 1_000), small_groups, 1_000)),
                    (deep, ("grouped", min(n, 1_000), args.deep_groups, args.deep))]
            for name, a in (runs if r % 2 == 0 else runs[::-1]):
                t = time.perf_counter()
                rows[name].append(db.run(ROOT, *a))
                print(f"  ({name}: run took {time.perf_counter() - t:.0f} s with the load)", flush=True)
        table(f"2. claim+ack of {min(n, 1_000):,} messages: {args.deep:,} queued against 1,000 (goal: within 10%)",
              rows, small)

    if "3" in args.parts:
        base = worktree(args.base_ref)
        try:
            rows = {f"before groups ({args.base_ref}, reference)": [], "this checkout": []}
            for r in range(args.rounds):
                runs = [(f"before groups ({args.base_ref}, reference)", base), ("this checkout", ROOT)]
                for name, checkout in (runs if r % 2 == 0 else runs[::-1]):
                    rows[name].append(db.run(checkout, "plain", n, 0, n))
            table(f"3. claim+ack of {n:,} messages without a group: before and after groups (goal: no slower)",
                  rows, f"before groups ({args.base_ref}, reference)")
        finally:
            drop_worktree(base)

if __name__ == "__main__":
    main()
