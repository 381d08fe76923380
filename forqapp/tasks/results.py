"""Task results: ``get_result`` (the message first, the results row second), the rows the worker
writes in bulk, and the pruning job.

Status: while the task's message exists it says READY (waiting, or its lease ran out), RUNNING
(under a live lease) or FAILED (used up its attempts, or in ``<queue>-dlq``); once the message is
gone (acked), the results row says SUCCESSFUL with the return value (or FAILED, after the DLQ let
the message go). ``errors`` hold one entry per failed attempt (class path and traceback);
``worker_ids`` one per attempt: an attempt whose worker has not reported (it is running, or its
worker was killed) shows as ``"unknown"``, so ``attempts`` always equals the deliveries.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.db import connections
from django.db.models import Exists, OuterRef, Q
from django.utils.module_loading import import_string

from .. import services
from ..vocab import Status
from .compat import (
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    set_field,
    task_backends,
)
from .messages import decode, task_time, task_time_ms

if TYPE_CHECKING:
    from ..models import Message
    from .backend import ForqBackend
    from .models import TaskRecord


# The models are imported on first use: ``@task`` imports the backend (and so this module) while
# apps load, when no model may be imported yet.
def _records() -> type[TaskRecord]:
    from .models import TaskRecord

    return TaskRecord


def _messages() -> type[Message]:
    from ..models import Message

    return Message


UNKNOWN_WORKER = "unknown"
TERMINAL = (TaskResultStatus.SUCCESSFUL.value, TaskResultStatus.FAILED.value)


def _task_packages() -> tuple[str, ...]:
    """Where a task may be imported from: the installed apps' packages and the project's (the top
    package of the settings module: ``mysite`` of ``mysite.settings.prod``)."""
    project = os.environ.get("DJANGO_SETTINGS_MODULE", "").split(".")[0]
    return (*(app.name for app in apps.get_app_configs()), project)


@lru_cache(maxsize=1024)
def load_task(path: str, queue_name: str, priority: int, backend: str, run_after_us: int | None = None) -> Task:
    """The ``@task`` at ``path`` as it was enqueued (its queue, priority and ``run_after``, Unix
    µs). Raises ImportError (also for a path that names no task).

    Its module is imported only if it is already, or belongs to an installed app or the project's
    package: a message's path is input (anyone who may send to a task queue writes it), and
    importing runs a module's code."""
    module = path.rpartition(".")[0]
    if module not in sys.modules and not any(module == p or module.startswith(p + ".")
                                             for p in _task_packages() if p):
        raise ImportError(f"{path} is not a task this process may import: module {module or path!r} is in no "
                          "installed app nor the project's package, and was not imported at startup (import it "
                          "from an AppConfig.ready())")
    task = import_string(path)
    if not isinstance(task, Task):
        raise ImportError(f"{path} is not a task (decorate it with @task)")
    if (task.queue_name, task.priority, task.backend) != (queue_name, priority, backend) or run_after_us is not None:
        task = task.using(queue_name=queue_name, priority=priority, backend=backend,
                          run_after=task_time(run_after_us) if run_after_us is not None else task.run_after)
    return task


@dataclass
class Record:
    """A task's results row as the worker builds it (a :class:`~forqapp.tasks.models.TaskRecord`)."""

    id: str
    backend: str
    queue: str
    queue_name: str
    task_path: str
    priority: int
    status: str
    content: str
    return_value: str | None = None
    errors: list[dict[str, str]] = field(default_factory=list)
    worker_ids: list[str] = field(default_factory=list)
    enqueued_at: int | None = None
    started_at: int | None = None
    last_attempted_at: int | None = None
    finished_at: int | None = None


def previous(ids: list[str], using: str) -> dict[str, tuple[list[dict[str, str]], list[str], int | None]]:
    """{id: (errors, worker_ids, started_at)} of the rows of ``ids`` that exist (earlier attempts)."""
    out = {}
    for row_id, errors, worker_ids, started_at in (_records().objects.using(using).filter(id__in=ids)
                                                   .values_list("id", "errors", "worker_ids", "started_at")):
        out[row_id] = (json.loads(errors), json.loads(worker_ids), started_at)
    return out


COLUMNS = ("id", "backend", "queue", "queue_name", "task_path", "priority", "status", "content", "return_value",
           "errors", "worker_ids", "enqueued_at", "started_at", "last_attempted_at", "finished_at", "updated_at")
UPDATED = ("queue", "priority", "status", "return_value", "errors", "worker_ids", "started_at", "last_attempted_at",
           "finished_at", "updated_at")
# One statement for many rows; SQLite (3.24+) and PostgreSQL spell the upsert alike. Plain SQL rather
# than bulk_create(update_conflicts=True): the ORM's per-field preparation cost more than the write.
UPSERT = (f"INSERT INTO forq_task_results ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * len(COLUMNS))}) "
          f"ON CONFLICT (id) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in UPDATED)}")


def write(records: list[Record], using: str) -> None:
    """Insert or replace the rows of ``records`` (one ``executemany``)."""
    if not records:
        return
    now = services.now_ms()
    dumps = json.dumps
    params = [(r.id, r.backend, r.queue, r.queue_name, r.task_path, r.priority, r.status, r.content, r.return_value,
               dumps(r.errors), dumps(r.worker_ids), r.enqueued_at, r.started_at, r.last_attempted_at, r.finished_at,
               now) for r in records]
    with connections[using].cursor() as cursor:
        cursor.executemany(UPSERT, params)


# --- reading --------------------------------------------------------------------------------


def _uuid(result_id: object) -> str:
    try:
        return str(uuid.UUID(str(result_id)))
    except ValueError:
        raise TaskResultDoesNotExist(result_id) from None


def get_result(backend: ForqBackend, result_id: str, *, using: str | None = None) -> TaskResult:
    result_id = _uuid(result_id)
    using = using or services.alias()
    message = (_messages().objects.using(using).filter(id=result_id)
               .values("queue", "is_dlq", "status", "attempts", "process_after", "processing_started_at",
                       "first_received_at", "updated_at", "content", "priority", "received_at").first())
    row = _records().objects.using(using).filter(id=result_id).first()
    if message is None and row is None:
        raise TaskResultDoesNotExist(result_id)
    content = message["content"] if message is not None else row.content  # type: ignore[union-attr]
    try:
        data = decode(content)
    except ValueError:
        raise TaskResultDoesNotExist(f"{result_id} is a message, not a task") from None
    if data.get("backend") != backend.alias:
        raise TaskResultDoesNotExist(f"{result_id} is a task of backend {data.get('backend')!r}")
    if message is not None:  # a schedule's task content is written once: each tick's message says when
        data["enqueued_at"] = message["received_at"]
    elif row.enqueued_at is not None:  # type: ignore[union-attr]
        data["enqueued_at"] = row.enqueued_at  # type: ignore[union-attr]
    priority = message["priority"] if message is not None else row.priority  # type: ignore[union-attr]
    try:
        task = load_task(data["task"], data.get("queue_name", "default"), priority, backend.alias,
                         run_after_of(data))
    except ImportError as exc:
        raise TaskResultDoesNotExist(f"{result_id}: its task {data['task']!r} cannot be imported ({exc})") from None
    errors = row.errors_list() if row is not None else []
    worker_ids = row.worker_ids_list() if row is not None else []
    started_at = row.started_at if row is not None else None
    last_attempted_at = row.last_attempted_at if row is not None else None
    finished_at = row.finished_at if row is not None else None
    return_value = None
    if message is not None:
        now = services.now_ms()
        if message["is_dlq"] or message["status"] == Status.FAILED:
            status = TaskResultStatus.FAILED
            finished_at = finished_at or message["updated_at"]
        elif message["status"] == Status.PROCESSING and message["process_after"] > now:
            status = TaskResultStatus.RUNNING
            finished_at = None
        else:
            status = TaskResultStatus.READY
            finished_at = None
        if status == TaskResultStatus.RUNNING or message["attempts"] > len(worker_ids):
            # deliveries nobody reported: running now, or their worker died
            worker_ids = worker_ids + [UNKNOWN_WORKER] * max(0, message["attempts"] - len(worker_ids))
        started_at = started_at or message["first_received_at"]
        last_attempted_at = message["processing_started_at"] or last_attempted_at
    else:
        assert row is not None  # noqa: S101 - one of them exists
        status = TaskResultStatus(row.status)
        if status == TaskResultStatus.SUCCESSFUL and row.return_value is not None:
            return_value = json.loads(row.return_value)
    return build(task, result_id, status, data, backend.alias, errors=errors, worker_ids=worker_ids,
                 started_at=started_at, last_attempted_at=last_attempted_at, finished_at=finished_at,
                 return_value=return_value)


def run_after_of(data: dict[str, Any]) -> int | None:
    """A task content's ``run_after`` (Unix µs), if it has a valid one (``run_after_us``; ``run_after``,
    in ms, in a content made before)."""
    for key, scale in (("run_after_us", 1), ("run_after", 1000)):
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value * scale
    return None


def build(task: Task, result_id: str, status: Any, data: dict[str, Any], backend: str, *,
          errors: list[dict[str, str]], worker_ids: list[str], started_at: int | None = None,
          last_attempted_at: int | None = None, finished_at: int | None = None,
          return_value: Any = None) -> TaskResult:
    call = data["call"]
    result: TaskResult = TaskResult(
        task=task, id=result_id, status=status, enqueued_at=task_time_ms(data.get("enqueued_at")),
        started_at=task_time_ms(started_at), finished_at=task_time_ms(finished_at),
        last_attempted_at=task_time_ms(last_attempted_at), args=call.get("args", []),
        kwargs=call.get("kwargs", {}), backend=backend,
        errors=[TaskError(exception_class_path=e["exception_class_path"], traceback=e["traceback"])
                for e in errors],
        worker_ids=list(worker_ids),
    )
    if status == TaskResultStatus.SUCCESSFUL:
        set_field(result, "_return_value", return_value)
    return result


# --- pruning --------------------------------------------------------------------------------


def prune(*, dry_run: bool = False, using: str | None = None) -> int:
    """Delete the results of tasks that finished longer ago than their backend's
    ``result_retention`` (and rows of unfinished tasks whose message is gone and that nothing
    touched for as long). Returns how many. The ``task-results`` job."""
    using = using or services.alias()
    now = services.now_ms()
    total = 0
    backends = {alias: task_backends[alias] for alias in task_backends.settings}
    # ForqBackends' retentions (forqapp keeps their results; another backend's are not its to prune)
    retention = {alias: ms for alias, b in backends.items() if isinstance(ms := getattr(b, "result_retention_ms", None), int)}
    default_ms = max(retention.values(), default=7 * 86_400_000)
    aliases = set(_records().objects.using(using).values_list("backend", flat=True).distinct())
    for alias in aliases:
        cutoff = now - retention.get(alias, default_ms)
        stale = _records().objects.using(using).filter(backend=alias, updated_at__lt=cutoff).filter(
            Q(status__in=TERMINAL) | ~Exists(_messages().objects.using(using).filter(id=OuterRef("id"))))
        if dry_run:
            total += stale.count()
            continue
        while True:  # batches of 1,000: short write transactions
            ids = list(stale.values_list("id", flat=True)[:1000])
            if not ids:
                break
            total += _records().objects.using(using).filter(id__in=ids).delete()[0]
    return total
