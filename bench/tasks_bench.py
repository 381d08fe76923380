"""Django Tasks benchmark: enqueue and drain no-op tasks with forqapp's backend and with
django-tasks-db (the framework's reference database backend), on SQLite files, in one run.

    .venv/bin/pip install -r bench/requirements.txt
    .venv/bin/python bench/tasks_bench.py [--tasks 20000] [--concurrency 4] [--prefetch 200]

forqapp: ``noop.enqueue()`` one at a time (each its own transaction), then the same inside one
``transaction.atomic()``; drained by ``forq_worker``'s Worker in this process (threads, batched
claims and settles, a results row per task). django-tasks-db: the same enqueues in a process of its
own (``bench.tasks_settings``), drained by ``manage.py db_worker --batch`` (wall time, start-up
included, as its users run it). Every figure is a Markdown table row; the last line is the ratio
of the drains, measured in this run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = "x" * 100


def noop(payload: str) -> None:
    """The task: does nothing (a ``@task`` once Django is set up, see the end of the module)."""


def setup_django(directory: Path) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["FORQ_DB_PATH"] = str(directory / "forq.sqlite3")
    os.environ.setdefault("FORQ_AUTH_SECRET", "bench-secret-0123456789abcdef-0123456789")
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    os.environ["FORQ_LOG_LEVEL"] = "WARNING"
    import django
    from django.conf import settings

    django.setup()
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["default"],
                                  "OPTIONS": {"queue_prefix": "bench-tasks-"}}}
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def forq_enqueue(task, n: int, atomic: bool) -> float:
    from django.db import transaction

    started = time.perf_counter()
    if atomic:
        with transaction.atomic():
            for _ in range(n):
                task.enqueue(PAYLOAD)
    else:
        for _ in range(n):
            task.enqueue(PAYLOAD)
    return n / (time.perf_counter() - started)


def forq_drain(n: int, concurrency: int, prefetch: int) -> float:
    import logging

    from forqapp.tasks.discovery import with_consumers
    from forqapp.tasks.models import TaskRecord
    from forqapp.worker.runner import Worker

    logging.getLogger("django_tasks").setLevel(logging.WARNING)  # its task_started/finished INFO lines
    logging.getLogger("django.tasks").setLevel(logging.WARNING)
    worker = Worker(with_consumers({}), concurrency=concurrency, prefetch=prefetch, burst=True)
    started = time.perf_counter()
    counts = worker.run()
    elapsed = time.perf_counter() - started
    assert counts.get("ack") == n, counts
    assert TaskRecord.objects.filter(status="SUCCESSFUL").count() >= n
    return n / elapsed


def tasks_db(directory: Path, n: int) -> tuple[float, float]:
    """django-tasks-db in a project of its own: enqueue one at a time, then db_worker --batch."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.tasks_settings",
           "FORQ_BENCH_TASKS_DB": str(directory / "tasks-db.sqlite3")}
    script = (
        "import time, django; django.setup();"
        "from django.core.management import call_command; call_command('migrate', verbosity=0);"
        "from bench.benchapp.tasks import noop;"
        "t=time.perf_counter();\n"
        f"for _ in range({n}): noop.enqueue('{PAYLOAD}')\n"
        f"print({n}/(time.perf_counter()-t))"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True)
    enqueue = float(out.stdout.strip().splitlines()[-1])
    started = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "db_worker", "--batch", "--interval", "0",
                    "--no-startup-delay", "-v0"], cwd=ROOT, env=env, check=True, capture_output=True)
    drain = n / (time.perf_counter() - started)
    check = ("import django; django.setup(); from django_tasks_db.models import DBTaskResult;"
             "print(DBTaskResult.objects.filter(status='SUCCESSFUL').count())")
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True)
    assert int(done.stdout.strip()) == n, done.stdout
    return enqueue, drain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--prefetch", type=int, default=200)
    parser.add_argument("--skip-tasks-db", action="store_true")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="forq-tasks-bench-"))
    setup_django(directory)
    import bench.tasks_bench as module  # the @task, now that Django is set up

    n = args.tasks
    print("| system | what | tasks | tasks/s |\n| --- | --- | --- | --- |")
    rate = forq_enqueue(module.noop, n, atomic=False)
    print(f"| forqapp.tasks | enqueue, one transaction each | {n} | {rate:,.0f} |", flush=True)
    forq = forq_drain(n, args.concurrency, args.prefetch)
    print(f"| forqapp.tasks | drain: forq_worker -c {args.concurrency} --prefetch {args.prefetch} (in-process) "
          f"| {n} | {forq:,.0f} |", flush=True)
    rate = forq_enqueue(module.noop, n, atomic=True)
    print(f"| forqapp.tasks | enqueue, all in one transaction | {n} | {rate:,.0f} |", flush=True)
    second = forq_drain(n, args.concurrency, args.prefetch)
    print(f"| forqapp.tasks | drain again (results table holds {n:,} rows) | {n} | {second:,.0f} |", flush=True)
    if args.skip_tasks_db:
        return
    enqueue, drain = tasks_db(directory, n)
    print(f"| django-tasks-db | enqueue, one transaction each | {n} | {enqueue:,.0f} |")
    print(f"| django-tasks-db | drain: db_worker --batch (1 process, wall) | {n} | {drain:,.0f} |", flush=True)
    print(f"\nforqapp.tasks drains {forq / drain:.1f}× as fast as django-tasks-db "
          f"({forq:,.0f} vs {drain:,.0f} tasks/s, same run, same machine)")


if __name__ != "__main__":  # imported (after setup_django, or by a worker): the task itself
    from forqapp.tasks.compat import task

    noop = task(noop)  # type: ignore[assignment]

if __name__ == "__main__":
    main()
