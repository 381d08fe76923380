"""The in-process hot path (issue 15): ``FORQ_SYNCHRONOUS``, the single-send path and its store call
(:meth:`forqapp.store.Store.insert_one`), the short receive and ack, on both databases (the
PostgreSQL run: ``DATABASE_URL=postgres://…``). Each must keep what the general path guarantees:
the outbox, strictly increasing sequences never reused, the same checks and errors."""

from __future__ import annotations

import sqlite3

import pytest
from django.db import connection, connections, transaction

import forqapp
from forqapp import errors, ids, services, store
from forqapp.conf import ForqSettings
from forqapp.models import Message, Queue
from forqapp.store import NewMessage

from .conftest import refused, row

sqlite_only = pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's synchronous pragma")
HOUR = 3_600_000


def sequences(queue: str) -> list[int]:
    return list(Message.objects.filter(queue=queue).order_by("sequence").values_list("sequence", flat=True))


# --- FORQ_SYNCHRONOUS ---------------------------------------------------------------------------


def _synchronous_of_a_new_connection() -> int:
    """``PRAGMA synchronous`` of a connection opened now on the default alias (a wrapper of its own:
    the test's connection and its transaction stay as they are)."""
    wrapper = connections.create_connection("default")
    try:
        with wrapper.cursor() as cur:
            cur.execute("PRAGMA synchronous")
            return int(cur.fetchone()[0])
    finally:
        wrapper.close()


@sqlite_only
@pytest.mark.django_db
def test_forq_synchronous_is_applied_to_each_new_connection_of_the_queue_database(settings):
    assert _synchronous_of_a_new_connection() == 1  # NORMAL, the default
    settings.FORQ_SYNCHRONOUS = "FULL"
    assert _synchronous_of_a_new_connection() == 2
    settings.FORQ_SYNCHRONOUS = "NORMAL"
    assert _synchronous_of_a_new_connection() == 1


@sqlite_only
@pytest.mark.django_db
def test_forq_synchronous_leaves_other_databases_alone(settings):
    settings.FORQ_SYNCHRONOUS = "FULL"
    settings.FORQ_DATABASE = "elsewhere"  # the queue lives on another alias: default is not its to tune
    assert _synchronous_of_a_new_connection() == 1  # the init_command's NORMAL


def test_forq_synchronous_accepts_normal_and_full_only(settings, monkeypatch):
    setting = ForqSettings.FORQ_SYNCHRONOUS
    monkeypatch.delenv("FORQ_SYNCHRONOUS", raising=False)
    assert setting.resolve() == ("NORMAL", None)
    settings.FORQ_SYNCHRONOUS = "FULL"
    assert setting.resolve() == ("FULL", None)
    settings.FORQ_SYNCHRONOUS = "OFF"  # no durability at all: refused
    assert "FORQ_SYNCHRONOUS must be 'NORMAL' or 'FULL'" in setting.problem()
    del settings.FORQ_SYNCHRONOUS
    monkeypatch.setenv("FORQ_SYNCHRONOUS", "FULL")  # Forq's way: the environment
    assert setting.resolve() == ("FULL", None)


# --- the single send ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_plain_send_is_stored_and_committed_at_once():
    message_id = forqapp.send("hot-commit", "x" * 100)
    r = row(message_id)
    assert (r.queue, r.content, r.status, r.attempts, r.priority, r.is_dlq) == ("hot-commit", "x" * 100, 0, 0, 0,
                                                                                False)
    assert r.expires_after - r.received_at == services.policy("hot-commit").retention_ms
    assert Queue.objects.filter(name="hot-commit").exists()
    assert not connection.in_atomic_block
    other = _other_session()
    try:
        assert _count(other, "hot-commit") == 1
    finally:
        _close(other)


def _other_session():
    if connection.vendor == "sqlite":
        return sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    import psycopg

    d = connection.settings_dict
    return psycopg.connect(dbname=d["NAME"], user=d["USER"], password=d["PASSWORD"] or None,
                           host=d["HOST"] or None, port=d["PORT"] or None, autocommit=True)


def _count(conn, queue: str) -> int:
    mark = "?" if connection.vendor == "sqlite" else "%s"
    return int(conn.execute(f"SELECT COUNT(*) FROM messages WHERE queue = {mark}", (queue,)).fetchone()[0])


def _close(conn) -> None:
    conn.close()


@pytest.mark.django_db(transaction=True)
def test_a_plain_send_inside_atomic_commits_and_rolls_back_with_the_caller():
    with transaction.atomic():
        kept = forqapp.send("hot-outbox", "kept")
        Queue.objects.filter(name="hot-outbox").update(paused=False)  # the caller's own write
    with pytest.raises(RuntimeError), transaction.atomic():
        forqapp.send("hot-outbox", "lost")
        raise RuntimeError("the caller fails")
    assert list(Message.objects.filter(queue="hot-outbox").values_list("id", flat=True)) == [kept]
    later = forqapp.send("hot-outbox", "after")
    assert row(later).sequence > row(kept).sequence


@sqlite_only
@pytest.mark.django_db(transaction=True)
def test_a_plain_send_joins_a_transaction_opened_with_set_autocommit_false():
    transaction.set_autocommit(False)
    try:
        forqapp.send("hot-manual", "lost")
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
    assert not Message.objects.filter(queue="hot-manual").exists()


@pytest.mark.django_db(transaction=True)
def test_sequences_strictly_increase_across_single_and_batch_sends_and_are_never_reused():
    q = "hot-seq"
    first = forqapp.send(q, "a")
    forqapp.send_many(q, ["b", "c"])
    forqapp.send(q, "d", priority=3)  # the general path
    forqapp.send(q, "e")
    numbers = sequences(q)
    assert numbers == sorted(set(numbers)) and len(numbers) == 5 and numbers[0] == row(first).sequence
    while (m := forqapp.receive(q)) is not None:  # drain it: every row gone
        forqapp.ack(m)
    assert not Message.objects.filter(queue=q).exists()
    again = forqapp.send(q, "f")
    assert row(again).sequence > max(numbers)


@pytest.mark.django_db(transaction=True)
def test_insert_one_is_insert_of_one_row():
    st = store.for_alias(connection.alias)
    now = services.now_ms()
    a, b = ids.new_ids(2)
    one = st.insert_one(NewMessage(a, "hot-store", "a", now, now, now + HOUR, 2, '{"k": "v"}', None))
    (many,) = st.insert([NewMessage(b, "hot-store", "b", now, now, now + HOUR, 0, None, None)])
    assert many > one > 0
    r = row(a)
    assert (r.content, r.priority, r.attributes, r.process_after, r.sequence) == ("a", 2, '{"k": "v"}', now, one)


@pytest.mark.django_db
def test_a_plain_send_checks_what_the_general_path_checks(settings):
    forqapp.send("hot-checks", "warm")  # the settings cache is filled
    settings.FORQ_MAX_CONTENT_BYTES = 4  # and follows a change
    refused(errors.CONTENT_EXCEEDS_LIMIT, forqapp.send, "hot-checks", "12345")
    assert forqapp.send("hot-checks", "1234")
    refused(errors.QUEUE_INVALID_NAME, forqapp.send, "no spaces", "x")
    refused(errors.PRODUCE_TO_DLQ, forqapp.send, "hot-checks-dlq", "x")
    refused(errors.BODY_INVALID, forqapp.send, "hot-checks", 42)
    forqapp.configure_queue("hot-full", max_length=1)  # a limited queue counts in one transaction
    forqapp.send("hot-full", "1")
    refused(errors.QUEUE_FULL, forqapp.send, "hot-full", "2")


@pytest.mark.django_db
def test_the_queue_database_setting_is_followed(settings):
    assert services.alias() == "default"
    settings.FORQ_DATABASE = "other"
    assert services.alias() == "other"


# --- receive and ack ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_receive_without_wait_claims_once():
    assert forqapp.receive("hot-recv") is None
    sent = forqapp.send("hot-recv", "x")
    m = forqapp.receive("hot-recv")
    assert (m.id, m.attempts, m.receipt is not None) == (sent, 1, True)
    assert forqapp.receive("hot-recv") is None  # leased


@pytest.mark.django_db
def test_ack_takes_any_spelling_of_the_id_and_refuses_what_is_no_id():
    forqapp.send("hot-ack", "a")
    forqapp.send("hot-ack", "b")
    m1, m2 = forqapp.receive("hot-ack"), forqapp.receive("hot-ack")
    services.ack_delivery("hot-ack", m1.id.upper(), m1.receipt)  # the uuid module's way, as before
    refused(errors.MESSAGE_ID_INVALID, services.ack_delivery, "hot-ack", "not-an-id", m2.receipt)
    refused(errors.NOT_FOUND_MESSAGE, services.ack_delivery, "hot-ack", m2.id, m2.receipt + 1)  # stale receipt
    forqapp.ack(m2)
    assert not Message.objects.filter(queue="hot-ack").exists()


@pytest.mark.django_db
def test_a_single_receive_still_redrives_a_used_up_message(clock):
    forqapp.configure_queue("hot-poison", max_attempts=1, visibility_timeout=1)
    poison = forqapp.send("hot-poison", "poison")
    good = forqapp.send("hot-poison", "good")
    assert forqapp.receive("hot-poison").id == poison  # its one attempt, not settled
    clock.advance(2)
    assert forqapp.receive("hot-poison").id == good  # poison went to the DLQ on the way
    assert (row(poison).queue, row(poison).is_dlq) == ("hot-poison-dlq", True)


@pytest.mark.django_db
def test_a_send_with_options_stores_them_as_the_general_path_does(clock):
    from datetime import UTC, datetime, timedelta

    now = clock.now
    a = forqapp.send("hot-opts", "a", priority=7, attributes={"k": "v"}, delay=timedelta(seconds=2), retention=60)
    r = row(a)
    assert (r.priority, r.attributes, r.process_after, r.expires_after) == (7, '{"k":"v"}', now + 2_000,
                                                                           now + 2_000 + 60_000)
    when = datetime.fromtimestamp((now + 5_000) / 1000, tz=UTC)
    assert row(forqapp.send("hot-opts", "b", process_after=when)).process_after == now + 5_000
    (b,) = forqapp.send_many("hot-opts", [{"content": "c", "priority": 7, "attributes": {"k": "v"}, "delay": 2,
                                           "retention": 60}])
    rb = row(b)
    assert (rb.priority, rb.attributes, rb.process_after, rb.expires_after) == (
        r.priority, r.attributes, r.process_after, r.expires_after)
    refused(errors.BODY_INVALID, forqapp.send, "hot-opts", "x", priority=True)
    refused(errors.BODY_INVALID, forqapp.send, "hot-opts", "x", priority=1001)
    refused(errors.BODY_INVALID, forqapp.send, "hot-opts", "x", attributes={"k": 1})
    refused(errors.BODY_INVALID, forqapp.send, "hot-opts", "x", delay=1, process_after=now)
    forqapp.configure_queue("hot-opts-full", max_length=1)
    forqapp.send("hot-opts-full", "1", priority=3)
    refused(errors.QUEUE_FULL, forqapp.send, "hot-opts-full", "2", priority=3)
    assert Message.objects.filter(queue="hot-opts").count() == 3
