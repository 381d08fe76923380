"""Message move tasks: a dead-letter queue's redrive, as SQS's ``StartMessageMoveTask`` does it.

A task moves the messages of its source queue (a DLQ, usually) in batches — each batch one
transaction — to a destination queue, or each message back to the queue it was dead-lettered from
(``messages.dead_letter_source``; a ``<name>-dlq`` message that has none: to ``<name>``), at most
``rate`` messages a second. Its state is a row of ``forq_move_tasks`` (durable: a restart resumes
it); the ``moves`` job runs the due batches (:func:`run_moves`), and any number of processes or
hosts may run it at once: each batch holds its task's row. One running task per source queue.
The Python API (:func:`start_move`, :func:`list_moves`, :func:`move_info`, :func:`cancel_move`), the
SQS face, the admin and the UI all go through here.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from .. import errors, ids, metrics, validation, vocab
from ..conf import forq_settings
from ..errors import ForqError
from ..store import BATCH, MoveTaskRow
from ..vocab import MoveStatus, base_of
from . import base
from .base import _store
from .notify import kick


@dataclass(frozen=True)
class MoveInfo:
    """A move task: its ``handle``, ``source``, ``destination`` (None: each message back to its
    source queue), ``rate`` (messages a second; None: as fast as batches go), ``status``
    (:class:`forqapp.vocab.MoveStatus`), ``moved`` and ``to_move`` (the source's movable messages
    when it started), ``started_at`` and ``updated_at`` (Unix ms) and ``failure_reason``."""

    handle: str
    source: str
    destination: str | None
    rate: int | None
    status: str
    moved: int
    to_move: int
    started_at: int
    updated_at: int
    failure_reason: str | None

    @property
    def running(self) -> bool:
        return self.status == MoveStatus.RUNNING

    def json(self) -> dict[str, Any]:
        return asdict(self)


def _info(row: MoveTaskRow) -> MoveInfo:
    return MoveInfo(row.handle, row.source, row.destination, row.rate, row.status, row.moved, row.to_move,
                    row.started_at, row.updated_at, row.failure_reason)


def _exists(st: Any, queue: str) -> bool:
    """A queue exists when it has a row or messages; a DLQ ``<name>-dlq`` with ``<name>``."""
    return st.queue_get(base_of(queue)) is not None or bool(st.state_counts(base.now_ms(), [queue]))


def _rate(rate: object) -> int | None:
    if rate is None:
        return None
    if not validation.is_integer(rate) or rate not in vocab.MOVE_RATE:
        lo, hi = vocab.MOVE_RATE
        raise ForqError(errors.BODY_INVALID, f"rate must be an integer from {lo:.0f} to {hi:.0f} (messages a second)")
    return int(rate)


def start_move(source: str, destination: str | None = None, rate: int | None = None, *,
               to_dlq: bool = False, using: str | None = None) -> MoveInfo:
    """Start moving every message of queue ``source`` (not those in processing) to
    ``destination``, or (None) each back to the queue it was dead-lettered from, ``rate``
    messages a second at most (1 to 500; None: as fast as batches go). The ``moves`` job does the
    moving; this returns the task (``handle``) at once. Refused (``move.running``, 409) while
    ``source`` has a running task; ``not_found.queue`` when a queue does not exist; the source
    itself as the destination is refused (``bad_request.body.invalid``).

    ``to_dlq``: ``destination`` may be a dead-letter queue (``<name>-dlq``), as in
    :func:`~forqapp.services.produce.send_entries` (SQS's StartMessageMoveTask, where a DLQ is a
    queue like any, passes it); without it such a destination is refused
    (``bad_request.queue.produce_to_dlq``): forqapp fills its DLQs itself. The messages moved there
    are that DLQ's, as a send to it stores them: dead letters (``is_dlq``) expiring after
    ``<name>``'s ``dlq_retention``."""
    source = validation.queue_name(source)
    if destination is not None:
        destination = validation.queue_name(destination)
        if destination == source:
            raise ForqError(errors.BODY_INVALID, "a move's destination must be another queue than its source")
        if vocab.is_dlq(destination) and not to_dlq:
            raise ForqError(errors.PRODUCE_TO_DLQ, f"cannot move messages to dead-letter queue {destination!r} "
                            "(forqapp fills it; start_move(..., to_dlq=True) allows it)")
    per_second = _rate(rate)
    st = _store(using)
    for queue in (source, destination):
        if queue is not None and not _exists(st, queue):
            raise ForqError(errors.NOT_FOUND_QUEUE, f"no queue {queue!r}")
    handle = ids.new_id()
    row = st.move_start(handle, source, destination, per_second, base.now_ms())
    if row is None:
        raise ForqError(errors.MOVE_RUNNING, f"queue {source!r} has a running move task already", status=409)
    metrics.move_batch(0, None, started=True)
    return _info(row)


def list_moves(source: str, limit: int = 10, *, using: str | None = None) -> list[MoveInfo]:
    """``source``'s move tasks, the latest first (at most ``limit``, 1 to 10 as SQS lists them)."""
    source = validation.queue_name(source)
    if not validation.is_integer(limit) or limit not in vocab.MOVE_LIST:
        raise ForqError(errors.BODY_INVALID, "limit must be an integer from 1 to 10")
    return [_info(r) for r in _store(using).move_list(source, int(limit))]


def move_info(handle: str, *, using: str | None = None) -> MoveInfo:
    """The move task ``handle``; ``not_found.move`` if there is none."""
    row = _store(using).move_get(str(handle)) if isinstance(handle, str) else None
    if row is None:
        raise ForqError(errors.NOT_FOUND_MOVE, f"no move task {str(handle)[:100]!r}", status=404)
    return _info(row)


def cancel_move(handle: str, *, using: str | None = None) -> MoveInfo:
    """Cancel running task ``handle`` (the batch in progress, if any, completes first: what it
    moved stays moved); ``not_found.move`` if no such task is running."""
    row = _store(using).move_cancel(str(handle), base.now_ms()) if isinstance(handle, str) else None
    if row is None:
        raise ForqError(errors.NOT_FOUND_MOVE, f"no running move task {str(handle)[:100]!r}", status=404)
    metrics.move_batch(0, row.status)
    return _info(row)


def jobs_running(*, using: str | None = None) -> bool:
    """Whether a process runs the jobs (the ``moves`` job among them) on this database now: one
    holds the jobs lease (:data:`forqapp.vocab.JOBS_LEASE`) and it has not run out. Without one
    (``FORQ_SERVE_JOBS=false`` and no ``forq_jobs`` or ``forq_worker --with-jobs``), a started move
    task waits."""
    held = _store(using).lease_holder(vocab.JOBS_LEASE)
    return held is not None and held.expires_at > base.now_ms()


def run_moves(*, dry_run: bool = False, budget_s: float = 1.0, batch: int = BATCH,
              using: str | None = None) -> int:
    """Run due batches of running move tasks for up to ``budget_s`` seconds (each batch one
    transaction, ``batch`` messages at most, a task's rate permitting); returns how many messages
    moved. With ``dry_run``: how many tasks are running. The ``moves`` job."""
    st = _store(using)
    if dry_run:
        return st.move_running()
    deadline = time.monotonic() + budget_s
    total = 0
    while time.monotonic() < deadline:
        step = st.move_step(base.now_ms(), batch, forq_settings.queue_ttl_ms, forq_settings.dlq_ttl_ms)
        if step is None:
            break
        total += step.moved
        if step.destinations:
            kick(st.alias, step.destinations)
        metrics.move_batch(step.moved, None if step.task.status == MoveStatus.RUNNING else step.task.status)
    return total
