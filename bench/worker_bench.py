"""Worker benchmark: drain pre-sent messages with a no-op consumer, and idle pickup latency.

    .venv/bin/pip install -r bench/requirements.txt
    .venv/bin/python bench/worker_bench.py [--messages 20000] [--concurrency 1 4 16] [--processes 2]
                                           [--skip-others]

Forq drains with ``forq_worker``'s :class:`~forqapp.worker.Worker` in this process (threads) and
with several ``manage.py forq_worker --burst`` processes (wall time, start-up included). Pickup
latency: a ``forq_worker`` process waits on an empty queue; this process sends one message every
20 ms; the handler records send → handler start. For comparison, the same drain with huey's
SqliteHuey (thread workers) and django-tasks' database backend (``db_worker``), both on SQLite
files in the same temporary directory. Every figure is printed as a Markdown table row.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = "x" * 100


def setup_django(directory: Path) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["FORQ_DB_PATH"] = str(directory / "forq.sqlite3")
    os.environ.setdefault("FORQ_AUTH_SECRET", "bench-secret-0123456789abcdef-0123456789")
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    os.environ["FORQ_LOG_LEVEL"] = "WARNING"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def send(queue: str, n: int) -> float:
    import forqapp

    started = time.perf_counter()
    for i in range(0, n, 1000):
        forqapp.send_many(queue, [PAYLOAD] * min(1000, n - i))
    return n / (time.perf_counter() - started)


def forq_threads(n: int, concurrency: int, prefetch: int | None) -> float:
    from forqapp.worker.consumers import registry
    from forqapp.worker.runner import Worker

    send("bench-noop", n)
    worker = Worker({"bench-noop": registry()["bench-noop"]}, concurrency=concurrency,
                    prefetch=prefetch, burst=True)
    started = time.perf_counter()
    counts = worker.run()
    elapsed = time.perf_counter() - started
    assert counts.get("ack") == n, counts
    return n / elapsed


def manage(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT,
                            env={**os.environ, **(env or {})})


def forq_processes(n: int, processes: int, concurrency: int, prefetch: int) -> float:
    send("bench-noop", n)
    started = time.perf_counter()
    manage("forq_worker", "bench-noop", "--burst", "--processes", str(processes), "-c", str(concurrency),
           "--prefetch", str(prefetch), "-v0").wait()
    elapsed = time.perf_counter() - started
    from forqapp import services

    assert not [d for d in services.queue_depths() if d[0] == "bench-noop"]
    return n / elapsed


def forq_latency(directory: Path, samples: int = 200) -> tuple[float, float]:
    import forqapp

    log = directory / "latency.log"
    proc = manage("forq_worker", "bench-latency", "-v0", env={"FORQ_BENCH_LATENCY_LOG": str(log)})
    time.sleep(2.0)
    for _ in range(samples):
        forqapp.send("bench-latency", f"{time.time():20.6f}" + PAYLOAD[:80])
        time.sleep(0.02)
    deadline = time.time() + 10
    while time.time() < deadline and (not log.exists() or len(log.read_text().split()) < samples):
        time.sleep(0.1)
    proc.terminate()
    proc.wait()
    values = sorted(float(v) * 1000 for v in log.read_text().split())
    return statistics.median(values), values[int(len(values) * 0.99) - 1]


def huey_drain(directory: Path, n: int, workers: int) -> tuple[float, float]:
    import threading

    from huey import SqliteHuey

    huey = SqliteHuey(filename=str(directory / f"huey-{workers}.db"))
    done = {"n": 0}
    lock = threading.Lock()
    finished = threading.Event()

    @huey.task()
    def noop(payload):
        with lock:
            done["n"] += 1
            if done["n"] >= n:
                finished.set()

    started = time.perf_counter()
    for _ in range(n):
        noop(PAYLOAD)
    enqueue = n / (time.perf_counter() - started)
    consumer = huey.create_consumer(workers=workers, worker_type="thread", periodic=False,
                                    initial_delay=0.001, max_delay=0.01)
    started = time.perf_counter()
    consumer.start()
    finished.wait(600)
    elapsed = time.perf_counter() - started
    consumer.stop(graceful=True)
    return enqueue, n / elapsed


def django_tasks_drain(directory: Path, n: int) -> tuple[float, float]:
    """django-tasks-db in a project of its own (another settings module), drained by db_worker."""
    env = {"DJANGO_SETTINGS_MODULE": "bench.tasks_settings",
           "FORQ_BENCH_TASKS_DB": str(directory / "tasks.sqlite3")}
    script = (
        "import time, django; django.setup();"
        "from django.core.management import call_command; call_command('migrate', verbosity=0);"
        "from bench.benchapp.tasks import noop; from django.db import transaction;"
        f"t=time.perf_counter();\n"
        f"for _ in range({n}): noop.enqueue('{PAYLOAD}')\n"
        f"print({n}/(time.perf_counter()-t))"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, **env},
                         capture_output=True, text=True, check=True)
    enqueue = float(out.stdout.strip().splitlines()[-1])
    started = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "db_worker", "--batch", "--interval", "0",
                    "--no-startup-delay", "-v0"],
                   cwd=ROOT, env={**os.environ, **env}, check=True, capture_output=True)
    return enqueue, n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--others-messages", type=int, default=5_000,
                        help="messages for huey and django-tasks (they are slower)")
    parser.add_argument("--skip-others", action="store_true")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="forq-bench-"))
    setup_django(directory)
    n = args.messages
    print("| system | setting | messages | msgs/s |\n| --- | --- | --- | --- |")
    print(f"| forq send_many (1,000/txn) | | {n} | {send('bench-warm', n):,.0f} |", flush=True)
    for c in args.concurrency:
        print(f"| forq_worker (in-process) | --concurrency {c} | {n} | {forq_threads(n, c, None):,.0f} |",
              flush=True)
    for c in args.concurrency:
        rate = forq_threads(n, c, 100)
        print(f"| forq_worker (in-process) | --concurrency {c} --prefetch 100 | {n} | {rate:,.0f} |", flush=True)
    if args.processes > 1:
        for c, prefetch in ((4, 4), (4, 100), (16, 100)):
            rate = forq_processes(n, args.processes, c, prefetch)
            print(f"| forq_worker --processes {args.processes} (wall, incl. start-up) | -c {c} --prefetch "
                  f"{prefetch} | {n} | {rate:,.0f} |", flush=True)
    p50, p99 = forq_latency(directory)
    print(f"\nforq_worker idle pickup latency (send → handler start, other process): "
          f"p50 {p50:.1f} ms, p99 {p99:.1f} ms", flush=True)
    if args.skip_others:
        return
    m = args.others_messages
    for w in (1, 4):
        enqueue, drain = huey_drain(directory, m, w)
        print(f"| huey SqliteHuey enqueue (one at a time) | | {m} | {enqueue:,.0f} |")
        print(f"| huey SqliteHuey drain | {w} thread worker(s) | {m} | {drain:,.0f} |", flush=True)
    enqueue, drain = django_tasks_drain(directory, m)
    print(f"| django-tasks-db enqueue (one at a time) | | {m} | {enqueue:,.0f} |")
    print(f"| django-tasks-db db_worker drain | 1 process | {m} | {drain:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
