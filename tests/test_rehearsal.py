"""The network rehearsal, short (``bench/rehearsal``): two API hosts and two worker hosts on a
PostgreSQL host of their own, each in a network namespace; load over HTTP v1, v2 and SQS while
(1) API host 1's link to the database is cut for 10 s, then (2) PostgreSQL is restarted (fast, then
immediate shutdown), then (6) API host 2 and worker host 2 run with clocks 2 s ahead. Nothing
acknowledged is lost, nothing is delivered after its ack, no forqapp process is restarted, no
traceback is logged, ``/healthcheck`` answers 503 while its host cannot reach the database, at once
rather than at the client's timeout, and no delayed message is delivered before its time (the
queue clock is the database's).

It needs root and ``ip netns`` and takes about three minutes: it runs in its own phase of
``scripts/test.sh`` (``FORQ_REHEARSAL=1 pytest -m rehearsal tests/test_rehearsal.py``), and skips
elsewhere, saying why. The full rehearsal, with every fault and the scaling table:
``scripts/rehearsal.sh``."""

from __future__ import annotations

import argparse
import os

import pytest

from bench.rehearsal import run

pytestmark = [pytest.mark.rehearsal, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def rows():
    if not os.environ.get("FORQ_REHEARSAL"):
        pytest.skip("the network rehearsal runs in its own phase: FORQ_REHEARSAL=1 pytest -m rehearsal "
                    "tests/test_rehearsal.py (scripts/test.sh does)")
    reason = run.can_run()
    if reason:
        pytest.skip(f"the network rehearsal cannot run here: {reason}")
    args = argparse.Namespace(faults=[1, 2, 6], seconds=20, api_workers=1, keep_logs=None)
    return {row["fault"][0]: row for row in run.faults(args, log=lambda line: None)}


def _nothing_lost(row):
    for face, p in row["protocols"].items():
        assert p["acknowledged"] > 0, (face, row)  # the load ran through every face
        assert (p["lost"], p["after_ack"], p.get("tasks_lost", 0)) == (0, 0, 0), (face, row)
    assert row["new_tracebacks"] == {}, row
    assert row["first_ack_after_s"] is not None, row  # produces acknowledged after the fault: recovered


def test_a_cut_link_loses_nothing_and_the_healthcheck_tells_the_truth_at_once(rows):
    row = rows["1"]
    _nothing_lost(row)
    health = row["health_during"]
    assert health.get("10.89.1.1:503", 0) > 0, row  # the cut host said it cannot serve
    assert health.get("10.89.1.1:0", 0) == 0, row  # and never left the client without an answer (10 s)
    assert health.get("10.89.2.1:503", 0) == 0, row  # the other host, whose link stayed, served on
    assert row["healthy_again_s"] is not None, row
    assert row["db_away_lines"]["api1"] > 0, row  # said in the log


def test_a_postgresql_restart_loses_nothing_and_logs_no_traceback(rows):
    row = rows["2"]
    _nothing_lost(row)
    assert row["healthy_again_s"] is not None, row


def test_hosts_with_clocks_ahead_deliver_nothing_early(rows):
    """Fault 6: two of the four hosts 2 s ahead (FORQ_CLOCK_OFFSET_MS). They follow the database's
    clock, so the earliest delayed message is delivered no sooner than its due time (it was 1.94 s
    early when each host kept its own clock); the schedule sends its ticks as usual."""
    row = rows["6"]
    for face, p in row["protocols"].items():
        assert p["acknowledged"] > 0, (face, row)
        assert (p["lost"], p["after_ack"], p.get("tasks_lost", 0)) == (0, 0, 0), (face, row)
    assert row["new_tracebacks"] == {}, row
    assert row["delayed"] > 0, row
    assert row["delay_min_s"] >= -0.1, row  # (the client's clock against the database's: one machine)


def test_a_host_clock_ahead_is_rehearsed_with_forqs_clock_offset(monkeypatch):
    """``FORQ_CLOCK_OFFSET_MS`` (read at start-up) shifts every queue time the process computes —
    how the rehearsal's fault 6 sets a host's clock 2 s ahead; unset or malformed, no shift."""
    from forqapp import utils

    for raw, expected in (("2000", 2000), ("-1500", -1500), ("", 0), ("2s", 0)):
        monkeypatch.setenv("FORQ_CLOCK_OFFSET_MS", raw)
        assert utils._clock_offset_ms() == expected
    monkeypatch.delenv("FORQ_CLOCK_OFFSET_MS")
    assert utils._clock_offset_ms() == 0
    monkeypatch.setattr(utils, "_OFFSET_MS", 3_600_000)  # an hour: far beyond the time the lines take
    real = utils.time.time_ns() // 1_000_000
    ahead = utils.now_ms()
    assert 3_600_000 <= ahead - real < 2 * 3_600_000
