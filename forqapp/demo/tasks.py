"""The Django tasks ``manage.py forq_demo`` enqueues (:mod:`forqapp.demo`): imported only when
``TASKS`` has a ``forqapp.tasks.ForqBackend`` (the Tasks framework is then installed)."""

from __future__ import annotations

from ..tasks.compat import task
from ..tasks.retrying import retries


@task
def add(a: int, b: int) -> int:
    return a + b


@task
@retries(max_attempts=1)  # one try: a FAILED result to look at
def sales_report(region: str) -> None:
    raise ConnectionError(f"the sales database of {region} did not answer")
