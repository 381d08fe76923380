"""The results table of the Django Tasks backend (``forq_task_results``).

A task is a message while it waits, runs or sits in its DLQ; its row here holds what the message
does not: the errors of its failed attempts, the workers that ran it, and, once it is done, its
return value. The worker writes the rows in bulk, in the transaction that settles the messages
(``forqapp.tasks.running``); ``get_result`` reads the message first and this row second.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import models


class TaskStatus(models.TextChoices):
    """``TaskResultStatus``'s values (READY, RUNNING, FAILED, SUCCESSFUL), for the admin's filter."""

    READY = "READY", "Ready"
    RUNNING = "RUNNING", "Running"
    FAILED = "FAILED", "Failed"
    SUCCESSFUL = "SUCCESSFUL", "Successful"


class TaskRecord(models.Model):
    """A task's result: one row per task id (its message's id), kept ``RESULT_RETENTION`` after it
    finished (the ``task-results`` job prunes them). Times are Unix ms, like the messages'."""

    id = models.CharField(primary_key=True, max_length=36, editable=False)  # the message's UUIDv7
    backend = models.CharField(max_length=100)  # the TASKS alias
    queue = models.CharField(max_length=128)  # forqapp's queue (with the backend's prefix)
    queue_name = models.CharField(max_length=128)  # the task's queue_name
    task_path = models.CharField(max_length=255)
    priority = models.IntegerField(default=0)
    status = models.CharField(max_length=10, choices=TaskStatus.choices)
    # The message content: {"task", "args", "kwargs", ...}, so a result outlives its message.
    content = models.TextField()
    return_value = models.TextField(null=True, blank=True)  # noqa: DJ001 - JSON; NULL: none (yet)
    errors = models.TextField(default="[]")  # JSON: [{"exception_class_path", "traceback"}] by attempt
    worker_ids = models.TextField(default="[]")  # JSON: one per attempt
    enqueued_at = models.BigIntegerField(null=True, blank=True)
    started_at = models.BigIntegerField(null=True, blank=True)
    last_attempted_at = models.BigIntegerField(null=True, blank=True)
    finished_at = models.BigIntegerField(null=True, blank=True)
    updated_at = models.BigIntegerField()

    class Meta:
        db_table = "forq_task_results"
        ordering = ["-updated_at"]
        verbose_name = "task result"
        verbose_name_plural = "task results"
        indexes = [models.Index(fields=["updated_at"], name="idx_task_results_updated")]

    def __str__(self) -> str:
        return f"{self.task_path} {self.id}"

    def errors_list(self) -> list[dict[str, str]]:
        return json.loads(self.errors or "[]")

    def worker_ids_list(self) -> list[str]:
        return json.loads(self.worker_ids or "[]")

    def args_kwargs(self) -> dict[str, Any]:
        return json.loads(self.content)
