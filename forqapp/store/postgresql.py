"""Every SQL statement of the queue, for PostgreSQL: :class:`PostgreSQLStore`, the same operations,
with the same meaning, as :class:`~forqapp.store.sqlite.SQLiteStore`. Nothing else in forqapp writes
SQL for PostgreSQL. The contract, and what each operation means: :mod:`forqapp.store.base`.

Each operation runs on the ``psycopg.Connection`` under Django's wrapper (in autocommit, unless the
caller is inside ``transaction.atomic()``). Every write is one statement, so it is atomic on its own.

Concurrency: claims pick their row with ``FOR UPDATE SKIP LOCKED``, so any number of consumers, in
any number of processes and hosts, take different messages from the same queue head without ever
waiting on one another; the jobs skip locked rows the same way.

Receipts are as on SQLite: ``GREATEST(now, updated_at + 1)``, and every write keeps ``updated_at``
from going back.

Wake-ups: every statement that makes a message ready runs ``pg_notify('forq', queue)`` in the same
transaction, so a send inside the caller's ``atomic()`` notifies on commit only (and never on
rollback). The notifier's connection ``LISTEN``s; :meth:`PostgreSQLStore.data_version` counts what
it received.

Statements are complete module constants (status codes and failure reasons formatted in once, at
import, from :mod:`forqapp.vocab`), sent with server-side parameter binding (``psycopg.Cursor``),
whatever cursor class Django configured, so they can be prepared when the connection's
``prepare_threshold`` allows it. The claim is the exception: it runs inside ``forq_claim``, a PL/pgSQL
function that holds it (migration 0015; see CLAIM_FUNCTION), so that it is planned once per connection,
and a queue's groups in ``forq_claim_group`` (migration 0018), both in one statement
(CALL_CLAIM_THEN_GROUPS).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from typing import Any, ClassVar, Literal

import psycopg
from django.db import transaction

from ..utils import host_us
from ..vocab import DLQ_SUFFIX, SNAPSHOT_COLUMNS, FailureReason, MoveStatus, Status, base_of, is_dlq
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
EXPIRED = FailureReason.MESSAGE_EXPIRED.value
MAX_ATTEMPTS = FailureReason.MAX_ATTEMPTS_REACHED.value
FATAL = FailureReason.FATAL_ERROR.value
CHANNEL = "forq"  # the LISTEN/NOTIFY channel; the payload is the queue name
# (the column "group" is the message's message_group, NULL for none)
SNAPSHOT_SELECT_LIST = ", ".join(SNAPSHOT_COLUMNS).replace(", group", ", NULLIF(message_group, '')")

# --- produce ----------------------------------------------------------------------------------

COLUMNS = """id, queue, is_dlq, content, status, attempts, process_after, processing_started_at,
             failure_reason, received_at, updated_at, expires_after, priority, attributes, dedup_id,
             sequence"""

# Sequence numbers come from one database sequence (strictly increasing for every queue, never
# reused, and no row lock shared by a queue's producers). The queue's row is created on its first
# produce (a no-op afterwards: an index probe, no lock held).
SEQUENCE = "nextval('forq_message_sequence')"

ENSURE_QUEUE = """
    INSERT INTO forq_queues (name, paused, last_sequence, created_at, updated_at)
    VALUES (%(base)s, FALSE, 0, %(now)s, %(now)s) ON CONFLICT (name) DO NOTHING"""

INSERT = f"""
WITH q AS ({ENSURE_QUEUE}
), ins AS (
    INSERT INTO messages ({COLUMNS})
    SELECT i, %(queue)s, %(is_dlq)s, c, {READY}, 0, p, NULL, NULL, r, r, e, pr, a, d, {SEQUENCE}
    FROM unnest(%(ids)s::text[], %(contents)s::text[], %(process_after)s::bigint[], %(received_at)s::bigint[],
                %(expires_after)s::bigint[], %(priority)s::int[], %(attributes)s::text[], %(dedup)s::text[])
         WITH ORDINALITY AS t(i, c, p, r, e, pr, a, d, n)
    ORDER BY n
    RETURNING id, sequence
), woken AS (SELECT pg_notify('{CHANNEL}', %(queue)s))
SELECT ins.id, ins.sequence FROM ins, woken"""

# Rows of which some carry a group (``message_group``; '' for none): INSERT with one more array.
INSERT_GROUPED = INSERT.replace(f"({COLUMNS})", f"({COLUMNS}, message_group)").replace(
    f"d, {SEQUENCE}", f"d, {SEQUENCE}, g").replace(
    "%(dedup)s::text[])", "%(dedup)s::text[], %(groups)s::text[])").replace(
    "AS t(i, c, p, r, e, pr, a, d, n)", "AS t(i, c, p, r, e, pr, a, d, g, n)")
assert INSERT_GROUPED.count("message_group") == 1 and INSERT_GROUPED.count("g, n)") == 1  # noqa: S101

INSERT_ONE = f"""
WITH q AS ({ENSURE_QUEUE}
), ins AS (
    INSERT INTO messages ({COLUMNS})
    VALUES (%(id)s, %(queue)s, %(is_dlq)s, %(content)s, {READY}, 0, %(process_after)s, NULL, NULL,
            %(received_at)s, %(received_at)s, %(expires_after)s, %(priority)s, %(attributes)s, %(dedup)s,
            {SEQUENCE})
    RETURNING sequence
)
SELECT ins.sequence, pg_notify('{CHANNEL}', %(queue)s) FROM ins"""

# A deduplication id: recorded for this message unless a live one exists (whose message id comes
# back from DEDUP_ORIGINAL). An expired entry is taken over. A concurrent send of the same id waits
# for the first one's transaction, then sees its record.
DEDUP_RECORD = """
INSERT INTO forq_dedup (queue, dedup_id, message_id, expires_at) VALUES (%(queue)s, %(dedup_id)s, %(id)s, %(expires)s)
ON CONFLICT (queue, dedup_id) DO UPDATE SET message_id = excluded.message_id, expires_at = excluded.expires_at
WHERE forq_dedup.expires_at <= %(now)s
RETURNING message_id"""

DEDUP_ORIGINAL = "SELECT message_id FROM forq_dedup WHERE queue = %s AND dedup_id = %s"

# Locks the queue's row until the produce commits: producers of a queue with a max_length count
# one after the other, so the limit holds exactly.
LOCK_QUEUE = "SELECT 1 FROM forq_queues WHERE name = %s FOR UPDATE"

QUEUE_LENGTH = """
SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE queue = %s AND NOT is_dlq LIMIT %s) AS m"""

# --- consume ----------------------------------------------------------------------------------
#
# A claim takes due rows: ready ones whose time has come, and deliveries whose lease has ended (a
# processing row's ``process_after`` is its lease end), by priority, then sequence. Rows are picked
# and locked by the CTE (FOR UPDATE SKIP LOCKED: a row another consumer is taking right now is
# passed over, not waited for), then updated, in one statement. A row whose attempts are used up
# (%(max)s > 0) is not delivered: the same statement moves it to its DLQ (SQS's redrive).

USED_UP = "(%(max)s > 0 AND m.attempts >= %(max)s AND NOT m.is_dlq)"  # a dead letter is never redriven again

# A message's dead-letter queue: its queue's ``dead_letter_queue``, else ``<queue>-dlq``; and whether
# that is a DLQ (``is_dlq``: a name ending in ``-dlq``, as everywhere) or a queue like any other.
# (Read only for a row whose attempts are used up: CASE evaluates its branch alone.)
# (``messages.queue`` is ``COLLATE "C"``: compared in the default collation, so the lookup uses
# forq_queues' primary key; equality is the same in both.)
_OWN_DLQ = """(SELECT dq.dead_letter_queue FROM forq_queues AS dq WHERE dq.name = {row}.queue COLLATE "default")"""
DLQ_TARGET = f"COALESCE({_OWN_DLQ}, {{row}}.queue || '{DLQ_SUFFIX}')"
DLQ_TARGET_FLAG = f"COALESCE(right({_OWN_DLQ}, {len(DLQ_SUFFIX)}) = '{DLQ_SUFFIX}', TRUE)"

CLAIM_SET = f"""
SET queue = CASE WHEN {USED_UP} THEN {DLQ_TARGET.format(row="m")} ELSE m.queue END,
    is_dlq = CASE WHEN {USED_UP} THEN {DLQ_TARGET_FLAG.format(row="m")} ELSE m.is_dlq END,
    dead_letter_source = CASE WHEN {USED_UP} THEN m.queue ELSE m.dead_letter_source END,
    status = CASE WHEN {USED_UP} THEN {READY} ELSE {PROCESSING} END,
    attempts = CASE WHEN {USED_UP} THEN 0 ELSE m.attempts + 1 END,
    failure_reason = CASE WHEN {USED_UP} THEN '{MAX_ATTEMPTS}' ELSE m.failure_reason END,
    expires_after = CASE WHEN {USED_UP} THEN %(now)s + %(dlq_ttl)s ELSE m.expires_after END,
    processing_started_at = CASE WHEN {USED_UP} THEN NULL ELSE GREATEST(%(now)s, m.updated_at + 1) END,
    process_after = CASE WHEN {USED_UP} THEN %(now)s ELSE %(now)s + %(visibility)s END,
    first_received_at = CASE WHEN {USED_UP} THEN m.first_received_at
                             ELSE COALESCE(m.first_received_at, %(now)s) END,
    updated_at = GREATEST(%(now)s, m.updated_at + 1)"""

# Three indexes answer it, so that no part passes over another's rows: ``idx_queue_claim`` holds the
# ready rows that were due when written (partial: ``process_after <= received_at``, migration 0013) in
# claim order; ``idx_queue_timed`` the ready rows written to come due later (sent with a delay, backed
# off, deferred, released, requeued), by the time they come due; and ``idx_leases`` (queue,
# process_after, …, status: the leased rows alone, migrations 0014 and 0016) finds the ended leases
# by their end. Each part takes and locks its first rows in claim order, and the pick keeps the first
# of them all: a claim walks past neither the deliveries in flight nor the messages not yet due. The
# rows that came due by time (usually few) are sorted, not walked to: a window of ENDED_AMONG of each
# kind (below), so that thousands due at once cost a claim no more than that. (A row of one part
# locked and not kept is free again when the claim's transaction ends; another claim meanwhile passes
# over it.)
# (Messages without a group alone: ``message_group = ''``, the indexes' second column. A group's
# messages are claimed through its row in ``forq_groups``: GROUP_* below.)
NO_GROUP = "message_group = ''"
READY_DUE = (f"queue = %(queue)s AND {NO_GROUP} AND status = {READY} AND process_after <= received_at"
             " AND process_after <= %(now)s")
TIMED_DUE = (f"queue = %(queue)s AND {NO_GROUP} AND status = {READY} AND process_after > received_at"
             " AND process_after <= %(now)s")
LEASE_ENDED = f"queue = %(queue)s AND {NO_GROUP} AND status = {PROCESSING} AND process_after <= %(now)s"
# The rows that came due by time are chosen among a window of each index, read in its order (or in
# reverse): FIFO (and random) among the first to come due, the ones due at the same time (a requeue's,
# a batch delayed alike) in claim order; LIFO among the last to come due, newest first.
FIRST_WINDOWS = ((TIMED_DUE, "process_after, priority DESC, sequence"),
                 (LEASE_ENDED, "process_after, priority, sequence"))
LAST_WINDOWS = ((TIMED_DUE, "process_after DESC, priority, sequence DESC"),
                (LEASE_ENDED, "process_after DESC, priority DESC, sequence DESC"))
# After a redrive, a claim goes on for what it is still short of, passing over what it has just
# delivered (with a 0 s lease, those are due again at once).
EXCEPT_DELIVERED = " AND id <> ALL(%(delivered)s::text[])"
BY_PRIORITY = "priority DESC, sequence"
# The due order (``ordering`` "due": the Django Tasks backend's queues): by priority, then by the time
# each row came due (``process_after``: a past ``run_after`` counts as its time), then sequence. The
# rows sent with a due time in the past (``process_after < received_at``) are also in an index of their
# own, ``idx_queue_past`` (migration 0017), in that order; the other rows due when written come due as
# they are written, so ``idx_queue_claim``'s order (sequence) is theirs. A plain send writes nothing more.
PAST_DUE = (f"queue = %(queue)s AND {NO_GROUP} AND status = {READY} AND process_after < received_at"
            " AND process_after <= %(now)s")
BY_DUE = "priority DESC, process_after, sequence"
LOCK = " FOR UPDATE SKIP LOCKED"


# A row that came due by time: a ready one written to come due later, or an ended lease.
BY_TIME_DUE = (f"queue = %(queue)s AND {NO_GROUP} AND process_after <= %(now)s"
               f" AND (status = {PROCESSING} OR (status = {READY} AND process_after > received_at))")


def _windows(where: str, windows: tuple) -> str:
    """The rows of each window (``%(ended_among)s`` of the ready rows written to come due later, and
    of the ended leases), each one range of its index read in its order, as (first_id, p, s)."""
    return " UNION ALL ".join(
        f"""(SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE {due}{where} ORDER BY {window_order} LIMIT %(ended_among)s)"""
        for due, window_order in windows)


def _due(columns: str, where: str, order: str, limit: str, lock: str, windows: tuple = FIRST_WINDOWS,
         top: str = "") -> str:
    """The due rows' first ``limit`` of each part in ``order``, as ``due`` (the caller orders it).
    (PostgreSQL locks no row of a UNION: each part is a CTE of its own.) ``top`` (LIFO): the CTE
    ``top`` of the priority to take, kept in the ready part's search and among the rows of the
    windows once taken (so that a window is never read past its ``%(ended_among)s`` rows)."""
    by_order = order.replace("priority", "p").replace("sequence", "s")
    return f"""WITH {top + ", " if top else ""}ready AS (
                        SELECT {columns} FROM messages
                        WHERE {READY_DUE}{where}{" AND priority = (SELECT priority FROM top)" if top else ""}
                        ORDER BY {order} LIMIT {limit}{lock}),
                    by_time AS (SELECT {columns} FROM (
                                    SELECT * FROM ({_windows(where, windows)}) AS window_rows
                                    {"WHERE p = (SELECT priority FROM top)" if top else ""}
                                    ORDER BY {by_order}) AS in_order
                                JOIN messages ON id = first_id
                                WHERE {BY_TIME_DUE}{where}
                                ORDER BY {by_order}
                                LIMIT {limit}{lock.replace("UPDATE", "UPDATE OF messages")})
               SELECT id FROM (SELECT * FROM ready UNION ALL SELECT * FROM by_time) AS due"""


def _picks(where: str = "", lock: str = LOCK) -> dict[str, str]:
    # (A CTE, planned and run once: the parts below read it as a parameter.)
    top = f"""top AS (SELECT GREATEST(
                  (SELECT priority FROM messages WHERE {READY_DUE}{where} ORDER BY {BY_PRIORITY} LIMIT 1),
                  (SELECT MAX(p) FROM ({_windows(where, LAST_WINDOWS)}) AS window_rows)) AS priority)"""
    return {
        "fifo": f"{_due('id, priority, sequence', where, BY_PRIORITY, '%(limit)s', lock)} "
                f"ORDER BY {BY_PRIORITY} LIMIT %(limit)s",
        # LIFO: the newest of the highest priority that has a due message.
        "lifo": f"{_due('id, sequence', where, 'sequence DESC', '%(limit)s', lock, LAST_WINDOWS, top)} "
                "ORDER BY sequence DESC LIMIT %(limit)s",
        # Random: among the next RANDOM_AMONG due messages (in priority order).
        # The candidates are read once, then their rows looked up by id (the primary key: ``IS TRUE``
        # keeps the due condition out of the planner's index choice) and locked; the due condition
        # is checked again on the rows locked, so that a row another claim has just taken, or moved
        # to its DLQ, is seen as it is now and passed over.
        "random": f"""WITH candidates AS MATERIALIZED (
                          {_due('id, priority, sequence', where, BY_PRIORITY, '%(among)s', '')}
                          ORDER BY {BY_PRIORITY} LIMIT %(among)s)
                      SELECT id FROM messages WHERE id = ANY(ARRAY(SELECT id FROM candidates))
                      AND (queue = %(queue)s AND status IN ({READY}, {PROCESSING})
                           AND process_after <= %(now)s) IS TRUE
                      ORDER BY random() LIMIT %(limit)s{lock}""",
    }


def _due_rows(where: str = "", lock: str = LOCK) -> str:
    """The due order's first ``%(limit)s`` rows (id, priority, due_at, sequence), in that order: the
    first of each part in the due order (each part a CTE that locks its rows), and the first of them
    all. A row sent with a past due time is in both idx_queue_claim and idx_queue_past: ``UNION``
    keeps it once."""
    columns = "id, priority, process_after, sequence"
    windows = " UNION ALL ".join(
        f"""(SELECT id AS first_id, priority AS p, process_after AS d, sequence AS s FROM messages
             WHERE {due}{where} ORDER BY {window_order} LIMIT %(ended_among)s)"""
        for due, window_order in FIRST_WINDOWS)
    return f"""WITH ready AS (
                        SELECT {columns} FROM messages WHERE {READY_DUE}{where}
                        ORDER BY {BY_PRIORITY} LIMIT %(limit)s{lock}),
                    past AS (
                        SELECT {columns} FROM messages WHERE {PAST_DUE}{where}
                        ORDER BY {BY_DUE} LIMIT %(limit)s{lock}),
                    by_time AS (SELECT {columns} FROM (
                                    SELECT * FROM ({windows}) AS window_rows ORDER BY p DESC, d, s) AS in_order
                                JOIN messages ON id = first_id
                                WHERE {BY_TIME_DUE}{where}
                                ORDER BY p DESC, d, s
                                LIMIT %(limit)s{lock.replace("UPDATE", "UPDATE OF messages")})
               SELECT id, priority, process_after AS due_at, sequence
               FROM (SELECT * FROM ready UNION SELECT * FROM past UNION SELECT * FROM by_time) AS due
               ORDER BY priority DESC, due_at, sequence LIMIT %(limit)s"""


def _all_picks(where: str = "", lock: str = LOCK) -> dict[str, str]:
    return {**_picks(where, lock), "due": f"SELECT id FROM ({_due_rows(where, lock)}) AS due_rows"}


PICK = _all_picks()


def _claims(picks: dict[str, str]) -> dict[str, str]:
    return {order: f"""
WITH picked AS ({pick})
UPDATE messages AS m {CLAIM_SET}
FROM picked WHERE m.id = picked.id
RETURNING m.id, m.queue, m.content, m.attempts, m.processing_started_at, m.priority, m.attributes,
          m.dedup_id, m.sequence, m.received_at, m.first_received_at, m.process_after, m.state, m.status"""
            for order, pick in picks.items()}


def _claim_due(where: str = "") -> str:
    """The due order's claim: its rows come back in the pick's order (RETURNING shows a row's new
    ``process_after``, its lease end, so the order is the pick's, kept here)."""
    return f"""
WITH picked AS ({_due_rows(where)}),
claimed AS (
UPDATE messages AS m {CLAIM_SET}
FROM picked WHERE m.id = picked.id
RETURNING m.id, m.queue, m.content, m.attempts, m.processing_started_at, m.priority, m.attributes,
          m.dedup_id, m.sequence, m.received_at, m.first_received_at, m.process_after, m.state, m.status,
          picked.priority AS picked_priority, picked.due_at AS picked_due_at, picked.sequence AS picked_sequence)
SELECT id, queue, content, attempts, processing_started_at, priority, attributes, dedup_id, sequence, received_at,
       first_received_at, process_after, state, status
FROM claimed ORDER BY picked_priority DESC, picked_due_at, picked_sequence"""


CLAIM = {**_claims(PICK), "due": _claim_due()}
CLAIM_AGAIN = {**_claims(_picks(EXCEPT_DELIVERED)), "due": _claim_due(EXCEPT_DELIVERED)}

# A receive runs CLAIM through ``forq_claim``, a PL/pgSQL function that holds it (migration 0015),
# so that PostgreSQL plans it once per connection rather than at each call: PL/pgSQL keeps each
# statement's plan for its session, and the function's own ``plan_cache_mode`` makes that the
# generic plan from the first call. Left to itself, PostgreSQL replans the statement at each call
# once the table has statistics (it guesses that a plan for the values at hand pays), and planning
# the pick (three parts, each a CTE) takes longer than running it: 0.55-0.58 ms a claim against
# 0.26-0.31 ms through the function (one process alternating, sync commit off, after ANALYZE). One
# plan is right for every queue since migration 0014: each part reads the one partial index that
# holds its rows (``tests/test_postgres.py`` checks the generic plan). One round trip, as the
# statement alone; the setting is the function's own, the session's is untouched.
#
# The migration holds a frozen copy of CLAIM_FUNCTION (a migration must install the same function
# whatever the code around it becomes): a change to CLAIM needs a migration that installs the new
# text, and ``tests/test_postgres.py`` fails until one does (it compares the installed function with
# this one). The claim again after a redrive (CLAIM_AGAIN, rare) stays a plain statement.
CLAIM_ARGUMENTS = (("order", "text"), ("queue", "text"), ("now", "bigint"), ("limit", "bigint"),
                   ("visibility", "bigint"), ("max", "bigint"), ("dlq_ttl", "bigint"), ("among", "bigint"),
                   ("ended_among", "bigint"))
CLAIM_RESULT = ("id varchar, queue varchar, content text, attempts integer, receipt bigint, priority integer, "
                "attributes text, dedup_id varchar, sequence bigint, received_at bigint, first_received_at bigint, "
                "lease_expires_at bigint, state text, status integer")


PARAMETER = re.compile(r"%\((\w+)\)s")


def _claim_function() -> str:
    # Parameters are p_<name> and the result's columns r_<name>, so that no name in the function
    # shadows a column of the table its statements read.
    arguments = ", ".join(f"p_{name} {kind}" for name, kind in CLAIM_ARGUMENTS)
    result = ", ".join(f"r_{column}" for column in CLAIM_RESULT.split(", "))
    bodies = {order: "\n".join(line.rstrip() for line in PARAMETER.sub(r"p_\1", sql).strip().splitlines()
                               if line.strip())
              for order, sql in CLAIM.items()}
    branches = "\n".join(f"""    IF p_order = '{order}' THEN
        RETURN QUERY {body};
        RETURN;
    END IF;""" for order, body in bodies.items())
    return f"""CREATE OR REPLACE FUNCTION forq_claim({arguments})
RETURNS TABLE ({result})
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $claim$
BEGIN
{branches}
    RAISE EXCEPTION 'forq_claim: no such order: %', p_order;
END
$claim$"""


CLAIM_FUNCTION = _claim_function()
CALL_CLAIM = f"SELECT * FROM forq_claim({', '.join(f'%({name})s' for name, _ in CLAIM_ARGUMENTS)})"

PEEK_COLUMNS = f"""id, queue, content, attempts, NULL::bigint, priority, attributes, dedup_id, sequence,
                   received_at, first_received_at, CASE WHEN status = {PROCESSING} THEN process_after END, state"""
PEEK = {order: f"SELECT {PEEK_COLUMNS} FROM messages WHERE id IN ({pick})"
        for order, pick in _all_picks(lock="").items()}
PEEK_ID = f"SELECT {PEEK_COLUMNS}, failure_reason, last_error, NULLIF(message_group, '') FROM messages WHERE id = %(id)s AND queue = %(queue)s"
PEEK_GROUPED = f"SELECT {PEEK_COLUMNS}, message_group FROM messages WHERE id = %(id)s"

# --- message groups ---------------------------------------------------------------------------
#
# As on SQLite (forqapp.store.sqlite, GROUP_*): a grouped claim takes, in one transaction, the group
# whose turn comes first, locked (``FOR UPDATE SKIP LOCKED``: concurrent claims take other groups),
# then that group's first message it may deliver, then sets the group's next turn. The group's row
# stays locked to the commit, so a group's slots are counted by one claim at a time on every host.
GROUP_HELD = "(status = 1 OR (attempts > 0 AND status = 0)) AND message_group > ''"  # idx_group_held's condition
GROUP_PICK = """
SELECT name, rate_next_at_us FROM forq_groups
WHERE queue = %(queue)s AND eligible_at IS NOT NULL AND eligible_at <= %(now)s AND name <> ALL(%(tried)s::text[])
ORDER BY eligible_at, last_claimed_at, name LIMIT 1 FOR UPDATE SKIP LOCKED"""
GROUP_PEEK_PICK = """
SELECT name, rate_next_at_us FROM forq_groups
WHERE queue = %(queue)s AND eligible_at IS NOT NULL AND eligible_at <= %(now)s
ORDER BY eligible_at, last_claimed_at, name LIMIT %(looks)s"""
GROUP_HELD_DUE = f"""
SELECT id, priority, sequence FROM messages
WHERE queue = %(queue)s AND message_group = %(group)s AND {GROUP_HELD} AND process_after <= %(now)s
ORDER BY priority DESC, sequence LIMIT 1"""
GROUP_HELD_COUNT = f"""
SELECT COUNT(*) FROM messages WHERE queue = %(queue)s AND message_group = %(group)s AND {GROUP_HELD}"""
GROUP_NEXT_HELD = f"""
SELECT MIN(process_after) FROM messages WHERE queue = %(queue)s AND message_group = %(group)s AND {GROUP_HELD}"""
# A group's busy messages (held, not due) and when the first of them ends: see forqapp.store.sqlite's
# _BUSY_COUNT (while they fill the group's slots, its held messages due again wait too).
GROUP_BUSY = f"""
SELECT COUNT(*), MIN(process_after) FROM messages
WHERE queue = %(queue)s AND message_group = %(group)s AND {GROUP_HELD} AND process_after > %(now)s"""
GROUP_FRESH = (f"queue = %(queue)s AND message_group = %(group)s AND message_group > '' AND status = {READY}"
               " AND attempts = 0")
GROUP_FRESH_DUE = f"""
SELECT id, priority, sequence FROM messages
WHERE {GROUP_FRESH} AND process_after <= %(now)s ORDER BY priority DESC, sequence LIMIT 1"""
GROUP_FRESH_NEXT = f"SELECT MIN(process_after) FROM messages WHERE {GROUP_FRESH}"
GROUP_ANY = f"""
SELECT EXISTS (SELECT 1 FROM messages WHERE queue = %(queue)s AND message_group = %(group)s
                                      AND message_group > '' AND status = {READY})
    OR EXISTS (SELECT 1 FROM messages WHERE queue = %(queue)s AND message_group = %(group)s AND {GROUP_HELD})"""
# (A row locked by a settle in flight is passed over: that settle's trigger waits for this group's
# row, which this claim holds.)
GROUP_CLAIM = f"""
WITH picked AS (SELECT id FROM messages WHERE id = %(id)s AND queue = %(queue)s AND message_group = %(group)s
                AND status IN ({READY}, {PROCESSING}) AND process_after <= %(now)s FOR UPDATE SKIP LOCKED)
UPDATE messages AS m {CLAIM_SET}
FROM picked WHERE m.id = picked.id
RETURNING m.id, m.queue, m.content, m.attempts, m.processing_started_at, m.priority, m.attributes,
          m.dedup_id, m.sequence, m.received_at, m.first_received_at, m.process_after, m.state, m.status,
          m.message_group"""
# A batch of one group (group_batch): its next due messages after the one just claimed, up to what
# is left of the claim's limit (forqapp.store.sqlite's GROUP_FOLLOWERS).
GROUP_FOLLOWERS = GROUP_CLAIM.replace(
    "WHERE id = %(id)s AND queue = %(queue)s AND message_group = %(group)s\n"
    f"                AND status IN ({READY}, {PROCESSING}) AND process_after <= %(now)s FOR UPDATE SKIP LOCKED)",
    "WHERE queue = %(queue)s AND message_group = %(group)s AND message_group > ''\n"
    f"                AND status IN ({READY}, {PROCESSING}) AND process_after <= %(now)s AND id <> %(id)s\n"
    "                ORDER BY priority DESC, sequence LIMIT %(left)s FOR UPDATE SKIP LOCKED)")
assert GROUP_FOLLOWERS != GROUP_CLAIM  # noqa: S101
GROUP_SET_TURN = """
UPDATE forq_groups SET eligible_at = %(eligible_at)s, last_claimed_at = GREATEST(last_claimed_at, %(claimed_at)s),
                       rate_next_at_us = %(rate_next)s
WHERE queue = %(queue)s AND name = %(group)s"""
GROUP_DROP = "DELETE FROM forq_groups WHERE queue = %(queue)s AND name = %(group)s"
GROUP_NEXT_TURN = "SELECT MIN(eligible_at) FROM forq_groups WHERE queue = %s AND eligible_at IS NOT NULL"
GROUP_NEXT_TURNS = """
SELECT q.name, t.turn FROM unnest(%s::text[]) AS q(name)
CROSS JOIN LATERAL (SELECT MIN(eligible_at) AS turn FROM forq_groups
                    WHERE queue = q.name AND eligible_at IS NOT NULL) AS t
WHERE t.turn IS NOT NULL"""
# Per queue: the earliest time something comes due by the clock alone (LEAST skips NULLs).
NEXT_TURNS = f"""
SELECT q.name, LEAST(timed.t, leased.t, grouped.t) FROM unnest(%s::text[]) AS q(name)
CROSS JOIN LATERAL (SELECT MIN(process_after) AS t FROM messages
                    WHERE queue = q.name AND {NO_GROUP} AND status = {READY} AND process_after > received_at) AS timed
CROSS JOIN LATERAL (SELECT MIN(process_after) AS t FROM messages
                    WHERE queue = q.name AND {NO_GROUP} AND status = {PROCESSING}) AS leased
CROSS JOIN LATERAL (SELECT MIN(eligible_at) AS t FROM forq_groups
                    WHERE queue = q.name AND eligible_at IS NOT NULL) AS grouped
WHERE COALESCE(timed.t, leased.t, grouped.t) IS NOT NULL"""
GROUP_STATE = f"""
SELECT (SELECT COUNT(*) FROM messages
        WHERE queue = %(queue)s AND message_group = %(group)s AND message_group > '' AND status = {READY}),
       (SELECT COUNT(*) FROM messages
        WHERE queue = %(queue)s AND message_group = %(group)s AND {GROUP_HELD} AND status = {PROCESSING}
        AND process_after > %(now)s),
       (SELECT eligible_at FROM forq_groups WHERE queue = %(queue)s AND name = %(group)s)"""
GROUPS_BUSIEST = f"""
SELECT name, ready, in_flight, eligible_at FROM (
    SELECT name, eligible_at,
           (SELECT COUNT(*) FROM messages
            WHERE queue = g.queue AND message_group = g.name AND message_group > '' AND status = {READY}) AS ready,
           (SELECT COUNT(*) FROM messages
            WHERE queue = g.queue AND message_group = g.name AND {GROUP_HELD} AND status = {PROCESSING}
            AND process_after > %(now)s) AS in_flight
    FROM forq_groups AS g WHERE queue = %(queue)s) AS counted
ORDER BY ready + in_flight DESC, name LIMIT %(limit)s"""
GROUP_COUNT = f"""
SELECT COUNT(*) FROM forq_groups AS g WHERE queue = %(queue)s AND (
    EXISTS (SELECT 1 FROM messages
            WHERE queue = g.queue AND message_group = g.name AND message_group > '' AND status = {READY})
    OR EXISTS (SELECT 1 FROM messages WHERE queue = g.queue AND message_group = g.name AND {GROUP_HELD}))"""
READY_GROUPS_BY_QUEUE = f"""
SELECT queue, COUNT(*) FROM forq_groups AS g WHERE EXISTS (
    SELECT 1 FROM messages
    WHERE queue = g.queue AND message_group = g.name AND message_group > '' AND status = {READY})
GROUP BY queue"""
GROUPS_AT_ONCE = """
UPDATE forq_groups SET eligible_at = LEAST(COALESCE(eligible_at, %(now)s), %(now)s) WHERE queue = %(queue)s"""
DELETE_QUEUE_GROUPS = "DELETE FROM forq_groups WHERE queue = %s"
#: As on SQLite: the groups a grouped claim looks at besides those it claims from, at most.
MAX_GROUP_LOOKS = 1_000


def _in_function(sql: str, **names: str) -> str:
    """A statement as the group claim function runs it: ``%(x)s`` becomes ``names[x]``, else ``p_x``."""
    return PARAMETER.sub(lambda m: names.get(m.group(1), "p_" + m.group(1)), sql).strip()


# The grouped claim in one round trip: ``forq_claim_group`` runs the statements above in a PL/pgSQL
# loop (as ``_claim_groups`` runs them from Python, which it replaces where migration 0018 installed
# it). A row with a NULL id says the group limits held a claim back. Frozen in migration 0018.
_G = {"group": "v_group", "tried": "v_tried", "id": "v_best.id", "left": "(p_limit - v_done)"}
_ROW_OUT = f"""
                v_got := true;
                IF v_row.status = {PROCESSING} THEN
                    v_done := v_done + 1;
                    v_claimed_at := p_now;
                    IF p_rate_us IS NOT NULL THEN
                        v_rate_next := GREATEST(v_rate_next, p_now * 1000) + p_rate_us;
                    END IF;
                END IF;
                r_id := v_row.id; r_queue := v_row.queue; r_content := v_row.content; r_attempts := v_row.attempts;
                r_receipt := v_row.processing_started_at; r_priority := v_row.priority;
                r_attributes := v_row.attributes; r_dedup_id := v_row.dedup_id; r_sequence := v_row.sequence;
                r_received_at := v_row.received_at; r_first_received_at := v_row.first_received_at;
                r_lease_expires_at := v_row.process_after; r_state := v_row.state; r_status := v_row.status;
                r_group := v_row.message_group;
                RETURN NEXT;"""
# Since migration 0027 (p_batch, a new overload; 0018's and 0023's 9-argument function, kept beside
# it for the processes not yet upgraded, is gone since 0028): a batch of one group, and the held
# messages due again waiting while the group's busy ones fill its slots (the store's docstring of
# claim: group_batch).
GROUP_CLAIM_FUNCTION = f"""CREATE OR REPLACE FUNCTION forq_claim_group(p_queue text, p_now bigint, p_limit bigint, p_visibility bigint, p_max bigint, p_dlq_ttl bigint, p_concurrency bigint, p_rate_us bigint, p_looks bigint, p_batch boolean)
RETURNS TABLE (r_id varchar, r_queue varchar, r_content text, r_attempts integer, r_receipt bigint, r_priority integer, r_attributes text, r_dedup_id varchar, r_sequence bigint, r_received_at bigint, r_first_received_at bigint, r_lease_expires_at bigint, r_state text, r_status integer, r_group varchar)
LANGUAGE plpgsql
AS $claim_group$
DECLARE
    v_tried text[] := '{{}}';
    v_group text;
    v_rate_next bigint;
    v_held bigint;
    v_best record;
    v_fresh record;
    v_row record;
    v_done bigint := 0;
    v_looks bigint := 0;
    v_claimed_at bigint;
    v_next bigint;
    v_fresh_next bigint;
    v_held_back boolean := false;
    v_got boolean;
    v_busy bigint;
    v_busy_next bigint;
    v_blocked boolean;
BEGIN
    LOOP
        EXIT WHEN v_done >= p_limit OR v_looks >= p_limit + p_looks;
        v_looks := v_looks + 1;
        {_in_function(GROUP_PICK, **_G).replace("SELECT name, rate_next_at_us FROM", "SELECT name, rate_next_at_us INTO v_group, v_rate_next FROM")};
        EXIT WHEN NOT FOUND;
        IF p_rate_us IS NOT NULL AND v_rate_next > p_now * 1000 THEN
            UPDATE forq_groups SET eligible_at = (v_rate_next + 999) / 1000 WHERE queue = p_queue AND name = v_group;
            v_held_back := true;
            CONTINUE;
        END IF;
        {_in_function(GROUP_HELD_DUE, **_G).replace("SELECT id, priority, sequence FROM", "SELECT id, priority, sequence INTO v_best FROM")};
        v_held := 0;
        v_blocked := false;
        IF p_concurrency IS NOT NULL THEN
            {_in_function(GROUP_HELD_COUNT, **_G).replace("SELECT COUNT(*) FROM", "SELECT COUNT(*) INTO v_held FROM")};
            IF v_best.id IS NOT NULL AND v_held > p_concurrency THEN
                {_in_function(GROUP_BUSY, **_G).replace("SELECT COUNT(*), MIN(process_after) FROM", "SELECT COUNT(*), MIN(process_after) INTO v_busy, v_busy_next FROM")};
                IF v_busy >= p_concurrency THEN
                    v_blocked := true;
                    v_held_back := true;
                END IF;
            END IF;
        END IF;
        IF p_concurrency IS NULL OR v_held < p_concurrency THEN
            {_in_function(GROUP_FRESH_DUE, **_G).replace("SELECT id, priority, sequence", "SELECT id, priority, sequence INTO v_fresh")};
            IF FOUND AND (v_best.id IS NULL OR v_fresh.priority > v_best.priority
                          OR (v_fresh.priority = v_best.priority AND v_fresh.sequence < v_best.sequence)) THEN
                v_best := v_fresh;
            END IF;
        ELSIF v_best.id IS NULL THEN
            v_held_back := true;
        END IF;
        v_claimed_at := 0;
        IF v_best.id IS NOT NULL AND NOT v_blocked THEN
            v_got := false;
            FOR v_row IN {_in_function(GROUP_CLAIM, **_G)} LOOP{_ROW_OUT}
            END LOOP;
            IF NOT v_got THEN  -- locked by a settle in flight: this group waits for the next claim
                v_tried := v_tried || v_group;
                CONTINUE;
            END IF;
            IF p_batch AND p_rate_us IS NULL AND v_claimed_at > 0 AND v_done < p_limit THEN
                FOR v_row IN {_in_function(GROUP_FOLLOWERS, **_G)} LOOP{_ROW_OUT}
                END LOOP;
            END IF;
        END IF;
        {_in_function(GROUP_NEXT_HELD, **_G).replace("SELECT MIN(process_after) FROM", "SELECT MIN(process_after) INTO v_next FROM")};
        IF p_concurrency IS NOT NULL THEN
            {_in_function(GROUP_HELD_COUNT, **_G).replace("SELECT COUNT(*) FROM", "SELECT COUNT(*) INTO v_held FROM")};
            IF v_held > p_concurrency THEN
                {_in_function(GROUP_BUSY, **_G).replace("SELECT COUNT(*), MIN(process_after) FROM", "SELECT COUNT(*), MIN(process_after) INTO v_busy, v_busy_next FROM")};
                IF v_busy >= p_concurrency THEN
                    v_next := v_busy_next;
                END IF;
            END IF;
        END IF;
        IF p_concurrency IS NULL OR v_held < p_concurrency THEN
            {_in_function(GROUP_FRESH_DUE, **_G).replace("SELECT id, priority, sequence", "SELECT id, priority, sequence INTO v_fresh")};
            IF FOUND THEN
                v_fresh_next := p_now;
            ELSE
                {_in_function(GROUP_FRESH_NEXT, **_G).replace("SELECT MIN(process_after) FROM", "SELECT MIN(process_after) INTO v_fresh_next FROM")};
            END IF;
            v_next := LEAST(v_next, v_fresh_next);
        END IF;
        IF v_next IS NULL THEN
            IF NOT ({_in_function(GROUP_ANY, **_G).removeprefix("SELECT ")}) THEN
                {_in_function(GROUP_DROP, **_G)};
                CONTINUE;
            END IF;
        ELSE
            v_next := GREATEST(v_next, p_now, (v_rate_next + 999) / 1000);
        END IF;
        UPDATE forq_groups SET eligible_at = v_next, last_claimed_at = GREATEST(last_claimed_at, v_claimed_at),
                               rate_next_at_us = v_rate_next
        WHERE queue = p_queue AND name = v_group;
    END LOOP;
    IF v_done = 0 AND v_held_back THEN
        r_id := NULL;
        RETURN NEXT;
    END IF;
END
$claim_group$"""
GROUP_CLAIM_FUNCTION = "\n".join(line.rstrip() for line in GROUP_CLAIM_FUNCTION.splitlines())
# (Its ``p_batch`` overload: migration 0027, which changes it as forqapp.store.sqlite's _claim_groups.)
CALL_CLAIM_GROUP = """SELECT * FROM forq_claim_group(%(queue)s::text, %(now)s::bigint, %(limit)s::bigint,
    %(visibility)s::bigint, %(max)s::bigint, %(dlq_ttl)s::bigint, %(concurrency)s::bigint, %(rate_us)s::bigint,
    %(looks)s::bigint, %(batch)s::boolean)"""
# A claim in one round trip: ``forq_claim`` (the messages without a group), then, in the same
# statement, ``forq_claim_group`` for what is left of the limit, where the claim would go on to the
# groups after its first round: every message it took delivered (none redriven to a dead-letter
# queue: then the redrive's rounds come first, as before) and fewer than the limit, in an order other
# than LIFO (which goes on to the next priority first). The scalar subqueries over ``plain`` make
# ``forq_claim`` run to its end before ``forq_claim_group`` starts, and the group function's
# statements see its writes (a PL/pgSQL function takes a snapshot per statement). Where the groups'
# part does not run (its condition is a one-time filter), the claim goes on as ``_claim`` did: the
# redrive's rounds, then ``forq_claim_group`` alone. The last column says which part a row is of.
GROUPS_AFTER_PLAIN = f"""%(order)s::text <> 'lifo' AND (SELECT COUNT(*) FROM plain) < %(limit)s::bigint
  AND NOT EXISTS (SELECT 1 FROM plain WHERE r_status <> {PROCESSING})"""
CALL_CLAIM_THEN_GROUPS = f"""WITH plain AS MATERIALIZED ({CALL_CLAIM})
SELECT *, NULL::varchar, TRUE FROM plain
UNION ALL
SELECT *, FALSE FROM forq_claim_group(%(queue)s::text, %(now)s::bigint,
    %(limit)s::bigint - (SELECT COUNT(*) FROM plain), %(visibility)s::bigint, %(max)s::bigint, %(dlq_ttl)s::bigint,
    %(concurrency)s::bigint, %(rate_us)s::bigint, %(looks)s::bigint, %(batch)s::boolean)
WHERE {GROUPS_AFTER_PLAIN}"""

# Flow control (queues with limits): the queue's row is locked for the claim's transaction, so the
# claims of a limited queue count and take one after the other, on every host.
LOCK_RATE = "SELECT rate_next_at_us FROM forq_queues WHERE name = %s FOR UPDATE"
RATE_NEXT = "SELECT rate_next_at_us FROM forq_queues WHERE name = %s"

IN_FLIGHT = f"""
SELECT COUNT(*) FROM messages WHERE queue = %s AND status = {PROCESSING} AND process_after > %s"""

RATE_TAKE = """
UPDATE forq_queues SET rate_next_at_us = GREATEST(rate_next_at_us, %(now_us)s) + %(n)s * %(interval)s
WHERE name = %(queue)s"""

# Back to ready later, same id and attempts, its progress saved (NULL state keeps the saved one),
# behind the messages of its priority already there (a new sequence number: others get a turn).
DEFER = f"""
WITH d AS (
    UPDATE messages
    SET status = {READY}, process_after = %(now)s + %(delay)s, processing_started_at = NULL,
        updated_at = GREATEST(%(now)s::bigint, updated_at), state = COALESCE(%(state)s::text, state),
        sequence = {SEQUENCE}
    WHERE id = %(id)s AND queue = %(queue)s AND status = {PROCESSING} AND processing_started_at = %(receipt)s
    RETURNING queue
)
SELECT pg_notify('{CHANNEL}', queue) FROM d"""

ACK = f"""
DELETE FROM messages WHERE id = %s AND queue = %s AND status = {PROCESSING} AND processing_started_at = %s"""

ACK_MANY = f"""
DELETE FROM messages AS m
USING unnest(%(ids)s::text[], %(receipts)s::bigint[]) AS d(id, receipt)
WHERE m.id = d.id AND m.queue = %(queue)s AND m.status = {PROCESSING}
  AND m.processing_started_at = d.receipt"""

# The backoff table is bound as an array: element ``attempts`` (1-based), or the last one past its end.
# A NULL %(error)s keeps the last_error recorded by an earlier attempt.
NACK = f"""
UPDATE messages
SET status = CASE WHEN %(max)s > 0 AND attempts >= %(max)s THEN {FAILED} ELSE {READY} END,
    process_after = %(now)s + (COALESCE((%(backoff)s::bigint[])[attempts], %(backoff_last)s::bigint)
                               * (1.0 - %(jitter)s::float8 * random()))::bigint,
    processing_started_at = NULL,
    updated_at = GREATEST(%(now)s, updated_at),
    last_error = COALESCE(%(error)s::text, last_error)
WHERE id = %(id)s AND queue = %(queue)s AND status = {PROCESSING} AND processing_started_at = %(receipt)s"""

# The reason is set now, so the failed job can tell a consumer's fatal error from running out of
# attempts.
FAIL = f"""
UPDATE messages
SET status = {FAILED}, processing_started_at = NULL, updated_at = GREATEST(%(now)s::bigint, updated_at),
    failure_reason = CASE WHEN %(used_up)s THEN NULL ELSE '{FATAL}' END,
    last_error = COALESCE(%(error)s::text, last_error)
WHERE id = %(id)s AND queue = %(queue)s AND status = {PROCESSING} AND processing_started_at = %(receipt)s"""

RELEASE = f"""
WITH r AS (
    UPDATE messages
    SET status = {READY}, attempts = attempts - 1, processing_started_at = NULL, process_after = %(now)s,
        updated_at = GREATEST(%(now)s::bigint, updated_at)
    WHERE id = %(id)s AND queue = %(queue)s AND status = {PROCESSING} AND processing_started_at = %(receipt)s
    RETURNING queue
)
SELECT pg_notify('{CHANNEL}', queue) FROM r"""

RELEASE_MANY = f"""
WITH r AS (
    UPDATE messages AS m
    SET status = {READY}, attempts = m.attempts - 1, processing_started_at = NULL, process_after = %(now)s,
        updated_at = GREATEST(%(now)s::bigint, m.updated_at)
    FROM unnest(%(ids)s::text[], %(receipts)s::bigint[]) AS d(id, receipt)
    WHERE m.id = d.id AND m.queue = %(queue)s AND m.status = {PROCESSING}
      AND m.processing_started_at = d.receipt
    RETURNING 1
), n AS (SELECT COUNT(*) AS n FROM r)
SELECT n, CASE WHEN n > 0 THEN pg_notify('{CHANNEL}', %(queue)s) END FROM n"""

# A lease ends ``visibility`` ms from now (0: at once, so the next claim takes it; that wakes
# consumers); the receipt stays the same until the message is claimed again.
CHANGE_VISIBILITY = f"""
WITH c AS (
    UPDATE messages AS m SET process_after = %(now)s + %(visibility)s, updated_at = GREATEST(%(now)s, m.updated_at)
    FROM unnest(%(ids)s::text[], %(receipts)s::bigint[]) AS d(id, receipt)
    WHERE m.id = d.id AND m.queue = %(queue)s AND m.status = {PROCESSING} AND m.processing_started_at = d.receipt
    RETURNING m.id
), woken AS (SELECT CASE WHEN %(visibility)s = 0 AND EXISTS (SELECT 1 FROM c)
                         THEN pg_notify('{CHANNEL}', %(queue)s) END)
SELECT c.id FROM c, woken"""

# --- wake-ups and health ----------------------------------------------------------------------

# (Each count in its index's order: a queue name from unnest has no statistics, and a bare LIMIT would
# let the planner hope to find rows early in a scan of the whole table.)
HAS_DUE = f"""
SELECT q.name, LEAST(%(limit)s, ready.n + timed.n + ended.n + grouped.n)
FROM unnest(%(queues)s::text[]) AS q(name)
CROSS JOIN LATERAL (SELECT COUNT(*) AS n FROM (
    SELECT 1 FROM messages WHERE queue = q.name AND {NO_GROUP} AND status = {READY}
                                 AND process_after <= received_at AND process_after <= %(now)s
    ORDER BY {BY_PRIORITY} LIMIT %(limit)s) AS due) AS ready
CROSS JOIN LATERAL (SELECT COUNT(*) AS n FROM (
    SELECT 1 FROM messages WHERE queue = q.name AND {NO_GROUP} AND status = {READY}
                                 AND process_after > received_at AND process_after <= %(now)s
    ORDER BY process_after LIMIT %(limit)s) AS due) AS timed
CROSS JOIN LATERAL (SELECT COUNT(*) AS n FROM (
    SELECT 1 FROM messages WHERE queue = q.name AND {NO_GROUP} AND status = {PROCESSING}
                                 AND process_after <= %(now)s
    ORDER BY process_after LIMIT %(limit)s) AS due) AS ended
CROSS JOIN LATERAL (SELECT COUNT(*) AS n FROM (
    SELECT 1 FROM forq_groups WHERE queue = q.name AND eligible_at IS NOT NULL AND eligible_at <= %(now)s
    ORDER BY eligible_at LIMIT %(limit)s) AS due) AS grouped
WHERE ready.n + timed.n + ended.n + grouped.n > 0"""

LISTEN = f"LISTEN {CHANNEL}"
NOTIFY = f"SELECT pg_notify('{CHANNEL}', %s)"

PING = "SELECT 1 FROM messages LIMIT 1"

# The server's clock now (clock_timestamp(): at the statement's run, not its transaction's start), in
# Unix microseconds: what hosts sharing the database follow (forqapp.services.clock).
CLOCK = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"

# --- admin: dead-letter queues ----------------------------------------------------------------

# A message no consumer holds: not under a lease, or under one ended by now (receivable again).
UNHELD = f"NOT (status = {PROCESSING} AND process_after > %(now)s)"
# A dead letter sent back to the queue it came from gets that queue's retention (%(ttl)s: the DLQ's
# own queue's, or the global one).
BACK_TTL = """COALESCE((SELECT q.retention_ms FROM forq_queues AS q
                        WHERE q.name = COALESCE(messages.dead_letter_source, %(dest)s)), %(ttl)s)"""

REQUEUE_ALL = f"""
WITH moved AS (
    UPDATE messages
    SET queue = COALESCE(dead_letter_source, %(dest)s), is_dlq = FALSE, status = {READY}, attempts = 0,
        process_after = %(now)s, processing_started_at = NULL, failure_reason = NULL,
        updated_at = GREATEST(%(now)s, updated_at), expires_after = %(now)s + {BACK_TTL}, dead_letter_source = NULL
    WHERE queue = %(queue)s AND is_dlq AND {UNHELD}
    RETURNING queue
), woken AS (
    SELECT pg_notify('{CHANNEL}', queue) FROM (SELECT DISTINCT queue FROM moved) AS q
)
SELECT (SELECT COUNT(*) FROM moved), (SELECT COUNT(*) FROM woken)"""

REQUEUE_ONE = f"""
WITH moved AS (
    UPDATE messages
    SET queue = COALESCE(dead_letter_source, %(dest)s), is_dlq = FALSE, status = {READY}, attempts = 0,
        process_after = %(now)s, processing_started_at = NULL, failure_reason = NULL,
        updated_at = GREATEST(%(now)s, updated_at), expires_after = %(now)s + {BACK_TTL}, dead_letter_source = NULL
    WHERE queue = %(queue)s AND is_dlq AND {UNHELD} AND id = %(id)s
    RETURNING queue
), woken AS (
    SELECT pg_notify('{CHANNEL}', queue) FROM (SELECT DISTINCT queue FROM moved) AS q
)
SELECT (SELECT COUNT(*) FROM moved), (SELECT COUNT(*) FROM woken)"""

DELETE_DLQ_ALL = "DELETE FROM messages WHERE queue = %s AND is_dlq"

# --- message move tasks -------------------------------------------------------------------------

MOVE_SELECT = f"SELECT {MOVE_TASK_COLUMNS} FROM forq_move_tasks"
MOVE_GET = MOVE_SELECT + " WHERE handle = %s"
MOVE_LIST = MOVE_SELECT + " WHERE source = %s ORDER BY started_at DESC, handle DESC LIMIT %s"
# The messages a task may move: none a consumer holds (UNHELD); without a destination, only those that know
# where they came from (a ``<name>-dlq`` message without a source goes back to ``<name>``).
MOVABLE = f"""queue = %(source)s AND {UNHELD}
    AND (%(destination)s::text IS NOT NULL OR dead_letter_source IS NOT NULL OR %(source_base)s::text IS NOT NULL)"""
# (The unique partial index uniq_move_tasks_running refuses a second running task of a source.)
MOVE_START = f"""
INSERT INTO forq_move_tasks ({MOVE_TASK_COLUMNS})
SELECT %(handle)s::varchar, %(source)s::varchar, %(destination)s::varchar, %(rate)s::integer,
       '{MoveStatus.RUNNING}', 0, (SELECT COUNT(*) FROM messages WHERE {MOVABLE}), %(now)s::bigint, %(now)s::bigint,
       %(now)s::bigint, NULL
ON CONFLICT DO NOTHING
RETURNING {MOVE_TASK_COLUMNS}"""
MOVE_CANCEL = f"""
UPDATE forq_move_tasks SET status = '{MoveStatus.CANCELLED}', updated_at = %(now)s
WHERE handle = %(handle)s AND status = '{MoveStatus.RUNNING}'
RETURNING {MOVE_TASK_COLUMNS}"""
# The earliest due task, locked to the end of its batch's transaction (another process's runner
# takes another task; a cancel waits for the batch).
MOVE_DUE = MOVE_SELECT + f""" WHERE status = '{MoveStatus.RUNNING}' AND next_at <= %s ORDER BY next_at LIMIT 1
FOR UPDATE SKIP LOCKED"""
MOVE_DEST = "COALESCE(%(destination)s::text, messages.dead_letter_source, %(source_base)s::text)"
# The destination's retention (a DLQ destination's: its queue's dlq_retention; store.move_params).
MOVE_RETENTION = f"""(SELECT CASE WHEN %(into_dlq)s::boolean THEN q.dlq_retention_ms ELSE q.retention_ms END
                      FROM forq_queues AS q WHERE q.name = COALESCE(%(retention_of)s::text, {MOVE_DEST}))"""
MOVE_BATCH = f"""
WITH moved AS (
    UPDATE messages
    SET queue = {MOVE_DEST}, is_dlq = %(into_dlq)s::boolean, status = {READY}, attempts = 0, process_after = %(now)s,
        processing_started_at = NULL, failure_reason = NULL, updated_at = GREATEST(%(now)s, updated_at),
        expires_after = %(now)s + COALESCE({MOVE_RETENTION}, %(ttl)s),
        dead_letter_source = NULL
    WHERE id IN (SELECT id FROM messages WHERE {MOVABLE} ORDER BY priority DESC, sequence LIMIT %(n)s
                 FOR UPDATE SKIP LOCKED)
    RETURNING queue
), woken AS (
    SELECT pg_notify('{CHANNEL}', queue) FROM (SELECT DISTINCT queue FROM moved) AS q
)
SELECT queue, (SELECT COUNT(*) FROM woken) FROM moved"""
MOVE_STRANDED = f"""SELECT 1 FROM messages WHERE queue = %(source)s AND {UNHELD} AND dead_letter_source IS NULL LIMIT 1"""
MOVE_PROGRESS = f"""
UPDATE forq_move_tasks SET moved = moved + %(moved)s, status = %(status)s, failure_reason = %(reason)s,
    next_at = %(next_at)s, updated_at = %(now)s
WHERE handle = %(handle)s
RETURNING {MOVE_TASK_COLUMNS}"""
DEAD_LETTER_SOURCES = "SELECT name FROM forq_queues WHERE dead_letter_queue = %s ORDER BY name"
SOURCES_OF = "SELECT id, dead_letter_source FROM messages WHERE queue = %s AND id = ANY(%s) AND dead_letter_source IS NOT NULL"
MOVES_RUNNING = f"SELECT COUNT(*) FROM forq_move_tasks WHERE status = '{MoveStatus.RUNNING}'"
DELETE_DLQ_ONE = "DELETE FROM messages WHERE id = %s AND queue = %s AND is_dlq"

# --- background jobs (each skips messages in processing, and rows another job holds) ----------

# A move to the DLQ wakes a consumer waiting on the DLQ. How long a dead letter is kept where it
# goes: its queue's own DLQ retention (else the global one); where the queue names another queue
# (``dead_letter_queue``), that queue's retention (a DLQ's: its regular queue's DLQ retention).
_N = len(DLQ_SUFFIX)
DLQ_TTL = f"""COALESCE((SELECT CASE
    WHEN q.dead_letter_queue IS NULL THEN q.dlq_retention_ms
    WHEN right(q.dead_letter_queue, {_N}) = '{DLQ_SUFFIX}' THEN (SELECT b.dlq_retention_ms FROM forq_queues AS b
        WHERE b.name = left(q.dead_letter_queue, -{_N}) COLLATE "default")
    ELSE COALESCE((SELECT t.retention_ms FROM forq_queues AS t WHERE t.name = q.dead_letter_queue COLLATE "default"),
                  %(queue_ttl)s) END
    FROM forq_queues AS q WHERE q.name = messages.queue COLLATE "default"), %(ttl)s)"""
MOVE_EXPIRED_TO_DLQ = f"""
WITH moved AS (
    UPDATE messages
    SET attempts = 0, status = {READY}, queue = {DLQ_TARGET.format(row="messages")},
        is_dlq = {DLQ_TARGET_FLAG.format(row="messages")}, dead_letter_source = queue,
        process_after = %(now)s, processing_started_at = NULL, failure_reason = '{EXPIRED}',
        updated_at = GREATEST(%(now)s, updated_at), expires_after = %(now)s + {DLQ_TTL}
    WHERE id IN (SELECT id FROM messages
                 WHERE status IN ({READY}, {FAILED}) AND NOT is_dlq AND expires_after < %(now)s
                 LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
    RETURNING queue
), woken AS (
    SELECT pg_notify('{CHANNEL}', queue) FROM (SELECT DISTINCT queue FROM moved) AS q
)
SELECT (SELECT COUNT(*) FROM moved), (SELECT COUNT(*) FROM woken)"""

MOVE_FAILED_TO_DLQ = f"""
WITH moved AS (
    UPDATE messages
    SET attempts = 0, status = {READY}, queue = {DLQ_TARGET.format(row="messages")},
        is_dlq = {DLQ_TARGET_FLAG.format(row="messages")}, dead_letter_source = queue,
        process_after = %(now)s, processing_started_at = NULL,
        failure_reason = COALESCE(failure_reason, '{MAX_ATTEMPTS}'),  -- a consumer's fatal_error stays
        updated_at = GREATEST(%(now)s, updated_at), expires_after = %(now)s + {DLQ_TTL}
    WHERE id IN (SELECT id FROM messages
                 WHERE status = {FAILED} AND NOT is_dlq
                 LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
    RETURNING queue
), woken AS (
    SELECT pg_notify('{CHANNEL}', queue) FROM (SELECT DISTINCT queue FROM moved) AS q
)
SELECT (SELECT COUNT(*) FROM moved), (SELECT COUNT(*) FROM woken)"""

# The safety net behind precise leases (a claim takes an expired delivery at once): deliveries whose
# lease ended before %(cutoff)s → ready, or failed when their attempts are used up (the queue's own
# max_attempts, or %(max)s; 0 is unlimited).
MAX_ATTEMPTS_OF_QUEUE = "COALESCE((SELECT q.max_attempts FROM forq_queues AS q WHERE q.name = messages.queue), %(max)s)"

# The leases are read in idx_leases' order (it holds them alone: the ones of every queue, however
# many messages the queues hold), and their rows looked up by primary key: without the order,
# PostgreSQL read the whole table for them.
RECOVER_STALE = f"""
WITH r AS (
    UPDATE messages
    SET status = CASE WHEN {MAX_ATTEMPTS_OF_QUEUE} BETWEEN 1 AND attempts THEN {FAILED} ELSE {READY} END,
        process_after = %(now)s, processing_started_at = NULL, updated_at = GREATEST(%(now)s, updated_at)
    WHERE id = ANY(ARRAY(SELECT id FROM messages
                         WHERE status = {PROCESSING} AND process_after < %(cutoff)s
                         ORDER BY queue, message_group, process_after
                         LIMIT %(batch)s FOR UPDATE SKIP LOCKED))
    RETURNING queue, status
), woken AS (
    SELECT pg_notify('{CHANNEL}', queue) FROM (SELECT DISTINCT queue FROM r WHERE status = {READY}) AS q
)
SELECT (SELECT COUNT(*) FROM r), (SELECT COUNT(*) FROM woken)"""

DELETE_EXPIRED_DLQ = f"""
DELETE FROM messages WHERE id IN (SELECT id FROM messages
    WHERE status IN ({READY}, {FAILED}) AND is_dlq AND expires_after < %(now)s
    LIMIT %(batch)s FOR UPDATE SKIP LOCKED)"""

DELETE_FAILED_DLQ = f"""
DELETE FROM messages WHERE id IN (SELECT id FROM messages
    WHERE status = {FAILED} AND is_dlq LIMIT %(batch)s FOR UPDATE SKIP LOCKED)"""

COUNT_EXPIRED = f"""
SELECT COUNT(*) FROM messages WHERE status IN ({READY}, {FAILED}) AND is_dlq = %s AND expires_after < %s"""

COUNT_FAILED = f"SELECT COUNT(*) FROM messages WHERE status = {FAILED} AND is_dlq = %s"

COUNT_STALE = f"SELECT COUNT(*) FROM messages WHERE status = {PROCESSING} AND process_after < %s"

# The maintenance job's sweep of the groups left without messages, a page of rows at a time: the
# page's rows locked first (a send or a claim writing one of them finishes first), then, in a second
# statement (a fresh snapshot: what they committed is seen), the empty ones deleted. A send whose
# message comes meanwhile waits for the delete, then makes its group's row again (its trigger).
GROUPS_PAGE = """SELECT queue, name FROM forq_groups WHERE (queue, name) > (%(queue)s, %(name)s)
ORDER BY queue, name LIMIT %(batch)s FOR UPDATE"""
DROP_EMPTY_GROUPS = """
DELETE FROM forq_groups WHERE (queue, name) > (%(queue)s, %(name)s) AND (queue, name) <= (%(last_queue)s, %(last_name)s)
  AND NOT EXISTS (SELECT 1 FROM messages WHERE queue = forq_groups.queue AND message_group = forq_groups.name
                  AND message_group > '' AND status = 0)
  AND NOT EXISTS (SELECT 1 FROM messages WHERE queue = forq_groups.queue AND message_group = forq_groups.name
                  AND status = 1)"""

DELETE_EXPIRED_DEDUP = """
DELETE FROM forq_dedup WHERE (queue, dedup_id) IN (
    SELECT queue, dedup_id FROM forq_dedup WHERE expires_at <= %(now)s LIMIT %(batch)s FOR UPDATE SKIP LOCKED)"""

OPTIMIZE = "ANALYZE messages"

QUEUE_DEPTHS = "SELECT queue, is_dlq, COUNT(*) FROM messages GROUP BY queue, is_dlq ORDER BY queue"


def _state_counts(named: bool) -> str:
    """(queue, kind, count) of every queue (or of the queues named in %(queues)s): all its rows,
    then the failed (0), the delayed (1) and the live leases (2), each kind's condition that of
    the partial index it lives in."""
    of = " AND queue = ANY(%(queues)s::text[])" if named else ""
    return f"""
SELECT queue, -1, COUNT(*) FROM messages WHERE TRUE{of} GROUP BY queue
UNION ALL SELECT queue, 0, COUNT(*) FROM messages WHERE status = {FAILED}{of} GROUP BY queue
UNION ALL SELECT queue, 1, COUNT(*) FROM messages
          WHERE status = {READY} AND process_after > received_at AND process_after > %(now)s{of} GROUP BY queue
UNION ALL SELECT queue, 2, COUNT(*) FROM messages
          WHERE status = {PROCESSING} AND process_after > %(now)s{of} GROUP BY queue"""


STATE_COUNTS = {named: _state_counts(named) for named in (False, True)}

IN_FLIGHT_BY_QUEUE = f"""
SELECT queue, COUNT(*) FROM messages WHERE status = {PROCESSING} AND process_after > %s GROUP BY queue"""

# --- bulk: staged writes (exactly-once Spark jobs) and snapshot reads -------------------------
#
# A staged row waits in ``forq_staged`` (keyed by token, message_id) until its job publishes it
# into ``messages`` with one statement, or discards it.

STAGE = """
INSERT INTO forq_staged (token, message_id, queue, content, process_after, priority, attributes, message_group,
                         staged_at)
SELECT %(token)s, i, %(queue)s, c, p, pr, a, COALESCE(g, ''), %(now)s
FROM unnest(%(ids)s::text[], %(contents)s::text[], %(process_after)s::bigint[], %(priority)s::int[],
            %(attributes)s::text[], %(groups)s::text[]) AS t(i, c, p, pr, a, g)"""

PUBLISH = f"""
WITH staged AS (
    DELETE FROM forq_staged WHERE token = %(token)s AND queue = %(queue)s
    RETURNING message_id, content, process_after, priority, attributes, message_group
), q AS ({ENSURE_QUEUE.replace("%(base)s", "%(queue)s")}
), published AS (
    INSERT INTO messages ({COLUMNS}, message_group)
    SELECT message_id, %(queue)s, FALSE, content, {READY}, 0,
           GREATEST(process_after, %(now)s - %(tolerance)s), NULL, NULL, %(now)s, %(now)s,
           GREATEST(process_after, %(now)s) + %(ttl)s, priority, attributes, NULL, {SEQUENCE}, message_group
    FROM staged ORDER BY message_id
    RETURNING 1
), n AS (SELECT COUNT(*) AS n FROM published)
SELECT n, CASE WHEN n > 0 THEN pg_notify('{CHANNEL}', %(queue)s) END FROM n"""

# A streaming query's batch, recorded unless it (or a later one) was: RETURNING gives no row then.
# A concurrent insert of the same (queue, sink) waits for the first transaction, then re-checks.
RECORD_SINK_BATCH = """
INSERT INTO forq_sink_batches (queue, sink, batch_id, committed_at) VALUES (%(queue)s, %(sink)s, %(batch)s, %(now)s)
ON CONFLICT (queue, sink) DO UPDATE SET batch_id = excluded.batch_id, committed_at = excluded.committed_at
WHERE forq_sink_batches.batch_id < excluded.batch_id
RETURNING batch_id"""

DELETE_QUEUE_SINKS = "DELETE FROM forq_sink_batches WHERE queue = %s"

DISCARD = "DELETE FROM forq_staged WHERE token = %s AND queue = %s"

DELETE_ABANDONED_STAGED = """
DELETE FROM forq_staged WHERE (token, message_id) IN (
    SELECT token, message_id FROM forq_staged WHERE staged_at < %(cutoff)s
    LIMIT %(batch)s FOR UPDATE SKIP LOCKED)"""

SNAPSHOT_PAGE = f"""
SELECT {SNAPSHOT_SELECT_LIST} FROM messages
WHERE queue = %s AND is_dlq = %s AND id > %s ORDER BY id LIMIT %s"""

SNAPSHOT_PAGE_UPTO = f"""
SELECT {SNAPSHOT_SELECT_LIST} FROM messages
WHERE queue = %s AND is_dlq = %s AND id > %s AND id <= %s ORDER BY id LIMIT %s"""

SNAPSHOT_BOUNDS = "SELECT COUNT(*), MIN(id), MAX(id) FROM messages WHERE queue = %s AND is_dlq = %s"

# --- queues -----------------------------------------------------------------------------------

# Sequence numbers come from one database sequence, so a queue's last one is the highest among its
# messages (and its DLQ's) now stored, or what migration 0006 recorded.
QUEUE_SELECT = """SELECT name, max_attempts, backoff, visibility_timeout_ms, retention_ms, dlq_retention_ms,
                         max_length, ordering, dedup_window_ms, max_in_flight, rate, group_concurrency,
                         group_rate, dead_letter_queue, paused,
                         GREATEST(last_sequence, COALESCE((SELECT MAX(m.sequence) FROM messages AS m
                                                           WHERE m.queue IN (q.name, q.name || '-dlq')), 0)),
                         created_at, updated_at, rate_next_at_us
                  FROM forq_queues AS q"""
QUEUE_GET = QUEUE_SELECT + " WHERE name = %s"
QUEUE_GET_MANY = QUEUE_SELECT + " WHERE name = ANY(%s::text[])"
QUEUE_LIST = QUEUE_SELECT + " ORDER BY name"

QUEUE_PUT = """
INSERT INTO forq_queues (name, max_attempts, backoff, visibility_timeout_ms, retention_ms, dlq_retention_ms,
                         max_length, ordering, dedup_window_ms, max_in_flight, rate, group_concurrency, group_rate,
                         dead_letter_queue, paused, last_sequence, created_at, updated_at)
VALUES (%(name)s, %(max_attempts)s, %(backoff)s, %(visibility_timeout_ms)s, %(retention_ms)s, %(dlq_retention_ms)s,
        %(max_length)s, %(ordering)s, %(dedup_window_ms)s, %(max_in_flight)s, %(rate)s, %(group_concurrency)s,
        %(group_rate)s, %(dead_letter_queue)s, %(paused)s, 0, %(now)s, %(now)s)
ON CONFLICT (name) DO UPDATE SET
    max_attempts = excluded.max_attempts, backoff = excluded.backoff,
    visibility_timeout_ms = excluded.visibility_timeout_ms, retention_ms = excluded.retention_ms,
    dlq_retention_ms = excluded.dlq_retention_ms, max_length = excluded.max_length,
    ordering = excluded.ordering, dedup_window_ms = excluded.dedup_window_ms,
    max_in_flight = excluded.max_in_flight, rate = excluded.rate, group_concurrency = excluded.group_concurrency,
    group_rate = excluded.group_rate, dead_letter_queue = excluded.dead_letter_queue, paused = excluded.paused,
    updated_at = excluded.updated_at"""

# A new queue's row, unless ``limit`` queues have one. Creations take one transaction-level advisory
# lock first (QUEUE_CREATE_LOCK, held to the commit), and the count runs in a statement of its own
# after it, whose snapshot sees every creation committed before: two creations never both pass.
QUEUE_CREATE_LOCK = "SELECT pg_advisory_xact_lock(%s)"
QUEUE_CREATE_LOCK_KEY = int.from_bytes(b"forqqueu")  # < 2**63: a bigint
QUEUE_COUNT = "SELECT COUNT(*) FROM forq_queues WHERE name <> ''"
QUEUE_CREATE = f"""
INSERT INTO forq_queues (name, paused, last_sequence, created_at, updated_at)
SELECT %(name)s, FALSE, 0, %(now)s, %(now)s WHERE ({QUEUE_COUNT}) < %(limit)s
ON CONFLICT (name) DO NOTHING"""
QUEUE_EXISTS = "SELECT 1 FROM forq_queues WHERE name = %s"

# --- schedules --------------------------------------------------------------------------------

SCHEDULE_COLUMNS = """name, queue, content, cron, every_ms, catch_up, priority, attributes, paused, next_run_at,
                      last_run_at, created_at, updated_at"""
SCHEDULE_PUT = f"""
INSERT INTO forq_schedules ({SCHEDULE_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue, content = excluded.content, cron = excluded.cron, every_ms = excluded.every_ms,
    catch_up = excluded.catch_up, priority = excluded.priority, attributes = excluded.attributes,
    paused = excluded.paused, next_run_at = excluded.next_run_at, last_run_at = excluded.last_run_at,
    updated_at = excluded.updated_at"""
SCHEDULE_GET = f"SELECT {SCHEDULE_COLUMNS} FROM forq_schedules WHERE name = %s"
SCHEDULE_LIST = f"SELECT {SCHEDULE_COLUMNS} FROM forq_schedules ORDER BY name"
SCHEDULE_DELETE = "DELETE FROM forq_schedules WHERE name = %s"
SCHEDULE_SET_PAUSED = """
UPDATE forq_schedules SET paused = %(paused)s, next_run_at = COALESCE(%(next)s, next_run_at), updated_at = %(now)s
WHERE name = %(name)s"""
SCHEDULES_DUE = f"""
SELECT {SCHEDULE_COLUMNS} FROM forq_schedules WHERE next_run_at <= %s AND NOT paused ORDER BY next_run_at LIMIT %s"""
SCHEDULE_ADVANCE = """
UPDATE forq_schedules SET next_run_at = %(next)s, last_run_at = COALESCE(%(last)s, last_run_at), updated_at = %(now)s
WHERE name = %(name)s AND next_run_at = %(expected)s"""

QUEUE_DELETE = "DELETE FROM forq_queues WHERE name = %s"
QUEUE_SET_SQS_ATTRIBUTES = "UPDATE forq_queues SET sqs_attributes = %s::jsonb WHERE name = %s"
QUEUE_SET_SQS_TAGS = "UPDATE forq_queues SET sqs_tags = %s::jsonb WHERE name = %s"
QUEUE_DROP_PLACEHOLDER = """DELETE FROM forq_queues WHERE name = %s AND last_sequence = %s AND updated_at = %s
AND NOT EXISTS (SELECT 1 FROM messages WHERE queue = %s)"""
DELETE_QUEUE_MESSAGES = "DELETE FROM messages WHERE queue = %s"
DELETE_QUEUE_DEDUP = "DELETE FROM forq_dedup WHERE queue = %s"
PURGE = "DELETE FROM messages WHERE queue = %s AND NOT is_dlq"
PURGE_UNHELD = f"""DELETE FROM messages WHERE queue = %s AND NOT is_dlq
AND (status = {READY} OR (status = {PROCESSING} AND process_after <= %s))"""

# --- API-key throttle (every process and host shares it) --------------------------------------

# One statement, so that concurrent failures are counted one after the other (the row's lock): a
# failure from a key already blocked is not counted and leaves its block as it is (``failures`` goes
# over ``max``, which tells the caller so: the block negated); otherwise the ``max``-th within the
# window blocks it (``failures`` held at ``max`` once a block lapsed within the window: the next
# failure blocks it again).
AUTH_FAILED = """
INSERT INTO forq_auth_throttle AS t (address, failures, window_start, blocked_until)
VALUES (%(address)s, 1, %(now)s, CASE WHEN %(max)s <= 1 THEN %(now)s + %(block)s ELSE 0 END)
ON CONFLICT (address) DO UPDATE SET
    failures = CASE WHEN t.blocked_until > %(now)s THEN t.failures + 1
                    WHEN t.window_start <= %(now)s - %(window)s THEN 1
                    ELSE LEAST(t.failures + 1, %(max)s) END,
    window_start = CASE WHEN t.blocked_until <= %(now)s AND t.window_start <= %(now)s - %(window)s
                        THEN %(now)s ELSE t.window_start END,
    pending = CASE WHEN t.blocked_until <= %(now)s AND t.window_start <= %(now)s - %(window)s
                   THEN 0 ELSE t.pending END,
    blocked_until = CASE
        WHEN t.blocked_until > %(now)s THEN t.blocked_until
        WHEN (CASE WHEN t.window_start <= %(now)s - %(window)s THEN 1 ELSE t.failures + 1 END) >= %(max)s
        THEN %(now)s + %(block)s ELSE t.blocked_until END
RETURNING CASE WHEN t.failures > %(max)s THEN -t.blocked_until ELSE t.blocked_until END"""

# Failed logins (forqapp.login_throttle) share the table under "login-…" keys (bound as the LIKE
# pattern), with their own (longer) window: each kind prunes only its own stale rows, so a wrong API
# key never resets a login counter.
LOGIN_KEYS = "login-%"

AUTH_FORGET = """
DELETE FROM forq_auth_throttle
WHERE window_start < %(cutoff)s AND blocked_until < %(now)s AND address NOT LIKE %(login_keys)s"""

AUTH_BLOCKED_UNTIL = "SELECT blocked_until FROM forq_auth_throttle WHERE address = %s"

# --- login throttle (the API-key throttle's table and statement, "login-…" keys) ----------------

LOGIN_FORGET = """
DELETE FROM forq_auth_throttle
WHERE window_start < %(cutoff)s AND blocked_until < %(now)s AND address LIKE %(login_keys)s"""

# A login about to be checked takes its place among the logins being checked (``pending``) first,
# in one statement, so that concurrent logins are counted one after the other: none while the key
# is blocked, none once the window's failures and logins being checked come to ``max``. A block
# that lapsed within the window lets one more through, as the ``max``-th. A window past its end
# starts anew with this login. Returns the window it was counted in (its release or failure counts
# there only); no row: refused.
LOGIN_ATTEMPT = """
INSERT INTO forq_auth_throttle AS t (address, failures, window_start, blocked_until, pending)
VALUES (%(address)s, 0, %(now)s, 0, 1)
ON CONFLICT (address) DO UPDATE SET
    failures = CASE WHEN t.window_start <= %(now)s - %(window)s THEN 0
                    WHEN t.blocked_until > 0 THEN LEAST(t.failures, %(max)s - 1) ELSE t.failures END,
    pending = CASE WHEN t.window_start <= %(now)s - %(window)s THEN 1 ELSE t.pending + 1 END,
    window_start = CASE WHEN t.window_start <= %(now)s - %(window)s THEN %(now)s ELSE t.window_start END,
    blocked_until = 0
WHERE t.blocked_until <= %(now)s
  AND (t.window_start <= %(now)s - %(window)s
       OR (CASE WHEN t.blocked_until > 0 THEN LEAST(t.failures, %(max)s - 1) ELSE t.failures END) + t.pending
          < %(max)s)
RETURNING t.window_start"""

LOGIN_REFUSED = """
SELECT blocked_until, failures, window_start FROM forq_auth_throttle WHERE address = %(address)s"""

# A login counted in window ``reserved`` failed: one failure more there, the ``max``-th blocks the
# key. A window that started anew since counts nothing (the login was counted in its own).
LOGIN_FAILED_CHECK = """
UPDATE forq_auth_throttle SET failures = failures + 1, pending = GREATEST(pending - 1, 0),
    blocked_until = CASE WHEN failures + 1 >= %(max)s AND blocked_until <= %(now)s THEN %(now)s + %(block)s
                         ELSE blocked_until END
WHERE address = %(address)s AND window_start = %(reserved)s"""

# A login counted in window ``reserved`` did not fail: no longer being checked (no-op once the
# window started anew).
LOGIN_RELEASE = """
UPDATE forq_auth_throttle SET pending = pending - 1
WHERE address = %(address)s AND window_start = %(reserved)s AND pending > 0"""

# --- leases (one holder per name across every process and host: the jobs scheduler) -----------

# Acquire or renew in one statement: a new name is inserted; an existing one changes hands only if
# it is ours already, if it has expired, or if it is held by ``replacing`` (a holder the caller
# found dead). No row comes back when someone else holds it. Two hosts racing for a new name: one
# inserts, the other's ON CONFLICT waits for it and then sees a live lease of someone else.
LEASE_ACQUIRE = """
INSERT INTO forq_leases (name, holder, expires_at) VALUES (%(name)s, %(holder)s, %(expires_at)s)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE forq_leases.holder IN (%(holder)s, %(replacing)s) OR forq_leases.expires_at < %(now)s
RETURNING holder"""

LEASE_HOLDER = "SELECT holder, expires_at FROM forq_leases WHERE name = %s"

LEASE_RELEASE = "DELETE FROM forq_leases WHERE name = %s AND holder = %s"

# Per listening connection: how many notifications it has received. Keyed weakly, so a connection
# that Django closed and replaced is forgotten, and its successor LISTENs again.
_received: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
# ... and the queues they named since changed_queues last asked (absent: not known, the connection
# being new: what was notified before it listened is lost).
_named: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()

Params = Sequence[Any] | dict[str, Any] | None


class PostgreSQLStore(Store):
    """The queue in a PostgreSQL database shared by any number of hosts."""

    vendor: ClassVar[str] = "postgresql"
    text_holds_nul: ClassVar[bool] = False  # PostgreSQL text cannot contain U+0000
    wakeups: ClassVar[Literal["data_version", "listen"]] = "listen"
    default_db_threads: ClassVar[int] = 4
    default_api_workers: ClassVar[int] = 2
    has_clock: ClassVar[bool] = True  # the server's: every host follows it (forqapp.services.clock)

    def _lost(self, raw: Any) -> bool:
        return bool(raw.closed or raw.broken)

    def _execute(self, sql: str, params: Params = None) -> psycopg.Cursor[Any]:
        cur = psycopg.Cursor(self._conn())
        cur.execute(sql, params)
        return cur

    def _rowcount(self, sql: str, params: Params = None) -> int:
        cur = self._execute(sql, params)
        n = cur.rowcount
        cur.close()
        return n

    def _fetchall(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        cur = self._execute(sql, params)
        rows = cur.fetchall()
        cur.close()
        return rows

    def _batched(self, sql: str, params: dict[str, Any], batch: int) -> int:
        total = 0
        while True:
            n = self._rowcount(sql, {**params, "batch": batch})
            total += n
            if n < batch:
                return total

    def _batched_counted(self, sql: str, params: dict[str, Any], batch: int) -> int:
        """As :meth:`_batched`, for statements that SELECT their count first (they notify too)."""
        total = 0
        while True:
            n = int(self._fetchall(sql, {**params, "batch": batch})[0][0])
            total += n
            if n < batch:
                return total

    # -- produce -----------------------------------------------------------------------------

    def insert(self, rows: Sequence[MessageRow], *, is_dlq: bool = False) -> list[int]:
        """One statement per queue (rows are batched through arrays), which also notifies
        listeners — on commit of the caller's transaction, if there is one."""
        if not rows:
            return []
        by_queue: dict[str, list[int]] = {}
        for i, r in enumerate(rows):
            by_queue.setdefault(r[1], []).append(i)
        sequences = [0] * len(rows)
        for queue, indexes in by_queue.items():
            group = [rows[i] for i in indexes]
            common = {"queue": queue, "base": base_of(queue) if is_dlq else queue, "is_dlq": bool(is_dlq),
                      "now": group[0][4]}
            if any(r[9] for r in group):
                got = dict(self._fetchall(INSERT_GROUPED, {
                    **common, "ids": [r[0] for r in group], "contents": [r[2] for r in group],
                    "process_after": [r[3] for r in group], "received_at": [r[4] for r in group],
                    "expires_after": [r[5] for r in group], "priority": [r[6] for r in group],
                    "attributes": [r[7] for r in group], "dedup": [r[8] for r in group],
                    "groups": [r[9] or "" for r in group],
                }))
                for i in indexes:
                    sequences[i] = int(got[rows[i][0]])
            elif len(group) == 1:
                r = group[0]
                ((seq, _),) = self._fetchall(INSERT_ONE, {
                    **common, "id": r[0], "content": r[2], "process_after": r[3], "received_at": r[4],
                    "expires_after": r[5], "priority": r[6], "attributes": r[7], "dedup": r[8],
                })
                sequences[indexes[0]] = int(seq)
            else:
                got = dict(self._fetchall(INSERT, {
                    **common, "ids": [r[0] for r in group], "contents": [r[2] for r in group],
                    "process_after": [r[3] for r in group], "received_at": [r[4] for r in group],
                    "expires_after": [r[5] for r in group], "priority": [r[6] for r in group],
                    "attributes": [r[7] for r in group], "dedup": [r[8] for r in group],
                }))
                for i in indexes:
                    sequences[i] = int(got[rows[i][0]])
        return sequences

    def insert_one(self, row: NewMessage) -> int:
        if row[9] is not None:
            return self.insert([row])[0]
        ((seq, _),) = self._fetchall(INSERT_ONE, {
            "queue": row[1], "base": row[1], "is_dlq": False, "now": row[4], "id": row[0], "content": row[2],
            "process_after": row[3], "received_at": row[4], "expires_after": row[5], "priority": row[6],
            "attributes": row[7], "dedup": row[8],
        })
        return int(seq)

    def dedup(self, queue: str, dedup_id: str, message_id: str, now: int, window_ms: int) -> str | None:
        params = {"queue": queue, "dedup_id": dedup_id, "id": message_id, "expires": now + window_ms, "now": now}
        if self._fetchall(DEDUP_RECORD, params):
            return None
        return str(self._fetchall(DEDUP_ORIGINAL, (queue, dedup_id))[0][0])

    def queue_length(self, queue: str, limit: int) -> int:
        self._fetchall(LOCK_QUEUE, (queue,))
        return int(self._fetchall(QUEUE_LENGTH, (queue, limit))[0][0])

    # -- consume -----------------------------------------------------------------------------

    def claim(self, queue: str, now: int, limit: int = 1, *, visibility_ms: int, max_attempts: int,
              dlq_ttl_ms: int, order: str = "fifo", max_in_flight: int | None = None,
              rate_interval_us: int | None = None, group_concurrency: int | None = None,
              group_rate_us: int | None = None, group_batch: bool = False) -> Claim:
        groups = (group_concurrency, group_rate_us, group_batch)
        if max_in_flight is None and rate_interval_us is None:
            return self._claim(queue, now, limit, visibility_ms, max_attempts, dlq_ttl_ms, order, groups)
        with transaction.atomic(using=self.alias) if self._fixed is None else nullcontext():
            rows = self._fetchall(LOCK_RATE, (queue,))
            if max_in_flight is not None:
                in_flight = int(self._fetchall(IN_FLIGHT, (queue, now))[0][0])
                limit = min(limit, max_in_flight - in_flight)
                if limit <= 0:
                    return Claim([], throttled="concurrency")
            if rate_interval_us is not None:
                next_us = int(rows[0][0]) if rows else 0
                if next_us > now * 1000:
                    return Claim([], throttled="rate", retry_at=-(-next_us // 1000))
                limit = 1  # claims are spaced evenly: one per slot
            claimed = self._claim(queue, now, limit, visibility_ms, max_attempts, dlq_ttl_ms, order, groups)
            if rate_interval_us is not None and claimed.deliveries:
                self._rowcount(RATE_TAKE, {"now_us": now * 1000, "n": len(claimed.deliveries),
                                           "interval": rate_interval_us, "queue": queue})
            return claimed

    def throttle_state(self, queue: str, now: int) -> ThrottleState:
        in_flight = int(self._fetchall(IN_FLIGHT, (queue, now))[0][0])
        rows = self._fetchall(RATE_NEXT, (queue,))
        return ThrottleState(in_flight, int(rows[0][0]) if rows else 0)

    def defer(self, queue: str, message_id: str, receipt: int, now: int, delay_ms: int, state: str | None) -> bool:
        rows = self._fetchall(DEFER, {"now": now, "delay": delay_ms, "state": state, "id": message_id,
                                      "queue": queue, "receipt": receipt})
        return len(rows) == 1

    def notify(self, queue: str) -> None:
        """Wake listeners of ``queue`` (on commit, inside a transaction): a slot of a limited queue freed."""
        self._fetchall(NOTIFY, (queue,))

    def _claim(self, queue: str, now: int, limit: int, visibility_ms: int, max_attempts: int, dlq_ttl_ms: int,
               order: str, groups: tuple[int | None, int | None, bool] = (None, None, False)) -> Claim:
        # One round trip where it can (CALL_CLAIM_THEN_GROUPS): the messages without a group first (as
        # they were claimed before groups), then the groups.
        params = {"queue": queue, "now": now, "limit": limit, "visibility": visibility_ms, "max": max_attempts,
                  "dlq_ttl": dlq_ttl_ms, "among": RANDOM_AMONG, "ended_among": max(ENDED_AMONG, limit),
                  "order": order, "concurrency": groups[0], "rate_us": groups[1], "batch": groups[2],
                  "looks": MAX_GROUP_LOOKS}
        rows = self._fetchall_claim(CALL_CLAIM_THEN_GROUPS, params)
        first = [r[:14] for r in rows if r[15]]
        claimed = self._claim_ungrouped(queue, now, limit, order, params, first)
        if len(claimed.deliveries) >= limit:
            return claimed
        if order != "lifo" and len(first) < limit and all(r[13] == PROCESSING for r in first):
            grouped = self._groups_claimed([r[:15] for r in rows if not r[15]], groups[2])  # in the same call
        else:
            grouped = self._claim_groups(queue, now, limit - len(claimed.deliveries), visibility_ms, max_attempts,
                                         dlq_ttl_ms, *groups)
        if grouped is None:
            return claimed
        if not claimed.deliveries and not claimed.redriven_messages:
            return grouped
        return Claim(claimed.deliveries + grouped.deliveries,
                     claimed.redriven_messages + grouped.redriven_messages)

    def _claim_groups(self, queue: str, now: int, limit: int, visibility_ms: int, max_attempts: int,
                      dlq_ttl_ms: int, concurrency: int | None, rate_us: int | None,
                      batch: bool = False) -> Claim | None:
        """Up to ``limit`` messages of ``queue``'s groups, a group's turn at a time, in one call of
        ``forq_claim_group`` (GROUP_CLAIM_FUNCTION; ``batch``: migration 0027's); None when it took
        nothing."""
        return self._groups_claimed(self._fetchall(CALL_CLAIM_GROUP, {
            "queue": queue, "now": now, "limit": limit, "visibility": visibility_ms, "max": max_attempts,
            "dlq_ttl": dlq_ttl_ms, "concurrency": concurrency, "rate_us": rate_us, "looks": MAX_GROUP_LOOKS,
            "batch": batch}), batch)

    @staticmethod
    def _groups_claimed(rows: list[tuple[Any, ...]], batch: bool = False) -> Claim | None:
        """``forq_claim_group``'s rows as a claim; None when it took nothing. ``batch``: a group's
        messages (its first, then the others its turn took, returned in no order) in claim order."""
        if not rows:
            return None
        if rows[0][0] is None:  # held back by the group limits
            return Claim([], throttled="group")
        if batch:
            first = {g: n for n, g in reversed(list(enumerate(r[14] for r in rows)))}
            rows = sorted(rows, key=lambda r: (first[r[14]], -r[5], r[8]))
        deliveries = [Delivery._make((*r[:13], r[14])) for r in rows if r[13] == PROCESSING]
        redriven = tuple(Delivery._make((*r[:13], r[14]))._replace(receipt=None, lease_expires_at=None)
                         for r in rows if r[13] != PROCESSING and r[0] is not None)
        return Claim(deliveries, redriven)

    def group_state(self, queue: str, group: str, now: int) -> GroupState:
        ((ready, in_flight, eligible_at),) = self._fetchall(GROUP_STATE, {"queue": queue, "group": group, "now": now})
        return GroupState(group, int(ready), int(in_flight), None if eligible_at is None else int(eligible_at))

    def busiest_groups(self, queue: str, now: int, limit: int) -> list[GroupState]:
        rows = self._fetchall(GROUPS_BUSIEST, {"queue": queue, "now": now, "limit": limit})
        return [GroupState(g, int(r), int(f), None if e is None else int(e)) for g, r, f, e in rows]

    def group_count(self, queue: str) -> int:
        return int(self._fetchall(GROUP_COUNT, {"queue": queue})[0][0])

    def next_group_turn(self, queue: str) -> int | None:
        value = self._fetchall(GROUP_NEXT_TURN, (queue,))[0][0]
        return None if value is None else int(value)

    def next_group_turns(self, queues: Sequence[str]) -> dict[str, int]:
        if not queues:
            return {}
        return {q: int(t) for q, t in self._fetchall(GROUP_NEXT_TURNS, (list(queues),))}

    def next_turns(self, queues: Sequence[str]) -> dict[str, int]:
        if not queues:
            return {}
        return {q: int(t) for q, t in self._fetchall(NEXT_TURNS, (list(queues),))}

    def _claim_ungrouped(self, queue: str, now: int, limit: int, order: str, params: dict[str, Any],
                         rows: list[tuple[Any, ...]]) -> Claim:
        """The messages without a group: ``rows``, the first round's (``forq_claim``'s, of
        CALL_CLAIM_THEN_GROUPS), then the rounds after a redrive."""
        deliveries: list[Delivery] = []
        redriven: list[Delivery] = []
        params = dict(params)
        for round_ in range(MAX_REDRIVE_ROUNDS):
            if round_:
                rows = self._fetchall_claim(CLAIM_AGAIN[order], params)
            live = [r for r in rows if r[13] == PROCESSING]  # the others were redriven to the DLQ
            redriven += [Delivery._make((*r[:13], None))._replace(receipt=None, lease_expires_at=None)
                         for r in rows if r[13] != PROCESSING]
            deliveries += [Delivery._make((*r[:13], None)) for r in live]
            if len(deliveries) >= limit or not rows:
                break
            if len(live) == len(rows) and order != "lifo":  # LIFO goes on to the next priority
                break
            params["limit"] = limit - len(deliveries)
            params["delivered"] = [d.id for d in deliveries]
        if len(deliveries) > 1 and order not in ("random", "due"):  # RETURNING order is unspecified (due: sorted)
            newest_first = order == "lifo"
            deliveries.sort(key=lambda d: (-d.priority, -d.sequence if newest_first else d.sequence))
        return Claim(deliveries, tuple(redriven))

    def _fetchall_claim(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The claim's rows; without ``forq_claim`` (the database not migrated to 0015: code ahead of
        ``migrate``, or ``migrate --fake``), an error that says what to do, not PostgreSQL's hint to
        cast the arguments."""
        try:
            return self._fetchall(sql, params)
        except psycopg.errors.UndefinedFunction as exc:
            if "forq_claim" not in str(exc):
                raise
            raise psycopg.errors.UndefinedFunction(
                f"{exc.diag.message_primary}: the database lacks forqapp's claim function "
                "(migration 0015): run `manage.py migrate`") from exc

    def peek(self, queue: str, now: int, order: str = "fifo") -> Delivery | None:
        rows = self._fetchall(PEEK[order], {"queue": queue, "now": now, "limit": 1, "among": RANDOM_AMONG,
                                                  "ended_among": ENDED_AMONG})
        return Delivery._make((*rows[0], None)) if rows else None

    def peek_grouped(self, queue: str, now: int, concurrency: int | None, rate_us: int | None) -> Delivery | None:
        params: dict[str, Any] = {"queue": queue, "now": now, "looks": MAX_GROUP_LOOKS}
        for group, rate_next in self._fetchall(GROUP_PEEK_PICK, params):  # as forq_claim_group looks
            if rate_us is not None and rate_next > now * 1000:
                continue
            params["group"] = group
            candidates = self._fetchall(GROUP_HELD_DUE, params)
            if concurrency is None or self._fetchall(GROUP_HELD_COUNT, params)[0][0] < concurrency:
                candidates += self._fetchall(GROUP_FRESH_DUE, params)
            if candidates:
                best = min(candidates, key=lambda c: (-c[1], c[2]))
                rows = self._fetchall(PEEK_GROUPED, {"id": best[0]})
                if rows:
                    return Delivery._make(rows[0])
        return None

    def peek_message(self, queue: str, message_id: str) -> tuple[Delivery, str | None, str | None] | None:
        rows = self._fetchall(PEEK_ID, {"id": message_id, "queue": queue})
        return (Delivery._make((*rows[0][:13], rows[0][15])), rows[0][13], rows[0][14]) if rows else None

    def ack(self, queue: str, message_id: str, receipt: int) -> bool:
        return self._rowcount(ACK, (message_id, queue, receipt)) == 1

    def ack_many(self, queue: str, deliveries: Iterable[tuple[str, int]]) -> int:
        deliveries = list(deliveries)
        if not deliveries:
            return 0
        return self._rowcount(ACK_MANY, {
            "ids": [d[0] for d in deliveries], "receipts": [int(d[1]) for d in deliveries], "queue": queue,
        })

    def nack(self, queue: str, message_id: str, receipt: int, now: int, max_attempts: int,
             backoff_ms: Sequence[int], error: str | None = None, jitter: float = 0.0) -> bool:
        return self._rowcount(NACK, {
            "max": max_attempts, "now": now, "id": message_id, "queue": queue, "receipt": receipt,
            "backoff": [int(ms) for ms in backoff_ms], "backoff_last": int(backoff_ms[-1]),
            "error": error, "jitter": float(jitter),
        }) == 1

    def fail(self, queue: str, message_id: str, receipt: int, now: int, error: str | None = None,
             used_up: bool = False) -> bool:
        return self._rowcount(FAIL, {"now": now, "id": message_id, "queue": queue, "receipt": receipt,
                                     "error": error, "used_up": used_up}) == 1

    def release(self, queue: str, message_id: str, receipt: int, now: int) -> bool:
        rows = self._fetchall(RELEASE, {"now": now, "id": message_id, "queue": queue, "receipt": receipt})
        return len(rows) == 1

    def release_many(self, queue: str, deliveries: Iterable[tuple[str, int]], now: int) -> int:
        deliveries = list(deliveries)
        if not deliveries:
            return 0
        rows = self._fetchall(RELEASE_MANY, {
            "now": now, "queue": queue, "ids": [d[0] for d in deliveries],
            "receipts": [int(d[1]) for d in deliveries],
        })
        return int(rows[0][0])

    def change_visibility(self, queue: str, deliveries: Iterable[tuple[str, int]], now: int,
                          visibility_ms: int) -> list[bool]:
        deliveries = list(deliveries)
        if not deliveries:
            return []
        changed = {r[0] for r in self._fetchall(CHANGE_VISIBILITY, {
            "now": now, "visibility": visibility_ms, "queue": queue, "ids": [d[0] for d in deliveries],
            "receipts": [int(d[1]) for d in deliveries],
        })}
        return [d[0] in changed for d in deliveries]

    # -- schedules ---------------------------------------------------------------------------

    def schedule_put(self, row: ScheduleRow) -> None:
        self._rowcount(SCHEDULE_PUT, tuple(row))

    def schedule_get(self, name: str) -> ScheduleRow | None:
        rows = self._fetchall(SCHEDULE_GET, (name,))
        return ScheduleRow._make(rows[0]) if rows else None

    def schedule_list(self) -> list[ScheduleRow]:
        return [ScheduleRow._make(r) for r in self._fetchall(SCHEDULE_LIST)]

    def schedule_delete(self, name: str) -> bool:
        return self._rowcount(SCHEDULE_DELETE, (name,)) > 0

    def schedule_set_paused(self, name: str, paused: bool, next_run_at: int | None, now: int) -> bool:
        params = {"paused": paused, "next": next_run_at, "now": now, "name": name}
        return self._rowcount(SCHEDULE_SET_PAUSED, params) == 1

    def schedules_due(self, now: int, limit: int) -> list[ScheduleRow]:
        return [ScheduleRow._make(r) for r in self._fetchall(SCHEDULES_DUE, (now, limit))]

    def schedule_advance(self, name: str, expected_next: int, next_run_at: int, last_run_at: int | None,
                         now: int) -> bool:
        return self._rowcount(SCHEDULE_ADVANCE, {"next": next_run_at, "last": last_run_at, "now": now,
                                                 "name": name, "expected": expected_next}) == 1

    # -- queues ------------------------------------------------------------------------------

    def queue_get(self, name: str) -> QueueRow | None:
        rows = self._fetchall(QUEUE_GET, (name,))
        return QueueRow._make(rows[0]) if rows else None

    def queue_get_many(self, names: Sequence[str]) -> dict[str, QueueRow]:
        rows = self._fetchall(QUEUE_GET_MANY, (list(names),)) if names else []
        return {row[0]: QueueRow._make(row) for row in rows}

    def queue_list(self) -> list[QueueRow]:
        return [QueueRow._make(r) for r in self._fetchall(QUEUE_LIST)]

    def queue_create(self, name: str, now: int, limit: int) -> bool:
        if self._fetchall(QUEUE_EXISTS, (name,)):
            return True  # (no lock for a queue that exists)
        with transaction.atomic(using=self.alias) if self._fixed is None else nullcontext():
            self._fetchall(QUEUE_CREATE_LOCK, (QUEUE_CREATE_LOCK_KEY,))
            if self._rowcount(QUEUE_CREATE, {"name": name, "now": now, "limit": limit}):
                return True
            return bool(self._fetchall(QUEUE_EXISTS, (name,)))

    def queue_count(self) -> int:
        return int(self._fetchall(QUEUE_COUNT)[0][0])

    def queue_put(self, name: str, policy: dict[str, Any], now: int) -> None:
        with transaction.atomic(using=self.alias) if self._fixed is None else nullcontext():
            self._rowcount(QUEUE_PUT, {**dict.fromkeys(POLICY_COLUMNS), "paused": False, **policy,
                                       "name": name, "now": now})
            self._rowcount(GROUPS_AT_ONCE, {"queue": name, "now": now})  # new group limits: every group looks again

    def queue_delete(self, name: str, now: int) -> bool:
        with transaction.atomic(using=self.alias) if self._fixed is None else nullcontext():
            found = self._rowcount(QUEUE_DELETE, (name,))
            n = self._rowcount(DELETE_QUEUE_MESSAGES, (name,))
            self._rowcount(DELETE_QUEUE_DEDUP, (name,))
            self._rowcount(DELETE_QUEUE_SINKS, (name,))
            self._rowcount(DELETE_QUEUE_GROUPS, (name,))
        return bool(found or n)

    def queue_set_sqs_attributes(self, name: str, attributes: str | None) -> None:
        self._rowcount(QUEUE_SET_SQS_ATTRIBUTES, (attributes, name))

    def queue_set_sqs_tags(self, name: str, tags: str | None) -> None:
        self._rowcount(QUEUE_SET_SQS_TAGS, (tags, name))

    def queue_drop_placeholder(self, name: str, last_sequence: int, updated_at: int) -> bool:
        return self._rowcount(QUEUE_DROP_PLACEHOLDER, (name, last_sequence, updated_at, name)) > 0

    def purge(self, queue: str, now: int | None = None) -> int:
        if now is None:
            return self._rowcount(PURGE, (queue,))
        return self._rowcount(PURGE_UNHELD, (queue, now))

    # -- wake-ups and health -----------------------------------------------------------------

    def has_due(self, queues: Sequence[str], now: int, limit: int) -> dict[str, int]:
        """In one read."""
        if not queues:
            return {}
        rows = self._fetchall(HAS_DUE, {"queues": list(queues), "now": now, "limit": limit})
        return {q: int(n) for q, n in rows}

    def data_version(self) -> int:
        """Changes when any connection, on any host, commits something that makes a message ready.

        The first call on a connection makes it ``LISTEN``; later calls drain the notifications
        that arrived since (no round trip: it reads what the socket already holds)."""
        conn = self._conn()
        count = _received.get(conn)
        if count is None:
            self._execute(LISTEN).close()
            _received[conn] = count = 0
        named = _named.get(conn)
        for notification in conn.notifies(timeout=0):
            count += 1
            if named is not None:
                named.add(notification.payload)
        _received[conn] = count
        return count

    def changed_queues(self) -> set[str] | None:
        """The queues the notifications :meth:`data_version` counted since the last call named;
        None the first time on a listening connection (what came before it listened is lost)."""
        conn = self._conn()
        named = _named.get(conn)
        _named[conn] = set()
        return named

    def change_fd(self) -> int | None:
        """The listening connection's socket (:meth:`data_version` made it listen)."""
        return int(self._conn().fileno())

    def ping(self) -> None:
        self._fetchall(PING)

    def clock_samples(self, n: int) -> list[tuple[int, int, int]]:
        cur = psycopg.Cursor(self._conn())
        samples = []
        try:
            for _ in range(n):
                before = host_us()
                cur.execute(CLOCK)
                row = cur.fetchone()
                after = host_us()
                if row is not None:
                    samples.append((before, int(row[0]), after))
        finally:
            cur.close()
        return samples

    # -- admin: dead-letter queues -----------------------------------------------------------

    def requeue(self, dlq: str, message_id: str | None, now: int, queue_ttl_ms: int) -> int:
        params: dict[str, Any] = {"dest": dlq.removesuffix(DLQ_SUFFIX), "now": now, "ttl": queue_ttl_ms,
                                  "queue": dlq}
        if message_id is None:
            return int(self._fetchall(REQUEUE_ALL, params)[0][0])
        return int(self._fetchall(REQUEUE_ONE, {**params, "id": message_id})[0][0])

    # -- message move tasks --------------------------------------------------------------------

    def dead_letter_sources(self, name: str) -> list[str]:
        return [r[0] for r in self._fetchall(DEAD_LETTER_SOURCES, (name,))]

    def sources_of(self, queue: str, message_ids: Sequence[str]) -> dict[str, str]:
        return dict(self._fetchall(SOURCES_OF, (queue, list(message_ids)))) if message_ids else {}

    def move_start(self, handle: str, source: str, destination: str | None, rate: int | None,
                   now: int) -> MoveTaskRow | None:
        params = {"handle": handle, "source": source, "destination": destination, "rate": rate, "now": now,
                  "source_base": base_of(source) if is_dlq(source) else None}
        rows = self._fetchall(MOVE_START, params)
        return MoveTaskRow._make(rows[0]) if rows else None

    def move_running(self) -> int:
        return int(self._fetchall(MOVES_RUNNING)[0][0])

    def move_get(self, handle: str) -> MoveTaskRow | None:
        rows = self._fetchall(MOVE_GET, (handle,))
        return MoveTaskRow._make(rows[0]) if rows else None

    def move_list(self, source: str, limit: int) -> list[MoveTaskRow]:
        return [MoveTaskRow._make(r) for r in self._fetchall(MOVE_LIST, (source, limit))]

    def move_cancel(self, handle: str, now: int) -> MoveTaskRow | None:
        rows = self._fetchall(MOVE_CANCEL, {"handle": handle, "now": now})
        return MoveTaskRow._make(rows[0]) if rows else None

    def move_step(self, now: int, batch: int, queue_ttl_ms: int, dlq_ttl_ms: int) -> MoveStep | None:
        with transaction.atomic(using=self.alias) if self._fixed is None else nullcontext():
            rows = self._fetchall(MOVE_DUE, (now,))
            if not rows:
                return None
            task = MoveTaskRow._make(rows[0])
            n = max(0, min(batch, task.rate or batch, task.to_move - task.moved))
            params = move_params(task, now, n, queue_ttl_ms, dlq_ttl_ms)
            moved = [r[0] for r in self._fetchall(MOVE_BATCH, params)] if n else []
            status, reason, next_at = move_outcome(task, n, len(moved), now,
                                                   lambda: self._fetchall(MOVE_STRANDED, {"source": task.source, "now": now}))
            after = self._fetchall(MOVE_PROGRESS, {"moved": len(moved), "status": status, "reason": reason,
                                                   "next_at": next_at, "now": now, "handle": task.handle})
        return MoveStep(MoveTaskRow._make(after[0]), len(moved), tuple(sorted(set(moved))))

    def delete_dlq(self, dlq: str, message_id: str | None) -> int:
        if message_id is None:
            return self._rowcount(DELETE_DLQ_ALL, (dlq,))
        return self._rowcount(DELETE_DLQ_ONE, (message_id, dlq))

    # -- background jobs ---------------------------------------------------------------------

    def move_expired_to_dlq(self, now: int, dlq_ttl_ms: int, queue_ttl_ms: int, batch: int = BATCH) -> int:
        return self._batched_counted(MOVE_EXPIRED_TO_DLQ, {"now": now, "ttl": dlq_ttl_ms, "queue_ttl": queue_ttl_ms},
                                     batch)

    def move_failed_to_dlq(self, now: int, dlq_ttl_ms: int, queue_ttl_ms: int, batch: int = BATCH) -> int:
        return self._batched_counted(MOVE_FAILED_TO_DLQ, {"now": now, "ttl": dlq_ttl_ms, "queue_ttl": queue_ttl_ms},
                                     batch)

    def recover_stale(self, now: int, max_attempts: int, batch: int = BATCH) -> int:
        return self._batched_counted(
            RECOVER_STALE, {"now": now, "max": max_attempts, "cutoff": now}, batch
        )

    def delete_expired_dlq(self, now: int, batch: int = BATCH) -> int:
        return self._batched(DELETE_EXPIRED_DLQ, {"now": now}, batch)

    def delete_failed_dlq(self, batch: int = BATCH) -> int:
        return self._batched(DELETE_FAILED_DLQ, {}, batch)

    def count_expired(self, now: int, is_dlq: bool) -> int:
        return int(self._fetchall(COUNT_EXPIRED, (bool(is_dlq), now))[0][0])

    def count_failed(self, is_dlq: bool) -> int:
        return int(self._fetchall(COUNT_FAILED, (bool(is_dlq),))[0][0])

    def count_stale(self, now: int) -> int:
        return int(self._fetchall(COUNT_STALE, (now,))[0][0])

    def delete_expired_dedup(self, now: int, batch: int = BATCH) -> int:
        return self._batched(DELETE_EXPIRED_DEDUP, {"now": now}, batch)

    def drop_empty_groups(self, batch: int = BATCH) -> int:
        params: dict[str, Any] = {"queue": "", "name": "", "batch": batch}
        dropped = 0
        while True:
            with transaction.atomic(using=self.alias) if self._fixed is None else nullcontext():
                page = self._fetchall(GROUPS_PAGE, params)
                if not page:
                    return dropped
                last_queue, last_name = page[-1]
                dropped += self._rowcount(DROP_EMPTY_GROUPS, {**params, "last_queue": last_queue,
                                                              "last_name": last_name})
            if len(page) < batch:
                return dropped
            params.update(queue=last_queue, name=last_name)

    def optimize(self) -> None:
        """SQLite's ``PRAGMA optimize`` (fresh planner statistics): ``ANALYZE messages``, a sample read
        that blocks no writer. Autovacuum does it too (the migration tunes it for this table), but a
        server with autovacuum off would otherwise plan claims with statistics from an empty table."""
        self._execute(OPTIMIZE).close()

    def in_flight_by_queue(self, now: int) -> dict[str, int]:
        return {q: int(n) for q, n in self._fetchall(IN_FLIGHT_BY_QUEUE, (now,))}

    def ready_groups_by_queue(self) -> dict[str, int]:
        return {q: int(n) for q, n in self._fetchall(READY_GROUPS_BY_QUEUE)}

    def state_counts(self, now: int, queues: Sequence[str] | None = None) -> dict[str, StateCounts]:
        params = {"now": now, "queues": list(queues or ())}
        return state_counts_of(self._fetchall(STATE_COUNTS[queues is not None], params))

    def queue_depths(self) -> list[QueueDepth]:
        return [QueueDepth(q, bool(d), int(n)) for q, d, n in self._fetchall(QUEUE_DEPTHS)]

    # -- bulk: staged writes and snapshot reads ----------------------------------------------

    def stage(self, token: str, queue: str, rows: Sequence[StagedMessage], now: int) -> None:
        self._rowcount(STAGE, {
            "token": token, "queue": queue, "now": now, "ids": [r[0] for r in rows],
            "contents": [r[1] for r in rows], "process_after": [r[2] for r in rows],
            "priority": [r[3] for r in rows], "attributes": [r[4] for r in rows], "groups": [r[5] for r in rows],
        })

    def publish_staged(self, staged: Sequence[Staged], now: int, queue_ttl_ms: int,
                       past_tolerance_ms: int) -> dict[str, int]:
        """A concurrent publish of the same token waits on its rows' locks, then finds them gone."""
        published: dict[str, int] = {}
        for token, queue in staged:
            rows = self._fetchall(PUBLISH, {"token": token, "queue": queue, "now": now, "ttl": queue_ttl_ms,
                                            "tolerance": past_tolerance_ms})
            published[queue] = published.get(queue, 0) + int(rows[0][0])
        return published

    def record_sink_batch(self, queue: str, sink: str, batch_id: int, now: int) -> bool:
        return bool(self._fetchall(RECORD_SINK_BATCH, {"queue": queue, "sink": sink, "batch": batch_id,
                                                       "now": now}))

    def discard_staged(self, staged: Sequence[Staged]) -> int:
        return sum(self._rowcount(DISCARD, (t, q)) for t, q in staged)

    def delete_abandoned_staged(self, cutoff: int, batch: int = BATCH) -> int:
        return self._batched(DELETE_ABANDONED_STAGED, {"cutoff": cutoff}, batch)

    def snapshot_page(self, queue: str, after: str, upto: str | None, limit: int) -> list[SnapshotRow]:
        """Keyset paging; ids compare bytewise (the columns are ``COLLATE "C"``)."""
        if upto is None:
            rows = self._fetchall(SNAPSHOT_PAGE, (queue, is_dlq(queue), after, limit))
        else:
            rows = self._fetchall(SNAPSHOT_PAGE_UPTO, (queue, is_dlq(queue), after, upto, limit))
        return list(map(SnapshotRow._make, rows))

    def snapshot_bounds(self, queue: str) -> SnapshotBounds:
        count, lo, hi = self._fetchall(SNAPSHOT_BOUNDS, (queue, is_dlq(queue)))[0]
        return SnapshotBounds(int(count), lo, hi)

    # -- API-key throttle --------------------------------------------------------------------

    def auth_failed(self, address: str, now: int, window_ms: int, max_failures: int, block_ms: int) -> int:
        return self._count_failure(AUTH_FORGET, address, now, window_ms, max_failures, block_ms)

    def _count_failure(self, forget: str, key: str, now: int, window_ms: int, max_failures: int,
                       block_ms: int) -> int:
        """One more failure for ``key`` (until when it is blocked), then prune stale rows with
        ``forget`` (API keys and logins prune only their own kind of rows)."""
        params = {"address": key, "now": now, "window": window_ms, "max": max_failures, "block": block_ms}
        rows = self._fetchall(AUTH_FAILED, params)
        self._rowcount(forget, {"cutoff": now - 2 * window_ms, "now": now, "login_keys": LOGIN_KEYS})
        return int(rows[0][0])

    def auth_blocked_until(self, address: str) -> int:
        rows = self._fetchall(AUTH_BLOCKED_UNTIL, (address,))
        return int(rows[0][0]) if rows else 0

    # -- login throttle ----------------------------------------------------------------------

    def login_failed(self, key: str, now: int, window_ms: int, max_failures: int, block_ms: int) -> int:
        return abs(self._count_failure(LOGIN_FORGET, key, now, window_ms, max_failures, block_ms))

    def login_attempt(self, key: str, now: int, window_ms: int, max_failures: int) -> tuple[int, int]:
        params = {"address": key, "now": now, "window": window_ms, "max": max_failures}
        rows = self._fetchall(LOGIN_ATTEMPT, params)
        if rows:
            return int(rows[0][0]), 0
        return 0, self._login_refused_until(self._fetchall(LOGIN_REFUSED, params), now, window_ms, max_failures)

    def login_checked(self, key: str, reserved_window: int, now: int, failed: bool, window_ms: int,
                      max_failures: int, block_ms: int) -> None:
        if not failed:
            self._rowcount(LOGIN_RELEASE, {"address": key, "reserved": reserved_window})
            return
        self._rowcount(LOGIN_FAILED_CHECK, {"address": key, "reserved": reserved_window, "now": now,
                                            "max": max_failures, "block": block_ms})
        self._rowcount(LOGIN_FORGET, {"cutoff": now - 2 * window_ms, "now": now, "login_keys": LOGIN_KEYS})

    # -- leases ------------------------------------------------------------------------------

    def lease_acquire(self, name: str, holder: str, now: int, ttl_ms: int, replacing: str = "") -> bool:
        params = {"name": name, "holder": holder, "expires_at": now + ttl_ms, "now": now, "replacing": replacing}
        return bool(self._fetchall(LEASE_ACQUIRE, params))

    def lease_holder(self, name: str) -> LeaseHolder | None:
        rows = self._fetchall(LEASE_HOLDER, (name,))
        return LeaseHolder(rows[0][0], int(rows[0][1])) if rows else None

    def lease_release(self, name: str, holder: str) -> bool:
        return self._rowcount(LEASE_RELEASE, (name, holder)) > 0
