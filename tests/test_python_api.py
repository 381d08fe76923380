"""The Python API: validation like the HTTP API, receipts, and the transactional outbox."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth.models import User
from django.db import connection, connections, transaction

import forqapp
from forqapp import services
from forqapp.errors import ForqError
from forqapp.models import Message, Status

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("queue", "content", "process_after", "code"),
    [
        ("bad name", "x", None, "bad_request.queue.invalid_name"),
        ("x" * 81, "x", None, "bad_request.queue.invalid_name"),  # 80 characters at most (SQS's limit)
        (".", "x", None, "bad_request.queue.invalid_name"),  # dot segments: no URL could name them
        ("..", "x", None, "bad_request.queue.invalid_name"),
        ("jobs-dlq", "x", None, "bad_request.queue.produce_to_dlq"),
        ("jobs", 5, None, "bad_request.body.invalid"),
        ("jobs", None, None, "bad_request.body.invalid"),
        ("jobs", "x" * 262_145, None, "bad_request.body.content.exceeds_limit"),
        ("jobs", "é" * 131_073, None, "bad_request.body.content.exceeds_limit"),
        ("jobs", "\ud800", None, "bad_request.body.invalid"),
        ("jobs", "x", 1, "bad_request.body.processAfter.in_past"),
        ("jobs", "x", 2**62, "bad_request.body.processAfter.too_far"),
        ("jobs", "x", "soon", "bad_request.body.invalid"),
    ],
)
def test_send_validates_like_the_http_api(queue, content, process_after, code):
    with pytest.raises(ForqError) as caught:
        forqapp.send(queue, content, process_after)
    assert caught.value.code == code
    assert not Message.objects.exists()


def test_a_queue_name_seen_valid_stays_checked_as_it_was(monkeypatch):
    """validation.queue_name keeps the names it found valid (a bounded dict): a DLQ's name, once
    seen by a receive, is still refused to a send; an invalid name is never kept; a full dict is
    emptied, not grown."""
    from forqapp.validation import rules as validation

    assert forqapp.receive("seen-dlq") is None
    for _ in range(2):
        with pytest.raises(ForqError) as refused:
            forqapp.send("seen-dlq", "x")
        assert refused.value.code == "bad_request.queue.produce_to_dlq"
    for _ in range(2):
        with pytest.raises(ForqError) as refused:
            forqapp.send("bad name", "x")
        assert refused.value.code == "bad_request.queue.invalid_name"
    assert "bad name" not in validation._valid_names
    monkeypatch.setattr(validation, "_VALID_NAMES_MAX", 3)
    monkeypatch.setattr(validation, "_valid_names", {})
    for name in ("a", "b", "c", "d"):
        validation.queue_name(name)
    assert validation._valid_names == {"d": False}


def test_send_takes_empty_content_and_process_after_0_as_forq_does():
    forqapp.send("jobs", "", 0)  # 0 is Go's zero value: absent, due now
    message = forqapp.receive("jobs")
    assert message.content == ""
    forqapp.ack(message)


def test_send_receive_nack_ack():
    message_id = forqapp.send("jobs", "payload")
    message = forqapp.receive("jobs")
    assert (message.id, message.queue, message.content, message.attempts) == (message_id, "jobs", "payload", 1)
    forqapp.nack(message)
    assert forqapp.receive("jobs") is None  # backing off for 1 s
    Message.objects.filter(id=message_id).update(process_after=0)
    again = forqapp.receive("jobs")
    assert again.attempts == 2 and again.receipt > message.receipt
    with pytest.raises(ForqError) as caught:
        forqapp.ack(message)  # the first delivery's receipt
    assert caught.value.code == "not_found.message"
    forqapp.ack(again)
    assert not Message.objects.exists()


def test_send_many_is_one_transaction():
    ids = forqapp.send_many("bulk", ["a", "b", {"content": "c", "processAfter": services.now_ms() + 60_000}])
    assert len(ids) == 3 and ids == sorted(ids)
    assert Message.objects.filter(queue="bulk").count() == 3
    with pytest.raises(ForqError):
        forqapp.send_many("bulk", ["d", 5])  # one bad item: nothing is written
    assert Message.objects.filter(queue="bulk").count() == 3
    got = [forqapp.receive("bulk").content for _ in range(2)]
    assert got == ["a", "b"] and forqapp.receive("bulk") is None  # "c" is delayed


TRICKY = ["a\u0000b", "é", "😀 \U0010ffff", "\n\t\"\\/", "\u2028", "\x7f\x1f", "123", "null", '{"a": [1]}', " x "]


@pytest.mark.parametrize("with_nul", [True, False])
def test_send_many_keeps_content_exactly(with_nul):
    """Batches travel to SQLite as one JSON document (except those holding a NUL): every string
    comes back exactly as sent, in order. PostgreSQL's text cannot hold a NUL: refused there."""
    contents = TRICKY if with_nul else TRICKY[1:]
    if with_nul and connection.vendor == "postgresql":
        for send in (lambda: forqapp.send("exact", contents[0]), lambda: forqapp.send_many("exact", contents)):
            with pytest.raises(ForqError) as caught:
                send()
            assert caught.value.code == "bad_request.body.invalid"
        assert not Message.objects.exists()
        return
    ids = forqapp.send_many("exact", contents)
    got = [forqapp.receive("exact") for _ in contents]
    assert [(m.id, m.content) for m in got] == list(zip(ids, contents, strict=True))
    assert forqapp.receive("exact") is None


def test_send_many_refuses_a_lone_surrogate_and_writes_nothing():
    with pytest.raises(ForqError) as caught:
        forqapp.send_many("bulk", ["fine", "\udfff"])
    assert caught.value.code == "bad_request.body.invalid"
    assert not Message.objects.exists()


def test_outbox_commits_with_the_callers_transaction():
    with transaction.atomic():
        User.objects.create(username="ada")
        forqapp.send("welcome", "ada")
    assert User.objects.filter(username="ada").exists()
    assert forqapp.receive("welcome").content == "ada"


def test_outbox_rolls_back_with_the_callers_transaction():
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            User.objects.create(username="bob")
            forqapp.send("welcome", "bob")
            raise RuntimeError("the view failed")
    assert not User.objects.filter(username="bob").exists()
    assert not Message.objects.filter(queue="welcome").exists()


def test_receive_waits_and_wakes_on_send_from_another_thread():
    def later():
        time.sleep(0.3)
        try:
            forqapp.send("waiting", "here")
        finally:
            connections.close_all()  # this thread's connection (psycopg warns about one left open)

    threading.Thread(target=later).start()
    start = time.monotonic()
    message = forqapp.receive("waiting", wait=10)
    assert message is not None and message.content == "here"
    assert time.monotonic() - start < 8


def test_receive_wait_times_out_with_none():
    start = time.monotonic()
    assert forqapp.receive("nothing", wait=0.3) is None
    assert time.monotonic() - start >= 0.3


def test_fail_and_extend_are_fenced():
    forqapp.configure_queue("fence", visibility_timeout=0)
    forqapp.send("fence", "x")
    first = forqapp.receive("fence")  # leased for 0 s: the next receive takes it again
    message = forqapp.receive("fence", visibility_timeout=1)
    assert message.id == first.id and message.receipt > first.receipt and message.attempts == 2
    lease = message.lease_expires_at
    forqapp.configure_queue("fence", visibility_timeout=30)
    assert forqapp.extend(message) and message.lease_expires_at >= lease + 29_000  # the queue's 30 s from now
    assert Message.objects.get(id=message.id).lease_expires_at == message.lease_expires_at
    assert not forqapp.extend(first)  # the first delivery's receipt settles nothing
    with pytest.raises(ForqError):
        forqapp.fail(first)
    forqapp.fail(message)
    row = Message.objects.get(id=message.id)
    assert row.status == Status.FAILED and row.attempts == 2


def test_requeue_and_delete_are_dlq_only():
    with pytest.raises(ForqError) as caught:
        services.requeue("jobs")
    assert caught.value.code == "bad_request.dlq_only_operation"
    with pytest.raises(ForqError):
        services.delete_dead("jobs")


def test_queue_names_of_80_characters_and_their_84_character_dlq():
    """forqapp's names go to 80 characters (Forq's v1 API alone keeps 64); the DLQ of one is 84."""
    name = "n" * 80
    forqapp.configure_queue(name, max_attempts=1)
    message_id = forqapp.send(name, "long")
    message = forqapp.receive(name)
    assert (message.id, message.queue) == (message_id, name)
    forqapp.fail(message, "boom")
    assert services.move_failed_to_dlq() == 1
    row = Message.objects.get(id=message_id)
    assert (row.queue, row.is_dlq) == (name + "-dlq", True)
    dead = forqapp.receive(name + "-dlq")  # consuming from a DLQ is allowed
    assert dead.id == message_id and services.release(dead)
    assert services.requeue(name + "-dlq", message_id) == 1
    assert forqapp.receive(name).content == "long"
    for bad in ("n" * 81, "n" * 81 + "-dlq"):
        with pytest.raises(ForqError) as caught:
            forqapp.receive(bad)
        assert caught.value.code == "bad_request.queue.invalid_name"


def test_requeue_is_public_and_takes_a_message_the_failed_job_has_not_moved_yet():
    """Audit: the README's ``forqapp.requeue`` did not exist, and ``services.requeue`` of a message
    out of attempts answered 0 until the ``failed`` job (every 6 minutes) had moved it."""
    forqapp.configure_queue("spent", max_attempts=1)
    message_id = forqapp.send("spent", "once")
    forqapp.fail(forqapp.receive("spent"), "boom")
    assert Message.objects.get(id=message_id).status == Status.FAILED  # still in its queue
    assert forqapp.requeue("spent-dlq", "0193a5d4-0000-7000-8000-000000000000") == 0  # another id: nothing
    assert Message.objects.get(id=message_id).queue == "spent-dlq"  # (the job's work was done)
    assert forqapp.requeue("spent-dlq", message_id) == 1
    row = Message.objects.get(id=message_id)
    assert (row.queue, row.is_dlq, row.status, row.attempts) == ("spent", False, Status.READY, 0)
    forqapp.fail(forqapp.receive("spent"), "again")
    assert forqapp.requeue("spent-dlq", message_id) == 1  # straight from failed, by its id


def test_requeue_keeps_the_fifo_place():
    first = forqapp.send("emails", "first")
    time.sleep(0.002)  # FIFO is by receive time (ms); messages of one ms are ordered by due time, then id
    forqapp.send("emails", "second")
    received_at = Message.objects.get(id=first).received_at
    Message.objects.filter(id=first).update(queue="emails-dlq", is_dlq=True, attempts=3,
                                            failure_reason="max_attempts_reached")
    assert services.requeue("emails-dlq") == 1
    row = Message.objects.get(id=first)
    assert (row.queue, row.is_dlq, row.attempts, row.status, row.failure_reason) == ("emails", False, 0, 0, None)
    assert row.received_at == received_at
    assert forqapp.receive("emails").content == "first"


def test_a_wait_on_a_paused_queue_sleeps_instead_of_spinning():
    """Waiters are not woken for a paused queue's due messages (they would claim nothing, again and
    again); they are once it is resumed."""
    from unittest import mock

    forqapp.configure_queue("napping", paused=True)
    forqapp.send("napping", "x")
    from forqapp.services import consume

    with mock.patch.object(consume, "claim", side_effect=consume.claim) as claims:  # what receive() calls
        assert forqapp.receive("napping", wait=1.0) is None
    assert claims.call_count <= 8  # the first try, then about one per FORQ_WAKE_FALLBACK_MS (250 ms)
    forqapp.configure_queue("napping", paused=False)
    assert forqapp.receive("napping", wait=2).content == "x"
