"""A Django Tasks backend on forqapp's queues: ``TASKS = {"default": {"BACKEND":
"forqapp.tasks.ForqBackend", ...}}``. See the docs' how-to/django-tasks.md.

Importing this package imports neither a model (``@task`` is often imported while apps load) nor
the Tasks framework (``django-tasks`` is optional on Django 5.2: the admin and the jobs import
``forqapp.tasks.models`` without it); ``ForqBackend``, ``retries``, ``group_by``, ``task`` and
``TaskArgumentsError`` load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import ForqBackend, TaskArgumentsError
    from .grouping import group_by
    from .retrying import retries, task

__all__ = ["ForqBackend", "TaskArgumentsError", "group_by", "retries", "task"]


def __getattr__(name: str) -> Any:
    if name in ("ForqBackend", "TaskArgumentsError"):
        from . import backend

        return getattr(backend, name)
    if name in ("retries", "task"):
        from . import retrying

        return getattr(retrying, name)
    if name == "group_by":
        from . import grouping

        return grouping.group_by
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
