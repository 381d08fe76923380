"""The task each ``rh-work`` delivery enqueues."""

from __future__ import annotations

from forqapp.tasks.compat import task


@task
def record_task(content: str) -> None:
    from .consumers import record

    record("task", content)
