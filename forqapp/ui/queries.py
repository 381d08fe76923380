"""The UI's and the admin's reads, through the ORM (the same on SQLite and PostgreSQL), and the
store's counts (through :func:`forqapp.services.queues.state_counts`).

Counts come from the store, each kind of row counted in the index it lives in, every queue at once
(never one query per queue). A queue's policy is its ``forq_queues`` row, resolved against the
global settings by :func:`forqapp.services.policies.resolve` (the services' own rule): one read, no counting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db.models import Count
from django.db.models.functions import Length, Substr

from .. import vocab
from ..conf import forq_settings
from ..models import Message, Queue
from ..services import queues
from ..services.policies import Policy, of_row

PAGE_SIZE = 50
PREVIEW_CHARS = 160


def messages(using: str | None = None):
    return Message.objects.using(using or forq_settings.FORQ_DATABASE)


@dataclass
class QueueStats:
    """Counts of one queue (regular or DLQ)."""

    name: str
    ready: int = 0  # due now
    delayed: int = 0  # ready, due later
    processing: int = 0
    failed: int = 0

    @property
    def is_dlq(self) -> bool:
        return vocab.is_dlq(self.name)

    @property
    def total(self) -> int:
        return self.ready + self.delayed + self.processing + self.failed


@dataclass
class QueueRow:
    """A dashboard row: a regular queue and its dead-letter queue."""

    name: str
    queue: QueueStats
    dlq: QueueStats
    exists: bool = False  # the regular queue holds messages
    configured: bool = False  # it has a row in forq_queues (a policy, maybe empty)
    paused: bool = False
    max_in_flight: int | None = None  # its flow-control limits (no global default exists)
    rate: str | None = None
    history: list | None = None
    dlq_history: list | None = None

    @property
    def dlq_name(self) -> str:
        return vocab.dlq_of(self.name)


@dataclass
class Overview:
    rows: list[QueueRow] = field(default_factory=list)
    counting: bool = False  # the first count of this process is still running

    @property
    def queues(self) -> int:
        """The queues the table lists — with messages, or known (configured, or drained: their
        row stays) — and the DLQs holding messages (:attr:`dlqs` of them). A drained queue was left
        out: 2 beside a table of 3."""
        return sum(r.exists or r.configured for r in self.rows) + self.dlqs

    @property
    def messages(self) -> int:
        return sum(r.queue.total for r in self.rows)

    @property
    def dlq_messages(self) -> int:
        return sum(r.dlq.total for r in self.rows)

    @property
    def dlqs(self) -> int:
        return sum(r.dlq.total > 0 for r in self.rows)


def queue_stats(now: int, queue: str | Sequence[str] | None = None, *,
                using: str | None = None) -> dict[str, QueueStats]:
    """{queue: QueueStats} for every queue (or just ``queue``, or the queues named), in one read of
    the store (:meth:`~forqapp.store.Store.state_counts`: each kind of row counted in the index it
    lives in). As the store counts (``queue_info``): a delivery whose lease ended counts as ready
    (the next receive takes it), only a live lease is in flight; a message sent due is ready."""
    names = [queue] if isinstance(queue, str) else None if queue is None else list(queue)
    counts = queues.state_counts(now, names, using=using or forq_settings.FORQ_DATABASE)
    return {name: QueueStats(name, ready=c.ready, delayed=c.delayed, processing=c.processing, failed=c.failed)
            for name, c in counts.items()}


def queue_rows(using: str | None = None):
    return Queue.objects.using(using or forq_settings.FORQ_DATABASE)


def policy_of(row: Queue | None) -> Policy:
    """A queue's policy in force, from its row (None: no row, the global settings), resolved by
    :func:`forqapp.services.policies.resolve` as the services do, without another query."""
    return of_row(row)


def queue_policy(queue: str, *, using: str | None = None) -> tuple[Policy, bool]:
    """(policy in force, whether the queue has a row) of ``queue`` — a DLQ's is its queue's."""
    row = queue_rows(using).filter(name=vocab.base_of(queue) if vocab.is_dlq(queue) else queue).first()
    return policy_of(row), row is not None


def overview(now: int, *, using: str | None = None) -> Overview:
    """Every queue: those holding messages, and those with a row (an empty queue that was
    configured, or drained) — three grouped reads, whatever the number of queues."""
    stats = queue_stats(now, using=using)
    rows: dict[str, QueueRow] = {}
    for name, paused, max_in_flight, rate in queue_rows(using).order_by().values_list(
            "name", "paused", "max_in_flight", "rate"):
        rows[name] = QueueRow(name, QueueStats(name), QueueStats(vocab.dlq_of(name)), configured=True,
                              paused=paused, max_in_flight=max_in_flight, rate=rate)
    for name, s in stats.items():
        base = vocab.base_of(name) if s.is_dlq else name
        row = rows.setdefault(base, QueueRow(base, QueueStats(base), QueueStats(vocab.dlq_of(base))))
        if s.is_dlq:
            row.dlq = s
        else:
            row.queue, row.exists = s, True
    return Overview(rows=sorted(rows.values(), key=lambda r: r.name))


def page(queue: str, before: str | None = None, *, limit: int = PAGE_SIZE, using: str | None = None) -> list:
    """Newest first, ``limit`` at a time, keyset on the time-ordered id (never OFFSET). Content is
    cut to a preview in SQL, so a page never loads whole large messages."""
    qs = messages(using).filter(queue=queue, is_dlq=vocab.is_dlq(queue))
    if before:
        qs = qs.filter(id__lt=before)
    return list(
        # Same order as "-id" (queue and is_dlq are fixed), spelled so the planner walks
        # idx_for_queue_depth (queue, is_dlq, id) backwards instead of sorting the queue.
        qs.order_by("-queue", "-is_dlq", "-id")
        .annotate(preview=Substr("content", 1, PREVIEW_CHARS), size=Length("content"))
        .only("id", "queue", "is_dlq", "status", "attempts", "process_after", "received_at",
              "updated_at", "failure_reason", "last_error", "expires_after", "processing_started_at")
        [: limit + 1]
    )


def message(queue: str, message_id: str, *, using: str | None = None) -> Message | None:
    """One message, read-only (a peek: its status and attempts do not change)."""
    return messages(using).filter(queue=queue, id=message_id).first()


def queue_names(*, using: str | None = None) -> list[str]:
    """Every queue name (for the admin's filter), one grouped read of an index."""
    qs = messages(using).order_by().values_list("queue").annotate(n=Count("*"))
    return sorted(q for q, _ in qs)


__all__ = ["Overview", "QueueRow", "QueueStats", "message", "overview", "page", "policy_of", "queue_names",
           "queue_policy", "queue_rows", "queue_stats"]
