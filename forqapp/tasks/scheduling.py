"""Periodic tasks: ``forqapp.schedule("nightly", task=reports.tasks.nightly, cron="0 3 * * *")``.

A schedule of a task is a schedule like any other (:mod:`forqapp.services.schedules`) whose queue is the
task's forqapp queue and whose content is the task's message (its path and arguments, checked as
``enqueue`` checks them). Each tick is one message, so one task result with its own id, and sends
``task_enqueued`` like an ``enqueue`` would.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.dispatch import receiver

from .. import services
from ..services import schedules
from .compat import TaskResult, TaskResultStatus, task_enqueued
from .messages import decode, task_time_ms
from .results import load_task

TASK_CONTENT_START = '{"task":'  # every task message starts so (backend.encode)


@receiver(schedules.task_ticks_sent, dispatch_uid="forqapp.tasks.scheduling")
def _ticks_sent(sender: Any, content: str, ids: list[str], priority: int, **kwargs: Any) -> None:
    ticks_sent(content, ids, priority)


def is_task_content(content: str) -> bool:
    return content.startswith(TASK_CONTENT_START)


def ticks_sent(content: str, ids: Iterable[str], priority: int = 0) -> None:
    """Send ``task_enqueued`` for each message a schedule sent with task ``content`` (after the
    transaction that sent them committed)."""
    try:
        data = decode(content)

        backend_alias = data.get("backend", "default")
        task = load_task(data["task"], data.get("queue_name", "default"), priority, backend_alias)
    except (ValueError, ImportError, KeyError):
        return  # not a task this process knows: nothing to signal
    now = task_time_ms(services.now_ms())
    call = data["call"]
    for message_id in ids:
        result: TaskResult = TaskResult(
            task=task, id=message_id, status=TaskResultStatus.READY, enqueued_at=now, started_at=None,
            finished_at=None, last_attempted_at=None, args=json.loads(json.dumps(call.get("args", []))),
            kwargs=call.get("kwargs", {}), backend=backend_alias, errors=[], worker_ids=[])
        task_enqueued.send(type(task.get_backend()), task_result=result)
