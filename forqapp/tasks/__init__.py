"""A Django Tasks backend on forqapp's queues (issue 14): ``TASKS = {"default": {"BACKEND":
"forqapp.tasks.ForqBackend", ...}}``. See the README's "Django Tasks" section.

Importing this package imports no model (``@task`` is often imported while apps load).
"""

from __future__ import annotations

from .backend import ForqBackend, TaskArgumentsError
from .retries import retries

__all__ = ["ForqBackend", "TaskArgumentsError", "retries"]
