"""Each background job on crafted rows: what it moves or deletes, and that it never touches a
message in processing (except ``stale``, whose business that is)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from prometheus_client import REGISTRY

import forqapp
from forqapp import services
from forqapp.models import Message
from forqapp.worker import jobs

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = 3_600_000


def sample(name: str, labels: dict | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def craft(queue: str, *, status: int = 0, attempts: int = 0, expired: bool = False,
          started_ago_ms: int | None = None, dlq: bool = False) -> str:
    """A message of ``queue`` in the given state (``dlq`` puts it in ``queue-dlq``)."""
    message_id = forqapp.send(queue, f"{queue} {status} {attempts} {expired}")
    now = services.now_ms()
    fields = {"status": status, "attempts": attempts}
    if expired:
        fields["expires_after"] = now - 1000
    if started_ago_ms is not None:  # claimed then, leased for the visibility timeout
        from forqapp.conf import forq_settings

        fields["processing_started_at"] = now - started_ago_ms
        fields["process_after"] = now - started_ago_ms + forq_settings.FORQ_VISIBILITY_TIMEOUT_MS
    if dlq:
        fields.update(queue=queue + "-dlq", is_dlq=True, expires_after=now + HOUR if not expired else now - 1000)
    Message.objects.filter(id=message_id).update(**fields)
    return message_id


def get(message_id: str) -> Message | None:
    return Message.objects.filter(id=message_id).first()


def test_expired_moves_ready_and_failed_to_dlq_but_not_processing():
    ready = craft("exp", expired=True)
    failed = craft("exp", status=2, attempts=5, expired=True)
    processing = craft("exp", status=1, attempts=1, expired=True, started_ago_ms=1000)
    fresh = craft("exp")
    before = sample("forq_messages_moved_to_dlq_total", {"reason": "expired"})
    assert jobs.run("expired", dry_run=True) == 2
    assert get(ready).queue == "exp"  # dry run changes nothing
    assert jobs.run("expired") == 2
    for message_id in (ready, failed):
        m = get(message_id)
        assert (m.queue, m.is_dlq, m.status, m.attempts, m.failure_reason) == (
            "exp-dlq", True, 0, 0, "message_expired")
    assert get(processing).queue == "exp" and get(processing).status == 1
    assert get(fresh).queue == "exp"
    assert sample("forq_messages_moved_to_dlq_total", {"reason": "expired"}) == before + 2


def test_expired_works_in_batches():
    ids = forqapp.send_many("expbatch", ["x"] * 2500)
    Message.objects.filter(id__in=ids).update(expires_after=services.now_ms() - 1)
    assert jobs.expired() == 2500
    assert Message.objects.filter(queue="expbatch-dlq").count() == 2500


def test_failed_moves_failed_to_dlq_only():
    failed = craft("fl", status=2, attempts=5)
    ready = craft("fl", attempts=2)
    processing = craft("fl", status=1, attempts=5, started_ago_ms=10)
    before = sample("forq_messages_moved_to_dlq_total", {"reason": "failed"})
    assert jobs.run("failed", dry_run=True) == 1
    assert jobs.run("failed") == 1
    m = get(failed)
    assert (m.queue, m.is_dlq, m.status, m.attempts, m.failure_reason) == (
        "fl-dlq", True, 0, 0, "max_attempts_reached")
    assert get(ready).queue == "fl" and get(processing).status == 1
    assert sample("forq_messages_moved_to_dlq_total", {"reason": "failed"}) == before + 1


def test_stale_recovers_old_deliveries_only(settings):
    settings.FORQ_VISIBILITY_TIMEOUT_MS = 60_000
    stale = craft("st", status=1, attempts=2, started_ago_ms=61_000)
    stale_last = craft("st", status=1, attempts=5, started_ago_ms=61_000)
    recent = craft("st", status=1, attempts=1, started_ago_ms=1_000)
    before = sample("forq_messages_stale_recovered_total")
    assert jobs.run("stale", dry_run=True) == 2
    assert jobs.run("stale") == 2
    assert (get(stale).status, get(stale).attempts, get(stale).processing_started_at) == (0, 2, None)
    assert get(stale_last).status == 2  # out of attempts: failed, for the failed job
    assert get(recent).status == 1
    assert sample("forq_messages_stale_recovered_total") == before + 2
    assert forqapp.receive("st").id == stale  # ready at once


def test_expired_dlq_deletes_expired_dlq_messages_not_processing():
    expired = craft("ed", dlq=True, expired=True)
    alive = craft("ed", dlq=True)
    processing = craft("ed", dlq=True, expired=True, status=1, started_ago_ms=10)
    regular_expired = craft("ed", expired=True)
    before = sample("forq_messages_cleanup_total", {"reason": "expired"})
    assert jobs.run("expired-dlq", dry_run=True) == 1
    assert jobs.run("expired-dlq") == 1
    assert get(expired) is None
    assert get(alive) and get(processing) and get(regular_expired)
    assert sample("forq_messages_cleanup_total", {"reason": "expired"}) == before + 1


def test_failed_dlq_deletes_failed_dlq_messages_only():
    failed = craft("fd", dlq=True, status=2, attempts=5)
    ready = craft("fd", dlq=True)
    processing = craft("fd", dlq=True, status=1, started_ago_ms=10)
    regular_failed = craft("fd", status=2)
    before = sample("forq_messages_cleanup_total", {"reason": "failed"})
    assert jobs.run("failed-dlq") == 1
    assert get(failed) is None
    assert get(ready) and get(processing) and get(regular_failed)
    assert sample("forq_messages_cleanup_total", {"reason": "failed"}) == before + 1


def test_no_job_touches_a_message_in_processing(settings):
    settings.FORQ_VISIBILITY_TIMEOUT_MS = 60_000
    ids = [
        craft("np", status=1, attempts=5, expired=True, started_ago_ms=100),
        craft("np", status=1, attempts=1, dlq=True, expired=True, started_ago_ms=100),
    ]
    snapshot = [Message.objects.filter(id=i).values().get() for i in ids]
    for name in jobs.JOBS:
        jobs.run(name)
    assert [Message.objects.filter(id=i).values().get() for i in ids] == snapshot


def test_queue_depth_sets_gauge_and_zeroes_emptied_queues():
    forqapp.send_many("qd", ["a", "b", "c"])
    craft("qd", dlq=True)
    assert jobs.run("queue-depth") >= 2
    assert sample("forq_queue_depth", {"queue_name": "qd", "queue_type": "regular"}) == 3
    assert sample("forq_queue_depth", {"queue_name": "qd-dlq", "queue_type": "dlq"}) == 1
    services.delete_dead("qd-dlq")
    jobs.run("queue-depth")
    assert sample("forq_queue_depth", {"queue_name": "qd-dlq", "queue_type": "dlq"}) == 0


def test_db_optimize_runs():
    assert jobs.run("db-optimize") == 0
    assert sample("forq_job_runs_total", {"job": "db-optimize", "result": "ok"}) >= 1


def test_stale_interval_follows_a_short_visibility_timeout(settings):
    settings.FORQ_VISIBILITY_TIMEOUT_MS = 10_000
    assert jobs.JOBS["stale"].every() == 5
    settings.FORQ_JOB_INTERVALS = {"stale": 1, "failed": 2}
    assert (jobs.JOBS["stale"].every(), jobs.JOBS["failed"].every()) == (1, 2)


def test_scheduler_runs_every_job_at_start_and_stops():
    failed = craft("sch", status=2, attempts=5)
    scheduler = jobs.Scheduler(list(jobs.JOBS.values()))
    scheduler.start_thread()
    try:
        for _ in range(100):
            if get(failed).queue == "sch-dlq":
                break
            import time

            time.sleep(0.05)
    finally:
        scheduler.stop()
        scheduler.join(5)
    assert get(failed).queue == "sch-dlq"


def test_command_run_one_job_and_dry_run(capsys):
    craft("cmd", status=2, attempts=5)
    call_command("forq_jobs", "run", "failed", "--dry-run")
    assert "failed: would handle 1" in capsys.readouterr().out
    call_command("forq_jobs", "run", "failed")
    assert "failed: handled 1" in capsys.readouterr().out
    call_command("forq_jobs", "list")
    assert "expired-dlq" in capsys.readouterr().out


def test_command_rejects_unknown_job():
    with pytest.raises(CommandError):
        call_command("forq_jobs", "run", "nope")


@pytest.mark.slow
def test_forq_jobs_process_runs_jobs_and_stops_on_sigterm(tmp_path):
    import signal

    from .workerproc import WorkerProc

    w = WorkerProc(tmp_path, {"FORQ_JOB_INTERVALS": {"failed": 0.1}})
    proc = w.start(command="forq_jobs", pipes=True)
    try:
        failed = craft("proc", status=2, attempts=5)
        w.wait_for(lambda: get(failed).queue == "proc-dlq", what="the failed job")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert "forq_jobs: stopped" in out
    finally:
        w.stop_all()


@pytest.mark.parametrize("argv", [
    ["forq_jobs", "run", "failed", "--dry-run", "--settings", "tests.settings", "-v", "0"],
    ["forq_jobs", "-v", "0", "run", "failed", "--dry-run"],  # before it: as always
    ["forq_queues", "list", "--traceback", "--no-color"],
    ["forq_keys", "list", "--verbosity", "1"],
])
def test_django_options_after_a_subcommand_are_taken(argv, capsys):
    """A cron line that appends Django's options after the subcommand (they were refused as
    "unrecognized arguments")."""
    from django.core.management import ManagementUtility

    ManagementUtility(["manage.py", *argv]).execute()
    out = capsys.readouterr()
    assert "unrecognized arguments" not in out.err, out.err
    if argv[0] == "forq_jobs":
        assert out.out.strip() == "failed: would handle 0"


def test_a_jobs_log_line_says_what_it_did_not_just_its_name_and_a_number(caplog):
    """``forqapp job failed: 1`` read as an error: it is the job named "failed" moving one message."""
    import logging

    craft("said", status=2, attempts=5)
    craft("said", expired=True)
    caplog.set_level(logging.DEBUG, logger="forqapp")
    scheduler = jobs.Scheduler(lease=False)
    for name in ("failed", "expired", "schedules", "queue-depth"):
        scheduler._run_one(jobs.JOBS[name])
    lines = {r.getMessage().split(" in ")[0]: r.levelname for r in caplog.records if "forqapp job" in r.getMessage()}
    assert lines == {
        'forqapp job "failed" moved 1 failed message(s) to their DLQ': "INFO",
        'forqapp job "expired" moved 1 expired message(s) to their DLQ': "INFO",
        'forqapp job "schedules" sent 0 scheduled message(s)': "DEBUG",  # nothing done: DEBUG
        'forqapp job "queue-depth" recorded the depth of 1 queue(s)': "DEBUG",  # every 30 s: DEBUG
    }
    assert set(jobs.DONE) == set(jobs.JOBS)  # every job says what its count is


def test_the_jobs_keep_a_working_sqlite_connection_from_run_to_run():
    """A one-second job on SQLite reuses its connection (Django's ``close_old_connections`` would
    open the file again each run: ``CONN_MAX_AGE`` 0); one past its age elsewhere is still closed."""
    from django.db import connection

    scheduler = jobs.Scheduler(lease=False)
    scheduler._run_one(jobs.JOBS["schedules"])
    first = connection.connection
    assert first is not None
    connection.close_at = 0  # aged out, as CONN_MAX_AGE=0 makes every connection at once
    scheduler._run_one(jobs.JOBS["moves"])
    if connection.vendor == "sqlite":
        assert connection.connection is first
    else:
        assert connection.connection is not first  # aged out: closed, and opened again by the job
