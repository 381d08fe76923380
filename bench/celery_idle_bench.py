"""What an idle Celery worker costs: CPU seconds of the whole worker (``celery -A tests.celeryapp
worker``, prefork, 2 processes) over ``--seconds`` with nothing to do, on ``forq://`` (SQLite, and
PostgreSQL with ``--postgres URL``) and, as the same-run reference, on Redis (when one answers at
``--redis``).

    .venv/bin/python bench/celery_idle_bench.py [--seconds 20] [--postgres postgres://…/db] [--redis redis://127.0.0.1:6379/5]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """utime + stime (s) of ``root`` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
            ticks[int(entry)] = int(fields[11]) + int(fields[12])
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total / CLK_TCK


def idle_cpu(label: str, env: dict[str, str], seconds: float, tmp: str) -> None:
    py = str(ROOT / ".venv" / "bin" / "python")
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    with open(Path(tmp) / f"worker-{abs(hash(label))}.log", "w") as log:
        proc = subprocess.Popen([py, "-m", "celery", "-A", "tests.celeryapp", "worker", "--pool=prefork",
                                 "--concurrency=2", "--loglevel=WARNING"], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            time.sleep(12)  # started, connected, settled
            before = tree_cpu(proc.pid)
            time.sleep(seconds)
            used = tree_cpu(proc.pid) - before
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    print(f"  {label:<28} {used:5.2f} s CPU over {seconds:.0f} s idle ({100 * used / seconds:.2f} % of a core)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--postgres", default=None, help="also forq:// on this PostgreSQL database")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/5")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "FORQ_DB_PATH": f"{tmp}/celery.sqlite3"}
        base.pop("DATABASE_URL", None)
        print(f"idle Celery worker (prefork, 2 processes), {os.cpu_count()} cores", flush=True)
        idle_cpu("forq:// SQLite", base, args.seconds, tmp)
        if args.postgres:
            idle_cpu("forq:// PostgreSQL", {**base, "DATABASE_URL": args.postgres}, args.seconds, tmp)
        redis = urlparse(args.redis)
        try:
            socket.create_connection((redis.hostname or "127.0.0.1", redis.port or 6379), timeout=1).close()
        except OSError:
            print("  redis: none answers, no reference")
            return
        idle_cpu("reference: Redis", {**base, "FORQ_CELERY_BROKER": args.redis}, args.seconds, tmp)


if __name__ == "__main__":
    sys.exit(main())
