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
``prepare_threshold`` allows it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Literal

import psycopg

from ..vocab import DLQ_SUFFIX, SNAPSHOT_COLUMNS, FailureReason, Status, is_dlq
from .base import (
    BATCH,
    Delivery,
    LeaseHolder,
    NewMessage,
    QueueDepth,
    SnapshotBounds,
    SnapshotRow,
    Staged,
    StagedMessage,
    Store,
)

READY, PROCESSING, FAILED = int(Status.READY), int(Status.PROCESSING), int(Status.FAILED)
EXPIRED = FailureReason.MESSAGE_EXPIRED.value
MAX_ATTEMPTS = FailureReason.MAX_ATTEMPTS_REACHED.value
FATAL = FailureReason.FATAL_ERROR.value
CHANNEL = "forq"  # the LISTEN/NOTIFY channel; the payload is the queue name
SNAPSHOT_SELECT_LIST = ", ".join(SNAPSHOT_COLUMNS)

# --- produce ----------------------------------------------------------------------------------

INSERT = f"""
WITH ins AS (
    INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                          processing_started_at, failure_reason, received_at, updated_at, expires_after)
    SELECT i, %(queue)s, %(is_dlq)s, c, {READY}, 0, p, NULL, NULL, r, r, e
    FROM unnest(%(ids)s::text[], %(contents)s::text[], %(process_after)s::bigint[],
                %(received_at)s::bigint[], %(expires_after)s::bigint[]) AS t(i, c, p, r, e)
)
SELECT pg_notify('{CHANNEL}', %(queue)s)"""

INSERT_ONE = f"""
WITH ins AS (
    INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                          processing_started_at, failure_reason, received_at, updated_at, expires_after)
    VALUES (%(id)s, %(queue)s, %(is_dlq)s, %(content)s, {READY}, 0, %(process_after)s, NULL, NULL,
            %(received_at)s, %(received_at)s, %(expires_after)s)
)
SELECT pg_notify('{CHANNEL}', %(queue)s)"""

# --- consume ----------------------------------------------------------------------------------

# The row is picked and locked by the CTE (FOR UPDATE SKIP LOCKED: a row another consumer is taking
# right now is passed over, not waited for), then updated, in one statement.
CLAIM = f"""
WITH picked AS (
    SELECT id FROM messages
    WHERE queue = %(queue)s AND status = {READY} AND process_after <= %(now)s
    ORDER BY received_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE messages AS m
SET status = {PROCESSING},
    attempts = m.attempts + 1,
    processing_started_at = GREATEST(%(now)s, m.updated_at + 1),
    updated_at = GREATEST(%(now)s, m.updated_at + 1)
FROM picked
WHERE m.id = picked.id
RETURNING m.id, m.queue, m.content, m.attempts, m.processing_started_at, m.received_at"""

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
SET status = CASE WHEN attempts >= %(max)s THEN {FAILED} ELSE {READY} END,
    process_after = %(now)s + COALESCE((%(backoff)s::bigint[])[attempts], %(backoff_last)s::bigint),
    processing_started_at = NULL,
    updated_at = GREATEST(%(now)s, updated_at),
    last_error = COALESCE(%(error)s::text, last_error)
WHERE id = %(id)s AND queue = %(queue)s AND status = {PROCESSING} AND processing_started_at = %(receipt)s"""

# The reason is set now, so the failed job can tell a consumer's fatal error from running out of
# attempts.
FAIL = f"""
UPDATE messages
SET status = {FAILED}, processing_started_at = NULL, updated_at = GREATEST(%(now)s::bigint, updated_at),
    failure_reason = '{FATAL}', last_error = COALESCE(%(error)s::text, last_error)
WHERE id = %(id)s AND queue = %(queue)s AND status = {PROCESSING} AND processing_started_at = %(receipt)s"""

RELEASE = f"""
WITH r AS (
    UPDATE messages
    SET status = {READY}, attempts = attempts - 1, processing_started_at = NULL,
        updated_at = GREATEST(%(now)s::bigint, updated_at)
    WHERE id = %(id)s AND queue = %(queue)s AND status = {PROCESSING} AND processing_started_at = %(receipt)s
    RETURNING queue
)
SELECT pg_notify('{CHANNEL}', queue) FROM r"""

RELEASE_MANY = f"""
WITH r AS (
    UPDATE messages AS m
    SET status = {READY}, attempts = m.attempts - 1, processing_started_at = NULL,
        updated_at = GREATEST(%(now)s::bigint, m.updated_at)
    FROM unnest(%(ids)s::text[], %(receipts)s::bigint[]) AS d(id, receipt)
    WHERE m.id = d.id AND m.queue = %(queue)s AND m.status = {PROCESSING}
      AND m.processing_started_at = d.receipt
    RETURNING 1
), n AS (SELECT COUNT(*) AS n FROM r)
SELECT n, CASE WHEN n > 0 THEN pg_notify('{CHANNEL}', %(queue)s) END FROM n"""

EXTEND = f"""
UPDATE messages
SET processing_started_at = GREATEST(%(now)s, updated_at + 1),
    updated_at = GREATEST(%(now)s, updated_at + 1)
WHERE id = %(id)s AND queue = %(queue)s AND status = {PROCESSING} AND processing_started_at = %(receipt)s
RETURNING processing_started_at"""

# --- wake-ups and health ----------------------------------------------------------------------

HAS_DUE = f"""
SELECT q.name, c.n
FROM unnest(%(queues)s::text[]) AS q(name)
CROSS JOIN LATERAL (
    SELECT COUNT(*) AS n FROM (
        SELECT 1 FROM messages
        WHERE queue = q.name AND status = {READY} AND process_after <= %(now)s
        LIMIT %(limit)s
    ) AS due
) AS c
WHERE c.n > 0"""

LISTEN = f"LISTEN {CHANNEL}"

PING = "SELECT 1 FROM messages LIMIT 1"

# --- admin: dead-letter queues ----------------------------------------------------------------

REQUEUE_ALL = f"""
WITH moved AS (
    UPDATE messages
    SET queue = %(dest)s, is_dlq = FALSE, status = {READY}, attempts = 0, process_after = %(now)s,
        processing_started_at = NULL, failure_reason = NULL, updated_at = GREATEST(%(now)s, updated_at),
        expires_after = %(now)s + %(ttl)s
    WHERE queue = %(queue)s AND is_dlq AND status != {PROCESSING}
    RETURNING 1
), n AS (SELECT COUNT(*) AS n FROM moved)
SELECT n, CASE WHEN n > 0 THEN pg_notify('{CHANNEL}', %(dest)s) END FROM n"""

REQUEUE_ONE = f"""
WITH moved AS (
    UPDATE messages
    SET queue = %(dest)s, is_dlq = FALSE, status = {READY}, attempts = 0, process_after = %(now)s,
        processing_started_at = NULL, failure_reason = NULL, updated_at = GREATEST(%(now)s, updated_at),
        expires_after = %(now)s + %(ttl)s
    WHERE queue = %(queue)s AND is_dlq AND status != {PROCESSING} AND id = %(id)s
    RETURNING 1
), n AS (SELECT COUNT(*) AS n FROM moved)
SELECT n, CASE WHEN n > 0 THEN pg_notify('{CHANNEL}', %(dest)s) END FROM n"""

DELETE_DLQ_ALL = "DELETE FROM messages WHERE queue = %s AND is_dlq"
DELETE_DLQ_ONE = "DELETE FROM messages WHERE id = %s AND queue = %s AND is_dlq"

# --- background jobs (each skips messages in processing, and rows another job holds) ----------

# A move to the DLQ wakes a consumer waiting on the DLQ.
MOVE_EXPIRED_TO_DLQ = f"""
WITH moved AS (
    UPDATE messages
    SET attempts = 0, status = {READY}, queue = queue || '{DLQ_SUFFIX}', is_dlq = TRUE,
        process_after = %(now)s, processing_started_at = NULL, failure_reason = '{EXPIRED}',
        updated_at = GREATEST(%(now)s, updated_at), expires_after = %(now)s + %(ttl)s
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
    SET attempts = 0, status = {READY}, queue = queue || '{DLQ_SUFFIX}', is_dlq = TRUE,
        process_after = %(now)s, processing_started_at = NULL,
        failure_reason = COALESCE(failure_reason, '{MAX_ATTEMPTS}'),  -- a consumer's fatal_error stays
        updated_at = GREATEST(%(now)s, updated_at), expires_after = %(now)s + %(ttl)s
    WHERE id IN (SELECT id FROM messages
                 WHERE status = {FAILED} AND NOT is_dlq
                 LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
    RETURNING queue
), woken AS (
    SELECT pg_notify('{CHANNEL}', queue) FROM (SELECT DISTINCT queue FROM moved) AS q
)
SELECT (SELECT COUNT(*) FROM moved), (SELECT COUNT(*) FROM woken)"""

RECOVER_STALE = f"""
WITH r AS (
    UPDATE messages
    SET status = CASE WHEN attempts >= %(max)s THEN {FAILED} ELSE {READY} END, process_after = %(now)s,
        processing_started_at = NULL, updated_at = GREATEST(%(now)s, updated_at)
    WHERE id IN (SELECT id FROM messages
                 WHERE status = {PROCESSING} AND processing_started_at < %(cutoff)s
                 LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
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

COUNT_STALE = f"SELECT COUNT(*) FROM messages WHERE status = {PROCESSING} AND processing_started_at < %s"

OPTIMIZE = "ANALYZE messages"

QUEUE_DEPTHS = "SELECT queue, is_dlq, COUNT(*) FROM messages GROUP BY queue, is_dlq ORDER BY queue"

# --- bulk: staged writes (exactly-once Spark jobs) and snapshot reads -------------------------
#
# A staged row waits in ``forq_staged`` (keyed by token, message_id) until its job publishes it
# into ``messages`` with one statement, or discards it.

STAGE = """
INSERT INTO forq_staged (token, message_id, queue, content, process_after, staged_at)
SELECT %(token)s, i, %(queue)s, c, p, %(now)s
FROM unnest(%(ids)s::text[], %(contents)s::text[], %(process_after)s::bigint[]) AS t(i, c, p)"""

PUBLISH = f"""
WITH staged AS (
    DELETE FROM forq_staged WHERE token = %(token)s AND queue = %(queue)s
    RETURNING message_id, content, process_after
), published AS (
    INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                          processing_started_at, failure_reason, received_at, updated_at, expires_after)
    SELECT message_id, %(queue)s, FALSE, content, {READY}, 0,
           GREATEST(process_after, %(now)s - %(tolerance)s), NULL, NULL, %(now)s, %(now)s,
           GREATEST(process_after, %(now)s) + %(ttl)s
    FROM staged ORDER BY message_id
    RETURNING 1
), n AS (SELECT COUNT(*) AS n FROM published)
SELECT n, CASE WHEN n > 0 THEN pg_notify('{CHANNEL}', %(queue)s) END FROM n"""

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

# --- API-key throttle (every process and host shares it) --------------------------------------

AUTH_FAILED = """
INSERT INTO forq_auth_throttle (address, failures, window_start, blocked_until)
VALUES (%(address)s, 1, %(now)s, CASE WHEN %(max)s <= 1 THEN %(now)s + %(block)s ELSE 0 END)
ON CONFLICT (address) DO UPDATE SET
    failures = CASE WHEN forq_auth_throttle.window_start <= %(now)s - %(window)s THEN 1
                    ELSE forq_auth_throttle.failures + 1 END,
    window_start = CASE WHEN forq_auth_throttle.window_start <= %(now)s - %(window)s THEN %(now)s
                        ELSE forq_auth_throttle.window_start END,
    blocked_until = CASE
        WHEN (CASE WHEN forq_auth_throttle.window_start <= %(now)s - %(window)s THEN 1
                   ELSE forq_auth_throttle.failures + 1 END) >= %(max)s
        THEN %(now)s + %(block)s ELSE forq_auth_throttle.blocked_until END
RETURNING blocked_until"""

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

Params = Sequence[Any] | dict[str, Any] | None


class PostgreSQLStore(Store):
    """The queue in a PostgreSQL database shared by any number of hosts."""

    vendor: ClassVar[str] = "postgresql"
    text_holds_nul: ClassVar[bool] = False  # PostgreSQL text cannot contain U+0000
    wakeups: ClassVar[Literal["data_version", "listen"]] = "listen"
    default_db_threads: ClassVar[int] = 4

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

    def insert(self, rows: Sequence[NewMessage], *, is_dlq: bool = False) -> None:
        """One statement per queue (rows are batched through arrays), which also notifies
        listeners — on commit of the caller's transaction, if there is one."""
        if not rows:
            return
        by_queue: dict[str, list[NewMessage]] = {}
        for r in rows:
            by_queue.setdefault(r[1], []).append(r)
        for queue, group in by_queue.items():
            if len(group) == 1:
                r = group[0]
                self._fetchall(INSERT_ONE, {
                    "id": r[0], "queue": queue, "is_dlq": bool(is_dlq), "content": r[2],
                    "process_after": r[3], "received_at": r[4], "expires_after": r[5],
                })
            else:
                self._fetchall(INSERT, {
                    "queue": queue, "is_dlq": bool(is_dlq),
                    "ids": [r[0] for r in group], "contents": [r[2] for r in group],
                    "process_after": [r[3] for r in group], "received_at": [r[4] for r in group],
                    "expires_after": [r[5] for r in group],
                })

    # -- consume -----------------------------------------------------------------------------

    def claim(self, queue: str, now: int) -> Delivery | None:
        rows = self._fetchall(CLAIM, {"queue": queue, "now": now, "limit": 1})
        return Delivery._make(rows[0][:5]) if rows else None

    def claim_many(self, queue: str, now: int, limit: int) -> list[Delivery]:
        rows = self._fetchall(CLAIM, {"queue": queue, "now": now, "limit": limit})
        rows.sort(key=lambda r: (r[5], r[0]))  # RETURNING order is unspecified
        return [Delivery._make(r[:5]) for r in rows]

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
             backoff_ms: Sequence[int], error: str | None = None) -> bool:
        return self._rowcount(NACK, {
            "max": max_attempts, "now": now, "id": message_id, "queue": queue, "receipt": receipt,
            "backoff": [int(ms) for ms in backoff_ms], "backoff_last": int(backoff_ms[-1]),
            "error": error,
        }) == 1

    def fail(self, queue: str, message_id: str, receipt: int, now: int, error: str | None = None) -> bool:
        return self._rowcount(FAIL, {"now": now, "id": message_id, "queue": queue, "receipt": receipt,
                                     "error": error}) == 1

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

    def extend(self, queue: str, message_id: str, receipt: int, now: int) -> int | None:
        rows = self._fetchall(EXTEND, {"now": now, "id": message_id, "queue": queue, "receipt": receipt})
        return int(rows[0][0]) if rows else None

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
        for _ in conn.notifies(timeout=0):
            count += 1
        _received[conn] = count
        return count

    def poll_interval(self, default_s: float) -> float:
        """Each check only reads the notifications already on the socket, so the SQLite interval
        is fine."""
        return default_s

    def ping(self) -> None:
        self._fetchall(PING)

    # -- admin: dead-letter queues -----------------------------------------------------------

    def requeue(self, dlq: str, message_id: str | None, now: int, queue_ttl_ms: int) -> int:
        params: dict[str, Any] = {"dest": dlq.removesuffix(DLQ_SUFFIX), "now": now, "ttl": queue_ttl_ms,
                                  "queue": dlq}
        if message_id is None:
            return int(self._fetchall(REQUEUE_ALL, params)[0][0])
        return int(self._fetchall(REQUEUE_ONE, {**params, "id": message_id})[0][0])

    def delete_dlq(self, dlq: str, message_id: str | None) -> int:
        if message_id is None:
            return self._rowcount(DELETE_DLQ_ALL, (dlq,))
        return self._rowcount(DELETE_DLQ_ONE, (message_id, dlq))

    # -- background jobs ---------------------------------------------------------------------

    def move_expired_to_dlq(self, now: int, dlq_ttl_ms: int, batch: int = BATCH) -> int:
        return self._batched_counted(MOVE_EXPIRED_TO_DLQ, {"now": now, "ttl": dlq_ttl_ms}, batch)

    def move_failed_to_dlq(self, now: int, dlq_ttl_ms: int, batch: int = BATCH) -> int:
        return self._batched_counted(MOVE_FAILED_TO_DLQ, {"now": now, "ttl": dlq_ttl_ms}, batch)

    def recover_stale(self, now: int, visibility_ms: int, max_attempts: int, batch: int = BATCH) -> int:
        return self._batched_counted(
            RECOVER_STALE, {"now": now, "max": max_attempts, "cutoff": now - visibility_ms}, batch
        )

    def delete_expired_dlq(self, now: int, batch: int = BATCH) -> int:
        return self._batched(DELETE_EXPIRED_DLQ, {"now": now}, batch)

    def delete_failed_dlq(self, batch: int = BATCH) -> int:
        return self._batched(DELETE_FAILED_DLQ, {}, batch)

    def count_expired(self, now: int, is_dlq: bool) -> int:
        return int(self._fetchall(COUNT_EXPIRED, (bool(is_dlq), now))[0][0])

    def count_failed(self, is_dlq: bool) -> int:
        return int(self._fetchall(COUNT_FAILED, (bool(is_dlq),))[0][0])

    def count_stale(self, now: int, visibility_ms: int) -> int:
        return int(self._fetchall(COUNT_STALE, (now - visibility_ms,))[0][0])

    def optimize(self) -> None:
        """SQLite's ``PRAGMA optimize`` (fresh planner statistics): ``ANALYZE messages``, a sample read
        that blocks no writer. Autovacuum does it too (the migration tunes it for this table), but a
        server with autovacuum off would otherwise plan claims with statistics from an empty table."""
        self._execute(OPTIMIZE).close()

    def queue_depths(self) -> list[QueueDepth]:
        return [QueueDepth(q, bool(d), int(n)) for q, d, n in self._fetchall(QUEUE_DEPTHS)]

    # -- bulk: staged writes and snapshot reads ----------------------------------------------

    def stage(self, token: str, queue: str, rows: Sequence[StagedMessage], now: int) -> None:
        self._rowcount(STAGE, {
            "token": token, "queue": queue, "now": now, "ids": [r[0] for r in rows],
            "contents": [r[1] for r in rows], "process_after": [r[2] for r in rows],
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
        return self._count_failure(LOGIN_FORGET, key, now, window_ms, max_failures, block_ms)

    # -- leases ------------------------------------------------------------------------------

    def lease_acquire(self, name: str, holder: str, now: int, ttl_ms: int, replacing: str = "") -> bool:
        params = {"name": name, "holder": holder, "expires_at": now + ttl_ms, "now": now, "replacing": replacing}
        return bool(self._fetchall(LEASE_ACQUIRE, params))

    def lease_holder(self, name: str) -> LeaseHolder | None:
        rows = self._fetchall(LEASE_HOLDER, (name,))
        return LeaseHolder(rows[0][0], int(rows[0][1])) if rows else None

    def lease_release(self, name: str, holder: str) -> bool:
        return self._rowcount(LEASE_RELEASE, (name, holder)) > 0
