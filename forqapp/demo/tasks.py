"""The Django tasks ``manage.py forq_demo`` enqueues (:mod:`forqapp.demo`): imported only when
``TASKS`` has a ``forqapp.tasks.ForqBackend`` (the Tasks framework is then installed)."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.utils import timezone

from .. import services
from ..tasks.compat import DEFAULT_TASK_QUEUE_NAME, task
from ..tasks.discovery import with_consumers
from ..tasks.retrying import retries
from ..tasks.running import forq_backends
from ..worker.runner import Worker


@task
def add(a: int, b: int) -> int:
    return a + b


@task
@retries(max_attempts=1)  # one try: a FAILED result to look at
def sales_report(region: str) -> None:
    raise ConnectionError(f"the sales database of {region} did not answer")


def task_queues() -> set[str]:
    """The forqapp queues of every ``ForqBackend``'s task queues."""
    return {q for backend in forq_backends() for q in backend.forq_queues()}


def make_results(notes: list[str]) -> dict[str, int]:
    """Enqueue the demo's tasks on the backend with the default queue and run them with a worker
    (done, failed), then one more that waits: the outcome counts, or {} (with a note) when no
    ``ForqBackend`` has that queue or it holds other tasks."""
    backend = next((b for b in forq_backends() if DEFAULT_TASK_QUEUE_NAME in b.queues), None)
    if backend is None:
        notes.append(f"no task results: no ForqBackend has the {DEFAULT_TASK_QUEUE_NAME!r} queue")
        return {}
    queue = backend.forq_queue(DEFAULT_TASK_QUEUE_NAME)
    info = next((q for q in services.list_queues() if q.name == queue), None)
    if info is not None and any(info.counts.values()):
        notes.append(f"no task results: the queue {queue} holds other tasks")
        return {}
    adder = add.using(backend=backend.alias)
    report = sales_report.using(backend=backend.alias)
    for a, b in ((2, 3), (40, 2), (7, 6)):
        adder.enqueue(a, b)
    report.enqueue("eu-west")

    # The worker's lines and the failing task's traceback are the demo's, expected: not shown.
    quiet = [logging.getLogger(name) for name in ("forqapp", "django_tasks", "django.tasks")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.CRITICAL)
    try:
        counts = Worker({queue: with_consumers({})[queue]}, concurrency=1, burst=True, start_jitter=0).run()
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)
    adder.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)  # waiting
    return {**counts, "waiting": 1}
