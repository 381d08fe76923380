"""Flow control (issue 13): a queue's ``max_in_flight`` and ``rate``, exact under concurrency on both
databases — 4 ``forq_worker`` processes × 8 threads never run more than ``max_in_flight`` handlers of
a queue at once, and the claims of a rate-limited queue keep its rate over a window of seconds —,
an expired lease frees its slot, a worker serving two queues takes them in turn, throttled claims are
counted, and a wait on a throttled queue sleeps until a slot frees or the next rate slot comes.

Runs on SQLite and on PostgreSQL (``DATABASE_URL=postgres://…``).
"""

from __future__ import annotations

import json
import threading
import time
from unittest import mock

import pytest
from django.db import connections
from prometheus_client import REGISTRY

import forqapp
from forqapp import services, utils, validation
from forqapp.errors import ForqError
from forqapp.models import Message, Status
from forqapp.services import base, consume
from forqapp.worker.consumers import Consumer
from forqapp.worker.runner import Worker

from .workerproc import WorkerProc

pytestmark = pytest.mark.django_db
live = pytest.mark.django_db(transaction=True)  # other connections, threads or processes see the rows


def throttled(queue: str, reason: str) -> float:
    return REGISTRY.get_sample_value("forq_claims_throttled_total", {"queue_name": queue, "reason": reason}) or 0.0


def in_flight(queue: str) -> int:
    return Message.objects.filter(queue=queue, status=Status.PROCESSING, process_after__gt=utils.now_ms()).count()


# --- the policy fields ------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "stored"), [
    ("10/s", "10/s"), ("600/m", "600/m"), ("100/h", "100/h"), ("1000/d", "1000/d"), ("1/2.5s", "1/2.5s"),
    (2.5, "1/2.5s"), (0.1, "1/0.1s"),
])
def test_rate_forms(value, stored):
    assert validation.rate(value) == stored
    info = forqapp.configure_queue("fc-forms", rate=value)
    assert info.policy["rate"] == stored


def test_rate_intervals():
    assert validation.rate_interval_us("10/s") == 100_000
    assert validation.rate_interval_us("600/m") == 100_000
    assert validation.rate_interval_us("1/2.5s") == 2_500_000
    assert validation.rate_interval_us("3/h") == 1_200_000_000


@pytest.mark.parametrize("value", ["0/s", "10/x", "abc", "10", "-1/s", "10/0s", "2000000/s", -1, 0, True, [1]])
def test_bad_rates_are_refused(value):
    with pytest.raises(ForqError) as caught:
        forqapp.configure_queue("fc-bad", rate=value)
    assert caught.value.code == "bad_request.body.invalid"


@pytest.mark.parametrize("value", [0, -1, 1.5, "3", True, 1_000_001])
def test_bad_max_in_flight_is_refused(value):
    with pytest.raises(ForqError) as caught:
        forqapp.configure_queue("fc-bad", max_in_flight=value)
    assert caught.value.code == "bad_request.body.invalid"


def test_limits_are_part_of_the_policy_and_none_resets_them():
    info = forqapp.configure_queue("fc-pol", max_in_flight=3, rate="10/s")
    assert (info.policy["max_in_flight"], info.policy["rate"]) == (3, "10/s")
    info = forqapp.configure_queue("fc-pol", max_in_flight=None, rate=None)
    assert (info.policy["max_in_flight"], info.policy["rate"]) == (None, None)


# --- concurrency ------------------------------------------------------------------------------


def test_max_in_flight_holds_claims_back_and_counts_them(clock):
    forqapp.configure_queue("fc-cap", max_in_flight=2)
    forqapp.send_many("fc-cap", [f"m{i}" for i in range(6)])
    before = throttled("fc-cap", "concurrency")
    first = forqapp.receive_many("fc-cap", 5)
    assert [m.content for m in first] == ["m0", "m1"]  # a batch takes no more than the free slots
    assert forqapp.receive("fc-cap") is None
    assert forqapp.receive_many("fc-cap", 3) == []
    assert throttled("fc-cap", "concurrency") == before + 2
    assert throttled("fc-cap", "rate") == 0
    forqapp.ack(first[0])
    assert forqapp.receive("fc-cap").content == "m2"  # the ack freed one slot, one only
    assert forqapp.receive("fc-cap") is None
    forqapp.nack(first[1])  # a nack frees its slot too
    assert forqapp.receive("fc-cap").content == "m3"
    info = forqapp.queue_info("fc-cap")
    assert info.counts["in_flight"] == 2


def test_defer_release_and_change_visibility_free_slots(clock):
    forqapp.configure_queue("fc-free", max_in_flight=1)
    forqapp.send_many("fc-free", ["a", "b", "c"])
    m = forqapp.receive("fc-free")
    forqapp.defer(m, 60)
    m = forqapp.receive("fc-free")
    assert m.content == "b"
    assert services.release(m)
    m = forqapp.receive("fc-free")
    assert m.content == "b" and forqapp.receive("fc-free") is None
    forqapp.change_visibility(m, 0)  # its lease ends now: the slot is free, the message due again
    again = forqapp.receive("fc-free")
    assert (again.id, again.attempts) == (m.id, 2)


def test_an_expired_lease_frees_its_slot_with_no_job_running(clock):
    forqapp.configure_queue("fc-lease", max_in_flight=1, visibility_timeout=10)
    forqapp.send_many("fc-lease", ["crashed", "next"])
    lost = forqapp.receive("fc-lease")  # its worker dies: nobody acks, no job runs
    assert forqapp.receive("fc-lease") is None
    clock.advance(9.999)
    assert forqapp.receive("fc-lease") is None
    clock.advance(0.001)  # the lease has ended: the slot is free again
    again = forqapp.receive("fc-lease")
    assert (again.id, again.attempts) == (lost.id, 2)  # the expired delivery is redelivered first
    assert forqapp.receive("fc-lease") is None  # ... and holds the slot: one in flight, not two
    with pytest.raises(ForqError) as caught:
        forqapp.ack(lost)  # the dead worker's receipt is stale
    assert caught.value.code == "not_found.message"
    forqapp.ack(again)
    assert forqapp.receive("fc-lease").content == "next"


def test_an_expired_lease_frees_its_slot_for_another_message(clock):
    """The expired message itself may be backing off elsewhere (another priority): what counts is
    live leases, so an expired one never holds a slot."""
    forqapp.configure_queue("fc-lease2", max_in_flight=1, visibility_timeout=5)
    low = forqapp.send("fc-lease2", "low", priority=0)
    lost = forqapp.receive("fc-lease2")
    assert lost.id == low
    forqapp.send("fc-lease2", "high", priority=9)
    assert forqapp.receive("fc-lease2") is None
    clock.advance(5)
    assert forqapp.receive("fc-lease2").content == "high"  # priority first; the expired one waits
    assert forqapp.receive("fc-lease2") is None  # the slot is the high one's now


@live
@pytest.mark.slow
def test_max_in_flight_is_never_exceeded_by_4_worker_processes_of_8_threads(tmp_path):
    # The limit is above one process's 8 threads: a process that wins every slot it frees (its own
    # ack wakes its own waiters first) cannot fill it alone, so reaching it takes several processes.
    limit, count, sleep = 12, 240, 0.03
    forqapp.configure_queue("flow-cap", max_in_flight=limit)
    w = WorkerProc(tmp_path, env={"DJANGO_SETTINGS_MODULE": "tests.flowapp.settings"})
    samples: list[int] = []
    watching = threading.Event()

    def watch():  # the live leases as the database holds them, from outside the workers
        try:
            while not watching.is_set():
                samples.append(in_flight("flow-cap"))
                time.sleep(0.002)
        finally:
            connections.close_all()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        start_workers(w, 4, "flow-cap", "--concurrency", "8")
        forqapp.send_many("flow-cap", [str(sleep)] * count)  # all four are waiting: they compete
        deadline = time.monotonic() + 90
        while Message.objects.filter(queue="flow-cap").exists():
            assert time.monotonic() < deadline, f"not done: {len(events(w, 'end'))} of {count}"
            assert all(p.poll() is None for p in w.procs), [w.output(p) for p in w.procs]
            time.sleep(0.05)
    finally:
        watching.set()
        watcher.join()
        w.stop_all()
    starts, ends = events(w, "start"), events(w, "end")
    assert len(starts) == len(ends) == count
    assert len({e["id"] for e in starts}) == count  # each message handled once: no lease lost
    assert len({e["pid"] for e in starts}) > 1  # the processes shared the work
    peak = max_overlap(starts, ends)
    assert peak <= limit, peak
    assert peak == limit  # and the limit is used, not just respected: by several processes at once
    assert max(samples) <= limit, max(samples)


def start_workers(w: WorkerProc, n: int, *args: str) -> None:
    """Start ``n`` ``forq_worker`` processes and wait until each runs its threads (its first log
    line), so that none has the queue to itself while the others are still starting."""
    procs = [w.start(*args) for _ in range(n)]
    for proc in procs:
        w.wait_for(lambda: "thread(s) on" in w.output(proc) or proc.poll() is not None,  # noqa: B023
                   what="the worker's first log line")
        assert proc.poll() is None, f"forq_worker exited: {w.output(proc)}"


def events(w: WorkerProc, event: str) -> list[dict]:
    if not w.log.exists():
        return []
    return [e for e in map(json.loads, w.log.read_text().splitlines()) if e["event"] == event]


def max_overlap(starts: list[dict], ends: list[dict]) -> int:
    """The most handlers running at one moment (an end at the same instant as a start comes first)."""
    points = sorted([(e["t"], 1) for e in starts] + [(e["t"], -1) for e in ends], key=lambda p: (p[0], p[1]))
    running = peak = 0
    for _, step in points:
        running += step
        peak = max(peak, running)
    return peak


# --- rate -------------------------------------------------------------------------------------


def test_a_rate_spaces_claims_evenly_one_per_slot(clock):
    forqapp.configure_queue("fc-rate", rate="10/s")
    forqapp.send_many("fc-rate", [f"m{i}" for i in range(10)])
    before = throttled("fc-rate", "rate")
    assert [m.content for m in forqapp.receive_many("fc-rate", 5)] == ["m0"]  # one per slot
    assert forqapp.receive("fc-rate") is None
    clock.advance(0.099)
    assert forqapp.receive("fc-rate") is None
    clock.advance(0.001)
    assert forqapp.receive("fc-rate").content == "m1"
    assert throttled("fc-rate", "rate") == before + 2
    clock.advance(5)  # idle time is not saved up: no burst after it
    assert forqapp.receive("fc-rate").content == "m2"
    assert forqapp.receive("fc-rate") is None
    clock.advance(0.1)
    assert forqapp.receive("fc-rate").content == "m3"


def test_a_minimum_interval_and_both_limits_together(clock):
    forqapp.configure_queue("fc-both", rate=2.5, max_in_flight=1)
    forqapp.send_many("fc-both", ["a", "b", "c"])
    a = forqapp.receive("fc-both")
    clock.advance(3)
    assert forqapp.receive("fc-both") is None  # the rate allows one, the concurrency limit not
    forqapp.ack(a)
    b = forqapp.receive("fc-both")
    assert b.content == "b"
    forqapp.ack(b)
    clock.advance(2.499)
    assert forqapp.receive("fc-both") is None  # now the rate holds it back
    clock.advance(0.001)
    assert forqapp.receive("fc-both").content == "c"


@live
def test_rate_state_is_shared_by_every_claimer(clock):
    """The next slot lives on the queue's row: another connection (another process) sees it."""
    forqapp.configure_queue("fc-shared", rate="1/m")
    forqapp.send_many("fc-shared", ["a", "b"])
    assert forqapp.receive("fc-shared").content == "a"
    got = []
    thread = threading.Thread(target=lambda: (got.append(forqapp.receive("fc-shared")), connections.close_all()))
    thread.start()
    thread.join()
    assert got == [None]
    clock.advance(60)
    assert forqapp.receive("fc-shared").content == "b"


@live
@pytest.mark.slow
def test_a_rate_limit_holds_over_a_window_of_seconds_across_worker_processes(tmp_path):
    rate, count = 10, 36
    forqapp.configure_queue("flow-rate", rate=f"{rate}/s")
    w = WorkerProc(tmp_path, env={"DJANGO_SETTINGS_MODULE": "tests.flowapp.settings"})
    try:
        start_workers(w, 3, "flow-rate", "--concurrency", "4")
        forqapp.send_many("flow-rate", ["0"] * count)
        deadline = time.monotonic() + 60
        while Message.objects.filter(queue="flow-rate").exists():
            assert time.monotonic() < deadline, f"not done: {len(events(w, 'end'))} of {count}"
            time.sleep(0.05)
    finally:
        w.stop_all()
    claims = sorted(e["receipt"] for e in events(w, "start"))  # a receipt is its claim's time (ms)
    assert len(claims) == count
    assert len({e["pid"] for e in events(w, "start")}) > 1
    for window_s in (1, 2, 3):
        window = window_s * 1000
        most = max(sum(1 for c in claims[i:] if c - start <= window) for i, start in enumerate(claims))
        assert most <= window_s * rate + 1, (window_s, most)  # never more than the rate allows
        # ... and close to it: the rate is used. (A claim that comes late moves the next slot on, so a
        # loaded machine can only lower the count; 80 % leaves room for a CI host's hiccups.)
        assert 5 * most >= 4 * window_s * rate, (window_s, most)  # in integers: 0.8 * 3 * 10 is 24.000000000000004
    span = claims[-1] - claims[0]
    assert (count - 1) * 1000 / rate <= span <= (count - 1) * 1000 / rate / 0.8, span


# --- waiting on a throttled queue -------------------------------------------------------------


def counting_claims():
    return mock.patch.object(consume, "claim", side_effect=consume.claim)  # what receive() calls


@live
def test_a_wait_on_a_queue_at_its_concurrency_limit_sleeps_instead_of_spinning():
    forqapp.configure_queue("fc-wait", max_in_flight=1)
    forqapp.send_many("fc-wait", ["a", "b"])
    held = forqapp.receive("fc-wait")
    with counting_claims() as claims:
        assert forqapp.receive("fc-wait", wait=1.0) is None
    assert claims.call_count <= 3, claims.call_count  # the first try; not one per fallback check
    forqapp.ack(held)


@live
def test_a_wait_on_a_rate_limited_queue_sleeps_instead_of_spinning():
    forqapp.configure_queue("fc-wait-r", rate="1/m")
    forqapp.send_many("fc-wait-r", ["a", "b"])
    assert forqapp.receive("fc-wait-r") is not None
    with counting_claims() as claims:
        assert forqapp.receive("fc-wait-r", wait=1.0) is None
    assert claims.call_count <= 3, claims.call_count


SETTLES = {
    "ack": forqapp.ack,
    "ack_many": lambda m: forqapp.ack_many([m]),  # the worker's
    "nack": lambda m: forqapp.nack(m, "boom"),
    "fail": lambda m: forqapp.fail(m, "no"),
    "defer": lambda m: forqapp.defer(m, 60),
}


@live
@pytest.mark.parametrize(("settle", "fallback_ms"), [
    ("ack", 100), ("ack", 5_000), ("ack_many", 5_000), ("nack", 5_000), ("fail", 5_000), ("defer", 5_000),
])
def test_a_wait_wakes_when_a_settle_elsewhere_frees_a_slot(settings, settle, fallback_ms):
    """With the fallback check out of the way (5 s), the settle itself wakes the waiter, on both
    databases (PostgreSQL's notifier hears only what is notified)."""
    settings.FORQ_WAKE_FALLBACK_MS = fallback_ms
    forqapp.configure_queue("fc-wake", max_in_flight=1, backoff=[60_000])
    forqapp.send_many("fc-wake", ["a", "b"])
    held = forqapp.receive("fc-wake")
    settled_at: list[float] = []

    def settle_later():
        time.sleep(0.5)
        try:
            SETTLES[settle](held)  # another thread: another connection, as another process would
            settled_at.append(time.monotonic())
        finally:
            connections.close_all()

    thread = threading.Thread(target=settle_later)
    started = time.monotonic()
    thread.start()
    with counting_claims() as claims:
        got = forqapp.receive("fc-wake", wait=4)
    woke = time.monotonic()
    thread.join()
    assert got is not None and got.content == "b"
    assert woke - settled_at[0] < 1.0, woke - settled_at[0]  # not at the end of the wait (4 s)
    assert woke - started < 2.0
    assert claims.call_count <= 4, claims.call_count


@live
def test_a_wait_wakes_when_the_next_rate_slot_comes():
    forqapp.configure_queue("fc-slot", rate="2/s")
    forqapp.send_many("fc-slot", ["a", "b"])
    first = forqapp.receive("fc-slot")
    started = time.monotonic()
    with counting_claims() as claims:
        second = forqapp.receive("fc-slot", wait=10)
    waited = time.monotonic() - started
    assert second is not None and second.content == "b"
    # Each claim's time (first_received_at: the claim's now). Not the receipts: a receipt is at least
    # the row's updated_at + 1, so a message claimed in the millisecond it was sent has a receipt 1 ms late.
    assert second.first_received_at - first.first_received_at >= 500
    assert 0.3 <= waited < 8, waited  # at the slot (0.5 s), not at the end of the wait (10 s)
    assert claims.call_count <= 4, claims.call_count


def test_due_leaves_out_throttled_queues_and_says_when_to_look_again(clock):
    forqapp.configure_queue("fc-due-c", max_in_flight=1)
    forqapp.configure_queue("fc-due-r", rate="1/s")
    forqapp.send_many("fc-due-c", ["a", "b", "c"])
    forqapp.send_many("fc-due-r", ["a", "b"])
    forqapp.send_many("fc-due-free", ["a", "b"])
    queues = ["fc-due-c", "fc-due-r", "fc-due-free"]
    assert services.due(queues, 10).counts == {"fc-due-c": 1, "fc-due-r": 2, "fc-due-free": 2}
    forqapp.receive("fc-due-c")
    r = forqapp.receive("fc-due-r")
    due = services.due(queues, 10)
    assert due.counts == {"fc-due-free": 2}
    assert r is not None and due.recheck_at == clock.now + 1000
    clock.advance(1)
    assert services.due(queues, 10).counts == {"fc-due-r": 1, "fc-due-free": 2}


# --- fairness ---------------------------------------------------------------------------------


@live
def test_a_worker_serving_two_queues_takes_them_in_turn():
    forqapp.send_many("fc-busy", ["busy"] * 100)
    forqapp.send_many("fc-calm", ["calm"] * 5)
    order: list[str] = []

    def handler(message):
        order.append(message.queue)

    consumers = {q: Consumer(q, handler) for q in ("fc-busy", "fc-calm")}
    Worker(consumers, concurrency=1, max_messages=20, burst=True).run()
    assert len(order) == 20
    assert order[:10].count("fc-calm") == 5, order  # the busy queue did not starve the calm one


@live
def test_a_throttled_queue_does_not_hold_up_the_others_of_a_worker():
    forqapp.configure_queue("fc-slowq", rate="1/m")
    forqapp.send_many("fc-slowq", ["slow"] * 10)
    forqapp.send_many("fc-fastq", ["fast"] * 30)
    order: list[str] = []
    consumers = {q: Consumer(q, lambda m: order.append(m.queue)) for q in ("fc-slowq", "fc-fastq")}
    started = time.monotonic()
    Worker(consumers, concurrency=4, burst=True, max_messages=31).run()  # (--burst would wait out the 1/m)
    assert time.monotonic() - started < 5
    assert order.count("fc-fastq") == 30 and order.count("fc-slowq") == 1


@live
def test_burst_waits_out_a_queues_limits_and_drains_it():
    """Audit: ``forq_worker --burst`` on a queue with a rate handled one message and exited, the
    rest ready (a claim the limit held back looked like an empty queue). So it did when another
    process held the queue's max_in_flight slots. It drains the queue now, at the limits' pace."""
    forqapp.configure_queue("fc-burst", rate="20/s", max_in_flight=3)
    forqapp.send_many("fc-burst", ["m"] * 10)
    handled: list[str] = []
    started = time.monotonic()
    Worker({"fc-burst": Consumer("fc-burst", lambda m: handled.append(m.id))}, concurrency=4, burst=True).run()
    assert len(handled) == 10 and Message.objects.filter(queue="fc-burst").count() == 0
    assert time.monotonic() - started >= 0.4  # 20/s: 9 intervals of 50 ms at least
    # The only slot held by someone else for a while: the burst waits for it, then drains.
    forqapp.configure_queue("fc-burst", rate=None, max_in_flight=1)
    forqapp.send_many("fc-burst", ["m"] * 3)
    elsewhere = forqapp.receive("fc-burst")

    def ack_later():  # (on a thread of its own, whose connection it closes)
        time.sleep(0.5)
        forqapp.ack(elsewhere)
        connections.close_all()

    threading.Thread(target=ack_later).start()
    handled.clear()
    Worker({"fc-burst": Consumer("fc-burst", lambda m: handled.append(m.id))}, concurrency=2, burst=True).run()
    assert len(handled) == 2 and Message.objects.filter(queue="fc-burst").count() == 0


@live
def test_burst_drains_a_queue_whose_groups_wait_out_their_group_rate():
    """Audit: ``forq_worker --burst`` on a queue with ``group_rate`` (the Message groups page's
    emails queue) exited with messages ready: once a group's turn was set to its next slot, a claim
    found no group's turn due and looked like an empty queue. It drains them now, at the groups' pace."""
    forqapp.configure_queue("fc-grate", group_rate="10/s")
    forqapp.send_many("fc-grate", [{"content": f"t1-{i}", "group": "tenant-1"} for i in range(3)]
                      + [{"content": "t2-0", "group": "tenant-2"}])
    handled: list[str] = []
    started = time.monotonic()
    Worker({"fc-grate": Consumer("fc-grate", lambda m: handled.append(m.content))}, concurrency=2, burst=True).run()
    assert sorted(handled) == ["t1-0", "t1-1", "t1-2", "t2-0"]
    assert Message.objects.filter(queue="fc-grate").count() == 0
    assert time.monotonic() - started >= 0.2  # tenant-1's three, 100 ms apart


# --- queues without limits --------------------------------------------------------------------


def test_queues_without_limits_are_unaffected():
    forqapp.send_many("fc-plain", [f"m{i}" for i in range(50)])
    with mock.patch.object(type(base._store(None)), "throttle_state") as state:
        assert services.due(["fc-plain"], 100).counts == {"fc-plain": 50}
        got = forqapp.receive_many("fc-plain", 50)
        assert len(got) == 50
        assert forqapp.receive_many("fc-plain", 50) == []
    state.assert_not_called()
    assert throttled("fc-plain", "concurrency") == throttled("fc-plain", "rate") == 0
    # no rate slot to wait for: the only time to look again is when the leases end
    assert services.due(["fc-plain"], 100).recheck_at == min(m.lease_expires_at for m in got)
    assert forqapp.ack_many(got) == 50
    assert services.due(["fc-plain"], 100).recheck_at is None
