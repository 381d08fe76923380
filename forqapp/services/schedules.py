"""Periodic messages: ``forqapp.schedule(name, queue=…, content=…, cron=… | every=…)``.

A schedule is a row of ``forq_schedules`` with its next tick. The jobs scheduler (inside
``forq_serve``, or ``forq_jobs``) runs :func:`run_due` every second: for each schedule whose tick
has come, one transaction moves the row's next tick on (compare and set: a second scheduler running
at the same moment moves nothing and sends nothing) and sends the tick's message with the tick as
its dedup id, so every tick is sent exactly once — with two schedulers, and after a crash in the
middle of a tick (the transaction rolls back whole; the next run sends it).

Cron expressions are read by `cronsim <https://github.com/cuu508/cronsim>`_ (the cron parser of
healthchecks.io), in the project's ``TIME_ZONE``.

Ticks missed while nothing ran (downtime) follow the schedule's ``catch_up``: ``skip`` them (only a
tick less than :data:`GRACE_MS` late is sent), send ``one`` message for the latest, or send ``all``
(at most :data:`MAX_CATCH_UP` of them).
"""

from __future__ import annotations

import json
import logging
from collections import deque
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from cronsim import CronSim
from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from .. import errors, metrics, validation, vocab
from ..conf import forq_settings
from ..errors import ForqError
from ..store import ScheduleRow
from . import base
from .base import _store
from .produce import send, send_entries

logger = logging.getLogger("forqapp.schedules")

GRACE_MS = 60_000  # a tick this late is on time, not missed
MAX_CATCH_UP = 1_000  # ticks one run sends at most ("all")
DEDUP_WINDOW_S = vocab.DEDUP_WINDOW_MAX_S
CATCH_UP = validation.CATCH_UP


@dataclass
class ScheduleInfo:
    name: str
    queue: str
    content: str
    cron: str | None
    every: float | None  # seconds
    catch_up: str
    priority: int
    attributes: dict[str, str]
    paused: bool
    next_run_at: int  # Unix ms
    last_run_at: int | None

    @classmethod
    def from_row(cls, row: ScheduleRow) -> ScheduleInfo:
        return cls(row.name, row.queue, row.content, row.cron,
                   None if row.every_ms is None else row.every_ms / 1000, row.catch_up, row.priority,
                   validation.decode_attributes(row.attributes), row.paused, row.next_run_at,
                   row.last_run_at)

    def json(self) -> dict[str, Any]:
        return asdict(self)


def _invalid(message: str) -> ForqError:
    return ForqError(errors.BODY_INVALID, message)


def next_tick(cron: str | None, every_ms: int | None, after: int) -> int:
    """The first tick strictly after ``after`` (Unix ms)."""
    if every_ms is not None:
        return after + every_ms
    assert cron is not None  # noqa: S101 - a schedule has one or the other
    start = datetime.fromtimestamp(after / 1000, tz=timezone.get_default_timezone())
    for moment in CronSim(cron, start):
        tick = int(moment.timestamp() * 1000)
        if tick > after:
            return tick
    raise _invalid(f"cron {cron!r} never ticks")  # pragma: no cover - cronsim ends only on bad input


FIELDS = validation.SCHEDULE_FIELDS


def validate(name: object, fields: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """``name`` and the schedule's ``fields`` (:func:`schedule`'s keywords) → (name, the stored
    values from ``queue`` to ``paused``): :func:`forqapp.validation.schedule` under this
    project's ``FORQ_MAX_CONTENT_BYTES``. Raises ``ForqError``; touches no database."""
    return validation.schedule(name, fields, content_limit=forq_settings.FORQ_MAX_CONTENT_BYTES)


def schedule(name: str, *, queue: str | None = None, content: str | None = None, cron: str | None = None,
             every: Any = None, catch_up: str = "one", priority: int | None = None,
             attributes: dict[str, str] | None = None, paused: bool = False, using: str | None = None,
             task: Any = None, args: Any = (), kwargs: dict[str, Any] | None = None) -> ScheduleInfo:
    """Create or update the schedule ``name``: every tick of ``cron`` (five fields, in ``TIME_ZONE``)
    or every ``every`` (seconds or timedelta) sends ``content`` to ``queue`` once. A schedule whose
    timing is unchanged keeps its next tick.

    ``task=`` (a ``@task`` of a ``forqapp.tasks.ForqBackend``, with ``args`` and ``kwargs``) instead
    of ``queue`` and ``content``: each tick enqueues the task (:mod:`forqapp.tasks.scheduling`)."""
    if task is not None:
        if queue is not None or content is not None:
            raise _invalid("give a schedule a task, or a queue and a content, not both")
        queue, content = _task_message(task, args, kwargs)
        priority = task.priority if priority is None else priority
    name, fields = validate(name, {"queue": queue, "content": content, "cron": cron, "every": every,
                                   "catch_up": catch_up, "priority": priority, "attributes": attributes,
                                   "paused": paused})
    cron, every_ms = fields[2], fields[3]
    st = _store(using)
    now = base.now_ms()
    with transaction.atomic(using=st.alias):
        old = st.schedule_get(name)
        same_timing = old is not None and (old.cron, old.every_ms) == (cron, every_ms)
        next_run_at = old.next_run_at if old is not None and same_timing else next_tick(cron, every_ms, now)
        if old is not None and old.paused and not paused and next_run_at <= now:
            # Resumed (the admin's form, PUT, FORQ_SCHEDULES): as resume(), the ticks that fell
            # while it was paused are not sent, whatever catch_up says (that is for downtime).
            next_run_at = next_tick(cron, every_ms, now)
        row = ScheduleRow._make((name, *fields, next_run_at, old.last_run_at if old else None,
                                 old.created_at if old else now, now))
        st.schedule_put(row)
    return ScheduleInfo.from_row(row)


def pause(name: str, *, using: str | None = None) -> ScheduleInfo:
    """Pause the schedule ``name`` (one statement: an edit made meanwhile is kept)."""
    return _set_paused(name, True, using)


def resume(name: str, *, using: str | None = None) -> ScheduleInfo:
    """Resume the schedule ``name``. Ticks that fell while it was paused are not sent: its next
    tick is the first one from now (``catch_up`` is for downtime, not for a pause)."""
    return _set_paused(name, False, using)


def _set_paused(name: str, paused: bool, using: str | None) -> ScheduleInfo:
    st = _store(using)
    now = base.now_ms()
    with transaction.atomic(using=st.alias):
        row = st.schedule_get(str(name))
        if row is None:
            raise ForqError(errors.NOT_FOUND_SCHEDULE, f"no schedule {name!r}")
        next_run_at = None
        if not paused and row.paused and row.next_run_at <= now:
            next_run_at = next_tick(row.cron, row.every_ms, now)
        st.schedule_set_paused(row.name, paused, next_run_at, now)
    return get(row.name, using=st.alias)


def unschedule(name: str, *, using: str | None = None) -> bool:
    """Delete the schedule ``name``; False when there was none."""
    return _store(using).schedule_delete(str(name))


def list_schedules(*, using: str | None = None) -> list[ScheduleInfo]:
    return [ScheduleInfo.from_row(r) for r in _store(using).schedule_list()]


def get(name: str, *, using: str | None = None) -> ScheduleInfo:
    row = _store(using).schedule_get(str(name))
    if row is None:
        raise ForqError(errors.NOT_FOUND_SCHEDULE, f"no schedule {name!r}")
    return ScheduleInfo.from_row(row)


def run_now(name: str, *, using: str | None = None) -> str:
    """Send the schedule's message now, outside its ticks (the admin's "run now"); returns its id."""
    info = get(name, using=using)
    sent = send(info.queue, info.content, priority=info.priority, attributes=info.attributes or None,
                         using=using)
    _signal_tasks(info.content, [sent], info.priority)
    return sent


#: Sent after a schedule of a task sent messages (``content``: the task's message; ``ids``: the
#: messages'; ``priority``): :mod:`forqapp.tasks.scheduling` sends ``task_enqueued`` for each.
task_ticks_sent = Signal()


def _task_message(task: Any, args: Any, kwargs: dict[str, Any] | None) -> tuple[str, str]:
    """(queue, content) of a schedule of ``task``: its backend, a ``forqapp.tasks.ForqBackend``,
    makes them (:meth:`~forqapp.tasks.ForqBackend.schedule_message`)."""
    get_backend = getattr(task, "get_backend", None)
    backend = get_backend() if callable(get_backend) else None
    make = getattr(backend, "schedule_message", None)
    if make is None:
        raise _invalid("task must be a @task of a forqapp.tasks.ForqBackend" if backend is None else
                       f"task {task.module_path} uses backend {task.backend!r}, not a forqapp.tasks.ForqBackend")
    queue, content = make(task, args, kwargs or {})
    return str(queue), str(content)


def _signal_tasks(content: str, ids: list[str], priority: int) -> None:
    """A schedule of a task sends ``task_enqueued`` for each message it sent (forqapp.tasks)."""
    if ids and content.startswith('{"task":'):
        task_ticks_sent.send(sender=None, content=content, ids=ids, priority=priority)


def _ticks(row: ScheduleRow, now: int) -> tuple[list[int], int, int]:
    """(ticks to send, ticks missed, the next tick after now) of a due schedule."""
    if row.every_ms is not None:  # arithmetic: any downtime costs nothing to walk
        total = (now - row.next_run_at) // row.every_ms + 1
        tail = [row.next_run_at + k * row.every_ms for k in range(max(0, total - MAX_CATCH_UP), total)]
        next_run_at = row.next_run_at + total * row.every_ms
    else:
        kept: deque[int] = deque(maxlen=MAX_CATCH_UP)
        total, tick = 0, row.next_run_at
        while tick <= now:
            kept.append(tick)
            total += 1
            tick = next_tick(row.cron, None, tick)
        tail, next_run_at = list(kept), tick
    if row.catch_up == "all":
        send = tail
    elif row.catch_up == "one":
        send = tail[-1:]
    else:  # skip: only a tick that is on time
        send = [t for t in tail[-1:] if now - t <= GRACE_MS]
    return send, total - len(send), next_run_at


def run_due(*, dry_run: bool = False, using: str | None = None) -> int:
    """Send every tick that has come (the ``schedules`` job); returns how many messages were sent.
    A schedule that cannot send (its queue full, say) keeps its tick for the next run and does not
    hold up the others."""
    st = _store(using)
    now = base.now_ms()
    sent = 0
    failed = None
    for row in st.schedules_due(now, 100):
        ticks, missed, next_run_at = _ticks(row, now)
        if dry_run:
            sent += len(ticks)
            continue
        try:
            if not _send_ticks(st, row, ticks, next_run_at, now):
                continue  # another scheduler took this tick
        except Exception as exc:  # noqa: BLE001 - one schedule's trouble must not stop the others
            errors.log_failure(logger, f"forqapp schedules: {row.name} sending its tick to {row.queue}", exc,
                               "tried again at the next run", traceback=False)
            metrics.schedule_failed(row.name)
            failed = exc
            continue
        metrics.schedule_ticked(row.name, len(ticks))
        metrics.schedule_missed(row.name, missed)
        sent += len(ticks)
    if failed is not None and not sent:
        raise failed  # the job's run counts as an error (forq_job_runs_total), after the others ran
    return sent


def _send_ticks(st: Any, row: ScheduleRow, ticks: list[int], next_run_at: int, now: int) -> bool:
    attributes = json.loads(row.attributes) if row.attributes else None
    sent: list = []
    with transaction.atomic(using=st.alias):
        if not st.schedule_advance(row.name, row.next_run_at, next_run_at, max(ticks, default=None), now):
            return False
        if ticks:
            sent = send_entries(row.queue, [
                {"content": row.content, "priority": row.priority, "attributes": attributes,
                 "dedup_id": f"schedule:{row.name}:{tick}"} for tick in ticks
            ], dedup_window=DEDUP_WINDOW_S, using=st.alias)
    _signal_tasks(row.content, [r.id for r in sent if not r.deduplicated], row.priority)
    return True


def declare(using: str | None = None) -> list[str]:
    """Create or update every schedule of ``FORQ_SCHEDULES``; returns their names."""
    declared = forq_settings.FORQ_SCHEDULES
    for name, fields in declared.items():
        fields = dict(fields)
        schedule(name, using=using, **fields)
    return list(declared)

