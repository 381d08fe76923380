"""What the staff pages read of task results: the recent ones, a page at a time, and one in full.

Read-only, and without the Tasks framework (forqapp's pages work on Django 5.2 without
``django-tasks``). The rows are those the worker writes (a task has one from its first run on);
each status is brought up to date from the task's message as ``get_result`` does it: a message in
its DLQ or failed is FAILED, under a live lease RUNNING, otherwise READY; a task whose message is
gone keeps its row's status.

The retry policy a backend applies to a queue's tasks (:func:`queue_retries`) is read from the
backends themselves, through :mod:`forqapp.tasks.retrying`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import Q

from .. import services
from ..models import Message
from ..vocab import Status
from .models import TaskRecord, TaskStatus
from .retrying import RetryPolicyError, backend_retries

PAGE_SIZE = 50
STATUSES = tuple(TaskStatus.values)


@dataclass
class TaskRow:
    """A task result as the pages show it (times in Unix ms)."""

    id: str
    task_path: str
    status: str
    queue_name: str
    queue: str
    backend: str
    priority: int
    attempts: int
    enqueued_at: int | None
    started_at: int | None
    finished_at: int | None
    updated_at: int
    # Where its message is now: its queue, its DLQ, or None (done: the message is gone).
    message_queue: str | None = None
    # Only for one result in full (:func:`get`):
    call: Any = None
    return_value: str | None = None
    errors: list[dict[str, str]] = field(default_factory=list)
    worker_ids: list[str] = field(default_factory=list)

    @property
    def cursor(self) -> str:
        """This row's place in the list (``?before=`` of the next page)."""
        return f"{self.updated_at}_{self.id}"


def _status(row_status: str, message: dict | None, now: int) -> str:
    if message is None:
        return row_status
    if message["is_dlq"] or message["status"] == Status.FAILED:
        return TaskStatus.FAILED
    if message["status"] == Status.PROCESSING and message["process_after"] > now:
        return TaskStatus.RUNNING
    return TaskStatus.READY


def _messages(ids: list[str], using: str) -> dict[str, dict]:
    rows = Message.objects.using(using).filter(id__in=ids).values("id", "queue", "is_dlq", "status",
                                                                  "process_after", "attempts")
    return {m["id"]: m for m in rows}


def _row(record: TaskRecord, message: dict | None, now: int) -> TaskRow:
    attempts = len(record.worker_ids_list())
    if message is not None:
        attempts = max(attempts, message["attempts"])
    return TaskRow(
        id=record.id, task_path=record.task_path, status=str(_status(record.status, message, now)),
        queue_name=record.queue_name, queue=record.queue, backend=record.backend, priority=record.priority,
        attempts=attempts, enqueued_at=record.enqueued_at, started_at=record.started_at,
        finished_at=None if message is not None and not message["is_dlq"] else record.finished_at,
        updated_at=record.updated_at, message_queue=None if message is None else message["queue"],
    )


def parse_cursor(value: str) -> tuple[int, str] | None:
    """``<updated_at>_<id>`` (a row's :attr:`TaskRow.cursor`); None if it is not one."""
    when, _, result_id = value.partition("_")
    if not when.isdigit() or len(when) > 16 or not result_id or len(result_id) > 36:
        return None
    return int(when), result_id


def recent(*, status: str | None = None, before: tuple[int, str] | None = None, limit: int = PAGE_SIZE,
           using: str | None = None) -> tuple[list[TaskRow], bool]:
    """(the ``limit`` most recently updated results, newest first, whether more follow): those
    after the cursor ``before``, with the row status ``status`` (one of :data:`STATUSES`) if
    given. Two reads, whatever the page: the rows, and their messages."""
    using = using or services.alias()
    qs = TaskRecord.objects.using(using).defer("content", "return_value", "errors")
    if status:
        qs = qs.filter(status=status)
    if before is not None:
        when, result_id = before
        qs = qs.filter(Q(updated_at__lt=when) | Q(updated_at=when, id__lt=result_id))
    records = list(qs.order_by("-updated_at", "-id")[: limit + 1])
    more = len(records) > limit
    records = records[:limit]
    messages = _messages([r.id for r in records], using)
    now = services.now_ms()
    return [_row(r, messages.get(r.id), now) for r in records], more


def get(result_id: str, *, using: str | None = None) -> TaskRow | None:
    """One result in full (its arguments, return value, errors and workers); None if it has no row."""
    using = using or services.alias()
    record = TaskRecord.objects.using(using).filter(id=result_id).first()
    if record is None:
        return None
    row = _row(record, _messages([record.id], using).get(record.id), services.now_ms())
    try:
        row.call = json.loads(record.content).get("call")
    except (ValueError, AttributeError):
        row.call = record.content
    row.return_value = record.return_value
    row.errors = record.errors_list()
    row.worker_ids = record.worker_ids_list()
    return row


@dataclass(frozen=True)
class BackendRetries:
    """The retries a ``ForqBackend`` applies to the tasks of one of its queues."""

    alias: str
    queue_name: str
    max_attempts: int | None  # None: the queue's
    backoff: Any  # None: the queue's; seconds, a list of them, or a function
    problem: str | None = None  # OPTIONS the backend refuses (forqapp.E063)


def queue_retries(queue: str) -> list[BackendRetries]:
    """The ``ForqBackend`` s (or subclasses) of ``settings.TASKS`` that run tasks on the forqapp
    queue ``queue`` (its name with their ``queue_prefix``), each with the retry policy from its
    ``OPTIONS`` (a task's own ``@retries`` overrides it). Empty without the Tasks framework or
    such a backend."""
    aliases = list(getattr(settings, "TASKS", None) or {})
    if not aliases:
        return []
    try:
        from .backend import ForqBackend  # the Tasks framework is optional (Django 5.2 without django-tasks)
        from .compat import task_backends
    except ImportError:
        return []
    found = []
    for alias in aliases:
        try:
            backend = task_backends[alias]
        except Exception:  # noqa: BLE001, S112 - a backend that cannot load: nothing to show (its check says why)
            continue
        if not isinstance(backend, ForqBackend) or queue not in backend.forq_queues():
            continue
        queue_name = queue.removeprefix(backend.queue_prefix)
        try:
            policy = backend_retries(backend)
        except RetryPolicyError as exc:
            found.append(BackendRetries(alias, queue_name, None, None, str(exc)))
            continue
        found.append(BackendRetries(alias, queue_name, policy.max_attempts, policy.backoff))
    return found
