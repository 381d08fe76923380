"""Every SQL statement of the queue, for SQLite: :class:`SQLiteStore`. Nothing else in forqapp
writes SQL for SQLite. The contract, and what each operation means: :mod:`forqapp.store.base`.

Each operation runs on the ``sqlite3.Connection`` under Django's wrapper (autocommit, as Django
keeps it). Every write is one statement, so it is atomic on its own and takes SQLite's write lock up
front (a write statement never starts as a read and upgrades); several statements that must commit
together run inside the caller's ``transaction.atomic()``, which forqapp's SQLite settings make
``BEGIN IMMEDIATE``.

Statements are complete module constants; status codes and failure reasons are formatted into them
once, at import, from :mod:`forqapp.vocab`.
"""

from __future__ import annotations

import fcntl
import functools
import itertools
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, cast

from django.core.checks import CheckMessage, Error
from django.db.backends.sqlite3.base import DatabaseWrapper

from ..vocab import DLQ_SUFFIX, SNAPSHOT_COLUMNS, FailureReason, MoveStatus, Status, base_of, is_dlq
from . import inotify
from .base import (
    BATCH,
    ENDED_AMONG,
    MAX_REDRIVE_ROUNDS,
    MOVE_TASK_COLUMNS,
    POLICY_COLUMNS,
    RANDOM_AMONG,
    Claim,
    Delivery,
    GroupState,
    LeaseHolder,
    MessageRow,
    MoveStep,
    MoveTaskRow,
    NewMessage,
    QueueDepth,
    QueueRow,
    ScheduleRow,
    SnapshotBounds,
    SnapshotRow,
    Staged,
    StagedMessage,
    StateCounts,
    Store,
    ThrottleState,
    move_outcome,
    move_params,
    state_counts_of,
)

READY, PROCESSING, FAILED = int(Status.READY), int(Status.PROCESSING), int(Status.FAILED)
NEVER = 2**62  # a time no message comes due at (Unix ms)
logger = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])

EXPIRED = FailureReason.MESSAGE_EXPIRED.value
MAX_ATTEMPTS = FailureReason.MAX_ATTEMPTS_REACHED.value
FATAL = FailureReason.FATAL_ERROR.value
MIN_VERSION = (3, 35, 0)  # RETURNING
# (the column "group" is the message's message_group, NULL for none)
SNAPSHOT_SELECT_LIST = ", ".join(SNAPSHOT_COLUMNS).replace(", group", ", NULLIF(message_group, '')")

# --- produce ----------------------------------------------------------------------------------

COLUMNS = """id, queue, is_dlq, content, status, attempts, process_after, processing_started_at,
             failure_reason, received_at, updated_at, expires_after, priority, attributes, dedup_id,
             sequence"""

# A queue's sequence counter: ``n`` numbers taken at once (the last one comes back). Creates the
# queue's row on its first produce. SQLite has one writer: the counter and the insert that uses it
# commit together (one transaction), so numbers follow commit order.
# A new queue's counter starts above every deleted queue's (kept in the hidden row named '').
COUNTER_FLOOR = "COALESCE((SELECT last_sequence FROM forq_queues WHERE name = ''), 0)"

NEXT_SEQUENCE = f"""
INSERT INTO forq_queues (name, last_sequence, paused, created_at, updated_at)
VALUES (:queue, {COUNTER_FLOOR} + :n, 0, :now, :now)
ON CONFLICT (name) DO UPDATE SET last_sequence = last_sequence + :n
RETURNING last_sequence"""

# The counter of a queue that has its row: an UPDATE, then a SELECT of the number, in the same
# transaction. SQLite (3.40) spends ~10 µs more on ``UPDATE … RETURNING`` of a NOT NULL column
# (last_sequence) than on both statements (measured: 12 µs against 1.6 + ~1.5 µs); NEXT_SEQUENCE
# makes the row at a queue's first send.
BUMP_SEQUENCE = "UPDATE forq_queues SET last_sequence = last_sequence + ? WHERE name = ?"
LAST_SEQUENCE = "SELECT last_sequence FROM forq_queues WHERE name = ?"

INSERT = f"""
INSERT INTO messages ({COLUMNS})
VALUES (?, ?, ?, ?, {READY}, 0, ?, NULL, NULL, ?, ?, ?, ?, ?, ?, ?)"""

# Many rows: multi-row ``INSERT … VALUES`` statements of up to INSERT_CHUNK rows, the rest in
# power-of-two pieces (a remainder of 37 is 32 + 4 + 1), so a bounded set of statement texts stays
# prepared in the sqlite3 module's cache. Binding parameters is C work: measured on the messages
# table, 1.6x faster than a json_each INSERT … SELECT (whose ``value->>n`` parses each row's JSON
# again per column) for rows with priorities and attributes, and as fast as its lean [id, content]
# form for plain ones; a NUL in a text needs no special case. Columns in the order of a NewMessage,
# then updated_at (= received_at) and the sequence; the constant ones written out.
INSERT_CHUNK = 512  # rows (11 parameters each: 5,632, under SQLite's 32,766 since 3.32)
_VALUES_COLUMNS = """id, queue, content, process_after, received_at, expires_after, priority, attributes,
                     dedup_id, updated_at, sequence, is_dlq, status, attempts"""


@functools.cache
def insert_values(rows: int, is_dlq: int) -> str:
    row = f"(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {is_dlq}, {READY}, 0)"
    return f"INSERT INTO messages ({_VALUES_COLUMNS}) VALUES " + ", ".join([row] * rows)


@functools.cache
def insert_grouped(rows: int, is_dlq: int) -> str:
    """:func:`insert_values` for rows of which some carry a group (``message_group``; '' for none)."""
    row = f"(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {is_dlq}, {READY}, 0)"
    columns = _VALUES_COLUMNS.replace("sequence, is_dlq", "sequence, message_group, is_dlq")
    return f"INSERT INTO messages ({columns}) VALUES " + ", ".join([row] * rows)


SHARED_CHUNK = 1024  # rows of insert_shared (4 parameters each)


@functools.cache
def insert_shared(rows: int, is_dlq: int) -> str:
    """:func:`insert_values` for one queue's rows that share their due time, time received and
    expiry, carry no dedup id and take consecutive sequences (send_many's usual batch). Those are
    bound once (:func:`shared_values`, in the ``SELECT`` list) and each row binds only its id,
    content, priority and attributes, its place written out: 4 parameters rather than 11 (the
    sqlite3 module binds them one at a time). The rows' ``VALUES`` is the only thing selected from,
    so SQLite reads it as a co-routine; joined to a one-row ``SELECT`` of the shared values, as
    this statement first was, it copied every row into a temporary table first. Raw ``sqlite3``,
    30,000 rows with priorities and attributes, median of 12 paired trials: 0.88× the CPU time
    of that join (1,024 rows a statement, against 512; 0.94× at 512). Its parameter marks are
    plain ``?``: Python 3.12 deprecates binding numbered ones (``?1``) from a sequence."""
    values = ", ".join(f"(?, ?, ?, ?, {k})" for k in range(rows))
    return (f"INSERT INTO messages ({_VALUES_COLUMNS}) "
            f"SELECT column1, ?, column2, ?, ?, ?, column3, column4, NULL, ?, ? + column5, {is_dlq}, {READY}, 0 "
            f"FROM (VALUES {values})")


def shared_values(queue: str, due: int, received: int, expires: int, first: int) -> list[Any]:
    """What :func:`insert_shared` binds once, in its order, for rows numbered from ``first``."""
    return [queue, due, received, expires, received, first]


def _chunks(n: int, chunk: int = INSERT_CHUNK) -> Iterator[tuple[int, int]]:
    """(start, size) of the statements that insert ``n`` rows: ``chunk`` rows, then powers of two."""
    done = 0
    while done < n:
        left = n - done
        size = chunk if left >= chunk else 1 << (left.bit_length() - 1)
        yield done, size
        done += size


def _insert_queue_rows(conn: sqlite3.Connection, rows: Sequence[MessageRow], first: int, is_dlq: int) -> None:
    """One queue's rows, numbered from ``first``: by :func:`insert_shared` when they share what it
    binds once, else by :func:`_insert_rows`."""
    columns = list(zip(*rows, strict=True))
    if len(rows) > 1 and all(len(set(columns[i])) == 1 for i in (3, 4, 5)) and columns[8].count(None) == len(rows) \
            and columns[9].count(None) == len(rows):
        _insert_shared_rows(conn, rows[0][1], rows[0][3], rows[0][4], rows[0][5], first,
                            list(chain.from_iterable(zip(columns[0], columns[2], columns[6], columns[7], strict=True))),
                            is_dlq)
        return
    _insert_rows(conn, rows, range(first, first + len(rows)), is_dlq)


def _insert_shared_rows(conn: sqlite3.Connection, queue: str, due: int, received: int, expires: int, first: int,
                        params: list[Any], is_dlq: int) -> None:
    """Rows by :func:`insert_shared`: ``params`` holds each row's id, content, priority and attributes."""
    for done, size in _chunks(len(params) // 4, SHARED_CHUNK):
        conn.execute(insert_shared(size, is_dlq),
                     [*shared_values(queue, due, received, expires, first + done), *params[4 * done:4 * (done + size)]])


def _insert_rows(conn: sqlite3.Connection, rows: Sequence[MessageRow], sequences: Sequence[int],
                 is_dlq: int) -> None:
    params: list[Any] = []
    add, extend = params.append, params.extend
    grouped = any(r[9] for r in rows)
    for r, seq in zip(rows, sequences, strict=True):
        extend(r[:9])
        add(r[4])
        add(seq)
        if grouped:
            add(r[9] or "")
    width = len(params) // len(rows)
    statement = insert_grouped if grouped else insert_values
    for done, size in _chunks(len(rows), INSERT_CHUNK * 11 // width):
        conn.execute(statement(size, is_dlq), params[done * width:(done + size) * width])


# A deduplication id: recorded for this message unless a live one exists (whose message id comes
# back from DEDUP_ORIGINAL). An expired entry is taken over.
DEDUP_RECORD = """
INSERT INTO forq_dedup (queue, dedup_id, message_id, expires_at) VALUES (:queue, :dedup_id, :id, :expires)
ON CONFLICT (queue, dedup_id) DO UPDATE SET message_id = excluded.message_id, expires_at = excluded.expires_at
WHERE forq_dedup.expires_at <= :now
RETURNING message_id"""

DEDUP_ORIGINAL = "SELECT message_id FROM forq_dedup WHERE queue = ? AND dedup_id = ?"

QUEUE_LENGTH = """
SELECT COUNT(*) FROM (SELECT 1 FROM messages INDEXED BY idx_for_queue_depth
                      WHERE queue = ? AND is_dlq = 0 LIMIT ?)"""

# --- consume ----------------------------------------------------------------------------------
#
# A claim takes due rows: ready ones whose time has come, and deliveries whose lease has ended (a
# processing row's ``process_after`` is its lease end), by priority, then sequence. A row whose
# attempts are used up (:max > 0) is not delivered: the same statement moves it to its DLQ
# (SQS's redrive), and the store claims again.

USED_UP = "(:max > 0 AND attempts >= :max AND NOT is_dlq)"  # a dead letter is never redriven again

# A message's dead-letter queue: its queue's ``dead_letter_queue``, else ``<queue>-dlq``; and
# whether that is a DLQ (``is_dlq``: a name ending in ``-dlq``, as everywhere) or a queue like any.
_OWN_DLQ = "(SELECT dead_letter_queue FROM forq_queues WHERE name = messages.queue)"
DLQ_TARGET = f"COALESCE({_OWN_DLQ}, messages.queue || '{DLQ_SUFFIX}')"
DLQ_TARGET_FLAG = f"COALESCE(substr({_OWN_DLQ}, -{len(DLQ_SUFFIX)}) = '{DLQ_SUFFIX}', 1)"

# A used-up row gets the status REDRIVING, which it never keeps: the trigger ``forq_redrive`` (migration
# 0011) renames its queue to its DLQ's and makes it ready, in the same statement. The claim itself names
# neither ``queue`` nor ``is_dlq``: SQLite rewrites an index entry whenever an UPDATE names one of its
# columns, and idx_for_queue_depth's would cost every claim a page. RETURNING shows the row as the
# claim left it (status REDRIVING, the regular queue's name); the store reports it as the trigger did.
REDRIVING = 9

CLAIM_SET = f"""
SET status = CASE WHEN {USED_UP} THEN {REDRIVING} ELSE {PROCESSING} END,
    attempts = CASE WHEN {USED_UP} THEN 0 ELSE attempts + 1 END,
    failure_reason = CASE WHEN {USED_UP} THEN '{MAX_ATTEMPTS}' ELSE failure_reason END,
    expires_after = CASE WHEN {USED_UP} THEN :now + :dlq_ttl ELSE expires_after END,
    processing_started_at = CASE WHEN {USED_UP} THEN NULL ELSE MAX(:now, updated_at + 1) END,
    process_after = CASE WHEN {USED_UP} THEN :now ELSE :now + :visibility END,
    first_received_at = CASE WHEN {USED_UP} THEN first_received_at ELSE COALESCE(first_received_at, :now) END,
    updated_at = MAX(:now, updated_at + 1)"""

# Three indexes answer it, so that no part passes over another's rows: ``idx_queue_claim`` holds the
# ready rows that were due when written (partial: ``process_after <= received_at``, migration 0013) in
# claim order; ``idx_queue_timed`` the ready rows written to become due later (sent with a delay, backed
# off, deferred, released, requeued), by the time they come due; and ``idx_leases`` (queue,
# process_after, …, status: the leased rows alone, migrations 0014 and 0016) finds the ended leases
# by their end. Each part gives its first rows in claim order, and the pick keeps the first of them
# all: a claim walks past neither the deliveries in flight nor the messages not yet due. The rows that
# came due by time (usually few) are sorted, not walked to: a window of ENDED_AMONG (:ended_among) of
# each kind (below), so that thousands due at once cost a claim no more than that.
# (Messages without a group alone: ``message_group = ''``, the indexes' second column. A group's
# messages are claimed through its row in ``forq_groups``: GROUP_* below.)
NO_GROUP = "message_group = ''"
READY_DUE = f"queue = :queue AND {NO_GROUP} AND status = {READY} AND process_after <= received_at AND process_after <= :now"
TIMED_DUE = f"queue = :queue AND {NO_GROUP} AND status = {READY} AND process_after > received_at AND process_after <= :now"
LEASE_ENDED = f"queue = :queue AND {NO_GROUP} AND status = {PROCESSING} AND process_after <= :now"
# The rows that came due by time are chosen among a window of each index, read in its order (or in
# reverse): FIFO (and random) among the first to come due, the ones due at the same time (a requeue's,
# a batch delayed alike) in claim order; LIFO among the last to come due, newest first.
FIRST_WINDOWS = (("idx_queue_timed", TIMED_DUE, "process_after, priority DESC, sequence"),
                 ("idx_leases", LEASE_ENDED, "process_after, priority, sequence"))
LAST_WINDOWS = (("idx_queue_timed", TIMED_DUE, "process_after DESC, priority, sequence DESC"),
                ("idx_leases", LEASE_ENDED, "process_after DESC, priority DESC, sequence DESC"))
# After a redrive, a claim goes on for what it is still short of, passing over what it has just
# delivered (with a 0 s lease, those are due again at once).
EXCEPT_DELIVERED = " AND id NOT IN (SELECT value FROM json_each(:delivered))"
BY_PRIORITY = "priority DESC, sequence"
# The due order (``ordering`` "due": the Django Tasks backend's queues): by priority, then by the time
# each row came due (``process_after``: a past ``run_after`` counts as its time), then sequence. The
# rows sent with a due time in the past (``process_after < received_at``) are also in an index of their
# own, ``idx_queue_past`` (migration 0017), in that order; the other rows due when written come due as
# they are written, so ``idx_queue_claim``'s order (sequence) is theirs. A plain send writes nothing more.
PAST_DUE = f"queue = :queue AND {NO_GROUP} AND status = {READY} AND process_after < received_at AND process_after <= :now"
BY_DUE = "priority DESC, process_after, sequence"

CLAIM_RETURNING = """
RETURNING id, queue, content, attempts, processing_started_at, priority, attributes, dedup_id, sequence,
          received_at, first_received_at, process_after, state, status"""


def _due(columns: str, where: str, order: str, limit: str, windows: tuple = FIRST_WINDOWS, only: str = "") -> str:
    """The due rows' first ``limit`` of each part in ``order`` (a compound: the caller orders it).
    ``only`` (LIFO's top priority) keeps some of them: in the ready part's search, and among the
    rows of each window once taken (so that a window is never read past its ``:ended_among`` rows)."""
    by_time = [f"""SELECT {columns} FROM (SELECT {columns} FROM (
                                          SELECT id, priority, sequence FROM messages INDEXED BY {index}
                                          WHERE {due}{where}
                                          ORDER BY {window_order} LIMIT :ended_among)
                                      {f"WHERE {only}" if only else ""}
                                      ORDER BY {order} LIMIT {limit})"""
               for index, due, window_order in windows]
    return f"""SELECT {columns} FROM (SELECT {columns} FROM messages INDEXED BY idx_queue_claim
                                      WHERE {READY_DUE}{where}{f" AND {only}" if only else ""}
                                      ORDER BY {order} LIMIT {limit})
               UNION ALL {by_time[0]}
               UNION ALL {by_time[1]}"""


def _picks(where: str = "") -> dict[str, str]:
    top = f"priority = (SELECT MAX(priority) FROM ({_due('priority', where, BY_PRIORITY, '1', LAST_WINDOWS)}))"
    return {
        "fifo": f"SELECT id FROM ({_due('id, priority, sequence', where, BY_PRIORITY, ':limit')} "
                f"ORDER BY {BY_PRIORITY} LIMIT :limit)",
        # LIFO: the newest of the highest priority that has a due message.
        "lifo": f"SELECT id FROM ({_due('id, sequence', where, 'sequence DESC', ':limit', LAST_WINDOWS, top)} "
                "ORDER BY sequence DESC LIMIT :limit)",
        # Random: among the next RANDOM_AMONG due messages (in priority order).
        "random": f"SELECT id FROM ({_due('id, priority, sequence', where, BY_PRIORITY, ':among')} "
                  f"ORDER BY {BY_PRIORITY} LIMIT :among) ORDER BY random() LIMIT :limit",
    }


def _due_rows(where: str = "") -> str:
    """The due order's first ``:limit`` rows (id, priority, process_after, sequence), in that order:
    the first of each part in the due order, and the first of them all. A row sent with a past due
    time is in both idx_queue_claim and idx_queue_past: ``UNION`` keeps it once."""
    columns = "id, priority, process_after, sequence"
    by_time = [f"""SELECT {columns} FROM (SELECT {columns} FROM (
                                          SELECT {columns} FROM messages INDEXED BY {index}
                                          WHERE {due}{where}
                                          ORDER BY {window_order} LIMIT :ended_among)
                                      ORDER BY {BY_DUE} LIMIT :limit)"""
               for index, due, window_order in FIRST_WINDOWS]
    return f"""SELECT {columns} FROM (SELECT {columns} FROM messages INDEXED BY idx_queue_claim
                                      WHERE {READY_DUE}{where} ORDER BY {BY_PRIORITY} LIMIT :limit)
               UNION SELECT {columns} FROM (SELECT {columns} FROM messages INDEXED BY idx_queue_past
                                            WHERE {PAST_DUE}{where} ORDER BY {BY_DUE} LIMIT :limit)
               UNION {by_time[0]}
               UNION {by_time[1]}
               ORDER BY {BY_DUE} LIMIT :limit"""


def _all_picks(where: str = "") -> dict[str, str]:
    return {**_picks(where), "due": f"SELECT id FROM ({_due_rows(where)})"}


PICK = _all_picks()
CLAIM = {order: f"UPDATE messages {CLAIM_SET} WHERE id IN ({pick}) {CLAIM_RETURNING}"
         for order, pick in PICK.items()}
CLAIM_AGAIN = {order: f"UPDATE messages {CLAIM_SET} WHERE id IN ({pick}) {CLAIM_RETURNING}"
               for order, pick in _all_picks(EXCEPT_DELIVERED).items()}
# A due-order claim of several rows picks them first (DUE_ROWS, in order), then takes those, in one
# ``BEGIN IMMEDIATE`` transaction: RETURNING shows a row's new ``process_after`` (its lease end), so the
# deliveries are put in the pick's order, which one statement could not tell.
DUE_ROWS = _due_rows()
DUE_ROWS_AGAIN = _due_rows(EXCEPT_DELIVERED)
CLAIM_PICKED = f"UPDATE messages {CLAIM_SET} WHERE id IN (SELECT value FROM json_each(:picked)) {CLAIM_RETURNING}"
CLAIM_ONE = f"UPDATE messages {CLAIM_SET} WHERE id = ({PICK['fifo']}) {CLAIM_RETURNING}"

# --- message groups ---------------------------------------------------------------------------
#
# A queue's groups are rows of ``forq_groups``: ``eligible_at`` (ms) is the earliest time a group's
# next claim may come. A grouped claim (in one transaction: SQLite has one writer) takes the group
# whose turn comes first (GROUP_PICK: one probe of ``idx_groups_turn``), then that group's first
# message in claim order (priority, then sequence) among those it may take: the ones that hold a slot
# of the group and are due again (an ended lease: ``idx_leases``; a nack's backoff over:
# ``idx_group_held``), and,
# while the group holds fewer than ``group_concurrency`` slots, its first ready message never
# delivered (``idx_group_ready``). Then it sets the group's next turn: the earliest time any of its
# messages may go (GROUP_NEXT_HELD, GROUP_FRESH_DUE, GROUP_FRESH_NEXT), no sooner than its
# ``group_rate``'s next slot. Each read is a probe of an index range of one group, bounded by the
# group's slots, not by its messages nor by the number of groups. The triggers of migration 0018
# bring ``eligible_at`` forward when a message of a group changes otherwise (a send, a settle, …).
#: A grouped claim looks at this many groups at most besides those it claims from (each look that
#: claims nothing sets its group's next turn right, so looks do not repeat).
MAX_GROUP_LOOKS = 1_000
# The group indexes' condition (a message of a group), as each statement states it for SQLite to know
# the partial index may answer it. ``likelihood`` tells the planner the term holds for (nearly) every
# row there, so it reads the range of the one group (``message_group = :group``) rather than of every
# group of the queue (``message_group > ''``), which it would otherwise prefer.
GROUPED = "likelihood(message_group > '', 0.99)"
# A group's slots are held by its leased messages (``idx_leases``, the group's range) and by those
# delivered before and ready again, or waiting out a nack's backoff (``idx_group_held``, which holds
# these alone on SQLite since migration 0025: a claim and an ack of a grouped message write one entry
# fewer there). The retrying part states both definitions' conditions (0018's, which held the leased
# rows too, and 0025's), so that either schema answers it.
_HELD_0018 = "(status = 1 OR (attempts > 0 AND status = 0))"


def _leased(queue: str = ":queue", group: str = ":group") -> str:
    return f"messages INDEXED BY idx_leases WHERE queue = {queue} AND message_group = {group} AND status = {PROCESSING}"


def _retrying(queue: str = ":queue", group: str = ":group") -> str:
    return (f"messages INDEXED BY idx_group_held WHERE queue = {queue} AND message_group = {group} "
            f"AND {_HELD_0018} AND attempts > 0 AND status = {READY} AND {GROUPED}")


def _held_due(group: str = ":group") -> str:
    """The group's held messages due again: the first of each part, in claim order (a compound)."""
    return f"""SELECT * FROM (SELECT id, priority, sequence FROM {_leased(group=group)} AND process_after <= :now
                   ORDER BY priority DESC, sequence LIMIT 1)
    UNION ALL
    SELECT * FROM (SELECT id, priority, sequence FROM {_retrying(group=group)} AND process_after <= :now
                   ORDER BY priority DESC, sequence LIMIT 1)"""


_HELD_COUNT = f"((SELECT COUNT(*) FROM {_leased()}) + (SELECT COUNT(*) FROM {_retrying()}))"
_NEXT_HELD = (f"(SELECT MIN(t) FROM (SELECT MIN(process_after) AS t FROM {_leased()} "
              f"UNION ALL SELECT MIN(process_after) FROM {_retrying()}))")
# A group's busy messages: the held ones not due (leased, or waiting out a nack's backoff). While as
# many as its ``group_concurrency`` are busy, its held messages due again wait too: a claim taking
# several messages of one group (``group_batch``, SQS's FIFO receive) leaves more held than the group
# has slots, and they come due again together; one receiver takes the first of them (and, in a
# batch, the next), the others wait for it. (With at most ``group_concurrency`` held, as every claim
# otherwise leaves a group, a held message due again always finds fewer busy: no change there.)
_BUSY_COUNT = (f"((SELECT COUNT(*) FROM {_leased()} AND process_after > :now) + "
               f"(SELECT COUNT(*) FROM {_retrying()} AND process_after > :now))")
_NEXT_BUSY = (f"(SELECT MIN(t) FROM (SELECT MIN(process_after) AS t FROM {_leased()} AND process_after > :now "
              f"UNION ALL SELECT MIN(process_after) FROM {_retrying()} AND process_after > :now))")
GROUP_BUSY = f"SELECT {_BUSY_COUNT}, {_NEXT_BUSY}"
GROUP_PICK = """
SELECT name, rate_next_at_us FROM forq_groups INDEXED BY idx_groups_turn
WHERE queue = :queue AND eligible_at IS NOT NULL AND eligible_at <= :now
ORDER BY eligible_at, last_claimed_at, name LIMIT 1"""
GROUP_PEEK_PICK = """
SELECT name, rate_next_at_us FROM forq_groups INDEXED BY idx_groups_turn
WHERE queue = :queue AND eligible_at IS NOT NULL AND eligible_at <= :now
ORDER BY eligible_at, last_claimed_at, name LIMIT :looks"""
GROUP_HELD_DUE = f"SELECT id, priority, sequence FROM ({_held_due()}) ORDER BY priority DESC, sequence LIMIT 1"
GROUP_HELD_COUNT = f"SELECT {_HELD_COUNT}"
GROUP_NEXT_HELD = f"SELECT {_NEXT_HELD}"
GROUP_FRESH = f"queue = :queue AND message_group = :group AND {GROUPED} AND status = {READY} AND attempts = 0"
GROUP_FRESH_DUE = f"""
SELECT id, priority, sequence FROM messages INDEXED BY idx_group_ready
WHERE {GROUP_FRESH} AND process_after <= :now ORDER BY priority DESC, sequence LIMIT 2"""
GROUP_FRESH_NEXT = f"SELECT MIN(process_after) FROM messages INDEXED BY idx_group_ready WHERE {GROUP_FRESH}"
GROUP_ANY = f"""
SELECT EXISTS (SELECT 1 FROM messages INDEXED BY idx_group_ready
               WHERE queue = :queue AND message_group = :group AND {GROUPED} AND status = {READY})
    OR EXISTS (SELECT 1 FROM {_leased()})"""
GROUP_CLAIM = f"""UPDATE messages {CLAIM_SET} WHERE id = :id AND queue = :queue AND message_group = :group
                 AND status IN ({READY}, {PROCESSING}) AND process_after <= :now {CLAIM_RETURNING}, message_group"""
# The usual turn in two statements (GROUP_CLAIM_NEXT, GROUP_TURN_TAKEN): the claim of the first
# message the group whose turn comes first may give now (what GROUP_PICK, GROUP_HELD_DUE,
# GROUP_HELD_COUNT and GROUP_FRESH_DUE find, then GROUP_CLAIM), then that group's next turn (what
# _next_turn sets after a claim). When it claims nothing (the group is held back by its rate or its
# slots, or has nothing left) or redrives, the turn is taken statement by statement (_claim_groups).
def _group_claim_next(guard: str = "") -> str:
    """GROUP_CLAIM_NEXT, with ``guard``: a condition the turn must meet (else nothing is claimed).

    The group's first message: while none of its held messages is due again (the usual case, two
    probes tell), its first fresh one, in index order; else the first of all its candidates, in claim
    order. SQLite sorts a compound's rows in a temporary b-tree, which costs more than the claim's
    probes: the usual case needs none. The turn is the statement's own row (``turn``), which the
    message's subqueries name, not a materialized table (another temporary b-tree)."""
    fresh = f"""SELECT id FROM messages INDEXED BY idx_group_ready
                   WHERE {GROUP_FRESH} AND process_after <= :now
                     AND (:concurrency IS NULL OR {_HELD_COUNT} < :concurrency)
                   ORDER BY priority DESC, sequence LIMIT 1"""
    held_due = (f"EXISTS (SELECT 1 FROM {_leased()} AND process_after <= :now) "
                f"OR EXISTS (SELECT 1 FROM {_retrying()} AND process_after <= :now)")
    sql = f"""
UPDATE messages {CLAIM_SET} WHERE id = (
    SELECT CASE WHEN {held_due} THEN (SELECT id FROM (
        SELECT * FROM ({_held_due()}) WHERE :concurrency IS NULL OR {_BUSY_COUNT} < :concurrency
        UNION ALL
        SELECT * FROM ({fresh.replace("SELECT id FROM", "SELECT id, priority, sequence FROM", 1)}))
        ORDER BY priority DESC, sequence LIMIT 1)
        ELSE ({fresh}) END
    FROM (SELECT name, rate_next_at_us FROM forq_groups INDEXED BY idx_groups_turn
          WHERE queue = :queue AND eligible_at IS NOT NULL AND eligible_at <= :now
          ORDER BY eligible_at, last_claimed_at, name LIMIT 1) AS turn
    WHERE (:rate_us IS NULL OR rate_next_at_us <= :now * 1000){guard}) {CLAIM_RETURNING}, message_group"""
    return sql.replace(":group", "turn.name")


GROUP_CLAIM_NEXT = _group_claim_next()
# A batch of one group (``group_batch``): after the claim of a group's first message, its next due
# messages in claim order (held ones due again, then never delivered), up to :n, to the same
# receiver, whatever the group's slots; not those this claim delivered (a 0 s lease is due at once).
GROUP_FOLLOWERS = f"""
UPDATE messages {CLAIM_SET} WHERE id IN (SELECT id FROM (
    SELECT * FROM (SELECT id, priority, sequence FROM {_leased()} AND process_after <= :now{EXCEPT_DELIVERED}
                   ORDER BY priority DESC, sequence LIMIT :n)
    UNION ALL
    SELECT * FROM (SELECT id, priority, sequence FROM {_retrying()} AND process_after <= :now
                   ORDER BY priority DESC, sequence LIMIT :n)
    UNION ALL
    SELECT * FROM (SELECT id, priority, sequence FROM messages INDEXED BY idx_group_ready
                   WHERE {GROUP_FRESH} AND process_after <= :now ORDER BY priority DESC, sequence LIMIT :n))
    ORDER BY priority DESC, sequence LIMIT :n) {CLAIM_RETURNING}, message_group"""
# The same, in a claim of a queue seen with groups, when no message without a group is due (what the
# claim would take first; the groups' turn is taken first, in one statement, when there is none).
NONE_UNGROUPED_DUE = f"""
      AND NOT EXISTS (SELECT 1 FROM messages INDEXED BY idx_queue_claim WHERE {READY_DUE})
      AND NOT EXISTS (SELECT 1 FROM messages INDEXED BY idx_queue_timed WHERE {TIMED_DUE})
      AND NOT EXISTS (SELECT 1 FROM messages INDEXED BY idx_leases WHERE {LEASE_ENDED})"""
GROUP_CLAIM_ALONE = _group_claim_next(NONE_UNGROUPED_DUE)
# The group's rate's next slot once it has given a message (µs), and its next turn: the earliest of
# its held messages' times and, while it holds fewer than its concurrency, of its fresh ones'.
_RATE_TAKEN = "CASE WHEN :rate_us IS NULL THEN rate_next_at_us ELSE MAX(rate_next_at_us, :now * 1000) + :rate_us END"
GROUP_TURN_TAKEN = f"""
UPDATE forq_groups SET
    eligible_at = MAX(:now, ({_RATE_TAKEN} + 999) / 1000, MIN(
        COALESCE({_NEXT_HELD}, {NEVER}),
        CASE WHEN :concurrency IS NOT NULL AND {_HELD_COUNT} >= :concurrency THEN {NEVER}
             WHEN EXISTS (SELECT 1 FROM messages INDEXED BY idx_group_ready
                          WHERE {GROUP_FRESH} AND process_after <= :now) THEN :now
             ELSE COALESCE(({GROUP_FRESH_NEXT}), {NEVER}) END)),
    last_claimed_at = MAX(last_claimed_at, :now),
    rate_next_at_us = {_RATE_TAKEN}
WHERE queue = :queue AND name = :group"""
GROUP_SET_TURN = """
UPDATE forq_groups SET eligible_at = :eligible_at, last_claimed_at = MAX(last_claimed_at, :claimed_at),
                       rate_next_at_us = :rate_next
WHERE queue = :queue AND name = :group"""
GROUP_RATE_NEXT = "SELECT rate_next_at_us FROM forq_groups WHERE queue = :queue AND name = :group"
GROUP_DROP = "DELETE FROM forq_groups WHERE queue = :queue AND name = :group"
GROUP_NEXT_TURN = """
SELECT MIN(eligible_at) FROM forq_groups INDEXED BY idx_groups_turn WHERE queue = ? AND eligible_at IS NOT NULL"""
GROUP_NEXT_TURNS = """
SELECT name, turn FROM (SELECT q.value AS name,
                               (SELECT MIN(eligible_at) FROM forq_groups INDEXED BY idx_groups_turn
                                WHERE queue = q.value AND eligible_at IS NOT NULL) AS turn
                        FROM json_each(?) AS q) WHERE turn IS NOT NULL"""
# Per queue (a JSON array of names): the earliest time something comes due by the clock alone.
NEXT_TURNS = f"""
SELECT name, turn FROM (
    SELECT q.value AS name, MIN(
        COALESCE((SELECT MIN(process_after) FROM messages INDEXED BY idx_queue_timed
                  WHERE queue = q.value AND {NO_GROUP} AND status = {READY} AND process_after > received_at),
                 {NEVER}),
        COALESCE((SELECT MIN(process_after) FROM messages INDEXED BY idx_leases
                  WHERE queue = q.value AND {NO_GROUP} AND status = {PROCESSING}), {NEVER}),
        COALESCE((SELECT MIN(eligible_at) FROM forq_groups INDEXED BY idx_groups_turn
                  WHERE queue = q.value AND eligible_at IS NOT NULL), {NEVER})) AS turn
    FROM json_each(?) AS q) WHERE turn < {NEVER}"""
GROUP_STATE = f"""
SELECT (SELECT COUNT(*) FROM messages INDEXED BY idx_group_ready
        WHERE queue = :queue AND message_group = :group AND {GROUPED} AND status = {READY}),
       (SELECT COUNT(*) FROM {_leased()} AND process_after > :now),
       (SELECT eligible_at FROM forq_groups WHERE queue = :queue AND name = :group)"""
GROUPS_BUSIEST = f"""
SELECT name,
       (SELECT COUNT(*) FROM messages INDEXED BY idx_group_ready
        WHERE queue = g.queue AND message_group = g.name AND {GROUPED} AND status = {READY}) AS ready,
       (SELECT COUNT(*) FROM {_leased("g.queue", "g.name")} AND process_after > :now) AS in_flight,
       eligible_at
FROM forq_groups AS g WHERE queue = :queue ORDER BY ready + in_flight DESC, name LIMIT :limit"""
GROUP_COUNT = f"""
SELECT COUNT(*) FROM forq_groups AS g WHERE queue = :queue AND (
    EXISTS (SELECT 1 FROM messages INDEXED BY idx_group_ready
            WHERE queue = g.queue AND message_group = g.name AND {GROUPED} AND status = {READY})
    OR EXISTS (SELECT 1 FROM {_leased("g.queue", "g.name")}))"""
READY_GROUPS_BY_QUEUE = f"""
SELECT queue, COUNT(*) FROM forq_groups AS g WHERE EXISTS (
    SELECT 1 FROM messages INDEXED BY idx_group_ready
    WHERE queue = g.queue AND message_group = g.name AND {GROUPED} AND status = {READY})
GROUP BY queue"""
# The maintenance job's sweep of the groups left without messages: a page of the rows in key order,
# then, in one statement, the empty ones of that page (SQLite has one writer: nobody adds a message
# in between). The page's ends bound the delete: (after, last].
GROUPS_PAGE = "SELECT queue, name FROM forq_groups WHERE (queue, name) > (:queue, :name) ORDER BY queue, name LIMIT :batch"
DROP_EMPTY_GROUPS = f"""
DELETE FROM forq_groups WHERE (queue, name) > (:queue, :name) AND (queue, name) <= (:last_queue, :last_name)
  AND NOT EXISTS (SELECT 1 FROM messages INDEXED BY idx_group_ready WHERE queue = forq_groups.queue
                  AND message_group = forq_groups.name AND {GROUPED} AND status = {READY})
  AND NOT EXISTS (SELECT 1 FROM {_leased("forq_groups.queue", "forq_groups.name")})"""
GROUPS_AT_ONCE = "UPDATE forq_groups SET eligible_at = MIN(COALESCE(eligible_at, :now), :now) WHERE queue = :queue"
DELETE_QUEUE_GROUPS = "DELETE FROM forq_groups WHERE queue = ?"


# What the trigger forq_redrive does, for a database without it (see SQLiteStore._redriven).
REDRIVE_LEFT = f"""
UPDATE messages SET queue = {DLQ_TARGET}, is_dlq = {DLQ_TARGET_FLAG}, dead_letter_source = queue, status = {READY}
WHERE id IN (SELECT value FROM json_each(?)) AND status = {REDRIVING}"""
# Where the claim's redrive put its rows (the trigger chose: the queue's dead_letter_queue).
REDRIVEN_TO = "SELECT id, queue FROM messages WHERE id IN (SELECT value FROM json_each(?))"

PEEK_COLUMNS = """id, queue, content, attempts, NULL, priority, attributes, dedup_id, sequence, received_at,
                  first_received_at, CASE WHEN status = 1 THEN process_after END, state"""
PEEK = {order: f"SELECT {PEEK_COLUMNS} FROM messages WHERE id IN ({pick})" for order, pick in PICK.items()}
PEEK_ID = f"SELECT {PEEK_COLUMNS}, failure_reason, last_error, NULLIF(message_group, '') FROM messages WHERE id = :id AND queue = :queue"
PEEK_GROUPED = f"SELECT {PEEK_COLUMNS}, message_group FROM messages WHERE id = :id"

ACK = f"""
DELETE FROM messages WHERE id = ? AND queue = ? AND status = {PROCESSING} AND processing_started_at = ?"""

# The backoff table is bound as a JSON array: element ``attempts - 1``, or the last one past its end;
# ``:jitter`` takes up to that fraction off at random. A NULL :error keeps the last_error recorded by
# an earlier attempt. :max 0 is unlimited.
NACK = f"""
UPDATE messages
SET status = CASE WHEN :max > 0 AND attempts >= :max THEN {FAILED} ELSE {READY} END,
    process_after = :now + CAST(COALESCE(:backoff ->> (attempts - 1), :backoff_last)
                                * (1.0 - :jitter * (abs(random() % 1000000) / 1000000.0)) AS INTEGER),
    processing_started_at = NULL,
    updated_at = MAX(:now, updated_at),
    last_error = COALESCE(:error, last_error)
WHERE id = :id AND queue = :queue AND status = {PROCESSING} AND processing_started_at = :receipt"""

# The reason is set now, so the failed job can tell a consumer's fatal error from running out of
# attempts.
FAIL = f"""
UPDATE messages
SET status = {FAILED}, processing_started_at = NULL, updated_at = MAX(:now, updated_at),
    failure_reason = CASE WHEN :used_up THEN NULL ELSE '{FATAL}' END, last_error = COALESCE(:error, last_error)
WHERE id = :id AND queue = :queue AND status = {PROCESSING} AND processing_started_at = :receipt"""

RELEASE = f"""
UPDATE messages
SET status = {READY}, attempts = attempts - 1, processing_started_at = NULL, process_after = ?,
    updated_at = MAX(?, updated_at)
WHERE id = ? AND queue = ? AND status = {PROCESSING} AND processing_started_at = ?"""

# Flow control (queues with limits): live leases, and the rate limit's next slot on the queue's row.
IN_FLIGHT = f"""
SELECT COUNT(*) FROM messages INDEXED BY idx_leases
WHERE queue = ? AND status = {PROCESSING} AND process_after > ?"""

RATE_NEXT = "SELECT rate_next_at_us FROM forq_queues WHERE name = ?"

RATE_TAKE = """
UPDATE forq_queues SET rate_next_at_us = MAX(rate_next_at_us, :now_us) + :n * :interval WHERE name = :queue"""

# Back to ready later, same id and attempts, its progress saved (NULL :state keeps the saved one),
# behind the messages of its priority already there (a new sequence number: others get a turn).
DEFER = f"""
UPDATE messages
SET status = {READY}, process_after = :now + :delay, processing_started_at = NULL,
    updated_at = MAX(:now, updated_at), state = COALESCE(:state, state), sequence = :sequence
WHERE id = :id AND queue = :queue AND status = {PROCESSING} AND processing_started_at = :receipt"""

# A lease ends ``visibility`` ms from now (0: at once, so the next claim takes it); the receipt
# stays the same until the message is claimed again.
CHANGE_VISIBILITY = f"""
UPDATE messages SET process_after = :now + :visibility, updated_at = MAX(:now, updated_at)
WHERE id = :id AND queue = :queue AND status = {PROCESSING} AND processing_started_at = :receipt"""

# --- wake-ups and health ----------------------------------------------------------------------

HAS_DUE = f"""
SELECT min(:limit,
           (SELECT COUNT(*) FROM (SELECT 1 FROM messages INDEXED BY idx_queue_claim WHERE {READY_DUE} LIMIT :limit))
           + (SELECT COUNT(*) FROM (SELECT 1 FROM messages INDEXED BY idx_queue_timed WHERE {TIMED_DUE} LIMIT :limit))
           + (SELECT COUNT(*) FROM (SELECT 1 FROM messages INDEXED BY idx_leases WHERE {LEASE_ENDED}
                                    LIMIT :limit))
           + (SELECT COUNT(*) FROM (SELECT 1 FROM forq_groups INDEXED BY idx_groups_turn
                                    WHERE queue = :queue AND eligible_at IS NOT NULL AND eligible_at <= :now
                                    LIMIT :limit)))"""

# Every queue of a list (a JSON array) in one statement: HAS_DUE correlated with each name.
HAS_DUE_MANY = f"""
SELECT name, n FROM (SELECT q.value AS name, ({HAS_DUE.replace(':queue', 'q.value')}) AS n
                     FROM json_each(:queues) AS q) WHERE n > 0"""

DATA_VERSION = "PRAGMA data_version"
# Each thread's connection per alias, numbered as first seen (data_version's high bits).
_version_epochs = threading.local()
_epochs = itertools.count(1)

PING = "SELECT 1 FROM messages LIMIT 1"

# --- admin: dead-letter queues ----------------------------------------------------------------

# A message no consumer holds: not under a lease, or under one ended by :now (receivable again).
UNHELD = f"NOT (status = {PROCESSING} AND process_after > :now)"

# A dead letter sent back to the queue it came from gets that queue's retention (:ttl: the DLQ's
# own queue's, or the global one).
BACK_TTL = "COALESCE((SELECT retention_ms FROM forq_queues WHERE name = COALESCE(messages.dead_letter_source, :dest)), :ttl)"

REQUEUE_ALL = f"""
UPDATE messages
SET queue = COALESCE(dead_letter_source, :dest), is_dlq = 0, status = {READY}, attempts = 0, process_after = :now,
    processing_started_at = NULL, failure_reason = NULL, updated_at = MAX(:now, updated_at),
    expires_after = :now + {BACK_TTL}, dead_letter_source = NULL
WHERE queue = :queue AND is_dlq = 1 AND {UNHELD}"""

REQUEUE_ONE = f"""
UPDATE messages
SET queue = COALESCE(dead_letter_source, :dest), is_dlq = 0, status = {READY}, attempts = 0, process_after = :now,
    processing_started_at = NULL, failure_reason = NULL, updated_at = MAX(:now, updated_at),
    expires_after = :now + {BACK_TTL}, dead_letter_source = NULL
WHERE queue = :queue AND is_dlq = 1 AND {UNHELD} AND id = :id"""

DELETE_DLQ_ALL = "DELETE FROM messages WHERE queue = ? AND is_dlq = 1"
DELETE_DLQ_ONE = "DELETE FROM messages WHERE id = ? AND queue = ? AND is_dlq = 1"

# --- message move tasks -------------------------------------------------------------------------

MOVE_SELECT = f"SELECT {MOVE_TASK_COLUMNS} FROM forq_move_tasks"
MOVE_GET = MOVE_SELECT + " WHERE handle = ?"
MOVE_LIST = MOVE_SELECT + " WHERE source = ? ORDER BY started_at DESC, handle DESC LIMIT ?"
# The messages a task may move: none a consumer holds (UNHELD); without a destination, only those that know
# where they came from (a ``<name>-dlq`` message without a source goes back to ``<name>``).
MOVABLE = f"""queue = :source AND {UNHELD}
    AND (:destination IS NOT NULL OR dead_letter_source IS NOT NULL OR :source_base IS NOT NULL)"""
# (The unique partial index uniq_move_tasks_running refuses a second running task of a source.)
MOVE_START = f"""
INSERT INTO forq_move_tasks ({MOVE_TASK_COLUMNS})
SELECT :handle, :source, :destination, :rate, '{MoveStatus.RUNNING}', 0,
       (SELECT COUNT(*) FROM messages WHERE {MOVABLE}), :now, :now, :now, NULL
ON CONFLICT DO NOTHING
RETURNING {MOVE_TASK_COLUMNS}"""
MOVE_CANCEL = f"""
UPDATE forq_move_tasks SET status = '{MoveStatus.CANCELLED}', updated_at = :now
WHERE handle = :handle AND status = '{MoveStatus.RUNNING}'
RETURNING {MOVE_TASK_COLUMNS}"""
MOVE_DUE = MOVE_SELECT + f" WHERE status = '{MoveStatus.RUNNING}' AND next_at <= ? ORDER BY next_at LIMIT 1"
# A batch: the source's first messages (claim order), each to the destination or back where it came
# from, ready, attempts 0, their sequence kept; the destination's retention from now (a DLQ
# destination's: its queue's dlq_retention, and its messages are DLQ messages: store.move_params).
MOVE_DEST = "COALESCE(:destination, messages.dead_letter_source, :source_base)"
MOVE_RETENTION = f"""(SELECT CASE WHEN :into_dlq THEN dlq_retention_ms ELSE retention_ms END FROM forq_queues
                      WHERE name = COALESCE(:retention_of, {MOVE_DEST}))"""
MOVE_BATCH = f"""
UPDATE messages
SET queue = {MOVE_DEST}, is_dlq = :into_dlq, status = {READY}, attempts = 0, process_after = :now,
    processing_started_at = NULL, failure_reason = NULL, updated_at = MAX(:now, updated_at),
    expires_after = :now + COALESCE({MOVE_RETENTION}, :ttl),
    dead_letter_source = NULL
WHERE id IN (SELECT id FROM messages WHERE {MOVABLE} ORDER BY priority DESC, sequence LIMIT :n)
RETURNING queue"""
MOVE_STRANDED = f"""SELECT 1 FROM messages WHERE queue = :source AND {UNHELD} AND dead_letter_source IS NULL LIMIT 1"""
MOVE_PROGRESS = f"""
UPDATE forq_move_tasks SET moved = moved + :moved, status = :status, failure_reason = :reason, next_at = :next_at,
    updated_at = :now
WHERE handle = :handle
RETURNING {MOVE_TASK_COLUMNS}"""
DEAD_LETTER_SOURCES = "SELECT name FROM forq_queues WHERE dead_letter_queue = ? ORDER BY name"
SOURCES_OF = "SELECT id, dead_letter_source FROM messages WHERE queue = ? AND id IN ({marks}) AND dead_letter_source IS NOT NULL"
MOVES_RUNNING = f"SELECT COUNT(*) FROM forq_move_tasks WHERE status = '{MoveStatus.RUNNING}'"

# --- background jobs (each skips messages in processing) --------------------------------------

# idx_expired holds no leased rows (partial since migration 0011: ready and failed ones): each query on
# it states the index's condition word for word, which is how SQLite knows the index may answer it.
NOT_LEASED = f"(status = {READY} OR status = {FAILED})"

# How long a dead letter is kept where it goes: its queue's own DLQ retention (else the global one);
# where the queue names another queue (``dead_letter_queue``), that queue's retention (a DLQ's: its
# regular queue's DLQ retention), as a message sent there gets.
_N = len(DLQ_SUFFIX)
DLQ_TTL = f"""COALESCE((SELECT CASE
    WHEN q.dead_letter_queue IS NULL THEN q.dlq_retention_ms
    WHEN substr(q.dead_letter_queue, -{_N}) = '{DLQ_SUFFIX}' THEN (SELECT b.dlq_retention_ms FROM forq_queues AS b
        WHERE b.name = substr(q.dead_letter_queue, 1, length(q.dead_letter_queue) - {_N}))
    ELSE COALESCE((SELECT t.retention_ms FROM forq_queues AS t WHERE t.name = q.dead_letter_queue), :queue_ttl) END
    FROM forq_queues AS q WHERE q.name = messages.queue), :ttl)"""

MOVE_EXPIRED_TO_DLQ = f"""
UPDATE messages
SET attempts = 0, status = {READY}, queue = {DLQ_TARGET}, is_dlq = {DLQ_TARGET_FLAG}, process_after = :now,
    dead_letter_source = queue,
    processing_started_at = NULL, failure_reason = '{EXPIRED}',
    updated_at = MAX(:now, updated_at), expires_after = :now + {DLQ_TTL}
WHERE id IN (SELECT id FROM messages INDEXED BY idx_expired
             WHERE {NOT_LEASED} AND status IN ({READY}, {FAILED}) AND is_dlq = 0 AND expires_after < :now LIMIT :batch)"""

MOVE_FAILED_TO_DLQ = f"""
UPDATE messages
SET attempts = 0, status = {READY}, queue = {DLQ_TARGET}, is_dlq = {DLQ_TARGET_FLAG}, process_after = :now,
    dead_letter_source = queue,
    processing_started_at = NULL, failure_reason = COALESCE(failure_reason, '{MAX_ATTEMPTS}'),
    updated_at = MAX(:now, updated_at), expires_after = :now + {DLQ_TTL}
WHERE id IN (SELECT id FROM messages INDEXED BY idx_expired
             WHERE {NOT_LEASED} AND status = {FAILED} AND is_dlq = 0 LIMIT :batch)"""

# The safety net behind precise leases (a claim takes an expired delivery at once): deliveries whose
# lease ended before :cutoff → ready, or failed when their attempts are used up (the queue's own
# max_attempts, or :max; 0 is unlimited).
MAX_ATTEMPTS_OF_QUEUE = "COALESCE((SELECT max_attempts FROM forq_queues WHERE name = messages.queue), :max)"

# Leased rows are not in idx_expired (it is partial: migration 0011); idx_leases holds them alone
# (migration 0014), so its whole reads cost the number of leases, whatever the queues hold.
LEASED = f"messages INDEXED BY idx_leases WHERE status = {PROCESSING}"

RECOVER_STALE = f"""
UPDATE messages
SET status = CASE WHEN {MAX_ATTEMPTS_OF_QUEUE} BETWEEN 1 AND attempts THEN {FAILED} ELSE {READY} END,
    process_after = :now, processing_started_at = NULL, updated_at = MAX(:now, updated_at)
WHERE id IN (SELECT id FROM {LEASED} AND process_after < :cutoff LIMIT :batch)"""

DELETE_EXPIRED_DLQ = f"""
DELETE FROM messages WHERE id IN (SELECT id FROM messages INDEXED BY idx_expired
    WHERE {NOT_LEASED} AND status IN ({READY}, {FAILED}) AND is_dlq = 1 AND expires_after < :now LIMIT :batch)"""

DELETE_FAILED_DLQ = f"""
DELETE FROM messages WHERE id IN (SELECT id FROM messages INDEXED BY idx_expired
    WHERE {NOT_LEASED} AND status = {FAILED} AND is_dlq = 1 LIMIT :batch)"""

COUNT_EXPIRED = f"""
SELECT COUNT(*) FROM messages INDEXED BY idx_expired
WHERE {NOT_LEASED} AND status IN ({READY}, {FAILED}) AND is_dlq = ? AND expires_after < ?"""

COUNT_FAILED = f"""
SELECT COUNT(*) FROM messages INDEXED BY idx_expired WHERE {NOT_LEASED} AND status = {FAILED} AND is_dlq = ?"""

COUNT_STALE = f"SELECT COUNT(*) FROM {LEASED} AND process_after < ?"

DELETE_EXPIRED_DEDUP = """
DELETE FROM forq_dedup WHERE (queue, dedup_id) IN (
    SELECT queue, dedup_id FROM forq_dedup INDEXED BY idx_dedup_expires WHERE expires_at <= :now LIMIT :batch)"""

OPTIMIZE = "PRAGMA optimize"

QUEUE_DEPTHS = "SELECT queue, is_dlq, COUNT(*) FROM messages GROUP BY queue, is_dlq ORDER BY queue"

IN_FLIGHT_BY_QUEUE = f"SELECT queue, COUNT(*) FROM {LEASED} AND process_after > ? GROUP BY queue"


def _state_counts(named: bool) -> str:
    """(queue, kind, count) of every queue (or of the queues named in the JSON array :queues): all
    its rows, then the failed (0), the delayed (1) and the live leases (2), each kind read in the
    index it lives in."""
    of = " AND queue IN (SELECT value FROM json_each(:queues))" if named else ""
    if not named:
        return f"""
SELECT queue, -1, COUNT(*) FROM messages INDEXED BY idx_for_queue_depth WHERE 1{of} GROUP BY queue
UNION ALL SELECT queue, 0, COUNT(*) FROM messages INDEXED BY idx_expired
          WHERE {NOT_LEASED} AND status = {FAILED}{of} GROUP BY queue
UNION ALL SELECT queue, 1, COUNT(*) FROM messages INDEXED BY idx_queue_timed
          WHERE status = {READY} AND process_after > received_at AND process_after > :now{of} GROUP BY queue
UNION ALL SELECT queue, 2, COUNT(*) FROM {LEASED} AND process_after > :now{of} GROUP BY queue"""
    # Named queues: the delayed rows and the leases read as ranges from ``now`` on, those without a
    # group (``message_group = ''``, the indexes' second column) and those of groups apart, summed.
    parts = [f"""SELECT queue, {kind} AS kind, COUNT(*) AS n FROM {source}
          AND {grouping} AND process_after > :now{of} GROUP BY queue"""
             for kind, source in ((1, f"messages INDEXED BY idx_queue_timed WHERE status = {READY} "
                                      "AND process_after > received_at"), (2, LEASED))
             for grouping in ("message_group = ''", "message_group > ''")]
    return f"""
SELECT queue, -1, COUNT(*) FROM messages INDEXED BY idx_for_queue_depth WHERE 1{of} GROUP BY queue
UNION ALL SELECT queue, 0, COUNT(*) FROM messages INDEXED BY idx_expired
          WHERE {NOT_LEASED} AND status = {FAILED}{of} GROUP BY queue
UNION ALL SELECT queue, kind, SUM(n) FROM ({" UNION ALL ".join(parts)}) GROUP BY queue, kind"""


STATE_COUNTS = {named: _state_counts(named) for named in (False, True)}

# --- bulk: staged writes (exactly-once Spark jobs) and snapshot reads -------------------------
#
# A staged row waits in ``forq_staged`` (one B-tree keyed by token, message_id) until its job
# publishes it into ``messages`` with one INSERT … SELECT, or discards it.

STAGE = """
INSERT INTO forq_staged (token, message_id, queue, content, process_after, priority, attributes, message_group,
                         staged_at)
VALUES (?, ?, ?, ?, ?, ?, ?, COALESCE(?, ''), ?)"""

STAGE_JSON = """
INSERT INTO forq_staged (token, message_id, queue, content, process_after, priority, attributes, message_group,
                         staged_at)
SELECT :token, value->>0, :queue, value->>1, value->>2, value->>3, value->>4, COALESCE(value->>5, ''), :now
FROM json_each(:rows)"""

STAGED_COUNT = "SELECT COUNT(*) FROM forq_staged WHERE token = :token AND queue = :queue"

# Sequence numbers in message id order (the order the job wrote them), after :first - 1.
PUBLISH = f"""
INSERT INTO messages ({COLUMNS}, message_group)
SELECT message_id, queue, 0, content, {READY}, 0, MAX(process_after, :now - :tolerance), NULL, NULL,
       :now, :now, MAX(process_after, :now) + :ttl, priority, attributes, NULL,
       :first - 1 + row_number() OVER (ORDER BY message_id), message_group
FROM forq_staged WHERE token = :token AND queue = :queue"""

UNSTAGE = "DELETE FROM forq_staged WHERE token = :token AND queue = :queue"

# A streaming query's batch, recorded unless it (or a later one) was: RETURNING gives no row then.
RECORD_SINK_BATCH = """
INSERT INTO forq_sink_batches (queue, sink, batch_id, committed_at) VALUES (:queue, :sink, :batch, :now)
ON CONFLICT (queue, sink) DO UPDATE SET batch_id = excluded.batch_id, committed_at = excluded.committed_at
WHERE forq_sink_batches.batch_id < excluded.batch_id
RETURNING batch_id"""

DELETE_QUEUE_SINKS = "DELETE FROM forq_sink_batches WHERE queue = ?"

DISCARD = "DELETE FROM forq_staged WHERE token = ? AND queue = ?"

DELETE_ABANDONED_STAGED = """
DELETE FROM forq_staged WHERE (token, message_id) IN (
    SELECT token, message_id FROM forq_staged WHERE staged_at < :cutoff LIMIT :batch)"""

SNAPSHOT_PAGE = f"""
SELECT {SNAPSHOT_SELECT_LIST}
FROM messages INDEXED BY idx_for_queue_depth
WHERE queue = ? AND is_dlq = ? AND id > ? ORDER BY id LIMIT ?"""

SNAPSHOT_PAGE_UPTO = f"""
SELECT {SNAPSHOT_SELECT_LIST}
FROM messages INDEXED BY idx_for_queue_depth
WHERE queue = ? AND is_dlq = ? AND id > ? AND id <= ? ORDER BY id LIMIT ?"""

SNAPSHOT_BOUNDS = """
SELECT COUNT(*), MIN(id), MAX(id) FROM messages INDEXED BY idx_for_queue_depth
WHERE queue = ? AND is_dlq = ?"""

# --- queues -----------------------------------------------------------------------------------

QUEUE_SELECT = """SELECT name, max_attempts, backoff, visibility_timeout_ms, retention_ms, dlq_retention_ms,
                         max_length, ordering, dedup_window_ms, max_in_flight, rate, group_concurrency,
                         group_rate, dead_letter_queue, paused, last_sequence, created_at, updated_at, rate_next_at_us
                  FROM forq_queues"""
QUEUE_GET = QUEUE_SELECT + " WHERE name = ?"
QUEUE_GET_MANY = QUEUE_SELECT + " WHERE name IN (SELECT value FROM json_each(?))"
QUEUE_LIST = QUEUE_SELECT + " WHERE name != '' ORDER BY name"

QUEUE_PUT = f"""
INSERT INTO forq_queues (name, max_attempts, backoff, visibility_timeout_ms, retention_ms, dlq_retention_ms,
                         max_length, ordering, dedup_window_ms, max_in_flight, rate, group_concurrency, group_rate,
                         dead_letter_queue, paused, last_sequence, created_at, updated_at)
VALUES (:name, :max_attempts, :backoff, :visibility_timeout_ms, :retention_ms, :dlq_retention_ms,
        :max_length, :ordering, :dedup_window_ms, :max_in_flight, :rate, :group_concurrency, :group_rate,
        :dead_letter_queue, :paused, {COUNTER_FLOOR}, :now, :now)
ON CONFLICT (name) DO UPDATE SET
    max_attempts = excluded.max_attempts, backoff = excluded.backoff,
    visibility_timeout_ms = excluded.visibility_timeout_ms, retention_ms = excluded.retention_ms,
    dlq_retention_ms = excluded.dlq_retention_ms, max_length = excluded.max_length,
    ordering = excluded.ordering, dedup_window_ms = excluded.dedup_window_ms,
    max_in_flight = excluded.max_in_flight, rate = excluded.rate, group_concurrency = excluded.group_concurrency,
    group_rate = excluded.group_rate, dead_letter_queue = excluded.dead_letter_queue, paused = excluded.paused,
    updated_at = excluded.updated_at"""

# A new queue's row, unless ``limit`` queues have one: the count and the insert are one statement,
# and SQLite has one writer, so two creations never both pass the limit. (The row named '' is the
# counter floor, no queue.)
QUEUE_COUNT = "SELECT COUNT(*) FROM forq_queues WHERE name != ''"
QUEUE_CREATE = f"""
INSERT INTO forq_queues (name, last_sequence, paused, created_at, updated_at)
SELECT :name, {COUNTER_FLOOR}, 0, :now, :now WHERE ({QUEUE_COUNT}) < :limit
ON CONFLICT (name) DO NOTHING"""
QUEUE_EXISTS = "SELECT 1 FROM forq_queues WHERE name = ?"

# --- schedules --------------------------------------------------------------------------------

SCHEDULE_COLUMNS = """name, queue, content, cron, every_ms, catch_up, priority, attributes, paused, next_run_at,
                      last_run_at, created_at, updated_at"""
SCHEDULE_PUT = f"""
INSERT INTO forq_schedules ({SCHEDULE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue, content = excluded.content, cron = excluded.cron, every_ms = excluded.every_ms,
    catch_up = excluded.catch_up, priority = excluded.priority, attributes = excluded.attributes,
    paused = excluded.paused, next_run_at = excluded.next_run_at, last_run_at = excluded.last_run_at,
    updated_at = excluded.updated_at"""
SCHEDULE_GET = f"SELECT {SCHEDULE_COLUMNS} FROM forq_schedules WHERE name = ?"
SCHEDULE_LIST = f"SELECT {SCHEDULE_COLUMNS} FROM forq_schedules ORDER BY name"
SCHEDULE_DELETE = "DELETE FROM forq_schedules WHERE name = ?"
SCHEDULE_SET_PAUSED = """
UPDATE forq_schedules SET paused = :paused, next_run_at = COALESCE(:next, next_run_at), updated_at = :now
WHERE name = :name"""
SCHEDULES_DUE = f"""
SELECT {SCHEDULE_COLUMNS} FROM forq_schedules INDEXED BY idx_schedules_next_run
WHERE next_run_at <= ? AND NOT paused ORDER BY next_run_at LIMIT ?"""
SCHEDULE_ADVANCE = """
UPDATE forq_schedules SET next_run_at = :next, last_run_at = COALESCE(:last, last_run_at), updated_at = :now
WHERE name = :name AND next_run_at = :expected"""

# A deleted queue's counter raises the floor every new queue's counter starts from, so a queue
# created again under the same name never reuses a number.
RAISE_COUNTER_FLOOR = """
INSERT INTO forq_queues (name, last_sequence, paused, created_at, updated_at)
SELECT '', last_sequence, 0, :now, :now FROM forq_queues WHERE name = :name
ON CONFLICT (name) DO UPDATE SET last_sequence = MAX(last_sequence, excluded.last_sequence)"""
QUEUE_DELETE = "DELETE FROM forq_queues WHERE name = :name"
QUEUE_SET_SQS_ATTRIBUTES = "UPDATE forq_queues SET sqs_attributes = ? WHERE name = ?"
QUEUE_SET_SQS_TAGS = "UPDATE forq_queues SET sqs_tags = ? WHERE name = ?"
QUEUE_DROP_PLACEHOLDER = """DELETE FROM forq_queues WHERE name = ? AND last_sequence = ? AND updated_at = ?
AND NOT EXISTS (SELECT 1 FROM messages WHERE queue = ?)"""
DELETE_QUEUE_MESSAGES = "DELETE FROM messages WHERE queue = ?"
DELETE_QUEUE_DEDUP = "DELETE FROM forq_dedup WHERE queue = ?"
PURGE = "DELETE FROM messages WHERE queue = ? AND is_dlq = 0"
PURGE_UNHELD = f"""DELETE FROM messages WHERE queue = ? AND is_dlq = 0
AND (status = {READY} OR (status = {PROCESSING} AND process_after <= ?))"""

# --- API-key throttle (every process and host shares it) --------------------------------------

# One statement, so that concurrent failures are counted one after the other (the row's lock): a
# failure from a key already blocked is not counted and leaves its block as it is (``failures`` goes
# over ``max``, which tells the caller so: the block negated); otherwise the ``max``-th within the
# window blocks it (``failures`` held at ``max`` once a block lapsed within the window: the next
# failure blocks it again).
AUTH_FAILED = """
INSERT INTO forq_auth_throttle (address, failures, window_start, blocked_until)
VALUES (:address, 1, :now, CASE WHEN :max <= 1 THEN :now + :block ELSE 0 END)
ON CONFLICT (address) DO UPDATE SET
    failures = CASE WHEN blocked_until > :now THEN failures + 1
                    WHEN window_start <= :now - :window THEN 1
                    ELSE MIN(failures + 1, :max) END,
    window_start = CASE WHEN blocked_until <= :now AND window_start <= :now - :window THEN :now
                        ELSE window_start END,
    pending = CASE WHEN blocked_until <= :now AND window_start <= :now - :window THEN 0 ELSE pending END,
    blocked_until = CASE
        WHEN blocked_until > :now THEN blocked_until
        WHEN (CASE WHEN window_start <= :now - :window THEN 1 ELSE failures + 1 END) >= :max
        THEN :now + :block ELSE blocked_until END
RETURNING CASE WHEN failures > :max THEN -blocked_until ELSE blocked_until END"""

# Failed logins (forqapp.login_throttle) share the table under "login-…" keys, with their own
# (longer) window: each kind prunes only its own stale rows, so a wrong API key never resets a
# login counter.
LOGIN_KEYS = "login-%"

AUTH_FORGET = f"""
DELETE FROM forq_auth_throttle WHERE window_start < ? AND blocked_until < ? AND address NOT LIKE '{LOGIN_KEYS}'"""

AUTH_BLOCKED_UNTIL = "SELECT blocked_until FROM forq_auth_throttle WHERE address = ?"

# --- login throttle (the API-key throttle's table and statement, "login-…" keys) ----------------

LOGIN_FORGET = f"""
DELETE FROM forq_auth_throttle WHERE window_start < ? AND blocked_until < ? AND address LIKE '{LOGIN_KEYS}'"""

# A login about to be checked takes its place among the logins being checked (``pending``) first,
# in one statement, so that concurrent logins are counted one after the other: none while the key
# is blocked, none once the window's failures and logins being checked come to ``max``. A block
# that lapsed within the window lets one more through, as the ``max``-th. A window past its end
# starts anew with this login. Returns the window it was counted in (its release or failure counts
# there only); no row: refused.
LOGIN_ATTEMPT = """
INSERT INTO forq_auth_throttle (address, failures, window_start, blocked_until, pending)
VALUES (:address, 0, :now, 0, 1)
ON CONFLICT (address) DO UPDATE SET
    failures = CASE WHEN window_start <= :now - :window THEN 0 WHEN blocked_until > 0 THEN MIN(failures, :max - 1)
                    ELSE failures END,
    pending = CASE WHEN window_start <= :now - :window THEN 1 ELSE pending + 1 END,
    window_start = CASE WHEN window_start <= :now - :window THEN :now ELSE window_start END,
    blocked_until = 0
WHERE blocked_until <= :now
  AND (window_start <= :now - :window
       OR (CASE WHEN blocked_until > 0 THEN MIN(failures, :max - 1) ELSE failures END) + pending < :max)
RETURNING window_start"""

LOGIN_REFUSED = """
SELECT blocked_until, failures, window_start FROM forq_auth_throttle WHERE address = :address"""

# A login counted in window ``reserved`` failed: one failure more there, the ``max``-th blocks the
# key. A window that started anew since counts nothing (the login was counted in its own).
LOGIN_FAILED_CHECK = """
UPDATE forq_auth_throttle SET failures = failures + 1, pending = MAX(pending - 1, 0),
    blocked_until = CASE WHEN failures + 1 >= :max AND blocked_until <= :now THEN :now + :block
                         ELSE blocked_until END
WHERE address = :address AND window_start = :reserved"""

# A login counted in window ``reserved`` did not fail: no longer being checked (no-op once the
# window started anew).
LOGIN_RELEASE = """
UPDATE forq_auth_throttle SET pending = pending - 1 WHERE address = :address AND window_start = :reserved AND pending > 0"""

# --- leases (one holder per name across every process and host: the jobs scheduler) -----------

# Acquire or renew in one statement: a new name is inserted; an existing one changes hands only if
# it is ours already, if it has expired, or if it is held by ``replacing`` (a holder the caller
# found dead). No row comes back when someone else holds it.
LEASE_ACQUIRE = """
INSERT INTO forq_leases (name, holder, expires_at) VALUES (:name, :holder, :expires_at)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE forq_leases.holder IN (:holder, :replacing) OR forq_leases.expires_at < :now
RETURNING holder"""

LEASE_HOLDER = "SELECT holder, expires_at FROM forq_leases WHERE name = ?"

LEASE_RELEASE = "DELETE FROM forq_leases WHERE name = ? AND holder = ?"


def _reads_claim_indexes(method: F) -> F:
    """The claim's statements name their indexes (``INDEXED BY``), which SQLite refuses ("no query
    solution", "no such index") on a schema of another version (a process started before
    ``migrate``, or code ahead of it): said so, with what to do."""
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except sqlite3.OperationalError as exc:
            if not str(exc).startswith(("no query solution", "no such index")):
                raise
            raise sqlite3.OperationalError(
                f"{exc}: the database's claim indexes are not those this code reads: run "
                "`manage.py migrate`, and restart the processes started before it") from exc
    return cast(F, wrapper)


def _queue_row(row: Sequence[Any]) -> QueueRow:
    return QueueRow._make((*row[:14], bool(row[14]), *row[15:]))


def _schedule_row(row: Sequence[Any]) -> ScheduleRow:
    return ScheduleRow._make((*row[:8], bool(row[8]), *row[9:]))


def _take_sequence(conn: sqlite3.Connection, queue: str, n: int, now: int) -> int:
    """Take ``n`` numbers of ``queue``'s counter inside the caller's transaction; returns the last."""
    if conn.execute(BUMP_SEQUENCE, (n, queue)).rowcount:
        return int(conn.execute(LAST_SEQUENCE, (queue,)).fetchone()[0])
    ((last,),) = conn.execute(NEXT_SEQUENCE, {"queue": queue, "n": n, "now": now}).fetchall()
    return int(last)


def _holds_nul(rows: Sequence[Sequence[Any]], index: int) -> bool:
    """Whether a string at ``index`` of any row has a NUL: SQLite's JSON text ends there, so such
    batches are bound row by row instead."""
    return any("\x00" in r[index] for r in rows)


# The lock files this process opened, by path. A forked child forgets them and opens its own: a
# flock belongs to the open file, which a child shares with its parent.
_lock_fds: dict[str, int] = {}
_lock_failed: set[str] = set()


def _forget_lock_files() -> None:
    _lock_fds.clear()
    _lock_failed.clear()


os.register_at_fork(after_in_child=_forget_lock_files)


@contextmanager
def _flocked(path: str) -> Iterator[None]:
    fd = _lock_fds.get(path)
    if fd is None:
        try:
            fd = _lock_fds.setdefault(path, os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        except OSError as exc:  # (a full disk, a directory it may not write): SQLite's lock alone
            if path not in _lock_failed:
                _lock_failed.add(path)
                logger.warning("forqapp: cannot open %s (%s); writers wait in SQLite's busy handler", path, exc)
            yield
            return
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


class SQLiteStore(Store):
    """The queue in one SQLite file (WAL): one writer at a time, any number of readers."""

    vendor: ClassVar[str] = "sqlite"
    text_holds_nul: ClassVar[bool] = True
    wakeups: ClassVar[Literal["data_version", "listen"]] = "data_version"
    default_db_threads: ClassVar[int] = 1
    default_api_workers: ClassVar[int] = 1  # one writer: group commit in one process beats two

    def __init__(self, alias: str, dbapi_connection: Any = None) -> None:
        super().__init__(alias, dbapi_connection)
        # Queues whose last claim found a group eligible: their next claim takes the messages without
        # a group and the groups' in one transaction (one commit rather than two). A hint, per process.
        self._grouped: set[str] = set()

    if TYPE_CHECKING:  # the base returns the DB-API connection untyped

        def _conn(self) -> sqlite3.Connection: ...

    def _batched(self, sql: str, params: dict[str, Any], batch: int) -> int:
        conn = self._conn()
        total = 0
        while True:
            n = conn.execute(sql, {**params, "batch": batch}).rowcount
            total += n
            if n < batch:
                return total

    # -- configuration -----------------------------------------------------------------------

    def check(self) -> Iterator[CheckMessage]:
        if sqlite3.sqlite_version_info < MIN_VERSION:
            yield Error(f"SQLite {sqlite3.sqlite_version} has no RETURNING; forqapp needs 3.35+",
                        id="forqapp.E005")

    def startup_problems(self) -> list[str]:
        connection = cast(DatabaseWrapper, self.connection)
        if not connection.is_in_memory_db():
            directory = Path(connection.settings_dict["NAME"]).parent
            if not directory.is_dir():
                return [f"the SQLite file's directory {directory} does not exist (FORQ_DB_PATH)"]
        return []

    # -- produce -----------------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """Several statements that commit together: the caller's transaction when there is one,
        else ``BEGIN IMMEDIATE`` … ``COMMIT`` straight on the connection (a tenth of the cost of
        Django's ``atomic()``; Django's wrapper stays in autocommit around it). Django's SQLite
        backend sets ``isolation_level`` to None exactly in autocommit (as :meth:`insert_one` reads
        it): inside ``atomic()`` it is a transaction mode, though the transaction may not have begun
        yet (asking the wrapper, ``in_atomic_block``, cost each grouped claim 1.6 µs)."""
        conn = self._conn()
        if self._fixed is not None or conn.isolation_level is not None or conn.in_transaction:
            yield conn
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _next_sequence(self, conn: sqlite3.Connection, queue: str, n: int, now: int) -> int:
        """Take ``n`` numbers of ``queue``'s counter; returns the first."""
        return _take_sequence(conn, queue, n, now) - n + 1

    def insert(self, rows: Sequence[MessageRow], *, is_dlq: bool = False) -> list[int]:
        if not rows:
            return []
        flag = 1 if is_dlq else 0
        queue = rows[0][1]
        now = rows[0][4]
        with self._transaction() as conn:
            if any(r[1] != queue for r in rows):  # several queues: each its own counter
                counts: dict[str, int] = {}
                for r in rows:
                    counts[r[1]] = counts.get(r[1], 0) + 1
                # a DLQ's messages number with their regular queue's
                nxt = {q: self._next_sequence(conn, base_of(q) if is_dlq else q, n, now) for q, n in counts.items()}
                sequences = []
                for r in rows:
                    sequences.append(nxt[r[1]])
                    nxt[r[1]] += 1
                _insert_rows(conn, rows, sequences, flag)
                return sequences
            first = self._next_sequence(conn, base_of(queue) if is_dlq else queue, len(rows), now)
            _insert_queue_rows(conn, rows, first, flag)
            return list(range(first, first + len(rows)))

    def insert_batch(self, queue: str, ids: Sequence[str], contents: Sequence[str], priorities: Sequence[int],
                     attributes: Sequence[str | None], *, due: int, received: int, expires: int) -> list[int]:
        """:func:`insert_shared`'s statements, their parameters laid out from the columns."""
        params = list(chain.from_iterable(zip(ids, contents, priorities, attributes, strict=True)))
        if not params:
            return []
        with self._transaction() as conn:
            first = self._next_sequence(conn, queue, len(ids), received)
            _insert_shared_rows(conn, queue, due, received, expires, first, params, 0)
        return list(range(first, first + len(ids)))

    def insert_one(self, row: NewMessage) -> int:
        """Two statements (the counter, the row) in one transaction: the caller's, or ``BEGIN
        IMMEDIATE`` … ``COMMIT`` of its own when the connection is in autocommit (Django's SQLite
        backend sets ``isolation_level`` to None exactly then; inside ``atomic()``, or after
        ``set_autocommit(False)``, it is a transaction mode and the row joins the caller's)."""
        conn = self._conn()
        message_id, queue, content, due, now, expires, priority, attributes, dedup_id, group = row
        if group is not None:
            return self.insert([row])[0]
        if self._fixed is not None or conn.isolation_level is not None or conn.in_transaction:
            seq = _take_sequence(conn, queue, 1, now)
            conn.execute(INSERT, (message_id, queue, 0, content, due, now, now, expires, priority, attributes,
                                  dedup_id, seq))
            return int(seq)
        conn.execute("BEGIN IMMEDIATE")
        try:
            seq = _take_sequence(conn, queue, 1, now)
            conn.execute(INSERT, (message_id, queue, 0, content, due, now, now, expires, priority, attributes,
                                  dedup_id, seq))
        except BaseException:
            if conn.in_transaction:  # (SQLite may have rolled back already, e.g. on a full disk)
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return int(seq)

    def dedup(self, queue: str, dedup_id: str, message_id: str, now: int, window_ms: int) -> str | None:
        conn = self._conn()
        params = {"queue": queue, "dedup_id": dedup_id, "id": message_id, "expires": now + window_ms, "now": now}
        if conn.execute(DEDUP_RECORD, params).fetchall():
            return None
        return str(conn.execute(DEDUP_ORIGINAL, (queue, dedup_id)).fetchone()[0])

    def queue_length(self, queue: str, limit: int) -> int:
        # SQLite has one writer: inside the produce's transaction, the count is exact.
        return int(self._conn().execute(QUEUE_LENGTH, (queue, limit)).fetchone()[0])

    # -- consume -----------------------------------------------------------------------------

    def claim(self, queue: str, now: int, limit: int = 1, *, visibility_ms: int, max_attempts: int,
              dlq_ttl_ms: int, order: str = "fifo", max_in_flight: int | None = None,
              rate_interval_us: int | None = None, group_concurrency: int | None = None,
              group_rate_us: int | None = None, group_batch: bool = False) -> Claim:
        groups = (group_concurrency, group_rate_us, group_batch)
        if max_in_flight is None and rate_interval_us is None:
            return self._claim(queue, now, limit, visibility_ms, max_attempts, dlq_ttl_ms, order, groups)
        # A read first (no write lock): a queue at its limit says so without queueing for the lock.
        held_back = self._held_back(queue, now, max_in_flight, rate_interval_us)
        if held_back is not None:
            return held_back
        # SQLite has one writer: inside BEGIN IMMEDIATE, nobody claims from the queue meanwhile.
        with self._transaction() as conn:
            if max_in_flight is not None:
                ((in_flight,),) = conn.execute(IN_FLIGHT, (queue, now)).fetchall()
                limit = min(limit, max_in_flight - in_flight)
                if limit <= 0:
                    return Claim([], throttled="concurrency")
            if rate_interval_us is not None:
                row = conn.execute(RATE_NEXT, (queue,)).fetchone()
                next_us = int(row[0]) if row else 0
                if next_us > now * 1000:
                    return Claim([], throttled="rate", retry_at=-(-next_us // 1000))
                limit = 1  # claims are spaced evenly: one per slot
            claimed = self._claim(queue, now, limit, visibility_ms, max_attempts, dlq_ttl_ms, order, groups)
            if rate_interval_us is not None and claimed.deliveries:
                conn.execute(RATE_TAKE, {"now_us": now * 1000, "n": len(claimed.deliveries),
                                         "interval": rate_interval_us, "queue": queue})
            return claimed

    def _held_back(self, queue: str, now: int, max_in_flight: int | None, rate_interval_us: int | None
                   ) -> Claim | None:
        state = self.throttle_state(queue, now)
        if max_in_flight is not None and state.in_flight >= max_in_flight:
            return Claim([], throttled="concurrency")
        if rate_interval_us is not None and state.rate_next_at_us > now * 1000:
            return Claim([], throttled="rate", retry_at=-(-state.rate_next_at_us // 1000))
        return None

    def group_state(self, queue: str, group: str, now: int) -> GroupState:
        ((ready, in_flight, eligible_at),) = self._conn().execute(
            GROUP_STATE, {"queue": queue, "group": group, "now": now}).fetchall()
        return GroupState(group, int(ready), int(in_flight), eligible_at)

    def busiest_groups(self, queue: str, now: int, limit: int) -> list[GroupState]:
        rows = self._conn().execute(GROUPS_BUSIEST, {"queue": queue, "now": now, "limit": limit})
        return [GroupState(g, int(r), int(f), e) for g, r, f, e in rows]

    def group_count(self, queue: str) -> int:
        return int(self._conn().execute(GROUP_COUNT, {"queue": queue}).fetchone()[0])

    def next_group_turn(self, queue: str) -> int | None:
        row = self._conn().execute(GROUP_NEXT_TURN, (queue,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def next_group_turns(self, queues: Sequence[str]) -> dict[str, int]:
        if not queues:
            return {}
        rows = self._conn().execute(GROUP_NEXT_TURNS, (json.dumps(list(queues)),)).fetchall()
        return {q: int(t) for q, t in rows}

    def next_turns(self, queues: Sequence[str]) -> dict[str, int]:
        if not queues:
            return {}
        rows = self._conn().execute(NEXT_TURNS, (json.dumps(list(queues)),)).fetchall()
        return {q: int(t) for q, t in rows}

    def throttle_state(self, queue: str, now: int) -> ThrottleState:
        conn = self._conn()
        ((in_flight,),) = conn.execute(IN_FLIGHT, (queue, now)).fetchall()
        row = conn.execute(RATE_NEXT, (queue,)).fetchone()
        return ThrottleState(int(in_flight), int(row[0]) if row else 0)

    def defer(self, queue: str, message_id: str, receipt: int, now: int, delay_ms: int, state: str | None) -> bool:
        with self._transaction() as conn:
            sequence = self._next_sequence(conn, base_of(queue), 1, now)
            return conn.execute(DEFER, {"now": now, "delay": delay_ms, "state": state, "id": message_id,
                                        "queue": queue, "receipt": receipt, "sequence": sequence}).rowcount == 1

    def notify(self, queue: str) -> None:
        """Nothing to do: every commit changes ``PRAGMA data_version``, which the notifier watches."""

    @_reads_claim_indexes
    def _claim(self, queue: str, now: int, limit: int, visibility_ms: int, max_attempts: int, dlq_ttl_ms: int,
               order: str, groups: tuple[int | None, int | None, bool] = (None, None, False)) -> Claim:
        if queue in self._grouped:  # (a queue seen with groups: both parts in one transaction, one commit)
            with self._transaction() as conn:
                # No message without a group due (they would go first): a group's turn, in one statement.
                params = {"queue": queue, "now": now, "visibility": visibility_ms, "max": max_attempts,
                          "dlq_ttl": dlq_ttl_ms, "concurrency": groups[0], "rate_us": groups[1],
                          "batch": groups[2], "limit": limit}
                deliveries: list[Delivery] = []
                redriven: list[Delivery] = []
                if not self._group_turn(conn, GROUP_CLAIM_ALONE, params, deliveries, redriven):
                    return self._claim_both(queue, now, limit, visibility_ms, max_attempts, dlq_ttl_ms, order,
                                            groups, probe=False)
                if len(deliveries) < limit:
                    more = self._claim_groups(queue, now, limit - len(deliveries), visibility_ms, max_attempts,
                                              dlq_ttl_ms, *groups, probe=False)
                    if more is not None:
                        deliveries += more.deliveries
                        redriven += more.redriven_messages
                return Claim(deliveries, tuple(redriven))
        return self._claim_both(queue, now, limit, visibility_ms, max_attempts, dlq_ttl_ms, order, groups)

    def _claim_both(self, queue: str, now: int, limit: int, visibility_ms: int, max_attempts: int, dlq_ttl_ms: int,
                    order: str, groups: tuple[int | None, int | None, bool], probe: bool = True) -> Claim:
        if order == "due" and limit > 1:
            with self._transaction():  # the pick, then the claim of what it picked (DUE_ROWS)
                claimed = self._claim_rows(queue, now, limit, visibility_ms, max_attempts, dlq_ttl_ms, order)
        else:
            claimed = self._claim_rows(queue, now, limit, visibility_ms, max_attempts, dlq_ttl_ms, order)
        if len(claimed.deliveries) >= limit:
            return claimed
        # The messages without a group first (as they were claimed before groups), then the groups.
        grouped = self._claim_groups(queue, now, limit - len(claimed.deliveries), visibility_ms, max_attempts,
                                     dlq_ttl_ms, *groups, probe=probe)
        if grouped is None:
            self._grouped.discard(queue)
            return claimed
        self._grouped.add(queue)
        if not claimed.deliveries and not claimed.redriven_messages:
            return grouped
        return Claim(claimed.deliveries + grouped.deliveries,
                     claimed.redriven_messages + grouped.redriven_messages)

    def _claim_groups(self, queue: str, now: int, limit: int, visibility_ms: int, max_attempts: int,
                      dlq_ttl_ms: int, concurrency: int | None, rate_us: int | None, batch: bool = False,
                      probe: bool = True) -> Claim | None:
        """Up to ``limit`` messages of ``queue``'s groups, a group's turn at a time (GROUP_PICK …);
        None when no group is eligible now (``probe``: found by a read, before any write lock).
        ``batch``: each group's turn takes its next messages too (:meth:`_followers`)."""
        if probe and not self._conn().execute(GROUP_PICK, {"queue": queue, "now": now}).fetchall():
            return None
        deliveries: list[Delivery] = []
        redriven: list[Delivery] = []
        held_back = False
        params: dict[str, Any] = {"queue": queue, "now": now, "visibility": visibility_ms, "max": max_attempts,
                                  "dlq_ttl": dlq_ttl_ms}
        quick = {**params, "concurrency": concurrency, "rate_us": rate_us, "batch": batch, "limit": limit}
        with self._transaction() as conn:
            for looks in range(limit + MAX_GROUP_LOOKS):
                if len(deliveries) >= limit:
                    break
                quick["limit"] = limit - len(deliveries)
                if self._group_turn(conn, GROUP_CLAIM_NEXT, quick, deliveries, redriven):
                    continue
                # The group whose turn comes first gives nothing now: its turn, statement by statement.
                row = conn.execute(GROUP_PICK, params).fetchone()
                if row is None:
                    if not looks and not probe:
                        return None
                    break
                params["group"], rate_next = row
                if rate_us is not None and rate_next > now * 1000:  # the group's rate: its next slot
                    conn.execute(GROUP_SET_TURN, {**params, "eligible_at": -(-rate_next // 1000), "claimed_at": 0,
                                                  "rate_next": rate_next})
                    held_back = True
                    continue
                candidates = conn.execute(GROUP_HELD_DUE, params).fetchall()
                held = 0
                if concurrency is not None:
                    ((held,),) = conn.execute(GROUP_HELD_COUNT, params).fetchall()
                    if candidates and held > concurrency and \
                            conn.execute(GROUP_BUSY, params).fetchone()[0] >= concurrency:
                        candidates = []  # (a batch's messages due again while others of it are busy)
                fresh: list[Any] | None = None  # the group's first two ready messages never delivered, due
                if concurrency is None or held < concurrency:
                    fresh = conn.execute(GROUP_FRESH_DUE, params).fetchall()
                    candidates += fresh[:1]
                elif not candidates:
                    held_back = True
                claimed_at = 0
                if candidates:
                    best = min(candidates, key=lambda c: (-c[1], c[2]))
                    if fresh and best is fresh[0]:
                        held += 1
                        fresh = fresh[1:]
                    got = conn.execute(GROUP_CLAIM, {**params, "id": best[0]}).fetchall()
                    if not got:
                        held = -1
                    for r in got:
                        if r[13] == PROCESSING:
                            deliveries.append(Delivery._make((*r[:13], r[14])))
                            claimed_at = now
                            if rate_us is not None:
                                rate_next = max(rate_next, now * 1000) + rate_us
                            if batch and rate_us is None and self._followers(
                                    conn, params, limit - len(deliveries), deliveries, redriven):
                                held = -1  # (counted again below)
                        else:
                            redriven += [d._replace(group=r[14]) for d in self._redriven(conn, [r])]
                            held = -1  # (a redrive frees a slot: counted again below)
                if held < 0 or (fresh is None and concurrency is not None and held < concurrency):
                    held, fresh = -1, None
                self._next_turn(conn, params, concurrency, rate_next, claimed_at, held, fresh)
        if not deliveries and not redriven:
            return Claim([], throttled="group" if held_back else None)
        return Claim(deliveries, tuple(redriven))

    def _group_turn(self, conn: sqlite3.Connection, sql: str, params: dict[str, Any], deliveries: list[Delivery],
                    redriven: list[Delivery]) -> bool:
        """The usual turn of a group (``sql``: GROUP_CLAIM_NEXT or GROUP_CLAIM_ALONE, then
        GROUP_TURN_TAKEN), adding to ``deliveries`` (or ``redriven``); False when it took nothing."""
        got = conn.execute(sql, params).fetchall()
        if not got:
            return False
        r = got[0]
        turn = {**params, "group": r[14]}
        if r[13] == PROCESSING:
            deliveries.append(Delivery._make((*r[:13], r[14])))
            if params.get("batch") and params["rate_us"] is None:
                self._followers(conn, turn, params["limit"] - len(deliveries), deliveries, redriven)
            conn.execute(GROUP_TURN_TAKEN, turn)
            return True
        # Its attempts used up: moved to its DLQ, which frees its slot; the group's turn as after a look.
        redriven += [d._replace(group=r[14]) for d in self._redriven(conn, [r])]
        rate_next = conn.execute(GROUP_RATE_NEXT, turn).fetchone()[0]
        self._next_turn(conn, turn, params["concurrency"], rate_next, 0)
        return True

    def _followers(self, conn: sqlite3.Connection, params: dict[str, Any], n: int, deliveries: list[Delivery],
                   redriven: list[Delivery]) -> bool:
        """A batch of one group (``group_batch``): the group ``params["group"]``'s next ``n`` due
        messages (GROUP_FOLLOWERS) after the one just claimed, delivered too (or redriven), in claim
        order; whether it took any."""
        if n <= 0:
            return False
        delivered = json.dumps([d.id for d in deliveries])
        rows = conn.execute(GROUP_FOLLOWERS, {**params, "n": n, "delivered": delivered}).fetchall()
        rows.sort(key=lambda r: (-r[5], r[8]))
        for r in rows:
            if r[13] == PROCESSING:
                deliveries.append(Delivery._make((*r[:13], r[14])))
            else:
                redriven += [d._replace(group=r[14]) for d in self._redriven(conn, [r])]
        return bool(rows)

    @staticmethod
    def _next_turn(conn: sqlite3.Connection, params: dict[str, Any], concurrency: int | None, rate_next: int,
                   claimed_at: int, held: int = -1, fresh: list[Any] | None = None) -> None:
        """Set the group ``params["group"]``'s next turn: the earliest time one of its messages may
        go (no sooner than now, nor than its rate's next slot); its row goes when it has none.
        ``held``: its slots taken, when known (-1: count them); ``fresh``: its ready messages never
        delivered and due, as far as known (None: look)."""
        now = params["now"]
        times = [conn.execute(GROUP_NEXT_HELD, params).fetchone()[0]]
        if concurrency is not None and held < 0:
            held = conn.execute(GROUP_HELD_COUNT, params).fetchone()[0]
        if concurrency is not None and held > concurrency:  # (a batch's: see _BUSY_COUNT)
            busy, next_busy = conn.execute(GROUP_BUSY, params).fetchone()
            if busy >= concurrency:
                times = [next_busy]
        if concurrency is None or held < concurrency:
            if fresh is None:
                fresh = conn.execute(GROUP_FRESH_DUE, params).fetchall()
            times.append(now if fresh else conn.execute(GROUP_FRESH_NEXT, params).fetchone()[0])
        known = [t for t in times if t is not None]
        if not known:
            if not conn.execute(GROUP_ANY, params).fetchone()[0]:
                conn.execute(GROUP_DROP, params)
                return
            eligible_at = None  # (failed messages alone, waiting for the DLQ job: its move wakes the group)
        else:
            eligible_at = max(min(known), now, -(-rate_next // 1000))
        conn.execute(GROUP_SET_TURN, {**params, "eligible_at": eligible_at, "claimed_at": claimed_at,
                                      "rate_next": rate_next})

    @staticmethod
    def _claim_due(conn: sqlite3.Connection, again: bool, params: dict[str, Any]) -> list[Any]:
        """A due-order claim of several rows: the ones DUE_ROWS picks, in its order."""
        picked = [r[0] for r in conn.execute(DUE_ROWS_AGAIN if again else DUE_ROWS, params)]
        if not picked:
            return []
        place = {message_id: n for n, message_id in enumerate(picked)}
        rows = conn.execute(CLAIM_PICKED, {**params, "picked": json.dumps(picked)}).fetchall()
        rows.sort(key=lambda r: place[r[0]])
        return rows

    def _claim_rows(self, queue: str, now: int, limit: int, visibility_ms: int, max_attempts: int,
                    dlq_ttl_ms: int, order: str) -> Claim:
        conn = self._conn()
        by_due = order == "due" and limit > 1
        sql = CLAIM_ONE if limit == 1 and order == "fifo" else CLAIM[order]
        params = {"queue": queue, "now": now, "limit": limit, "visibility": visibility_ms, "max": max_attempts,
                  "dlq_ttl": dlq_ttl_ms, "among": RANDOM_AMONG, "ended_among": max(ENDED_AMONG, limit)}
        rows = self._claim_due(conn, False, params) if by_due else conn.execute(sql, params).fetchall()
        if len(rows) == 1 and limit == 1 and rows[0][13] == PROCESSING:  # the usual receive: one delivery
            return Claim([Delivery._make((*rows[0][:13], None))])
        deliveries: list[Delivery] = []
        redriven: list[Delivery] = []
        for round_ in range(MAX_REDRIVE_ROUNDS):
            if round_:
                rows = self._claim_due(conn, True, params) if by_due else conn.execute(sql, params).fetchall()
            live = [r for r in rows if r[13] == PROCESSING]  # the others were redriven to the DLQ
            moved = [r for r in rows if r[13] != PROCESSING]
            if moved:
                redriven += self._redriven(conn, moved)
            deliveries += [Delivery._make((*r[:13], None)) for r in live]
            if len(deliveries) >= limit or not rows:
                break
            if len(live) == len(rows) and order != "lifo":  # LIFO goes on to the next priority
                break
            params["limit"] = limit - len(deliveries)
            params["delivered"] = json.dumps([d.id for d in deliveries])
            sql = CLAIM_AGAIN[order]
        if len(deliveries) > 1 and order not in ("random", "due"):  # RETURNING order is unspecified
            newest_first = order == "lifo"
            deliveries.sort(key=lambda d: (-d.priority, -d.sequence if newest_first else d.sequence))
        return Claim(deliveries, tuple(redriven))

    @staticmethod
    def _redriven(conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> list[Delivery]:
        """The dead letters ``forq_redrive`` made of the claim's REDRIVING ``rows`` (RETURNING showed
        them before it ran). Should the trigger be missing (migration 0011 not applied yet), the
        move is finished here, so that no row stays REDRIVING."""
        ids = json.dumps([r[0] for r in rows])
        if conn.execute(REDRIVE_LEFT, (ids,)).rowcount:
            logger.warning("forqapp: the forq_redrive trigger is missing: run manage.py migrate")
        to = dict(conn.execute(REDRIVEN_TO, (ids,)).fetchall())
        return [Delivery._make((*r[:13], None))._replace(queue=to.get(r[0], r[1] + DLQ_SUFFIX), receipt=None,
                                                         lease_expires_at=None)
                for r in rows]

    @_reads_claim_indexes
    def peek(self, queue: str, now: int, order: str = "fifo") -> Delivery | None:
        row = self._conn().execute(PEEK[order], {"queue": queue, "now": now, "limit": 1,
                                                 "among": RANDOM_AMONG, "ended_among": ENDED_AMONG}).fetchone()
        return Delivery._make((*row, None)) if row else None

    def peek_grouped(self, queue: str, now: int, concurrency: int | None, rate_us: int | None) -> Delivery | None:
        conn = self._conn()
        params: dict[str, Any] = {"queue": queue, "now": now, "looks": MAX_GROUP_LOOKS}
        for group, rate_next in conn.execute(GROUP_PEEK_PICK, params).fetchall():  # as _claim_groups looks
            if rate_us is not None and rate_next > now * 1000:
                continue
            params["group"] = group
            candidates = conn.execute(GROUP_HELD_DUE, params).fetchall()
            if concurrency is None or conn.execute(GROUP_HELD_COUNT, params).fetchone()[0] < concurrency:
                candidates += conn.execute(GROUP_FRESH_DUE, params).fetchall()[:1]
            if candidates:
                best = min(candidates, key=lambda c: (-c[1], c[2]))
                row = conn.execute(PEEK_GROUPED, {"id": best[0]}).fetchone()
                if row:
                    return Delivery._make(row)
        return None

    def peek_message(self, queue: str, message_id: str) -> tuple[Delivery, str | None, str | None] | None:
        row = self._conn().execute(PEEK_ID, {"id": message_id, "queue": queue}).fetchone()
        return (Delivery._make((*row[:13], row[15])), row[13], row[14]) if row else None

    def ack(self, queue: str, message_id: str, receipt: int) -> bool:
        return self._conn().execute(ACK, (message_id, queue, receipt)).rowcount == 1

    def ack_many(self, queue: str, deliveries: Iterable[tuple[str, int]]) -> int:
        cur = self._conn().executemany(ACK, [(mid, queue, receipt) for mid, receipt in deliveries])
        return cur.rowcount

    def nack(self, queue: str, message_id: str, receipt: int, now: int, max_attempts: int,
             backoff_ms: Sequence[int], error: str | None = None, jitter: float = 0.0) -> bool:
        cur = self._conn().execute(NACK, {
            "max": max_attempts, "now": now, "id": message_id, "queue": queue, "receipt": receipt,
            "backoff": json.dumps([int(ms) for ms in backoff_ms]), "backoff_last": int(backoff_ms[-1]),
            "error": error, "jitter": float(jitter),
        })
        return cur.rowcount == 1

    def fail(self, queue: str, message_id: str, receipt: int, now: int, error: str | None = None,
             used_up: bool = False) -> bool:
        cur = self._conn().execute(FAIL, {"now": now, "id": message_id, "queue": queue, "receipt": receipt,
                                          "error": error, "used_up": used_up})
        return cur.rowcount == 1

    def release(self, queue: str, message_id: str, receipt: int, now: int) -> bool:
        return self._conn().execute(RELEASE, (now, now, message_id, queue, receipt)).rowcount == 1

    def release_many(self, queue: str, deliveries: Iterable[tuple[str, int]], now: int) -> int:
        cur = self._conn().executemany(RELEASE, [(now, now, mid, queue, receipt) for mid, receipt in deliveries])
        return cur.rowcount

    def change_visibility(self, queue: str, deliveries: Iterable[tuple[str, int]], now: int,
                          visibility_ms: int) -> list[bool]:
        conn = self._conn()
        return [conn.execute(CHANGE_VISIBILITY, {"now": now, "visibility": visibility_ms, "id": mid,
                                                 "queue": queue, "receipt": receipt}).rowcount == 1
                for mid, receipt in deliveries]

    # -- wake-ups and health -----------------------------------------------------------------

    @_reads_claim_indexes
    def has_due(self, queues: Sequence[str], now: int, limit: int) -> dict[str, int]:
        """In one read (the names as one JSON array)."""
        if not queues:
            return {}
        if len(queues) == 1:
            ((n,),) = self._conn().execute(HAS_DUE, {"queue": queues[0], "now": now, "limit": limit}).fetchall()
            return {queues[0]: n} if n else {}
        rows = self._conn().execute(HAS_DUE_MANY, {"queues": json.dumps(list(queues)), "now": now,
                                                   "limit": limit}).fetchall()
        return {q: int(n) for q, n in rows}

    def data_version(self) -> int:
        """Changes when another connection commits to the database file (cheap: no I/O), and when
        this thread's connection is a new one (SQLite's counter is per connection: two connections'
        numbers cannot be compared), so an equal number means nothing was committed meanwhile."""
        conn = self._conn()
        seen = _version_epochs.__dict__.setdefault("by_alias", {})
        known = seen.get(self.alias)
        if known is None or known[0] is not conn:
            seen[self.alias] = known = (conn, next(_epochs))
        return int(known[1]) << 40 | int(conn.execute(DATA_VERSION).fetchone()[0])

    def writer_lock(self) -> AbstractContextManager[None]:
        """An exclusive ``flock`` of ``<file>-writer.lock``, beside the database: the API processes
        of one server (``FORQ_API_WORKERS`` > 1) take turns at once instead of sleeping in
        SQLite's busy handler. In memory: nothing."""
        connection = cast(DatabaseWrapper, self.connection)
        if self._fixed is not None or connection.is_in_memory_db():
            return nullcontext()
        return _flocked(str(connection.settings_dict["NAME"]) + "-writer.lock")

    def change_fd(self) -> int | None:
        """An inotify descriptor, readable when a process writes the database's ``-wal`` (every
        commit does); None in memory or without inotify."""
        watch = self._watch()
        return None if watch is None else watch.fd

    def drain_changes(self) -> bool:
        """A write to the ``-wal`` is seen as it happens: its commit (the WAL index's header, in
        shared memory, which inotify does not see) follows it, so the version may lag a moment."""
        watch = self._watch()
        return watch is not None and watch.drain()

    def _watch(self) -> inotify.Watch | None:
        if self._fixed is not None:
            return None
        connection = cast(DatabaseWrapper, self.connection)
        if connection.is_in_memory_db():
            return None
        return inotify.watch(str(connection.settings_dict["NAME"]))

    def ping(self) -> None:
        self._conn().execute(PING).fetchall()

    # -- admin: dead-letter queues -----------------------------------------------------------

    def requeue(self, dlq: str, message_id: str | None, now: int, queue_ttl_ms: int) -> int:
        params: dict[str, Any] = {"dest": dlq.removesuffix(DLQ_SUFFIX), "now": now, "ttl": queue_ttl_ms,
                                  "queue": dlq}
        if message_id is None:
            return self._conn().execute(REQUEUE_ALL, params).rowcount
        return self._conn().execute(REQUEUE_ONE, {**params, "id": message_id}).rowcount

    # -- message move tasks --------------------------------------------------------------------

    def dead_letter_sources(self, name: str) -> list[str]:
        return [r[0] for r in self._conn().execute(DEAD_LETTER_SOURCES, (name,))]

    def sources_of(self, queue: str, message_ids: Sequence[str]) -> dict[str, str]:
        if not message_ids:
            return {}
        marks = ", ".join("?" * len(message_ids))
        return dict(self._conn().execute(SOURCES_OF.format(marks=marks), (queue, *message_ids)).fetchall())

    def move_start(self, handle: str, source: str, destination: str | None, rate: int | None,
                   now: int) -> MoveTaskRow | None:
        params = {"handle": handle, "source": source, "destination": destination, "rate": rate, "now": now,
                  "source_base": base_of(source) if is_dlq(source) else None}
        row = self._conn().execute(MOVE_START, params).fetchone()
        return MoveTaskRow._make(row) if row else None

    def move_running(self) -> int:
        return int(self._conn().execute(MOVES_RUNNING).fetchone()[0])

    def move_get(self, handle: str) -> MoveTaskRow | None:
        row = self._conn().execute(MOVE_GET, (handle,)).fetchone()
        return MoveTaskRow._make(row) if row else None

    def move_list(self, source: str, limit: int) -> list[MoveTaskRow]:
        return [MoveTaskRow._make(r) for r in self._conn().execute(MOVE_LIST, (source, limit))]

    def move_cancel(self, handle: str, now: int) -> MoveTaskRow | None:
        row = self._conn().execute(MOVE_CANCEL, {"handle": handle, "now": now}).fetchone()
        return MoveTaskRow._make(row) if row else None

    def move_step(self, now: int, batch: int, queue_ttl_ms: int, dlq_ttl_ms: int) -> MoveStep | None:
        with self._transaction() as conn:  # BEGIN IMMEDIATE: one writer holds the task and its batch
            row = conn.execute(MOVE_DUE, (now,)).fetchone()
            if row is None:
                return None
            task = MoveTaskRow._make(row)
            n = max(0, min(batch, task.rate or batch, task.to_move - task.moved))
            params = move_params(task, now, n, queue_ttl_ms, dlq_ttl_ms)
            moved = [r[0] for r in conn.execute(MOVE_BATCH, params).fetchall()] if n else []
            status, reason, next_at = move_outcome(task, n, len(moved), now,
                                                    lambda: conn.execute(MOVE_STRANDED, {"source": task.source, "now": now}).fetchone())
            after = conn.execute(MOVE_PROGRESS, {"moved": len(moved), "status": status, "reason": reason,
                                                 "next_at": next_at, "now": now, "handle": task.handle}).fetchone()
        return MoveStep(MoveTaskRow._make(after), len(moved), tuple(sorted(set(moved))))

    def delete_dlq(self, dlq: str, message_id: str | None) -> int:
        if message_id is None:
            return self._conn().execute(DELETE_DLQ_ALL, (dlq,)).rowcount
        return self._conn().execute(DELETE_DLQ_ONE, (message_id, dlq)).rowcount

    # -- background jobs ---------------------------------------------------------------------

    def move_expired_to_dlq(self, now: int, dlq_ttl_ms: int, queue_ttl_ms: int, batch: int = BATCH) -> int:
        return self._batched(MOVE_EXPIRED_TO_DLQ, {"now": now, "ttl": dlq_ttl_ms, "queue_ttl": queue_ttl_ms}, batch)

    def move_failed_to_dlq(self, now: int, dlq_ttl_ms: int, queue_ttl_ms: int, batch: int = BATCH) -> int:
        return self._batched(MOVE_FAILED_TO_DLQ, {"now": now, "ttl": dlq_ttl_ms, "queue_ttl": queue_ttl_ms}, batch)

    def recover_stale(self, now: int, max_attempts: int, batch: int = BATCH) -> int:
        return self._batched(RECOVER_STALE, {"now": now, "max": max_attempts, "cutoff": now}, batch)

    def delete_expired_dlq(self, now: int, batch: int = BATCH) -> int:
        return self._batched(DELETE_EXPIRED_DLQ, {"now": now}, batch)

    def delete_failed_dlq(self, batch: int = BATCH) -> int:
        return self._batched(DELETE_FAILED_DLQ, {}, batch)

    def count_expired(self, now: int, is_dlq: bool) -> int:
        return int(self._conn().execute(COUNT_EXPIRED, (1 if is_dlq else 0, now)).fetchone()[0])

    def count_failed(self, is_dlq: bool) -> int:
        return int(self._conn().execute(COUNT_FAILED, (1 if is_dlq else 0,)).fetchone()[0])

    def count_stale(self, now: int) -> int:
        return int(self._conn().execute(COUNT_STALE, (now,)).fetchone()[0])

    def delete_expired_dedup(self, now: int, batch: int = BATCH) -> int:
        return self._batched(DELETE_EXPIRED_DEDUP, {"now": now}, batch)

    def drop_empty_groups(self, batch: int = BATCH) -> int:
        conn = self._conn()
        params = {"queue": "", "name": "", "batch": batch}
        dropped = 0
        while True:
            page = conn.execute(GROUPS_PAGE, params).fetchall()
            if not page:
                return dropped
            last_queue, last_name = page[-1]
            dropped += conn.execute(DROP_EMPTY_GROUPS, {**params, "last_queue": last_queue,
                                                        "last_name": last_name}).rowcount
            if len(page) < batch:
                return dropped
            params.update(queue=last_queue, name=last_name)

    def optimize(self) -> None:
        self._conn().execute(OPTIMIZE)

    def in_flight_by_queue(self, now: int) -> dict[str, int]:
        return {q: int(n) for q, n in self._conn().execute(IN_FLIGHT_BY_QUEUE, (now,))}

    def ready_groups_by_queue(self) -> dict[str, int]:
        return {q: int(n) for q, n in self._conn().execute(READY_GROUPS_BY_QUEUE)}

    def state_counts(self, now: int, queues: Sequence[str] | None = None) -> dict[str, StateCounts]:
        params = {"now": now, "queues": json.dumps(list(queues or ()))}
        return state_counts_of(self._conn().execute(STATE_COUNTS[queues is not None], params))

    def queue_depths(self) -> list[QueueDepth]:
        """Every queue's depth (a covering index scan)."""
        return [QueueDepth(q, bool(d), n) for q, d, n in self._conn().execute(QUEUE_DEPTHS)]

    # -- bulk: staged writes and snapshot reads ----------------------------------------------

    def stage(self, token: str, queue: str, rows: Sequence[StagedMessage], now: int) -> None:
        conn = self._conn()
        if _holds_nul(rows, 1):
            conn.executemany(STAGE, [(token, r[0], queue, r[1], r[2], r[3], r[4], r[5], now) for r in rows])
        else:
            conn.execute(STAGE_JSON, {"token": token, "queue": queue, "now": now,
                                      "rows": json.dumps(rows, ensure_ascii=False)})

    def publish_staged(self, staged: Sequence[Staged], now: int, queue_ttl_ms: int,
                       past_tolerance_ms: int) -> dict[str, int]:
        conn = self._conn()
        published: dict[str, int] = {}
        for token, queue in staged:
            params: dict[str, Any] = {"token": token, "queue": queue, "now": now, "ttl": queue_ttl_ms,
                                      "tolerance": past_tolerance_ms}
            ((count,),) = conn.execute(STAGED_COUNT, params).fetchall()
            if not count:  # published (or discarded) already: nothing more
                published[queue] = published.get(queue, 0)
                continue
            params["first"] = self._next_sequence(conn, queue, count, now)
            n = conn.execute(PUBLISH, params).rowcount
            conn.execute(UNSTAGE, params)
            published[queue] = published.get(queue, 0) + n
        return published

    def record_sink_batch(self, queue: str, sink: str, batch_id: int, now: int) -> bool:
        params = {"queue": queue, "sink": sink, "batch": batch_id, "now": now}
        return bool(self._conn().execute(RECORD_SINK_BATCH, params).fetchall())

    def discard_staged(self, staged: Sequence[Staged]) -> int:
        conn = self._conn()
        return sum(conn.execute(DISCARD, (t, q)).rowcount for t, q in staged)

    def delete_abandoned_staged(self, cutoff: int, batch: int = BATCH) -> int:
        return self._batched(DELETE_ABANDONED_STAGED, {"cutoff": cutoff}, batch)

    def snapshot_page(self, queue: str, after: str, upto: str | None, limit: int) -> list[SnapshotRow]:
        """Keyset paging on the (queue, is_dlq, id) index."""
        flag = 1 if is_dlq(queue) else 0
        if upto is None:
            cur = self._conn().execute(SNAPSHOT_PAGE, (queue, flag, after, limit))
        else:
            cur = self._conn().execute(SNAPSHOT_PAGE_UPTO, (queue, flag, after, upto, limit))
        return list(map(SnapshotRow._make, cur.fetchall()))

    def snapshot_bounds(self, queue: str) -> SnapshotBounds:
        row = self._conn().execute(SNAPSHOT_BOUNDS, (queue, 1 if is_dlq(queue) else 0)).fetchone()
        return SnapshotBounds._make(row)

    # -- schedules ---------------------------------------------------------------------------

    def schedule_put(self, row: ScheduleRow) -> None:
        self._conn().execute(SCHEDULE_PUT, row)

    def schedule_get(self, name: str) -> ScheduleRow | None:
        row = self._conn().execute(SCHEDULE_GET, (name,)).fetchone()
        return _schedule_row(row) if row else None

    def schedule_list(self) -> list[ScheduleRow]:
        return [_schedule_row(r) for r in self._conn().execute(SCHEDULE_LIST)]

    def schedule_delete(self, name: str) -> bool:
        return self._conn().execute(SCHEDULE_DELETE, (name,)).rowcount > 0

    def schedule_set_paused(self, name: str, paused: bool, next_run_at: int | None, now: int) -> bool:
        params = {"paused": paused, "next": next_run_at, "now": now, "name": name}
        return self._conn().execute(SCHEDULE_SET_PAUSED, params).rowcount == 1

    def schedules_due(self, now: int, limit: int) -> list[ScheduleRow]:
        return [_schedule_row(r) for r in self._conn().execute(SCHEDULES_DUE, (now, limit))]

    def schedule_advance(self, name: str, expected_next: int, next_run_at: int, last_run_at: int | None,
                         now: int) -> bool:
        return self._conn().execute(SCHEDULE_ADVANCE, {"next": next_run_at, "last": last_run_at, "now": now,
                                                       "name": name, "expected": expected_next}).rowcount == 1

    # -- queues ------------------------------------------------------------------------------

    def queue_get(self, name: str) -> QueueRow | None:
        row = self._conn().execute(QUEUE_GET, (name,)).fetchone()
        return _queue_row(row) if row else None

    def queue_get_many(self, names: Sequence[str]) -> dict[str, QueueRow]:
        rows = self._conn().execute(QUEUE_GET_MANY, (json.dumps(list(names)),)).fetchall() if names else []
        return {row[0]: _queue_row(row) for row in rows}

    def queue_list(self) -> list[QueueRow]:
        return [_queue_row(r) for r in self._conn().execute(QUEUE_LIST)]

    def queue_create(self, name: str, now: int, limit: int) -> bool:
        conn = self._conn()
        if conn.execute(QUEUE_CREATE, {"name": name, "now": now, "limit": limit}).rowcount:
            return True
        return conn.execute(QUEUE_EXISTS, (name,)).fetchone() is not None

    def queue_count(self) -> int:
        return int(self._conn().execute(QUEUE_COUNT).fetchone()[0])

    def queue_put(self, name: str, policy: dict[str, Any], now: int) -> None:
        with self._transaction() as conn:
            conn.execute(QUEUE_PUT, {**dict.fromkeys(POLICY_COLUMNS), "paused": False, **policy,
                                     "name": name, "now": now})
            conn.execute(GROUPS_AT_ONCE, {"queue": name, "now": now})  # new group limits: every group looks again

    def queue_delete(self, name: str, now: int) -> bool:
        with self._transaction() as conn:
            conn.execute(RAISE_COUNTER_FLOOR, {"name": name, "now": now})
            found = conn.execute(QUEUE_DELETE, {"name": name}).rowcount
            n = conn.execute(DELETE_QUEUE_MESSAGES, (name,)).rowcount
            conn.execute(DELETE_QUEUE_DEDUP, (name,))
            conn.execute(DELETE_QUEUE_SINKS, (name,))
            conn.execute(DELETE_QUEUE_GROUPS, (name,))
        return bool(found or n)

    def queue_set_sqs_attributes(self, name: str, attributes: str | None) -> None:
        self._conn().execute(QUEUE_SET_SQS_ATTRIBUTES, (attributes, name))

    def queue_set_sqs_tags(self, name: str, tags: str | None) -> None:
        self._conn().execute(QUEUE_SET_SQS_TAGS, (tags, name))

    def queue_drop_placeholder(self, name: str, last_sequence: int, updated_at: int) -> bool:
        return self._conn().execute(QUEUE_DROP_PLACEHOLDER, (name, last_sequence, updated_at, name)).rowcount > 0

    def purge(self, queue: str, now: int | None = None) -> int:
        if now is None:
            return self._conn().execute(PURGE, (queue,)).rowcount
        return self._conn().execute(PURGE_UNHELD, (queue, now)).rowcount

    # -- API-key throttle --------------------------------------------------------------------

    def auth_failed(self, address: str, now: int, window_ms: int, max_failures: int, block_ms: int) -> int:
        return self._count_failure(AUTH_FORGET, address, now, window_ms, max_failures, block_ms)

    def _count_failure(self, forget: str, key: str, now: int, window_ms: int, max_failures: int,
                       block_ms: int) -> int:
        """One more failure for ``key`` (until when it is blocked), then prune stale rows with
        ``forget`` (API keys and logins prune only their own kind of rows)."""
        conn = self._conn()
        params = {"address": key, "now": now, "window": window_ms, "max": max_failures, "block": block_ms}
        rows = conn.execute(AUTH_FAILED, params).fetchall()
        conn.execute(forget, (now - 2 * window_ms, now))
        return int(rows[0][0])

    def auth_blocked_until(self, address: str) -> int:
        rows = self._conn().execute(AUTH_BLOCKED_UNTIL, (address,)).fetchall()
        return int(rows[0][0]) if rows else 0

    # -- login throttle ----------------------------------------------------------------------

    def login_failed(self, key: str, now: int, window_ms: int, max_failures: int, block_ms: int) -> int:
        return abs(self._count_failure(LOGIN_FORGET, key, now, window_ms, max_failures, block_ms))

    def login_attempt(self, key: str, now: int, window_ms: int, max_failures: int) -> tuple[int, int]:
        conn = self._conn()
        params = {"address": key, "now": now, "window": window_ms, "max": max_failures}
        rows = conn.execute(LOGIN_ATTEMPT, params).fetchall()
        if rows:
            return int(rows[0][0]), 0
        return 0, self._login_refused_until(conn.execute(LOGIN_REFUSED, params).fetchall(), now, window_ms, max_failures)

    def login_checked(self, key: str, reserved_window: int, now: int, failed: bool, window_ms: int,
                      max_failures: int, block_ms: int) -> None:
        conn = self._conn()
        if not failed:
            conn.execute(LOGIN_RELEASE, {"address": key, "reserved": reserved_window})
            return
        conn.execute(LOGIN_FAILED_CHECK, {"address": key, "reserved": reserved_window, "now": now,
                                          "max": max_failures, "block": block_ms})
        conn.execute(LOGIN_FORGET, (now - 2 * window_ms, now))

    # -- leases ------------------------------------------------------------------------------

    def lease_acquire(self, name: str, holder: str, now: int, ttl_ms: int, replacing: str = "") -> bool:
        params = {"name": name, "holder": holder, "expires_at": now + ttl_ms, "now": now, "replacing": replacing}
        return bool(self._conn().execute(LEASE_ACQUIRE, params).fetchall())

    def lease_holder(self, name: str) -> LeaseHolder | None:
        row = self._conn().execute(LEASE_HOLDER, (name,)).fetchone()
        return LeaseHolder(row[0], int(row[1])) if row else None

    def lease_release(self, name: str, holder: str) -> bool:
        return self._conn().execute(LEASE_RELEASE, (name, holder)).rowcount > 0
