"""forqapp.services.waiting: claim or wait, the process-wide drain, the give-back of a claim whose caller
left; and wake-up kicks that wait for the commit."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from datetime import timedelta

import pytest
from django.db import connections, transaction

import forqapp
from forqapp import services
from forqapp.models import Message
from forqapp.services import waiting, wakeups
from forqapp.services.notify import Notifier, notifier_for

pytestmark = pytest.mark.django_db(transaction=True)


def _in_thread(fn, *args):
    """Run ``fn`` in a thread of its own that closes its database connection when done."""

    def run():
        try:
            fn(*args)
        finally:
            connections.close_all()

    return threading.Thread(target=run)


@pytest.fixture
def drained():
    waiting.drain()
    yield
    waiting._undrain()


def test_claim_returns_what_came_while_it_waited():
    def send_later():
        time.sleep(0.2)
        forqapp.send("later", "x")

    sender = _in_thread(send_later)
    sender.start()
    started = time.monotonic()
    message = forqapp.receive("later", wait=10)
    sender.join(10)
    assert message is not None and message.content == "x"
    assert time.monotonic() - started < 8


def test_a_draining_process_does_not_wait(drained):
    started = time.monotonic()
    assert forqapp.receive("nothing", wait=5) is None
    assert asyncio.run(waiting.claim_async(services.claim, "nothing", 5)) is None
    assert time.monotonic() - started < 1


def test_drain_ends_the_waits_under_way():
    result = {}
    thread = _in_thread(lambda: result.setdefault("got", forqapp.receive("idle", wait=10)))
    thread.start()
    time.sleep(0.3)  # waiting now
    started = time.monotonic()
    try:
        waiting.drain()
        thread.join(5)
    finally:
        waiting._undrain()
    assert not thread.is_alive() and result == {"got": None}
    assert time.monotonic() - started < 5  # not the 10 s wait


def test_a_claim_that_finishes_after_its_caller_left_is_given_back():
    forqapp.send("left", "x")
    claimed = threading.Event()

    def slow_claim(queue: str):
        message = services.claim(queue)
        claimed.set()
        time.sleep(0.3)  # the caller leaves meanwhile
        return message

    async def caller_leaves():
        task = asyncio.ensure_future(waiting.claim_async(slow_claim, "left", 0))
        await asyncio.get_running_loop().run_in_executor(None, claimed.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.6)  # a server's loop lives on: the claim ends, its give-back runs

    asyncio.run(caller_leaves())
    deadline = time.monotonic() + 5
    while Message.objects.get(queue="left").status != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    row = Message.objects.get(queue="left")
    assert (row.status, row.attempts) == (0, 0)  # ready again, the attempt not counted


def test_release_many_gives_back_only_current_deliveries():
    forqapp.send_many("rel", ["a", "b"])
    a, b = services.claim_many("rel", 2)
    assert services.release_many("rel", [(a.id, a.receipt), (b.id, b.receipt + 1)]) == 1
    assert services.release_many("rel", []) == 0
    assert sorted(Message.objects.filter(queue="rel").values_list("status", "attempts")) == [(0, 0), (1, 1)]


@pytest.mark.parametrize("operation", ["send", "release", "release_many", "requeue"])
def test_wake_up_kicks_wait_for_the_commit(monkeypatch, operation):
    forqapp.send("kick", "x")
    message = services.claim("kick")
    if operation == "requeue":
        Message.objects.filter(id=message.id).update(queue="kick-dlq", is_dlq=True, status=0)
    kicks = []
    monkeypatch.setattr(Notifier, "kick", lambda self, queues=None: kicks.append(self.alias))
    monkeypatch.setitem(notifier_for("default")._waiters, "kick", deque(["a waiter"]))
    with transaction.atomic():
        if operation == "send":
            forqapp.send("kick", "y")
        elif operation == "release":
            assert services.release(message)
        elif operation == "release_many":
            assert services.release_many("kick", [(message.id, message.receipt)]) == 1
        else:
            assert services.requeue("kick-dlq") == 1
        assert kicks == []  # not yet: a waiter woken now would find nothing
    assert kicks == ["default"]


def test_nobody_waiting_nothing_is_kicked(monkeypatch):
    """A write with no waiter in this process kicks nothing (the usual send: a dict lookup), in
    or out of a transaction; a waiter that comes later looks at the database when it starts."""
    kicks = []
    monkeypatch.setattr(Notifier, "kick", lambda self, queues=None: kicks.append(self.alias))
    forqapp.send("quiet", "x")
    with transaction.atomic():
        forqapp.send("quiet", "y")
    assert kicks == []
    assert forqapp.receive("quiet", wait=1).content == "x"  # and a waiter still finds what is there


def test_the_notifier_says_a_database_that_cannot_serve_in_one_line(monkeypatch, caplog):
    """Audit (a full disk): the notifier logged a whole traceback each try (every 0.5 s)."""
    import logging
    import sqlite3

    from forqapp import errors

    def disk_io_error(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    errors._said.clear()
    caplog.set_level(logging.WARNING, logger="forqapp")
    monkeypatch.setattr(wakeups, "wake_version", disk_io_error)
    notifier = Notifier("default")
    notifier.wait("cannot-serve", 1.3)  # the watching thread fails about three times meanwhile
    lines = [r for r in caplog.records if r.name == "forqapp.notify"]
    assert lines and all(r.exc_info is None for r in lines), [r.getMessage() for r in lines]
    assert "the database's disk failed a read or write; retrying" in lines[0].getMessage()
    assert len(lines) <= 2  # at most one a second


def test_a_failed_look_forgets_what_every_look_found_quiet(monkeypatch, settings):
    """After a failure (its connection closed, a server restarting) the notifier has not seen what
    was committed meanwhile: no queue is taken to be quiet on the looks from before it."""
    from django.db import OperationalError

    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    notifier = Notifier("default")  # this test's own, with its own thread
    notifier.wait("found-quiet-before", 0.3)
    assert notifier.quiet("found-quiet-before")
    due, failed = wakeups.due, []

    def fails_once(*args, **kwargs):
        if not failed:
            failed.append(True)
            raise OperationalError("server closed the connection unexpectedly")
        return due(*args, **kwargs)

    monkeypatch.setattr(wakeups, "due", fails_once)
    notifier.wait("looked-at-after", 1.2)  # its look fails, and runs again 0.5 s later
    assert failed and notifier.quiet("looked-at-after")
    assert not notifier.quiet("found-quiet-before")


def test_an_idle_waiter_costs_no_polling(settings):
    """The notifier sleeps on the store's change descriptor (SQLite: inotify on the write-ahead log;
    PostgreSQL: the LISTEN socket), not on a 5 ms poll of the data version: a waiter on an empty
    queue for 1.5 s costs a handful of wake-ups of the watching thread, not three hundred."""
    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    assert wakeups.wake_fd() is not None  # the file's watch (or the socket) exists here
    notifier = Notifier("default")  # this test's own, with its own thread
    notifier.wait("idle-sleeper", 1.5)
    assert notifier.full_checks >= 1  # it did look (the new waiter's queue)
    assert notifier.sleeps < 20, notifier.sleeps


def _sleeping_waiter(notifier, queue, seconds):
    """A thread waiting on ``queue`` through ``notifier`` (started, asleep): it and its answer."""
    got = []
    waiter = _in_thread(lambda: got.append(notifier.wait(queue, seconds) or time.monotonic()))
    waiter.start()
    deadline = time.monotonic() + 5
    while queue not in notifier._waiters or notifier.sleeps == 0:
        assert time.monotonic() < deadline, "the waiter never slept"
        time.sleep(0.005)
    return waiter, got


def test_the_fallback_reads_nothing_while_nothing_was_committed(monkeypatch, settings):
    """Idle waiters, no commit: on SQLite the fallback (100 ms here) reads the commit counter and
    looks at no queue, once its last look came the settings' cache time (1 s) after the last commit;
    on PostgreSQL, where a notification can be lost with its connection, it looks each time. A commit
    elsewhere is still seen (the send's own kick switched off)."""
    from forqapp.services import policies, produce

    settings.FORQ_WAKE_FALLBACK_MS = 100
    monkeypatch.setattr(produce, "kick", lambda *args, **kwargs: None)
    notifier = Notifier("default")
    waiter, got = _sleeping_waiter(notifier, "fallback-idle", 10)
    time.sleep(policies.CACHE_S + 0.5)
    full = notifier.full_checks
    time.sleep(1.0)  # ten fallback intervals
    looked = notifier.full_checks - full
    if wakeups.wake_exact():
        assert looked == 0, looked
    else:
        assert looked >= 5, looked
    sent = time.monotonic()
    forqapp.send("fallback-idle", "x")
    waiter.join(15)
    assert got and got[0] - sent < 5


def test_a_limit_raised_elsewhere_is_noticed_though_its_settings_were_cached(monkeypatch, settings):
    """Another process raises a full queue's max_in_flight: its commit wakes the notifier, whose
    look may still read the settings this process cached a moment before (up to 1 s old); the
    fallback looks again until a look has read them after that commit, so the waiter is woken."""
    from forqapp.services import queues

    settings.FORQ_WAKE_FALLBACK_MS = 100
    forqapp.configure_queue("raised-elsewhere", max_in_flight=1)
    forqapp.send("raised-elsewhere", "a")
    forqapp.send("raised-elsewhere", "b")
    assert forqapp.receive("raised-elsewhere", visibility_timeout=timedelta(minutes=5)) is not None
    notifier = Notifier("default")
    waiter, got = _sleeping_waiter(notifier, "raised-elsewhere", 10)
    time.sleep(0.3)  # it looked: nothing it may claim (one in flight of one)
    assert not got
    # as another process would: no forgetting of this process's cached settings, no kick
    monkeypatch.setattr(queues, "forget_policies", lambda: None)
    monkeypatch.setattr(queues, "kick", lambda *args, **kwargs: None)
    raised = time.monotonic()
    forqapp.configure_queue("raised-elsewhere", max_in_flight=2)
    waiter.join(15)
    assert got and got[0] - raised < 5


def test_the_data_version_of_a_new_connection_is_a_new_number():
    """The notifier compares versions read by its thread; a connection reopened (after an error)
    counts from its own start, so the number must differ whatever SQLite's counter says (where the
    version is exact: PostgreSQL's counts notifications, and its fallback always looks)."""
    if not wakeups.wake_exact():
        pytest.skip("the store's version counts notifications (PostgreSQL): the fallback never trusts it")
    before = wakeups.wake_version()
    connections["default"].close()
    assert wakeups.wake_version() != before


def test_a_commit_elsewhere_wakes_the_sleeping_notifier(monkeypatch, settings):
    """Without the poll (60 s) and the fallback (60 s), and with the send's own kick switched off,
    only the change descriptor can wake the waiter before its 10 s wait ends."""
    from forqapp.services import produce

    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    monkeypatch.setattr(produce, "kick", lambda *args, **kwargs: None)
    notifier = Notifier("default")
    got = []
    waiter = _in_thread(lambda: got.append(notifier.wait("elsewhere", 10) or time.monotonic()))
    waiter.start()
    deadline = time.monotonic() + 5
    while "elsewhere" not in notifier._waiters or notifier.sleeps == 0:
        assert time.monotonic() < deadline, "the waiter never slept"
        time.sleep(0.005)
    sent = time.monotonic()
    forqapp.send("elsewhere", "x")  # another connection (this thread's), committed
    waiter.join(15)
    assert got and got[0] - sent < 9  # woken, not at the end of its 10 s wait


def test_a_write_seen_before_its_commit_is_looked_at_again(monkeypatch, settings):
    """SQLite's inotify sees another process's write to the write-ahead log a moment before the
    commit that makes it visible (the WAL index's header, in shared memory, fires nothing): the
    notifier must read the version again shortly, not sleep on the quiet descriptor until the
    fallback (60 s here)."""
    import os

    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    state = {"version": 0}

    def drain(using=None):
        try:
            return bool(os.read(read_end, 100))
        except BlockingIOError:
            return False

    monkeypatch.setattr(wakeups, "wake_fd", lambda using=None: read_end)
    monkeypatch.setattr(wakeups, "wake_drain", drain)
    monkeypatch.setattr(wakeups, "wake_version", lambda using=None: state["version"])
    monkeypatch.setattr(wakeups, "wake_changes", lambda using=None: None)  # (SQLite's: no queue named)
    monkeypatch.setattr(wakeups, "due", lambda queues, limit, using=None: wakeups.Due(
        {"committed": 1} if state["version"] else {}))
    notifier = Notifier("default")
    woken = []
    waiter = _in_thread(lambda: woken.append(notifier.wait("committed", 10) or time.monotonic()))
    waiter.start()
    deadline = time.monotonic() + 5
    while "committed" not in notifier._waiters or notifier.sleeps == 0:
        assert time.monotonic() < deadline, "the waiter never slept"
        time.sleep(0.005)
    time.sleep(0.05)  # asleep on the descriptor
    os.write(write_end, b"w")  # the write is seen...
    time.sleep(0.02)
    state["version"] = 1  # ... and committed a moment later, with nothing more to see
    committed = time.monotonic()
    waiter.join(15)
    os.close(read_end)
    os.close(write_end)
    assert woken and woken[0] - committed < 5  # looked again: not at the end of its 10 s wait


def test_a_delayed_message_wakes_a_waiter_when_it_comes_due(settings):
    """No poll, no fallback (60 s): the notifier sleeps until the delayed message's time."""
    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    forqapp.send("comes-due", "later", delay=timedelta(seconds=1))
    started = time.monotonic()
    message = forqapp.receive("comes-due", wait=10)
    assert message is not None and message.content == "later"
    assert 0.9 <= time.monotonic() - started  # not before it was due


def test_a_lease_that_ends_wakes_a_waiter(settings):
    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    forqapp.send("lease-ends", "x")
    first = forqapp.receive("lease-ends", visibility_timeout=timedelta(seconds=1))
    assert first is not None
    again = forqapp.receive("lease-ends", wait=10)  # not acked: it comes back when the lease ends
    assert again is not None and again.id == first.id and again.attempts == 2


# --- the notifier's checks: targeted kicks, paced full checks, one statement -------------------------


def test_a_kick_on_an_unwaited_queue_asks_for_no_check():
    notifier = Notifier("default")  # no thread: only what kick() records
    notifier._waiters["watched"] = deque([object()])
    notifier.kick(["other", "another"])
    assert notifier._pending == set() and not notifier._full
    notifier.kick(["other", "watched"])
    assert notifier._pending == {"watched"} and not notifier._full
    notifier.kick()  # queues unknown: every waited queue
    assert notifier._full


def _receive_in_thread(queue, got):
    def receive():
        started = time.monotonic()
        message = forqapp.receive(queue, wait=10)
        got.append((message, time.monotonic() - started))

    return _in_thread(receive)


def _waiting_on(queue):
    deadline = time.monotonic() + 5
    while queue not in notifier_for("default")._waiters:
        assert time.monotonic() < deadline, "the receive never waited"
        time.sleep(0.005)


def test_a_kick_on_a_waited_queue_wakes_it_at_once(settings):
    """With the data version and the fallback out of play (60 s), only the send's own kick can wake
    the receive in time — and it does, checking that queue alone."""
    settings.FORQ_WAKE_POLL_MS = 60_000
    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    got = []
    receiver = _receive_in_thread("kicked", got)
    receiver.start()
    _waiting_on("kicked")
    time.sleep(0.05)  # past the new waiter's own first check
    notifier = notifier_for("default")
    full = notifier.full_checks
    sent = time.monotonic()
    forqapp.send("kicked", "x")
    receiver.join(30)
    (message, _), = got
    assert message is not None and message.content == "x"
    assert time.monotonic() - sent < 30  # woken: not by the poll or the fallback (60 s)
    assert notifier.full_checks == full  # a targeted check, not a look at every waited queue


def test_a_write_without_a_kick_wakes_within_the_poll_interval(monkeypatch, settings):
    """Another process's commit (here: a send whose kick is switched off) is seen through the data
    version (SQLite) or the notification (PostgreSQL), not the fallback (60 s)."""
    from forqapp.services import produce

    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    monkeypatch.setattr(produce, "kick", lambda *args, **kwargs: None)
    got = []
    receiver = _receive_in_thread("foreign", got)
    receiver.start()
    _waiting_on("foreign")
    time.sleep(0.05)
    sender = _in_thread(forqapp.send, "foreign", "x")
    sender.start()
    sender.join(5)
    receiver.join(15)
    # The receive waits 10 s, the fallback would come at 60 s: a message at all is one the data
    # version or the notification woke (no bound tighter than that: the machine may be loaded).
    (message, _), = got
    assert message is not None and message.content == "x"


def test_has_due_of_many_queues_in_one_read_answers_as_one_queue_at_a_time():
    from forqapp.services.base import _store, now_ms

    for _ in range(3):
        forqapp.send("ready", "x")
    forqapp.send("delayed", "x", delay=60)
    forqapp.send("leased", "x")
    assert services.claim("leased", visibility_timeout=60) is not None
    forqapp.send("grouped", "x", group="g1")
    forqapp.send("grouped", "y", group="g2")
    st = _store("default")
    queues = ["ready", "delayed", "leased", "grouped", "empty", "ready"]
    for now in (now_ms(), now_ms() + 3_600_000):
        for limit in (1, 2, 10):
            one_by_one = {}
            for queue in queues:
                one_by_one.update(st.has_due([queue], now, limit))
            assert st.has_due(queues, now, limit) == one_by_one
            assert one_by_one  # "ready" at least
    assert st.has_due([], now_ms(), 5) == {}
    turns = {q: st.next_group_turn(q) for q in queues}
    assert st.next_group_turns(queues) == {q: t for q, t in turns.items() if t is not None}


# --- a poll on a quiet queue waits first: no claim (a write transaction) that would find nothing ---


def _counting_claim(claims):
    def take(queue):
        claims.append(queue)
        return services.claim(queue)

    return take


def _polls(queue, *timeouts, take=services.claim):
    """Long polls of ``queue`` one after the other, as a client asking again (each a claim_async of
    the v1 consume): [(message or None, seconds it took), …]."""
    async def polls():
        out = []
        for timeout in timeouts:
            started = time.monotonic()
            got = await waiting.claim_async(take, queue, timeout, nothing=None)
            out.append((got, time.monotonic() - started))
        return out

    return asyncio.run(polls())


def _found_quiet(queue, timeout=0.2, take=services.claim):
    """Polls of ``queue`` of ``timeout`` seconds, each finding nothing, until the notifier
    remembers a look that found the queue quiet: how long the first took.

    On PostgreSQL a notification that names the queue (its own send, made before the poll) may
    reach the notifier only after its look, which it then forgets; and a notifier whose listening
    connection is new forgets every look at its first read. The next poll's look, with nothing more
    on the way, is remembered."""
    first = None
    for _ in range(4):
        (got, took), = _polls(queue, timeout, take=take)
        assert got is None
        first = took if first is None else first
        if notifier_for("default").quiet(queue):
            return first
    pytest.fail(f"{queue!r} was never found quiet")


def test_a_poll_asking_again_on_a_quiet_queue_runs_no_claim(settings):
    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    claims = []
    take = _counting_claim(claims)
    _found_quiet("quiet", take=take)  # claims, then waits: its wait's look finds nothing due
    assert claims[0] == "quiet"
    claims.clear()
    assert _polls("quiet", 0.3, take=take) == [(None, pytest.approx(0.3, abs=0.2))]  # waits alone
    assert claims == []


def test_a_blocking_wait_that_ends_on_a_quiet_queue_makes_no_last_claim(settings):
    """The blocking wait (``receive(wait=…)``, the worker, Celery's consumer): a claim, the wait,
    and, its time up with the queue still quiet, no claim again (it would find nothing)."""
    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    claims = []
    take = _counting_claim(claims)
    # (1 s: the notifier's look at the new waiter's queue, which finds it quiet, has that long.
    # Again if the notifier forgot that look, as _found_quiet says when.)
    for _ in range(4):
        claims.clear()
        assert waiting.claim(lambda: take("quiet-sync"), ["quiet-sync"], 1.0) is None
        if notifier_for("default").quiet("quiet-sync"):
            break
    assert claims == ["quiet-sync"]
    assert notifier_for("default").quiet("quiet-sync")


def test_a_blocking_wait_claims_again_when_its_queue_is_not_quiet(monkeypatch, settings):
    """Not known quiet when its time is up (the notifier's view is gone, as after a commit
    elsewhere): the last claim runs, and takes what came."""
    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    claims = []
    take = _counting_claim(claims)
    notifier = notifier_for("default")
    monkeypatch.setattr(notifier, "quiet", lambda queue: False)
    assert waiting.claim(lambda: take("not-quiet-sync"), ["not-quiet-sync"], 0.2) is None
    assert claims == ["not-quiet-sync", "not-quiet-sync"]


def _poll_while_sent_later(queue):
    """A poll of ``queue`` (10 s) while another thread sends it "x" 0.3 s later: (message, seconds)."""
    def send_later():
        time.sleep(0.3)
        forqapp.send(queue, "x")

    sender = _in_thread(send_later)
    sender.start()
    (message, took), = _polls(queue, 10)
    sender.join(5)
    return message, took


def test_a_poll_that_waits_first_gets_a_message_committed_without_a_kick(monkeypatch, settings):
    """Another process's send (here: this process's, its kick switched off) to a quiet queue wakes
    a poll that asked again without a claim: the commit is seen, and the queue looked at."""
    from forqapp.services import produce

    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    monkeypatch.setattr(produce, "kick", lambda *args, **kwargs: None)
    assert _found_quiet("quiet-then-sent") == pytest.approx(0.2, abs=0.15)
    message, took = _poll_while_sent_later("quiet-then-sent")
    assert message is not None and message.content == "x"
    assert took < 5  # woken by the commit, not the end of its wait (the fallback is 60 s)


def test_a_commit_elsewhere_leaves_other_queues_found_quiet_where_it_names_its_queue(monkeypatch, settings):
    """PostgreSQL's notifications name their queue: another process's commit to one queue leaves
    what a look found on the others standing (a poll asking again on one still waits first), and
    the look it brings is at that queue alone. SQLite's data version says only that something was
    committed: every look is forgotten, and every waited queue looked at again."""
    from forqapp.services import produce

    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    monkeypatch.setattr(produce, "kick", lambda *args, **kwargs: None)  # (as another process's commit)
    _found_quiet("left-quiet")
    notifier = notifier_for("default")
    full_checks = notifier.full_checks
    message, took = _poll_while_sent_later("sent-to")
    assert message is not None and message.content == "x" and took < 5  # woken by the commit
    names_its_queue = connections["default"].vendor == "postgresql"
    assert notifier.quiet("left-quiet") is names_its_queue
    assert (notifier.full_checks == full_checks) is names_its_queue


def test_a_stream_of_notifications_wakes_the_notifier_once_per_poll_interval(monkeypatch, settings):
    """PostgreSQL: commits elsewhere to a queue nobody here waits on are read a poll interval's
    worth at a time, not a wake-up of the notifier each (SQLite's commits bring paced full checks)."""
    from forqapp.services import produce

    if connections["default"].vendor != "postgresql":
        pytest.skip("SQLite's changes do not name their queue")
    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    settings.FORQ_WAKE_POLL_MS = 50
    monkeypatch.setattr(produce, "kick", lambda *args, **kwargs: None)  # (as another process's commits)
    notifier = notifier_for("default")

    async def stream():
        poll = asyncio.ensure_future(waiting.claim_async(services.claim, "waits-meanwhile", 10, nothing=None))
        await asyncio.sleep(0.3)  # it waits, its queue looked at
        sleeps, started = notifier.sleeps, time.monotonic()
        sender = _in_thread(lambda: [forqapp.send("streamed", "x") for _ in range(200)])
        sender.start()
        await asyncio.to_thread(sender.join, 30)
        took, woke = time.monotonic() - started, notifier.sleeps - sleeps
        poll.cancel()
        return took, woke

    took, woke = asyncio.run(stream())
    assert woke <= took / 0.05 + 5, (woke, took)  # (one each: 200)


def test_a_poll_that_waits_first_gets_a_delayed_message_when_it_comes_due(settings):
    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    forqapp.send("quiet-until-due", "later", delay=timedelta(seconds=1.2))
    started = time.monotonic()
    _found_quiet("quiet-until-due", 0.1)  # quiet until it is due (the send's own notification may be late)
    (message, _), = _polls("quiet-until-due", 10)
    assert message is not None and message.content == "later"
    assert 1.1 <= time.monotonic() - started < 5  # when it came due: not before, not at the fallback


def test_a_poll_that_waits_first_gets_a_message_whose_lease_ended(settings):
    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    forqapp.send("quiet-until-lease-ends", "x")
    leased = forqapp.receive("quiet-until-lease-ends", visibility_timeout=timedelta(seconds=1.2))
    assert leased is not None
    started = time.monotonic()
    _found_quiet("quiet-until-lease-ends")
    (again, _), = _polls("quiet-until-lease-ends", 10)
    assert again is not None and again.id == leased.id and again.attempts == 2
    assert time.monotonic() - started < 5


def test_a_poll_that_waits_first_on_a_queue_sent_to_here_gets_it_at_once(settings):
    """A send in this process while nobody waits: the next poll waits first (the notifier has not
    seen the commit yet) and gets it at once — the notifier sees the commit as that poll starts
    waiting, and looks at its queue."""
    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    _found_quiet("quiet-then-sent-here")
    forqapp.send("quiet-then-sent-here", "x")
    (message, took), = _polls("quiet-then-sent-here", 10)
    assert message is not None and message.content == "x" and took < 5


def test_a_new_waiter_on_a_quiet_queue_costs_the_notifier_no_look(settings):
    """No commit since the queue was found quiet: its next poll asks the database nothing at all."""
    settings.FORQ_WAKE_FALLBACK_MS = 60_000
    _found_quiet("quiet-no-look")
    notifier = notifier_for("default")
    checks = notifier.checks
    (second, took), = _polls("quiet-no-look", 0.3)
    assert second is None and took >= 0.25
    assert notifier.checks == checks


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="inotify is Linux's")
def test_watching_starts_no_child_process(monkeypatch):
    """libc comes from the process's own symbols: ctypes.util.find_library("c") ran `/sbin/ldconfig
    -p` in a child of every server process that started watching (a process tree counted mid-run
    saw it)."""
    import os
    import subprocess

    from forqapp.store import inotify

    def no_child(*args, **kwargs):
        raise AssertionError(f"a child process: {args!r}")

    monkeypatch.setattr(inotify, "_libc", None)
    monkeypatch.setattr(subprocess, "Popen", no_child)
    fd = inotify._instance()
    assert fd is not None and fd >= 0
    os.close(fd)
