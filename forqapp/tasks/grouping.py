"""A task's message group: which group each call of a task goes into, derived from its arguments.

Django's Tasks API has no per-call option a backend could read (``Task.using()`` takes
``priority``, ``queue_name``, ``run_after`` and ``backend`` only, on Django 6 as in django-tasks),
and a backend ``OPTION`` is one value for every task. A group is a property of each *call* (the
customer, the tenant), so the task names how to derive it from its arguments, with a decorator under
``@task`` as ``@retries`` sets its retry policy::

    @task(queue_name="emails")
    @group_by("customer_id")          # one group per customer: "42" for send_invoice(42, ...)
    def send_invoice(customer_id, invoice_id): ...

``group_by`` takes the name of one of the function's parameters (its value, as text, is the group;
``None`` puts the call in no group) or a function of the task's arguments returning the group (or
None). The queue's ``group_concurrency`` and ``group_rate`` (``FORQ_QUEUES`` or
``forqapp.configure_queue`` on the forqapp queue, ``queue_prefix`` + the task's queue name) then
apply per group: with ``group_concurrency=1``, one task per customer at a time.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from .. import validation
from ..errors import ForqError
from .compat import InvalidTaskError

F = TypeVar("F", bound=Callable[..., Any])
ATTRIBUTE = "forq_group_by"


class GroupBy:
    """How a task's calls are grouped (set by :func:`group_by`)."""

    def __init__(self, key: str | Callable[..., Any]) -> None:
        if not (isinstance(key, str) and key.isidentifier()) and not callable(key):
            raise TypeError(f"group_by() takes a parameter's name or a function (got {key!r})")
        self.key = key
        self.signature: inspect.Signature | None = None  # the function's, read once (None: none to read)
        if callable(key):
            try:
                self.signature = inspect.signature(key)
            except ValueError:  # a callable with no signature to read: called as it is
                pass

    def group(self, func: Callable[..., Any], takes_context: bool, args: Any, kwargs: dict[str, Any]) -> str | None:
        """The group of one call, validated (None: none)."""
        if callable(self.key):
            try:
                if self.signature is not None:
                    self.signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise InvalidTaskError(f"group_by({self.key!r}): the function does not take the task's arguments: "
                                       f"{exc}") from None
            value = self.key(*args, **kwargs)
        else:
            try:
                bound = inspect.signature(func).bind(*((None,) if takes_context else ()), *args, **kwargs)
            except TypeError as exc:
                raise InvalidTaskError(f"group_by({self.key!r}): the arguments do not fit the task: {exc}") from None
            bound.apply_defaults()
            value = bound.arguments.get(self.key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise InvalidTaskError(f"group_by({self.key!r}) gave {value!r}: a group is a string or an integer (or None)")
        try:
            return validation.group(str(value))
        except ForqError as exc:
            raise InvalidTaskError(f"group_by({self.key!r}) gave {value!r}: {exc}") from None


def group_by(key: str | Callable[..., Any]) -> Callable[[F], F]:
    """Decorator (under ``@task``): each call goes into the message group named by the argument
    ``key`` (a parameter's name) or returned by ``key(*args, **kwargs)``. The function is returned
    unchanged, with the rule as its ``forq_group_by`` attribute."""
    rule = GroupBy(key)

    def decorate(func: F) -> F:
        if isinstance(key, str):
            parameters = inspect.signature(func).parameters
            if key not in parameters or parameters[key].kind in (inspect.Parameter.VAR_POSITIONAL,
                                                                 inspect.Parameter.VAR_KEYWORD):
                raise TypeError(f"group_by({key!r}): {func.__qualname__} has no parameter {key!r}")
        setattr(func, ATTRIBUTE, rule)
        return func

    return decorate


def task_group(task: Any, args: Any, kwargs: dict[str, Any]) -> str | None:
    """The group of ``task(*args, **kwargs)`` (None: the task has no :func:`group_by`, or the
    call is in no group)."""
    rule = getattr(task.func, ATTRIBUTE, None)
    if rule is None:
        return None
    if not isinstance(rule, GroupBy):
        raise InvalidTaskError(f"{ATTRIBUTE} of {task.module_path} must come from forqapp.tasks.group_by()")
    return rule.group(task.func, bool(task.takes_context), args, kwargs)
