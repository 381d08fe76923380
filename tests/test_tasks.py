"""The Django Tasks backend (issue 14), in this process: validation, enqueue (outbox, arguments,
deferral), running through forq_worker's Worker (sync, async, context), results through every
state, retries → DLQ → requeue, fencing, signals, schedules of tasks, pruning. Runs on Django 5.2
(django-tasks) and on Django 6.0 (django.tasks: scripts/test-django6.sh)."""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import transaction

from forqapp import services
from forqapp.models import Message
from forqapp.services import schedules
from forqapp.tasks import ForqBackend, TaskArgumentsError
from forqapp.tasks.compat import (
    InvalidTaskError,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from forqapp.tasks.discovery import with_consumers
from forqapp.tasks.models import TaskRecord
from forqapp.tasks.running import TaskRunner, WorkerLost
from forqapp.worker import jobs
from forqapp.worker.runner import Worker
from tests.conftest import patch_clock
from tests.tasksapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def drain(**kwargs) -> dict[str, int]:
    """Run every task queue's due tasks with forq_worker's Worker, until none is due."""
    return Worker(with_consumers({}), concurrency=kwargs.pop("concurrency", 2), prefetch=kwargs.pop("prefetch", 50),
                  burst=True, **kwargs).run()


def backend() -> ForqBackend:
    b = task_backends["default"]
    assert isinstance(b, ForqBackend)
    return b


@pytest.fixture(autouse=True)
def _fresh_calls():
    tasks.CALLS.clear()
    tasks._counts.clear()
    yield
    tasks.CALLS.clear()


# --- 1. the backend: features and validation -------------------------------------------------


def test_the_backend_supports_every_feature():
    b = backend()
    assert (b.supports_defer, b.supports_async_task, b.supports_get_result, b.supports_priority) == (True,) * 4
    assert b.forq_queues() == ["tasks-default", "tasks-other"]


def _func(x):
    return x


def _context_first(label, context):
    return label


def test_validate_task_applies_the_framework_and_forqapp_rules(settings):
    with pytest.raises(InvalidTaskError, match="module level"):
        task(lambda: 1)
    with pytest.raises(InvalidTaskError, match="context"):
        task(takes_context=True)(_context_first)
    with pytest.raises(InvalidTaskError, match="priority"):
        tasks.add.using(priority=101)
    with pytest.raises(InvalidTaskError, match="not valid for backend"):
        tasks.add.using(queue_name="elsewhere")
    with pytest.raises(InvalidTaskError, match="aware"):
        tasks.add.using(run_after=datetime(2030, 1, 1))  # noqa: DTZ001 - naive on purpose
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend",
                                  "QUEUES": ["default", "mail-dlq", "bad name", "x" * 130]}}
    # Queues the backend lists: its check reports them (E060), and enqueue refuses them; defining
    # the task does not raise (the URLconf may import it before the checks run).
    for name, problem in (("mail-dlq", "dead-letter"), ("bad name", "not a valid forqapp queue name"),
                          ("x" * 130, "not a valid forqapp queue name")):
        on_it = tasks.add.using(queue_name=name)
        with pytest.raises(InvalidTaskError, match=problem):
            on_it.enqueue(1, 2)
    problems = task_backends["default"].check()
    assert {p.id for p in problems} == {"forqapp.E060"} and len(problems) == 3
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": []}}  # any queue: the task's own mistake
    with pytest.raises(InvalidTaskError, match="dead-letter"):
        tasks.add.using(queue_name="mail-dlq")
    with pytest.raises(InvalidTaskError, match="not a valid forqapp queue name"):
        tasks.add.using(queue_name="bad name")
    assert not Message.objects.exists()


def test_a_queue_prefix_that_makes_a_dlq_name_is_refused(settings):
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["default"],
                                  "OPTIONS": {"queue_prefix": "x-dlq"}}}
    assert task_backends["default"].check() == []
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["-dlq"]}}
    assert [p.id for p in task_backends["default"].check()] == ["forqapp.E060"]


def test_a_task_queue_of_80_characters_runs(settings):
    """``queue_prefix + queue_name`` may be 80 characters, forqapp's limit; 81 is refused."""
    longest, over = "t" * 74, "u" * 75  # "tasks-" + 74 = 80
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": [longest, over],
                                  "OPTIONS": {"queue_prefix": "tasks-"}}}
    problems = task_backends["default"].check()
    assert [p.id for p in problems] == ["forqapp.E060"] and over in problems[0].msg and longest not in problems[0].msg
    with pytest.raises(InvalidTaskError, match="not a valid forqapp queue name"):
        tasks.add.using(queue_name=over).enqueue(2, 3)
    result = tasks.add.using(queue_name=longest).enqueue(2, 3)
    assert Message.objects.get(id=result.id).queue == "tasks-" + longest
    settings.TASKS = {"default": {**settings.TASKS["default"], "QUEUES": [longest]}}  # the worker's queues
    Worker(with_consumers({}), burst=True, start_jitter=0).run()
    assert TaskRecord.objects.get(id=result.id).status == "SUCCESSFUL"


def test_check_reports_unknown_options_bad_retention_and_bad_retries(settings):
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend",
                                  "OPTIONS": {"prefix": "x", "result_retention": 0, "max_attempts": 0}}}
    ids_ = sorted(p.id for p in task_backends["default"].check())
    assert ids_ == ["forqapp.E061", "forqapp.E062", "forqapp.E063"]


@pytest.mark.parametrize(("options", "message"), [
    ({"prefix": "x"}, "unknown option(s) prefix"),
    ({"result_retention": -5}, "'result_retention'] must be a positive number of seconds (got -5)"),
    ({"result_retention": "a day"}, "must be a positive number of seconds"),
    ({"max_attempts": 0}, "max_attempts"),
])
def test_enqueue_refuses_what_the_checks_report_of_the_options_and_sends_nothing(settings, options, message):
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "OPTIONS": options}}
    with pytest.raises(InvalidTaskError) as refused:
        tasks.add.enqueue(2, 3)
    assert message in str(refused.value)
    assert str(refused.value) in [p.msg for p in task_backends["default"].check()]  # the check's own words
    assert not Message.objects.exists()


def test_check_reports_forqapp_missing_from_installed_apps(settings):
    """Audit: ``backend.check()`` said nothing without ``forqapp`` in ``INSTALLED_APPS`` (its tables,
    its jobs and the worker command are the app's), as django-tasks-db's backend says of its app."""
    assert task_backends["default"].check() == []
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a not in ("forqapp", "forqapp.apps.ForqConfig")]
    problems = task_backends["default"].check()
    assert [p.id for p in problems] == ["forqapp.E064"]
    assert "'forqapp'" in problems[0].hint and "INSTALLED_APPS" in problems[0].hint


@pytest.mark.parametrize(("options", "message"), [
    ({"max_attempts": 0}, "max_attempts must be an integer >= 1"),
    ({"max_attempts": True}, "max_attempts must be an integer >= 1"),
    ({"max_attempts": 2.5}, "max_attempts must be an integer >= 1"),
    ({"backoff": -1}, "backoff must be a function, seconds"),
    ({"backoff": []}, "backoff must be a function, seconds"),
    ({"backoff": [1, "2"]}, "backoff must be a function, seconds"),
    ({"backoff": "no.such.function"}, "backoff: cannot import"),
])
def test_every_retry_option_rule(settings, options, message):
    from forqapp.tasks import retries
    from forqapp.tasks.retrying import RetryPolicyError

    with pytest.raises(RetryPolicyError, match=message):  # on the task: at import time
        retries(**options)
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "OPTIONS": options}}
    problems = task_backends["default"].check()  # on the backend: a system check
    assert [p.id for p in problems] == ["forqapp.E063"] and message in problems[0].msg
    on_it = task(_func)  # defining a task does not raise (see the manage.py check test); enqueue does
    with pytest.raises(InvalidTaskError, match=message):
        on_it.enqueue(1)
    assert not Message.objects.exists()


def test_a_retry_policy_not_made_by_retries_is_refused_by_validate_task():
    from forqapp.tasks.retrying import RetryPolicy, RetryPolicyError

    _func.forq_retries = {"max_attempts": 3}  # set by hand, not by @retries
    try:
        with pytest.raises(RetryPolicyError, match="must come from forqapp.tasks.retries"):
            task(_func)
    finally:
        del _func.forq_retries
    _func.forq_retries = RetryPolicy(max_attempts=2)
    try:
        assert task(_func).func.forq_retries.max_attempts == 2
    finally:
        del _func.forq_retries


def test_two_backends_on_one_forqapp_queue_are_a_check_and_stop_the_worker_in_one_line(settings):
    """Two ForqBackend aliases without a prefix both run the forqapp queue "default": the check
    says so (forqapp.E041) and forq_worker stops in one line, as docs/how-to/django-tasks.md says."""
    from django.core.checks import run_checks
    from django.core.management import CommandError, call_command

    said = ("TASKS: backends 'default' and 'other' both use the forqapp queue 'default' "
            "(give one a queue_prefix)")
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend"},
                      "other": {"BACKEND": "forqapp.tasks.ForqBackend"}}
    assert [e.msg for e in run_checks() if e.id == "forqapp.E041"] == [said]
    with pytest.raises(CommandError, match=re.escape(said)):
        call_command("forq_worker", "--burst")
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend"},
                      "other": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": [], "OPTIONS": {"queue_prefix": "o-"}}}
    assert not [e for e in run_checks() if e.id == "forqapp.E041"]


def test_the_system_checks_include_the_backend(settings, monkeypatch):
    from django.core.checks import run_checks

    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["ok", "dlq-not-at-the-end"]}}
    assert "forqapp.E060" not in {e.id for e in run_checks()}
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["ok", "mail-dlq"]}}
    # Django 6 runs each backend's check(), the backport's app too; without that app forqapp's checks do.
    problems = [e for e in run_checks() if e.id == "forqapp.E060"]
    assert len(problems) == 1 and "mail-dlq" in problems[0].msg  # once, whoever runs it
    from django.apps import apps

    from forqapp.tasks.compat import FRAMEWORK
    from forqapp.tasks.discovery import backend_problems

    assert not apps.is_installed("django_tasks")
    assert [p.id for p in backend_problems()] == (["forqapp.E060"] if FRAMEWORK == "django_tasks" else [])
    monkeypatch.setattr(apps, "is_installed", lambda name: name == "django_tasks")  # its app runs them then
    assert backend_problems() == []


def test_importing_the_backend_and_tasks_touches_no_model():
    """``@task`` is imported while apps load: the backend module must not import models."""
    code = ("import os; os.environ['DJANGO_SETTINGS_MODULE'] = 'tests.settings'\n"
            "from django.conf import settings; settings.INSTALLED_APPS\n"
            "import tests.tasksapp.tasks as t\n"
            "import forqapp.tasks.backend, forqapp.tasks.running, forqapp.tasks.results\n"
            "import sys; loaded = [m for m in sys.modules if m.endswith('.models') and not m.startswith('django.')]\n"
            "assert not loaded, f'models imported: {loaded}'\n"
            "print(t.add.module_path)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parent.parent))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "tests.tasksapp.tasks.add"


@pytest.mark.parametrize(("options", "queues", "problem"), [
    ({"backoff": "no.such.function"}, ["default"], "forqapp.E063"),
    ({"max_attempts": 0}, ["default"], "forqapp.E063"),
    ({"queue_prefix": "bad prefix "}, ["default"], "forqapp.E060"),
    ({}, ["default", "bad name"], "forqapp.E060"),
])
def test_manage_py_check_reports_the_backend_when_the_urlconf_imports_a_task(tmp_path, options, queues, problem):
    """A misconfigured backend is the checks' to report, with their id, not a traceback from the
    URLconf's import of a tasks module (which ``@task`` validates)."""
    (tmp_path / "chk_settings.py").write_text(
        "from tests.settings import *  # noqa: F403\n"
        f"TASKS = {{'default': {{'BACKEND': 'forqapp.tasks.ForqBackend', 'QUEUES': {queues!r}, "
        f"'OPTIONS': {options!r}}}}}\n"
        "ROOT_URLCONF = 'chk_urls'\n")
    (tmp_path / "chk_urls.py").write_text(
        "import chk_tasks  # noqa: F401\nfrom project.urls import urlpatterns  # noqa: F401\n")
    queue = queues[-1]
    (tmp_path / "chk_tasks.py").write_text(
        f"from forqapp.tasks import task\n\n@task(queue_name={queue!r})\ndef hello():\n    return 1\n")
    root = __import__("pathlib").Path(__file__).resolve().parent.parent
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{root}", "DJANGO_SETTINGS_MODULE": "chk_settings"}
    out = subprocess.run([sys.executable, str(root / "manage.py"), "check"], capture_output=True, text=True,
                         timeout=120, cwd=str(tmp_path), env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"({problem})" in out.stderr and "Traceback" not in out.stderr, out.stderr


# --- enqueue: the outbox, the arguments, deferral ---------------------------------------------


def test_enqueue_writes_one_message_on_the_task_queue():
    result = tasks.urgent.enqueue(7)
    m = Message.objects.get(id=result.id)
    assert (m.queue, m.priority, m.status) == ("tasks-other", 10, 0)
    content = json.loads(m.content)
    assert content["task"] == "tests.tasksapp.tasks.urgent" and content["call"] == {"args": [7], "kwargs": {}}
    assert result.status == TaskResultStatus.READY and result.enqueued_at is not None
    assert result.backend == "default" and result.task.module_path == "tests.tasksapp.tasks.urgent"


def test_enqueue_and_get_result_agree_on_enqueued_at(monkeypatch):
    """Audit: the result enqueue returned said the backend's own reading of the clock, get_result the
    message's received_at, read a moment later: 1-5 ms apart in ~1.7% of enqueues. One timestamp, the
    stored one (here every reading of the clock is a millisecond later than the one before)."""
    from forqapp.utils import ms_to_datetime

    ticks = itertools.count(services.now_ms())
    patch_clock(monkeypatch, lambda: next(ticks))
    for result in (tasks.add.enqueue(1, 1), tasks.add.using(run_after=datetime.now(UTC) - timedelta(hours=1)).enqueue(2, 2),
                   tasks.add.using(run_after=datetime.now(UTC) + timedelta(hours=1)).enqueue(3, 3)):
        assert result.enqueued_at == ms_to_datetime(Message.objects.get(id=result.id).received_at)
        assert tasks.add.get_result(result.id).enqueued_at == result.enqueued_at
    assert drain() == {"ack": 2}
    assert tasks.add.get_result(result.id).enqueued_at == result.enqueued_at  # noqa: B023 - the last one


def test_enqueue_inside_atomic_commits_and_rolls_back_with_the_caller():
    from django.contrib.auth.models import Group

    with transaction.atomic():
        Group.objects.create(name="kept")
        kept = tasks.add.enqueue(1, 2)
    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        Group.objects.create(name="gone")
        gone = tasks.add.enqueue(3, 4)
        assert Message.objects.filter(id=gone.id).exists()  # visible inside the transaction
        raise Boom
    assert Group.objects.filter(name="kept").exists() and not Group.objects.filter(name="gone").exists()
    assert Message.objects.filter(id=kept.id).exists()
    assert not Message.objects.filter(id=gone.id).exists()
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(gone.id)
    assert drain() == {"ack": 1}
    assert [c for c in tasks.CALLS if c[0] == "add"] == [("add", {"a": 1, "b": 2})]


def test_arguments_round_trip_strictly_through_json():
    result = tasks.echo.enqueue((1, 2), {1: "a", "k": (3,)}, when=None, n=1.5)
    expected_args = [[1, 2], {"1": "a", "k": [3]}]
    assert result.args == expected_args and result.kwargs == {"when": None, "n": 1.5}
    drain()
    assert tasks.CALLS == [("echo", {"args": ([1, 2], {"1": "a", "k": [3]}), "kwargs": {"when": None, "n": 1.5}})]
    done = tasks.echo.get_result(result.id)
    assert done.args == expected_args and done.return_value == {"args": expected_args,
                                                                "kwargs": {"when": None, "n": 1.5}}


@pytest.mark.parametrize(("bad", "said"), [
    (datetime.now(UTC), "Unsupported type: <class 'datetime.datetime'>"), ({1, 2}, "Unsupported type: <class 'set'>"),
    (b"bytes", "Unsupported type: <class 'bytes'>"), (object(), "Unsupported type: <class 'object'>"),
    (math.nan, "Out of range float values"), (math.inf, "Out of range float values")])
def test_arguments_that_are_not_json_are_refused_with_a_clear_error(bad, said):
    """In Django's words (its normalize_json's ``TypeError``), then what a task's arguments may be."""
    with pytest.raises(TaskArgumentsError) as exc:
        tasks.echo.enqueue(bad)
    assert str(exc.value).startswith(said) and "a task's arguments must be JSON" in str(exc.value)
    assert isinstance(exc.value, TypeError) and isinstance(exc.value, InvalidTaskError)
    assert not Message.objects.exists()


def test_arguments_nested_too_deep_are_refused_with_a_clear_error():
    nested: list = []
    for _ in range(5000):
        nested = [nested]
    with pytest.raises(TaskArgumentsError, match="a task's arguments"):
        tasks.echo.enqueue(nested)
    assert not Message.objects.exists()


def test_a_message_nested_too_deep_in_a_task_queue_fails_for_good():
    services.send("tasks-default", "[" * 5000 + "]" * 5000)  # sent by other means than enqueue
    assert drain() == {"fail": 1}


def test_oversize_arguments_are_refused(settings):
    settings.FORQ_MAX_CONTENT_BYTES = 1000
    tasks.echo.enqueue("x" * 800)
    with pytest.raises(TaskArgumentsError, match="too large"):
        tasks.echo.enqueue("x" * 1000)
    assert Message.objects.count() == 1


def test_a_deferred_task_waits_and_does_not_expire_before_it_runs():
    services.configure_queue("tasks-default", retention=60)  # shorter than the deferral: counted from the due time
    due = datetime.now(UTC) + timedelta(minutes=5)
    result = tasks.add.using(run_after=due).enqueue(1, 1)
    m = Message.objects.get(id=result.id)
    assert abs(m.process_after - due.timestamp() * 1000) < 2
    assert m.expires_after == m.process_after + 60_000
    assert drain() == {}  # not due
    waiting = tasks.add.get_result(result.id)
    assert waiting.status == TaskResultStatus.READY
    assert result.task.run_after == due and waiting.task.run_after == due  # (to the microsecond)
    assert tasks.add.get_result(tasks.add.enqueue(1, 1).id).task.run_after is None
    assert jobs.expired() == 0
    with pytest.raises(InvalidTaskError, match="^run_after: run_after is more than 366 days ahead$"):
        tasks.add.using(run_after=datetime.now(UTC) + timedelta(days=400)).enqueue(1, 1)
    before = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    past = tasks.add.using(run_after=before).enqueue(2, 2)  # runs at once
    assert drain() == {"ack": 2}  # and the one without run_after
    done = tasks.add.get_result(past.id)
    assert done.return_value == 4 and done.task.run_after == before  # what it asked, after it ran too


def test_a_deferred_task_outlives_a_retention_shorter_than_its_deferral(clock):
    """Past the queue's retention counted from the enqueue, but before its due time, the expired
    job leaves a deferred task alone; it runs when due."""
    services.configure_queue("tasks-default", retention=60)
    enqueued = services.now_ms()
    result = tasks.add.using(run_after=datetime.fromtimestamp(enqueued / 1000 + 300, UTC)).enqueue(20, 22)
    clock.advance(240)  # enqueue + retention (60 s) is long past; the due time (300 s) is not
    assert jobs.expired() == 0 and jobs.failed() == 0
    m = Message.objects.get(id=result.id)
    assert (m.queue, m.status) == ("tasks-default", 0)
    assert drain() == {}  # still not due
    clock.advance(61)  # due, and 1 s into its retention
    assert jobs.expired() == 0
    assert drain() == {"ack": 1}
    done = tasks.add.get_result(result.id)
    assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    # The same retention without the deferral does expire (the rule the task escaped is real).
    plain = tasks.add.enqueue(1, 1)
    clock.advance(61)
    assert jobs.expired() == 1
    assert Message.objects.get(id=plain.id).queue == "tasks-default-dlq"


def test_run_after_priority():
    """django-tasks-db's ``test_run_after_priority``, ported: the tasks due run by priority, then by
    due time (a past run_after counts as its time), then enqueue order; the future ones wait. (Its
    first half orders its model's every row, the future ones too: a table forqapp does not have.)"""
    now = datetime.now(UTC)

    def enqueue(label, **using):
        return tasks.echo.using(**using).enqueue(label)

    old_task = enqueue("old_task", priority=20, run_after=now - timedelta(hours=2))
    very_old_task = enqueue("very_old_task", priority=20, run_after=now - timedelta(hours=10))
    far_future = enqueue("far_future", run_after=now + timedelta(hours=10))
    high_priority_far_future = enqueue("high_priority_far_future", priority=10, run_after=now + timedelta(hours=10))
    future = enqueue("future", run_after=now + timedelta(hours=2))
    enqueue("high_priority", priority=10)
    enqueue("low_priority", priority=2)
    enqueue("lower_priority", priority=-2)
    assert drain(concurrency=1) == {"ack": 5}
    assert [c[1]["args"][0] for c in tasks.CALLS if c[0] == "echo"] == \
        ["very_old_task", "old_task", "high_priority", "low_priority", "lower_priority"]
    for waiting in (far_future, high_priority_far_future, future):
        assert tasks.echo.get_result(waiting.id).status == TaskResultStatus.READY
    assert tasks.echo.get_result(old_task.id).status == tasks.echo.get_result(very_old_task.id).status \
        == TaskResultStatus.SUCCESSFUL


def test_equal_priorities_run_by_due_time_then_enqueue_order_one_claim_at_a_time():
    """The same order when the worker claims one task at a time; a task without run_after counts its
    enqueue time."""
    now = datetime.now(UTC)
    tasks.echo.using(run_after=now - timedelta(hours=2)).enqueue("2h")
    tasks.echo.enqueue("now")
    tasks.echo.using(run_after=now - timedelta(hours=10)).enqueue("10h")
    tasks.echo.using(run_after=now - timedelta(hours=2)).enqueue("2h, enqueued later")
    assert drain(concurrency=1, prefetch=1) == {"ack": 4}
    assert [c[1]["args"][0] for c in tasks.CALLS if c[0] == "echo"] == ["10h", "2h", "2h, enqueued later", "now"]


def test_the_backends_queues_take_the_due_order_unless_they_set_their_own():
    tasks.echo.enqueue("x")
    assert services.queue_info("tasks-default").overrides == {"ordering": "due"}
    services.configure_queue("tasks-other", ordering="fifo")  # the project's own choice is kept
    tasks.urgent.enqueue(1)
    assert services.queue_info("tasks-other").overrides == {"ordering": "fifo"}
    now = datetime.now(UTC)
    tasks.urgent.using(run_after=now - timedelta(hours=1)).enqueue(2)
    tasks.urgent.using(run_after=now - timedelta(hours=10)).enqueue(3)
    assert drain(concurrency=1) == {"ack": 4}
    assert [c[1]["n"] for c in tasks.CALLS if c[0] == "urgent"] == [1, 2, 3]  # FIFO: enqueue order


def test_a_past_run_after_is_kept_as_the_due_time_and_its_retention_counts_from_now():
    services.configure_queue("tasks-default", retention=3_600)
    before = datetime.now(UTC) - timedelta(days=3)
    m = Message.objects.get(id=tasks.add.using(run_after=before).enqueue(1, 1).id)
    assert m.process_after == int(before.timestamp() * 1000) < m.received_at
    assert m.expires_after == m.received_at + 3_600_000  # not already expired
    assert jobs.expired() == 0 and drain() == {"ack": 1}


# --- 2. running: sync, async, context; results through each state ------------------------------


def test_sync_async_and_context_tasks_run_and_report_results():
    a = tasks.add.enqueue(2, 3)
    b = tasks.async_double.enqueue(21)
    c = tasks.with_context.enqueue("ctx")
    assert drain() == {"ack": 3}
    ra, rb, rc = (x.task.get_result(x.id) for x in (a, b, c))
    assert (ra.status, ra.return_value) == (TaskResultStatus.SUCCESSFUL, 5)
    assert (rb.status, rb.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert rc.return_value == {"attempt": 1, "label": "ctx"}
    assert ra.attempts == 1 and len(ra.worker_ids) == 1 and ra.errors == []
    assert ra.started_at and ra.finished_at and ra.last_attempted_at and ra.enqueued_at
    assert ra.enqueued_at <= ra.started_at <= ra.finished_at
    context_call = [c for c in tasks.CALLS if c[0] == "with_context"]
    assert context_call == [("with_context", {"label": "ctx", "attempt": 1, "id": c.id})]
    assert not Message.objects.exists()  # acked


def test_aenqueue_and_aget_result():
    from asgiref.sync import async_to_sync

    async def both():
        result = await tasks.add.aenqueue(5, 6)
        return result, await tasks.add.aget_result(result.id)

    result, fetched = async_to_sync(both)()
    assert fetched.id == result.id and fetched.status == TaskResultStatus.READY and fetched.args == [5, 6]


def test_get_result_through_each_state():
    result = tasks.add.enqueue(1, 2)
    assert tasks.add.get_result(result.id).status == TaskResultStatus.READY
    claimed = services.claim("tasks-default")  # a worker holds it: RUNNING, its attempt counted
    running = tasks.add.get_result(result.id)
    assert running.status == TaskResultStatus.RUNNING and running.attempts == 1
    assert running.worker_ids == ["unknown"]  # its worker has not reported yet
    runner = TaskRunner(backend(), "tasks-default")
    runner(claimed)
    assert runner.settle([(claimed, "ack", None)], using=services.alias()) == {"ack": 1}
    done = tasks.add.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 3 and done.attempts == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3


def test_unknown_and_malformed_ids_do_not_exist():
    import uuid

    for bad in (str(uuid.uuid4()), "nope", ""):
        with pytest.raises(TaskResultDoesNotExist):
            backend().get_result(bad)
    for content in ("not a task", "[" * 5000 + "]" * 5000):  # a message, but no task
        plain = services.send("tasks-default", content)
        with pytest.raises(TaskResultDoesNotExist):
            backend().get_result(plain)


def test_a_return_value_that_is_not_json_fails_the_task_for_good():
    result = tasks.unencodable.enqueue()
    assert drain() == {"fail": 1}
    failed = tasks.unencodable.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    # As Django's backends record it: a TypeError, in normalize_json's words.
    assert failed.errors[0].exception_class_path == "builtins.TypeError"
    assert failed.errors[0].exception_class is TypeError
    assert "TypeError: Unsupported type: <class 'set'>" in failed.errors[0].traceback
    assert "the return value of tests.tasksapp.tasks.unencodable must be JSON" in failed.errors[0].traceback
    assert Message.objects.get(id=result.id).failure_reason == "fatal_error"  # no retry mends it
    with pytest.raises(ValueError, match="failed"):
        _ = failed.return_value


@pytest.mark.parametrize(("task", "args", "raised"), [
    (tasks.leaves, ["sys.exit"], "builtins.SystemExit"), (tasks.leaves, ["exit()"], "builtins.SystemExit"),
    (tasks.leaves, ["KeyboardInterrupt"], "builtins.KeyboardInterrupt"), (tasks.leaves_async, [], "builtins.SystemExit"),
], ids=["sys.exit", "exit()", "KeyboardInterrupt", "async SystemExit"])
def test_a_task_that_exits_or_raises_keyboardinterrupt_fails_like_any_other(task, args, raised, finished, caplog):
    """Audit (Django's own tests): a SystemExit/KeyboardInterrupt in a task left the result FAILED with
    no task_finished, no log line and the path "?". It is the task's own (the worker's handler threads
    never get a signal's KeyboardInterrupt): a failure like another, and the worker goes on."""
    result = task.enqueue(*args)
    after = tasks.add.enqueue(1, 2)
    with caplog.at_level("WARNING", logger="forqapp"):
        assert drain(concurrency=1) == {"fail": 1, "ack": 1}
    failed = task.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in failed.errors] == [raised]
    assert sorted(finished) == sorted([(after.id, TaskResultStatus.SUCCESSFUL, 1), (result.id, TaskResultStatus.FAILED, 1)])
    assert TaskRecord.objects.get(id=result.id).task_path == task.module_path
    assert any(result.id in r.getMessage() and task.module_path in r.getMessage() and raised.split(".")[1] in
               r.getMessage() for r in caplog.records)
    assert tasks.add.get_result(after.id).return_value == 3
    assert tasks.add.enqueue(2, 2) and drain() == {"ack": 1}  # the event loop of async tasks still runs
    assert tasks.async_double.get_result(tasks.async_double.enqueue(4).id).status == TaskResultStatus.READY
    assert drain() == {"ack": 1}


def test_a_task_path_outside_the_apps_is_not_imported():
    """Audit: a message naming ``this.s`` (anyone may write one who can send to a task queue) made
    the worker, and a get_result, import ``this``, running its code, before refusing it as no task."""
    from forqapp.tasks.results import load_task

    assert "this" not in sys.modules
    content = json.loads(Message.objects.get(id=tasks.add.enqueue(1, 1).id).content)
    Message.objects.filter(queue="tasks-default").delete()
    content["task"] = "this.s"
    message_id = services.send("tasks-default", json.dumps(content))
    with pytest.raises(TaskResultDoesNotExist):
        backend().get_result(message_id)
    assert drain() == {"nack": 1}
    assert "this" not in sys.modules
    record = TaskRecord.objects.get(id=message_id)
    assert "module 'this' is in no installed app" in record.errors_list()[0]["traceback"]
    # A module of the project's package (tests, of tests.settings) or of an installed app is imported as before.
    assert load_task("tests.tasksapp.tasks.add", "default", 0, "default") is not None


def test_an_import_error_is_a_retryable_failure():
    content = json.loads(Message.objects.get(id=tasks.add.enqueue(1, 1).id).content)
    content["task"] = "tests.tasksapp.tasks.not_deployed_yet"
    message_id = services.send("tasks-default", json.dumps(content))
    assert drain() == {"ack": 1, "nack": 1}
    m = Message.objects.get(id=message_id)
    assert (m.status, m.attempts) == (0, 1)  # ready again, after the queue's backoff
    record = TaskRecord.objects.get(id=message_id)
    assert record.status == "READY"
    assert record.errors_list()[0]["exception_class_path"].endswith("ImportError")


# --- 3. retries, DLQ, requeue -----------------------------------------------------------------


def test_retries_with_backoff_then_dlq_then_requeue_then_success(clock):
    result = tasks.always_fails.enqueue("k1")  # max_attempts=3, backoff [0.2, 0.4]
    assert drain() == {"nack": 1}
    m = Message.objects.get(id=result.id)
    assert m.status == 0 and m.attempts == 1
    assert 190 <= m.process_after - services.now_ms() <= 210  # the task's own backoff: 0.2 s
    assert tasks.always_fails.get_result(result.id).status == TaskResultStatus.READY
    clock.advance(0.25)
    assert drain() == {"nack": 1}
    m.refresh_from_db()
    assert 390 <= m.process_after - services.now_ms() <= 410  # 0.4 s
    clock.advance(0.45)
    assert drain() == {"fail": 1}
    failed = tasks.always_fails.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED and failed.attempts == 3
    assert [e.exception_class_path for e in failed.errors] == ["builtins.RuntimeError"] * 3
    assert "boom 3" in failed.errors[2].traceback
    assert jobs.failed() == 1
    dead = Message.objects.get(id=result.id)
    # Out of its attempts, not a fatal error (an audit saw fatal_error in the admin and the UI).
    assert (dead.queue, dead.failure_reason) == ("tasks-default-dlq", "max_attempts_reached")
    assert tasks.always_fails.get_result(result.id).status == TaskResultStatus.FAILED
    # Requeue from the DLQ → READY, runs again; with the failures gone it succeeds.
    assert services.requeue("tasks-default-dlq", result.id) == 1
    assert tasks.always_fails.get_result(result.id).status == TaskResultStatus.READY
    assert drain() == {"nack": 1}  # it runs again (and fails again: always_fails)
    again = tasks.always_fails.get_result(result.id)
    assert again.attempts == 4 and len(again.errors) == 4


def test_flaky_task_succeeds_on_its_third_attempt_with_every_error_kept():
    result = tasks.flaky.enqueue("f1", 2)  # fails twice, backoff 0
    assert drain() == {"nack": 2, "ack": 1}
    done = tasks.flaky.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 3
    assert done.attempts == 3 and len(done.errors) == 2
    assert [c[1]["attempt"] for c in tasks.CALLS if c[0] == "flaky"] == [1, 2, 3]


def test_exhausted_then_requeued_task_runs_again_and_succeeds():
    result = tasks.flaky.enqueue("f2", 3)  # fails 3 times: max_attempts=3 → FAILED
    assert drain() == {"nack": 2, "fail": 1}
    assert tasks.flaky.get_result(result.id).status == TaskResultStatus.FAILED
    assert jobs.failed() == 1
    assert services.requeue("tasks-default-dlq", result.id) == 1
    assert tasks.flaky.get_result(result.id).status == TaskResultStatus.READY
    assert drain() == {"ack": 1}  # its fourth run: succeeds
    done = tasks.flaky.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 4
    assert done.attempts == 4 and len(done.errors) == 3


def test_without_retry_options_the_queue_policy_applies():
    services.configure_queue("tasks-default", max_attempts=2, backoff=[0])
    result = tasks.echo.enqueue("x")
    content = json.loads(Message.objects.get(id=result.id).content)
    content["task"] = "tests.tasksapp.tasks.not_there"
    Message.objects.filter(id=result.id).update(content=json.dumps(content))
    assert drain() == {"nack": 1, "fail": 1}  # the second attempt was the queue's last
    assert Message.objects.get(id=result.id).status == 2  # failed: the failed job moves it to the DLQ
    with pytest.raises(TaskResultDoesNotExist, match="cannot be imported"):  # a result needs its task
        backend().get_result(result.id)
    assert TaskRecord.objects.get(id=result.id).status == "FAILED"


def test_backend_options_set_the_retries_of_every_task(settings):
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["default", "other"],
                                  "OPTIONS": {"queue_prefix": "tasks-", "max_attempts": 1}}}
    result = tasks.echo.enqueue("x")
    content = json.loads(Message.objects.get(id=result.id).content)
    content["task"] = "tests.tasksapp.tasks.gone"
    Message.objects.filter(id=result.id).update(content=json.dumps(content))
    assert drain() == {"fail": 1}


def test_retry_options_on_the_decorator_itself_as_proposed_upstream(clock):
    """``forqapp.tasks.task(max_attempts=…, backoff=…)``: the framework's @task with the retry options
    of django/new-features#142 (Django 6's own @task takes none)."""
    from forqapp.tasks import task as forq_task
    from forqapp.tasks.retrying import RetryPolicyError

    t = tasks.upstream_shaped
    assert (t.queue_name, t.priority, t.module_path) == ("other", 5, "tests.tasksapp.tasks.upstream_shaped")
    tasks.BACKOFF_SEEN.clear()
    result = t.enqueue("u1")
    assert drain() == {"nack": 1}
    m = Message.objects.get(id=result.id)
    assert m.queue == "tasks-other" and m.process_after - services.now_ms() == 500  # backoff(…) = 0.5 × 1
    assert tasks.BACKOFF_SEEN == [("KeyError", 1, 1)]  # the exception, and the result with this failure
    clock.advance(0.5)
    assert drain() == {"nack": 1}
    assert Message.objects.get(id=result.id).process_after - services.now_ms() == 1000  # 0.5 × 2
    assert tasks.BACKOFF_SEEN == [("KeyError", 1, 1), ("KeyError", 2, 2)]  # every error so far
    clock.advance(1)
    assert drain() == {"fail": 1}  # max_attempts=3: no backoff asked after the last one
    assert len(tasks.BACKOFF_SEEN) == 2
    failed = t.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED and failed.attempts == 3
    assert [e.exception_class_path for e in failed.errors] == ["builtins.KeyError"] * 3
    with pytest.raises(RetryPolicyError, match="max_attempts"):
        forq_task(max_attempts=0)(_func)
    plain = forq_task(_func)  # no options: the framework's @task as is
    assert plain.module_path.endswith("._func") and not hasattr(plain.func, "forq_retries")


# --- fencing ---------------------------------------------------------------------------------


def test_a_late_finisher_cannot_overwrite_a_newer_attempt():
    result = tasks.add.enqueue(2, 2)
    first = services.claim("tasks-default", visibility_timeout=0)  # its lease is over at once
    second = services.claim("tasks-default")  # another worker takes it over
    assert first and second and first.id == second.id == result.id and second.attempts == 2
    runner = TaskRunner(backend(), "tasks-default")
    runner(first)
    assert runner.settle([(first, "ack", None)], using=services.alias()) == {"ack": 0, "lost": 1}
    assert not TaskRecord.objects.filter(id=result.id).exists()  # wrote nothing
    assert tasks.add.get_result(result.id).status == TaskResultStatus.RUNNING
    runner(second)
    assert runner.settle([(second, "ack", None)], using=services.alias()) == {"ack": 1}
    done = tasks.add.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.attempts == 2
    assert done.worker_ids[0] == "unknown"  # the first attempt's worker never reported


# --- signals ---------------------------------------------------------------------------------


def test_signals_enqueued_started_and_finished_once():
    seen: list[tuple[str, str, str]] = []

    def on(name):
        def receiver(sender, task_result, **kwargs):
            assert issubclass(sender, ForqBackend)
            seen.append((name, task_result.id, task_result.status))
        return receiver

    receivers = {task_enqueued: on("enqueued"), task_started: on("started"), task_finished: on("finished")}
    for signal, receiver in receivers.items():
        signal.connect(receiver, weak=False)
    try:
        ok = tasks.add.enqueue(1, 1)
        flaky = tasks.flaky.enqueue("s1", 1)  # one failure, then success
        drain()
    finally:
        for signal, receiver in receivers.items():
            signal.disconnect(receiver)
    assert [s for s in seen if s[1] == ok.id] == [("enqueued", ok.id, "READY"), ("started", ok.id, "RUNNING"),
                                                 ("finished", ok.id, "SUCCESSFUL")]
    flaky_events = [(n, s) for n, i, s in seen if i == flaky.id]
    assert flaky_events == [("enqueued", "READY"), ("started", "RUNNING"), ("started", "RUNNING"),
                            ("finished", "SUCCESSFUL")]


def test_a_final_failure_sends_task_finished_with_failed():
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append((task_result.status, len(task_result.errors)))

    task_finished.connect(receiver)
    try:
        tasks.flaky.enqueue("s2", 5)
        drain()
    finally:
        task_finished.disconnect(receiver)
    assert seen == [(TaskResultStatus.FAILED, 3)]


def _raising(name: str, seen: list):
    def receiver(sender, task_result, **kwargs):
        seen.append((name, task_result.id, task_result.status))
        raise RuntimeError(f"{name} receiver broke")
    return receiver


def _counting(name: str, seen: list):
    def receiver(sender, task_result, **kwargs):
        seen.append((name, task_result.id, task_result.status))
    return receiver


@pytest.mark.parametrize("signal", ["started", "finished"])
def test_a_receiver_that_raises_changes_nothing_of_the_tasks(signal, caplog):
    """A task_started or task_finished receiver that raises (a bug, a metrics backend away): each task
    still runs once and is recorded as it ended, the receivers after it still hear of every task,
    the worker goes on with the next, and the log says which receiver failed for which task."""
    seen: list = []
    broken = {"started": task_started, "finished": task_finished}[signal]
    broken.connect(_raising(signal, seen), weak=False, dispatch_uid="broken")
    task_finished.connect(_counting("finished-after", seen), weak=False, dispatch_uid="after")
    try:
        results = [tasks.add.enqueue(i, 1) for i in range(3)] + [tasks.unencodable.enqueue()]  # (fails for good)
        with caplog.at_level(logging.WARNING):
            drain()
    finally:
        broken.disconnect(dispatch_uid="broken")
        task_finished.disconnect(dispatch_uid="after")
    for i, result in enumerate(results[:3]):
        done = tasks.add.get_result(result.id)
        assert (done.status, done.return_value, done.attempts) == (TaskResultStatus.SUCCESSFUL, i + 1, 1)
    assert tasks.unencodable.get_result(results[3].id).status == TaskResultStatus.FAILED
    assert sorted(i for n, i, _ in seen if n == "finished-after") == sorted(r.id for r in results)
    assert sorted(i for n, i, _ in seen if n == signal) == sorted(r.id for r in results)
    tracebacks = [r for r in caplog.records if r.name == "django.dispatch" and r.exc_info]
    assert [str(r.exc_info[1]) for r in tracebacks] == [f"{signal} receiver broke"] * len(results)
    said = [r.getMessage() for r in caplog.records if f"a task_{signal} receiver" in r.getMessage()]
    assert sorted(next(r.id for r in results if r.id in line) for line in said) == sorted(r.id for r in results)


@pytest.fixture
def finished():
    """The task_finished signals sent meanwhile: (id, status, number of worker ids) each."""
    seen: list[tuple[str, object, int]] = []

    def receiver(sender, task_result, **kwargs):
        assert issubclass(sender, ForqBackend)
        seen.append((task_result.id, task_result.status, len(task_result.worker_ids)))

    task_finished.connect(receiver, weak=False)
    yield seen
    task_finished.disconnect(receiver)


def _killed_on_its_last_attempt(clock, t, *args):
    """Enqueue ``t``; two deliveries whose workers died (claimed, never settled, leases run out)."""
    services.configure_queue("tasks-default", max_attempts=2, backoff=[0])
    result = t.enqueue(*args)
    deliveries = []
    for attempt in (1, 2):
        d = services.claim("tasks-default", visibility_timeout=1)
        assert d is not None and d.id == result.id and d.attempts == attempt
        deliveries.append(d)
        clock.advance(1.5)  # the lease ran out: its worker was killed (kill -9)
    return result, deliveries


def test_a_task_killed_on_its_last_attempt_sends_task_finished_failed_once(clock, finished):
    """The next task worker's claim finds the attempts used up and moves the task to the DLQ
    (redrive): that worker sends task_finished once, FAILED, as get_result builds it; nothing sends
    it again (the late finisher, the jobs, later claims)."""
    import sys

    result, (_first, last) = _killed_on_its_last_attempt(clock, tasks.add, 1, 2)
    other = tasks.add.enqueue(2, 3)
    handling: list = []

    def receiver(sender, task_result, **kwargs):  # what a receiver that logs the error sees
        handling.append(sys.exc_info()[0])

    task_finished.connect(receiver, weak=False)
    try:
        assert drain() == {"ack": 1}  # the next worker: redrives the killed task, runs the other one
    finally:
        task_finished.disconnect(receiver)
    assert Message.objects.get(id=result.id).queue == "tasks-default-dlq"
    failed = tasks.add.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    # Both attempts counted though the move to the DLQ set the message's count to 0; the last one's
    # error says its worker stopped.
    assert failed.attempts == 2 and failed.worker_ids == ["unknown", "unknown"]
    assert failed.errors[-1].exception_class_path == "forqapp.tasks.running.WorkerLost"
    assert finished == [(result.id, TaskResultStatus.FAILED, 2), (other.id, TaskResultStatus.SUCCESSFUL, 1)]
    assert handling[0] is WorkerLost and handling[1] is None
    # The killed worker's late settle is fenced (lost), the jobs and later claims send nothing.
    runner = TaskRunner(backend(), "tasks-default")
    runner(last)
    assert runner.settle([(last, "ack", None)], using=services.alias()) == {"ack": 0, "lost": 1}
    jobs.stale()
    jobs.failed()
    clock.advance(5)
    assert drain() == {}
    assert [s for s in finished if s[0] == result.id] == [(result.id, TaskResultStatus.FAILED, len(failed.worker_ids))]
    assert tasks.add.get_result(result.id).status == TaskResultStatus.FAILED


def test_a_task_past_its_own_max_attempts_is_failed_not_run(clock, finished):
    """A task's own max_attempts (3, lower than its queue's 5): after three workers died during it,
    the fourth delivery is not run (it would succeed) but failed, with task_finished once."""
    result = tasks.flaky.enqueue("past-its-limit", 0)  # succeeds whenever it runs
    for attempt in (1, 2, 3):
        d = services.claim("tasks-default", visibility_timeout=1)
        assert d is not None and d.attempts == attempt
        clock.advance(1.5)  # its worker was killed
    assert drain() == {"fail": 1}
    failed = tasks.flaky.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert "past the task's max_attempts of 3" in failed.errors[-1].traceback
    assert finished == [(result.id, TaskResultStatus.FAILED, len(failed.worker_ids))]


def test_a_killed_task_whose_path_no_longer_imports_gets_no_task_finished(clock, finished):
    result, _ = _killed_on_its_last_attempt(clock, tasks.add, 1, 2)
    content = json.loads(Message.objects.get(id=result.id).content)
    content["task"] = "tests.tasksapp.tasks.not_there"
    Message.objects.filter(id=result.id).update(content=json.dumps(content))
    assert drain() == {}
    assert Message.objects.get(id=result.id).queue == "tasks-default-dlq"  # redriven all the same
    assert finished == []  # no TaskResult without its task


def test_a_killed_task_redriven_outside_a_task_worker_gets_no_task_finished(clock, finished):
    """A receive that is not a task worker's claim (the API, the SQS face, services.receive) moves
    it to the DLQ too, and sends nothing: get_result says FAILED."""
    result, _ = _killed_on_its_last_attempt(clock, tasks.add, 1, 2)
    assert services.receive("tasks-default") is None  # redriven by this receive
    assert drain() == {}
    assert finished == []
    assert tasks.add.get_result(result.id).status == TaskResultStatus.FAILED


def test_a_task_redriven_inside_an_atomic_block_is_reported_after_commit(clock, finished):
    result, _ = _killed_on_its_last_attempt(clock, tasks.add, 1, 2)
    runner = TaskRunner(backend(), "tasks-default")
    with transaction.atomic():
        redriven: list = []
        assert services.claim_many("tasks-default", 5, redriven=redriven) == []
        assert [m.id for m in redriven] == [result.id] and redriven[0].queue == "tasks-default-dlq"
        runner.on_redriven(redriven, using=services.alias())
        assert finished == []  # not before the claim commits
    assert finished == [(result.id, TaskResultStatus.FAILED, len(tasks.add.get_result(result.id).worker_ids))]


# --- 5. periodic tasks -----------------------------------------------------------------------


def test_a_schedule_of_a_task_enqueues_it_at_each_tick_and_signals(clock):
    enqueued = []

    def receiver(sender, task_result, **kwargs):
        enqueued.append((task_result.task.module_path, task_result.args, task_result.kwargs))

    info = schedules.schedule("adder", task=tasks.add, args=(40,), kwargs={"b": 2}, every=60)
    assert info.queue == "tasks-default"
    task_enqueued.connect(receiver)
    try:
        clock.advance(61)
        assert schedules.run_due() == 1
        clock.advance(60)
        assert schedules.run_due() == 1
        now_id = schedules.run_now("adder")
    finally:
        task_enqueued.disconnect(receiver)
    assert enqueued == [("tests.tasksapp.tasks.add", [40], {"b": 2})] * 3
    assert tasks.add.get_result(now_id).enqueued_at.timestamp() * 1000 == services.now_ms()  # the tick's own
    assert drain() == {"ack": 3}
    done = tasks.add.get_result(now_id)
    assert done.return_value == 42 and done.enqueued_at.timestamp() * 1000 == services.now_ms()
    assert [c for c in tasks.CALLS if c[0] == "add"] == [("add", {"a": 40, "b": 2})] * 3


def test_a_schedule_refuses_a_task_of_another_backend_or_with_a_queue():
    with pytest.raises(Exception, match="not both"):
        schedules.schedule("x", task=tasks.add, queue="q", content="c", every=60)
    with pytest.raises(TaskArgumentsError):
        schedules.schedule("x", task=tasks.add, args=(datetime.now(UTC),), every=60)


# --- 4. pruning -------------------------------------------------------------------------------


def test_results_are_pruned_after_their_retention(settings, clock):
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["default", "other"],
                                  "OPTIONS": {"queue_prefix": "tasks-", "result_retention": 3600}}}
    old = tasks.add.enqueue(1, 1)
    drain()
    TaskRecord.objects.filter(id=old.id).update(updated_at=services.now_ms() - 3_601_000)
    waiting = tasks.flaky.enqueue("p1", 1)
    drain(max_messages=1)  # a failed attempt: a READY row, its message still there
    TaskRecord.objects.filter(id=waiting.id).update(updated_at=services.now_ms() - 3_601_000)
    fresh = tasks.add.enqueue(2, 2)
    drain()
    assert jobs.run("task-results", dry_run=True) == 1
    assert jobs.run("task-results") == 1  # the old result; not the task whose message waits
    assert set(TaskRecord.objects.values_list("id", flat=True)) >= {waiting.id, fresh.id}
    assert not TaskRecord.objects.filter(id=old.id).exists()
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(old.id)


# --- the worker command ------------------------------------------------------------------------


def test_forq_worker_runs_the_task_queues_beside_consumers():
    import forqapp
    from forqapp.worker import consumers

    handled = []
    forqapp.consumer("plain-q")(lambda m: handled.append(m.content))
    try:
        forqapp.send("plain-q", "hello")
        result = tasks.add.enqueue(3, 4)
        call_command("forq_worker", "--burst", verbosity=0)
    finally:
        consumers.unregister("plain-q")
    assert handled == ["hello"]
    assert tasks.add.get_result(result.id).return_value == 7


def test_forq_worker_runs_a_forqbackend_subclass_of_the_projects_own(settings, clock):
    """Audit: forq_worker (and the task-results job, and the checks on Django 5.2) looked for
    ``forqapp.tasks`` at the start of the backend's path: a subclass in the project's own module was
    ignored ("no consumers registered"). A backend is one when its class is a ForqBackend."""
    from forqapp.tasks.discovery import uses_forq_backend

    settings.TASKS = {"default": {"BACKEND": "tests.tasksapp.backends.OwnBackend", "QUEUES": ["default", "other"],
                                  "OPTIONS": {"queue_prefix": "tasks-", "result_retention": 60}}}
    assert uses_forq_backend() and sorted(with_consumers({})) == ["tasks-default", "tasks-other"]
    result = tasks.add.enqueue(3, 4)
    call_command("forq_worker", "--burst", verbosity=0)
    assert tasks.add.get_result(result.id).return_value == 7
    clock.advance(61)
    assert jobs.task_results() == 1  # pruned after the subclass's result_retention
    settings.TASKS = {"default": {"BACKEND": "tests.tasksapp.backends.NoSuchBackend"}}
    assert not uses_forq_backend()  # a path that does not import is the framework's to report
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.compat.BaseTaskBackend"}}
    assert not uses_forq_backend()  # under forqapp.tasks, but no ForqBackend


def test_a_queue_with_a_consumer_and_tasks_is_refused():
    from django.core.exceptions import ImproperlyConfigured

    import forqapp
    from forqapp.worker import consumers

    forqapp.consumer("tasks-default")(lambda m: None)
    try:
        with pytest.raises(ImproperlyConfigured, match="tasks-default"):
            with_consumers(consumers.registry())
    finally:
        consumers.unregister("tasks-default")


def test_forq_worker_on_a_task_queues_name_points_to_its_forqapp_queue():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError) as error:
        call_command("forq_worker", "default", "--burst")
    assert "no consumer registered for default (the task queue's forqapp queue is tasks-default)" in str(error.value)
    assert "this worker knows" in str(error.value) and "tasks-other" in str(error.value)


# --- datetimes as the framework has them ------------------------------------------------------------


def test_get_result_equals_what_enqueue_returned_with_a_run_after_to_the_microsecond():
    """Django's contract (its own test_get_result): ``get_result(id) == enqueue(...)``. A
    ``run_after`` came back cut to the millisecond, so the two differed."""
    when = datetime.now(UTC).replace(microsecond=123_457) + timedelta(hours=1)
    result = tasks.add.using(run_after=when).enqueue(1, 2)
    got = backend().get_result(result.id)
    assert got == result and got.task.run_after == when
    assert Message.objects.get(id=result.id).process_after == int(when.timestamp() * 1000)  # due in ms


def test_without_use_tz_a_result_has_naive_local_datetimes_as_django_gives(settings):
    """``USE_TZ = False``: Django's own backends give ``timezone.now()``, naive local time; the
    results' datetimes were aware (UTC), and a naive ``run_after`` came back aware (unequal)."""
    settings.USE_TZ = False
    settings.TIME_ZONE = "America/New_York"  # (Django sets the process's local time to it)
    when = datetime.now().replace(microsecond=5) + timedelta(hours=2)
    later = tasks.add.using(run_after=when).enqueue(2, 2)
    assert backend().get_result(later.id) == later and backend().get_result(later.id).task.run_after == when
    result = tasks.add.enqueue(1, 1)
    assert result.enqueued_at.tzinfo is None and abs(result.enqueued_at - datetime.now()) < timedelta(minutes=1)
    drain()
    done = backend().get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    for name in ("enqueued_at", "started_at", "last_attempted_at", "finished_at"):
        value = getattr(done, name)
        assert value.tzinfo is None and abs(value - datetime.now()) < timedelta(minutes=1), name


# --- QUEUES empty: any queue name ---------------------------------------------------------------------


def test_with_queues_empty_the_worker_runs_the_task_queues_it_finds_by_their_prefix(settings, monkeypatch, caplog):
    """Django: an empty ``QUEUES`` makes any queue name valid. The worker ran 'default' alone, so a
    task enqueued to another queue stayed READY for ever. It now runs the queues with the backend's
    prefix there are at its start, and finds those made while it runs."""
    import threading

    from forqapp.tasks.discovery import queue_finder
    from forqapp.worker import runner

    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": [],
                                  "OPTIONS": {"queue_prefix": "tq-"}}}
    first = tasks.add.using(queue_name="queue-2").enqueue(1, 2)
    assert Worker(with_consumers({}), burst=True, start_jitter=0).run() == {"ack": 1}
    assert tasks.add.get_result(first.id).status == TaskResultStatus.SUCCESSFUL
    assert sorted(with_consumers({})) == ["tq-default", "tq-queue-2"]
    # A worker that runs already finds a queue made after its start.
    monkeypatch.setattr(runner, "FIND_QUEUES_S", 0.05)
    worker = Worker(with_consumers({}), start_jitter=0, find_queues=queue_finder())
    thread = threading.Thread(target=worker.run, daemon=True)
    with caplog.at_level(logging.INFO, logger="forqapp.worker"):
        thread.start()
        try:
            later = tasks.add.using(queue_name="made-later").enqueue(2, 3)
            deadline = time.monotonic() + 10
            while tasks.add.get_result(later.id).status != TaskResultStatus.SUCCESSFUL:
                assert time.monotonic() < deadline, tasks.add.get_result(later.id).status
                time.sleep(0.05)
        finally:
            worker.stop()
            thread.join(10)
    assert "tq-made-later" in worker.queues
    assert any("new task queue(s) tq-made-later" in r.getMessage() for r in caplog.records)


def test_a_task_queue_declared_in_forq_queues_keeps_its_declared_policy(settings):
    """Audit (the Message groups page's example): FORQ_QUEUES declared "tasks-emails" with
    group_concurrency alone; the first enqueue gave it ordering "due", which FORQ_QUEUES did not
    say, so forq_serve and forq_queues said the setting was not applied for ever, and each apply
    set it back to fifo until the next enqueue. A declared queue keeps its declaration, and the
    check asks for the ordering there (W066)."""
    from forqapp.management.commands.forq_queues import apply_declared_queues

    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["default", "emails"],
                                  "OPTIONS": {"queue_prefix": "tq-"}}}
    settings.FORQ_QUEUES = {"tq-emails": {"group_concurrency": 1}}
    apply_declared_queues()
    warned = [p for p in task_backends["default"].check() if p.id == "forqapp.W066"]
    assert len(warned) == 1 and "'tq-emails'" in warned[0].msg and '"ordering": "due"' in warned[0].hint
    tasks.add.using(queue_name="emails").enqueue(1, 2)
    assert services.undeclared(settings.FORQ_QUEUES) == []  # as declared, after the enqueue too
    assert services.policy("tq-emails").ordering == "fifo"
    tasks.add.enqueue(1, 2)  # a queue FORQ_QUEUES does not declare: the due order, as always
    assert services.policy("tq-default").ordering == "due"
    settings.FORQ_QUEUES = {"tq-emails": {"group_concurrency": 1, "ordering": "due"}}
    apply_declared_queues()
    assert [p for p in task_backends["default"].check() if p.id == "forqapp.W066"] == []
    tasks.add.using(queue_name="emails").enqueue(1, 2)
    assert services.undeclared(settings.FORQ_QUEUES) == [] and services.policy("tq-emails").ordering == "due"


def test_with_queues_empty_and_no_prefix_the_check_and_the_enqueue_say_what_runs(settings, caplog):
    """Without a prefix a task queue cannot be told from any other: the worker runs 'default'
    alone; the check warns (W065), and the first enqueue to another queue says so in the log."""
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": []}}
    assert [p.id for p in task_backends["default"].check()] == ["forqapp.W065"]
    with caplog.at_level(logging.WARNING, logger="forqapp.tasks"):
        tasks.add.using(queue_name="queue-2").enqueue(1, 2)
        tasks.add.using(queue_name="queue-2").enqueue(1, 2)
        tasks.add.enqueue(1, 2)
    said = [r.getMessage() for r in caplog.records if "forqapp.W065" in r.getMessage()]
    assert len(said) == 1 and "'queue-2'" in said[0]
    assert sorted(with_consumers({})) == ["default"]
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": [],
                                  "OPTIONS": {"queue_prefix": "t-"}}}
    assert task_backends["default"].check() == []
