"""One import path for Django's Tasks framework: ``django.tasks`` (Django ≥ 6.0) or its backport,
the ``django-tasks`` package (``django_tasks``, Django 5.2). Everything else imports from here.

The type checker reads the backport (it ships type hints; Django 6's module has none in
django-stubs 5.2); both have the same names and shapes."""

from __future__ import annotations

from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or find_spec("django.tasks") is None:  # Django 5.2 with the backport
    from django_tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import (
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
        task,
    )
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

    FRAMEWORK = "django_tasks"
else:  # Django 6
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
        task,
    )
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started

    FRAMEWORK = "django.tasks"


def set_field(obj: Any, name: str, value: Any) -> None:
    """Set a field of a frozen dataclass of the framework (``TaskResult._return_value`` …)."""
    object.__setattr__(obj, name, value)


__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "FRAMEWORK",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTaskError",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "set_field",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
