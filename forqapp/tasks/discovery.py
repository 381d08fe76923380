"""Which forqapp queues ``forq_worker`` runs tasks on, without importing the Tasks framework
when the project does not use it (``django-tasks`` is optional on Django 5.2)."""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string


def uses_forq_backend() -> bool:
    """Whether ``TASKS`` names a :class:`~forqapp.tasks.ForqBackend` — or a subclass of it, in the
    project's own module — and a Tasks framework is installed. A ``BACKEND`` that does not import is
    the framework's to report, not this."""
    tasks = getattr(settings, "TASKS", None)
    if not isinstance(tasks, dict):
        return False
    if find_spec("django.tasks") is None and find_spec("django_tasks") is None:
        return False
    from .backend import ForqBackend

    for params in tasks.values():
        path = params.get("BACKEND") if isinstance(params, dict) else None
        if not isinstance(path, str):
            continue
        try:
            backend = import_string(path)
        except ImportError:
            continue
        if isinstance(backend, type) and issubclass(backend, ForqBackend):
            return True
    return False


def with_consumers(consumers: dict[str, Any]) -> dict[str, Any]:
    """``consumers`` (queue → ``@forqapp.consumer``) and, for every queue of a ``ForqBackend``,
    its :class:`~forqapp.tasks.running.TaskRunner`; a queue that would have both is refused
    (``ImproperlyConfigured``)."""
    if not uses_forq_backend():
        return consumers
    from .running import with_consumers as add_runners

    return add_runners(consumers)


def queue_finder() -> Any:
    """For ``forq_worker``: a callable giving the task runners of queues made since it started
    (``known``: the queues it runs), when a ``ForqBackend`` lists no ``QUEUES``; else None."""
    if not uses_forq_backend():
        return None
    from .running import finds_queues, new_runners

    return new_runners if finds_queues() else None


def backend_problems() -> list[Any]:
    """The ``check()`` of every ``ForqBackend``, for forqapp's system checks, when neither Django 6
    (``django.tasks`` runs every backend's check) nor the backport's app (``"django_tasks"`` in
    ``INSTALLED_APPS``) runs them: on Django 5.2 the backend's checks hold without that app."""
    if not uses_forq_backend() or find_spec("django.tasks") is not None:
        return []
    from django.apps import apps

    if apps.is_installed("django_tasks"):
        return []
    from .running import forq_backends

    return [problem for backend in forq_backends() for problem in backend.check()]
