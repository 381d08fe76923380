"""``forqapp.tasks.ForqBackend``: Django's Tasks framework on forqapp's queues.

    TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["default", "emails"],
                         "OPTIONS": {"queue_prefix": "tasks-", "result_retention": 7 * 86400}}}

A task is one message on the forqapp queue named ``queue_prefix + task.queue_name``: its id is the
task result's id, its priority the task's, its due time ``run_after`` (one in the past is kept: it is
due at once, and its place is that time). The backend's queues run in the due order (``ordering``
"due", set at a queue's first enqueue unless the queue has an ordering of its own): by priority,
then due time, then enqueue order, as django-tasks-db orders its tasks. The message's content is the
task (its dotted path) and its arguments as JSON. ``enqueue`` writes that one row on the caller's
database connection: inside the caller's ``transaction.atomic()`` the task commits or rolls back with
the caller's own writes (the outbox guarantee), and no worker can see it before the commit.

The worker side is :mod:`forqapp.tasks.running` (``manage.py forq_worker``), the results
:mod:`forqapp.tasks.results`. This module imports no model at module level: ``@task`` runs while
apps load.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import cached_property
from inspect import iscoroutinefunction
from typing import Any

from django.core import checks

from .. import errors, services, validation, vocab
from ..conf import forq_settings, hot
from ..errors import ForqError
from .compat import (
    DEFAULT_TASK_QUEUE_NAME,
    BaseTaskBackend,
    InvalidTaskError,
    Task,
    TaskResult,
    TaskResultStatus,
    task_enqueued,
)
from .grouping import task_group
from .messages import TaskArgumentsError, encode, round_trip, task_time_ms, unix_us
from .retrying import RetryPolicyError, backend_retries, own_retries

DEFAULT_RESULT_RETENTION_S = 7 * 86_400
logger = logging.getLogger(__name__)
OPTION_NAMES = ("queue_prefix", "result_retention", "max_attempts", "backoff")


class ForqBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict) -> None:
        super().__init__(alias, params)
        self.queue_prefix = str(self.options.get("queue_prefix", ""))
        self._said_unrun: set[str] = set()

    # -- names -------------------------------------------------------------------------------

    def forq_queue(self, queue_name: str) -> str:
        """The forqapp queue of the task queue ``queue_name``."""
        return self.queue_prefix + queue_name

    @property
    def any_queue(self) -> bool:
        """Whether ``QUEUES`` is empty: any task queue name is valid (the framework's rule), so the
        worker finds this backend's queues in the database (:meth:`forq_queues`)."""
        return not self.queues

    def lists(self, forq_queue: str) -> bool:
        """Whether this backend runs ``forq_queue`` because its ``QUEUES`` say so (or it is the
        default one of an empty ``QUEUES``), not because its prefix found it there."""
        return not self.any_queue or forq_queue == self.forq_queue(DEFAULT_TASK_QUEUE_NAME)

    def forq_queues(self, existing: Iterable[str] = ()) -> list[str]:
        """The forqapp queues the worker runs for this backend: its ``QUEUES``; with none listed,
        ``default`` and those of ``existing`` (the queues there are) that carry its
        ``queue_prefix`` (not their DLQs). Without a prefix, ``default`` alone: a task queue
        could not be told from any other queue (check W065)."""
        if self.queues:
            return sorted(self.forq_queue(q) for q in self.queues)
        found = {q for q in existing if self.queue_prefix and q.startswith(self.queue_prefix)
                 and len(q) > len(self.queue_prefix) and not vocab.is_dlq(q)}
        return sorted(found | {self.forq_queue(DEFAULT_TASK_QUEUE_NAME)})

    def _queue_problem(self, queue_name: object, *, prefixed: bool = True) -> str | None:
        """What is wrong with the task queue ``queue_name`` (None: nothing); ``prefixed=False``
        looks at the name alone, without the backend's ``queue_prefix``."""
        if not isinstance(queue_name, str):
            return f"queue name {queue_name!r} is not a string"
        name = self.forq_queue(queue_name) if prefixed else queue_name
        if vocab.is_dlq(queue_name) or vocab.is_dlq(name):
            return f"queue name {queue_name!r}: names ending in {vocab.DLQ_SUFFIX!r} are dead-letter queues"
        try:
            validation.queue_name(name, produce=True)
        except ForqError:
            return (f"queue name {queue_name!r} (forqapp queue {self.forq_queue(queue_name)!r}) is not a valid "
                    f"forqapp queue name (1 to 80 of A-Z a-z 0-9 . _ -, not . or ..)")
        return None

    @cached_property
    def _option_problems(self) -> list[tuple[str, str, str | None]]:
        """What is wrong with ``OPTIONS``, as (check id, message, hint), once per backend instance:
        the checks report each, and :meth:`enqueue` refuses the first."""
        problems: list[tuple[str, str, str | None]] = []
        unknown = set(self.options) - set(OPTION_NAMES)
        if unknown:
            problems.append(("forqapp.E061",
                             f"TASKS[{self.alias!r}]['OPTIONS']: unknown option(s) {', '.join(sorted(map(str, unknown)))}",
                             f"forqapp.tasks.ForqBackend knows {', '.join(OPTION_NAMES)}"))
        retention = self.options.get("result_retention", DEFAULT_RESULT_RETENTION_S)
        if isinstance(retention, bool) or not isinstance(retention, int | float) or retention <= 0:
            problems.append(("forqapp.E062", f"TASKS[{self.alias!r}]['OPTIONS']['result_retention'] must be a "
                                             f"positive number of seconds (got {retention!r})", None))
        try:
            backend_retries(self)
        except RetryPolicyError as exc:
            problems.append(("forqapp.E063", f"TASKS[{self.alias!r}]['OPTIONS']: {exc}", None))
        return problems

    @property
    def _options_problem(self) -> str | None:
        """The first of :attr:`_option_problems`' messages (None: none)."""
        return self._option_problems[0][1] if self._option_problems else None

    def schedule_message(self, task: Task, args: Iterable[Any], kwargs: dict[str, Any]) -> tuple[str, str]:
        """(forqapp queue, content) of a schedule that enqueues ``task(*args, **kwargs)`` at each
        tick (``forqapp.schedule(name, task=...)``: :mod:`forqapp.tasks.scheduling`)."""
        if task.run_after is not None:
            raise InvalidTaskError("a scheduled task runs at its ticks: it takes no run_after")
        self.validate_task(task)
        text, _, _ = round_trip(args, kwargs)
        return self.forq_queue(task.queue_name), encode(task.module_path, text, task.queue_name, self.alias, 0)

    # -- the framework's contract -------------------------------------------------------------

    def validate_task(self, task: Task) -> None:
        """The task's own mistakes, raised where it is defined (``@task`` runs this while its
        module is imported). The backend's (``OPTIONS``, ``queue_prefix``, the ``QUEUES`` it
        lists) are not: a module imported by the URLconf would stop ``manage.py check`` before it
        could report them (E060, E063); :meth:`enqueue` refuses them."""
        super().validate_task(task)
        configured = isinstance(task.queue_name, str) and task.queue_name in (self.queues or {DEFAULT_TASK_QUEUE_NAME})
        if not configured and (problem := self._queue_problem(task.queue_name, prefixed=False)):
            raise InvalidTaskError(problem)

        own_retries(task)  # a wrong @retries option is refused here, not at the first failure

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        messages: list[checks.CheckMessage] = list(super().check(**kwargs))
        from django.apps import apps

        if not apps.is_installed("forqapp"):  # its tables, jobs and forq_worker are the app's
            messages.append(checks.Error(
                f"TASKS[{self.alias!r}]: forqapp.tasks.ForqBackend is configured, but the forqapp app is not installed",
                hint="Insert 'forqapp' in INSTALLED_APPS", id="forqapp.E064"))
        for queue_name in sorted(self.queues or {DEFAULT_TASK_QUEUE_NAME}):
            if problem := self._queue_problem(queue_name):
                messages.append(checks.Error(f"TASKS[{self.alias!r}]: {problem}", id="forqapp.E060"))
        messages += [checks.Error(message, hint=hint, id=check_id) for check_id, message, hint in self._option_problems]
        declared = forq_settings.FORQ_QUEUES
        for queue in self.forq_queues():
            if queue in declared and isinstance(declared[queue], dict) and "ordering" not in declared[queue]:
                messages.append(checks.Warning(
                    f"TASKS[{self.alias!r}]: FORQ_QUEUES declares the task queue {queue!r} without an ordering: "
                    "its tasks run first in, first out, not by due time (run_after, retries) as on the "
                    "backend's other queues",
                    hint=f'Add "ordering": "due" to FORQ_QUEUES[{queue!r}] (or another ordering, on purpose)',
                    id="forqapp.W066"))
        if self.any_queue and not self.queue_prefix:
            messages.append(checks.Warning(
                f"TASKS[{self.alias!r}]: QUEUES is empty (any queue name is valid) and queue_prefix is '': "
                "forq_worker cannot tell this backend's task queues from other queues, so it runs 'default' only",
                hint="List the queues in QUEUES, or give OPTIONS a queue_prefix (e.g. 'tasks-')", id="forqapp.W065"))
        return messages

    @property
    def result_retention_ms(self) -> int:
        return int(float(self.options.get("result_retention", DEFAULT_RESULT_RETENTION_S)) * 1000)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        if problem := self._queue_problem(task.queue_name) or self._options_problem:
            raise InvalidTaskError(problem)  # the backend's settings (see validate_task)
        if self.any_queue and not self.queue_prefix and task.queue_name != DEFAULT_TASK_QUEUE_NAME \
                and task.queue_name not in self._said_unrun:
            self._said_unrun.add(task.queue_name)  # (once per queue and process)
            logger.warning("TASKS[%r]: task queue %r is not in QUEUES, and with QUEUES empty and no queue_prefix "
                           "forq_worker runs 'default' only: list it in QUEUES or give a queue_prefix (forqapp.W065)",
                           self.alias, task.queue_name)
        group = task_group(task, args, kwargs)  # from the call's own arguments (@group_by)
        text, args, kwargs = round_trip(args, kwargs)
        now = services.now_ms()
        run_after_us = None if task.run_after is None else unix_us(task.run_after)
        run_after = None if run_after_us is None else run_after_us // 1000
        content = encode(task.module_path, text, task.queue_name, self.alias, now, run_after_us)
        item: dict[str, Any] = {"content": content, "priority": task.priority}
        if run_after is not None:
            # a run_after already past runs at once, its time kept for the due order (past_due); one
            # more than FORQ_PROCESS_AFTER_MAX_MS ahead is refused
            item["process_after"] = run_after
        if group is not None:
            item["group"] = group
        queue = self.forq_queue(task.queue_name)
        try:
            order_by_due(queue)
            sent = services.send_entries(queue, [item], past_due=True)[0]
        except ForqError as exc:
            if exc.code == errors.CONTENT_EXCEEDS_LIMIT:
                raise TaskArgumentsError(f"a task's arguments are too large: {exc}") from None
            if exc.code in (errors.PROCESS_AFTER_TOO_FAR, errors.PROCESS_AFTER_IN_PAST):
                raise InvalidTaskError(f"run_after: {str(exc).replace('processAfter', 'run_after')}") from None
            raise
        result: TaskResult = TaskResult(  # enqueued_at: the message's received_at, as get_result shows it
            task=task, id=sent.id, status=TaskResultStatus.READY, enqueued_at=task_time_ms(sent.received_at),
            started_at=None, finished_at=None, last_attempted_at=None, args=args, kwargs=kwargs,
            backend=self.alias, errors=[], worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        from .results import get_result

        return get_result(self, result_id)

    # aenqueue and aget_result: the framework's, which run these on a thread (sync_to_async).

    def is_async(self, task: Task) -> bool:
        return iscoroutinefunction(task.func)


def order_by_due(queue: str) -> None:
    """Give ``queue`` the due order (``ordering`` "due"), unless it has an ordering of its own or
    ``FORQ_QUEUES`` declares it (its entry is the whole policy: ``forq_queues apply`` would set it
    back, and check W066 asks for the ordering there): the queue's policy is cached, so this reads
    the database at most once a second per process."""
    if queue not in hot("FORQ_QUEUES") and "ordering" not in services.policy(queue).overrides:
        services.configure_queue(queue, ordering="due")

