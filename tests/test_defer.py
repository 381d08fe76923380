"""Defer with saved state (issue 13): ``forqapp.defer(message, delay, state=…)`` and a consumer's
``raise forqapp.Defer(delay, state=…)`` put the same message back — same id, attempts kept and
counted — with its state given to the next delivery; fenced by the receipt like ack; the DLQ move
keeps the last state.

Runs on SQLite and on PostgreSQL (``DATABASE_URL=postgres://…``).
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from prometheus_client import REGISTRY

import forqapp
from forqapp.models import Message, Status
from forqapp.worker import jobs
from forqapp.worker.consumers import Consumer
from forqapp.worker.runner import Worker

from .conftest import refused, row
from .workerproc import WorkerProc

pytestmark = pytest.mark.django_db
live = pytest.mark.django_db(transaction=True)  # other connections, threads or processes see the rows


# --- the Python API ---------------------------------------------------------------------------


def test_defer_keeps_id_and_attempts_and_carries_state_across_deliveries(clock):
    message_id = forqapp.send("df", "import file.csv")
    first = forqapp.receive("df")
    assert (first.attempts, first.state) == (1, None)
    forqapp.defer(first, state="row 100")
    second = forqapp.receive("df")
    assert (second.id, second.content, second.attempts, second.state) == (message_id, "import file.csv", 2, "row 100")
    assert second.receipt > first.receipt
    forqapp.defer(second, state="row 200")  # replaces the saved state
    third = forqapp.receive("df")
    assert (third.id, third.attempts, third.state) == (message_id, 3, "row 200")
    forqapp.defer(third)  # None: the saved state is kept
    fourth = forqapp.receive("df")
    assert (fourth.attempts, fourth.state) == (4, "row 200")
    forqapp.defer(fourth, state="")  # the empty string is a state, not "keep"
    fifth = forqapp.receive("df")
    assert fifth.state == ""
    forqapp.ack(fifth)
    assert not Message.objects.filter(id=message_id).exists()


def test_defer_keeps_priority_attributes_and_first_received_at_and_moves_to_the_back(clock):
    sent = forqapp.send("df-keep", "x", priority=3, attributes={"k": "v"}, dedup_id="d1")
    m = forqapp.receive("df-keep")
    waiting = forqapp.send("df-keep", "y", priority=3)
    clock.advance(1)
    forqapp.defer(m, state="s")
    later = forqapp.send("df-keep", "z", priority=3)
    assert forqapp.receive("df-keep").id == waiting  # the deferred message went behind it
    again = forqapp.receive("df-keep")
    assert (again.id, again.priority, again.attributes, again.dedup_id, again.received_at,
            again.first_received_at) == (sent, 3, {"k": "v"}, "d1", m.received_at, m.first_received_at)
    assert row(later).sequence > again.sequence > row(waiting).sequence > m.sequence  # a new place in line
    assert row(sent).state == "s"


def test_a_deferred_message_waits_its_delay(clock):
    forqapp.send("df-delay", "x")
    m = forqapp.receive("df-delay")
    forqapp.defer(m, 30, state="s")
    r = row(m.id)
    assert (r.status, r.process_after, r.attempts, r.state) == (Status.READY, clock.now + 30_000, 1, "s")
    assert forqapp.receive("df-delay") is None
    assert forqapp.peek("df-delay") is None
    clock.advance(29.999)
    assert forqapp.receive("df-delay") is None
    clock.advance(0.001)
    assert forqapp.receive("df-delay").state == "s"


def test_delay_as_timedelta_and_limits(clock):
    forqapp.send("df-td", "x")
    m = forqapp.receive("df-td")
    refused("bad_request.body.invalid", forqapp.defer, m, -1)
    refused("bad_request.body.invalid", forqapp.defer, m, "soon")
    forqapp.defer(m, timedelta(minutes=2))
    assert row(m.id).process_after == clock.now + 120_000


def test_a_job_that_defers_itself_lets_the_others_of_its_queue_have_a_turn(clock):
    """Cooperative processing (LonnyMQ's): a long job does a slice, saves its progress and defers
    itself; the messages already waiting in its queue (one slot: max_in_flight=1) run before its
    next slice."""
    forqapp.configure_queue("df-turn", max_in_flight=1)
    forqapp.send_many("df-turn", ["long", "short1", "short2"])
    order = []
    for _ in range(5):
        clock.advance(0.001)
        m = forqapp.receive("df-turn")
        order.append(m.content)
        if m.content == "long" and m.state != "2":
            forqapp.defer(m, state=str(int(m.state or 0) + 1))
        else:
            forqapp.ack(m)
    assert order == ["long", "short1", "short2", "long", "long"]


def test_defer_is_refused_with_a_stale_receipt(clock):
    forqapp.configure_queue("df-stale", visibility_timeout=10)
    forqapp.send("df-stale", "x")
    old = forqapp.receive("df-stale")
    clock.advance(10)  # the lease ends: the message is claimed again elsewhere
    new = forqapp.receive("df-stale")
    assert (new.id, new.attempts) == (old.id, 2)
    refused("not_found.message", forqapp.defer, old, state="from the dead worker")
    assert row(old.id).status == Status.PROCESSING and row(old.id).state is None
    forqapp.defer(new, state="ok")
    refused("not_found.message", forqapp.defer, new, state="twice")  # the delivery is settled
    third = forqapp.receive("df-stale")
    refused("not_found.message", forqapp.ack, new)
    forqapp.ack(third)
    refused("not_found.message", forqapp.defer, third)  # after an ack


def test_defer_validates_its_arguments(clock):
    forqapp.send("df-val", "x")
    m = forqapp.receive("df-val")
    refused("bad_request.body.invalid", forqapp.defer, m, state={"not": "text"})
    refused("bad_request.body.invalid", forqapp.defer, m, state=b"bytes")
    refused("bad_request.body.content.exceeds_limit", forqapp.defer, m, state="x" * 262_145)
    refused("bad_request.body.invalid", forqapp.defer, m, state="\ud800")
    peeked = forqapp.peek("df-val", m.id)
    refused("bad_request.receipt.missing", forqapp.defer, peeked)
    assert row(m.id).status == Status.PROCESSING  # nothing refused changed it
    forqapp.defer(m, state="é" * 100)
    assert forqapp.receive("df-val").state == "é" * 100


def test_defer_counts_in_the_metric(clock):
    def deferred():
        return REGISTRY.get_sample_value("forq_messages_deferred_total", {"queue_name": "df-metric"}) or 0.0

    before = deferred()
    forqapp.send("df-metric", "x")
    forqapp.defer(forqapp.receive("df-metric"))
    assert deferred() == before + 1


def test_the_dlq_move_at_claim_keeps_the_last_state(clock):
    """Attempts are kept, so a message deferred until its attempts are used up goes to the DLQ,
    with the state it last saved there for inspection."""
    forqapp.configure_queue("df-tomb", max_attempts=2)
    message_id = forqapp.send("df-tomb", "x")
    forqapp.defer(forqapp.receive("df-tomb"), state="step 1")
    m = forqapp.receive("df-tomb")
    assert (m.attempts, m.state) == (2, "step 1")
    forqapp.defer(m, state="step 2")
    assert forqapp.receive("df-tomb") is None  # used up: moved to the DLQ at the claim
    r = row(message_id)
    assert (r.queue, r.state, r.failure_reason) == ("df-tomb-dlq", "step 2", "max_attempts_reached")
    from_dlq = forqapp.peek("df-tomb-dlq", message_id)
    assert from_dlq.state == "step 2"


def test_the_dlq_move_of_a_failed_message_keeps_the_last_state(clock):
    forqapp.configure_queue("df-fail", max_attempts=5)
    message_id = forqapp.send("df-fail", "x")
    forqapp.defer(forqapp.receive("df-fail"), state="halfway")
    forqapp.fail(forqapp.receive("df-fail"), "gave up")
    assert jobs.failed() == 1
    r = row(message_id)
    assert (r.queue, r.state, r.failure_reason, r.last_error) == ("df-fail-dlq", "halfway", "fatal_error", "gave up")


def test_a_nack_keeps_the_saved_state(clock):
    forqapp.configure_queue("df-nack", backoff=[0])
    forqapp.send("df-nack", "x")
    forqapp.defer(forqapp.receive("df-nack"), state="kept")
    forqapp.nack(forqapp.receive("df-nack"), "boom")
    m = forqapp.receive("df-nack")
    assert (m.attempts, m.state) == (3, "kept")


# --- a consumer raising Defer -----------------------------------------------------------------


@live
def test_a_json_consumer_raising_defer_saves_json_state_and_resumes():
    deliveries = []

    def handler(message):
        deliveries.append((message.id, message.attempts, message.state))
        done = (message.state or {}).get("done", 0) + 1
        if done < message.content["steps"]:
            raise forqapp.Defer(0, state={"done": done, "rows": [done] * done})

    message_id = forqapp.send("df-json", json.dumps({"steps": 3}))
    counts = Worker({"df-json": Consumer("df-json", handler, decode="json")}, concurrency=2, burst=True).run()
    assert counts == {"defer": 2, "ack": 1}
    assert deliveries == [
        (message_id, 1, None),
        (message_id, 2, {"done": 1, "rows": [1]}),
        (message_id, 3, {"done": 2, "rows": [2, 2]}),
    ]
    assert not Message.objects.filter(id=message_id).exists()


@live
def test_a_plain_consumer_raising_defer_saves_text_and_keeps_it_without_state():
    seen = []

    def handler(message):
        seen.append(message.state)
        if message.attempts == 1:
            raise forqapp.Defer(0, state="cursor=42")
        if message.attempts == 2:
            raise forqapp.Defer(timedelta(0))  # no state: the saved one is kept

    forqapp.send("df-plain", "x")
    counts = Worker({"df-plain": Consumer("df-plain", handler)}, concurrency=1, burst=True).run()
    assert counts == {"defer": 2, "ack": 1}
    assert seen == [None, "cursor=42", "cursor=42"]


@live
def test_a_consumer_deferring_with_a_delay_is_not_redelivered_before_it(clock):
    def handler(message):
        raise forqapp.Defer(45, state=json.dumps({"at": 1}))

    message_id = forqapp.send("df-later", "x")
    counts = Worker({"df-later": Consumer("df-later", handler)}, concurrency=1, burst=True).run()
    assert counts == {"defer": 1}
    r = row(message_id)
    assert (r.status, r.attempts, r.process_after, json.loads(r.state)) == (Status.READY, 1, clock.now + 45_000, {"at": 1})


@live
@pytest.mark.parametrize(("defer", "reason"), [
    (forqapp.Defer(0, state={"not": "text"}), "state must be a string"),
    (forqapp.Defer(-5), "delay"),
    (forqapp.Defer(0, state="x" * 262_145), "content"),
])
def test_a_consumer_raising_an_invalid_defer_is_nacked_with_the_reason(defer, reason):
    """The consumer's mistake is not a lost message holding its lease (and a slot) until it ends."""
    def handler(message):
        raise defer

    forqapp.configure_queue("df-badq", max_in_flight=1)
    message_id = forqapp.send("df-badq", "x")
    counts = Worker({"df-badq": Consumer("df-badq", handler)}, concurrency=1, burst=True).run()
    assert counts == {"nack": 1}
    r = row(message_id)
    assert (r.status, r.attempts, r.state) == (Status.READY, 1, None)
    assert reason in r.last_error, r.last_error


@live
@pytest.mark.slow
def test_a_forq_worker_process_resumes_a_deferred_job_from_its_state(tmp_path):
    """``manage.py forq_worker`` with a ``decode="json"`` consumer that does one step per delivery
    (tests/flowapp/consumers.py)."""
    message_id = forqapp.send("flow-defer", json.dumps({"steps": 4}))
    w = WorkerProc(tmp_path, env={"DJANGO_SETTINGS_MODULE": "tests.flowapp.settings"})
    result = w.run("flow-defer", "--burst", "--concurrency", "2")
    assert result.returncode == 0, result.stderr
    runs = [json.loads(line) for line in w.log.read_text().splitlines()]
    assert [(r["id"], r["attempts"], r["state"]) for r in runs] == [
        (message_id, 1, None), (message_id, 2, {"done": 1}), (message_id, 3, {"done": 2}),
        (message_id, 4, {"done": 3}),
    ]
    assert not Message.objects.filter(id=message_id).exists()
