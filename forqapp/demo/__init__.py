"""``manage.py forq_demo``: demo queues, messages, dead letters, a schedule and task results, so a
newcomer's admin UI has something to show.

Everything goes through forqapp's Python API (``services``, ``schedules``, the jobs, the Tasks
backend), as a user's code would: the failures are real deliveries that failed, moved to their DLQ
by the ``failed`` job. Every name starts with ``demo-`` (the quick start's ``demo`` queue counts as
demo data too), so :func:`other_data` can tell a database that holds something else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .. import services
from ..services import schedules
from ..tasks.discovery import uses_forq_backend
from ..tasks.models import TaskRecord
from ..vocab import DLQ_SUFFIX
from ..worker import jobs

PREFIX = "demo-"

# name → policy: priorities need none (a message's own), the rest show the policy cells.
QUEUES: dict[str, dict[str, Any]] = {
    "demo-orders": {"max_attempts": 3, "visibility_timeout": 120, "backoff": [2_000, 10_000, 60_000]},
    "demo-emails": {"rate": "30/m", "max_in_flight": 2, "retention": timedelta(hours=6)},
    "demo-webhooks": {"max_attempts": 1, "visibility_timeout": 30},
    "demo-reports": {"ordering": "lifo", "paused": True},
}
SCHEDULES: dict[str, dict[str, Any]] = {
    "demo-nightly-report": {"queue": "demo-reports", "content": '{"report": "daily-sales"}', "cron": "0 3 * * *"},
    "demo-heartbeat": {"queue": "demo-emails", "content": '{"ping": true}', "every": 600},
}
TASK_PATH = "forqapp.demo.tasks."


@dataclass
class Filled:
    """What :func:`fill` made (the command prints it; the tests read it)."""

    queues: list[str] = field(default_factory=list)
    dead_letters: int = 0
    schedules: list[str] = field(default_factory=list)
    tasks: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def is_demo(queue: str) -> bool:
    base = queue.removesuffix("-dlq")
    return base == "demo" or base.startswith(PREFIX)


def present() -> bool:
    """Whether the demo was made already (its first queue exists)."""
    return any(q.name == "demo-orders" for q in services.list_queues())


def other_data() -> list[str]:
    """What the database holds besides the demo: queues with messages or a policy of their own,
    schedules, task results of other tasks (a few names of each)."""
    found = []
    task_queues = _task_queues()  # judged by their task results, below
    queues = [q.name for q in services.list_queues() if not is_demo(q.name) and q.name.removesuffix("-dlq")
              not in task_queues and (any(q.counts.values()) or q.overrides or q.paused)]
    if queues:
        found.append("queues " + ", ".join(queues[:5]) + (" …" if len(queues) > 5 else ""))
    names = [s.name for s in schedules.list_schedules() if not s.name.startswith(PREFIX)]
    if names:
        found.append("schedules " + ", ".join(names[:5]) + (" …" if len(names) > 5 else ""))
    if uses_forq_backend():
        if TaskRecord.objects.exclude(task_path__startswith=TASK_PATH).exists():
            found.append("task results")
    return found


def _task_queues() -> set[str]:
    if not uses_forq_backend():
        return set()
    from . import tasks as demo_tasks  # (the Tasks framework: loaded on use)

    return demo_tasks.task_queues()


def remove() -> None:
    """The demo's queues (their messages and DLQs) and schedules. Task results stay until the
    ``task-results`` job prunes them (forqapp has no call that deletes one result)."""
    for info in services.list_queues():
        if is_demo(info.name):
            services.delete_queue(info.name)
            services.delete_dead(info.name + DLQ_SUFFIX)  # (a DLQ is a queue of its own)
    for scheduled in schedules.list_schedules():
        if scheduled.name.startswith(PREFIX):
            schedules.unschedule(scheduled.name)


def fill() -> Filled:
    out = Filled()
    for name, policy in QUEUES.items():
        services.configure_queue(name, **{k: v for k, v in policy.items() if k != "paused"})
        out.queues.append(name)

    # demo-orders: two orders a consumer could not take (urgent, so claimed first): failed at once
    # (fatal_error), kept with their error. Then priorities, a delayed order, and two deliveries in
    # flight (leased for an hour, so the pages show them in flight while you look).
    services.send_many("demo-orders", [
        {"content": json.dumps({"order": 1100, "customer": "mallory", "card": "4000-0000"}), "priority": 20},
        {"content": json.dumps({"order": 1101, "customer": "trent", "card": "expired"}), "priority": 20}])
    for message, error in zip(services.receive_many("demo-orders", 2),
                              ("ValueError: card declined by the issuer", "ValueError: card expired"), strict=True):
        services.fail(message, error)
    services.send_many("demo-orders", [
        {"content": json.dumps({"order": n, "customer": customer, "total": 12.5 * (n - 1000)}), "priority": priority,
         "attributes": {"source": "shop"}}
        for n, (customer, priority) in enumerate([("ada", 0), ("grace", 0), ("linus", 5), ("barbara", 10),
                                                  ("ken", 0), ("margaret", 0)], start=1001)])
    services.send("demo-orders", json.dumps({"order": 1099, "customer": "dennis", "note": "pre-order"}),
                  delay=timedelta(hours=2))
    services.receive_many("demo-orders", 2, visibility_timeout=3600)  # neither acked nor nacked: in flight

    # demo-webhooks: one attempt only; a nack uses it up (max_attempts_reached).
    services.send_many("demo-webhooks", [json.dumps({"event": "order.paid", "order": 1003}),
                                         json.dumps({"event": "order.shipped", "order": 1001})])
    for message in services.receive_many("demo-webhooks", 1):
        services.nack(message, "HTTPError: 503 Service Unavailable from https://hooks.example.com/orders")
    # demo-emails: rate-limited, with attributes; demo-reports: paused, LIFO.
    services.send_many("demo-emails", [{"content": json.dumps({"to": f"{who}@example.com", "template": "welcome"}),
                                        "attributes": {"template": "welcome"}} for who in ("ada", "grace", "ken")])
    services.send_many("demo-reports", [json.dumps({"report": name}) for name in ("weekly", "monthly")])
    services.configure_queue("demo-reports", paused=True)


    out.dead_letters = jobs.failed()  # the failed deliveries to their DLQ, as the server's job does
    for name, spec in SCHEDULES.items():
        schedules.schedule(name, **spec)
        out.schedules.append(name)
    out.tasks = _tasks(out.notes)
    return out


def _tasks(notes: list[str]) -> dict[str, int]:
    """A few results of the Django Tasks backend, run by forq_worker's worker: done, failed,
    waiting. Only when ``TASKS`` has a ``ForqBackend`` whose queues hold nothing else."""
    if not uses_forq_backend():
        notes.append("no task results: TASKS has no forqapp.tasks.ForqBackend")
        return {}

    if TaskRecord.objects.filter(task_path__startswith=TASK_PATH).exists():
        notes.append("task results: kept from an earlier run")
        return {}
    from . import tasks as demo_tasks  # (the Tasks framework: loaded on use)

    return demo_tasks.make_results(notes)
