"""The queue clock (forqapp.utils.now_ms) and its sync with the database's (forqapp.services.clock):
the offset estimate, when an offset is followed, FORQ_CLOCK, and — on PostgreSQL — a process whose
host clock is 5 s ahead that still agrees with the database on what is due."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
from django.db import connection, connections
from prometheus_client import REGISTRY

import forqapp
from forqapp import conf, store, utils
from forqapp.services import clock

from .test_postgres import ON_POSTGRES, ROOT, child_env


@pytest.fixture(autouse=True)
def _fresh_clock():
    """Each test starts with the host's clock and a sync due, and leaves it so."""
    clock.forget()
    yield
    clock.forget()


class FakeStore:
    """A database whose clock reads ``offset_us`` from the host's, each reading taking
    ``round_trip_us`` (the server reads its clock at the middle)."""

    has_clock = True

    def __init__(self, offset_us: int, round_trip_us: int = 400):
        self.offset_us, self.round_trip_us, self.reads = offset_us, round_trip_us, 0

    def clock_samples(self, n: int) -> list[tuple[int, int, int]]:
        self.reads += n
        now = utils.host_us()
        return [(now, now + self.round_trip_us // 2 + self.offset_us, now + self.round_trip_us)] * n


def gauge() -> float | None:
    return REGISTRY.get_sample_value("forq_clock_offset_seconds")


# --- the estimate ---------------------------------------------------------------------------------


def test_the_estimate_takes_the_shortest_round_trip_against_its_midpoint():
    samples = [
        (1_000, 2_000_900, 3_000),  # round trip 2 ms: the other clock read 2,000,900 at host 2,000
        (10_000, 2_010_300, 10_400),  # 0.4 ms: read at host 10,200 → offset 2,000,100 µs
        (20_000, 2_020_000, 21_000),  # 1 ms
    ]
    estimate = utils.estimate_clock_offset(samples)
    assert estimate == utils.ClockEstimate(offset_us=2_000_100, round_trip_us=400)
    assert estimate.uncertainty_us == 200


def test_the_estimate_skips_a_sample_whose_host_clock_went_back_and_needs_one():
    assert utils.estimate_clock_offset([]) is None
    assert utils.estimate_clock_offset([(5_000, 1, 4_000)]) is None  # the host clock stepped back
    assert utils.estimate_clock_offset([(5_000, 1, 4_000), (7_000, 6_000, 9_000)]) == (-2_000, 2_000)


def test_a_negative_offset_is_a_host_ahead_of_the_database():
    # the host reads 10,000 and 10,200; the database, read in between, 5 s behind
    assert utils.estimate_clock_offset([(10_000, 10_100 - 5_000_000, 10_200)]) == (-5_000_000, 200)


# --- following it ---------------------------------------------------------------------------------


def test_now_ms_adds_the_host_shift_and_the_database_offset(monkeypatch):
    monkeypatch.setattr(utils, "_OFFSET_MS", 5_000)
    utils.set_database_offset_ms(-4_990)
    real = utils.time.time_ns() // 1_000_000
    assert 10 <= utils.now_ms() - real < 10 + 60_000
    assert utils.host_us() // 1000 - real >= 5_000


def test_a_sync_follows_the_database_and_sets_the_gauge(monkeypatch):
    fake = FakeStore(offset_us=-2_000_400)
    estimate = clock.sync(on=fake)
    assert fake.reads == clock.SAMPLES
    assert estimate is not None and estimate.offset_us == -2_000_400
    assert utils.database_offset_ms() == -2_000  # rounded to the clock's milliseconds
    assert gauge() == -2.0


def test_a_new_measurement_within_its_uncertainty_keeps_the_offset():
    """No millisecond jitter from one minute to the next, and a database on the host itself stays 0."""
    clock.sync(on=FakeStore(offset_us=700, round_trip_us=400))  # 0.7 ms: within 0.2 + 1 ms of 0
    assert utils.database_offset_ms() == 0
    clock.sync(on=FakeStore(offset_us=-3_000_000))
    assert utils.database_offset_ms() == -3_000
    clock.sync(on=FakeStore(offset_us=-3_001_100, round_trip_us=400))  # 1.1 ms off: within 1.2
    assert utils.database_offset_ms() == -3_000
    clock.sync(on=FakeStore(offset_us=-3_001_100, round_trip_us=0))  # beyond 1 ms: followed
    assert utils.database_offset_ms() == -3_001
    clock.sync(on=FakeStore(offset_us=-3_040_000, round_trip_us=100_000))  # within a slow read's 50 ms
    assert utils.database_offset_ms() == -3_001


def test_an_offset_beyond_half_a_second_is_said_once_and_again_when_it_moves(caplog):
    caplog.set_level(logging.WARNING, logger="forqapp.clock")
    clock.sync(on=FakeStore(offset_us=-2_000_000))
    clock.sync(on=FakeStore(offset_us=-2_100_000))  # moved by 100 ms: not said again
    clock.sync(on=FakeStore(offset_us=+1_000_000))  # moved by 3 s
    clock.sync(on=FakeStore(offset_us=0))  # back
    lines = [r.getMessage() for r in caplog.records if r.name == "forqapp.clock"]
    assert lines == [
        "forqapp clock: this host's clock is 2.000 s ahead of the database's; the queue follows the database's "
        "clock (FORQ_CLOCK = \"database\"), but synchronise the hosts' clocks (NTP)",
        "forqapp clock: this host's clock is 1.000 s behind the database's; the queue follows the database's "
        "clock (FORQ_CLOCK = \"database\"), but synchronise the hosts' clocks (NTP)",
        "forqapp clock: this host's clock is within 500 ms of the database's again",
    ]


def test_a_sync_is_due_again_after_a_minute_and_the_loops_cost_nothing_meanwhile(monkeypatch):
    fake = FakeStore(offset_us=-1_000_000)
    monkeypatch.setattr(clock, "follows_database", lambda using=None: True)
    monkeypatch.setattr(store, "for_alias", lambda alias: fake)
    monkeypatch.setattr(connections["default"], "in_atomic_block", False)
    monkeypatch.setattr(connections["default"], "get_autocommit", lambda: True)
    monkeypatch.setattr(connections["default"], "connection", object())  # (open)
    clock.keep_in_step()
    assert (fake.reads, utils.database_offset_ms()) == (clock.SAMPLES, -1_000)
    clock.keep_in_step()
    clock.keep_in_step()
    assert fake.reads == clock.SAMPLES  # not due: no query
    now = clock.time.monotonic()
    monkeypatch.setattr(clock.time, "monotonic", lambda: now + clock.SYNC_EVERY_S + 1)
    clock.keep_in_step()
    assert fake.reads == 2 * clock.SAMPLES


def test_the_loops_never_measure_inside_a_transaction(monkeypatch):
    fake = FakeStore(offset_us=-1_000_000)
    monkeypatch.setattr(clock, "follows_database", lambda using=None: True)
    monkeypatch.setattr(store, "for_alias", lambda alias: fake)
    monkeypatch.setattr(connections["default"], "in_atomic_block", True)
    clock.keep_in_step()
    assert fake.reads == 0 and utils.database_offset_ms() == 0


def test_the_loops_never_open_a_connection(monkeypatch):
    """(Opening one measures by itself: connection_created.)"""
    fake = FakeStore(offset_us=-1_000_000)
    monkeypatch.setattr(clock, "follows_database", lambda using=None: True)
    monkeypatch.setattr(store, "for_alias", lambda alias: fake)
    monkeypatch.setattr(connections["default"], "connection", None)
    clock.keep_in_step()
    assert fake.reads == 0 and clock._due()


def test_a_failed_measurement_is_said_and_tried_again_later(monkeypatch, caplog):
    class Away(FakeStore):
        def clock_samples(self, n):
            from django.db import OperationalError

            raise OperationalError("the server closed the connection")

    monkeypatch.setattr(clock, "follows_database", lambda using=None: True)
    monkeypatch.setattr(store, "for_alias", lambda alias: Away(0))
    monkeypatch.setattr(connections["default"], "in_atomic_block", False)
    monkeypatch.setattr(connections["default"], "get_autocommit", lambda: True)
    monkeypatch.setattr(connections["default"], "connection", object())  # (open)
    clock.keep_in_step()  # never raises
    assert "could not read the database's clock (the server closed the connection)" in caplog.text
    assert not clock._due()
    assert clock._next_at - clock.time.monotonic() <= clock.RETRY_S
    monkeypatch.setattr(clock, "_next_at", None)
    clock.keep_in_step()  # failed again: not said again for ten minutes
    assert caplog.text.count("could not read the database's clock") == 1


# --- the setting ----------------------------------------------------------------------------------


def test_forq_clock_is_database_or_host_from_settings_or_the_environment(settings, monkeypatch):
    assert conf.forq_settings.FORQ_CLOCK == "database"
    monkeypatch.setenv("FORQ_CLOCK", "host")
    assert conf.forq_settings.FORQ_CLOCK == "host"
    settings.FORQ_CLOCK = "ntp"
    assert ("forqapp.E010", "FORQ_CLOCK must be 'database' or 'host' (got 'ntp')") in conf.problems()


def test_with_the_host_clock_nothing_is_measured_and_a_change_forgets_the_offset(settings, monkeypatch):
    utils.set_database_offset_ms(-2_000)
    settings.FORQ_CLOCK = "host"  # (setting_changed)
    assert utils.database_offset_ms() == 0
    monkeypatch.setattr(store, "for_alias", lambda alias: pytest.fail("asked for the database's clock"))
    clock.keep_in_step()
    assert utils.database_offset_ms() == 0 and not clock._due()


@pytest.mark.skipif(ON_POSTGRES, reason="SQLite's clock is the host's")
@pytest.mark.django_db(transaction=True)
def test_sqlite_is_one_host_and_is_never_asked_for_its_clock():
    assert not store.for_alias("default").has_clock
    connection.close()
    connection.ensure_connection()  # connection_created: nothing to measure
    clock.keep_in_step()
    assert utils.database_offset_ms() == 0
    assert forqapp.send("sqlite-clock", "x")


# --- PostgreSQL: a host whose clock is 5 s ahead --------------------------------------------------

on_postgres = pytest.mark.skipif(not ON_POSTGRES, reason="needs PostgreSQL: set DATABASE_URL=postgres://…")

SKEWED = r"""
import json, sys, django
django.setup()
from django.db import connection
from forqapp import services, utils
from forqapp.services import clock
connection.ensure_connection()  # (FORQ_CLOCK = "database": measured here)
estimate = clock.last_estimate()
print("ready", flush=True)
sys.stdin.readline()
got = services.claim("skewed")
before = utils.now_ms()
with connection.cursor() as cur:
    cur.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
    db = cur.fetchone()[0]
after = utils.now_ms()
print(json.dumps({"got": got is not None, "before": before, "db": db, "after": after,
                  "offset": utils.database_offset_ms(),
                  "uncertainty_ms": estimate and estimate.uncertainty_us / 1000}))
"""


@on_postgres
@pytest.mark.timeout(120)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["database", "host"])
def test_a_host_clock_5_s_ahead_sees_a_delayed_message_as_not_yet_due(mode):
    """A message sent here due in 4 s, then claimed at once by a process whose host clock is 5 s
    ahead (FORQ_CLOCK_OFFSET_MS, as the rehearsal's fault 6): following the database's clock it
    is not due there either; on its own host clock (FORQ_CLOCK=host) it was delivered 4 s early."""
    child = subprocess.Popen([sys.executable, "-c", SKEWED], cwd=ROOT, text=True, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=child_env(FORQ_CLOCK_OFFSET_MS="5000", FORQ_CLOCK=mode))
    try:
        ready = child.stdout.readline()
        assert ready == "ready\n", child.communicate(timeout=60)[1]
        forqapp.send("skewed", "in 4 s", delay=4)
        out, err = child.communicate("go\n", timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    result = json.loads(out.splitlines()[-1])
    if mode == "database":
        assert result["got"] is False
        # its queue clock is the database's: the database's reading lies between two of its own,
        # give or take what the measurement may be off by (half its round trip, a millisecond of
        # hysteresis, one of rounding: a few ms on this one host, more when it is busy)
        slack = result["uncertainty_ms"] + 2
        assert result["before"] - slack <= result["db"] <= result["after"] + slack, result
        assert abs(result["offset"] + 5000) <= slack, result
        assert "s ahead of the database's; the queue follows the database's clock" in err
    else:
        assert result["got"] is True  # delivered early: what the sync is for
        assert result["uncertainty_ms"] is None and result["offset"] == 0  # nothing measured
        assert result["before"] - result["db"] >= 4_000, result


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_the_loops_measure_on_postgresql_and_follow_a_host_clock_that_jumps(monkeypatch):
    """A process that measured once and whose host clock then moves 3 s ahead: the next loop
    turn after a minute measures again and its queue clock is the database's again."""
    connection.ensure_connection()  # (the loops measure on an open connection only)
    clock.keep_in_step()
    first = clock.last_estimate()
    assert first is not None  # (one host: the offset is 0, give or take the estimate's uncertainty)
    assert abs(utils.database_offset_ms()) <= first.uncertainty_us / 1000 + 2
    monkeypatch.setattr(utils, "_OFFSET_MS", 3_000)
    monkeypatch.setattr(clock, "_next_at", None)  # (a minute later)
    clock.keep_in_step()
    second = clock.last_estimate()
    assert second is not first
    slack = second.uncertainty_us / 1000 + 2
    assert abs(utils.database_offset_ms() + 3_000) <= slack
    with connection.cursor() as cur:
        before = utils.now_ms()
        cur.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
        db = cur.fetchone()[0]
        after = utils.now_ms()
    assert before - slack <= db <= after + slack


@on_postgres
@pytest.mark.django_db
def test_inside_the_tests_transaction_the_loops_leave_the_clock_alone(monkeypatch):
    monkeypatch.setattr(utils, "_OFFSET_MS", 3_000)
    clock.keep_in_step()
    assert utils.database_offset_ms() == 0
