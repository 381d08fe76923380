"""Every SQL statement of the queue, for SQLite. Nothing else in forqapp writes SQL for SQLite.

Each function takes a DB-API connection (``sqlite3.Connection`` in autocommit mode, as Django keeps
it) and plain values; it knows nothing of HTTP, settings or Django. Every write is one statement, so
it is atomic on its own and takes SQLite's write lock up front (a write statement never starts as a
read and upgrades); several statements that must commit together run inside the caller's
``transaction.atomic()``, which forqapp's SQLite settings make ``BEGIN IMMEDIATE``.

Receipts: a delivery is named by the ``processing_started_at`` the claim wrote. The claim makes it
strictly greater than the row's ``updated_at``, and every write keeps ``updated_at`` from going
back, so a message's successive deliveries always have distinct, growing receipts, even with clocks
that step backwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from ._sql import backoff_case

READY, PROCESSING, FAILED = 0, 1, 2
DLQ_SUFFIX = "-dlq"
MAX_ATTEMPTS_REACHED = "max_attempts_reached"
MESSAGE_EXPIRED = "message_expired"
FATAL_ERROR = "fatal_error"  # forqapp's own: a consumer failed the message (FatalError / fail())
TEXT_HOLDS_NUL = True

Row = tuple  # (id, queue, content, process_after, received_at, expires_after)

_INSERT = """
INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                      processing_started_at, failure_reason, received_at, updated_at, expires_after)
VALUES (?, ?, ?, ?, 0, 0, ?, NULL, NULL, ?, ?, ?)"""

# Many rows in one statement: the rows travel as one JSON array that SQLite unpacks in C, binding a
# parameter once instead of eight times a row. A batch of one queue and one due time (the usual
# ``send_many``) sends just [id, content] pairs; ~1.5x faster than ``executemany`` in all.
_INSERT_JSON = """
INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                      processing_started_at, failure_reason, received_at, updated_at, expires_after)
SELECT value->>0, value->>1, :is_dlq, value->>2, 0, 0, value->>3, NULL, NULL, value->>4, value->>4,
       value->>5
FROM json_each(:rows)"""

_INSERT_JSON_SHARED = """
INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                      processing_started_at, failure_reason, received_at, updated_at, expires_after)
SELECT value->>0, :queue, :is_dlq, value->>1, 0, 0, :process_after, NULL, NULL, :received_at,
       :received_at, :expires_after
FROM json_each(:rows)"""


def _holds_nul(rows: Sequence[tuple], index: int) -> bool:
    """Whether a string at ``index`` of any row has a NUL: SQLite's JSON text ends there, so such
    batches are bound row by row instead."""
    return any("\x00" in r[index] for r in rows)


def insert(conn, rows: Sequence[Row], *, is_dlq: bool = False) -> None:
    """Insert new ready messages: ``rows`` of (id, queue, content, process_after, received_at, expires_after)."""
    flag = 1 if is_dlq else 0
    if len(rows) == 1 or _holds_nul(rows, 2):  # row by row: one row, or text JSON can't carry
        params = [(r[0], r[1], flag, r[2], r[3], r[4], r[4], r[5]) for r in rows]
        if len(params) == 1:
            conn.execute(_INSERT, params[0])
        else:
            conn.executemany(_INSERT, params)
        return
    _, queue, _, due, received, expires = rows[0]
    if all(r[1] == queue and r[3] == due and r[4] == received and r[5] == expires for r in rows):
        conn.execute(_INSERT_JSON_SHARED, {
            "queue": queue, "is_dlq": flag, "process_after": due, "received_at": received,
            "expires_after": expires, "rows": json.dumps([(r[0], r[2]) for r in rows], ensure_ascii=False),
        })
    else:
        conn.execute(_INSERT_JSON, {"is_dlq": flag, "rows": json.dumps(rows, ensure_ascii=False)})


_CLAIM = """
UPDATE messages
SET status = 1,
    attempts = attempts + 1,
    processing_started_at = MAX(:now, updated_at + 1),
    updated_at = MAX(:now, updated_at + 1)
WHERE id = (
    SELECT id FROM messages INDEXED BY idx_queue_ready_for_consuming
    WHERE queue = :queue AND status = 0 AND process_after <= :now
    ORDER BY received_at
    LIMIT 1
)
RETURNING id, queue, content, attempts, processing_started_at"""

_CLAIM_MANY = """
UPDATE messages
SET status = 1,
    attempts = attempts + 1,
    processing_started_at = MAX(:now, updated_at + 1),
    updated_at = MAX(:now, updated_at + 1)
WHERE id IN (
    SELECT id FROM messages INDEXED BY idx_queue_ready_for_consuming
    WHERE queue = :queue AND status = 0 AND process_after <= :now
    ORDER BY received_at
    LIMIT :limit
)
RETURNING id, queue, content, attempts, processing_started_at, received_at"""


def claim(conn, queue: str, now: int):
    """Take the oldest due message of ``queue``: (id, queue, content, attempts, receipt) or None."""
    rows = conn.execute(_CLAIM, {"queue": queue, "now": now}).fetchall()
    return rows[0] if rows else None


def claim_many(conn, queue: str, now: int, limit: int) -> list:
    """Take up to ``limit`` due messages of ``queue`` at once, oldest first."""
    rows = conn.execute(_CLAIM_MANY, {"queue": queue, "now": now, "limit": limit}).fetchall()
    rows.sort(key=lambda r: (r[5], r[0]))  # RETURNING order is unspecified
    return [r[:5] for r in rows]


def ack(conn, queue: str, message_id: str, receipt: int) -> bool:
    cur = conn.execute(
        "DELETE FROM messages WHERE id = ? AND queue = ? AND status = 1 AND processing_started_at = ?",
        (message_id, queue, receipt),
    )
    return cur.rowcount == 1


def ack_many(conn, queue: str, deliveries: Iterable[tuple[str, int]]) -> int:
    cur = conn.executemany(
        "DELETE FROM messages WHERE id = ? AND queue = ? AND status = 1 AND processing_started_at = ?",
        [(mid, queue, receipt) for mid, receipt in deliveries],
    )
    return cur.rowcount



def nack(conn, queue: str, message_id: str, receipt: int, now: int, max_attempts: int,
         backoff_ms: Sequence[int], error: str | None = None) -> bool:
    """Back to ready after the backoff of its attempt number, or failed when out of attempts.
    ``error`` (the consumer's exception) replaces ``last_error``; None keeps the one recorded."""
    cur = conn.execute(
        f"""
        UPDATE messages
        SET status = CASE WHEN attempts >= :max THEN 2 ELSE 0 END,
            process_after = :now + {backoff_case(backoff_ms)},
            processing_started_at = NULL,
            updated_at = MAX(:now, updated_at),
            last_error = COALESCE(:error, last_error)
        WHERE id = :id AND queue = :queue AND status = 1 AND processing_started_at = :receipt""",
        {"max": max_attempts, "now": now, "id": message_id, "queue": queue, "receipt": receipt,
         "error": error},
    )
    return cur.rowcount == 1


def fail(conn, queue: str, message_id: str, receipt: int, now: int, error: str | None = None) -> bool:
    """Fail a message at once, whatever its attempts (a consumer's fatal error). Its failure_reason
    (``fatal_error``) is set now, so the failed job can tell it from running out of attempts;
    ``error`` replaces ``last_error`` (None keeps the one recorded)."""
    cur = conn.execute(
        """
        UPDATE messages SET status = 2, processing_started_at = NULL, updated_at = MAX(?, updated_at),
                            failure_reason = ?, last_error = COALESCE(?, last_error)
        WHERE id = ? AND queue = ? AND status = 1 AND processing_started_at = ?""",
        (now, FATAL_ERROR, error, message_id, queue, receipt),
    )
    return cur.rowcount == 1


def release(conn, queue: str, message_id: str, receipt: int, now: int) -> bool:
    """Undo a claim whose message never reached a consumer: ready again, attempt not counted."""
    cur = conn.execute(
        """
        UPDATE messages
        SET status = 0, attempts = attempts - 1, processing_started_at = NULL,
            updated_at = MAX(?, updated_at)
        WHERE id = ? AND queue = ? AND status = 1 AND processing_started_at = ?""",
        (now, message_id, queue, receipt),
    )
    return cur.rowcount == 1


def extend(conn, queue: str, message_id: str, receipt: int, now: int) -> int | None:
    """Renew a delivery's lease (heartbeat). Returns the new receipt, or None if it is not current."""
    row = conn.execute(
        """
        UPDATE messages
        SET processing_started_at = MAX(:now, updated_at + 1), updated_at = MAX(:now, updated_at + 1)
        WHERE id = :id AND queue = :queue AND status = 1 AND processing_started_at = :receipt
        RETURNING processing_started_at""",
        {"now": now, "id": message_id, "queue": queue, "receipt": receipt},
    ).fetchall()
    return row[0][0] if row else None


def has_due(conn, queues: Sequence[str], now: int, limit: int) -> dict[str, int]:
    """How many due messages (up to ``limit`` each) the given queues have. A read: no write lock."""
    out = {}
    for queue in queues:
        ((n,),) = conn.execute(
            """SELECT COUNT(*) FROM (SELECT 1 FROM messages INDEXED BY idx_queue_ready_for_consuming
               WHERE queue = ? AND status = 0 AND process_after <= ? LIMIT ?)""",
            (queue, now, limit),
        ).fetchall()
        if n:
            out[queue] = n
    return out


def data_version(conn) -> int:
    """Changes when another connection commits to the database file (cheap: no I/O)."""
    return conn.execute("PRAGMA data_version").fetchone()[0]


def ping(conn) -> None:
    conn.execute("SELECT 1 FROM messages LIMIT 1").fetchall()


# --- Admin: dead-letter queues ------------------------------------------------------------------

_REQUEUE = """
UPDATE messages
SET queue = :dest, is_dlq = 0, status = 0, attempts = 0, process_after = :now,
    processing_started_at = NULL, failure_reason = NULL, updated_at = MAX(:now, updated_at),
    expires_after = :now + :ttl
WHERE queue = :queue AND is_dlq = 1 AND status != 1"""


def requeue(conn, dlq: str, message_id: str | None, now: int, queue_ttl_ms: int) -> int:
    """Move one (or, with ``message_id=None``, every) DLQ message back to its queue, keeping its
    original ``received_at`` (its FIFO place). Messages in processing are left alone."""
    params = {"dest": dlq.removesuffix(DLQ_SUFFIX), "now": now, "ttl": queue_ttl_ms, "queue": dlq}
    if message_id is None:
        return conn.execute(_REQUEUE, params).rowcount
    return conn.execute(_REQUEUE + " AND id = :id", {**params, "id": message_id}).rowcount


def delete_dlq(conn, dlq: str, message_id: str | None) -> int:
    if message_id is None:
        return conn.execute("DELETE FROM messages WHERE queue = ? AND is_dlq = 1", (dlq,)).rowcount
    return conn.execute(
        "DELETE FROM messages WHERE id = ? AND queue = ? AND is_dlq = 1", (message_id, dlq)
    ).rowcount


# --- Background jobs (each skips messages in processing) ----------------------------------------

BATCH = 1_000


def _batched(conn, sql: str, params: dict, batch: int) -> int:
    total = 0
    while True:
        n = conn.execute(sql, {**params, "batch": batch}).rowcount
        total += n
        if n < batch:
            return total


def move_expired_to_dlq(conn, now: int, dlq_ttl_ms: int, batch: int = BATCH) -> int:
    return _batched(
        conn,
        """
        UPDATE messages
        SET attempts = 0, status = 0, queue = queue || '-dlq', is_dlq = 1, process_after = :now,
            processing_started_at = NULL, failure_reason = 'message_expired',
            updated_at = MAX(:now, updated_at), expires_after = :now + :ttl
        WHERE id IN (SELECT id FROM messages INDEXED BY idx_expired
                     WHERE status IN (0, 2) AND is_dlq = 0 AND expires_after < :now LIMIT :batch)""",
        {"now": now, "ttl": dlq_ttl_ms},
        batch,
    )


def move_failed_to_dlq(conn, now: int, dlq_ttl_ms: int, batch: int = BATCH) -> int:
    return _batched(
        conn,
        """
        UPDATE messages
        SET attempts = 0, status = 0, queue = queue || '-dlq', is_dlq = 1, process_after = :now,
            processing_started_at = NULL,
            failure_reason = COALESCE(failure_reason, 'max_attempts_reached'),  -- fatal_error stays
            updated_at = MAX(:now, updated_at), expires_after = :now + :ttl
        WHERE id IN (SELECT id FROM messages INDEXED BY idx_expired
                     WHERE status = 2 AND is_dlq = 0 LIMIT :batch)""",
        {"now": now, "ttl": dlq_ttl_ms},
        batch,
    )


def recover_stale(conn, now: int, visibility_ms: int, max_attempts: int, batch: int = BATCH) -> int:
    return _batched(
        conn,
        """
        UPDATE messages
        SET status = CASE WHEN attempts >= :max THEN 2 ELSE 0 END, process_after = :now,
            processing_started_at = NULL, updated_at = MAX(:now, updated_at)
        WHERE id IN (SELECT id FROM messages INDEXED BY idx_expired
                     WHERE status = 1 AND processing_started_at < :cutoff LIMIT :batch)""",
        {"now": now, "max": max_attempts, "cutoff": now - visibility_ms},
        batch,
    )


def delete_expired_dlq(conn, now: int, batch: int = BATCH) -> int:
    return _batched(
        conn,
        """DELETE FROM messages WHERE id IN (SELECT id FROM messages INDEXED BY idx_expired
           WHERE status IN (0, 2) AND is_dlq = 1 AND expires_after < :now LIMIT :batch)""",
        {"now": now},
        batch,
    )


def delete_failed_dlq(conn, batch: int = BATCH) -> int:
    return _batched(
        conn,
        """DELETE FROM messages WHERE id IN (SELECT id FROM messages INDEXED BY idx_expired
           WHERE status = 2 AND is_dlq = 1 LIMIT :batch)""",
        {},
        batch,
    )


def count_expired(conn, now: int, is_dlq: bool) -> int:
    return conn.execute(
        "SELECT COUNT(*) FROM messages WHERE status IN (0, 2) AND is_dlq = ? AND expires_after < ?",
        (1 if is_dlq else 0, now),
    ).fetchone()[0]


def count_failed(conn, is_dlq: bool) -> int:
    return conn.execute(
        "SELECT COUNT(*) FROM messages WHERE status = 2 AND is_dlq = ?", (1 if is_dlq else 0,)
    ).fetchone()[0]


def count_stale(conn, now: int, visibility_ms: int) -> int:
    return conn.execute(
        "SELECT COUNT(*) FROM messages WHERE status = 1 AND processing_started_at < ?",
        (now - visibility_ms,),
    ).fetchone()[0]


def optimize(conn) -> None:
    conn.execute("PRAGMA optimize")


def queue_depths(conn) -> list[tuple[str, bool, int]]:
    """(queue, is_dlq, messages) for every queue (covering index scan)."""
    return [
        (q, bool(d), n)
        for q, d, n in conn.execute(
            "SELECT queue, is_dlq, COUNT(*) FROM messages GROUP BY queue, is_dlq ORDER BY queue"
        )
    ]


# --- Bulk: staged writes (exactly-once Spark jobs) and snapshot reads ---------------------------
#
# A staged row waits in ``forq_staged`` (one B-tree keyed by token, message_id) until its job
# publishes it into ``messages`` with one INSERT … SELECT, or discards it.

_STAGE = """
INSERT INTO forq_staged (token, message_id, queue, content, process_after, staged_at)
VALUES (?, ?, ?, ?, ?, ?)"""

_STAGE_JSON = """
INSERT INTO forq_staged (token, message_id, queue, content, process_after, staged_at)
SELECT :token, value->>0, :queue, value->>1, value->>2, :now FROM json_each(:rows)"""


def stage(conn, token: str, queue: str, rows: Sequence[tuple[str, str, int]], now: int) -> None:
    """Stage ``rows`` of (id, content, process_after) for ``queue`` under ``token``."""
    if _holds_nul(rows, 1):
        conn.executemany(_STAGE, [(token, r[0], queue, r[1], r[2], now) for r in rows])
    else:
        conn.execute(_STAGE_JSON, {"token": token, "queue": queue, "now": now,
                                   "rows": json.dumps(rows, ensure_ascii=False)})


_PUBLISH = """
INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                      processing_started_at, failure_reason, received_at, updated_at, expires_after)
SELECT message_id, queue, 0, content, 0, 0, MAX(process_after, :now - 10000), NULL, NULL, :now, :now,
       MAX(process_after, :now) + :ttl
FROM forq_staged WHERE token = :token AND queue = :queue"""


def publish_staged(conn, staged: Sequence[tuple[str, str]], now: int, queue_ttl_ms: int) -> dict[str, int]:
    """Move the rows staged under [(token, queue)] into their queues (call inside a transaction,
    so they appear together); returns how many per queue. A token published again adds nothing."""
    published: dict[str, int] = {}
    for token, queue in staged:
        params = {"token": token, "queue": queue, "now": now, "ttl": queue_ttl_ms}
        n = conn.execute(_PUBLISH, params).rowcount
        conn.execute("DELETE FROM forq_staged WHERE token = :token AND queue = :queue", params)
        published[queue] = published.get(queue, 0) + n
    return published


def discard_staged(conn, staged: Sequence[tuple[str, str]]) -> int:
    return sum(
        conn.execute("DELETE FROM forq_staged WHERE token = ? AND queue = ?", (t, q)).rowcount
        for t, q in staged
    )


def delete_abandoned_staged(conn, cutoff: int, batch: int = BATCH) -> int:
    """Delete rows staged before ``cutoff`` (their job never published nor discarded them)."""
    return _batched(
        conn,
        """DELETE FROM forq_staged WHERE (token, message_id) IN (
               SELECT token, message_id FROM forq_staged WHERE staged_at < :cutoff LIMIT :batch)""",
        {"cutoff": cutoff},
        batch,
    )


_SNAPSHOT_COLUMNS = (
    "id, queue, content, status, attempts, received_at, process_after, failure_reason"
)


def snapshot_page(conn, queue: str, after: str, upto: str | None, limit: int) -> list:
    """Rows of ``queue`` with ``after < id <= upto``, in id order (keyset paging on the
    (queue, is_dlq, id) index). A read: takes no lease and changes nothing."""
    is_dlq = 1 if queue.endswith(DLQ_SUFFIX) else 0
    if upto is None:
        return conn.execute(
            f"""SELECT {_SNAPSHOT_COLUMNS} FROM messages INDEXED BY idx_for_queue_depth
                WHERE queue = ? AND is_dlq = ? AND id > ? ORDER BY id LIMIT ?""",
            (queue, is_dlq, after, limit),
        ).fetchall()
    return conn.execute(
        f"""SELECT {_SNAPSHOT_COLUMNS} FROM messages INDEXED BY idx_for_queue_depth
            WHERE queue = ? AND is_dlq = ? AND id > ? AND id <= ? ORDER BY id LIMIT ?""",
        (queue, is_dlq, after, upto, limit),
    ).fetchall()


def snapshot_bounds(conn, queue: str) -> tuple[int, str | None, str | None]:
    """(count, smallest id, largest id) of ``queue``."""
    is_dlq = 1 if queue.endswith(DLQ_SUFFIX) else 0
    return tuple(
        conn.execute(
            """SELECT COUNT(*), MIN(id), MAX(id) FROM messages INDEXED BY idx_for_queue_depth
               WHERE queue = ? AND is_dlq = ?""",
            (queue, is_dlq),
        ).fetchone()
    )


def poll_interval(default_s: float) -> float:
    """How long the notifier sleeps between ``data_version`` checks while consumers wait."""
    return default_s


# --- API-key throttle (every process and host shares it) ----------------------------------------

_AUTH_FAILED = """
INSERT INTO forq_auth_throttle (address, failures, window_start, blocked_until)
VALUES (:address, 1, :now, CASE WHEN :max <= 1 THEN :now + :block ELSE 0 END)
ON CONFLICT (address) DO UPDATE SET
    failures = CASE WHEN window_start <= :now - :window THEN 1 ELSE failures + 1 END,
    window_start = CASE WHEN window_start <= :now - :window THEN :now ELSE window_start END,
    blocked_until = CASE
        WHEN (CASE WHEN window_start <= :now - :window THEN 1 ELSE failures + 1 END) >= :max
        THEN :now + :block ELSE blocked_until END
RETURNING blocked_until"""


def auth_failed(conn, address: str, now: int, window_ms: int, max_failures: int, block_ms: int) -> int:
    """Count a failed key from ``address``; returns until when it is blocked (Unix ms, or 0)."""
    params = {"address": address, "now": now, "window": window_ms, "max": max_failures, "block": block_ms}
    rows = conn.execute(_AUTH_FAILED, params).fetchall()
    conn.execute("DELETE FROM forq_auth_throttle WHERE window_start < ? AND blocked_until < ?"
                 " AND address NOT LIKE ?", (now - 2 * window_ms, now, LOGIN_KEYS))
    return rows[0][0]


def auth_blocked_until(conn, address: str) -> int:
    rows = conn.execute("SELECT blocked_until FROM forq_auth_throttle WHERE address = ?", (address,)).fetchall()
    return rows[0][0] if rows else 0


# Failed logins (forqapp.login_throttle) share the table under "login-…" keys, with their own
# (longer) window: each kind prunes only its own stale rows, so a wrong API key never resets a
# login counter.
LOGIN_KEYS = "login-%"


def login_failed(conn, key: str, now: int, window_ms: int, max_failures: int, block_ms: int) -> int:
    """Count a failed login against ``key``; returns until when it is blocked (Unix ms, or 0)."""
    params = {"address": key, "now": now, "window": window_ms, "max": max_failures, "block": block_ms}
    rows = conn.execute(_AUTH_FAILED, params).fetchall()
    conn.execute("DELETE FROM forq_auth_throttle WHERE window_start < ? AND blocked_until < ?"
                 " AND address LIKE ?", (now - 2 * window_ms, now, LOGIN_KEYS))
    return rows[0][0]


# --- leases (one holder per name across every process and host: the jobs scheduler) -------------

# Acquire or renew in one statement: a new name is inserted; an existing one changes hands only
# if it is ours already, if it has expired, or if it is held by ``replacing`` (a holder the caller
# found dead). No row comes back when someone else holds it.
_LEASE_ACQUIRE = """
INSERT INTO forq_leases (name, holder, expires_at) VALUES (:name, :holder, :expires_at)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE forq_leases.holder IN (:holder, :replacing) OR forq_leases.expires_at < :now
RETURNING holder"""


def lease_acquire(conn, name: str, holder: str, now: int, ttl_ms: int, replacing: str = "") -> bool:
    """Take or renew the lease ``name`` for ``holder`` until ``now + ttl_ms``; False if another
    holder has it (and it is neither expired nor ``replacing``)."""
    params = {"name": name, "holder": holder, "expires_at": now + ttl_ms, "now": now, "replacing": replacing}
    return bool(conn.execute(_LEASE_ACQUIRE, params).fetchall())


def lease_holder(conn, name: str) -> tuple[str, int] | None:
    """(holder, expires_at) of the lease ``name``, or None."""
    row = conn.execute("SELECT holder, expires_at FROM forq_leases WHERE name = ?", (name,)).fetchone()
    return tuple(row) if row else None


def lease_release(conn, name: str, holder: str) -> bool:
    """Give the lease up, if ``holder`` has it (so another process takes it at once)."""
    return conn.execute("DELETE FROM forq_leases WHERE name = ? AND holder = ?", (name, holder)).rowcount > 0
