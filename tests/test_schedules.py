"""Periodic messages (issue 13): ``forqapp.schedule(name, queue=…, content=…, cron=… | every=…)``,
``FORQ_SCHEDULES``, and the ``schedules`` job (:func:`forqapp.services.schedules.run_due`), which sends each
tick exactly once — with two schedulers at once, and across a ``kill -9`` in the middle of a tick —
and follows the schedule's catch-up rule (skip, one, all) after downtime.

Time is a fake clock (``services.now_ms`` patched) except where processes race on the real one.
Runs on SQLite and on PostgreSQL (``DATABASE_URL=postgres://…``).
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.test import override_settings
from prometheus_client import REGISTRY

import forqapp
from forqapp import conf, services, utils
from forqapp.conf import forq_settings
from forqapp.models import DedupEntry, Message, Schedule
from forqapp.services import schedules
from forqapp.worker import jobs

from .conftest import ROOT, Clock, refused, subprocess_env

pytestmark = pytest.mark.django_db
live = pytest.mark.django_db(transaction=True)  # other connections, threads or processes see the rows

MINUTE = 60_000


def sent(queue: str) -> list[Message]:
    return list(Message.objects.filter(queue=queue).order_by("sequence"))


def ticks_of(queue: str, name: str) -> list[int]:
    """The ticks of the messages ``name`` sent to ``queue`` (from their dedup ids), in order."""
    prefix = f"schedule:{name}:"
    out = []
    for m in sent(queue):
        assert m.dedup_id.startswith(prefix), m.dedup_id
        out.append(int(m.dedup_id.removeprefix(prefix)))
    return out


def metric(name: str, schedule: str) -> float:
    return REGISTRY.get_sample_value(name, {"schedule": schedule}) or 0.0


# --- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cron", [
    "61 * * * *", "* * *", "0 0 30 2 *", "@daily", "0 3 * * 1-5 extra", "L * * * *", "", "x" * 201, 5,
])
def test_a_bad_cron_is_refused_with_cronsims_reason(cron):
    error = refused("bad_request.body.invalid", forqapp.schedule, "bad", queue="q", content="x", cron=cron)
    assert "cron" in str(error)
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(("fields", "fragment"), [
    ({}, "cron or every"),
    ({"cron": "* * * * *", "every": 60}, "cron or every"),
    ({"every": 0}, "every"),
    ({"every": -5}, "every"),
    ({"every": "5m"}, "every"),
    ({"every": 400 * 86_400}, "every"),
    ({"every": 60, "catch_up": "some"}, "catch_up"),
    ({"every": 60, "priority": "high"}, "priority"),
    ({"every": 60, "attributes": {"k": 1}}, ""),
    ({"every": 60, "paused": "yes"}, "paused"),
    ({"cron": "* * * * * *"}, "five fields"),  # cronsim would read a sixth field as seconds
    ({"cron": "0 0 1 1 * 2099"}, "five fields"),
    ({"cron": "* * * *"}, "five fields"),
])
def test_schedule_fields_are_validated(fields, fragment):
    error = refused("bad_request.body.invalid", forqapp.schedule, "bad", queue="q", content="x", **fields)
    assert fragment in str(error)
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(("name", "queue", "content", "code"), [
    ("bad name", "q", "x", "bad_request.body.invalid"),
    ("x" * 101, "q", "x", "bad_request.body.invalid"),
    (".", "q", "x", "bad_request.body.invalid"),
    ("..", "q", "x", "bad_request.body.invalid"),
    ("ok", "..", "x", "bad_request.queue.invalid_name"),
    ("ok", "bad queue", "x", "bad_request.queue.invalid_name"),
    ("ok", "q" * 81, "x", "bad_request.queue.invalid_name"),  # 80 at most
    ("ok", "q-dlq", "x", "bad_request.queue.produce_to_dlq"),
    ("ok", "q", 5, "bad_request.body.invalid"),
    ("ok", "q", "x" * 262_145, "bad_request.body.content.exceeds_limit"),
])
def test_name_queue_and_content_are_validated(name, queue, content, code):
    refused(code, forqapp.schedule, name, queue=queue, content=content, every=60)
    assert not Schedule.objects.exists()


def test_a_schedule_sends_to_an_80_character_queue():
    info = forqapp.schedule("long-queue", queue="q" * 80, content="tick", every=60)
    assert info.queue == "q" * 80 and Schedule.objects.get(name="long-queue").queue == "q" * 80
    sent = schedules.run_now("long-queue")
    assert forqapp.receive("q" * 80).id == sent


def test_schedule_list_get_and_unschedule(clock):
    info = forqapp.schedule("b-every", queue="sq", content="{}", every=timedelta(minutes=5),
                            priority=4, attributes={"kind": "report"})
    assert (info.every, info.cron, info.catch_up, info.next_run_at, info.last_run_at) == \
           (300.0, None, "one", clock.now + 5 * MINUTE, None)
    forqapp.schedule("a-cron", queue="sq", content="{}", cron="*/15 * * * *", catch_up="skip", paused=True)
    listed = forqapp.list_schedules()
    assert [s.name for s in listed] == ["a-cron", "b-every"]
    assert listed[0].json()["paused"] is True and listed[1].json()["attributes"] == {"kind": "report"}
    assert schedules.get("b-every").priority == 4
    assert forqapp.unschedule("a-cron") is True
    assert forqapp.unschedule("a-cron") is False
    refused("not_found.schedule", schedules.get, "a-cron")
    assert [s.name for s in forqapp.list_schedules()] == ["b-every"]


def test_updating_a_schedule_keeps_its_next_tick_unless_its_timing_changes(clock):
    first = forqapp.schedule("upd", queue="sq", content="v1", every=60)
    clock.advance(30)
    again = forqapp.schedule("upd", queue="sq", content="v2", every=60, priority=3)
    assert again.next_run_at == first.next_run_at  # same timing: a redeploy moves no tick
    assert (again.content, again.priority) == ("v2", 3)
    changed = forqapp.schedule("upd", queue="sq", content="v2", every=120)
    assert changed.next_run_at == clock.now + 2 * MINUTE
    cron = forqapp.schedule("upd", queue="sq", content="v2", cron="* * * * *")
    assert cron.every is None and cron.cron == "* * * * *"


# --- ticks ----------------------------------------------------------------------------------------


def test_every_ticks_on_its_period_without_drift(clock):
    start = clock.now
    forqapp.schedule("ev", queue="s-ev", content="ping", every=timedelta(minutes=5))
    assert schedules.run_due() == 0
    clock.advance(299.999)
    assert schedules.run_due() == 0
    clock.advance(0.001 + 0.8)  # the job runs a little late: the next tick keeps its place
    assert schedules.run_due() == 1
    assert schedules.run_due() == 0
    assert schedules.get("ev").next_run_at == start + 10 * MINUTE
    assert schedules.get("ev").last_run_at == start + 5 * MINUTE
    clock.advance(300)
    assert schedules.run_due() == 1
    assert ticks_of("s-ev", "ev") == [start + 5 * MINUTE, start + 10 * MINUTE]
    assert [m.content for m in sent("s-ev")] == ["ping", "ping"]


def test_cron_ticks_at_its_times(clock):
    clock.at(datetime(2026, 1, 10, 2, 59, 30, tzinfo=ZoneInfo("UTC")))
    info = forqapp.schedule("nightly", queue="s-cron", content="{}", cron="0 3 * * *")
    three = int(datetime(2026, 1, 10, 3, 0, tzinfo=ZoneInfo("UTC")).timestamp() * 1000)
    assert info.next_run_at == three
    clock.advance(29.999)
    assert schedules.run_due() == 0
    clock.advance(0.001)
    assert schedules.run_due() == 1
    assert schedules.get("nightly").next_run_at == three + 24 * 60 * MINUTE
    assert ticks_of("s-cron", "nightly") == [three]
    clock.at(datetime(2026, 1, 10, 10, 7, tzinfo=ZoneInfo("UTC")))
    quarter = forqapp.schedule("quarter", queue="s-cron", content="{}", cron="*/15 * * * *")
    assert quarter.next_run_at == int(datetime(2026, 1, 10, 10, 15, tzinfo=ZoneInfo("UTC")).timestamp() * 1000)


def test_cron_reads_the_time_zone_setting(clock, settings):
    settings.TIME_ZONE = "America/New_York"
    clock.at(datetime(2026, 1, 10, 12, 0, tzinfo=ZoneInfo("UTC")))  # 07:00 in New York (EST)
    info = forqapp.schedule("ny", queue="s-tz", content="{}", cron="0 3 * * *")
    assert info.next_run_at == int(datetime(2026, 1, 11, 8, 0, tzinfo=ZoneInfo("UTC")).timestamp() * 1000)
    clock.at(datetime(2026, 7, 10, 12, 0, tzinfo=ZoneInfo("UTC")))  # summer time: 03:00 EDT is 07:00 UTC
    info = forqapp.schedule("ny2", queue="s-tz", content="{}", cron="0 3 * * *")
    assert info.next_run_at == int(datetime(2026, 7, 11, 7, 0, tzinfo=ZoneInfo("UTC")).timestamp() * 1000)


def test_priority_attributes_and_content_go_on_the_messages(clock):
    forqapp.schedule("rich", queue="s-rich", content='{"report": "daily"}', every=60, priority=7,
                     attributes={"kind": "report", "team": "ops"})
    forqapp.schedule("plain", queue="s-rich", content="low", every=60)
    clock.advance(60)
    assert schedules.run_due() == 2
    m = forqapp.receive("s-rich")
    assert (m.content, m.priority, m.attributes) == ('{"report": "daily"}', 7, {"kind": "report", "team": "ops"})
    assert m.dedup_id == f"schedule:rich:{clock.now}"
    other = forqapp.receive("s-rich")
    assert (other.content, other.priority, other.attributes) == ("low", 0, {})


def test_a_paused_schedule_sends_nothing_until_resumed(clock):
    forqapp.schedule("nap", queue="s-nap", content="x", every=60, paused=True, catch_up="one")
    clock.advance(60 * 3)
    assert schedules.run_due() == 0 and sent("s-nap") == []
    # Resumed by schedule(paused=False) (the admin's form, a v2 PUT, FORQ_SCHEDULES) as by resume():
    # the ticks that fell while it was paused are skipped (an audit saw catch_up="all" send each).
    for catch_up in ("one", "all"):
        forqapp.schedule("nap", queue="s-nap", content="x", every=60, paused=True, catch_up=catch_up)
        clock.advance(60 * 3)
        forqapp.schedule("nap", queue="s-nap", content="x", every=60, paused=False, catch_up=catch_up)
        assert schedules.run_due() == 0 and sent("s-nap") == []
    clock.advance(60)
    assert schedules.run_due() == 1  # its next tick after the resume
    assert len(sent("s-nap")) == 1


def test_run_now_sends_outside_the_ticks(clock):
    forqapp.schedule("manual", queue="s-now", content="x", every=3600, priority=2)
    message_id = schedules.run_now("manual")
    m = Message.objects.get(id=message_id)
    assert (m.queue, m.content, m.priority) == ("s-now", "x", 2)
    assert schedules.get("manual").next_run_at == clock.now + 3600 * 1000  # the schedule is unchanged
    refused("not_found.schedule", schedules.run_now, "nope")


def test_the_schedules_job_runs_every_second(clock):
    assert jobs.JOBS["schedules"].every() == 1
    forqapp.schedule("job", queue="s-job", content="x", every=60)
    clock.advance(60)
    assert jobs.schedules(dry_run=True) == 1
    assert sent("s-job") == []
    assert jobs.schedules() == 1
    assert len(sent("s-job")) == 1


# --- catch-up after downtime ----------------------------------------------------------------------


def down_for(name: str, clock: Clock, every_s: int, ticks: int, late_s: float) -> list[int]:
    """Make ``name``'s next tick ``ticks`` periods ago, the last of them ``late_s`` late (downtime);
    returns the ticks missed."""
    last = clock.now - round(late_s * 1000)
    first = last - (ticks - 1) * every_s * 1000
    Schedule.objects.filter(name=name).update(next_run_at=first)
    return [first + k * every_s * 1000 for k in range(ticks)]


@pytest.mark.parametrize(("catch_up", "late_s", "expected", "missed"), [
    ("skip", 100, [], 4),  # the latest tick is over a minute late: skipped too
    ("skip", 30, [3], 3),  # the latest is on time (within a minute): sent
    ("one", 100, [3], 3),  # one message, for the latest tick
    ("all", 100, [0, 1, 2, 3], 0),
])
def test_catch_up_rules_after_downtime(clock, catch_up, late_s, expected, missed):
    name = f"down-{catch_up}-{late_s}"
    forqapp.schedule(name, queue="s-down", content="x", every=300, catch_up=catch_up)
    ticks = down_for(name, clock, 300, 4, late_s)
    before = metric("forq_schedule_ticks_total", name), metric("forq_schedule_missed_total", name)
    assert schedules.run_due(dry_run=True) == len(expected)
    assert schedules.run_due() == len(expected)
    assert schedules.run_due() == 0
    assert ticks_of("s-down", name) == [ticks[i] for i in expected]
    row = schedules.get(name)
    assert row.next_run_at == ticks[-1] + 300_000 > clock.now  # the next tick is in the future
    assert metric("forq_schedule_ticks_total", name) == before[0] + len(expected)
    assert metric("forq_schedule_missed_total", name) == before[1] + missed


def test_catch_up_all_of_a_cron_schedule(clock):
    clock.at(datetime(2026, 3, 1, 0, 0, 30, tzinfo=ZoneInfo("UTC")))
    forqapp.schedule("hourly", queue="s-hourly", content="x", cron="0 * * * *", catch_up="all")
    clock.at(datetime(2026, 3, 1, 5, 10, tzinfo=ZoneInfo("UTC")))  # down from 00:00:30 to 05:10
    assert schedules.run_due() == 5
    hours = [int(datetime(2026, 3, 1, h, tzinfo=ZoneInfo("UTC")).timestamp() * 1000) for h in range(1, 6)]
    assert ticks_of("s-hourly", "hourly") == hours
    assert schedules.get("hourly").next_run_at == hours[-1] + 60 * MINUTE


def test_catch_up_all_is_capped(clock):
    forqapp.schedule("flood", queue="s-flood", content="x", every=1, catch_up="all")
    down_for("flood", clock, 1, schedules.MAX_CATCH_UP + 5, 0)
    assert schedules.run_due() == schedules.MAX_CATCH_UP
    assert metric("forq_schedule_missed_total", "flood") >= 5
    assert schedules.run_due() == 0


def test_the_ticks_metric_counts_each_message(clock):
    before = metric("forq_schedule_ticks_total", "counted")
    forqapp.schedule("counted", queue="s-metric", content="x", every=60)
    for _ in range(3):
        clock.advance(60)
        schedules.run_due()
    assert metric("forq_schedule_ticks_total", "counted") == before + 3


# --- exactly once ---------------------------------------------------------------------------------


@live
def test_two_schedulers_at_once_send_each_tick_once(clock):
    """Two schedulers (threads, each its own database connection) run every due tick at the same
    moment: one sends it, the other finds the tick taken and sends nothing."""
    start = clock.now
    forqapp.schedule("twice", queue="s-two", content="x", every=60)
    forqapp.schedule("twice-b", queue="s-two-b", content="x", every=60, catch_up="all")
    totals: list[int] = []
    errors: list[BaseException] = []
    rounds = 6

    def scheduler(barrier: threading.Barrier):
        try:
            barrier.wait()
            totals.append(schedules.run_due())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    for _ in range(rounds):
        clock.advance(60)
        barrier = threading.Barrier(2)
        threads = [threading.Thread(target=scheduler, args=(barrier,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    assert sum(totals) == 2 * rounds  # no tick sent twice, not even one the dedup id then absorbed
    expected = [start + k * MINUTE for k in range(1, rounds + 1)]
    assert ticks_of("s-two", "twice") == expected
    assert ticks_of("s-two-b", "twice-b") == expected


SCHEDULER = """
import django; django.setup()
import os, sys, time
from pathlib import Path
from forqapp.services import schedules
ready = Path(sys.argv[1])
(ready / f"ready-{os.getpid()}").touch()
deadline = time.monotonic() + 60
while len(list(ready.glob("ready-*"))) < 2 and time.monotonic() < deadline:  # start together
    time.sleep(0.01)
total, until = 0, time.monotonic() + float(sys.argv[2])
while time.monotonic() < until:
    total += schedules.run_due()
print(total, flush=True)
"""


@live
@pytest.mark.slow
def test_two_scheduler_processes_send_each_tick_once(tmp_path):
    """Two processes (two hosts' job schedulers) running the schedules as fast as they can on the
    real clock, for several ticks of a one-second schedule."""
    forqapp.schedule("procs", queue="s-procs", content="x", every=1, catch_up="all")
    first = schedules.get("procs").next_run_at
    env = subprocess_env()
    procs = [subprocess.Popen([sys.executable, "-c", SCHEDULER, str(tmp_path), "3"], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    totals = []
    for proc in procs:
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err
        totals.append(int(out.split()[-1]))
    ticks = ticks_of("s-procs", "procs")
    assert len(ticks) >= 3
    assert ticks == [first + 1000 * k for k in range(len(ticks))]  # every tick, each once
    assert sum(totals) == len(ticks)  # and no scheduler sent one the other had sent
    assert DedupEntry.objects.filter(queue="s-procs").count() == len(ticks)


CRASHER = """
import django; django.setup()
import time
from forqapp.services import schedules
send_entries = schedules.send_entries

def send_then_hang(*args, **kwargs):
    result = send_entries(*args, **kwargs)
    print("sent", flush=True)  # inside the tick's transaction, not committed
    time.sleep(120)
    return result

schedules.send_entries = send_then_hang
schedules.run_due()
"""


@live
@pytest.mark.slow
def test_a_kill_9_in_the_middle_of_a_tick_loses_nothing_and_sends_nothing_twice():
    forqapp.schedule("crash", queue="s-crash", content="x", every=3600)
    tick = utils.now_ms() - 1000
    Schedule.objects.filter(name="crash").update(next_run_at=tick)
    proc = subprocess.Popen([sys.executable, "-c", CRASHER], env=subprocess_env(), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "sent", (line, proc.stderr.read() if proc.poll() is not None else "")
        assert sent("s-crash") == []  # not committed: nobody sees it
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert schedules.get("crash").next_run_at == tick  # the tick's transaction rolled back whole
    assert not DedupEntry.objects.filter(queue="s-crash").exists()
    deadline = time.monotonic() + 20
    while (n := schedules.run_due()) == 0:  # PostgreSQL ends the dead session's transaction soon after
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert n == 1
    assert schedules.run_due() == 0
    assert ticks_of("s-crash", "crash") == [tick]
    assert schedules.get("crash").next_run_at == tick + 3600 * 1000


def test_a_tick_whose_send_fails_is_not_lost(clock, monkeypatch):
    forqapp.schedule("flaky", queue="s-flaky", content="x", every=60)
    clock.advance(60)

    def boom(*args, **kwargs):
        raise RuntimeError("database went away")

    with monkeypatch.context() as m:
        m.setattr(schedules, "send_entries", boom)
        with pytest.raises(RuntimeError):
            schedules.run_due()
    assert schedules.get("flaky").next_run_at == clock.now  # rolled back with the send
    assert schedules.run_due() == 1
    assert ticks_of("s-flaky", "flaky") == [clock.now]


def test_a_schedule_whose_queue_is_full_does_not_stop_the_others(clock):
    """One schedule that cannot send (its queue at max_length) must not hold up every other one
    (they are due later, so they come after it in each run); its tick waits for the next run."""
    forqapp.configure_queue("s-full", max_length=1)
    forqapp.send("s-full", "already there")
    forqapp.schedule("a-stuck", queue="s-full", content="x", every=60)
    stuck_tick = schedules.get("a-stuck").next_run_at
    clock.advance(1)
    forqapp.schedule("b-fine", queue="s-fine", content="x", every=60)
    clock.advance(60)
    before = metric("forq_schedule_failures_total", "a-stuck")
    assert schedules.run_due() == 1
    assert len(sent("s-fine")) == 1 and len(sent("s-full")) == 1
    assert metric("forq_schedule_failures_total", "a-stuck") == before + 1
    assert schedules.get("a-stuck").next_run_at == stuck_tick  # kept for the next run
    forqapp.purge("s-full")
    assert schedules.run_due() == 1
    assert ticks_of("s-full", "a-stuck") == [stuck_tick]


def test_a_run_in_which_every_schedule_failed_raises(clock):
    """... so the job's run counts as an error (forq_job_runs_total)."""
    forqapp.configure_queue("s-full2", max_length=1)
    forqapp.send("s-full2", "already there")
    forqapp.schedule("stuck", queue="s-full2", content="x", every=60)
    clock.advance(60)
    refused("queue.full", schedules.run_due)
    assert schedules.get("stuck").next_run_at == clock.now


# --- FORQ_SCHEDULES -------------------------------------------------------------------------------

DECLARED = {
    "nightly-report": {"queue": "reports", "content": "{}", "cron": "0 3 * * *", "priority": 2},
    "heartbeat": {"queue": "pings", "content": "ping", "every": 30, "catch_up": "skip",
                  "attributes": {"source": "settings"}},
}


def test_forq_queues_apply_applies_forq_schedules():
    out = io.StringIO()
    with override_settings(FORQ_SCHEDULES=DECLARED):
        call_command("forq_queues", "apply", stdout=out)
    assert "applied the schedule nightly-report" in out.getvalue()
    assert "applied the schedule heartbeat" in out.getvalue()
    nightly, beat = schedules.get("nightly-report"), schedules.get("heartbeat")
    assert (nightly.queue, nightly.cron, nightly.priority, nightly.catch_up) == ("reports", "0 3 * * *", 2, "one")
    assert (beat.every, beat.catch_up, beat.attributes) == (30.0, "skip", {"source": "settings"})
    Schedule.objects.filter(name="heartbeat").update(next_run_at=12345)
    with override_settings(FORQ_SCHEDULES=DECLARED):
        call_command("forq_queues", "apply", stdout=io.StringIO())
    assert schedules.get("heartbeat").next_run_at == 12345  # applying again moves no tick


@live
def test_migrate_applies_forq_schedules():
    with override_settings(FORQ_SCHEDULES=DECLARED):
        call_command("migrate", verbosity=0)
    assert sorted(s.name for s in forqapp.list_schedules()) == ["heartbeat", "nightly-report"]


@pytest.mark.parametrize(("value", "expected"), [
    ({"broken": {"queue": "q", "content": "x"}}, "FORQ_SCHEDULES['broken']: give a schedule cron or every"),
    ({"typo": {"queue": "q", "content": "x", "every": 5, "crom": "* * * * *"}},
     "FORQ_SCHEDULES['typo']: unknown schedule field(s): crom"),
    ({"c": {"queue": "q", "content": "x", "cron": "61 * * * *"}}, "FORQ_SCHEDULES['c']: cron '61 * * * *'"),
    ({"q": {"queue": "q-dlq", "content": "x", "every": 5}}, "FORQ_SCHEDULES['q']: cannot produce"),
    ({"n": {"content": "x", "every": 5}}, "FORQ_SCHEDULES['n']: a schedule needs a queue"),
    ({"bad name": {"queue": "q", "content": "x", "every": 5}}, "FORQ_SCHEDULES['bad name']: a schedule's name"),
    ({"shape": "every 5 minutes"}, "FORQ_SCHEDULES['shape'] must be a dict"),
    (["nightly"], "FORQ_SCHEDULES must be a dict"),
])
def test_forq_schedules_is_checked(value, expected):
    """As FORQ_QUEUES is (E050): a broken entry is a system check error (``manage.py check``,
    forq_serve's start-up, and every command that runs the checks), not a traceback from migrate."""
    with override_settings(FORQ_SCHEDULES=value):
        problems = [msg for check_id, msg in conf.problems() if check_id == "forqapp.E051"]
        assert len(problems) == 1 and problems[0].startswith(expected), problems
        with pytest.raises(ImproperlyConfigured, match="forqapp.E051"):
            forq_settings.FORQ_SCHEDULES  # noqa: B018
        with pytest.raises(CommandError, match="forqapp.E051"):
            call_command("forq_queues", "apply", skip_checks=False, stdout=io.StringIO(), stderr=io.StringIO())
    assert not Schedule.objects.exists()


def test_a_valid_forq_schedules_passes_the_check():
    with override_settings(FORQ_SCHEDULES=DECLARED):
        assert not [p for p in conf.problems() if p[0] == "forqapp.E051"]


def test_schedule_json_is_plain_data(clock):
    info = forqapp.schedule("js", queue="sq", content="x", every=90)
    assert json.loads(json.dumps(info.json()))["every"] == 90.0


def test_pause_and_resume_skip_the_ticks_that_fell_while_paused():
    from forqapp.models import Schedule
    from forqapp.services import schedules

    schedules.schedule("napper", queue="naps", content="x", every=60, catch_up="all")
    schedules.pause("napper")
    assert schedules.get("napper").paused
    Schedule.objects.filter(name="napper").update(next_run_at=services.now_ms() - 3_600_000)  # an hour paused
    assert schedules.run_due() == 0  # paused: nothing sent
    info = schedules.resume("napper")
    assert not info.paused and info.next_run_at > services.now_ms()  # the paused hour is not caught up
    assert schedules.run_due() == 0 and forqapp.peek("naps") is None
    with pytest.raises(forqapp.ForqError) as caught:
        schedules.pause("no-such")
    assert caught.value.code == "not_found.schedule"
