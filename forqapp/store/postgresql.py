"""Every SQL statement of the queue, for PostgreSQL: the same functions, with the same meaning, as
:mod:`forqapp.store.sqlite`. Nothing else in forqapp writes SQL for PostgreSQL.

Each function takes the DB-API connection (the ``psycopg.Connection`` under Django's wrapper: in
autocommit, unless the caller is inside ``transaction.atomic()``) and plain values. Every write is
one statement, so it is atomic on its own.

Concurrency: claims pick their row with ``FOR UPDATE SKIP LOCKED``, so any number of consumers, in
any number of processes and hosts, take different messages from the same queue head without ever
waiting on one another; the jobs skip locked rows the same way.

Receipts are as on SQLite: a delivery is named by the ``processing_started_at`` its claim wrote,
``GREATEST(now, updated_at + 1)``, and every write keeps ``updated_at`` from going back.

Wake-ups: every statement that makes a message ready runs ``pg_notify('forq', queue)`` in the same
transaction, so a send inside the caller's ``atomic()`` notifies on commit only (and never on
rollback). The notifier's connection ``LISTEN``s; :func:`data_version` counts what it received.

Statements are sent with server-side parameter binding (``psycopg.Cursor``), whatever cursor class
Django configured, so they can be prepared when the connection's ``prepare_threshold`` allows it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence

import psycopg

from ._sql import backoff_case

READY, PROCESSING, FAILED = 0, 1, 2
DLQ_SUFFIX = "-dlq"
MAX_ATTEMPTS_REACHED = "max_attempts_reached"
MESSAGE_EXPIRED = "message_expired"
FATAL_ERROR = "fatal_error"  # forqapp's own: a consumer failed the message (FatalError / fail())
TEXT_HOLDS_NUL = False  # PostgreSQL text cannot contain U+0000
CHANNEL = "forq"  # the LISTEN/NOTIFY channel; the payload is the queue name

Row = tuple  # (id, queue, content, process_after, received_at, expires_after)


def _cursor(conn) -> psycopg.Cursor:
    return psycopg.Cursor(conn)


def _execute(conn, sql: str, params=None) -> psycopg.Cursor:
    cur = _cursor(conn)
    cur.execute(sql, params)
    return cur


def _rowcount(conn, sql: str, params=None) -> int:
    cur = _execute(conn, sql, params)
    n = cur.rowcount
    cur.close()
    return n


def _fetchall(conn, sql: str, params=None) -> list:
    cur = _execute(conn, sql, params)
    rows = cur.fetchall()
    cur.close()
    return rows


_INSERT = """
WITH ins AS (
    INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                          processing_started_at, failure_reason, received_at, updated_at, expires_after)
    SELECT i, %(queue)s, %(is_dlq)s, c, 0, 0, p, NULL, NULL, r, r, e
    FROM unnest(%(ids)s::text[], %(contents)s::text[], %(process_after)s::bigint[],
                %(received_at)s::bigint[], %(expires_after)s::bigint[]) AS t(i, c, p, r, e)
)
SELECT pg_notify('forq', %(queue)s)"""

_INSERT_ONE = """
WITH ins AS (
    INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                          processing_started_at, failure_reason, received_at, updated_at, expires_after)
    VALUES (%(id)s, %(queue)s, %(is_dlq)s, %(content)s, 0, 0, %(process_after)s, NULL, NULL,
            %(received_at)s, %(received_at)s, %(expires_after)s)
)
SELECT pg_notify('forq', %(queue)s)"""

def insert(conn, rows: Sequence[Row], *, is_dlq: bool = False) -> None:
    """Insert new ready messages: ``rows`` of (id, queue, content, process_after, received_at, expires_after).

    One statement per queue (rows are batched through arrays), which also notifies listeners —
    on commit of the caller's transaction, if there is one."""
    if not rows:
        return
    by_queue: dict[str, list] = {}
    for r in rows:
        by_queue.setdefault(r[1], []).append(r)
    for queue, group in by_queue.items():
        if len(group) == 1:
            r = group[0]
            _fetchall(conn, _INSERT_ONE, {
                "id": r[0], "queue": queue, "is_dlq": bool(is_dlq), "content": r[2],
                "process_after": r[3], "received_at": r[4], "expires_after": r[5],
            })
        else:
            _fetchall(conn, _INSERT, {
                "queue": queue, "is_dlq": bool(is_dlq),
                "ids": [r[0] for r in group], "contents": [r[2] for r in group],
                "process_after": [r[3] for r in group], "received_at": [r[4] for r in group],
                "expires_after": [r[5] for r in group],
            })


# The row is picked and locked by the CTE (FOR UPDATE SKIP LOCKED: a row another consumer is taking
# right now is passed over, not waited for), then updated, in one statement.
_CLAIM = """
WITH picked AS (
    SELECT id FROM messages
    WHERE queue = %(queue)s AND status = 0 AND process_after <= %(now)s
    ORDER BY received_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE messages AS m
SET status = 1,
    attempts = m.attempts + 1,
    processing_started_at = GREATEST(%(now)s, m.updated_at + 1),
    updated_at = GREATEST(%(now)s, m.updated_at + 1)
FROM picked
WHERE m.id = picked.id
RETURNING m.id, m.queue, m.content, m.attempts, m.processing_started_at, m.received_at"""


def claim(conn, queue: str, now: int):
    """Take the oldest due message of ``queue``: (id, queue, content, attempts, receipt) or None."""
    rows = _fetchall(conn, _CLAIM, {"queue": queue, "now": now, "limit": 1})
    return tuple(rows[0][:5]) if rows else None


def claim_many(conn, queue: str, now: int, limit: int) -> list:
    """Take up to ``limit`` due messages of ``queue`` at once, oldest first."""
    rows = _fetchall(conn, _CLAIM, {"queue": queue, "now": now, "limit": limit})
    rows.sort(key=lambda r: (r[5], r[0]))  # RETURNING order is unspecified
    return [tuple(r[:5]) for r in rows]


def ack(conn, queue: str, message_id: str, receipt: int) -> bool:
    return _rowcount(
        conn,
        "DELETE FROM messages WHERE id = %s AND queue = %s AND status = 1 AND processing_started_at = %s",
        (message_id, queue, receipt),
    ) == 1


def ack_many(conn, queue: str, deliveries: Iterable[tuple[str, int]]) -> int:
    deliveries = list(deliveries)
    if not deliveries:
        return 0
    return _rowcount(
        conn,
        """
        DELETE FROM messages AS m
        USING unnest(%(ids)s::text[], %(receipts)s::bigint[]) AS d(id, receipt)
        WHERE m.id = d.id AND m.queue = %(queue)s AND m.status = 1
          AND m.processing_started_at = d.receipt""",
        {"ids": [d[0] for d in deliveries], "receipts": [int(d[1]) for d in deliveries], "queue": queue},
    )



def nack(conn, queue: str, message_id: str, receipt: int, now: int, max_attempts: int,
         backoff_ms: Sequence[int], error: str | None = None) -> bool:
    """Back to ready after the backoff of its attempt number, or failed when out of attempts.
    ``error`` (the consumer's exception) replaces ``last_error``; None keeps the one recorded."""
    return _rowcount(
        conn,
        f"""
        UPDATE messages
        SET status = CASE WHEN attempts >= %(max)s THEN 2 ELSE 0 END,
            process_after = %(now)s + {backoff_case(backoff_ms)},
            processing_started_at = NULL,
            updated_at = GREATEST(%(now)s, updated_at),
            last_error = COALESCE(%(error)s::text, last_error)
        WHERE id = %(id)s AND queue = %(queue)s AND status = 1 AND processing_started_at = %(receipt)s""",
        {"max": max_attempts, "now": now, "id": message_id, "queue": queue, "receipt": receipt,
         "error": error},
    ) == 1


def fail(conn, queue: str, message_id: str, receipt: int, now: int, error: str | None = None) -> bool:
    """Fail a message at once, whatever its attempts (a consumer's fatal error). Its failure_reason
    (``fatal_error``) is set now, so the failed job can tell it from running out of attempts;
    ``error`` replaces ``last_error`` (None keeps the one recorded)."""
    return _rowcount(
        conn,
        """
        UPDATE messages SET status = 2, processing_started_at = NULL,
                            updated_at = GREATEST(%s::bigint, updated_at),
                            failure_reason = %s, last_error = COALESCE(%s::text, last_error)
        WHERE id = %s AND queue = %s AND status = 1 AND processing_started_at = %s""",
        (now, FATAL_ERROR, error, message_id, queue, receipt),
    ) == 1


def release(conn, queue: str, message_id: str, receipt: int, now: int) -> bool:
    """Undo a claim whose message never reached a consumer: ready again, attempt not counted."""
    rows = _fetchall(
        conn,
        """
        WITH r AS (
            UPDATE messages
            SET status = 0, attempts = attempts - 1, processing_started_at = NULL,
                updated_at = GREATEST(%(now)s::bigint, updated_at)
            WHERE id = %(id)s AND queue = %(queue)s AND status = 1 AND processing_started_at = %(receipt)s
            RETURNING queue
        )
        SELECT pg_notify('forq', queue) FROM r""",
        {"now": now, "id": message_id, "queue": queue, "receipt": receipt},
    )
    return len(rows) == 1


def extend(conn, queue: str, message_id: str, receipt: int, now: int) -> int | None:
    """Renew a delivery's lease (heartbeat). Returns the new receipt, or None if it is not current."""
    rows = _fetchall(
        conn,
        """
        UPDATE messages
        SET processing_started_at = GREATEST(%(now)s, updated_at + 1),
            updated_at = GREATEST(%(now)s, updated_at + 1)
        WHERE id = %(id)s AND queue = %(queue)s AND status = 1 AND processing_started_at = %(receipt)s
        RETURNING processing_started_at""",
        {"now": now, "id": message_id, "queue": queue, "receipt": receipt},
    )
    return rows[0][0] if rows else None


def has_due(conn, queues: Sequence[str], now: int, limit: int) -> dict[str, int]:
    """How many due messages (up to ``limit`` each) the given queues have, in one read."""
    if not queues:
        return {}
    rows = _fetchall(
        conn,
        """
        SELECT q.name, c.n
        FROM unnest(%(queues)s::text[]) AS q(name)
        CROSS JOIN LATERAL (
            SELECT COUNT(*) AS n FROM (
                SELECT 1 FROM messages
                WHERE queue = q.name AND status = 0 AND process_after <= %(now)s
                LIMIT %(limit)s
            ) AS due
        ) AS c
        WHERE c.n > 0""",
        {"queues": list(queues), "now": now, "limit": limit},
    )
    return {q: int(n) for q, n in rows}


# --- Wake-ups: LISTEN/NOTIFY ----------------------------------------------------------------------

# Per listening connection: how many notifications it has received. Keyed weakly, so a connection
# that Django closed and replaced is forgotten, and its successor LISTENs again.
_received: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def data_version(conn) -> int:
    """Changes when any connection, on any host, commits something that makes a message ready.

    The first call on a connection makes it ``LISTEN``; later calls drain the notifications
    that arrived since (no round trip: it reads what the socket already holds)."""
    count = _received.get(conn)
    if count is None:
        _execute(conn, f"LISTEN {CHANNEL}").close()
        _received[conn] = count = 0
    for _ in conn.notifies(timeout=0):
        count += 1
    _received[conn] = count
    return count


def ping(conn) -> None:
    _fetchall(conn, "SELECT 1 FROM messages LIMIT 1")


# --- Admin: dead-letter queues ------------------------------------------------------------------

_REQUEUE = """
WITH moved AS (
    UPDATE messages
    SET queue = %(dest)s, is_dlq = FALSE, status = 0, attempts = 0, process_after = %(now)s,
        processing_started_at = NULL, failure_reason = NULL, updated_at = GREATEST(%(now)s, updated_at),
        expires_after = %(now)s + %(ttl)s
    WHERE queue = %(queue)s AND is_dlq AND status != 1 {extra}
    RETURNING 1
), n AS (SELECT COUNT(*) AS n FROM moved)
SELECT n, CASE WHEN n > 0 THEN pg_notify('forq', %(dest)s) END FROM n"""


def requeue(conn, dlq: str, message_id: str | None, now: int, queue_ttl_ms: int) -> int:
    """Move one (or, with ``message_id=None``, every) DLQ message back to its queue, keeping its
    original ``received_at`` (its FIFO place). Messages in processing are left alone."""
    params = {"dest": dlq.removesuffix(DLQ_SUFFIX), "now": now, "ttl": queue_ttl_ms, "queue": dlq}
    if message_id is None:
        sql = _REQUEUE.format(extra="")
    else:
        sql = _REQUEUE.format(extra="AND id = %(id)s")
        params["id"] = message_id
    return int(_fetchall(conn, sql, params)[0][0])


def delete_dlq(conn, dlq: str, message_id: str | None) -> int:
    if message_id is None:
        return _rowcount(conn, "DELETE FROM messages WHERE queue = %s AND is_dlq", (dlq,))
    return _rowcount(
        conn, "DELETE FROM messages WHERE id = %s AND queue = %s AND is_dlq", (message_id, dlq)
    )


# --- Background jobs (each skips messages in processing, and rows another job holds) -------------

BATCH = 1_000


def _batched(conn, sql: str, params: dict, batch: int) -> int:
    total = 0
    while True:
        n = _rowcount(conn, sql, {**params, "batch": batch})
        total += n
        if n < batch:
            return total


_MOVE_TO_DLQ = """
WITH moved AS (
    UPDATE messages
    SET attempts = 0, status = 0, queue = queue || '-dlq', is_dlq = TRUE, process_after = %(now)s,
        processing_started_at = NULL, failure_reason = {reason},
        updated_at = GREATEST(%(now)s, updated_at), expires_after = %(now)s + %(ttl)s
    WHERE id IN (SELECT id FROM messages WHERE {where} LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
    RETURNING queue
), woken AS (
    SELECT pg_notify('forq', queue) FROM (SELECT DISTINCT queue FROM moved) AS q
)
SELECT (SELECT COUNT(*) FROM moved), (SELECT COUNT(*) FROM woken)"""


def _move_to_dlq(conn, where: str, params: dict, batch: int, reason: str = "%(reason)s") -> int:
    """Move regular messages to their DLQ in batches; a consumer waiting on the DLQ is woken."""
    sql = _MOVE_TO_DLQ.format(where=where, reason=reason)
    total = 0
    while True:
        n = int(_fetchall(conn, sql, {**params, "batch": batch})[0][0])
        total += n
        if n < batch:
            return total


def move_expired_to_dlq(conn, now: int, dlq_ttl_ms: int, batch: int = BATCH) -> int:
    return _move_to_dlq(
        conn,
        "status IN (0, 2) AND NOT is_dlq AND expires_after < %(now)s",
        {"now": now, "ttl": dlq_ttl_ms, "reason": MESSAGE_EXPIRED},
        batch,
    )


def move_failed_to_dlq(conn, now: int, dlq_ttl_ms: int, batch: int = BATCH) -> int:
    return _move_to_dlq(
        conn,
        "status = 2 AND NOT is_dlq",
        {"now": now, "ttl": dlq_ttl_ms, "reason": MAX_ATTEMPTS_REACHED},
        batch,
        reason="COALESCE(failure_reason, %(reason)s)",  # a consumer's fatal_error stays
    )


def recover_stale(conn, now: int, visibility_ms: int, max_attempts: int, batch: int = BATCH) -> int:
    total = 0
    while True:
        rows = _fetchall(
            conn,
            """
            WITH r AS (
                UPDATE messages
                SET status = CASE WHEN attempts >= %(max)s THEN 2 ELSE 0 END, process_after = %(now)s,
                    processing_started_at = NULL, updated_at = GREATEST(%(now)s, updated_at)
                WHERE id IN (SELECT id FROM messages
                             WHERE status = 1 AND processing_started_at < %(cutoff)s
                             LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
                RETURNING queue, status
            ), woken AS (
                SELECT pg_notify('forq', queue) FROM (SELECT DISTINCT queue FROM r WHERE status = 0) AS q
            )
            SELECT (SELECT COUNT(*) FROM r), (SELECT COUNT(*) FROM woken)""",
            {"now": now, "max": max_attempts, "cutoff": now - visibility_ms, "batch": batch},
        )
        n = int(rows[0][0])
        total += n
        if n < batch:
            return total


def delete_expired_dlq(conn, now: int, batch: int = BATCH) -> int:
    return _batched(
        conn,
        """DELETE FROM messages WHERE id IN (SELECT id FROM messages
           WHERE status IN (0, 2) AND is_dlq AND expires_after < %(now)s
           LIMIT %(batch)s FOR UPDATE SKIP LOCKED)""",
        {"now": now},
        batch,
    )


def delete_failed_dlq(conn, batch: int = BATCH) -> int:
    return _batched(
        conn,
        """DELETE FROM messages WHERE id IN (SELECT id FROM messages
           WHERE status = 2 AND is_dlq LIMIT %(batch)s FOR UPDATE SKIP LOCKED)""",
        {},
        batch,
    )


def count_expired(conn, now: int, is_dlq: bool) -> int:
    return _fetchall(
        conn,
        "SELECT COUNT(*) FROM messages WHERE status IN (0, 2) AND is_dlq = %s AND expires_after < %s",
        (bool(is_dlq), now),
    )[0][0]


def count_failed(conn, is_dlq: bool) -> int:
    return _fetchall(
        conn, "SELECT COUNT(*) FROM messages WHERE status = 2 AND is_dlq = %s", (bool(is_dlq),)
    )[0][0]


def count_stale(conn, now: int, visibility_ms: int) -> int:
    return _fetchall(
        conn,
        "SELECT COUNT(*) FROM messages WHERE status = 1 AND processing_started_at < %s",
        (now - visibility_ms,),
    )[0][0]


def optimize(conn) -> None:
    """SQLite's ``PRAGMA optimize`` (fresh planner statistics): ``ANALYZE messages``, a sample read
    that blocks no writer. Autovacuum does it too (the migration tunes it for this table), but a
    server with autovacuum off would otherwise plan claims with statistics from an empty table."""
    _execute(conn, "ANALYZE messages").close()


def queue_depths(conn) -> list[tuple[str, bool, int]]:
    """(queue, is_dlq, messages) for every queue."""
    return [
        (q, bool(d), int(n))
        for q, d, n in _fetchall(
            conn, "SELECT queue, is_dlq, COUNT(*) FROM messages GROUP BY queue, is_dlq ORDER BY queue"
        )
    ]


# --- Bulk: staged writes (exactly-once Spark jobs) and snapshot reads ---------------------------
#
# A staged row waits in ``forq_staged`` (keyed by token, message_id) until its job publishes it
# into ``messages`` with one statement, or discards it.


def stage(conn, token: str, queue: str, rows: Sequence[tuple[str, str, int]], now: int) -> None:
    """Stage ``rows`` of (id, content, process_after) for ``queue`` under ``token``."""
    _rowcount(
        conn,
        """
        INSERT INTO forq_staged (token, message_id, queue, content, process_after, staged_at)
        SELECT %(token)s, i, %(queue)s, c, p, %(now)s
        FROM unnest(%(ids)s::text[], %(contents)s::text[], %(process_after)s::bigint[]) AS t(i, c, p)""",
        {"token": token, "queue": queue, "now": now, "ids": [r[0] for r in rows],
         "contents": [r[1] for r in rows], "process_after": [r[2] for r in rows]},
    )


_PUBLISH = """
WITH staged AS (
    DELETE FROM forq_staged WHERE token = %(token)s AND queue = %(queue)s
    RETURNING message_id, content, process_after
), published AS (
    INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,
                          processing_started_at, failure_reason, received_at, updated_at, expires_after)
    SELECT message_id, %(queue)s, FALSE, content, 0, 0, GREATEST(process_after, %(now)s - 10000), NULL,
           NULL, %(now)s, %(now)s, GREATEST(process_after, %(now)s) + %(ttl)s
    FROM staged ORDER BY message_id
    RETURNING 1
), n AS (SELECT COUNT(*) AS n FROM published)
SELECT n, CASE WHEN n > 0 THEN pg_notify('forq', %(queue)s) END FROM n"""


def publish_staged(conn, staged: Sequence[tuple[str, str]], now: int, queue_ttl_ms: int) -> dict[str, int]:
    """Move the rows staged under [(token, queue)] into their queues (call inside a transaction,
    so they appear together); returns how many per queue. A token published again adds nothing:
    a concurrent publish of the same token waits on its rows' locks, then finds them gone."""
    published: dict[str, int] = {}
    for token, queue in staged:
        rows = _fetchall(conn, _PUBLISH, {"token": token, "queue": queue, "now": now, "ttl": queue_ttl_ms})
        published[queue] = published.get(queue, 0) + int(rows[0][0])
    return published


def discard_staged(conn, staged: Sequence[tuple[str, str]]) -> int:
    return sum(
        _rowcount(conn, "DELETE FROM forq_staged WHERE token = %s AND queue = %s", (t, q))
        for t, q in staged
    )


def delete_abandoned_staged(conn, cutoff: int, batch: int = BATCH) -> int:
    """Delete rows staged before ``cutoff`` (their job never published nor discarded them)."""
    return _batched(
        conn,
        """DELETE FROM forq_staged WHERE (token, message_id) IN (
               SELECT token, message_id FROM forq_staged WHERE staged_at < %(cutoff)s
               LIMIT %(batch)s FOR UPDATE SKIP LOCKED)""",
        {"cutoff": cutoff},
        batch,
    )


_SNAPSHOT_COLUMNS = (
    "id, queue, content, status, attempts, received_at, process_after, failure_reason"
)


def snapshot_page(conn, queue: str, after: str, upto: str | None, limit: int) -> list:
    """Rows of ``queue`` with ``after < id <= upto``, in id order (keyset paging; ids compare
    bytewise, the columns are ``COLLATE "C"``). A read: takes no lease and changes nothing."""
    is_dlq = queue.endswith(DLQ_SUFFIX)
    if upto is None:
        return [tuple(r) for r in _fetchall(
            conn,
            f"""SELECT {_SNAPSHOT_COLUMNS} FROM messages
                WHERE queue = %s AND is_dlq = %s AND id > %s ORDER BY id LIMIT %s""",
            (queue, is_dlq, after, limit),
        )]
    return [tuple(r) for r in _fetchall(
        conn,
        f"""SELECT {_SNAPSHOT_COLUMNS} FROM messages
            WHERE queue = %s AND is_dlq = %s AND id > %s AND id <= %s ORDER BY id LIMIT %s""",
        (queue, is_dlq, after, upto, limit),
    )]


def snapshot_bounds(conn, queue: str) -> tuple[int, str | None, str | None]:
    """(count, smallest id, largest id) of ``queue``."""
    is_dlq = queue.endswith(DLQ_SUFFIX)
    count, lo, hi = _fetchall(
        conn,
        "SELECT COUNT(*), MIN(id), MAX(id) FROM messages WHERE queue = %s AND is_dlq = %s",
        (queue, is_dlq),
    )[0]
    return (int(count), lo, hi)


def poll_interval(default_s: float) -> float:
    """How long the notifier sleeps between ``data_version`` checks while consumers wait: each
    check only reads the notifications already on the socket, so the SQLite interval is fine."""
    return default_s


# --- API-key throttle (every process and host shares it) ----------------------------------------

_AUTH_FAILED = """
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


def auth_failed(conn, address: str, now: int, window_ms: int, max_failures: int, block_ms: int) -> int:
    """Count a failed key from ``address``; returns until when it is blocked (Unix ms, or 0)."""
    params = {"address": address, "now": now, "window": window_ms, "max": max_failures, "block": block_ms}
    rows = _fetchall(conn, _AUTH_FAILED, params)
    _rowcount(conn, "DELETE FROM forq_auth_throttle WHERE window_start < %s AND blocked_until < %s"
              " AND address NOT LIKE %s", (now - 2 * window_ms, now, LOGIN_KEYS))
    return rows[0][0]


def auth_blocked_until(conn, address: str) -> int:
    rows = _fetchall(conn, "SELECT blocked_until FROM forq_auth_throttle WHERE address = %s", (address,))
    return rows[0][0] if rows else 0


# Failed logins (forqapp.login_throttle) share the table under "login-…" keys, with their own
# (longer) window: each kind prunes only its own stale rows, so a wrong API key never resets a
# login counter.
LOGIN_KEYS = "login-%"


def login_failed(conn, key: str, now: int, window_ms: int, max_failures: int, block_ms: int) -> int:
    """Count a failed login against ``key``; returns until when it is blocked (Unix ms, or 0)."""
    params = {"address": key, "now": now, "window": window_ms, "max": max_failures, "block": block_ms}
    rows = _fetchall(conn, _AUTH_FAILED, params)
    _rowcount(conn, "DELETE FROM forq_auth_throttle WHERE window_start < %s AND blocked_until < %s"
              " AND address LIKE %s", (now - 2 * window_ms, now, LOGIN_KEYS))
    return rows[0][0]


# --- leases (one holder per name across every process and host: the jobs scheduler) -------------

# Acquire or renew in one statement: a new name is inserted; an existing one changes hands only
# if it is ours already, if it has expired, or if it is held by ``replacing`` (a holder the caller
# found dead). No row comes back when someone else holds it. Two hosts racing for a new name: one
# inserts, the other's ON CONFLICT waits for it and then sees a live lease of someone else.
_LEASE_ACQUIRE = """
INSERT INTO forq_leases (name, holder, expires_at) VALUES (%(name)s, %(holder)s, %(expires_at)s)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE forq_leases.holder IN (%(holder)s, %(replacing)s) OR forq_leases.expires_at < %(now)s
RETURNING holder"""


def lease_acquire(conn, name: str, holder: str, now: int, ttl_ms: int, replacing: str = "") -> bool:
    """Take or renew the lease ``name`` for ``holder`` until ``now + ttl_ms``; False if another
    holder has it (and it is neither expired nor ``replacing``)."""
    params = {"name": name, "holder": holder, "expires_at": now + ttl_ms, "now": now, "replacing": replacing}
    return bool(_fetchall(conn, _LEASE_ACQUIRE, params))


def lease_holder(conn, name: str) -> tuple[str, int] | None:
    """(holder, expires_at) of the lease ``name``, or None."""
    rows = _fetchall(conn, "SELECT holder, expires_at FROM forq_leases WHERE name = %s", (name,))
    return tuple(rows[0]) if rows else None


def lease_release(conn, name: str, holder: str) -> bool:
    """Give the lease up, if ``holder`` has it (so another process takes it at once)."""
    return _rowcount(conn, "DELETE FROM forq_leases WHERE name = %s AND holder = %s", (name, holder)) > 0
