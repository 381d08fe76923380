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

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

from django.core.checks import CheckMessage, Error
from django.db.backends.sqlite3.base import DatabaseWrapper

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
MIN_VERSION = (3, 35, 0)  # RETURNING
SNAPSHOT_SELECT_LIST = ", ".join(SNAPSHOT_COLUMNS)

# --- produce ----------------------------------------------------------------------------------

INSERT = f"""
INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                      processing_started_at, failure_reason, received_at, updated_at, expires_after)
VALUES (?, ?, ?, ?, {READY}, 0, ?, NULL, NULL, ?, ?, ?)"""

# Many rows in one statement: the rows travel as one JSON array that SQLite unpacks in C, binding a
# parameter once instead of eight times a row. A batch of one queue and one due time (the usual
# ``send_many``) sends just [id, content] pairs; ~1.5x faster than ``executemany`` in all.
INSERT_JSON = f"""
INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                      processing_started_at, failure_reason, received_at, updated_at, expires_after)
SELECT value->>0, value->>1, :is_dlq, value->>2, {READY}, 0, value->>3, NULL, NULL, value->>4, value->>4,
       value->>5
FROM json_each(:rows)"""

INSERT_JSON_SHARED = f"""
INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                      processing_started_at, failure_reason, received_at, updated_at, expires_after)
SELECT value->>0, :queue, :is_dlq, value->>1, {READY}, 0, :process_after, NULL, NULL, :received_at,
       :received_at, :expires_after
FROM json_each(:rows)"""

# --- consume ----------------------------------------------------------------------------------

CLAIM = f"""
UPDATE messages
SET status = {PROCESSING},
    attempts = attempts + 1,
    processing_started_at = MAX(:now, updated_at + 1),
    updated_at = MAX(:now, updated_at + 1)
WHERE id = (
    SELECT id FROM messages INDEXED BY idx_queue_ready_for_consuming
    WHERE queue = :queue AND status = {READY} AND process_after <= :now
    ORDER BY received_at
    LIMIT 1
)
RETURNING id, queue, content, attempts, processing_started_at"""

CLAIM_MANY = f"""
UPDATE messages
SET status = {PROCESSING},
    attempts = attempts + 1,
    processing_started_at = MAX(:now, updated_at + 1),
    updated_at = MAX(:now, updated_at + 1)
WHERE id IN (
    SELECT id FROM messages INDEXED BY idx_queue_ready_for_consuming
    WHERE queue = :queue AND status = {READY} AND process_after <= :now
    ORDER BY received_at
    LIMIT :limit
)
RETURNING id, queue, content, attempts, processing_started_at, received_at"""

ACK = f"""
DELETE FROM messages WHERE id = ? AND queue = ? AND status = {PROCESSING} AND processing_started_at = ?"""

# The backoff table is bound as a JSON array: element ``attempts - 1``, or the last one past its end.
# A NULL :error keeps the last_error recorded by an earlier attempt.
NACK = f"""
UPDATE messages
SET status = CASE WHEN attempts >= :max THEN {FAILED} ELSE {READY} END,
    process_after = :now + COALESCE(:backoff ->> (attempts - 1), :backoff_last),
    processing_started_at = NULL,
    updated_at = MAX(:now, updated_at),
    last_error = COALESCE(:error, last_error)
WHERE id = :id AND queue = :queue AND status = {PROCESSING} AND processing_started_at = :receipt"""

# The reason is set now, so the failed job can tell a consumer's fatal error from running out of
# attempts.
FAIL = f"""
UPDATE messages
SET status = {FAILED}, processing_started_at = NULL, updated_at = MAX(:now, updated_at),
    failure_reason = '{FATAL}', last_error = COALESCE(:error, last_error)
WHERE id = :id AND queue = :queue AND status = {PROCESSING} AND processing_started_at = :receipt"""

RELEASE = f"""
UPDATE messages
SET status = {READY}, attempts = attempts - 1, processing_started_at = NULL,
    updated_at = MAX(?, updated_at)
WHERE id = ? AND queue = ? AND status = {PROCESSING} AND processing_started_at = ?"""

EXTEND = f"""
UPDATE messages
SET processing_started_at = MAX(:now, updated_at + 1), updated_at = MAX(:now, updated_at + 1)
WHERE id = :id AND queue = :queue AND status = {PROCESSING} AND processing_started_at = :receipt
RETURNING processing_started_at"""

# --- wake-ups and health ----------------------------------------------------------------------

HAS_DUE = f"""
SELECT COUNT(*) FROM (SELECT 1 FROM messages INDEXED BY idx_queue_ready_for_consuming
                      WHERE queue = ? AND status = {READY} AND process_after <= ? LIMIT ?)"""

DATA_VERSION = "PRAGMA data_version"

PING = "SELECT 1 FROM messages LIMIT 1"

# --- admin: dead-letter queues ----------------------------------------------------------------

REQUEUE_ALL = f"""
UPDATE messages
SET queue = :dest, is_dlq = 0, status = {READY}, attempts = 0, process_after = :now,
    processing_started_at = NULL, failure_reason = NULL, updated_at = MAX(:now, updated_at),
    expires_after = :now + :ttl
WHERE queue = :queue AND is_dlq = 1 AND status != {PROCESSING}"""

REQUEUE_ONE = f"""
UPDATE messages
SET queue = :dest, is_dlq = 0, status = {READY}, attempts = 0, process_after = :now,
    processing_started_at = NULL, failure_reason = NULL, updated_at = MAX(:now, updated_at),
    expires_after = :now + :ttl
WHERE queue = :queue AND is_dlq = 1 AND status != {PROCESSING} AND id = :id"""

DELETE_DLQ_ALL = "DELETE FROM messages WHERE queue = ? AND is_dlq = 1"
DELETE_DLQ_ONE = "DELETE FROM messages WHERE id = ? AND queue = ? AND is_dlq = 1"

# --- background jobs (each skips messages in processing) --------------------------------------

MOVE_EXPIRED_TO_DLQ = f"""
UPDATE messages
SET attempts = 0, status = {READY}, queue = queue || '{DLQ_SUFFIX}', is_dlq = 1, process_after = :now,
    processing_started_at = NULL, failure_reason = '{EXPIRED}',
    updated_at = MAX(:now, updated_at), expires_after = :now + :ttl
WHERE id IN (SELECT id FROM messages INDEXED BY idx_expired
             WHERE status IN ({READY}, {FAILED}) AND is_dlq = 0 AND expires_after < :now LIMIT :batch)"""

MOVE_FAILED_TO_DLQ = f"""
UPDATE messages
SET attempts = 0, status = {READY}, queue = queue || '{DLQ_SUFFIX}', is_dlq = 1, process_after = :now,
    processing_started_at = NULL, failure_reason = COALESCE(failure_reason, '{MAX_ATTEMPTS}'),
    updated_at = MAX(:now, updated_at), expires_after = :now + :ttl
WHERE id IN (SELECT id FROM messages INDEXED BY idx_expired
             WHERE status = {FAILED} AND is_dlq = 0 LIMIT :batch)"""

RECOVER_STALE = f"""
UPDATE messages
SET status = CASE WHEN attempts >= :max THEN {FAILED} ELSE {READY} END, process_after = :now,
    processing_started_at = NULL, updated_at = MAX(:now, updated_at)
WHERE id IN (SELECT id FROM messages INDEXED BY idx_expired
             WHERE status = {PROCESSING} AND processing_started_at < :cutoff LIMIT :batch)"""

DELETE_EXPIRED_DLQ = f"""
DELETE FROM messages WHERE id IN (SELECT id FROM messages INDEXED BY idx_expired
    WHERE status IN ({READY}, {FAILED}) AND is_dlq = 1 AND expires_after < :now LIMIT :batch)"""

DELETE_FAILED_DLQ = f"""
DELETE FROM messages WHERE id IN (SELECT id FROM messages INDEXED BY idx_expired
    WHERE status = {FAILED} AND is_dlq = 1 LIMIT :batch)"""

COUNT_EXPIRED = f"""
SELECT COUNT(*) FROM messages WHERE status IN ({READY}, {FAILED}) AND is_dlq = ? AND expires_after < ?"""

COUNT_FAILED = f"SELECT COUNT(*) FROM messages WHERE status = {FAILED} AND is_dlq = ?"

COUNT_STALE = f"SELECT COUNT(*) FROM messages WHERE status = {PROCESSING} AND processing_started_at < ?"

OPTIMIZE = "PRAGMA optimize"

QUEUE_DEPTHS = "SELECT queue, is_dlq, COUNT(*) FROM messages GROUP BY queue, is_dlq ORDER BY queue"

# --- bulk: staged writes (exactly-once Spark jobs) and snapshot reads -------------------------
#
# A staged row waits in ``forq_staged`` (one B-tree keyed by token, message_id) until its job
# publishes it into ``messages`` with one INSERT … SELECT, or discards it.

STAGE = """
INSERT INTO forq_staged (token, message_id, queue, content, process_after, staged_at)
VALUES (?, ?, ?, ?, ?, ?)"""

STAGE_JSON = """
INSERT INTO forq_staged (token, message_id, queue, content, process_after, staged_at)
SELECT :token, value->>0, :queue, value->>1, value->>2, :now FROM json_each(:rows)"""

PUBLISH = f"""
INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                      processing_started_at, failure_reason, received_at, updated_at, expires_after)
SELECT message_id, queue, 0, content, {READY}, 0, MAX(process_after, :now - :tolerance), NULL, NULL,
       :now, :now, MAX(process_after, :now) + :ttl
FROM forq_staged WHERE token = :token AND queue = :queue"""

UNSTAGE = "DELETE FROM forq_staged WHERE token = :token AND queue = :queue"

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

# --- API-key throttle (every process and host shares it) --------------------------------------

AUTH_FAILED = """
INSERT INTO forq_auth_throttle (address, failures, window_start, blocked_until)
VALUES (:address, 1, :now, CASE WHEN :max <= 1 THEN :now + :block ELSE 0 END)
ON CONFLICT (address) DO UPDATE SET
    failures = CASE WHEN window_start <= :now - :window THEN 1 ELSE failures + 1 END,
    window_start = CASE WHEN window_start <= :now - :window THEN :now ELSE window_start END,
    blocked_until = CASE
        WHEN (CASE WHEN window_start <= :now - :window THEN 1 ELSE failures + 1 END) >= :max
        THEN :now + :block ELSE blocked_until END
RETURNING blocked_until"""

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


def _holds_nul(rows: Sequence[Sequence[Any]], index: int) -> bool:
    """Whether a string at ``index`` of any row has a NUL: SQLite's JSON text ends there, so such
    batches are bound row by row instead."""
    return any("\x00" in r[index] for r in rows)


class SQLiteStore(Store):
    """The queue in one SQLite file (WAL): one writer at a time, any number of readers."""

    vendor: ClassVar[str] = "sqlite"
    text_holds_nul: ClassVar[bool] = True
    wakeups: ClassVar[Literal["data_version", "listen"]] = "data_version"
    default_db_threads: ClassVar[int] = 1

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

    def insert(self, rows: Sequence[NewMessage], *, is_dlq: bool = False) -> None:
        if not rows:
            return
        conn = self._conn()
        flag = 1 if is_dlq else 0
        if len(rows) == 1 or _holds_nul(rows, 2):  # row by row: one row, or text JSON can't carry
            params = [(r[0], r[1], flag, r[2], r[3], r[4], r[4], r[5]) for r in rows]
            if len(params) == 1:
                conn.execute(INSERT, params[0])
            else:
                conn.executemany(INSERT, params)
            return
        _, queue, _, due, received, expires = rows[0]
        if all(r[1] == queue and r[3] == due and r[4] == received and r[5] == expires for r in rows):
            conn.execute(INSERT_JSON_SHARED, {
                "queue": queue, "is_dlq": flag, "process_after": due, "received_at": received,
                "expires_after": expires,
                "rows": json.dumps([(r[0], r[2]) for r in rows], ensure_ascii=False),
            })
        else:
            conn.execute(INSERT_JSON, {"is_dlq": flag, "rows": json.dumps(rows, ensure_ascii=False)})

    # -- consume -----------------------------------------------------------------------------

    def claim(self, queue: str, now: int) -> Delivery | None:
        rows = self._conn().execute(CLAIM, {"queue": queue, "now": now}).fetchall()
        return Delivery._make(rows[0]) if rows else None

    def claim_many(self, queue: str, now: int, limit: int) -> list[Delivery]:
        rows = self._conn().execute(CLAIM_MANY, {"queue": queue, "now": now, "limit": limit}).fetchall()
        rows.sort(key=lambda r: (r[5], r[0]))  # RETURNING order is unspecified
        return [Delivery._make(r[:5]) for r in rows]

    def ack(self, queue: str, message_id: str, receipt: int) -> bool:
        return self._conn().execute(ACK, (message_id, queue, receipt)).rowcount == 1

    def ack_many(self, queue: str, deliveries: Iterable[tuple[str, int]]) -> int:
        cur = self._conn().executemany(ACK, [(mid, queue, receipt) for mid, receipt in deliveries])
        return cur.rowcount

    def nack(self, queue: str, message_id: str, receipt: int, now: int, max_attempts: int,
             backoff_ms: Sequence[int], error: str | None = None) -> bool:
        cur = self._conn().execute(NACK, {
            "max": max_attempts, "now": now, "id": message_id, "queue": queue, "receipt": receipt,
            "backoff": json.dumps([int(ms) for ms in backoff_ms]), "backoff_last": int(backoff_ms[-1]),
            "error": error,
        })
        return cur.rowcount == 1

    def fail(self, queue: str, message_id: str, receipt: int, now: int, error: str | None = None) -> bool:
        cur = self._conn().execute(FAIL, {"now": now, "id": message_id, "queue": queue, "receipt": receipt,
                                          "error": error})
        return cur.rowcount == 1

    def release(self, queue: str, message_id: str, receipt: int, now: int) -> bool:
        return self._conn().execute(RELEASE, (now, message_id, queue, receipt)).rowcount == 1

    def release_many(self, queue: str, deliveries: Iterable[tuple[str, int]], now: int) -> int:
        cur = self._conn().executemany(RELEASE, [(now, mid, queue, receipt) for mid, receipt in deliveries])
        return cur.rowcount

    def extend(self, queue: str, message_id: str, receipt: int, now: int) -> int | None:
        rows = self._conn().execute(
            EXTEND, {"now": now, "id": message_id, "queue": queue, "receipt": receipt}
        ).fetchall()
        return int(rows[0][0]) if rows else None

    # -- wake-ups and health -----------------------------------------------------------------

    def has_due(self, queues: Sequence[str], now: int, limit: int) -> dict[str, int]:
        conn = self._conn()
        out = {}
        for queue in queues:
            ((n,),) = conn.execute(HAS_DUE, (queue, now, limit)).fetchall()
            if n:
                out[queue] = n
        return out

    def data_version(self) -> int:
        """Changes when another connection commits to the database file (cheap: no I/O)."""
        return int(self._conn().execute(DATA_VERSION).fetchone()[0])

    def ping(self) -> None:
        self._conn().execute(PING).fetchall()

    # -- admin: dead-letter queues -----------------------------------------------------------

    def requeue(self, dlq: str, message_id: str | None, now: int, queue_ttl_ms: int) -> int:
        params: dict[str, Any] = {"dest": dlq.removesuffix(DLQ_SUFFIX), "now": now, "ttl": queue_ttl_ms,
                                  "queue": dlq}
        if message_id is None:
            return self._conn().execute(REQUEUE_ALL, params).rowcount
        return self._conn().execute(REQUEUE_ONE, {**params, "id": message_id}).rowcount

    def delete_dlq(self, dlq: str, message_id: str | None) -> int:
        if message_id is None:
            return self._conn().execute(DELETE_DLQ_ALL, (dlq,)).rowcount
        return self._conn().execute(DELETE_DLQ_ONE, (message_id, dlq)).rowcount

    # -- background jobs ---------------------------------------------------------------------

    def move_expired_to_dlq(self, now: int, dlq_ttl_ms: int, batch: int = BATCH) -> int:
        return self._batched(MOVE_EXPIRED_TO_DLQ, {"now": now, "ttl": dlq_ttl_ms}, batch)

    def move_failed_to_dlq(self, now: int, dlq_ttl_ms: int, batch: int = BATCH) -> int:
        return self._batched(MOVE_FAILED_TO_DLQ, {"now": now, "ttl": dlq_ttl_ms}, batch)

    def recover_stale(self, now: int, visibility_ms: int, max_attempts: int, batch: int = BATCH) -> int:
        return self._batched(
            RECOVER_STALE, {"now": now, "max": max_attempts, "cutoff": now - visibility_ms}, batch
        )

    def delete_expired_dlq(self, now: int, batch: int = BATCH) -> int:
        return self._batched(DELETE_EXPIRED_DLQ, {"now": now}, batch)

    def delete_failed_dlq(self, batch: int = BATCH) -> int:
        return self._batched(DELETE_FAILED_DLQ, {}, batch)

    def count_expired(self, now: int, is_dlq: bool) -> int:
        return int(self._conn().execute(COUNT_EXPIRED, (1 if is_dlq else 0, now)).fetchone()[0])

    def count_failed(self, is_dlq: bool) -> int:
        return int(self._conn().execute(COUNT_FAILED, (1 if is_dlq else 0,)).fetchone()[0])

    def count_stale(self, now: int, visibility_ms: int) -> int:
        return int(self._conn().execute(COUNT_STALE, (now - visibility_ms,)).fetchone()[0])

    def optimize(self) -> None:
        self._conn().execute(OPTIMIZE)

    def queue_depths(self) -> list[QueueDepth]:
        """Every queue's depth (a covering index scan)."""
        return [QueueDepth(q, bool(d), n) for q, d, n in self._conn().execute(QUEUE_DEPTHS)]

    # -- bulk: staged writes and snapshot reads ----------------------------------------------

    def stage(self, token: str, queue: str, rows: Sequence[StagedMessage], now: int) -> None:
        conn = self._conn()
        if _holds_nul(rows, 1):
            conn.executemany(STAGE, [(token, r[0], queue, r[1], r[2], now) for r in rows])
        else:
            conn.execute(STAGE_JSON, {"token": token, "queue": queue, "now": now,
                                      "rows": json.dumps(rows, ensure_ascii=False)})

    def publish_staged(self, staged: Sequence[Staged], now: int, queue_ttl_ms: int,
                       past_tolerance_ms: int) -> dict[str, int]:
        conn = self._conn()
        published: dict[str, int] = {}
        for token, queue in staged:
            params = {"token": token, "queue": queue, "now": now, "ttl": queue_ttl_ms,
                      "tolerance": past_tolerance_ms}
            n = conn.execute(PUBLISH, params).rowcount
            conn.execute(UNSTAGE, params)
            published[queue] = published.get(queue, 0) + n
        return published

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
        return self._count_failure(LOGIN_FORGET, key, now, window_ms, max_failures, block_ms)

    # -- leases ------------------------------------------------------------------------------

    def lease_acquire(self, name: str, holder: str, now: int, ttl_ms: int, replacing: str = "") -> bool:
        params = {"name": name, "holder": holder, "expires_at": now + ttl_ms, "now": now, "replacing": replacing}
        return bool(self._conn().execute(LEASE_ACQUIRE, params).fetchall())

    def lease_holder(self, name: str) -> LeaseHolder | None:
        row = self._conn().execute(LEASE_HOLDER, (name,)).fetchone()
        return LeaseHolder(row[0], int(row[1])) if row else None

    def lease_release(self, name: str, holder: str) -> bool:
        return self._conn().execute(LEASE_RELEASE, (name, holder)).rowcount > 0
