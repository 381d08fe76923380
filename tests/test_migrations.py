"""Migration 0006 (issue 12) on a database that holds messages: every message is kept, existing
messages are numbered in the order they were received, each queue gets its ``forq_queues`` row with
its counter after its messages, a message in flight keeps its lease, claims work on the result
(migrated on to the latest schema, which the store speaks), and the migrations go back to 0005.

Runs Django's ``MigrationExecutor`` on a database of its own — a new SQLite file, or a new
PostgreSQL database on the test server — so the test database is never touched.
"""

from __future__ import annotations

import copy
import importlib
import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor
from django.db.utils import load_backend

from forqapp import ids, store
from forqapp.conf import forq_settings
from forqapp.store import NewMessage

# The test database is not used, but set up all the same: the session's teardown (tests/conftest.py)
# connects to it on PostgreSQL.
pytestmark = pytest.mark.django_db

BEFORE = ("forqapp", "0005_message_last_error_lease")
AFTER = ("forqapp", "0006_queues_priorities_dedup")
ALIAS = "forq_migration_test"
NOW = 1_800_000_000_000
VISIBILITY = 300_000  # FORQ_VISIBILITY_TIMEOUT_MS as the test settings have it (checked below)

COLUMNS_0005 = ("id", "queue", "is_dlq", "content", "status", "attempts", "process_after", "processing_started_at",
                "failure_reason", "received_at", "updated_at", "expires_after", "last_error")
NEW_COLUMNS = ("priority", "attributes", "dedup_id", "sequence", "first_received_at")


@contextmanager
def registered(settings_dict: dict) -> Iterator[BaseDatabaseWrapper]:
    """A connection under :data:`ALIAS` (the migration machinery looks its alias up in
    ``django.db.connections``), closed and forgotten after."""
    connections.settings[ALIAS] = settings_dict
    conn = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, ALIAS)
    connections[ALIAS] = conn
    try:
        yield conn
    finally:
        conn.close()
        del connections[ALIAS]
        del connections.settings[ALIAS]


@contextmanager
def scratch_database(tmp_path, django_db_blocker) -> Iterator[BaseDatabaseWrapper]:
    """A connection to a new, empty database of the test database's kind (dropped after)."""
    settings_dict = copy.deepcopy(connections["default"].settings_dict)
    with django_db_blocker.unblock():
        if connections["default"].vendor == "sqlite":
            with registered({**settings_dict, "NAME": str(tmp_path / "migrations.sqlite3")}) as conn:
                yield conn
            return
        name = f"forq_migrations_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        admin = load_backend(settings_dict["ENGINE"]).DatabaseWrapper({**settings_dict, "NAME": "postgres"},
                                                                       ALIAS + "_admin")
        try:
            with admin.cursor() as cur:  # autocommit: CREATE DATABASE cannot run in a transaction
                cur.execute(f'CREATE DATABASE "{name}"')
            try:
                with registered({**settings_dict, "NAME": name}) as conn:
                    yield conn
            finally:
                with admin.cursor() as cur:
                    cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            admin.close()


def migrate(conn: BaseDatabaseWrapper, target: tuple[str, str] | None = None) -> None:
    """Migrate forqapp to ``target`` (None: its latest migration)."""
    executor = MigrationExecutor(conn)  # a fresh loader: the graph as the database has it now
    executor.migrate([target or executor.loader.graph.leaf_nodes("forqapp")[0]])


def messages(conn: BaseDatabaseWrapper, columns: tuple[str, ...] = COLUMNS_0005) -> dict[str, dict]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(columns)} FROM messages")
        return {r[0]: {c: (bool(v) if c == "is_dlq" else v) for c, v in zip(columns, r, strict=True)}
                for r in cur.fetchall()}


def table_columns(conn: BaseDatabaseWrapper, table: str) -> set[str]:
    with conn.cursor() as cur:
        return {c.name for c in conn.introspection.get_table_description(cur, table)}


def index_names(conn: BaseDatabaseWrapper, table: str) -> set[str]:
    with conn.cursor() as cur:
        return set(conn.introspection.get_constraints(cur, table))


def lease(conn: BaseDatabaseWrapper, lease_ends: dict[str, int]) -> None:
    """Deliveries as any schema stores them: each message leased once (at NOW + 1), until its end."""
    with conn.cursor() as cur:
        for message_id, lease_end in lease_ends.items():
            cur.execute("UPDATE messages SET status = 1, attempts = 1, processing_started_at = %s, "
                        "process_after = %s WHERE id = %s", [NOW + 1, lease_end, message_id])


def index_definitions(conn: BaseDatabaseWrapper, table: str = "messages") -> dict[str, str]:
    """Each index of ``table`` as its database states it (unquoted)."""
    with conn.cursor() as cur:
        if conn.vendor == "sqlite":
            cur.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = %s AND sql IS NOT NULL",
                        [table])
        else:
            cur.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return {name: sql.replace('"', "") for name, sql in cur.fetchall()}


def fill_0005(conn: BaseDatabaseWrapper) -> dict[str, dict]:
    """Messages of today's schema in every state, inserted out of their received order."""
    rows = []

    def add(queue: str, received_at: int, *, is_dlq: bool = False, status: int = 0, attempts: int = 0,
            started: int | None = None, reason: str | None = None, error: str | None = None,
            due: int | None = None) -> str:
        (message_id,) = ids.new_ids(1)
        due = received_at if due is None else due
        rows.append((message_id, queue, is_dlq, f"{queue} {received_at}", status, attempts, due, started, reason,
                     received_at, started or received_at, due + 86_400_000, error))
        return message_id

    add("emails", NOW - 3_000)
    add("emails", NOW - 9_000)  # received first, inserted second
    add("emails", NOW - 3_000)  # the same ms as the first: ids break the tie
    add("emails", NOW - 5_000, due=NOW + 3_600_000)  # delayed
    add("emails-dlq", NOW - 8_000, is_dlq=True, reason="max_attempts_reached", error="ValueError: boom")
    add("emails", NOW - 7_000, status=1, attempts=1, started=NOW - 1_000)  # in flight: leased until +299 s
    add("emails", NOW - 6_000, status=2, attempts=5, error="KeyError: 'x'")  # failed, for the failed job
    add("sms", NOW - 4_000)
    add("sms", NOW - 10_000, status=1, attempts=2, started=NOW - 10 * VISIBILITY)  # long stale
    add("only-dlq", NOW - 2_000, is_dlq=True, reason="message_expired")
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO messages ({', '.join(COLUMNS_0005)}) VALUES ({', '.join(['%s'] * 13)})",
                        rows)
    return messages(conn)


def test_0006_keeps_every_message_numbers_them_by_arrival_and_goes_back(tmp_path, django_db_blocker):
    with scratch_database(tmp_path, django_db_blocker) as conn:
        migrate(conn, BEFORE)
        assert "sequence" not in table_columns(conn, "messages")
        before = fill_0005(conn)

        migrate(conn, AFTER)
        # Every message, every column as it was; the new columns at their defaults.
        after = messages(conn, COLUMNS_0005 + NEW_COLUMNS)
        assert set(after) == set(before)
        for message_id, old in before.items():
            new = after[message_id]
            assert {c: new[c] for c in COLUMNS_0005 if c != "process_after"} == {
                c: old[c] for c in COLUMNS_0005 if c != "process_after"}
            assert (new["priority"], new["attributes"], new["dedup_id"], new["first_received_at"]) == (
                0, None, None, None)
            if old["status"] == 1:  # in flight: the lease it had, as a lease end
                assert new["process_after"] == old["processing_started_at"] + VISIBILITY
            else:
                assert new["process_after"] == old["process_after"]
        # Sequence numbers follow the received order (ids break ties), distinct across queues.
        by_arrival = sorted(after.values(), key=lambda m: (m["received_at"], m["id"]))
        numbers = [m["sequence"] for m in by_arrival]
        assert numbers == sorted(set(numbers)) and numbers[0] >= 1
        # One queue row per queue (a DLQ counts with its queue), its counter after its messages.
        with conn.cursor() as cur:
            cur.execute("SELECT name, last_sequence, paused, max_attempts, backoff, visibility_timeout_ms,"
                        " retention_ms, dlq_retention_ms, max_length, ordering, dedup_window_ms FROM forq_queues")
            queues = {r[0]: r[1:] for r in cur.fetchall()}
        assert set(queues) == {"emails", "sms", "only"}
        for name, (last, paused, *policy) in queues.items():
            theirs = [m["sequence"] for m in after.values() if m["queue"] in (name, name + "-dlq")]
            assert last == max(theirs), name
            assert not paused and policy == [None] * 8
        assert "idx_queue_claim" in index_names(conn, "messages")
        assert "idx_queue_ready_for_consuming" not in index_names(conn, "messages")
        assert {"priority", "attributes"} <= table_columns(conn, "forq_staged")
        assert {"queue", "dedup_id", "message_id", "expires_at"} <= table_columns(conn, "forq_dedup")

        # The claim works on migrated rows: by arrival, priority 0, a DLQ apart, the delayed one not due.
        migrate(conn)  # the store speaks the latest schema
        conn.ensure_connection()
        st = store.store_class(conn.vendor).on(conn.connection)
        now = NOW + 1_000
        got = st.claim("emails", now, 10, visibility_ms=30_000, max_attempts=5, dlq_ttl_ms=3_600_000)
        expected = [m["id"] for m in sorted(after.values(), key=lambda m: m["sequence"])
                    if m["queue"] == "emails" and m["status"] == 0 and m["process_after"] <= now]
        assert [d.id for d in got.deliveries] == expected and got.redriven == 0  # the one in flight is leased
        assert [d.sequence for d in got.deliveries] == [after[i]["sequence"] for i in expected]
        for d in got.deliveries:
            assert st.ack("emails", d.id, d.receipt)
        sms = st.claim("sms", now, 10, visibility_ms=30_000, max_attempts=5, dlq_ttl_ms=3_600_000)
        assert len(sms.deliveries) == 2  # the long-stale one too: its lease ended long ago
        # New messages number after the old ones, in every queue (a DLQ with its queue).
        def highest(name: str) -> int:
            return max(m["sequence"] for m in after.values() if m["queue"] in (name, name + "-dlq"))

        (new_id,) = ids.new_ids(1)
        assert st.insert([NewMessage(new_id, "emails", "new", now, now, now + 3_600_000)])[0] > highest("emails")
        (dead_id,) = ids.new_ids(1)
        assert st.insert([NewMessage(dead_id, "only-dlq", "dead", now, now, now + 3_600_000)],
                         is_dlq=True)[0] > highest("only")
        assert st.requeue("emails-dlq", None, now, 3_600_000) == 1
        assert [d.id for d in st.claim("emails", now, 1, visibility_ms=30_000, max_attempts=5,
                                       dlq_ttl_ms=3_600_000).deliveries] == [
            m["id"] for m in before.values() if m["queue"] == "emails-dlq"]  # its old place: before the new one

        # And back: every message, today's columns as they are now, the new columns and tables gone.
        now_rows = messages(conn)
        migrate(conn, BEFORE)
        assert messages(conn) == now_rows
        assert not set(NEW_COLUMNS) & table_columns(conn, "messages")
        assert not {"priority", "attributes"} & table_columns(conn, "forq_staged")
        assert "idx_queue_ready_for_consuming" in index_names(conn, "messages")
        with conn.cursor() as cur:
            assert "forq_queues" not in conn.introspection.table_names(cur)
            assert "forq_dedup" not in conn.introspection.table_names(cur)
        migrate(conn)  # and forwards again
        assert set(messages(conn)) == set(now_rows)


def test_0006_keeps_the_lease_of_a_message_in_flight(tmp_path, django_db_blocker):
    """Before 0006 a delivery's lease was ``processing_started_at`` + the visibility timeout (its
    ``process_after`` was its old due time); after it, a processing row's ``process_after`` is its
    lease end. A consumer still working on a message when the migration runs keeps it: the message
    is not claimable again before its old lease ends, and its receipt still settles it."""
    assert forq_settings.FORQ_VISIBILITY_TIMEOUT_MS == VISIBILITY
    with scratch_database(tmp_path, django_db_blocker) as conn:
        migrate(conn, BEFORE)
        before = fill_0005(conn)
        migrate(conn)
        conn.ensure_connection()
        st = store.store_class(conn.vendor).on(conn.connection)
        (leased,) = [m for m in before.values() if m["queue"] == "emails" and m["status"] == 1]
        receipt = leased["processing_started_at"]
        lease_end = receipt + VISIBILITY
        got = st.claim("emails", lease_end - 1, 10, visibility_ms=30_000, max_attempts=5, dlq_ttl_ms=3_600_000)
        assert leased["id"] not in [d.id for d in got.deliveries], "an in-flight message was delivered again"
        assert st.peek_message("emails", leased["id"])[0].lease_expires_at == lease_end
        assert st.change_visibility("emails", [(leased["id"], receipt)], lease_end - 1, 0) == [True]
        again = st.claim("emails", lease_end, 1, visibility_ms=30_000, max_attempts=5, dlq_ttl_ms=3_600_000)
        assert [(d.id, d.attempts) for d in again.deliveries] == [(leased["id"], 2)]
        assert not st.ack("emails", leased["id"], receipt)
        assert st.ack("emails", leased["id"], again.deliveries[0].receipt)


LEAN = ("forqapp", "0011_sqlite_lean_claim")
BEFORE_LEAN = ("forqapp", "0010_sqs_queue_attributes")


def sqlite_schema(conn: BaseDatabaseWrapper) -> dict[str, str]:
    with conn.cursor() as cur:
        cur.execute("SELECT name, sql FROM sqlite_master WHERE tbl_name = 'messages' AND sql IS NOT NULL")
        return {name: sql.replace('"', "") for name, sql in cur.fetchall()}  # Django's DDL quotes, raw SQL not


def test_0011_redrives_through_its_trigger_and_without_it(tmp_path, django_db_blocker):
    """0011 (SQLite): the claim marks a used-up message REDRIVING and the trigger makes it a dead
    letter in the same statement; idx_expired leaves leased rows out. Every message is kept both
    ways. Without the trigger (dropped: a database that lacks it) the store finishes the move
    itself: no message is left REDRIVING. PostgreSQL: 0011 changes nothing. (The claims run on the
    latest schema: 0012's claim index is the one the store's statements name.)"""
    with scratch_database(tmp_path, django_db_blocker) as conn:
        migrate(conn, BEFORE_LEAN)
        before_schema = sqlite_schema(conn) if conn.vendor == "sqlite" else None
        conn.ensure_connection()
        st = store.store_class(conn.vendor).on(conn.connection)
        now = NOW
        ids_ = ids.new_ids(4)
        st.insert([NewMessage(i, "jobs", f"m{n}", now, now, now + 3_600_000) for n, i in enumerate(ids_)])
        migrate(conn, LEAN)
        if conn.vendor == "sqlite":
            schema = sqlite_schema(conn)
            assert "forq_redrive" in schema and "WHERE status = 0 OR status = 2" in schema["idx_expired"]
        else:
            assert index_names(conn, "messages") >= {"idx_expired", "idx_queue_claim"}
        migrate(conn)

        def used_up_claim(at: int) -> list:
            got = st.claim("jobs", at, 1, visibility_ms=0, max_attempts=1, dlq_ttl_ms=3_600_000)
            return [(d.id, d.queue, d.attempts, d.receipt) for d in got.redriven_messages]

        first = st.claim("jobs", now, 1, visibility_ms=0, max_attempts=1, dlq_ttl_ms=3_600_000).deliveries[0]
        # Its lease (0 s) ended: the next claim finds its one attempt used, moves it and delivers the next.
        assert used_up_claim(now + 1) == [(first.id, "jobs-dlq", 0, None)]
        with conn.cursor() as cur:
            cur.execute("SELECT queue, is_dlq, status, attempts, failure_reason FROM messages WHERE id = %s",
                        [first.id])
            assert cur.fetchone() == ("jobs-dlq", True if conn.vendor == "postgresql" else 1, 0, 0,
                                      "max_attempts_reached")

        migrate(conn, BEFORE_LEAN)  # back: 0011 undone, the schema as it was
        if conn.vendor == "sqlite":
            assert sqlite_schema(conn) == before_schema
        migrate(conn)
        if conn.vendor == "sqlite":  # the store finishes a redrive that no trigger does
            with conn.cursor() as cur:
                cur.execute("DROP TRIGGER forq_redrive")
        second = ids_[1]
        assert used_up_claim(now + 2) == [(second, "jobs-dlq", 0, None)]
        with conn.cursor() as cur:
            cur.execute("SELECT queue, status FROM messages ORDER BY id")
            rows = cur.fetchall()
        assert len(rows) == 4 and ("jobs-dlq", 0) in rows and all(status in (0, 1) for _, status in rows)
        migrate(conn)


SPLIT = ("forqapp", "0012_claim_apart_from_leases")


def test_0012_moves_leases_out_of_the_claim_index_keeping_every_message(tmp_path, django_db_blocker):
    """0012: ready rows stay in the (now partial) claim index, leases go to idx_for_requeueing by their
    end. Every message is kept as it was, the claim on the result takes ready rows and ended leases
    by priority then sequence, and the migration goes back to 0011's schema with the messages intact."""
    with scratch_database(tmp_path, django_db_blocker) as conn:
        migrate(conn, LEAN)
        before_schema = sqlite_schema(conn) if conn.vendor == "sqlite" else None
        conn.ensure_connection()
        st = store.store_class(conn.vendor).on(conn.connection)
        ready, ended, running, urgent, delayed = ids.new_ids(5)
        st.insert([NewMessage(ready, "jobs", "ready", NOW, NOW, NOW + 3_600_000),
                   NewMessage(ended, "jobs", "ended", NOW, NOW, NOW + 3_600_000),
                   NewMessage(running, "jobs", "running", NOW, NOW, NOW + 3_600_000),
                   NewMessage(urgent, "jobs", "urgent", NOW, NOW, NOW + 3_600_000, 7),
                   NewMessage(delayed, "jobs", "delayed", NOW + 60_000, NOW, NOW + 3_600_000, 9)])
        lease(conn, {ended: NOW + 5, running: NOW + 3_600_000})  # deliveries of 0011's time
        kept = messages(conn, COLUMNS_0005 + NEW_COLUMNS)

        migrate(conn, SPLIT)
        assert messages(conn, COLUMNS_0005 + NEW_COLUMNS) == kept
        split_schema = sqlite_schema(conn) if conn.vendor == "sqlite" else None
        migrate(conn)  # this code's statements read the latest schema's indexes
        got = st.claim("jobs", NOW + 10, 10, visibility_ms=1_000, max_attempts=0, dlq_ttl_ms=3_600_000)
        assert [(d.id, d.attempts) for d in got.deliveries] == [(urgent, 1), (ready, 1), (ended, 2)]
        assert st.queue_counts("jobs", NOW + 10).in_flight == 4
        migrate(conn, SPLIT)
        if conn.vendor == "sqlite":
            assert sqlite_schema(conn) == split_schema

        migrate(conn, LEAN)  # back to one claim index for ready and leased rows
        if conn.vendor == "sqlite":
            assert sqlite_schema(conn) == before_schema
            # This code on 0011's schema: its statements name indexes that are not there (said so).
            with pytest.raises(sqlite3.OperationalError, match="run `manage.py migrate`"):
                st.claim("jobs", NOW + 10, 1, visibility_ms=1_000, max_attempts=0, dlq_ttl_ms=3_600_000)
        else:
            assert index_names(conn, "messages") >= {"idx_queue_claim", "idx_for_requeueing"}
        assert len(messages(conn)) == 5


TIMED = ("forqapp", "0013_claim_apart_from_delayed")


def test_0013_moves_the_rows_not_due_when_written_out_of_the_claim_index(tmp_path, django_db_blocker):
    """0013: the ready rows written due stay in the claim index; those written to come due later
    (delayed at send, backed off after a failure) go to idx_queue_timed by the time they come due.
    Every message is kept as it was, the claim on the result takes them all in priority then
    sequence order, and the migration goes back to 0012's schema with the messages intact."""
    with scratch_database(tmp_path, django_db_blocker) as conn:
        migrate(conn, SPLIT)
        before_schema = sqlite_schema(conn) if conn.vendor == "sqlite" else None
        conn.ensure_connection()
        st = store.store_class(conn.vendor).on(conn.connection)
        ready, delayed, backed_off, urgent_later, later = ids.new_ids(5)
        st.insert([NewMessage(backed_off, "jobs", "backed off", NOW, NOW, NOW + 3_600_000),
                   NewMessage(ready, "jobs", "ready", NOW, NOW, NOW + 3_600_000),
                   NewMessage(delayed, "jobs", "delayed", NOW + 50, NOW, NOW + 3_600_000),
                   NewMessage(urgent_later, "jobs", "urgent, later", NOW + 60_000, NOW, NOW + 3_600_000, 9),
                   NewMessage(later, "jobs", "later", NOW + 60_000, NOW, NOW + 3_600_000)])
        with conn.cursor() as cur:  # a failed attempt of 0012's time, backed off until NOW + 20
            cur.execute("UPDATE messages SET attempts = 1, process_after = %s WHERE id = %s", [NOW + 20, backed_off])
        kept = messages(conn, COLUMNS_0005 + NEW_COLUMNS)

        migrate(conn, TIMED)
        assert messages(conn, COLUMNS_0005 + NEW_COLUMNS) == kept
        if conn.vendor == "sqlite":
            with conn.cursor() as cur:  # each row in one of the two ready indexes: the claim's, or the timed one
                cur.execute("SELECT id FROM messages INDEXED BY idx_queue_claim "
                            "WHERE status = 0 AND process_after <= received_at AND queue = 'jobs'")
                assert {r[0] for r in cur.fetchall()} == {ready}
                cur.execute("SELECT id FROM messages INDEXED BY idx_queue_timed "
                            "WHERE status = 0 AND process_after > received_at AND queue = 'jobs'")
                assert {r[0] for r in cur.fetchall()} == {backed_off, delayed, urgent_later, later}
        else:
            assert index_names(conn, "messages") >= {"idx_queue_claim", "idx_queue_timed", "idx_for_requeueing"}
        migrate(conn)  # this code's statements read the latest schema's indexes
        got = st.claim("jobs", NOW + 100, 10, visibility_ms=3_600_000, max_attempts=0, dlq_ttl_ms=3_600_000)
        assert [(d.id, d.attempts) for d in got.deliveries] == [(backed_off, 2), (ready, 1), (delayed, 1)]
        got = st.claim("jobs", NOW + 60_000, 10, visibility_ms=1_000, max_attempts=0, dlq_ttl_ms=3_600_000)
        assert [d.id for d in got.deliveries] == [urgent_later, later]
        migrate(conn, TIMED)

        migrate(conn, SPLIT)  # back to one index for the ready rows, due or not
        if conn.vendor == "sqlite":
            assert sqlite_schema(conn) == before_schema
            with pytest.raises(sqlite3.OperationalError, match="run `manage.py migrate`"):
                st.claim("jobs", NOW + 10, 1, visibility_ms=1_000, max_attempts=0, dlq_ttl_ms=3_600_000)
        else:
            assert "idx_queue_timed" not in index_names(conn, "messages")
        assert len(messages(conn)) == 5


LEASES = ("forqapp", "0014_leases_apart")


def test_0014_keeps_the_leases_alone_in_idx_leases(tmp_path, django_db_blocker):
    """0014: idx_for_requeueing, which held every row, becomes idx_leases, which holds the leased rows
    alone; idx_expired leaves the leased rows out on PostgreSQL too. Every message is kept, the
    claim on the result takes ready rows and ended leases in order, the stale-lease job finds a
    lease, and the migration goes back to 0013's schema with the messages intact."""
    with scratch_database(tmp_path, django_db_blocker) as conn:
        migrate(conn, TIMED)
        before_schema = sqlite_schema(conn) if conn.vendor == "sqlite" else None
        before_indexes = index_definitions(conn)
        conn.ensure_connection()
        st = store.store_class(conn.vendor).on(conn.connection)
        ready, ended, running, stale, failed = ids.new_ids(5)
        st.insert([NewMessage(message_id, "jobs", message_id, NOW, NOW, NOW + 3_600_000)
                   for message_id in (ready, ended, running, stale, failed)])
        lease(conn, {ended: NOW + 5, running: NOW + 3_600_000, stale: NOW - 3_600_000})  # of 0013's time
        with conn.cursor() as cur:
            cur.execute("UPDATE messages SET status = 2, attempts = 5 WHERE id = %s", [failed])
        kept = messages(conn, COLUMNS_0005 + NEW_COLUMNS)

        migrate(conn, LEASES)
        assert messages(conn, COLUMNS_0005 + NEW_COLUMNS) == kept
        indexes = index_definitions(conn)
        assert "idx_for_requeueing" not in indexes
        assert "status = 1" in indexes["idx_leases"].replace("(", "").replace(")", "")
        assert "status = 0" in indexes["idx_expired"] and "status = 2" in indexes["idx_expired"]
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM messages WHERE status = 1 ORDER BY id")
            assert [r[0] for r in cur.fetchall()] == sorted([ended, running, stale])
        migrate(conn)
        assert st.count_stale(NOW - 60_000) == 1
        got = st.claim("jobs", NOW + 10, 10, visibility_ms=1_000, max_attempts=0, dlq_ttl_ms=3_600_000)
        assert [(d.id, d.attempts) for d in got.deliveries] == [(ready, 1), (ended, 2), (stale, 2)]  # by sequence
        assert st.queue_counts("jobs", NOW + 10).in_flight == 4
        migrate(conn, LEASES)

        migrate(conn, TIMED)
        assert index_definitions(conn) == before_indexes
        if conn.vendor == "sqlite":
            assert sqlite_schema(conn) == before_schema
        assert len(messages(conn)) == 5


CLAIM_FUNCTION = ("forqapp", "0015_postgresql_claim_function")
GROUPS = ("forqapp", "0018_message_groups")
#: What this code's claim needs: the group column (0018) and, on PostgreSQL, forq_claim_group's p_batch (0027).
CLAIMS = ("forqapp", "0027_group_batch")


def claim_function(conn: BaseDatabaseWrapper) -> tuple[str, list[str]] | None:
    """``forq_claim``'s body and settings as PostgreSQL holds them (None: not there)."""
    with conn.cursor() as cur:
        cur.execute("SELECT prosrc, proconfig FROM pg_proc WHERE proname = 'forq_claim'")
        rows = cur.fetchall()
    assert len(rows) <= 1, rows  # never two versions side by side
    return (rows[0][0], list(rows[0][1] or [])) if rows else None


def test_0015_installs_the_claim_function_on_postgresql_and_takes_it_back(tmp_path, django_db_blocker):
    """0015: on PostgreSQL the claim becomes the function ``forq_claim`` (its own plan_cache_mode),
    the claim on the result takes messages as before, and the migration back removes the function.
    On SQLite it changes nothing."""
    with scratch_database(tmp_path, django_db_blocker) as conn:
        migrate(conn, LEASES)
        before_schema = sqlite_schema(conn) if conn.vendor == "sqlite" else None
        if conn.vendor == "postgresql":
            assert claim_function(conn) is None
        migrate(conn, CLAIM_FUNCTION)
        if conn.vendor == "sqlite":
            assert sqlite_schema(conn) == before_schema
        else:
            body, config = claim_function(conn)
            assert "FOR UPDATE SKIP LOCKED" in body and config == ["plan_cache_mode=force_generic_plan"]
        conn.ensure_connection()
        st = store.store_class(conn.vendor).on(conn.connection)
        first, second = ids.new_ids(2)
        st.insert([NewMessage(first, "jobs", "first", NOW, NOW, NOW + 3_600_000),
                   NewMessage(second, "jobs", "second", NOW, NOW, NOW + 3_600_000, 5)])
        migrate(conn, CLAIMS)  # (what this code's claim needs)
        got = st.claim("jobs", NOW + 10, 10, visibility_ms=1_000, max_attempts=0, dlq_ttl_ms=3_600_000)
        assert [(d.id, d.attempts) for d in got.deliveries] == [(second, 1), (first, 1)]  # by priority
        migrate(conn, LEASES)
        if conn.vendor == "postgresql":
            assert claim_function(conn) is None
            # This code on 0014's schema: its claim calls a function that is not there (said so).
            import psycopg

            with pytest.raises(psycopg.errors.UndefinedFunction, match="run `manage.py migrate`"):
                st.claim("jobs", NOW + 10, 1, visibility_ms=1_000, max_attempts=0, dlq_ttl_ms=3_600_000)
        else:
            assert sqlite_schema(conn) == before_schema
        assert len(messages(conn)) == 2


LEASE_END = ("forqapp", "0016_lease_index_by_lease_end")


def test_0016_orders_idx_leases_by_lease_end(tmp_path, django_db_blocker):
    """0016: idx_leases becomes (queue, process_after, priority, sequence, status), still the leased
    rows alone; the leases are kept, a claim takes the ended one, and the migration goes back to
    0015's index."""
    with scratch_database(tmp_path, django_db_blocker) as conn:
        migrate(conn, CLAIM_FUNCTION)
        before = index_definitions(conn)
        conn.ensure_connection()
        st = store.store_class(conn.vendor).on(conn.connection)
        ended, running = ids.new_ids(2)
        st.insert([NewMessage(message_id, "jobs", message_id, NOW, NOW, NOW + 3_600_000)
                   for message_id in (ended, running)])
        lease(conn, {ended: NOW + 5, running: NOW + 3_600_000})
        kept = messages(conn, COLUMNS_0005 + NEW_COLUMNS)

        migrate(conn, LEASE_END)
        assert messages(conn, COLUMNS_0005 + NEW_COLUMNS) == kept
        leases = index_definitions(conn)["idx_leases"].replace(" ", "")
        assert "(queue,process_after,priority,sequence,status)" in leases and "status=1" in leases.replace("(", "")
        migrate(conn, CLAIMS)  # (what this code's claim needs)
        got = st.claim("jobs", NOW + 10, 10, visibility_ms=1_000, max_attempts=0, dlq_ttl_ms=3_600_000)
        assert [(d.id, d.attempts) for d in got.deliveries] == [(ended, 2)]
        assert st.queue_counts("jobs", NOW + 10).in_flight == 2

        migrate(conn, CLAIM_FUNCTION)
        assert index_definitions(conn) == before
        assert len(messages(conn)) == 2


def test_0018_adds_message_groups_and_takes_them_back(tmp_path, django_db_blocker):
    """0018: the group column (existing messages: none), the group table and its triggers, the claim
    indexes led by (queue, message_group); a grouped send makes its group's row, a claim takes the
    old messages and the grouped one; the migration back restores 0017's schema, messages kept."""
    due_order = ("forqapp", "0017_due_order")
    with scratch_database(tmp_path, django_db_blocker) as conn:
        migrate(conn, due_order)
        before_indexes = index_definitions(conn)
        before_schema = sqlite_schema(conn) if conn.vendor == "sqlite" else None
        conn.ensure_connection()
        old = ids.new_id()
        with conn.cursor() as cur:
            cur.execute("INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after, "
                        "received_at, updated_at, expires_after, priority, sequence) "
                        "VALUES (%s, 'jobs', FALSE, 'old', 0, 0, %s, %s, %s, %s, 0, 1)",
                        [old, NOW, NOW, NOW, NOW + 3_600_000])
        migrate(conn, GROUPS)
        assert "message_group" in index_definitions(conn)["idx_queue_claim"]
        st = store.store_class(conn.vendor).on(conn.connection)
        grouped = ids.new_id()
        st.insert([NewMessage(grouped, "jobs", "grouped", NOW, NOW, NOW + 3_600_000, group="g")])
        assert st.group_count("jobs") == 1
        migrate(conn, CLAIMS)  # (what this code's claim needs)
        got = st.claim("jobs", NOW + 10, 10, visibility_ms=1_000, max_attempts=0, dlq_ttl_ms=3_600_000)
        assert [(d.id, d.group) for d in got.deliveries] == [(old, None), (grouped, "g")]
        migrate(conn, due_order)
        assert index_definitions(conn) == before_indexes
        if conn.vendor == "sqlite":
            assert sqlite_schema(conn) == before_schema
        assert len(messages(conn)) == 2


ONE_OVERLOAD = ("forqapp", "0028_drop_nine_argument_claim_group")


def group_claim_functions(conn: BaseDatabaseWrapper) -> dict[int, str]:
    """``forq_claim_group``'s overloads as PostgreSQL holds them: its body by number of arguments."""
    with conn.cursor() as cur:
        cur.execute("SELECT pronargs, prosrc FROM pg_proc WHERE proname = 'forq_claim_group'")
        return {int(n): body for n, body in cur.fetchall()}


def test_0028_drops_the_nine_argument_group_claim_and_takes_it_back(tmp_path, django_db_blocker):
    """0028 (PostgreSQL): ``forq_claim_group``'s 9-argument overload, kept by 0027 for older
    processes, is gone; the 10-argument one (what this code calls) stays, and a grouped claim takes
    its message; back to 0027, 0023's function is there again as it was. On SQLite nothing changes."""
    nine = importlib.import_module("forqapp.migrations.0023_dead_letter_queues").GROUP_CLAIM_FUNCTION
    with scratch_database(tmp_path, django_db_blocker) as conn:
        migrate(conn, CLAIMS)
        before_schema = sqlite_schema(conn) if conn.vendor == "sqlite" else None
        if conn.vendor == "postgresql":
            before = group_claim_functions(conn)
            assert sorted(before) == [9, 10] and before[9] == nine.split("$claim_group$")[1]
        migrate(conn, ONE_OVERLOAD)
        if conn.vendor == "postgresql":
            assert group_claim_functions(conn) == {10: before[10]}
        else:
            assert sqlite_schema(conn) == before_schema
        conn.ensure_connection()
        st = store.store_class(conn.vendor).on(conn.connection)
        grouped = ids.new_id()
        st.insert([NewMessage(grouped, "jobs", "grouped", NOW, NOW, NOW + 3_600_000, group="g")])
        got = st.claim("jobs", NOW + 10, 10, visibility_ms=1_000, max_attempts=0, dlq_ttl_ms=3_600_000)
        assert [(d.id, d.group) for d in got.deliveries] == [(grouped, "g")]
        migrate(conn, CLAIMS)
        if conn.vendor == "postgresql":
            assert group_claim_functions(conn) == before
        else:
            assert sqlite_schema(conn) == before_schema


SETTLE_ELIGIBLE = ("forqapp", "0029_sqlite_group_settle_already_eligible")


def group_turn(conn: BaseDatabaseWrapper, queue: str, group: str) -> tuple[int | None, int]:
    with conn.cursor() as cur:
        cur.execute("SELECT eligible_at, last_claimed_at FROM forq_groups WHERE queue = %s AND name = %s",
                    [queue, group])
        return cur.fetchone()


def test_0029_leaves_the_turn_of_a_group_eligible_since_its_claim_and_takes_it_back(tmp_path, django_db_blocker):
    """0029 (SQLite): the ack of a message of a group that is eligible since its last claim (a free slot,
    a message due) leaves the group's turn as the claim set it; a group whose turn comes later (its
    one slot held until the lease's end) is woken to the ack as before. Back to 0028, the ack moves
    the first group's turn too, to the settled message's ``updated_at - 1``. PostgreSQL: nothing."""
    with scratch_database(tmp_path, django_db_blocker) as conn:
        migrate(conn, ONE_OVERLOAD)
        before_schema = sqlite_schema(conn) if conn.vendor == "sqlite" else None
        migrate(conn, SETTLE_ELIGIBLE)
        conn.ensure_connection()
        st = store.store_class(conn.vendor).on(conn.connection)

        def claim_and_ack(queue: str, now: int, concurrency: int | None) -> tuple[tuple, tuple]:
            """Two messages of the group "g" of ``queue``: the first claimed, then acked; the group's
            turn (eligible_at, last_claimed_at) after each."""
            st.insert([NewMessage(ids.new_id(), queue, "x", now, now, now + 3_600_000, group="g")
                       for _ in range(2)])
            (got,) = st.claim(queue, now + 10, 1, visibility_ms=60_000, max_attempts=0, dlq_ttl_ms=3_600_000,
                              group_concurrency=concurrency).deliveries
            claimed = group_turn(conn, queue, "g")
            assert st.ack(queue, got.id, got.receipt)
            return claimed, group_turn(conn, queue, "g")

        if conn.vendor == "sqlite":
            assert sqlite_schema(conn) != before_schema
        claimed, acked = claim_and_ack("free", NOW, None)
        assert claimed == (NOW + 10, NOW + 10)  # eligible at its claim: the next message is due
        if conn.vendor == "sqlite":
            assert acked == claimed  # left alone
        claimed, acked = claim_and_ack("held", NOW + 100, 1)
        assert claimed == (NOW + 110 + 60_000, NOW + 110)  # its one slot held until the lease's end
        assert acked == (NOW + 110 - 1, NOW + 110)  # woken by the ack
        migrate(conn, ONE_OVERLOAD)
        if conn.vendor == "sqlite":
            assert sqlite_schema(conn) == before_schema
        claimed, acked = claim_and_ack("free-again", NOW + 200, None)
        assert acked == (NOW + 210 - 1, NOW + 210)  # 0024's trigger: moved 1 ms earlier
        migrate(conn)
        if conn.vendor == "sqlite":
            assert sqlite_schema(conn) != before_schema
