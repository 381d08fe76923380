"""Celery on ``forq://``: tasks per second through a real Celery worker.

    .venv/bin/python bench/celery_bench.py [--tasks 2000] [--rounds 3] [--pool prefork] [--concurrency 2]

A SQLite file in a temporary directory (migrated first), or the database of ``DATABASE_URL``; the
tasks are ``tests.celeryapp.record`` (one line appended to a file per run). Each round: the worker
(``celery -A tests.celeryapp worker``) is started and waits, then this process sends ``--tasks``
tasks with ``delay()`` (autocommit: one transaction each) and waits until every task has run.
Figures: sends per second, and tasks per second from the first send to the last run (the worker
runs while the sends go on). The median over the rounds is shown.

Not measured here yet: the same worker on kombu's SQS transport pointed at forqapp's SQS face, and
on Redis.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pool", default="prefork")
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="forq-celery-bench-"))
    if "DATABASE_URL" not in os.environ:
        os.environ["FORQ_DB_PATH"] = str(tmp / "bench.sqlite3")
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    os.environ["PYTHONPATH"] = str(ROOT)
    sys.path.insert(0, str(ROOT))
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "--verbosity", "0"], check=True, cwd=ROOT)

    import django

    django.setup()
    from forqapp import services
    from tests.celeryapp import record

    sends, throughput = [], []
    for n in range(args.rounds):
        runs = tmp / f"runs-{n}.txt"
        log = tmp / f"worker-{n}.log"
        services.purge("celery")
        env = {**os.environ, "FORQ_CELERY_RUNS": str(runs)}
        with open(log, "wb") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "tests.celeryapp", "worker", f"--pool={args.pool}",
                 f"--concurrency={args.concurrency}", "--loglevel=WARNING", "--without-heartbeat",
                 "--without-gossip", "--without-mingle"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            record.delay("warm-up")  # the worker is up once it has run one task
            while count_lines(runs) < 1:
                if time.monotonic() > deadline or worker.poll() is not None:
                    sys.exit(f"the worker did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.05)
            start = time.perf_counter()
            for i in range(args.tasks):
                record.delay(f"t{i}")
            sent = time.perf_counter()
            while count_lines(runs) < args.tasks + 1:
                if worker.poll() is not None:
                    sys.exit(f"the worker died:\n{log.read_text()[-3000:]}")
                time.sleep(0.01)
            done = time.perf_counter()
        finally:
            os.kill(worker.pid, signal.SIGTERM)
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
        sends.append(args.tasks / (sent - start))
        throughput.append(args.tasks / (done - start))
        print(f"round {n + 1}: {sends[-1]:,.0f} sends/s, {throughput[-1]:,.0f} tasks/s", flush=True)

    backend = "PostgreSQL" if "DATABASE_URL" in os.environ else "SQLite"
    print(f"\nCelery {args.pool} worker, concurrency {args.concurrency}, forq:// on {backend}, "
          f"{args.tasks} tasks, median of {args.rounds}:")
    print(f"| sends/s | tasks/s |\n| ---: | ---: |\n| {statistics.median(sends):,.0f} | "
          f"{statistics.median(throughput):,.0f} |")


if __name__ == "__main__":
    main()
