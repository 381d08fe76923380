"""Queues as first-class objects (issue 12), through the Python API (``forqapp.*``): each policy
field's effect, priorities, dedup, precise leases with redrive at claim, change visibility,
batches, peek, random order, sequence numbers, queue management and ``FORQ_QUEUES``.

Time is a fake clock (:func:`clock`: ``services.now_ms`` patched), so leases, backoffs and windows
end exactly when a test says, with no sleeping and no background job running. Runs on SQLite and on
PostgreSQL (``DATABASE_URL=postgres://…``).
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from prometheus_client import REGISTRY

import forqapp
from forqapp import conf, errors, services
from forqapp.conf import forq_settings
from forqapp.models import DedupEntry, Message, Queue, Status
from forqapp.worker import jobs

from .conftest import refused, row

pytestmark = pytest.mark.django_db

SECOND = 1_000


def sample(name: str, labels: dict | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def drain(queue: str, **kw) -> list[forqapp.ReceivedMessage]:
    got = []
    while (m := forqapp.receive(queue, **kw)) is not None:
        got.append(m)
    return got


# --- each policy field ------------------------------------------------------------------------


def test_max_attempts_fails_a_message_after_that_many_deliveries(clock):
    forqapp.configure_queue("ma", max_attempts=2, backoff=[0])
    message_id = forqapp.send("ma", "x")
    for attempt in (1, 2):
        m = forqapp.receive("ma")
        assert (m.id, m.attempts) == (message_id, attempt)
        forqapp.nack(m, "boom")
    assert forqapp.receive("ma") is None
    assert row(message_id).status == Status.FAILED
    assert services.move_failed_to_dlq() == 1
    dead = row(message_id)
    assert (dead.queue, dead.failure_reason, dead.last_error) == ("ma-dlq", "max_attempts_reached", "boom")


def test_unlimited_attempts_retry_for_ever(clock):
    info = forqapp.configure_queue("forever", max_attempts="unlimited", backoff=[0])
    assert info.policy["max_attempts"] == "unlimited" and info.overrides["max_attempts"] == "unlimited"
    forqapp.send("forever", "x")
    for attempt in range(1, 13):
        m = forqapp.receive("forever", visibility_timeout=0 if attempt % 2 else 30)
        assert m.attempts == attempt
        if attempt % 2 == 0:
            forqapp.nack(m)  # nacks and ended leases alike
    assert row(m.id).status == Status.READY
    assert forqapp.configure_queue("forever", max_attempts=0).policy["max_attempts"] == "unlimited"


def test_the_global_max_attempts_applies_where_the_queue_sets_none(clock, settings):
    settings.FORQ_MAX_ATTEMPTS = 2
    settings.FORQ_BACKOFF_MS = [0]
    forqapp.send("global", "x")
    forqapp.nack(forqapp.receive("global"))
    forqapp.nack(forqapp.receive("global"))
    assert forqapp.receive("global") is None
    assert forqapp.queue_info("global").policy["max_attempts"] == 2
    assert forqapp.queue_info("global").overrides == {}


def test_a_backoff_list_delays_each_retry_by_attempt(clock):
    forqapp.configure_queue("bo", backoff=[1_000, 5_000])
    message_id = forqapp.send("bo", "x")
    for delay in (1_000, 5_000, 5_000):  # the last value repeats
        m = forqapp.receive("bo")
        forqapp.nack(m)
        assert row(message_id).process_after == clock.now + delay
        clock.advance(delay / 1000 - 0.001)
        assert forqapp.receive("bo") is None
        clock.advance(0.001)


def test_an_exponential_backoff_doubles_up_to_its_cap_less_its_jitter(clock):
    forqapp.configure_queue("expo", backoff={"base_ms": 1_000, "max_ms": 6_000, "jitter": 0.5},
                            max_attempts="unlimited")
    sent = forqapp.send_many("expo", ["x"] * 20)
    for attempt, delay in enumerate((1_000, 2_000, 4_000, 6_000, 6_000), start=1):
        got = forqapp.receive_many("expo", 20)
        assert len(got) == 20 and {m.attempts for m in got} == {attempt}
        assert forqapp.nack_many(got) == 20
        waits = [row(m).process_after - clock.now for m in sent]
        assert all(delay / 2 <= w <= delay for w in waits), (attempt, waits)
        assert len(set(waits)) > 1  # jitter: not all the same
        clock.advance(delay / 1000)
    forqapp.configure_queue("expo", backoff={"base_ms": 500})  # no cap given: up to an hour; no jitter
    m = forqapp.receive("expo")
    forqapp.nack(m)
    assert row(m.id).process_after == clock.now + 500 * 2 ** 5


def test_visibility_timeout_is_the_lease_a_receive_takes(clock):
    forqapp.configure_queue("vt", visibility_timeout=10)
    forqapp.send_many("vt", ["a", "b", "c"])
    m = forqapp.receive("vt")
    assert m.lease_expires_at == clock.now + 10_000 == row(m.id).lease_expires_at
    assert forqapp.receive("vt", visibility_timeout=2).lease_expires_at == clock.now + 2_000
    assert forqapp.receive("vt", visibility_timeout=timedelta(minutes=1)).lease_expires_at == clock.now + 60_000
    refused(errors.BODY_INVALID, forqapp.receive, "vt", visibility_timeout=12 * 3600 + 1)
    refused(errors.BODY_INVALID, forqapp.receive, "vt", visibility_timeout=-1)
    assert forqapp.queue_info("vt").policy["visibility_timeout"] == 10


def test_the_global_visibility_timeout_applies_where_the_queue_sets_none(clock, settings):
    settings.FORQ_VISIBILITY_TIMEOUT_MS = 7_000
    forqapp.send("gvt", "x")
    assert forqapp.receive("gvt").lease_expires_at == clock.now + 7_000


def test_retention_sets_when_a_message_expires(clock):
    forqapp.configure_queue("ret", retention=60)
    now_id = forqapp.send("ret", "x")
    later_id = forqapp.send("ret", "y", delay=10)
    own_id = forqapp.send("ret", "z", retention=timedelta(seconds=5))
    assert row(now_id).expires_after == clock.now + 60_000
    assert row(later_id).expires_after == clock.now + 10_000 + 60_000  # counted from when it is due
    assert row(own_id).expires_after == clock.now + 5_000
    refused(errors.BODY_INVALID, forqapp.send, "ret", "x", retention=0)


def test_dlq_retention_sets_when_a_dead_letter_expires(clock):
    forqapp.configure_queue("dret", retention=1, dlq_retention=120, max_attempts=1, visibility_timeout=1)
    expired = forqapp.send("dret", "x")
    poison = forqapp.send("dret", "y")
    clock.advance(2)
    assert services.move_expired_to_dlq() == 2  # both expired (a second's retention)
    assert {row(expired).expires_after, row(poison).expires_after} == {clock.now + 120_000}
    assert services.requeue("dret-dlq", poison) == 1
    assert forqapp.receive("dret").id == poison
    clock.advance(1)
    assert forqapp.receive("dret") is None  # its one attempt is used up: redriven
    assert (row(poison).queue, row(poison).expires_after) == ("dret-dlq", clock.now + 120_000)


def test_max_length_refuses_a_send_beyond_it(clock):
    forqapp.configure_queue("full", max_length=3)
    before = sample("forq_sends_refused_full_total", {"queue_name": "full"})
    forqapp.send_many("full", ["a", "b"])
    error = refused(errors.QUEUE_FULL, forqapp.send_many, "full", ["c", "d"])  # all or nothing
    assert error.status == 503
    assert Message.objects.filter(queue="full").count() == 2
    forqapp.send("full", "c")
    refused(errors.QUEUE_FULL, forqapp.send, "full", "d")
    assert sample("forq_sends_refused_full_total", {"queue_name": "full"}) == before + 3
    in_flight = forqapp.receive("full")  # messages in flight count
    refused(errors.QUEUE_FULL, forqapp.send, "full", "d", delay=5)
    forqapp.ack(in_flight)
    forqapp.send("full", "d")
    m = forqapp.receive("full", visibility_timeout=0)
    Message.objects.filter(id=m.id).update(queue="full-dlq", is_dlq=True)  # the DLQ doesn't count
    forqapp.send("full", "e")
    refused(errors.QUEUE_FULL, forqapp.send, "full", "f")
    forqapp.configure_queue("full", max_length=None)
    forqapp.send("full", "f")


def test_lifo_ordering_delivers_the_newest_first(clock):
    forqapp.configure_queue("stack", ordering="lifo")
    sent = forqapp.send_many("stack", ["a", "b", "c"])
    assert [m.id for m in drain("stack")] == sent[::-1]
    forqapp.configure_queue("stack", ordering="fifo")
    sent = forqapp.send_many("stack", ["a", "b", "c"])
    assert [m.id for m in drain("stack")] == sent
    refused(errors.BODY_INVALID, forqapp.configure_queue, "stack", ordering="random")
    refused(errors.BODY_INVALID, forqapp.configure_queue, "stack", ordering="DUE")


def test_the_due_ordering_takes_by_due_time_and_a_plain_queue_keeps_fifo(clock):
    """A message sent a little in the past (within FORQ_PROCESS_AFTER_PAST_TOLERANCE_MS), after
    another: a plain queue (no ordering set: FIFO) delivers by sequence, as Forq does; a queue
    ordered "due" delivers it first. A past time beyond the tolerance is still refused there."""
    for queue in ("plain", "by-due"):
        if queue == "by-due":
            assert forqapp.configure_queue(queue, ordering="due").policy["ordering"] == "due"
        first = forqapp.send(queue, "first")
        clock.advance(1)
        earlier = forqapp.send(queue, "earlier", process_after=services.now_ms() - 5_000)
        want = [first, earlier] if queue == "plain" else [earlier, first]
        assert [m.id for m in drain(queue)] == want, queue
        refused(errors.PROCESS_AFTER_IN_PAST, forqapp.send, queue, "x", process_after=services.now_ms() - 60_000)
    assert forqapp.queue_info("plain").policy["ordering"] == "fifo"


def test_a_paused_queue_accepts_sends_and_delivers_nothing_until_resumed(clock):
    forqapp.send("held", "before")
    info = forqapp.configure_queue("held", paused=True)
    assert info.paused and info.policy["paused"]
    message_id = forqapp.send("held", "during")  # accepted
    assert forqapp.receive("held") is None
    assert forqapp.receive_many("held", 10) == []
    start = time.monotonic()
    assert forqapp.receive("held", wait=0.2) is None
    assert time.monotonic() - start >= 0.2
    assert forqapp.queue_info("held").counts["ready"] == 2
    assert not forqapp.configure_queue("held", paused=False).paused
    got = forqapp.receive_many("held", 10)
    assert [m.content for m in got] == ["before", "during"] and got[1].id == message_id


# --- priorities -----------------------------------------------------------------------------------


def test_priorities_mixed_with_delays(clock):
    low = forqapp.send("prio", "low", priority=-5)
    late_high = forqapp.send("prio", "late high", priority=100, delay=10)
    mid = forqapp.send("prio", "mid")
    high = forqapp.send("prio", "high", priority=100)
    mid2 = forqapp.send("prio", "mid 2", priority=0)
    got = forqapp.receive("prio")
    assert (got.id, got.priority) == (high, 100)
    assert [m.id for m in forqapp.receive_many("prio", 2)] == [mid, mid2]
    clock.advance(10)
    assert [m.id for m in forqapp.receive_many("prio", 10)] == [late_high, low]
    refused(errors.BODY_INVALID, forqapp.send, "prio", "x", priority=1001)
    refused(errors.BODY_INVALID, forqapp.send, "prio", "x", priority=-1001)
    refused(errors.BODY_INVALID, forqapp.send, "prio", "x", priority=1.5)
    assert forqapp.send("prio", "edge", priority=1000) and forqapp.send("prio", "edge", priority=-1000)


def test_priorities_with_lifo_and_delays(clock):
    forqapp.configure_queue("plifo", ordering="lifo")
    a = forqapp.send("plifo", "a")
    b = forqapp.send("plifo", "b", priority=5)
    c = forqapp.send("plifo", "c")
    d = forqapp.send("plifo", "d", priority=5)
    e = forqapp.send("plifo", "e", priority=5, delay=1)
    assert [m.id for m in drain("plifo")] == [d, b, c, a]
    clock.advance(1)
    assert forqapp.receive("plifo").id == e


def test_a_nacked_high_priority_message_still_comes_first_when_due(clock):
    forqapp.configure_queue("pn", backoff=[2_000])
    forqapp.send_many("pn", ["a", "b"])
    urgent = forqapp.send("pn", "urgent", priority=1)
    forqapp.nack(forqapp.receive("pn"))
    assert forqapp.receive("pn").content == "a"
    clock.advance(2)
    assert forqapp.receive("pn").id == urgent


# --- attributes -----------------------------------------------------------------------------------


def test_attributes_travel_with_the_message(clock):
    attrs = {"kind": "reset", "user": "é" * 1024, "k" * 64: ""}
    forqapp.send("attrs", "x", attributes=attrs)
    m = forqapp.receive("attrs")
    assert m.attributes == attrs and forqapp.peek("attrs", m.id).attributes == attrs
    forqapp.send("attrs", "y")
    assert forqapp.receive("attrs").attributes == {}
    for bad in ({str(k): "v" for k in range(11)}, {"": "v"}, {"k" * 65: "v"}, {"k": "v" * 1025}, {"k": 1},
                ["k"]):
        refused(errors.BODY_INVALID, forqapp.send, "attrs", "x", attributes=bad)


def test_stored_attributes_read_back_as_json_reads_them():
    """validation.decode_attributes (the scanner, on every received message) gives what json.loads
    gives for any text the encoder writes — escapes, non-ASCII, astral characters, empty values —
    and json.loads' own answer (or error) for anything else."""
    import json
    import random

    from forqapp import validation

    rng = random.Random(7)
    alphabet = ['"', "\\", "\n", "\x00", "\x1f", "é", "\u2028", "😀", "a", "Z", "/", " "]
    for _ in range(3000):
        attrs = {"".join(rng.choices(alphabet, k=rng.randint(1, 6))): "".join(rng.choices(alphabet, k=rng.randint(0, 6)))
                 for _ in range(rng.randint(0, 10))}
        text = validation.attributes(attrs)
        assert validation.decode_attributes(text) == attrs == (json.loads(text) if text else {})
    assert validation.decode_attributes(None) == validation.decode_attributes("") == {}
    assert validation.decode_attributes("[1]") == [1]  # as json.loads reads it
    for bad in ('{"a":"b"} trailing', "{", "nope"):
        with pytest.raises(json.JSONDecodeError):
            validation.decode_attributes(bad)


# --- dedup ----------------------------------------------------------------------------------------


def test_dedup_inside_the_window_returns_the_original_and_creates_nothing(clock):
    before = sample("forq_sends_deduplicated_total", {"queue_name": "dd"})
    first = forqapp.send("dd", "x", dedup_id="order-1")
    assert forqapp.send("dd", "another body", dedup_id="order-1") == first
    clock.advance(299)  # the default window: 5 minutes
    assert forqapp.send("dd", "x", dedup_id="order-1") == first
    assert Message.objects.filter(queue="dd").count() == 1
    assert sample("forq_sends_deduplicated_total", {"queue_name": "dd"}) == before + 2
    assert forqapp.send("dd-other", "x", dedup_id="order-1") != first  # per queue
    assert forqapp.receive("dd").dedup_id == "order-1"


def test_dedup_after_the_window_creates_a_new_message(clock):
    first = forqapp.send("ddw", "x", dedup_id="k", dedup_window=10)
    clock.advance(9.999)
    assert forqapp.send("ddw", "x", dedup_id="k") == first
    clock.advance(0.001)
    second = forqapp.send("ddw", "x", dedup_id="k")
    assert second != first and Message.objects.filter(queue="ddw").count() == 2
    forqapp.configure_queue("ddw", dedup_window=timedelta(seconds=2))  # the queue's window
    third = forqapp.send("ddw", "x", dedup_id="q")
    clock.advance(2)
    assert forqapp.send("ddw", "x", dedup_id="q") != third
    refused(errors.BODY_INVALID, forqapp.send, "ddw", "x", dedup_id="has space")
    refused(errors.BODY_INVALID, forqapp.send, "ddw", "x", dedup_id="k" * 129)


def test_dedup_after_ack_still_returns_the_original_until_the_window_ends(clock):
    first = forqapp.send("dda", "x", dedup_id="pay-7")
    forqapp.ack(forqapp.receive("dda"))
    assert not Message.objects.filter(queue="dda").exists()
    assert forqapp.send("dda", "x", dedup_id="pay-7") == first  # a producer retrying after a timeout
    assert not Message.objects.filter(queue="dda").exists()
    clock.advance(299)
    assert jobs.expired() == 0 and DedupEntry.objects.filter(queue="dda").exists()  # still in its window
    clock.advance(1)
    assert jobs.expired() == 0  # the 5-minute job forgets ended windows (messages moved: none)
    assert not DedupEntry.objects.filter(queue="dda").exists()
    assert forqapp.send("dda", "x", dedup_id="pay-7") != first


def test_dedup_within_one_batch_and_send_results(clock):
    results = services.send_entries("ddb", [{"content": "a", "dedup_id": "1"}, {"content": "b", "dedup_id": "1"},
                                            "c", {"content": "d", "dedup_id": "2"}])
    assert [r.deduplicated for r in results] == [False, True, False, False]
    assert results[1].id == results[0].id and results[1].sequence == 0
    assert Message.objects.filter(queue="ddb").count() == 3
    again = services.send_entries("ddb", [{"content": "x", "dedup_id": "2"}])
    assert again[0].id == results[3].id and again[0].deduplicated
    ids = forqapp.send_many("ddb", [{"content": "y", "dedup_id": "1"}, {"content": "z", "dedup_id": "3"}])
    assert ids[0] == results[0].id and ids[1] not in {r.id for r in results}


def test_a_full_queue_still_answers_a_seen_dedup_id(clock):
    forqapp.configure_queue("ddfull", max_length=1)
    first = forqapp.send("ddfull", "x", dedup_id="once")
    assert forqapp.send("ddfull", "x", dedup_id="once") == first  # nothing to create: not refused
    refused(errors.QUEUE_FULL, forqapp.send, "ddfull", "y", dedup_id="other")


def test_a_refused_send_does_not_remember_its_dedup_id(clock):
    forqapp.configure_queue("ddf", max_length=1)
    forqapp.send("ddf", "x")
    refused(errors.QUEUE_FULL, forqapp.send, "ddf", "y", dedup_id="late")
    forqapp.ack(forqapp.receive("ddf"))
    created = forqapp.send("ddf", "y", dedup_id="late")
    assert row(created).content == "y"


# --- precise leases -------------------------------------------------------------------------------


def test_an_ended_lease_is_delivered_again_with_no_job_running(clock):
    forqapp.configure_queue("lease", visibility_timeout=5)
    message_id = forqapp.send("lease", "x")
    first = forqapp.receive("lease")
    clock.advance(4.999)
    assert forqapp.receive("lease") is None
    assert forqapp.queue_info("lease").counts["in_flight"] == 1
    clock.advance(0.001)
    assert forqapp.queue_info("lease").counts["ready"] == 1
    again = forqapp.receive("lease")
    assert (again.id, again.attempts, again.first_received_at) == (message_id, 2, first.first_received_at)
    assert again.receipt > first.receipt
    refused(errors.NOT_FOUND_MESSAGE, forqapp.ack, first)
    refused(errors.NOT_FOUND_MESSAGE, forqapp.nack, first)
    forqapp.ack(again)


def test_an_ended_lease_is_delivered_again_on_the_real_clock():
    message_id = forqapp.send("lease-rt", "x")
    first = forqapp.receive("lease-rt", visibility_timeout=0.5)
    assert forqapp.receive("lease-rt") is None
    time.sleep(0.55)
    again = forqapp.receive("lease-rt")
    assert (again.id, again.attempts) == (message_id, 2) and again.receipt > first.receipt


def test_a_poison_message_never_runs_more_than_max_attempts_times_with_no_job(clock):
    forqapp.configure_queue("poison", max_attempts=3, visibility_timeout=1, dlq_retention=60)
    before = sample("forq_messages_redriven_total", {"queue_name": "poison"})
    poison = forqapp.send("poison", "crash")
    sequence = row(poison).sequence
    runs = 0
    for _ in range(10):  # a consumer that dies each time: never acks, never nacks
        m = forqapp.receive("poison")
        if m is not None:
            runs += 1
            assert m.id == poison
        clock.advance(1)
    assert runs == 3
    dead = row(poison)
    assert (dead.queue, dead.is_dlq, dead.status, dead.failure_reason, dead.sequence) == (
        "poison-dlq", True, Status.READY, "max_attempts_reached", sequence)
    assert sample("forq_messages_redriven_total", {"queue_name": "poison"}) == before + 1
    assert forqapp.queue_info("poison").counts == {"ready": 0, "delayed": 0, "in_flight": 0, "failed": 0, "dlq": 1}


def test_redrive_hands_out_the_next_message_instead(clock):
    forqapp.configure_queue("next", max_attempts=1, visibility_timeout=1)
    poison, fine = forqapp.send_many("next", ["crash", "fine"])
    assert forqapp.receive("next").id == poison
    clock.advance(1)
    assert forqapp.receive("next").id == fine  # the poison message went to the DLQ on the way
    assert row(poison).queue == "next-dlq"


def test_receive_many_with_a_0_s_lease_never_hands_out_a_message_twice(clock):
    forqapp.configure_queue("zero", max_attempts=1)
    poison, a, b = forqapp.send_many("zero", ["crash", "a", "b"])
    assert forqapp.receive("zero", visibility_timeout=0).id == poison  # its one attempt, lease ended
    got = forqapp.receive_many("zero", 3, visibility_timeout=0)  # redrives poison on the way
    assert sorted(m.id for m in got) == sorted([a, b]), [m.content for m in got]
    assert forqapp.ack_many(got) == 2


def test_a_message_received_from_a_dlq_stays_a_dead_letter(clock):
    forqapp.configure_queue("back", max_attempts=1, visibility_timeout=1)
    message_id = forqapp.send("back", "x")
    forqapp.receive("back")
    clock.advance(1)
    assert forqapp.receive("back") is None  # redriven
    for _ in range(3):  # read from the DLQ, the lease left to end
        m = forqapp.receive("back-dlq")
        assert m.id == message_id
        clock.advance(1)
    dead = row(message_id)
    assert (dead.queue, dead.is_dlq) == ("back-dlq", True)
    assert forqapp.queue_info("back").counts["dlq"] == 1
    assert services.delete_dead("back-dlq") == 1


def test_change_visibility_extends_a_lease_keeping_the_receipt(clock):
    forqapp.configure_queue("cv", visibility_timeout=5)
    forqapp.send("cv", "x")
    m = forqapp.receive("cv")
    receipt = m.receipt
    assert forqapp.change_visibility(m, 60) == 1
    assert m.lease_expires_at == clock.now + 60_000 == row(m.id).lease_expires_at and m.receipt == receipt
    clock.advance(59)
    assert forqapp.receive("cv") is None
    forqapp.change_visibility(m, timedelta(seconds=30))
    clock.advance(29)
    forqapp.ack(m)


def test_change_visibility_0_releases_at_once_with_the_attempt_counted(clock):
    forqapp.configure_queue("cv0", visibility_timeout=300)
    message_id = forqapp.send("cv0", "x")
    m = forqapp.receive("cv0")
    assert forqapp.change_visibility(m, 0) == 1
    again = forqapp.receive("cv0")
    assert (again.id, again.attempts) == (message_id, 2)
    refused(errors.NOT_FOUND_MESSAGE, forqapp.change_visibility, m, 10)  # a stale receipt
    refused(errors.BODY_INVALID, forqapp.change_visibility, again, 12 * 3600 + 1)
    refused(errors.BODY_INVALID, forqapp.change_visibility, again, -1)
    assert forqapp.change_visibility(again, 12 * 3600) == 1


def test_change_visibility_of_many_counts_the_current_ones(clock):
    forqapp.send_many("cvm", ["a", "b", "c"])
    a, b, c = forqapp.receive_many("cvm", 3, visibility_timeout=5)
    forqapp.ack(c)
    assert forqapp.change_visibility([a, b, c], 30) == 2
    clock.advance(29)
    assert forqapp.receive("cvm") is None
    assert forqapp.change_visibility([a], 0) == 1
    assert forqapp.receive("cvm").id == a.id


def test_extend_renews_for_the_queues_visibility_timeout(clock):
    forqapp.configure_queue("ext", visibility_timeout=20)
    forqapp.send("ext", "x")
    m = forqapp.receive("ext", visibility_timeout=1)
    clock.advance(0.5)
    assert forqapp.extend(m) and m.lease_expires_at == clock.now + 20_000
    clock.advance(19)
    assert forqapp.receive("ext") is None
    forqapp.ack(m)
    # A receive that asked for a longer lease keeps it: an extend renews for that long (an audit
    # saw extend() cut a 600 s lease to the queue's 3 s).
    forqapp.send("ext", "long")
    long = forqapp.receive("ext", visibility_timeout=600)
    clock.advance(100)
    # (to the ms: the receipt, from which the receive's lease is measured, may be 1 ms past its clock)
    assert forqapp.extend(long) and 0 <= clock.now + 600_000 - long.lease_expires_at <= 1
    clock.advance(100)  # again: the same length, not longer (each renewal moves the lease end on)
    assert forqapp.extend(long) and 0 <= clock.now + 600_000 - long.lease_expires_at <= 1
    forqapp.ack(long)
    # The worker's heartbeat: a message received for the queue's timeout is renewed for it, every time.
    forqapp.send("ext", "beat")
    beat = forqapp.receive("ext")
    for _ in range(3):
        clock.advance(7)
        assert forqapp.extend(beat) and 0 <= clock.now + 20_000 - beat.lease_expires_at <= 1
    forqapp.ack(beat)


# --- batches --------------------------------------------------------------------------------------


def test_receive_many_ack_many_and_nack_many(clock):
    forqapp.configure_queue("batch", backoff=[1_000])
    sent = forqapp.send_many("batch", [f"m{k}" for k in range(5)])
    got = forqapp.receive_many("batch", 3)
    assert [m.id for m in got] == sent[:3] and all(m.attempts == 1 for m in got)
    assert forqapp.ack_many(got) == 3
    assert forqapp.ack_many(got) == 0  # settled already
    rest = forqapp.receive_many("batch", 10)
    assert [m.id for m in rest] == sent[3:]
    assert forqapp.nack_many(rest) == 2
    assert forqapp.receive_many("batch", 10) == []
    clock.advance(1)
    again = forqapp.receive_many("batch", 10)
    assert [m.id for m in again] == sent[3:] and all(m.attempts == 2 for m in again)
    assert forqapp.nack_many(rest) == 0  # the first deliveries' receipts
    assert forqapp.ack_many([]) == 0 and forqapp.nack_many([]) == 0
    assert services.ack_many("batch", [(again[0].id, again[0].receipt)]) == 1
    for bad in (0, -1, 1.5, True):
        refused(errors.BODY_INVALID, forqapp.receive_many, "batch", bad)
    assert forqapp.receive_many("batch", 10, visibility_timeout=0) == []
    assert Message.objects.filter(queue="batch").count() == 1


def test_settle_many_by_receipt(clock):
    sent = forqapp.send_many("byr", ["a", "b", "c"])
    a, b, c = forqapp.receive_many("byr", 3, visibility_timeout=5)
    assert services.settle_many("change_visibility", "byr", [(a.id, a.receipt), (b.id, b.receipt + 1)],
                                seconds=60) == [True, False]
    assert services.settle_many("nack", "byr", [(b.id, b.receipt)]) == [True]
    assert services.settle_many("ack", "byr", [(a.id, a.receipt), (c.id, c.receipt), (c.id, c.receipt)]) == [
        True, True, False]
    assert list(Message.objects.filter(queue="byr").values_list("id", flat=True)) == [sent[1]]


# --- peek -----------------------------------------------------------------------------------------


def test_peek_shows_the_next_message_and_changes_nothing(clock):
    assert forqapp.peek("peek") is None
    first, second = forqapp.send_many("peek", ["a", "b"])
    forqapp.send("peek", "later", delay=60, priority=9)
    snapshot = list(Message.objects.filter(queue="peek").values())
    counts = forqapp.queue_info("peek").counts
    seen = forqapp.peek("peek")
    assert (seen.id, seen.content, seen.receipt, seen.attempts, seen.lease_expires_at) == (first, "a", None, 0, None)
    assert forqapp.peek("peek").id == first  # again: nothing was taken
    assert list(Message.objects.filter(queue="peek").values()) == snapshot
    assert forqapp.queue_info("peek").counts == counts
    refused(errors.RECEIPT_MISSING, forqapp.ack, seen)
    refused(errors.RECEIPT_MISSING, forqapp.change_visibility, seen, 5)
    m = forqapp.receive("peek", visibility_timeout=30)
    assert m.id == first
    by_id = forqapp.peek("peek", first)
    assert (by_id.attempts, by_id.receipt, by_id.lease_expires_at) == (1, None, clock.now + 30_000)
    assert forqapp.peek("peek").id == second
    assert forqapp.peek("peek", id=m.id).content == "a"
    assert forqapp.peek("other", first) is None
    refused(errors.MESSAGE_ID_INVALID, forqapp.peek, "peek", "not-an-id")
    forqapp.configure_queue("peek", ordering="lifo")
    assert forqapp.peek("peek").content == "b"  # the delayed one is not due


# --- random order ---------------------------------------------------------------------------------


def test_random_order_delivers_every_message_not_always_fifo(clock):
    sent = forqapp.send_many("shuffle", [str(k) for k in range(30)])
    got = [forqapp.receive("shuffle", random=True) for _ in range(30)]
    assert sorted(m.id for m in got) == sorted(sent)
    assert [m.id for m in got] != sent  # 1 chance in 30! of failing
    assert forqapp.receive("shuffle", random=True) is None
    sent = forqapp.send_many("shuffle", [str(k) for k in range(30)])
    batch = forqapp.receive_many("shuffle", 10, random=True)
    assert len(batch) == 10 and {m.id for m in batch} <= set(sent) and {m.id for m in batch} != set(sent[:10])


# --- sequence -------------------------------------------------------------------------------------


def test_sequence_numbers_strictly_increase_per_queue_and_stay_with_the_message(clock):
    forqapp.configure_queue("seq", retention=1)
    ids = [forqapp.send("seq", "a"), *forqapp.send_many("seq", ["b", "c", {"content": "d", "priority": 3}])]
    forqapp.send("seq-other", "x")
    ids.append(forqapp.send("seq", "e", dedup_id="e"))
    numbers = [row(m).sequence for m in ids]
    assert numbers == sorted(set(numbers)) and numbers[0] >= 1
    m = forqapp.receive("seq")
    assert (m.id, m.sequence) == (ids[3], numbers[3])  # priority 3 first
    late = forqapp.send("seq", "late")
    clock.advance(2)
    assert services.move_expired_to_dlq() == 5  # all but the one in flight
    assert row(ids[0]).sequence == numbers[0] and row(ids[0]).queue == "seq-dlq"
    assert services.requeue("seq-dlq") == 5
    assert [row(i).sequence for i in ids] == numbers
    assert forqapp.peek("seq").sequence == numbers[0]  # its old place again
    last = row(late).sequence
    assert last > numbers[-1]
    forqapp.ack(m)
    forqapp.purge("seq")
    assert row(forqapp.send("seq", "after drain")).sequence > last  # never reused
    assert forqapp.queue_info("seq").last_sequence >= last + 1


def test_sequence_numbers_are_never_reused_after_a_queue_is_deleted_and_created_again(clock):
    sent = forqapp.send_many("phoenix", ["a", "b", "c"])
    Message.objects.filter(id=sent[2]).update(queue="phoenix-dlq", is_dlq=True)  # its DLQ's number counts
    highest = row(sent[2]).sequence
    assert forqapp.delete_queue("phoenix")
    first = forqapp.send("phoenix", "reborn")
    reborn = row(first).sequence
    assert reborn > highest
    forqapp.delete_queue("phoenix")
    forqapp.configure_queue("phoenix", max_attempts=2)  # created explicitly this time
    assert row(forqapp.send("phoenix", "again")).sequence > reborn


# --- queue management -----------------------------------------------------------------------------


def test_configure_queue_sets_resets_and_validates_fields(clock):
    info = forqapp.configure_queue("cfg", max_attempts=3, backoff=[10, 20], visibility_timeout=timedelta(minutes=2),
                                   retention=3600, dlq_retention=7200, max_length=50, ordering="lifo",
                                   dedup_window=60, paused=False)
    assert info.name == "cfg"
    given = {"max_attempts": 3, "backoff": [10, 20], "visibility_timeout": 120.0, "retention": 3600.0,
             "dlq_retention": 7200.0, "max_length": 50, "ordering": "lifo", "dedup_window": 60.0, "paused": False}
    assert {k: info.policy[k] for k in given} == given
    assert set(info.overrides) == {"max_attempts", "backoff", "visibility_timeout", "retention", "dlq_retention",
                                   "max_length", "ordering", "dedup_window"}
    assert all(info.policy[k] == v for k, v in info.overrides.items())
    assert info.counts == {"ready": 0, "delayed": 0, "in_flight": 0, "failed": 0, "dlq": 0}
    info = forqapp.configure_queue("cfg", max_length=None, ordering=None)  # back to the global settings
    assert "max_length" not in info.overrides and "ordering" not in info.overrides
    assert info.policy["max_length"] is None and info.policy["ordering"] == "fifo"
    assert info.overrides["max_attempts"] == 3  # fields not given keep their value
    row_ = Queue.objects.get(name="cfg")
    assert (row_.max_attempts, row_.visibility_timeout_ms, row_.max_length) == (3, 120_000, None)
    for field, bad in [("max_attempts", -1), ("max_attempts", 1.5), ("max_attempts", "many"), ("backoff", []),
                       ("backoff", [-1]), ("backoff", {"max_ms": 5}), ("backoff", {"base_ms": 10, "max_ms": 5}),
                       ("backoff", {"base_ms": 10, "jitter": 2}), ("visibility_timeout", 12 * 3600 + 1),
                       ("retention", 0), ("dlq_retention", "long"), ("max_length", 0), ("max_length", True),
                       ("ordering", "random"), ("dedup_window", 0), ("paused", "yes"), ("nope", 1)]:
        refused(errors.BODY_INVALID, forqapp.configure_queue, "cfg", **{field: bad})
    assert forqapp.queue_info("cfg").overrides == info.overrides  # nothing changed
    refused(errors.PRODUCE_TO_DLQ, forqapp.configure_queue, "cfg-dlq", max_attempts=1)
    refused(errors.QUEUE_INVALID_NAME, forqapp.configure_queue, "bad name", max_attempts=1)


def test_a_policy_change_reaches_the_queue_at_once_in_this_process(clock):
    forqapp.send_many("live", ["a", "b"])
    assert forqapp.receive("live").content == "a"
    forqapp.configure_queue("live", paused=True)
    assert forqapp.receive("live") is None


def test_queue_info_counts_and_unknown_queues(clock):
    refused(errors.NOT_FOUND_QUEUE, forqapp.queue_info, "ghost")
    forqapp.configure_queue("info", visibility_timeout=10)
    forqapp.send_many("info", ["a", "b", "c", "d"])
    forqapp.send("info", "later", delay=30)
    forqapp.receive("info")
    forqapp.fail(forqapp.receive("info"))
    services.move_failed_to_dlq()
    forqapp.fail(forqapp.receive("info"))
    info = forqapp.queue_info("info")
    assert info.counts == {"ready": 1, "delayed": 1, "in_flight": 1, "failed": 1, "dlq": 1}
    assert info.created_at is not None and info.json()["counts"] == info.counts
    implicit = forqapp.queue_info(forqapp.send("implicit", "x") and "implicit")
    assert implicit.overrides == {} and implicit.policy["ordering"] == "fifo"


def test_list_queues_purge_and_delete_queue(clock):
    forqapp.configure_queue("zeta", max_length=10)
    forqapp.send_many("alpha", ["a", "b", "c"])
    forqapp.send("alpha", "x", delay=60)
    forqapp.receive("alpha")
    dead = forqapp.send("alpha", "dead")
    Message.objects.filter(id=dead).update(queue="alpha-dlq", is_dlq=True)
    names = [q.name for q in forqapp.list_queues()]
    assert names == sorted(names) and {"alpha", "zeta"} <= set(names) and "alpha-dlq" not in names
    before = sample("forq_messages_cleanup_total", {"reason": "purged"})
    assert forqapp.purge("alpha") == 4  # every state: ready, delayed, in flight
    assert forqapp.purge("alpha") == 0
    assert sample("forq_messages_cleanup_total", {"reason": "purged"}) == before + 4
    assert forqapp.queue_info("alpha").counts["dlq"] == 1  # the DLQ is kept
    assert forqapp.delete_queue("alpha")
    assert not Message.objects.filter(queue="alpha").exists()
    # Its DLQ is a queue of its own: its dead letter stays until deleted there.
    assert list(Message.objects.filter(queue="alpha-dlq").values_list("id", flat=True)) == [dead]
    assert not forqapp.delete_queue("alpha")
    assert services.delete_dead("alpha-dlq") == 1
    refused(errors.NOT_FOUND_QUEUE, forqapp.queue_info, "alpha")
    assert forqapp.delete_queue("zeta")  # a queue with no messages
    assert [q.name for q in forqapp.list_queues()] == sorted(set(names) - {"alpha", "zeta"})


def test_a_deleted_queue_forgets_its_policy_and_dedup_ids(clock):
    forqapp.configure_queue("gone", paused=True)
    first = forqapp.send("gone", "x", dedup_id="k")
    forqapp.delete_queue("gone")
    assert forqapp.send("gone", "x", dedup_id="k") != first
    assert forqapp.receive("gone") is not None  # no longer paused


def test_declare_queue_makes_the_policy_exactly_the_given_fields(clock):
    forqapp.configure_queue("decl", max_attempts=4, ordering="lifo")
    info = services.declare_queue("decl", {"visibility_timeout": 5})
    assert info.overrides == {"visibility_timeout": 5.0}
    assert services.declare_queue("decl", {"visibility_timeout": 5}).overrides == info.overrides  # idempotent


def test_queue_info_of_a_dead_letter_queue_names_where_its_counts_are(clock):
    forqapp.send("mails", "x")
    error = refused(errors.PRODUCE_TO_DLQ, forqapp.queue_info, "mails-dlq")
    assert "queue_info('mails') holds it" in str(error)


def test_declaring_a_queue_keeps_it_paused_unless_the_declaration_says_paused(clock):
    forqapp.configure_queue("held", paused=True)  # staff paused it
    assert services.declare_queue("held", {"max_attempts": 2}).paused  # a deploy's migrate keeps it so
    assert not services.declare_queue("held", {"max_attempts": 2, "paused": False}).paused
    assert services.declare_queue("held", {"paused": True}).paused


DECLARED = {
    "mails": {"max_attempts": 3, "backoff": {"base_ms": 1000, "max_ms": 60000, "jitter": 0.2},
              "visibility_timeout": 30, "retention": timedelta(days=2), "dedup_window": 600, "ordering": "lifo",
              "max_length": 1000, "max_in_flight": 5, "rate": "10/s", "group_concurrency": 1,
              "group_rate": "5/s", "dead_letter_queue": "mails-dlq"},
    "thumbs": {"backoff": [100, 200], "dead_letter_queue": "mails"},
}


def test_undeclared_names_the_queues_whose_stored_policy_is_not_their_declaration(clock):
    assert services.undeclared(DECLARED) == ["mails", "thumbs"]  # no rows yet
    for name, fields in DECLARED.items():
        services.declare_queue(name, fields)
    assert services.undeclared(DECLARED) == []  # every field stored as declared reads back equal
    forqapp.configure_queue("mails", paused=True)  # staff's pause is not the declaration's business
    assert services.undeclared(DECLARED) == []
    forqapp.configure_queue("thumbs", max_attempts=9)  # a field the declaration leaves to the defaults
    assert services.undeclared(DECLARED) == ["thumbs"]
    changed = {**DECLARED, "mails": {**DECLARED["mails"], "group_rate": "6/s"}}
    assert services.undeclared(changed) == ["mails", "thumbs"]
    assert services.undeclared({"mails": {**DECLARED["mails"], "paused": False}}) == ["mails"]
    assert services.undeclared({"bad": {"max_attempts": -1}}) == []  # invalid: E050's to say


def test_forq_queues_list_says_when_forq_queues_is_not_applied(clock):
    import io

    from django.core.management import call_command
    from django.test import override_settings

    err = io.StringIO()
    with override_settings(FORQ_QUEUES=DECLARED):
        call_command("forq_queues", stdout=io.StringIO(), stderr=err)
        assert "FORQ_QUEUES is not what the database holds for mails, thumbs: run manage.py forq_queues apply" \
            in err.getvalue()
        call_command("forq_queues", "apply", stdout=io.StringIO())
        err = io.StringIO()
        call_command("forq_queues", stdout=io.StringIO(), stderr=err)
    assert err.getvalue() == ""


@pytest.mark.django_db(transaction=True)
def test_forq_worker_says_when_forq_queues_is_not_applied():
    import io

    from django.core.management import call_command
    from django.test import override_settings

    from forqapp.worker import consumers

    forqapp.consumer("mails")(lambda m: None)
    try:
        err = io.StringIO()
        with override_settings(FORQ_QUEUES={"mails": {"max_attempts": 3}}):
            call_command("forq_worker", "--burst", verbosity=0, stdout=io.StringIO(), stderr=err)
    finally:
        consumers.unregister("mails")
    assert "forq_worker: FORQ_QUEUES is not what the database holds for mails" in err.getvalue()


# --- FORQ_QUEUES ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    ({"bad name": {}}, "FORQ_QUEUES['bad name']: invalid queue name"),
    ({"jobs-dlq": {}}, "FORQ_QUEUES['jobs-dlq']: cannot produce to dead-letter queue"),
    ({"jobs": "fifo"}, "FORQ_QUEUES['jobs'] must be a dict of policy fields"),
    ({"jobs": {"max_attempts": -1}}, "FORQ_QUEUES['jobs']: max_attempts must be"),
    ({"jobs": {"priority": 1}}, "FORQ_QUEUES['jobs']: unknown policy field(s): priority"),
    (["jobs"], "FORQ_QUEUES must be a dict"),
])
def test_forq_queues_is_checked(settings, value, expected):
    settings.FORQ_QUEUES = value
    problems = [msg for check_id, msg in conf.problems() if check_id == "forqapp.E050"]
    assert len(problems) == 1 and problems[0].startswith(expected), problems
    with pytest.raises(ImproperlyConfigured, match="forqapp.E050"):
        forq_settings.FORQ_QUEUES  # noqa: B018


def test_a_valid_forq_queues_passes_the_check(settings):
    settings.FORQ_QUEUES = {"emails": {"max_attempts": "unlimited", "backoff": {"base_ms": 100, "jitter": 0.2},
                                       "visibility_timeout": 30, "ordering": "lifo", "paused": True},
                            "sms": {}}
    assert not [p for p in conf.problems() if p[0] == "forqapp.E050"]
    assert forq_settings.FORQ_QUEUES["sms"] == {}


def test_the_sequence_floor_of_deleted_queues_is_no_queue(admin_client):
    """SQLite keeps deleted queues' highest sequence number in a row named '': it is never listed
    as a queue (Python API, models, admin)."""
    from forqapp.models import Queue

    forqapp.send("gone", "x")
    assert forqapp.delete_queue("gone")
    assert [q.name for q in forqapp.list_queues()] == []
    assert not Queue.objects.filter(name="").exists()
    page = admin_client.get("/admin/forqapp/queue/")
    assert page.status_code == 200 and b'<th class="field-name"><a href="/admin/forqapp/queue//' not in page.content
    assert b"0 queues" in page.content or b"0 queue" in page.content


@pytest.mark.parametrize("value", [10**400, -(10**400), float("nan"), float("inf")])
def test_a_duration_out_of_any_range_is_a_clear_error(value):
    with pytest.raises(forqapp.ForqError) as caught:
        forqapp.configure_queue("huge", retention=value)
    assert caught.value.code == "bad_request.body.invalid"


@pytest.mark.parametrize("args", [("--json",), ("--json", "list"), ("list", "--json")])
def test_forq_queues_prints_json_with_json_before_or_after_list(args):
    """``--json`` goes after ``list`` as ``forq_keys list --json`` takes it, or before it."""
    import json
    from io import StringIO

    from django.core.management import call_command

    forqapp.send("cli-json", "x")
    out = StringIO()
    call_command("forq_queues", *args, stdout=out)
    listed = {q["name"]: q for q in json.loads(out.getvalue())}
    assert listed["cli-json"]["counts"]["ready"] == 1


def test_a_dead_letter_redriven_at_its_claim_is_kept_for_the_named_queues_retention():
    """A queue whose dead letters go to another queue: the letter the claim moves there (its last
    attempt used up) expires after that queue's retention, as a message sent there would."""
    forqapp.configure_queue("redrive-target", retention=timedelta(seconds=90))
    forqapp.configure_queue("redrive-source", max_attempts=1, dead_letter_queue="redrive-target",
                            dlq_retention=timedelta(days=6))
    sent = forqapp.send("redrive-source", "x")
    assert forqapp.receive("redrive-source", visibility_timeout=timedelta(seconds=1)) is not None
    time.sleep(1.1)  # its lease ends: its only attempt is used up
    before = services.now_ms()
    assert forqapp.receive("redrive-source") is None  # the claim moves it to the named queue
    moved = row(sent)
    assert moved.queue == "redrive-target"
    assert before + 90_000 <= moved.expires_after <= services.now_ms() + 90_000
