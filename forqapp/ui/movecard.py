"""Move tasks as the pages show them (the DLQ page's moves card, the admin's queue page): each
task's status in words — "waiting for the jobs process" for a running task that no process runs
(it would sit, saying "running", otherwise) — its progress, destination, start and end."""

from __future__ import annotations

from dataclasses import dataclass

from .. import services, vocab
from ..services import MoveInfo
from ..utils import ms_to_datetime

REFRESH_SECONDS = 2  # the moves card's refresh while a task runs
SHOWN = 10  # the latest tasks shown (SQS's ListMessageMoveTasks shows at most 10)
WAITING = "waiting for the jobs process"
NO_JOBS = ("No process runs the jobs on this database now (forq_serve with FORQ_SERVE_JOBS on, forq_jobs, or "
           "forq_worker --with-jobs): a move waits for one (or for forq_jobs run moves).")


@dataclass(frozen=True)
class MoveRow:
    """A move task as the pages show it."""

    task: MoveInfo
    status: str  # in words: "running", "waiting for the jobs process", "completed", "failed: …"
    waiting: bool
    destination: str
    started: str
    finished: str  # "—" while it runs

    @property
    def percent(self) -> int:
        return 100 if not self.task.to_move else min(100, self.task.moved * 100 // self.task.to_move)


def _text(ms: int) -> str:
    when = ms_to_datetime(ms)
    return "—" if when is None else when.strftime("%Y-%m-%d %H:%M:%S UTC")


def move_rows(source: str, *, limit: int = SHOWN) -> list[MoveRow]:
    """``source``'s latest move tasks, the latest first. A running task whose database has no
    process running the jobs says it waits for one (it would sit otherwise, saying "running")."""
    tasks = services.list_moves(source, limit)
    jobs = any(t.running for t in tasks) and services.jobs_running()
    rows = []
    for t in tasks:
        waiting = t.running and not jobs
        status = WAITING if waiting else t.status.lower()
        if t.failure_reason:
            status = f"{status}: {t.failure_reason}"
        rows.append(MoveRow(t, status, waiting, t.destination or "each its source queue", _text(t.started_at),
                            "—" if t.running else _text(t.updated_at)))
    return rows


def card_context(queue: str) -> dict:
    """What ``_queue_moves.html`` needs (the DLQ page's context has it too)."""
    rows = move_rows(queue)
    return {"queue": queue, "moves": rows, "moves_running": any(r.task.running for r in rows),
            "moves_waiting": any(r.waiting for r in rows), "no_jobs": NO_JOBS, "moves_refresh": REFRESH_SECONDS,
            "rate_bounds": vocab.MOVE_RATE}
