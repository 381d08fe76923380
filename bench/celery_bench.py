"""Celery through a real Celery worker: tasks per second on ``forq://``, and in the same run on
kombu's SQS transport pointed at forqapp's SQS listener and on kombu's Redis transport.

    .venv/bin/python bench/celery_bench.py [--tasks 1000] [--rounds 3] [--pool prefork] [--concurrency 2]
        [--brokers forq,sqs,sqs-tuned,redis] [--redis redis://127.0.0.1:6379/15]

A SQLite file in a temporary directory (migrated first), or the database of ``DATABASE_URL``; the
tasks are ``tests.celeryapp.record`` (one line appended to a file per run). Each round, for each
broker in turn: the worker (``celery -A tests.celeryapp worker``) is started and runs one task
(so it is up), then this process sends ``--tasks`` tasks with ``delay()`` and waits until every task
has run. Figures: sends per second, and tasks per second from the first send to the last run (the
worker runs while the sends go on); the median over the rounds, and each broker's ratio to
``forq://``.

- ``sqs``: ``forq_serve`` with ``FORQ_SQS_ADDR`` on the same database, and the worker on
  ``sqs://forq-root:SECRET@127.0.0.1:PORT`` with kombu's default polling options
  (``wait_time_seconds`` 10, ``polling_interval`` 1), as a user switching from Amazon SQS would
  have them, and again with ``polling_interval`` 0 (``sqs-tuned``). Needs ``pycurl``
  (bench/requirements.txt).
- ``redis``: a Redis server at ``--redis`` (not started here; the broker is skipped when none
  answers). Needs ``redis`` (bench/requirements.txt).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
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


SECRET = "celery-bench-secret-0123456789abcdef-0123"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sqs_server(tmp: Path) -> tuple[subprocess.Popen, str]:
    """``forq_serve`` with the SQS listener on a free port; the broker URL that reaches it."""
    port, sqs_port = free_port(), free_port()
    env = {**os.environ, "FORQ_AUTH_SECRET": SECRET, "FORQ_API_ADDR": f"127.0.0.1:{port}",
           "FORQ_SQS_ADDR": f"127.0.0.1:{sqs_port}"}
    log = open(tmp / "server.log", "wb")  # noqa: SIM115 (the server's, for its life)
    proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "forq_serve", "--no-ui"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", sqs_port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                sys.exit(f"the SQS listener did not start:\n{(tmp / 'server.log').read_text()[-3000:]}")
            time.sleep(0.1)
    return proc, f"sqs://forq-root:{SECRET}@127.0.0.1:{sqs_port}"


def redis_up(url: str) -> bool:
    try:
        import redis
    except ImportError:
        print("redis: skipped (the redis package is not installed: bench/requirements.txt)")
        return False
    try:
        client = redis.Redis.from_url(url)
        client.ping()
        client.flushdb()
        return True
    except redis.RedisError as exc:
        print(f"redis: skipped (no Redis server at {url}: {exc})")
        return False


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def one_round(name: str, broker: str, options: dict, tmp: Path, n: int, args) -> tuple[float, float]:
    """One broker's round: (sends/s, tasks/s)."""
    from celery import Celery

    from tests.celeryapp import record

    runs = tmp / f"runs-{name}-{n}.txt"
    log = tmp / f"worker-{name}-{n}.log"
    env = {**os.environ, "FORQ_CELERY_RUNS": str(runs), "FORQ_CELERY_BROKER": broker,
           "FORQ_CELERY_TRANSPORT_OPTIONS": json.dumps(options)}
    # The producer: an app of its own on this round's broker, sending the worker's task by name
    producer = Celery(broker=broker, broker_transport_options={"visibility_timeout": 30.0, **options})
    send = producer.signature(record.name).delay
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.celeryapp", "worker", f"--pool={args.pool}",
             f"--concurrency={args.concurrency}", "--loglevel=WARNING", "--without-heartbeat",
             "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        send("warm-up")  # the worker is up once it has run one task
        while count_lines(runs) < 1:
            if time.monotonic() > deadline or worker.poll() is not None:
                sys.exit(f"the {name} worker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        start = time.perf_counter()
        for i in range(args.tasks):
            send(f"t{i}")
        sent = time.perf_counter()
        deadline = time.monotonic() + args.timeout
        while count_lines(runs) < args.tasks + 1:
            if worker.poll() is not None:
                sys.exit(f"the {name} worker died:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                sys.exit(f"{name}: {count_lines(runs) - 1} of {args.tasks} tasks ran in {args.timeout} s")
            time.sleep(0.01)
        done = time.perf_counter()
    finally:
        stop(worker)
        producer.close()
    return args.tasks / (sent - start), args.tasks / (done - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pool", default="prefork")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--brokers", default="forq,sqs,sqs-tuned,redis")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a round may take")
    args = parser.parse_args()
    wanted = args.brokers.split(",")

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

    brokers: dict[str, tuple[str, dict]] = {}
    server = None
    if "forq" in wanted:
        brokers["forq"] = ("forq://", {})
    if {"sqs", "sqs-tuned"} & set(wanted):
        try:
            import pycurl  # noqa: F401  (kombu's SQS transport needs it)
        except ImportError:
            print("sqs: skipped (pycurl is not installed: bench/requirements.txt)")
        else:
            server, url = sqs_server(tmp)
            if "sqs" in wanted:
                brokers["sqs"] = (url, {"region": "us-east-1", "is_secure": False})
            if "sqs-tuned" in wanted:  # kombu's own advice for a busy queue: no pause after an empty poll
                brokers["sqs-tuned"] = (url, {"region": "us-east-1", "is_secure": False, "polling_interval": 0})
    if "redis" in wanted and redis_up(args.redis):
        brokers["redis"] = (args.redis, {})
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in brokers}
    try:
        for n in range(args.rounds):  # alternating: each round runs every broker once
            for name, (broker, options) in brokers.items():
                services.purge("celery")
                results[name].append(one_round(name, broker, options, tmp, n, args))
                sends, tasks = results[name][-1]
                print(f"round {n + 1}, {name}: {sends:,.0f} sends/s, {tasks:,.0f} tasks/s", flush=True)
    finally:
        if server is not None:
            stop(server)

    backend = "PostgreSQL" if "DATABASE_URL" in os.environ else "SQLite"
    print(f"\nCelery {args.pool} worker, concurrency {args.concurrency}, forqapp on {backend}, "
          f"{args.tasks} tasks a round, median of {args.rounds} rounds:")
    print("| broker | sends/s | tasks/s | tasks/s, forq:// ÷ this |\n| --- | ---: | ---: | ---: |")
    reference = statistics.median(t for _, t in results["forq"]) if "forq" in results else None
    labels = {"forq": "forq://", "sqs": "kombu SQS → forqapp's SQS listener (kombu's defaults)",
              "sqs-tuned": "kombu SQS → forqapp's SQS listener, `polling_interval` 0", "redis": "kombu Redis"}
    for name, rounds in results.items():
        sends, tasks = statistics.median(s for s, _ in rounds), statistics.median(t for _, t in rounds)
        ratio = f"×{reference / tasks:.2f}" if reference else "—"
        print(f"| {labels[name]} | {sends:,.0f} | {tasks:,.1f} | {ratio} |")


if __name__ == "__main__":
    main()
