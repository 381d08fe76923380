"""Which forqapp queues ``forq_worker`` runs tasks on, without importing the Tasks framework
when the project does not use it (``django-tasks`` is optional on Django 5.2)."""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

from django.conf import settings


def uses_forq_backend() -> bool:
    """Whether ``TASKS`` names a ``forqapp.tasks`` backend (and a Tasks framework is installed)."""
    tasks = getattr(settings, "TASKS", None)
    if not isinstance(tasks, dict):
        return False
    if not any(isinstance(p, dict) and str(p.get("BACKEND", "")).startswith("forqapp.tasks") for p in tasks.values()):
        return False
    return find_spec("django.tasks") is not None or find_spec("django_tasks") is not None


def with_consumers(consumers: dict[str, Any]) -> dict[str, Any]:
    """``consumers`` (queue → ``@forqapp.consumer``) and, for every queue of a ``ForqBackend``,
    its :class:`~forqapp.tasks.running.TaskRunner`; a queue that would have both is refused
    (``ImproperlyConfigured``)."""
    if not uses_forq_backend():
        return consumers
    from .running import with_consumers as add_runners

    return add_runners(consumers)
