"""The store contract: every queue operation once, typed and documented, and what a database can do.

A store is the only code that writes SQL for the queue. There is one class per database
(:class:`~forqapp.store.sqlite.SQLiteStore`, :class:`~forqapp.store.postgresql.PostgreSQLStore`),
bound to a Django database alias; :func:`forqapp.store.for_alias` gives the cached instance. Each
operation gets the DB-API connection under Django's wrapper itself (in autocommit, unless the caller
is inside ``transaction.atomic()`` on that alias) and takes plain values; it knows nothing of HTTP,
settings or metrics (those are :mod:`forqapp.services`' business).

Receipts: a delivery is named by the ``processing_started_at`` its claim wrote. The claim makes it
strictly greater than the row's ``updated_at``, and every write keeps ``updated_at`` from going back,
so a message's successive deliveries always have distinct, growing receipts, even with clocks that
step backwards. Every settle (ack, nack, fail, release, extend) names the delivery by
(queue, id, receipt) and does nothing — returns False/None — when it is no longer current.

Times are Unix milliseconds. Jobs work in batches of ``batch`` rows, one short write each, and
never touch a message in processing (except :meth:`Store.recover_stale`, whose job that is).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import repeat
from typing import Any, ClassVar, Literal, NamedTuple

from django.core.checks import CheckMessage
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..vocab import DLQ_SUFFIX, SNAPSHOT_COLUMNS, MoveStatus, base_of, is_dlq

# --- rows -------------------------------------------------------------------------------------


class NewMessage(NamedTuple):
    """A message to insert, ready (``status`` READY, no attempts yet). ``attributes`` is a JSON
    object as text (or None); the store assigns ``sequence``."""

    id: str
    queue: str
    content: str
    process_after: int
    received_at: int
    expires_after: int
    priority: int = 0
    attributes: str | None = None
    dedup_id: str | None = None
    group: str | None = None  # the message's group (None: none)


# A NewMessage's fields as a plain tuple, which :meth:`Store.insert` takes as well: send_many's
# usual batch builds its rows so. Python's cycle collector stops tracking a plain tuple of strings
# and numbers at its first pass, but tracks a tuple subclass for as long as it lives: 10,000
# NewMessage rows a call set off full collections of the whole heap (measured: 1 to 2 of them, 60
# to 90 ms each, a 50,000-message run with a large heap; gone with plain tuples).
MessageRow = tuple[str, str, str, int, int, int, int, str | None, str | None, str | None]


class Delivery(NamedTuple):
    """A claimed (or peeked) message; ``receipt`` names this delivery (settles must echo it; None
    for a peek). ``lease_expires_at`` is when the lease ends (None when not in processing)."""

    id: str
    queue: str
    content: str
    attempts: int
    receipt: int | None
    priority: int = 0
    attributes: str | None = None
    dedup_id: str | None = None
    sequence: int = 0
    received_at: int = 0
    first_received_at: int | None = None
    lease_expires_at: int | None = None
    state: str | None = None
    group: str | None = None


class QueueRow(NamedTuple):
    """A queue's row in ``forq_queues``: its policy (None: the global setting), pause and counter."""

    name: str
    max_attempts: int | None
    backoff: str | None
    visibility_timeout_ms: int | None
    retention_ms: int | None
    dlq_retention_ms: int | None
    max_length: int | None
    ordering: str | None
    dedup_window_ms: int | None
    max_in_flight: int | None
    rate: str | None
    group_concurrency: int | None
    group_rate: str | None
    dead_letter_queue: str | None
    paused: bool
    last_sequence: int
    created_at: int
    updated_at: int
    rate_next_at_us: int


#: The policy columns of ``forq_queues`` (what :meth:`Store.queue_put` sets, with ``paused``).
POLICY_COLUMNS: tuple[str, ...] = QueueRow._fields[1:15]


class QueueCounts(NamedTuple):
    """A queue's messages by state: ready (due now), delayed, in flight (leased), failed (waiting
    for the DLQ job), and in its DLQ."""

    ready: int
    delayed: int
    in_flight: int
    failed: int
    dlq: int


class Claim(NamedTuple):
    """What a claim did: the deliveries, and how many used-up messages it moved to the DLQ instead;
    when a limit of the queue held it back, which (``"concurrency"`` or ``"rate"``) and, for the
    rate, when the next claim may happen (Unix ms).

    ``redriven_messages`` are the moved messages as they are now: in ``<queue>-dlq``, attempts 0,
    ``receipt`` and ``lease_expires_at`` None. Only the claim that moved a message returns it (a
    dead letter is never redriven again), so a caller that reports them (forq_worker's task
    runners: ``task_finished``) reports each once."""

    deliveries: list[Delivery]
    redriven_messages: tuple[Delivery, ...] = ()
    throttled: str | None = None
    retry_at: int | None = None

    @property
    def redriven(self) -> int:
        """How many used-up messages the claim moved to the DLQ."""
        return len(self.redriven_messages)


class GroupState(NamedTuple):
    """One group of a queue: its ready messages (due now or later), those under a live lease, and
    when its next claim may come (Unix ms; None: it has nothing to claim)."""

    group: str
    ready: int
    in_flight: int
    next_eligible_at: int | None


class ThrottleState(NamedTuple):
    """A limited queue's state: its live leases, and when its next claim may happen (Unix µs)."""

    in_flight: int
    rate_next_at_us: int


class ScheduleRow(NamedTuple):
    """A periodic message (``forq_schedules``)."""

    name: str
    queue: str
    content: str
    cron: str | None
    every_ms: int | None
    catch_up: str
    priority: int
    attributes: str | None
    paused: bool
    next_run_at: int
    last_run_at: int | None
    created_at: int
    updated_at: int


class StagedMessage(NamedTuple):
    """A message staged by an exactly-once bulk write, invisible until its token is published."""

    id: str
    content: str
    process_after: int
    priority: int = 0
    attributes: str | None = None
    group: str | None = None  # the message's group (None: none)


class SnapshotRow(NamedTuple):
    """One message as a snapshot read shows it (columns: :data:`forqapp.vocab.SNAPSHOT_COLUMNS`)."""

    id: str
    queue: str
    content: str
    status: int
    attempts: int
    received_at: int
    process_after: int
    failure_reason: str | None
    priority: int
    attributes: str | None
    dedup_id: str | None
    sequence: int
    first_received_at: int | None
    last_error: str | None
    group: str | None  # the message's group (None: none)


assert SnapshotRow._fields == SNAPSHOT_COLUMNS  # noqa: S101 - the row is the vocabulary's column list


class SnapshotBounds(NamedTuple):
    messages: int
    min_id: str | None
    max_id: str | None


class QueueDepth(NamedTuple):
    queue: str
    is_dlq: bool
    messages: int


class StateCounts(NamedTuple):
    """A queue's messages (a DLQ is a queue of its own here) and, of them, those in three states."""

    total: int
    failed: int
    delayed: int  # ready, written to come due later, and not due yet
    processing: int  # under a live lease

    @property
    def ready(self) -> int:
        """Due now (an ended lease included): the others."""
        return self.total - self.failed - self.delayed - self.processing


NO_MESSAGES = StateCounts(0, 0, 0, 0)


def state_counts_of(rows: Iterable[Sequence[Any]]) -> dict[str, StateCounts]:
    """A store's (queue, kind, count) rows as {queue: StateCounts}: kind -1 all of a queue's rows,
    0 the failed, 1 the delayed, 2 the live leases."""
    counts: dict[str, list[int]] = {}
    for queue, kind, n in rows:
        counts.setdefault(queue, [0, 0, 0, 0])[int(kind) + 1] = int(n)
    return {queue: StateCounts(*c) for queue, c in counts.items() if c[0]}


def queue_counts_of(counts: dict[str, StateCounts], queue: str) -> QueueCounts:
    """``queue``'s :class:`QueueCounts` from :meth:`Store.state_counts` of it and its DLQ (a
    message sent due counts as ready, even when a clock ahead of this one's wrote it)."""
    q = counts.get(queue, NO_MESSAGES)
    return QueueCounts(q.ready, q.delayed, q.processing, q.failed, counts.get(queue + DLQ_SUFFIX, NO_MESSAGES).total)


class MoveTaskRow(NamedTuple):
    """A message move task's row (``forq_move_tasks``): times in Unix ms."""

    handle: str
    source: str
    destination: str | None  # None: each message back to the queue it was dead-lettered from
    rate: int | None  # messages a second (None: as fast as batches go)
    status: str  # forqapp.vocab.MoveStatus
    moved: int
    to_move: int
    started_at: int
    updated_at: int
    next_at: int
    failure_reason: str | None


class MoveStep(NamedTuple):
    """One batch of a move task (:meth:`Store.move_step`): the task after it, and the queues its
    messages went to."""

    task: MoveTaskRow
    moved: int  # by this batch
    destinations: tuple[str, ...]


#: The columns of a MoveTaskRow, in its order (each store's SELECT and RETURNING).
MOVE_TASK_COLUMNS = ", ".join(MoveTaskRow._fields)
#: Why a move task without a destination stops when its source holds messages it cannot send back.
NO_SOURCE_QUEUE = ("some messages have no source queue to go back to (sent to this queue, not dead-lettered "
                   "into it): start a move with a destination for them")


def move_outcome(task: MoveTaskRow, asked: int, moved: int, now: int,
                 stranded: Callable[[], Any]) -> tuple[str, str | None, int]:
    """(status, failure reason, next batch's time) of ``task`` after a batch that asked for
    ``asked`` messages and moved ``moved``: done when the source gave fewer, or all it had to move
    are moved; FAILED if, without a destination, its source holds messages that cannot go back
    (``stranded()``: never dead-lettered, outside a ``<name>-dlq``)."""
    if asked == 0 or moved < asked or task.moved + moved >= task.to_move:
        if task.destination is None and not is_dlq(task.source) and stranded():
            return MoveStatus.FAILED.value, NO_SOURCE_QUEUE, now
        return MoveStatus.COMPLETED.value, None, now
    return MoveStatus.RUNNING.value, None, now + (-(-moved * 1000 // task.rate) if task.rate else 0)


def move_params(task: MoveTaskRow, now: int, n: int, queue_ttl_ms: int, dlq_ttl_ms: int) -> dict[str, Any]:
    """The parameters of each store's batch of ``task`` (``n`` messages at most). ``into_dlq``: its
    destination is a dead-letter queue (``<name>-dlq``), whose messages are DLQ messages (``is_dlq``)
    expiring after ``<name>``'s ``dlq_retention`` (``retention_of``: ``<name>``; ``ttl``: the global
    DLQ retention), as a send to it (SQS's) stores them; else each expires after its new queue's
    ``retention`` (``ttl``: the global one). A move without a destination never goes to a DLQ: a
    dead letter's source, and ``<name>`` of a ``<name>-dlq`` source, are regular queues."""
    into_dlq = task.destination is not None and is_dlq(task.destination)
    return {"source": task.source, "destination": task.destination, "now": now, "n": n,
            "source_base": base_of(task.source) if is_dlq(task.source) else None, "into_dlq": into_dlq,
            "retention_of": base_of(task.destination) if task.destination is not None and into_dlq else None,
            "ttl": dlq_ttl_ms if into_dlq else queue_ttl_ms}


class LeaseHolder(NamedTuple):
    """Who holds a lease, and until when (Unix ms)."""

    holder: str
    expires_at: int


Staged = tuple[str, str]  # (token, queue)

BATCH = 1_000
#: A random-order claim picks among this many due messages (the next ones in priority order).
RANDOM_AMONG = 1_000
#: A claim chooses among the deliveries whose leases ended first, this many of them (or its limit
#: when larger), by priority then sequence: beyond that many ended at once (consumers that died with
#: thousands of leases), the others wait their turn, and a claim costs no more than sorting this many.
#: The same holds for the ready messages that were written to come due later (sent with a delay,
#: backed off, deferred, released, requeued): among the first this many to have come due. A LIFO
#: claim chooses among the last this many of each to have come due (newest first).
ENDED_AMONG = 100
#: A claim that finds used-up messages moves them to the DLQ and claims again, this many times at most.
MAX_REDRIVE_ROUNDS = 100


# --- the contract ---------------------------------------------------------------------------


class Store(abc.ABC):
    """Every SQL operation of the queue, for one database, bound to one Django alias."""

    #: Django's ``connection.vendor`` this store serves.
    vendor: ClassVar[str]
    #: Whether message text may contain U+0000 (PostgreSQL ``text`` cannot; services refuse it).
    text_holds_nul: ClassVar[bool]
    #: How :meth:`data_version` learns of other connections' writes: ``"data_version"`` (a cheap
    #: counter the notifier polls every ``FORQ_WAKE_POLL_MS``) or ``"listen"`` (notifications the
    #: writes send, which the notifier's connection receives).
    wakeups: ClassVar[Literal["data_version", "listen"]]
    #: Database threads of the async API when ``FORQ_DB_THREADS`` is unset (SQLite has one writer).
    default_db_threads: ClassVar[int]
    default_api_workers: ClassVar[int]  # forq_serve's API processes when FORQ_API_WORKERS is unset
    #: Whether the database runs on a clock of its own that hosts sharing it can follow
    #: (:meth:`clock_samples`): PostgreSQL's server. SQLite is in the process: the host's clock.
    has_clock: ClassVar[bool] = False

    def __init__(self, alias: str, dbapi_connection: Any = None) -> None:
        self.alias = alias
        self._fixed = dbapi_connection

    @classmethod
    def on(cls, dbapi_connection: Any) -> Store:
        """A store that runs on ``dbapi_connection`` (another session: tests, tools) rather than on
        its alias' Django connection."""
        return cls("", dbapi_connection)

    @property
    def connection(self) -> BaseDatabaseWrapper:
        """The Django connection of this store's alias (for this thread)."""
        return connections[self.alias]

    def _conn(self) -> Any:
        """The DB-API connection under the Django connection wrapper (opened if needed)."""
        if self._fixed is not None:
            return self._fixed
        connection = connections[self.alias]
        connection.ensure_connection()
        raw = connection.connection
        if self._lost(raw) and not connection.in_atomic_block:
            # The server closed it (a restart, pg_terminate_backend, a network cut): the raw
            # cursors' errors are the driver's, which Django does not see, so it would hand this
            # dead connection back forever. A new one now (inside a transaction: the error stands).
            connection.close()
            connection.ensure_connection()
            raw = connection.connection
        return raw

    def _lost(self, raw: Any) -> bool:
        """Whether the DB-API connection ``raw`` is lost for good (the server's side closed)."""
        return False

    # -- configuration -----------------------------------------------------------------------

    def check(self) -> Iterator[CheckMessage]:
        """This database's system checks (``manage.py check``; errors stop ``forq_serve``).
        Must not connect: checks run before there is a database."""
        return iter(())

    def startup_problems(self) -> list[str]:
        """What stops a server from starting on this database, one line each, found before the
        migration check connects (e.g. a missing directory for the database file)."""
        return []

    def poll_interval(self, default_s: float) -> float:
        """How long the notifier sleeps between :meth:`data_version` checks while consumers wait."""
        return default_s

    # -- produce -----------------------------------------------------------------------------

    @abc.abstractmethod
    def insert(self, rows: Sequence[MessageRow], *, is_dlq: bool = False) -> list[int]:
        """Insert new ready messages (attempts 0; :class:`NewMessage` or plain tuples of its
        fields), creating their queue's row if it has none.
        Returns their sequence numbers, in row order: strictly increasing per queue, never reused
        (a DLQ's messages number with their regular queue). Atomic on its own (the numbers and the
        rows commit together), or part of the caller's transaction. A write that makes messages
        ready wakes listeners on commit where :attr:`wakeups` is ``"listen"``."""

    def insert_batch(self, queue: str, ids: Sequence[str], contents: Sequence[str], priorities: Sequence[int],
                     attributes: Sequence[str | None], *, due: int, received: int, expires: int) -> list[int]:
        """:meth:`insert` of one regular queue's messages given a column at a time (the same length
        each), which share their due time, time received and expiry and carry no dedup id:
        send_many's usual batch, without a tuple a message. Returns their sequence numbers, as
        :meth:`insert` does."""
        if not len(ids) == len(contents) == len(priorities) == len(attributes):
            raise ValueError("insert_batch: columns of different lengths")
        return self.insert(list(zip(ids, repeat(queue), contents, repeat(due), repeat(received), repeat(expires),
                                    priorities, attributes, repeat(None), repeat(None))))

    def insert_one(self, row: NewMessage) -> int:
        """:meth:`insert` of one regular message (a single send: the hot path, which a store may
        serve with fewer steps); returns its sequence number."""
        return self.insert([row])[0]

    @abc.abstractmethod
    def dedup(self, queue: str, dedup_id: str, message_id: str, now: int, window_ms: int) -> str | None:
        """Record that ``dedup_id`` on ``queue`` names ``message_id`` until ``now + window_ms``, and
        return None; or, while an earlier record is live, record nothing and return its message id.
        Call in the transaction that inserts the message, so a refused insert forgets the record."""

    @abc.abstractmethod
    def queue_length(self, queue: str, limit: int) -> int:
        """How many messages ``queue`` holds (its DLQ apart), counting up to ``limit``. Inside the
        produce's transaction, exact against concurrent producers (PostgreSQL locks the queue's row
        first; SQLite has one writer)."""

    # -- consume -----------------------------------------------------------------------------

    @abc.abstractmethod
    def claim(self, queue: str, now: int, limit: int = 1, *, visibility_ms: int, max_attempts: int,
              dlq_ttl_ms: int, order: str = "fifo", max_in_flight: int | None = None,
              rate_interval_us: int | None = None, group_concurrency: int | None = None,
              group_rate_us: int | None = None, group_batch: bool = False) -> Claim:
        """Take up to ``limit`` due messages of ``queue`` — ready ones due by ``now`` (those that came
        due later than they were written: among the first :data:`ENDED_AMONG` to come due) and
        deliveries whose lease has ended (among the first :data:`ENDED_AMONG` to end) — by priority (highest
        first), then sequence (``order`` ``"fifo"``: oldest first; ``"lifo"``: newest first within
        a priority, a priority at a time; ``"random"``: at random among the next
        :data:`RANDOM_AMONG`; ``"due"``: by the time each came due — its ``process_after``, which
        for a message sent with a due time in the past is that time — then sequence). Each becomes processing, one
        attempt more, a new receipt, leased until ``now + visibility_ms``. A message whose attempts
        are used up (``max_attempts`` > 0) is moved to its DLQ (reason ``max_attempts_reached``,
        expiring after ``dlq_ttl_ms``) instead, counted in :attr:`Claim.redriven` and returned in
        :attr:`Claim.redriven_messages` (committed with the claim). Concurrent
        claims never take the same row. Deliveries come sorted in the claim's order.

        With ``max_in_flight`` and/or ``rate_interval_us`` (the queue's limits), the claim runs in one
        transaction that holds the queue's row: it takes no more than leave ``max_in_flight`` live
        leases (an expired lease frees its slot), and only when the queue's next rate slot has come
        (each message claimed moves it ``rate_interval_us`` on) — exact across processes and hosts.
        Held back, it returns the reason in :attr:`Claim.throttled`.

        Message groups: the messages without a group are claimed as above, first; then, for what
        is left of ``limit``, messages of the queue's groups, one group's turn at a time: the group
        whose next turn (``forq_groups.eligible_at``) comes first, then its first message in claim
        order (priority, then sequence) that it may deliver. A message delivered once holds a slot
        of its group until acked, failed, or moved to the DLQ (through a nack's backoff and an
        ended lease: then only that message may go again), and a group holds at most
        ``group_concurrency`` slots (1: strict order); ``group_rate_us`` spaces one group's claims.
        A claim held back by the group limits alone says ``"group"`` in :attr:`Claim.throttled`.
        ``group_batch`` (SQS's FIFO receive; not with ``group_rate_us``): a group's turn also takes
        its next due messages in claim order, up to ``limit``, for the same receiver, beyond its
        slots; while as many of a group's held messages as it has slots are busy (leased, or
        waiting out a backoff), its other held ones wait even when due again, so that a batch given
        back is taken again first message first and the group stays in order across receivers.
        The order within a claim's deliveries is the claim's: ungrouped ones, then by group turn.
        Whatever the number of groups, each turn reads index ranges of one group, bounded by its
        slots, in the claim's one transaction."""

    # -- message groups ----------------------------------------------------------------------

    @abc.abstractmethod
    def group_state(self, queue: str, group: str, now: int) -> GroupState:
        """One group of ``queue``: its ready messages, its live leases and its next turn (Unix ms;
        None when it has no row: no messages). Reads the group's index ranges."""

    @abc.abstractmethod
    def busiest_groups(self, queue: str, now: int, limit: int) -> list[GroupState]:
        """``queue``'s groups with the most messages (ready and in flight), up to ``limit``. Reads
        every group of the queue (the admin's view, not a hot path)."""

    @abc.abstractmethod
    def group_count(self, queue: str) -> int:
        """How many groups of ``queue`` have messages (ready or in processing)."""

    @abc.abstractmethod
    def next_group_turn(self, queue: str) -> int | None:
        """The earliest next turn of ``queue``'s groups (Unix ms), or None when it has none."""

    def next_group_turns(self, queues: Sequence[str]) -> dict[str, int]:
        """:meth:`next_group_turn` of each of ``queues`` (those with none left out); stores answer
        in one read."""
        turns = {q: self.next_group_turn(q) for q in queues}
        return {q: t for q, t in turns.items() if t is not None}

    @abc.abstractmethod
    def next_turns(self, queues: Sequence[str]) -> dict[str, int]:
        """Per queue of ``queues``, the earliest time (Unix ms) something of it comes due by the
        clock alone: a delayed message, a lease's end, a group's turn (queues with none left out;
        a time already past is possible). One read: the notifier sleeps until then."""

    @abc.abstractmethod
    def notify(self, queue: str) -> None:
        """Tell other processes' notifiers that ``queue`` may have something to claim although no
        message became ready (a settle freed a slot of a limited queue); on commit inside a transaction."""

    @abc.abstractmethod
    def throttle_state(self, queue: str, now: int) -> ThrottleState:
        """A limited queue's live leases and next rate slot (a read)."""

    @abc.abstractmethod
    def defer(self, queue: str, message_id: str, receipt: int, now: int, delay_ms: int, state: str | None) -> bool:
        """Put a delivered message back to ready ``delay_ms`` from now, keeping its id and attempts,
        behind the messages of its priority already there (a new sequence number, so the others get
        a turn); ``state`` (when not None) replaces its saved state. False when the delivery is not
        current."""

    @abc.abstractmethod
    def peek(self, queue: str, now: int, order: str = "fifo") -> Delivery | None:
        """The message without a group a claim would take now, changing nothing; its ``receipt``
        is None."""

    @abc.abstractmethod
    def peek_grouped(self, queue: str, now: int, concurrency: int | None, rate_us: int | None) -> Delivery | None:
        """The message of a group a claim would take now (the group whose turn comes first that may
        deliver one, within ``concurrency`` slots and its ``rate_us`` spacing; in it, the first by
        priority then sequence), changing nothing; its ``receipt`` is None."""

    @abc.abstractmethod
    def peek_message(self, queue: str, message_id: str) -> tuple[Delivery, str | None, str | None] | None:
        """Message ``message_id`` of ``queue``, in any state (as :meth:`peek` shows one), with why it
        failed: (the message, its ``failure_reason``, its ``last_error``), in one read; None when
        there is no such message."""

    @abc.abstractmethod
    def ack(self, queue: str, message_id: str, receipt: int) -> bool:
        """Delete a delivered message; False when the delivery is not current."""

    @abc.abstractmethod
    def ack_many(self, queue: str, deliveries: Iterable[tuple[str, int]]) -> int:
        """Ack [(id, receipt)]; returns how many were still current."""

    @abc.abstractmethod
    def nack(self, queue: str, message_id: str, receipt: int, now: int, max_attempts: int,
             backoff_ms: Sequence[int], error: str | None = None, jitter: float = 0.0) -> bool:
        """Back to ready after ``backoff_ms[attempts - 1]`` (the last value for every later
        attempt), less up to ``jitter`` (a fraction) of it at random; or failed when
        ``attempts >= max_attempts`` (0: unlimited). ``error`` (the consumer's exception, as text)
        replaces ``last_error``; None keeps the one recorded. False when not current."""

    @abc.abstractmethod
    def fail(self, queue: str, message_id: str, receipt: int, now: int, error: str | None = None,
             used_up: bool = False) -> bool:
        """Fail a message at once, whatever its attempts (a consumer's fatal error). Its
        ``failure_reason`` becomes ``fatal_error`` now, so :meth:`move_failed_to_dlq` can tell it
        from running out of attempts — unless ``used_up`` (the consumer's own attempt limit, lower
        than the queue's: a task's ``@retries``), which leaves it to be ``max_attempts_reached``;
        ``error`` replaces ``last_error`` (None keeps the one recorded). False when not current."""

    @abc.abstractmethod
    def release(self, queue: str, message_id: str, receipt: int, now: int) -> bool:
        """Undo a claim whose message never reached a consumer: ready again, attempt not counted."""

    @abc.abstractmethod
    def release_many(self, queue: str, deliveries: Iterable[tuple[str, int]], now: int) -> int:
        """Release [(id, receipt)] as :meth:`release` does; returns how many were still current."""

    @abc.abstractmethod
    def change_visibility(self, queue: str, deliveries: Iterable[tuple[str, int]], now: int,
                          visibility_ms: int) -> list[bool]:
        """End the leases of [(id, receipt)] ``visibility_ms`` from now (0: at once, so the next
        claim takes the message; the attempt stays counted). The receipt stays the same, and keeps
        working until the message is claimed again. One bool per delivery: was it current?"""

    # -- queues ------------------------------------------------------------------------------

    # -- schedules ---------------------------------------------------------------------------

    @abc.abstractmethod
    def schedule_put(self, row: ScheduleRow) -> None:
        """Create or replace a schedule."""

    @abc.abstractmethod
    def schedule_get(self, name: str) -> ScheduleRow | None:
        """One schedule, or None."""

    @abc.abstractmethod
    def schedule_list(self) -> list[ScheduleRow]:
        """Every schedule, by name."""

    @abc.abstractmethod
    def schedule_delete(self, name: str) -> bool:
        """Delete a schedule; False when there was none."""

    @abc.abstractmethod
    def schedule_set_paused(self, name: str, paused: bool, next_run_at: int | None, now: int) -> bool:
        """Pause or resume a schedule in one statement (its other fields untouched); a resume may
        move its next tick to ``next_run_at``. False when there is no such schedule."""

    @abc.abstractmethod
    def schedules_due(self, now: int, limit: int) -> list[ScheduleRow]:
        """Schedules not paused whose next tick is at or before ``now``, earliest first."""

    @abc.abstractmethod
    def schedule_advance(self, name: str, expected_next: int, next_run_at: int, last_run_at: int | None,
                         now: int) -> bool:
        """Move a schedule's next tick from ``expected_next`` to ``next_run_at`` (compare and set:
        False when another scheduler moved it first). Call in the transaction that sends the tick."""

    # -- queues ------------------------------------------------------------------------------

    @abc.abstractmethod
    def queue_get(self, name: str) -> QueueRow | None:
        """The queue's row (policy and state), or None if it has none."""

    def queue_get_many(self, names: Sequence[str]) -> dict[str, QueueRow]:
        """:meth:`queue_get` of each of ``names`` (those with no row left out); stores answer in
        one read."""
        rows = {name: self.queue_get(name) for name in names}
        return {name: row for name, row in rows.items() if row is not None}

    @abc.abstractmethod
    def queue_list(self) -> list[QueueRow]:
        """Every queue's row, by name."""

    @abc.abstractmethod
    def queue_create(self, name: str, now: int, limit: int) -> bool:
        """Create queue ``name``'s row (no policy) unless ``limit`` queues have rows already; True
        when the row exists afterwards (made now or before), False when the limit refused it.
        Concurrent creations are serialised (SQLite's one writer; a transaction-level advisory lock
        on PostgreSQL), so two of them can never both pass the limit."""

    @abc.abstractmethod
    def queue_count(self) -> int:
        """How many queues have a row (the number ``FORQ_MAX_QUEUES`` limits)."""

    @abc.abstractmethod
    def queue_put(self, name: str, policy: dict[str, Any], now: int) -> None:
        """Create or update the queue's row: every :data:`POLICY_COLUMNS` field (and ``paused``)
        takes its value from ``policy``, None where it is missing. The sequence counter is kept."""

    @abc.abstractmethod
    def queue_delete(self, name: str, now: int) -> bool:
        """Delete the queue: its row, its messages and its dedup records, in one transaction; its
        dead-letter queue (``<name>-dlq`` or another) is a queue of its own, and keeps its messages.
        Its sequence numbers are never reused if it is created again. False when there was nothing
        to delete."""

    @abc.abstractmethod
    def queue_set_sqs_attributes(self, name: str, attributes: str | None) -> None:
        """Set the queue row's ``sqs_attributes`` (JSON text; None: none) — the SQS face's own
        attributes. No row: nothing."""

    @abc.abstractmethod
    def queue_set_sqs_tags(self, name: str, tags: str | None) -> None:
        """Set the queue row's ``sqs_tags`` (JSON text; None: none) — the SQS face's queue tags.
        No row: nothing."""

    @abc.abstractmethod
    def queue_drop_placeholder(self, name: str, last_sequence: int, updated_at: int) -> bool:
        """Delete the queue row of ``name`` if it still has this ``last_sequence`` and
        ``updated_at`` and ``name`` holds no message (one conditional statement: a concurrent write
        keeps it); True when it was deleted. Its messages and its DLQ's are never touched."""

    @abc.abstractmethod
    def purge(self, queue: str, now: int | None = None) -> int:
        """Delete every message of ``queue`` (in any state; not its DLQ's); returns how many. With
        ``now``, only those no consumer holds: ready or delayed, or under a lease ended by ``now``
        (the live leases and the failed messages stay)."""

    def queue_counts(self, queue: str, now: int) -> QueueCounts:
        """``queue``'s messages by state (an expired lease counts as ready), from
        :meth:`state_counts` of it and its DLQ."""
        return queue_counts_of(self.state_counts(now, [queue, queue + DLQ_SUFFIX]), queue)

    # -- wake-ups and health -----------------------------------------------------------------

    @abc.abstractmethod
    def has_due(self, queues: Sequence[str], now: int, limit: int) -> dict[str, int]:
        """How many due messages (up to ``limit`` each) the given queues have; queues with none are
        left out. A read: takes no write lock."""

    @abc.abstractmethod
    def data_version(self) -> int:
        """A number that changes when another connection commits something that may make a
        message ready (see :attr:`wakeups`). Cheap: no disk I/O, no round trip. Where
        :attr:`wakeups` is ``"data_version"``, it is exact: the same number from one thread means
        nothing was committed since (the notifier then skips its fallback look)."""

    def changed_queues(self) -> set[str] | None:
        """The queues that the changes :meth:`data_version` counted since the last call were to,
        where the database says (PostgreSQL's notifications name their queue); None where it does
        not, or where some may have been missed: then any queue may have changed."""
        return None

    def writer_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held around a group of writes (the API's group commit): where the database's own lock
        makes a waiting writer sleep and try again (SQLite's busy handler: 1, 2, 5, 10 … ms), a
        lock that hands over at once to the next process waiting. Nothing here."""
        return contextlib.nullcontext()

    def change_fd(self) -> int | None:
        """A file descriptor that becomes readable when another connection may have committed
        something (so :meth:`data_version` may have changed): the notifier sleeps on it rather
        than polling. None: there is none here, and the notifier polls every ``FORQ_WAKE_POLL_MS``."""
        return None

    def drain_changes(self) -> bool:
        """Consume what made :meth:`change_fd` readable; whether something had, that
        :meth:`data_version` may not show yet (a write whose commit is still under way)."""
        return False

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise if the database (and the ``messages`` table) cannot be read."""

    def clock_samples(self, n: int) -> list[tuple[int, int, int]]:
        """``n`` readings of the database server's clock, each ``(host before, server, host after)``
        in Unix microseconds, the host's read with :func:`forqapp.utils.host_us` just before the
        statement is sent and just after its answer (empty where :attr:`has_clock` is False). Reads
        nothing else and writes nothing: safe on a connection just opened, never run inside a
        transaction by its callers."""
        return []

    # -- admin: dead-letter queues -----------------------------------------------------------

    @abc.abstractmethod
    def requeue(self, dlq: str, message_id: str | None, now: int, queue_ttl_ms: int) -> int:
        """Move one (or, with ``message_id=None``, every) DLQ message back to its queue (the one it
        was dead-lettered from, else ``dlq``'s own queue), ready, attempts 0, keeping its
        ``sequence`` and ``received_at`` (its FIFO place). Messages in processing are left alone.
        Returns how many moved."""

    # -- message move tasks --------------------------------------------------------------------

    @abc.abstractmethod
    def dead_letter_sources(self, name: str) -> list[str]:
        """The queues whose ``dead_letter_queue`` is ``name``, by name."""

    @abc.abstractmethod
    def sources_of(self, queue: str, message_ids: Sequence[str]) -> dict[str, str]:
        """``{id: the queue it came from}`` of the dead letters among ``message_ids`` of ``queue``
        that remember theirs (``dead_letter_source``), in one read."""

    @abc.abstractmethod
    def move_start(self, handle: str, source: str, destination: str | None, rate: int | None,
                   now: int) -> MoveTaskRow | None:
        """A new RUNNING move task of ``source`` (its ``to_move``: the source's messages now); None
        when ``source`` has a running task already (the database's unique index says so, so two
        starts at once never both pass)."""

    @abc.abstractmethod
    def move_running(self) -> int:
        """How many move tasks are running."""

    @abc.abstractmethod
    def move_get(self, handle: str) -> MoveTaskRow | None:
        """The move task ``handle``."""

    @abc.abstractmethod
    def move_list(self, source: str, limit: int) -> list[MoveTaskRow]:
        """``source``'s move tasks, the latest first, up to ``limit``."""

    @abc.abstractmethod
    def move_cancel(self, handle: str, now: int) -> MoveTaskRow | None:
        """Cancel running task ``handle`` (after the batch in progress, if any, commits); None if
        it is not running."""

    @abc.abstractmethod
    def move_step(self, now: int, batch: int, queue_ttl_ms: int, dlq_ttl_ms: int) -> MoveStep | None:
        """One batch of a due running task (the earliest due), in one transaction that holds the
        task's row: up to ``batch`` messages of its source (its rate's worth, if less; never one
        in processing) moved to its destination, or each back to its ``dead_letter_source`` (a
        ``<name>-dlq`` message without one: to ``<name>``), ready, attempts 0, keeping its sequence;
        then the task's count, its next batch's time (``rate`` apart), and COMPLETED when the source
        has no more (FAILED: :data:`NO_SOURCE_QUEUE`). A moved message expires after its new queue's
        retention (``queue_ttl_ms``: the global one); moved to a destination that is a DLQ
        (``<name>-dlq``), it is a DLQ message (``is_dlq``) and expires after ``<name>``'s
        ``dlq_retention`` (``dlq_ttl_ms``: the global one), as a send to the DLQ
        (``send_entries(to_dlq=True)``) stores it (:func:`move_params`). A moved message forgets
        its ``dead_letter_source``. None when no task is due. Several processes (hosts) may call it
        at once: each takes another task, or waits for the row."""

    @abc.abstractmethod
    def delete_dlq(self, dlq: str, message_id: str | None) -> int:
        """Delete one (or, with ``message_id=None``, every) message of a DLQ."""

    # -- background jobs ---------------------------------------------------------------------

    @abc.abstractmethod
    def move_expired_to_dlq(self, now: int, dlq_ttl_ms: int, queue_ttl_ms: int, batch: int = BATCH) -> int:
        """Expired regular messages (ready or failed) → their DLQ, reason ``message_expired``,
        expiring after their queue's ``dlq_retention_ms`` (else ``dlq_ttl_ms``); where their queue
        names another queue as its ``dead_letter_queue``, after that queue's retention instead (a
        DLQ's: its regular queue's ``dlq_retention_ms``, else ``dlq_ttl_ms``; a regular queue's
        ``retention_ms``, else ``queue_ttl_ms``)."""

    @abc.abstractmethod
    def move_failed_to_dlq(self, now: int, dlq_ttl_ms: int, queue_ttl_ms: int, batch: int = BATCH) -> int:
        """Failed regular messages → their DLQ, reason ``max_attempts_reached`` — or the reason
        they already have (``fatal_error``, set by :meth:`fail`). ``last_error`` goes with them;
        their DLQ retention is as in :meth:`move_expired_to_dlq`."""

    @abc.abstractmethod
    def recover_stale(self, now: int, max_attempts: int, batch: int = BATCH) -> int:
        """Deliveries whose lease ended before ``now`` → ready now, or failed when their attempts
        are used up (their queue's ``max_attempts``, else ``max_attempts``; 0: unlimited); their
        receipts stop working. A safety net: a claim takes an expired delivery by itself."""

    @abc.abstractmethod
    def delete_expired_dlq(self, now: int, batch: int = BATCH) -> int:
        """Delete expired DLQ messages (ready or failed)."""

    @abc.abstractmethod
    def delete_failed_dlq(self, batch: int = BATCH) -> int:
        """Delete failed DLQ messages."""

    @abc.abstractmethod
    def count_expired(self, now: int, is_dlq: bool) -> int:
        """What :meth:`move_expired_to_dlq` (or, for DLQs, :meth:`delete_expired_dlq`) would touch."""

    @abc.abstractmethod
    def count_failed(self, is_dlq: bool) -> int:
        """What :meth:`move_failed_to_dlq` (or :meth:`delete_failed_dlq`) would touch."""

    @abc.abstractmethod
    def count_stale(self, now: int) -> int:
        """What :meth:`recover_stale` would touch."""

    @abc.abstractmethod
    def drop_empty_groups(self, batch: int = BATCH) -> int:
        """Delete the rows of ``forq_groups`` whose group has no message left to claim (none ready,
        none leased), looking at ``batch`` rows a short write transaction; returns how many. (A
        claim drops such a row when the group's turn comes; this job need not wait for it.)"""

    @abc.abstractmethod
    def delete_expired_dedup(self, now: int, batch: int = BATCH) -> int:
        """Forget deduplication records whose window ended."""

    @abc.abstractmethod
    def optimize(self) -> None:
        """Refresh the planner's statistics if the database needs telling (a no-op where not)."""

    @abc.abstractmethod
    def in_flight_by_queue(self, now: int) -> dict[str, int]:
        """{queue: messages under a live lease (processing, lease not ended)}, queues with none left out."""

    @abc.abstractmethod
    def ready_groups_by_queue(self) -> dict[str, int]:
        """{queue: message groups with at least one ready message (due now or later)}, queues with
        none left out (the ``forq_queue_groups_ready`` gauge: one probe per group row)."""

    @abc.abstractmethod
    def queue_depths(self) -> list[QueueDepth]:
        """(queue, is_dlq, messages) for every queue that has messages, by queue name."""

    @abc.abstractmethod
    def state_counts(self, now: int, queues: Sequence[str] | None = None) -> dict[str, StateCounts]:
        """{queue: counts} for every queue that has messages (or for those of ``queues`` that do;
        a DLQ is named as a queue), each kind of row counted in the index it lives in: one read
        for every queue at once. (SQLite's statement names the indexes; PostgreSQL's planner may
        read the table for the totals while its visibility map is not set, before a VACUUM.)"""

    # -- bulk: staged writes and snapshot reads ----------------------------------------------

    @abc.abstractmethod
    def stage(self, token: str, queue: str, rows: Sequence[StagedMessage], now: int) -> None:
        """Stage ``rows`` for ``queue`` under ``token``: invisible to every reader of queues."""

    @abc.abstractmethod
    def publish_staged(self, staged: Sequence[Staged], now: int, queue_ttl_ms: int,
                       past_tolerance_ms: int) -> dict[str, int]:
        """Move the rows staged under [(token, queue)] into their queues (call inside a transaction,
        so they appear together), received now, due no earlier than ``now - past_tolerance_ms``;
        returns how many per queue. A token published again adds nothing."""

    @abc.abstractmethod
    def record_sink_batch(self, queue: str, sink: str, batch_id: int, now: int) -> bool:
        """Record that streaming query ``sink`` publishes its batch ``batch_id`` into ``queue``,
        unless it recorded that batch or a later one (a replay); True when recorded. Call inside
        the publish's transaction: a concurrent call for the same sink waits for it, then finds it."""

    @abc.abstractmethod
    def discard_staged(self, staged: Sequence[Staged]) -> int:
        """Delete the rows staged under [(token, queue)]; returns how many."""

    @abc.abstractmethod
    def delete_abandoned_staged(self, cutoff: int, batch: int = BATCH) -> int:
        """Delete rows staged before ``cutoff`` (their job never published nor discarded them)."""

    @abc.abstractmethod
    def snapshot_page(self, queue: str, after: str, upto: str | None, limit: int) -> list[SnapshotRow]:
        """Rows of ``queue`` with ``after < id <= upto`` (no upper bound when None), in id order
        (ids compare bytewise). A read: takes no lease and changes nothing."""

    @abc.abstractmethod
    def snapshot_bounds(self, queue: str) -> SnapshotBounds:
        """(count, smallest id, largest id) of ``queue``."""

    # -- API-key throttle (every process and host shares it) ---------------------------------

    @abc.abstractmethod
    def auth_failed(self, address: str, now: int, window_ms: int, max_failures: int, block_ms: int) -> int:
        """Count a failed key from ``address``; returns until when it is blocked (Unix ms, or 0).
        The ``max_failures``-th failure within ``window_ms`` blocks it for ``block_ms``. In one
        atomic statement: of concurrent failures, exactly the first ``max_failures`` are counted;
        a failure from an address already blocked is not counted and leaves its block as it is,
        and returns that block negated (the caller refuses it: 429). Prunes stale API-key rows
        only (never the ``login-…`` keys of :meth:`login_failed`)."""

    @abc.abstractmethod
    def auth_blocked_until(self, address: str) -> int:
        """Until when ``address`` (an API client's address, or a ``login-…`` key) is blocked
        (Unix ms; 0 if it never was)."""

    # -- login throttle (the same table, under ``login-…`` keys: :mod:`forqapp.login_throttle`) --

    @abc.abstractmethod
    def login_failed(self, key: str, now: int, window_ms: int, max_failures: int, block_ms: int) -> int:
        """Count a failed login against ``key`` (``login-ip:…``/``login-user:…``); returns until
        when it is blocked (Unix ms, or 0), as :meth:`auth_failed` does with its own (longer)
        window. Prunes stale ``login-…`` rows only, so a wrong API key never resets a login
        counter, nor a login an API-key one."""

    @abc.abstractmethod
    def login_attempt(self, key: str, now: int, window_ms: int, max_failures: int) -> tuple[int, int]:
        """Before a login's password is checked: count it against ``key`` as a login being checked,
        in one atomic statement, unless the key is blocked or its window's failures and logins
        being checked come to ``max_failures`` already (a window past its end starts anew). Returns
        ``(window, 0)`` when it may be checked (``window``: the start of the window it was counted
        in, which :meth:`login_checked` names), ``(0, until)`` when the key is blocked until then
        (Unix ms), ``(0, 0)`` when it is refused only because other logins are being checked. Of
        concurrent logins, at most ``max_failures`` per window are let through."""

    @abc.abstractmethod
    def login_checked(self, key: str, reserved_window: int, now: int, failed: bool, window_ms: int,
                      max_failures: int, block_ms: int) -> None:
        """The login :meth:`login_attempt` counted in ``reserved_window`` was checked: ``failed``,
        one failure more, the ``max_failures``-th of the window blocking ``key`` for ``block_ms``
        (pruning stale ``login-…`` rows); else it is no longer being checked. Either only while
        the key's window is still ``reserved_window``: once a window started anew, a no-op."""

    @staticmethod
    def _login_refused_until(rows: Sequence[Sequence[Any]], now: int, window_ms: int, max_failures: int) -> int:
        """:meth:`login_attempt`'s refusal from the key's ``(blocked_until, failures, window_start)``:
        until when it is blocked, or 0 (only other logins being checked, or the row gone)."""
        if not rows:
            return 0
        blocked_until, failures, window_start = (int(v) for v in rows[0][:3])
        if blocked_until > now:
            return blocked_until
        return window_start + window_ms if failures >= max_failures else 0

    # -- leases (one holder per name across every process and host: the jobs scheduler) -------

    @abc.abstractmethod
    def lease_acquire(self, name: str, holder: str, now: int, ttl_ms: int, replacing: str = "") -> bool:
        """Take or renew the lease ``name`` for ``holder`` until ``now + ttl_ms``, in one atomic
        statement: a new name is taken; an existing one changes hands only if ``holder`` has it
        already, if it has expired, or if ``replacing`` (a holder the caller found dead) has it.
        False while another live holder has it. Two callers racing for a new name: one wins."""

    @abc.abstractmethod
    def lease_holder(self, name: str) -> LeaseHolder | None:
        """(holder, expires_at in Unix ms) of the lease ``name``, or None when nobody holds it
        (an expired lease still names its last holder)."""

    @abc.abstractmethod
    def lease_release(self, name: str, holder: str) -> bool:
        """Give the lease ``name`` up if ``holder`` has it (so another process takes it at once);
        False when it did not."""
