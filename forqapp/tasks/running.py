"""Running tasks inside ``manage.py forq_worker``: one :class:`TaskRunner` per forqapp queue of a
``ForqBackend``, beside the ``@forqapp.consumer`` handlers.

The worker (:mod:`forqapp.worker`) claims the messages in batches, renews their leases while they
run (heartbeat) and hands each to :meth:`TaskRunner.__call__` on a handler thread, which resolves the
task by its path, runs it (a coroutine on the process's event loop thread, a ``takes_context`` task
with a ``TaskContext`` whose ``attempt`` is the delivery count) and keeps the outcome. The runner
never raises there: the dispatcher then gives the batch to :meth:`TaskRunner.settle`, which writes,
per queue and in one transaction, the acks of the successes and their results rows (one bulk
statement each); each failure is nacked, deferred (a task's own backoff) or failed with its row.
Every write is fenced by the delivery's receipt: a worker whose lease ran out (another attempt has
the task now) writes nothing, so a late finisher never overwrites a newer attempt's result.

An import error is a failed attempt like any other (retried: during a rolling deploy an old worker
may see a task only the new code has); a return value that is not JSON fails the task for good.
Signals: ``task_started`` on the handler thread before the task runs, ``task_finished`` once, after
the transaction that recorded its terminal outcome (SUCCESSFUL, or FAILED with no attempt left).

A task whose worker died (kill -9, OOM) during its last attempt reaches its end in the next claim of
its queue, which moves it to ``<queue>-dlq`` instead of delivering it (the redrive). When a task
worker's claim does that, the worker hands the moved messages to :meth:`TaskRunner.on_redriven`,
which sends ``task_finished`` for each, after the claim committed, with the FAILED result
``get_result`` builds (no signal for a task whose path no longer imports: it has no result). Only
the claim that moves a message sees it, and a dead letter is never redriven again, so that is once.
A redrive elsewhere (a receive through the API, the SQS face, another consumer of the queue) or the
stale job's recovery of a used-up delivery (failed, then moved by the failed job) sends nothing:
those processes run no tasks; ``get_result`` says FAILED all the same.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import socket
import threading
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from inspect import iscoroutinefunction
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from .. import errors, services
from ..errors import ForqError
from ..services.db import database_errors
from .backend import ForqBackend
from .compat import (
    TaskContext,
    TaskError,
    TaskResultDoesNotExist,
    TaskResultStatus,
    set_field,
    task_backends,
    task_finished,
    task_started,
)
from .messages import decode, dumps, task_time_ms
from .results import UNKNOWN_WORKER, Record, build, get_result, load_task, previous, run_after_of, write
from .retrying import RetryPolicy, RetryPolicyError, backend_retries, task_retries

logger = logging.getLogger(__name__)

ACK, NACK, FAIL = "ack", "nack", "fail"  # forqapp.worker's outcome names

WORKER_ID = f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(3)}"


def worker_id() -> str:
    """This process's worker id (host:pid:random), as the results' ``worker_ids`` show it."""
    global WORKER_ID
    if not WORKER_ID.split(":")[-2] == str(os.getpid()):  # a fork keeps the module: name the child
        WORKER_ID = f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(3)}"
    return WORKER_ID


# --- the event loop of async tasks ------------------------------------------------------------

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def event_loop() -> asyncio.AbstractEventLoop:
    """The process's event loop for async tasks, on a daemon thread of its own (started once)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="forq-tasks-loop", daemon=True).start()
            _loop = loop
        return _loop


class _Carried(Exception):  # noqa: N818 - not an error of its own
    """A ``SystemExit``/``KeyboardInterrupt`` of an async task, carried out of the event loop as an
    ordinary exception: raised as it is there, it would stop the loop's thread, and the task's
    caller would wait for ever."""

    def __init__(self, exception: BaseException):
        super().__init__(exception)
        self.exception = exception


class WorkerLost(Exception):  # noqa: N818 - what the task's last attempt ended with, not a bug
    """A task's last attempt whose worker stopped (killed, its host gone) before it reported: its lease
    ended, and the next claim moved the task to the DLQ. Recorded as that attempt's error."""


async def _carried(coroutine: Any) -> Any:
    try:
        return await coroutine
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _Carried(exc) from None


# --- outcomes -------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What running one delivery of a task gave."""

    ok: bool
    started_at: int
    finished_at: int
    data: dict[str, Any] | None = None  # the decoded message (None: undecodable)
    return_json: str | None = None
    exception: BaseException | None = None
    error: dict[str, str] | None = None  # {"exception_class_path", "traceback"}
    final: bool = False  # no retry whatever the policy (undecodable message, return value not JSON)
    task: Any = None
    result: Any = None  # the TaskResult task_started was sent with; task_finished gets it updated


def _signal(signal: Any, name: str, sender: type, result: Any) -> None:
    """Send ``signal`` to every receiver, each in turn whatever the others do (``send_robust``:
    Django's dispatcher logs a receiver's error with its traceback). A receiver that raises (a bug, a
    metrics backend away) changes nothing of the task: it runs, and is recorded as it ended."""
    for receiver, response in signal.send_robust(sender, task_result=result):
        if isinstance(response, Exception):
            logger.warning("forq_worker: a %s receiver (%s) raised for task %s (%s): %r; the task goes on as if "
                           "it had not", name, getattr(receiver, "__qualname__", receiver), result.id,
                           result.task.module_path, response)


def _error_of(exc: BaseException) -> dict[str, str]:
    cls = type(exc)
    return {"exception_class_path": f"{cls.__module__}.{cls.__qualname__}",
            "traceback": "".join(traceback.format_exception(exc))}


class TaskRunner:
    """The worker's consumer of one forqapp queue of a :class:`ForqBackend` (``settles``: the
    worker hands it its finished deliveries to settle itself, see :meth:`settle`)."""

    settles = True

    def __init__(self, backend: ForqBackend, queue: str):
        self.backend = backend
        self.queue = queue
        self._outcomes: dict[tuple[str, int | None], Outcome] = {}

    def __repr__(self) -> str:
        return f"TaskRunner({self.backend.alias!r}, {self.queue!r})"

    # -- on a handler thread -------------------------------------------------------------------

    def __call__(self, message: services.ReceivedMessage) -> None:
        started = services.now_ms()
        outcome = self._run(message, started)
        self._outcomes[(message.id, message.receipt)] = outcome

    def _run(self, message: services.ReceivedMessage, started: int) -> Outcome:
        """Run the delivery's task. A ``SystemExit`` or ``KeyboardInterrupt`` it raises (``sys.exit()``,
        ``exit()``) is its failure like any other: the worker runs tasks on handler threads, which
        never get a signal's ``KeyboardInterrupt`` (the worker's SIGINT/SIGTERM handler, on the main
        thread, stops the worker as documented)."""
        try:
            data = decode(message.content)
        except ValueError as exc:
            return Outcome(False, started, services.now_ms(), None, exception=exc, error=_error_of(exc), final=True)
        try:
            task = load_task(data["task"], data.get("queue_name", "default"), message.priority, self.backend.alias,
                             run_after_of(data))
        except Exception as exc:  # noqa: BLE001 - an import error is a retryable failure
            return Outcome(False, started, services.now_ms(), data, exception=exc, error=_error_of(exc))
        data["enqueued_at"] = message.received_at or data.get("enqueued_at")  # a schedule's tick: its own
        over = self._over_its_limit(task, message)
        if over is not None:  # its own max_attempts is used up (earlier workers died): failed, not run
            return Outcome(False, started, services.now_ms(), data, exception=over, error=_error_of(over),
                           final=True, task=task)
        call = data["call"]
        args, kwargs = call.get("args", []), call.get("kwargs", {})
        result = build(task, message.id, TaskResultStatus.RUNNING, data, self.backend.alias, errors=[],
                       worker_ids=[UNKNOWN_WORKER] * (message.attempts - 1) + [worker_id()],
                       started_at=message.first_received_at or started, last_attempted_at=started)
        _signal(task_started, "task_started", type(self.backend), result)
        try:
            if task.takes_context:
                args = [TaskContext(task_result=result), *args]
            if iscoroutinefunction(task.func):
                value = asyncio.run_coroutine_threadsafe(_carried(task.func(*args, **kwargs)), event_loop()).result()
            else:
                value = task.func(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - a task's failure is its result, SystemExit too (see _run)
            if isinstance(exc, _Carried):
                exc = exc.exception
            return Outcome(False, started, services.now_ms(), data, exception=exc, error=_error_of(exc), task=task)
        try:
            return_json = dumps(value)
        except (TypeError, ValueError, RecursionError) as exc:  # as Django's backends: a TypeError, not retried
            exc = type(exc)(f"{exc} (the return value of {task.module_path} must be JSON: str, int, float, bool, "
                            "None, lists and dicts of them)")
            return Outcome(False, started, services.now_ms(), data, exception=exc, error=_error_of(exc), final=True,
                           task=task)
        return Outcome(True, started, services.now_ms(), data, return_json=return_json, task=task, result=result)

    def _over_its_limit(self, task: Any, message: services.ReceivedMessage) -> BaseException | None:
        """An error when this delivery is past the task's own ``max_attempts`` (lower than its
        queue's, whose limit the claim enforces by moving the message to the DLQ): the workers of
        the earlier attempts died before they could settle them."""
        try:
            limit = task_retries(task, self.backend).max_attempts
        except RetryPolicyError:
            return None
        if limit is None or message.attempts <= limit:
            return None
        return RuntimeError(f"delivered {message.attempts} times, past the task's max_attempts of {limit}: "
                            f"the workers of earlier attempts stopped before they finished")

    # -- on the dispatcher ----------------------------------------------------------------------

    def on_redriven(self, messages: list[services.ReceivedMessage], *, using: str) -> None:
        """The worker's claim moved these used-up messages to the DLQ instead of delivering them
        (their last attempt's worker died): once the claim has committed, send ``task_finished``
        for each with its FAILED result as ``get_result`` builds it. Never raises."""
        transaction.on_commit(lambda: self._finish_redriven(messages, using), using=using)

    def _record_lost(self, messages: list[services.ReceivedMessage], using: str) -> None:
        """Record the attempts of redriven tasks nobody reported (their worker died), up to the
        queue's ``max_attempts`` at which the claim moved them, each as ``"unknown"``, the last with
        :class:`WorkerLost` as its error: the move to the DLQ set the message's own count to 0."""
        limit = services.policy(self.queue, using=using).max_attempts
        before = previous([m.id for m in messages], using)
        now = services.now_ms()
        records = []
        for message in messages:
            errors_, workers, started_at = before.get(message.id, ([], [], None))
            if len(workers) >= limit:
                continue
            try:
                data = decode(message.content)
            except ValueError:
                continue  # not a task: nothing to record
            lost = WorkerLost(f"its worker stopped during attempt {limit} (of the queue's max_attempts) before it "
                              "reported; the lease ended and the task was moved to the dead-letter queue")
            records.append(self._row(message, data, TaskResultStatus.FAILED, [*errors_, _error_of(lost)],
                                     workers + [UNKNOWN_WORKER] * (limit - len(workers)),
                                     started_at=started_at or message.first_received_at, finished_at=now))
        write(records, using)

    def _finish_redriven(self, messages: list[services.ReceivedMessage], using: str) -> None:
        try:
            self._record_lost(messages, using)
        except Exception as exc:  # noqa: BLE001 - get_result below still answers, with fewer attempts
            errors.log_failure(logger, f"forq_worker: recording the lost attempts of redriven tasks on {self.queue}",
                               exc, "their results count only the attempts reported")
        for message_id in (m.id for m in messages):
            try:
                result = get_result(self.backend, message_id, using=using)
            except TaskResultDoesNotExist as exc:  # not a task of ours, or its path no longer imports
                logger.warning("forq_worker: task %s on %s ran out of attempts (its worker died); no task_finished: %s",
                               message_id, self.queue, exc)
                continue
            except Exception as exc:  # noqa: BLE001 - a database error, a task module that raises at import
                errors.log_failure(logger, f"forq_worker: reading the result of redriven task {message_id} on "
                                   f"{self.queue}", exc, "no task_finished for it")
                continue
            if result.status != TaskResultStatus.FAILED:  # requeued from the DLQ meanwhile: not its end
                continue
            logger.warning("forq_worker: task %s (%s) ran out of attempts (its worker died); moved to %s-dlq",
                           message_id, result.task.module_path, self.queue)
            try:  # sent while its error is being handled, as for any failed task (receivers log it)
                raise WorkerLost(f"task {message_id}: its worker stopped during its last attempt")
            except WorkerLost:
                _signal(task_finished, "task_finished", type(self.backend), result)

    def settle(self, items: list[tuple[services.ReceivedMessage, str, BaseException | None]], *,
               using: str) -> dict[str, int]:
        """Settle finished deliveries (the worker's (message, outcome, error) triples); returns
        counts by outcome (ack, nack, fail, lost)."""
        counts: dict[str, int] = {}
        successes: list[tuple[services.ReceivedMessage, Outcome]] = []
        failures: list[tuple[services.ReceivedMessage, Outcome]] = []
        for message, worker_outcome, error in items:
            outcome = self._outcomes.pop((message.id, message.receipt), None)
            if outcome is None:  # the runner itself raised (a bug, or the thread was stopped)
                exc = error or RuntimeError("the task runner returned no outcome")
                now = services.now_ms()
                outcome = Outcome(False, now, now, None, exception=exc, error=_error_of(exc))
            (successes if outcome.ok and worker_outcome == ACK else failures).append((message, outcome))
        finished: list[Any] = []
        if successes:
            try:
                acked = self._settle_successes(successes, using, finished)
            except database_errors() as refused:  # a database away: one line a second (errors.log_failure)
                errors.log_failure(logger, f"forq_worker: settling {len(successes)} task(s) on {self.queue}", refused,
                                   "they run again when their lease ends")
                acked = 0
            counts[ACK] = acked
            if acked < len(successes):
                counts["lost"] = len(successes) - acked
        for message, outcome in failures:
            try:
                kind = self._settle_failure(message, outcome, using, finished)
            except database_errors() as refused:
                errors.log_failure(logger, f"forq_worker: settling task {message.id} on {self.queue}", refused,
                                   "it runs again when its lease ends")
                kind = "lost"
            counts[kind] = counts.get(kind, 0) + 1
        for result, exc in finished:
            if exc is None:
                _signal(task_finished, "task_finished", type(self.backend), result)
                continue
            try:  # sent while the task's exception is being handled, as Django's backends do (logging)
                raise exc
            except BaseException:  # noqa: BLE001
                _signal(task_finished, "task_finished", type(self.backend), result)
        return counts

    def _record(self, message: services.ReceivedMessage, outcome: Outcome, status: str,
                before: tuple[list[dict[str, str]], list[str], int | None] | None) -> Record:
        data = outcome.data or {}
        errors_, workers, started_at = before if before is not None else ([], [], None)
        workers = workers + [UNKNOWN_WORKER] * max(0, message.attempts - 1 - len(workers)) + [worker_id()]
        if outcome.error is not None:
            errors_ = [*errors_, outcome.error]
        terminal = status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
        return self._row(message, data, status, errors_, workers,
                         return_value=outcome.return_json if status == TaskResultStatus.SUCCESSFUL else None,
                         started_at=started_at or message.first_received_at or outcome.started_at,
                         last_attempted_at=outcome.started_at, finished_at=outcome.finished_at if terminal else None)

    def _row(self, message: services.ReceivedMessage, data: dict[str, Any], status: Any,
             errors_: list[dict[str, str]], workers: list[str], **times_and_value: Any) -> Record:
        """The results row of ``message`` (its task ``data`` decoded) with these errors and workers."""
        return Record(
            id=message.id, backend=self.backend.alias, queue=message.queue,
            queue_name=str(data.get("queue_name", message.queue)), task_path=str(data.get("task", "?"))[:255],
            priority=message.priority, status=str(status), content=message.content, errors=errors_,
            worker_ids=workers, enqueued_at=message.received_at or data.get("enqueued_at"), **times_and_value)

    def _settle_successes(self, successes: list[tuple[services.ReceivedMessage, Outcome]], using: str,
                          finished: list[Any]) -> int:
        pairs = [(m.id, m.receipt) for m, _ in successes]
        with transaction.atomic(using=using):
            before = previous([m.id for m, _ in successes], using)  # retried or requeued tasks have rows
            savepoint = transaction.savepoint(using=using)
            if services.ack_many(self.queue, pairs, using=using) == len(pairs):  # type: ignore[arg-type]
                current = successes
            else:  # some leases were lost meanwhile: find out which, one by one
                transaction.savepoint_rollback(savepoint, using=using)
                done = services.settle_many("ack", self.queue, pairs, using=using)  # type: ignore[arg-type]
                current = [s for s, ok in zip(successes, done, strict=True) if ok]
            records = [self._record(m, o, TaskResultStatus.SUCCESSFUL, before.get(m.id)) for m, o in current]
            write(records, using)
        for (_message, outcome), record in zip(current, records, strict=True):
            result = outcome.result
            if result is None:
                continue
            # The object task_started had, brought to its end (as Django's ImmediateBackend does).
            set_field(result, "status", TaskResultStatus.SUCCESSFUL)
            set_field(result, "finished_at", task_time_ms(record.finished_at))
            set_field(result, "_return_value", json.loads(record.return_value or "null"))
            set_field(result, "worker_ids", record.worker_ids)
            if record.errors:
                set_field(result, "errors", [TaskError(exception_class_path=e["exception_class_path"],
                                                       traceback=e["traceback"]) for e in record.errors])
            finished.append((result, None))
        return len(current)

    def _policy(self, outcome: Outcome, message_id: str) -> RetryPolicy:
        try:
            if outcome.task is None:  # not importable: the backend's defaults
                return backend_retries(self.backend)
            return task_retries(outcome.task, self.backend)
        except RetryPolicyError:
            logger.exception("forq_worker: the retry policy of task %s is wrong; using the queue's", message_id)
            return RetryPolicy()

    def _settle_failure(self, message: services.ReceivedMessage, outcome: Outcome, using: str,
                        finished: list[Any]) -> str:
        exc = outcome.exception or RuntimeError("task failed")
        policy = self._policy(outcome, message.id)
        queue_policy = services.policy(self.queue, using=using)
        limit = queue_policy.max_attempts
        if policy.max_attempts is not None:
            limit = policy.max_attempts if not limit else min(limit, policy.max_attempts)
        used_up = bool(limit) and message.attempts >= limit
        delay: float | None = None
        if not outcome.final and not used_up and policy.backoff is not None:
            failed_so_far = None
            if outcome.task is not None and outcome.data is not None:
                # As proposed upstream: the result with this failure in it (every error so far).
                so_far = self._record(message, outcome, TaskResultStatus.FAILED,
                                      previous([message.id], using).get(message.id))
                failed_so_far = build(outcome.task, message.id, TaskResultStatus.FAILED, outcome.data,
                                      self.backend.alias, errors=so_far.errors, worker_ids=so_far.worker_ids,
                                      started_at=so_far.started_at, last_attempted_at=so_far.last_attempted_at,
                                      finished_at=so_far.finished_at)
            try:
                delay = policy.delay_s(message.attempts, exc, failed_so_far)
            except Exception:  # noqa: BLE001 - a broken backoff function: fail, do not loop
                logger.exception("forq_worker: the backoff of task %s raised; failing it", message.id)
                delay = None
            if delay is None:
                used_up = True
        final = outcome.final or used_up
        with transaction.atomic(using=using):
            before = previous([message.id], using).get(message.id)
            try:
                if final:
                    # Out of attempts (the task's @retries, the queue's) is max_attempts_reached;
                    # fatal_error is for a failure no retry can mend (outcome.final).
                    services.fail(message, exc, using=using, used_up=not outcome.final)
                elif delay is not None:
                    services.defer(message, delay, using=using)
                else:
                    services.nack(message, exc, using=using)
            except ForqError as refused:
                if refused.code != errors.NOT_FOUND_MESSAGE:
                    raise
                return "lost"  # another attempt has the task now: write nothing
            record = self._record(message, outcome,
                                  TaskResultStatus.FAILED if final else TaskResultStatus.READY, before)
            write([record], using)
        if final and outcome.task is not None and outcome.data is not None:
            finished.append((build(outcome.task, message.id, TaskResultStatus.FAILED, outcome.data,
                                   self.backend.alias, errors=record.errors, worker_ids=record.worker_ids,
                                   started_at=record.started_at, last_attempted_at=record.last_attempted_at,
                                   finished_at=record.finished_at), exc))
        logger.log(logging.WARNING if final else logging.INFO,
                   "forq_worker: task %s (%s) attempt %d failed (%s: %s)%s", message.id,
                   outcome.data.get("task") if outcome.data else "?", message.attempts, type(exc).__name__, exc,
                   "; no attempt left" if final else "")
        return FAIL if final else NACK


# --- which queues -----------------------------------------------------------------------------


def forq_backends() -> list[ForqBackend]:
    """Every ``TASKS`` backend that is a :class:`ForqBackend`."""
    out = []
    for alias in task_backends.settings:
        backend = task_backends[alias]
        if isinstance(backend, ForqBackend):
            out.append(backend)
    return out


def runners(existing: list[str] | None = None) -> dict[str, TaskRunner]:
    """{forqapp queue: its runner} for every queue of every ``ForqBackend`` (what ``forq_worker``
    runs beside the consumers): the queues each lists in ``QUEUES``, and for one that lists none
    (any queue name valid) the queues with its prefix there are now (``existing``: read when not
    given). Two backends on one listed forqapp queue are refused; a found queue another backend
    lists is that backend's."""
    backends = forq_backends()
    if existing is None and any(b.any_queue for b in backends):
        existing = services.queue_names()
    out: dict[str, TaskRunner] = {}
    for backend in sorted(backends, key=lambda b: b.any_queue):  # (the listed queues first)
        for queue in backend.forq_queues(existing or ()):
            if queue in out:
                if not backend.lists(queue):
                    continue  # found by its prefix, but listed by another backend
                raise ImproperlyConfigured(
                    f"TASKS: backends {out[queue].backend.alias!r} and {backend.alias!r} both use the forqapp queue "
                    f"{queue!r} (give one a queue_prefix)")
            out[queue] = TaskRunner(backend, queue)
    return out


def finds_queues() -> bool:
    """Whether a ``ForqBackend`` lists no ``QUEUES``: the worker then looks for its new queues as
    it runs (:func:`new_runners`)."""
    return any(b.any_queue for b in forq_backends())


def new_runners(known: Iterable[str]) -> dict[str, TaskRunner]:
    """The runners of task queues made since the worker started (a backend with no ``QUEUES``: a
    task enqueued to a new queue name), but for the ``known`` queues (the worker's own, consumers
    too)."""
    known = set(known)
    return {q: r for q, r in runners().items() if q not in known and not r.backend.lists(q)}


def with_consumers(consumers: dict[str, Any]) -> dict[str, Any]:
    """``consumers`` (queue → ``@forqapp.consumer``) and the task runners, refusing a queue that
    has both (a queue a backend without ``QUEUES`` found by its prefix is the consumer's)."""
    tasks = runners()
    both = sorted(q for q in set(tasks) & set(consumers) if tasks[q].backend.lists(q))
    if both:
        raise ImproperlyConfigured(f"queue(s) {', '.join(both)} have a @forqapp.consumer and are task queues too")
    return {**tasks, **consumers}
