"""``manage.py forq_worker`` in a subprocess on the test database file: the ack / nack / fatal
paths, graceful and immediate shutdown, crash recovery, heartbeats, poison messages."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

import forqapp
from forqapp import services, vocab
from forqapp.models import Message
from forqapp.worker import jobs

from .workerproc import WorkerProc

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def worker(tmp_path):
    procs = {}

    def make(overrides=None, env=None):
        procs["w"] = WorkerProc(tmp_path, overrides, env)
        return procs["w"]

    yield make
    if "w" in procs:
        procs["w"].stop_all()


def row(message_id):
    return Message.objects.filter(id=message_id).first()


def starts(w, message_id):
    return [e for e in w.events() if e[0] == "start" and e[2] == message_id]


def test_ack_nack_and_fatal_paths(worker):
    w = worker()
    ok = forqapp.send("work", "ok")
    boom = forqapp.send("work", "boom")
    fatal = forqapp.send("work", "fatal")
    js = forqapp.send("jsonq", '{"n": 7}')
    bad_json = forqapp.send("jsonq", "not json")
    result = w.run("--burst", "--concurrency", "3")
    assert result.returncode == 0, result.stderr
    assert "ack 2, fail 2, nack 1" in result.stdout
    assert row(ok) is None and row(js) is None
    m = row(boom)
    # Forq's backoff: 1 s from the nack (the row's updated_at; not from now: the worker's exit can
    # take longer than that on a busy machine).
    assert (m.status, m.attempts) == (0, 1) and 950 <= m.process_after - m.updated_at <= 1000
    assert (row(fatal).status, row(fatal).attempts) == (2, 1)  # failed at once, for the failed job
    assert row(bad_json).status == 2
    assert ("json", js, 1, "7") in [(e[0], e[2], e[3], e[4]) for e in w.events()]
    assert jobs.failed() == 2 and row(fatal).queue == "work-dlq"


def test_max_messages_and_named_queues(worker):
    w = worker()
    forqapp.send_many("work", ["ok"] * 5)
    forqapp.send("jsonq", "{}")
    result = w.run("work", "--max-messages", "2", "--burst")
    assert result.returncode == 0, result.stderr
    assert Message.objects.filter(queue="work").count() == 3
    assert Message.objects.filter(queue="jsonq").count() == 1


def test_bad_arguments_are_usage_errors(worker):
    w = worker()
    for args in (["--concurrency", "0"], ["--max-messages", "x"], ["bad name!"]):
        result = w.run(*args)
        assert result.returncode == 2 and "usage:" in result.stderr and "Traceback" not in result.stderr
    result = w.run("nosuchqueue")
    assert result.returncode == 1 and "no consumer registered" in result.stderr


def test_sigterm_finishes_in_flight_messages_then_exits(worker):
    w = worker()
    slow = forqapp.send("work", "slow:1.5")
    proc = w.start("--concurrency", "2")
    w.wait_for(lambda: starts(w, slow), what="the slow handler to start")
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    later = forqapp.send("work", "ok")  # sent after the signal: not claimed
    assert proc.wait(timeout=20) == 0
    assert [e[0] for e in w.events() if e[2] == slow] == ["start", "done"]
    assert row(slow) is None
    assert (row(later).status, row(later).attempts) == (0, 0)
    assert "forq_worker: stopped, handled ack 1" in w.output(proc)  # (not --burst's "done")


def test_second_signal_exits_at_once_and_nothing_is_lost(worker):
    w = worker()
    slow = forqapp.send("work", "slow:30")
    proc = w.start()
    w.wait_for(lambda: starts(w, slow), what="the slow handler to start")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the worker did not exit on the second signal: {w.output(proc)}") from None
    assert code == 1, w.output(proc)
    assert (row(slow).status, row(slow).attempts) == (1, 1)  # back after the visibility timeout


def test_kill_9_mid_handler_is_redelivered_and_nothing_is_lost(worker):
    w = worker({"FORQ_VISIBILITY_TIMEOUT_MS": 1500})
    slow = forqapp.send("work", "slow:1")
    oks = forqapp.send_many("work", ["ok"] * 20)
    proc = w.start()
    w.wait_for(lambda: starts(w, slow), what="the slow handler to start")
    proc.kill()
    proc.wait()
    assert (row(slow).status, row(slow).attempts) == (1, 1)
    proc = w.start("--with-jobs", "--concurrency", "2")
    w.wait_for(lambda: not Message.objects.filter(queue="work").exists(), what="the queue to empty")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert "forq_jobs: running the jobs" in w.output(proc)  # --with-jobs says so, as forq_jobs does
    events = w.events()
    assert [(e[0], e[3]) for e in events if e[2] == slow] == [("start", 1), ("start", 2), ("done", 2)]
    for message_id in oks:
        assert [e[0] for e in events if e[2] == message_id] == ["start", "done"]


def test_heartbeat_keeps_a_slow_handlers_message(worker, settings):
    settings.FORQ_VISIBILITY_TIMEOUT_MS = 1000
    w = worker({"FORQ_VISIBILITY_TIMEOUT_MS": 1000})
    slow = forqapp.send("work", "slow:3.5")
    proc = w.start("--burst")
    w.wait_for(lambda: starts(w, slow), what="the slow handler to start")
    recovered = 0
    while proc.poll() is None:
        recovered += jobs.stale()  # as often as any scheduler would
        m = row(slow)
        assert m is None or (m.status, m.attempts) == (1, 1)
        time.sleep(0.1)
    assert proc.returncode == 0 and recovered == 0
    assert [e[0] for e in w.events() if e[2] == slow] == ["start", "done"]
    assert row(slow) is None


def test_poison_message_ends_in_the_dlq(worker):
    w = worker({"FORQ_VISIBILITY_TIMEOUT_MS": 500, "FORQ_JOB_INTERVALS": {"stale": 0.1, "failed": 0.1}})
    poison = forqapp.send("work", "poison")
    ok = forqapp.send("work", "ok")
    crashes = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = row(poison)
        if m.queue == "work-dlq":
            break
        proc = w.procs[-1] if w.procs and w.procs[-1].poll() is None else None
        if proc is None:
            if w.procs:
                assert w.procs[-1].returncode == 3
                crashes += 1
            w.start("--with-jobs")  # a supervisor restarting the worker
        time.sleep(0.05)
    m = row(poison)
    assert (m.queue, m.is_dlq, m.failure_reason) == ("work-dlq", True, "max_attempts_reached")
    assert [e[3] for e in starts(w, poison)] == [1, 2, 3, 4, 5]
    assert crashes == 5
    # The sixth worker may still be on its way to the other message when the poison reaches the
    # DLQ (the claim that moves it there, or the failed job, comes first): wait for it, bounded.
    w.wait_for(lambda: row(ok) is None, what="the other message to be handled")
    assert [e[0] for e in w.events() if e[2] == ok] == ["start", "done"]


def test_processes_share_the_queue_and_stop_together(worker):
    w = worker()
    ids = forqapp.send_many("work", ["ok"] * 200)
    result = w.run("work", "--burst", "--processes", "2", "--concurrency", "2")
    assert result.returncode == 0, result.stderr
    events = w.events()
    assert sorted(e[2] for e in events if e[0] == "done") == sorted(ids)  # each exactly once
    assert len({e[1] for e in events}) >= 1
    slow = forqapp.send("work", "slow:1")
    proc = w.start("work", "--processes", "2")
    w.wait_for(lambda: starts(w, slow), what="the slow handler to start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert row(slow) is None


def test_ctrl_c_at_a_terminal_finishes_in_flight_messages_under_processes(worker):
    """A terminal's Ctrl-C is SIGINT to the whole process group: each child must count one stop
    (the supervisor's SIGTERM), not two, and finish its message (it exited at once, with 1)."""
    w = worker()
    slow = forqapp.send("work", "slow:1.5")
    proc = w.start("work", "--processes", "2", own_group=True)
    w.wait_for(lambda: starts(w, slow), what="the slow handler to start")
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=20) == 0, w.output(proc)
    assert [e[0] for e in w.events() if e[2] == slow] == ["start", "done"]
    assert row(slow) is None
    assert "second signal" not in w.output(proc)


def test_a_second_ctrl_c_under_processes_kills_them_and_says_so(worker):
    w = worker()
    slow = forqapp.send("work", "slow:30")
    proc = w.start("work", "--processes", "2", own_group=True)
    w.wait_for(lambda: starts(w, slow), what="the slow handler to start")
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=20) == 1, w.output(proc)
    assert "second signal: worker processes killed" in w.output(proc)
    assert "exited with [" not in w.output(proc)
    assert (row(slow).status, row(slow).attempts) == (1, 1)  # back after the visibility timeout


@pytest.mark.django_db(transaction=True)
def test_in_process_worker_survives_system_exit_and_counts_outcomes():
    from forqapp.worker.consumers import Consumer
    from forqapp.worker.runner import Worker

    def handler(message):
        if message.content == "exit":
            raise SystemExit(3)
        if message.content == "fatal":
            raise forqapp.FatalError("no")

    ids = forqapp.send_many("inproc", ["ok", "exit", "fatal", "ok"])
    counts = Worker({"inproc": Consumer("inproc", handler)}, concurrency=2, burst=True).run()
    assert counts == {"ack": 2, "nack": 1, "fail": 1}
    assert [row(i) is None for i in ids] == [True, False, False, True]
    assert row(ids[1]).status == 0 and row(ids[2]).status == 2


# --- a consumer's own error: kept as last_error, into the DLQ and through a requeue ------------


def test_the_consumers_error_is_kept_into_the_dlq_and_through_a_requeue(worker):
    w = worker()
    fatal = forqapp.send("work", "fatal")
    boom = forqapp.send("work", "boom")
    bad_json = forqapp.send("jsonq", "not json")
    result = w.run("--burst")
    assert result.returncode == 0, result.stderr
    assert row(boom).last_error == "ValueError: boom"  # a nack after an exception records it too
    assert (row(fatal).status, row(fatal).last_error) == (2, "forqapp.errors.FatalError: no way")
    assert row(bad_json).last_error.startswith(f"forqapp.errors.FatalError: message {bad_json} is not JSON")
    assert jobs.failed() == 2
    m = row(fatal)
    assert (m.queue, m.failure_reason, m.last_error) == ("work-dlq", "fatal_error", "forqapp.errors.FatalError: no way")
    assert row(bad_json).failure_reason == "fatal_error"
    assert services.requeue("work-dlq", fatal) == 1
    m = row(fatal)
    assert (m.queue, m.status, m.failure_reason, m.last_error) == ("work", 0, None, "forqapp.errors.FatalError: no way")


def test_running_out_of_attempts_keeps_forqs_reason_and_the_last_error(settings):
    settings.FORQ_MAX_ATTEMPTS = 2
    settings.FORQ_BACKOFF_MS = (0,)
    mid = forqapp.send("retry", "x")
    forqapp.nack(forqapp.receive("retry"), ValueError("first"))
    forqapp.nack(forqapp.receive("retry"))  # no error given (e.g. the HTTP API): the last one stays
    assert (row(mid).status, row(mid).last_error) == (2, "ValueError: first")
    assert jobs.failed() == 1
    assert (row(mid).failure_reason, row(mid).last_error) == ("max_attempts_reached", "ValueError: first")
    plain, long = forqapp.send_many("retry", ["y", "z"])
    forqapp.fail(forqapp.receive("retry"))  # the Python API's fail() without an error: still fatal
    forqapp.fail(forqapp.receive("retry"), "x" * 5000)  # text is kept as given, cut to a diagnosis
    assert jobs.failed() == 2
    assert (row(plain).failure_reason, row(plain).last_error) == ("fatal_error", None)
    assert (row(long).failure_reason, row(long).last_error) == ("fatal_error", "x" * services.MAX_ERROR_CHARS)


def test_the_log_says_which_attempt_raised_and_that_the_last_one_fails_the_message(caplog):
    import logging

    from forqapp.worker.consumers import Consumer
    from forqapp.worker.runner import Worker

    forqapp.configure_queue("w-last", max_attempts=2, backoff=[0])
    mid = forqapp.send("w-last", "x")

    def handler(message):
        raise ValueError("no")

    caplog.set_level(logging.ERROR, logger="forqapp.worker")
    Worker({"w-last": Consumer("w-last", handler)}, concurrency=1, burst=True).run()
    said = [r.getMessage() for r in caplog.records if mid in r.getMessage()]
    assert said == [f"forq_worker: {mid} on w-last (attempt 1 of 2) raised; nacking",
                    f"forq_worker: {mid} on w-last (attempt 2 of 2) raised; no attempt left: failed "
                    "(the failed job moves it to the DLQ)"]
    assert row(mid).status == 2  # failed


# --- one line, exit 1, instead of a traceback --------------------------------------------------


@pytest.mark.sqlite_only  # (its own processes on SQLite, DATABASE_URL dropped)
def test_a_worker_started_before_migrate_says_so_in_one_line(worker, tmp_path):
    w = worker(env={"DATABASE_URL": "", "FORQ_DB_PATH": str(tmp_path / "fresh.sqlite3")})
    for command, args in (("forq_worker", ["--burst"]), ("forq_jobs", ["run", "failed"]), ("forq_jobs", [])):
        result = w.run(*args, command=command)
        assert result.returncode == 1, (command, result.stdout)
        assert result.stderr.strip().splitlines() == [
            "CommandError: the database has no forqapp tables: run manage.py migrate"], command


def test_a_bad_consumer_path_stops_the_worker_in_one_line(worker):
    w = worker({"FORQ_CONSUMERS": {"emails": "myapp.jobs.send_email"}})
    result = w.run("--burst")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert "FORQ_CONSUMERS['emails']: cannot import 'myapp.jobs.send_email'" in line and "forqapp.E040" in line


@pytest.mark.parametrize(("logging_setting", "handler"), [
    ({}, "forqapp's own"),  # startproject's: Django configures handlers for its own loggers only
    ({"version": 1, "disable_existing_loggers": False,
      "formatters": {"tagged": {"format": "ROOT %(name)s %(message)s"}},
      "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "tagged"}},
      "root": {"handlers": ["console"], "level": "WARNING"}}, "the project's"),
])
def test_info_lines_show_whatever_the_projects_logging(worker, logging_setting, handler):
    """-v1's info lines reach stderr once: through forqapp's own handler when the project's LOGGING
    gives them none (else Python's last resort would drop everything below WARNING), through the
    project's handler when it has one."""
    w = worker({"LOGGING": logging_setting})
    forqapp.send("work", "ok")
    result = w.run("--burst", "--concurrency", "2")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "thread(s) on" in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ROOT forqapp.worker ") == (handler == "the project's"), lines
    assert (" INFO forqapp.worker forq_worker: 2 thread(s) on " in lines[0]) == (handler == "forqapp's own"), lines
    quiet = w.run("--burst", "-v0")
    assert quiet.returncode == 0 and "thread(s) on" not in quiet.stderr, quiet.stderr


@pytest.mark.django_db(transaction=True)
def test_a_batch_ack_with_one_lost_lease_counts_the_others_acked():
    """Audit: when one ack of a batch came too late (its lease lost, the message taken by another
    receive), the worker counted none of the batch: the acks that landed went unreported, and the
    lost one missed ``forq_worker_handled_total{outcome="lost"}``."""
    from forqapp.worker.consumers import Consumer
    from forqapp.worker.runner import ACK, Worker, _Held

    forqapp.send_many("w-partial", ["a", "b", "c"])
    consumer = Consumer("w-partial", lambda m: None)
    w = Worker({"w-partial": consumer}, concurrency=1)
    helds = [_Held(m, consumer) for m in services.claim_many("w-partial", 3)]
    forqapp.change_visibility(helds[1].message, 0)
    taken = forqapp.receive("w-partial")  # the lease of b lost: another receive has it
    assert taken.id == helds[1].message.id
    w._held = {h.message.id: h for h in helds}
    w._settle([(h, ACK, None) for h in helds])
    assert dict(w._counts) == {"ack": 2, "lost": 1}
    assert list(Message.objects.filter(queue="w-partial").values_list("id", flat=True)) == [taken.id]
    w._shutdown()


def refuse_first(monkeypatch, name: str, times: int) -> list[int]:
    """Make ``services.<name>`` fail ``times`` times as a full disk does, then work; the list
    grows by one each refusal."""
    import sqlite3

    real, refusals = getattr(services, name), []

    def full_disk_first(*args, **kwargs):
        if len(refusals) < times:
            refusals.append(1)
            raise sqlite3.OperationalError("database or disk is full")
        return real(*args, **kwargs)

    monkeypatch.setattr(services, name, full_disk_first)
    return refusals


@pytest.mark.django_db(transaction=True)
def test_an_ack_the_database_refused_is_tried_again_and_the_message_handled_once(monkeypatch):
    """Audit: an ack refused by a database that could not write (a full disk) was dropped, and the
    message came back to be handled a second time when its lease ended, although the disk was
    writable again long before. The worker holds it and acks it again each turn."""

    from forqapp.worker.consumers import Consumer
    from forqapp.worker.runner import Worker

    handled = []
    message_id = forqapp.send("w-refused", "x")
    refusals = refuse_first(monkeypatch, "ack_many", 2)
    w = Worker({"w-refused": Consumer("w-refused", handled.append)}, concurrency=1, burst=True)
    assert w.run() == {"ack": 1}
    assert [m.id for m in handled] == [message_id] and len(refusals) == 2
    assert not Message.objects.filter(queue="w-refused").exists() and not w._held


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("outcome", ["nack", "fail", "defer"])
def test_a_nack_fail_or_defer_the_database_refused_is_tried_again(monkeypatch, outcome):
    """As an ack: a fail refused and dropped would have had a fatal error handled again, a defer
    its message back at its lease's end rather than after its delay."""

    from forqapp.errors import Defer, FatalError
    from forqapp.worker.consumers import Consumer
    from forqapp.worker.runner import Worker

    handled = []

    def handler(message):
        handled.append(message.id)
        if outcome == "fail":
            raise FatalError("fatal")
        if outcome == "defer":
            raise Defer(60)
        raise RuntimeError("again")

    message_id = forqapp.send("w-settle", "x")
    refusals = refuse_first(monkeypatch, outcome, 2)
    w = Worker({"w-settle": Consumer("w-settle", handler)}, concurrency=1, burst=True)
    assert w.run() == {outcome: 1}
    assert handled == [message_id] and len(refusals) == 2 and not w._held
    m = Message.objects.get(id=message_id)
    if outcome == "fail":
        assert m.status == vocab.Status.FAILED  # (the failed job moves it to the DLQ)
    else:
        # backed off 1 s (nack) or deferred 60 s from the settle (the row's updated_at), not from now
        assert m.status == vocab.Status.READY and m.process_after - m.updated_at >= 950
        assert m.attempts == 1


@pytest.mark.django_db(transaction=True)
def test_a_worker_at_max_messages_waits_for_a_refused_settle(monkeypatch):
    """Audit: reaching --max-messages stopped the worker as a signal does, so a settle refused a
    moment before got one more try, not the rest of its lease (an ack: handled again later)."""

    from forqapp.worker.consumers import Consumer
    from forqapp.worker.runner import Worker

    message_id = forqapp.send("w-max", "x")
    refusals = refuse_first(monkeypatch, "ack_many", 3)
    w = Worker({"w-max": Consumer("w-max", lambda m: None)}, concurrency=1, max_messages=1)
    assert w.run() == {"ack": 1} and len(refusals) == 3
    assert not Message.objects.filter(id=message_id).exists()


@pytest.mark.django_db(transaction=True)
def test_a_refused_ack_is_given_up_when_its_lease_ends_or_the_worker_stops(monkeypatch, caplog):
    import sqlite3

    from forqapp.worker.consumers import Consumer
    from forqapp.worker.runner import ACK, Worker, _Held

    def full_disk(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    forqapp.send_many("w-given-up", ["a", "b"])
    consumer = Consumer("w-given-up", lambda m: None)
    w = Worker({"w-given-up": consumer}, concurrency=1)
    w._stop.set()  # (no waiting after a refusal)
    ended, live = (_Held(m, consumer) for m in services.claim_many("w-given-up", 2))
    ended.message.lease_expires_at = services.now_ms() - 1  # its lease is over: the ack would be too late
    w._held = {h.message.id: h for h in (ended, live)}
    monkeypatch.setattr(services, "ack_many", full_disk)
    w._settle([(ended, ACK, None), (live, ACK, None)])
    assert dict(w._counts) == {"lost": 1} and w._due == [(live, ACK, None)] and list(w._held) == [live.message.id]
    assert any(f"gave up the ack of {ended.message.id}" in r.getMessage() for r in caplog.records)
    w._shutdown()  # one more try, refused: given up, and said
    assert dict(w._counts) == {"lost": 2} and not w._due and not w._held
    assert any("settle(s) the database refused (ack)" in r.getMessage() for r in caplog.records)
    assert Message.objects.filter(queue="w-given-up", status=vocab.Status.PROCESSING).count() == 2


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_survives_a_database_that_cannot_serve(monkeypatch, clock):
    """Audit (a real full disk, nothing else holding the SQLite file open): the heartbeat read the
    queue's policy outside its ``try``, the reconnect failed with "disk I/O error", and the worker
    died. With a refused ack held for a retry, that came within a second of the first refusal."""
    import sqlite3

    from forqapp.worker.consumers import Consumer
    from forqapp.worker.runner import Worker, _Held

    forqapp.send("w-beat", "x")
    consumer = Consumer("w-beat", lambda m: None)
    w = Worker({"w-beat": consumer}, concurrency=1)
    w._stop.set()  # (no waiting after the failure)
    (message,) = services.claim_many("w-beat", 1)
    w._held = {message.id: _Held(message, consumer, renewed=0.0)}

    def disk_io_error(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    with monkeypatch.context() as patched:
        patched.setattr(services, "policy", disk_io_error)
        w._heartbeat()  # said, not raised
    assert w._held[message.id].renewed == 0.0  # (not renewed while the database could not serve)
    # The database is back: the lease is renewed for the visibility timeout from now. Not "later than
    # the claim's lease end": a claim and its renewal can share a millisecond (a flaky run saw that;
    # the frozen clock makes it so every time).
    renewing_at = services.now_ms()
    w._heartbeat()
    held = w._held[message.id]
    assert held.renewed > 0.0 and not held.lost
    assert message.lease_expires_at >= renewing_at + services.policy("w-beat").visibility_timeout_ms
    assert Message.objects.get(id=message.id).lease_expires_at == message.lease_expires_at
    w._held.clear()
    w._shutdown()


def test_a_full_disk_is_one_line_a_second_not_a_traceback_each_retry(caplog):
    """Audit: on a full disk the worker logged a whole traceback every 0.5 s (126 in 90 s), where
    the server says it in one line a second. It does the same now; other errors keep theirs."""
    import logging
    import sqlite3

    from forqapp import errors
    from forqapp.worker.consumers import Consumer
    from forqapp.worker.runner import Worker

    errors._said.clear()  # (another test may have said it within the second)
    w = Worker({"w-disk": Consumer("w-disk", lambda m: None)}, concurrency=1)
    w._stop.set()  # (no waiting between the calls)
    caplog.set_level(logging.INFO, logger="forqapp")
    for _ in range(5):
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError:
            w._database_trouble("acking")
    lines = [r for r in caplog.records if "disk is full" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None and "retrying" in lines[0].getMessage()
    try:
        raise sqlite3.OperationalError("no such table: messages")
    except sqlite3.OperationalError:
        w._database_trouble("claiming")
    assert caplog.records[-1].exc_info is not None  # a bug keeps its traceback


@pytest.mark.django_db(transaction=True)
def test_an_idle_worker_says_so_once_not_every_report(monkeypatch, caplog):
    """An idle worker logged "0 messages in 10s" every 10 s, for ever. Now: one INFO line when it goes
    idle, DEBUG after that; busy again, its reports are INFO again, and going idle again is said once."""
    import logging
    import threading

    from forqapp.worker import runner as worker_module
    from forqapp.worker.consumers import Consumer
    from forqapp.worker.runner import Worker

    monkeypatch.setattr(worker_module, "IDLE_WAIT_S", 0.02)  # (many idle turns, quickly)
    caplog.set_level(logging.DEBUG, logger="forqapp.worker")
    handled = threading.Event()
    w = Worker({"w-idle": Consumer("w-idle", lambda m: handled.set())}, report_every=0.01, start_jitter=0)
    thread = threading.Thread(target=w.run)
    thread.start()

    def reports() -> list[tuple[str, str]]:
        return [(r.levelname, r.getMessage()) for r in list(caplog.records) if " messages in " in r.getMessage()]

    def wait_for(condition, what: str) -> None:
        deadline = time.monotonic() + 10
        while not condition():
            assert time.monotonic() < deadline, f"{what}: {reports()}"
            time.sleep(0.01)

    try:
        wait_for(lambda: len(reports()) >= 5, "five idle reports")
        forqapp.send("w-idle", "x")
        wait_for(handled.is_set, "the message handled")
        wait_for(lambda: any("1 in total" in m and "idle" not in m for _, m in reports()), "a busy report")
        count = len(reports())
        wait_for(lambda: len(reports()) >= count + 5, "five more idle reports")
    finally:
        w.stop()
        thread.join(10)
    idle_info = [m for level, m in reports() if level == "INFO" and "idle" in m]
    assert [m.split("0 in flight, ")[1] for m in idle_info] == [
        "0 in total; idle, waiting for messages", "1 in total; idle, waiting for messages"], reports()
    assert len([m for level, m in reports() if level == "DEBUG" and "idle" in m]) >= 8  # the rest: DEBUG
    assert all(level == "INFO" for level, m in reports() if "idle" not in m)  # busy: INFO each report
