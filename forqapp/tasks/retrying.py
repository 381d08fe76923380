"""Retries of a task: its queue's policy, unless the task or the backend says otherwise.

The shape follows the one proposed upstream (django/new-features#142): ``max_attempts`` (runs at
most, the first included) and ``backoff``, a function ``(exception, task_result) -> seconds``
(a number or a timedelta; ``None`` stops the retries). ``backoff`` may also be a number of seconds
(always the same wait) or a list of them (by attempt, the last one repeating).

Django 6's ``@task`` takes no options of its own, so a task sets them with a decorator under it::

    @task
    @retries(max_attempts=5, backoff=lambda exc, result: 2 ** result.attempts)
    def sync_account(account_id): ...

and a backend for all its tasks with ``OPTIONS = {"max_attempts": 5, "backoff": [1, 10, 60]}``
(a dotted path to a function works too). Without either, a failed task is nacked: its queue's
``max_attempts`` and ``backoff`` apply (``forqapp.configure_queue`` or ``FORQ_QUEUES``). The
queue's ``max_attempts`` stays the ceiling: a claim moves a message that used them all to the DLQ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from django.utils.module_loading import import_string

F = TypeVar("F", bound=Callable[..., Any])
ATTRIBUTE = "forq_retries"


class RetryPolicyError(ValueError):
    """A ``max_attempts`` or ``backoff`` that is not one of the forms above."""


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int | None = None  # None: the queue's
    backoff: Any = None  # None: the queue's; a callable, a number of seconds or a list of them

    @property
    def own(self) -> bool:
        """Whether anything differs from the queue's policy."""
        return self.max_attempts is not None or self.backoff is not None

    def delay_s(self, attempt: int, exception: BaseException, task_result: Any) -> float | None:
        """Seconds to wait before the next attempt after attempt number ``attempt`` failed (None:
        no more attempts). Only for a policy with its own ``backoff``."""
        backoff = self.backoff
        if callable(backoff):
            value = backoff(exception, task_result)
        elif isinstance(backoff, list | tuple):
            value = backoff[min(attempt, len(backoff)) - 1]
        else:
            value = backoff
        if value is None:
            return None
        if isinstance(value, timedelta):
            value = value.total_seconds()
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise RetryPolicyError(f"backoff gave {value!r}: seconds (>= 0), a timedelta or None")
        return float(value)


def _policy(max_attempts: Any, backoff: Any, where: str) -> RetryPolicy:
    if max_attempts is not None and (isinstance(max_attempts, bool) or not isinstance(max_attempts, int)
                                     or max_attempts < 1):
        raise RetryPolicyError(f"{where}max_attempts must be an integer >= 1 (got {max_attempts!r})")
    if isinstance(backoff, str):
        try:
            backoff = import_string(backoff)
        except ImportError as exc:
            raise RetryPolicyError(f"{where}backoff: cannot import {backoff!r} ({exc})") from None
    if backoff is not None and not callable(backoff):
        values = list(backoff) if isinstance(backoff, list | tuple) else [backoff]
        if not values or any(isinstance(v, bool) or not isinstance(v, int | float) or v < 0 for v in values):
            raise RetryPolicyError(f"{where}backoff must be a function, seconds (>= 0) or a non-empty list of "
                                   f"them (got {backoff!r})")
        if isinstance(backoff, tuple):
            backoff = list(backoff)
    return RetryPolicy(max_attempts, backoff)


def retries(*, max_attempts: int | None = None, backoff: Any = None) -> Callable[[F], F]:
    """Decorator (under ``@task``): the task's own ``max_attempts`` and ``backoff``. The function
    is returned unchanged, with the policy as its ``forq_retries`` attribute."""
    policy = _policy(max_attempts, backoff, "retries(): ")

    def decorate(func: F) -> F:
        setattr(func, ATTRIBUTE, policy)
        return func

    return decorate


def task(function: Callable[..., Any] | None = None, *, max_attempts: int | None = None, backoff: Any = None,
         group_by: Any = None, **task_options: Any) -> Any:
    """The framework's ``@task`` (``priority``, ``queue_name``, ``backend``, ``takes_context``)
    with the upstream proposal's two retry options on it, on Django 6 as on 5.2::

        from forqapp.tasks import task

        @task(queue_name="emails", max_attempts=10, backoff=lambda exc, result: 30)
        def send_welcome(user_id): ...

    The same as ``@task(...)`` over ``@retries(max_attempts=..., backoff=...)``; ``group_by``
    (a parameter's name or a function of the arguments) the same as ``@group_by(...)`` under it:
    ``@task(queue_name="emails", group_by="customer_id")``."""
    from .compat import task as framework_task
    from .grouping import group_by as grouping

    policy = retries(max_attempts=max_attempts, backoff=backoff) if (max_attempts, backoff) != (None, None) else None

    def decorate(func: Callable[..., Any]) -> Any:
        if policy is not None:
            func = policy(func)
        if group_by is not None:
            func = grouping(group_by)(func)
        return framework_task(**task_options)(func)

    return decorate(function) if function is not None else decorate


def backend_retries(backend: Any) -> RetryPolicy:
    """The backend's defaults (``OPTIONS["max_attempts"]``, ``OPTIONS["backoff"]``)."""
    return _policy(backend.options.get("max_attempts"), backend.options.get("backoff"), "")


def own_retries(task: Any) -> RetryPolicy:
    """The task's own fields (``@retries``); the others None."""
    own = getattr(task.func, ATTRIBUTE, None) or RetryPolicy()
    if not isinstance(own, RetryPolicy):
        raise RetryPolicyError(f"{ATTRIBUTE} of {task.module_path} must come from forqapp.tasks.retries()")
    return own


def task_retries(task: Any, backend: Any) -> RetryPolicy:
    """The policy of ``task``: each of its own fields, else the backend's."""
    own = own_retries(task)
    default = backend_retries(backend)
    return RetryPolicy(own.max_attempts if own.max_attempts is not None else default.max_attempts,
                       own.backoff if own.backoff is not None else default.backoff)
