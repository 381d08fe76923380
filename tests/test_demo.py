"""``manage.py forq_demo``: on a fresh database, the queues, states, dead letters, schedules and task
results it promises, made again only with --reset, refused beside other data, and shown by the
dashboard."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

import forqapp
from forqapp import services
from forqapp.models import Message
from forqapp.services import schedules
from forqapp.tasks.models import TaskRecord

pytestmark = pytest.mark.django_db(transaction=True)

EXPECTED = {  # queue: (paused, ready, delayed, in_flight, failed, dlq)
    "demo-orders": (False, 4, 1, 2, 0, 2),
    "demo-emails": (False, 3, 0, 0, 0, 0),
    "demo-webhooks": (False, 1, 0, 0, 0, 1),
    "demo-reports": (True, 2, 0, 0, 0, 0),
}


def demo(*args: str) -> str:
    out = io.StringIO()
    call_command("forq_demo", *args, stdout=out)
    return out.getvalue()


def states() -> dict[str, tuple]:
    return {q.name: (q.paused, *(q.counts[c] for c in ("ready", "delayed", "in_flight", "failed", "dlq")))
            for q in services.list_queues() if q.name.startswith("demo-")}


def test_the_demo_fills_the_pages_with_what_it_says():
    said = demo()
    assert "3 dead letter(s)" in said and "task results: ack 3, fail 1, waiting 1" in said
    assert states() == EXPECTED
    policies = {q.name: q.overrides for q in services.list_queues()}
    assert policies["demo-emails"] == {"rate": "30/m", "max_in_flight": 2, "retention": 21600.0}
    assert policies["demo-orders"]["max_attempts"] == 3 and policies["demo-orders"]["visibility_timeout"] == 120
    assert sorted(set(Message.objects.filter(queue="demo-orders").values_list("priority", flat=True))) == [0, 5, 10]
    # Real failures, with their reasons and the consumer's error.
    dead = {(m.queue, m.failure_reason, m.last_error) for m in Message.objects.filter(queue__endswith="-dlq")
            if m.queue.startswith("demo-")}
    assert dead == {
        ("demo-orders-dlq", "fatal_error", "ValueError: card declined by the issuer"),
        ("demo-orders-dlq", "fatal_error", "ValueError: card expired"),
        ("demo-webhooks-dlq", "max_attempts_reached",
         "HTTPError: 503 Service Unavailable from https://hooks.example.com/orders"),
    }
    assert {s.name: (s.queue, s.cron, s.every) for s in schedules.list_schedules()} == {
        "demo-nightly-report": ("demo-reports", "0 3 * * *", None), "demo-heartbeat": ("demo-emails", None, 600)}
    # Task results (tests/settings.py has a ForqBackend): three done, one failed, one waiting.
    results = sorted(TaskRecord.objects.values_list("task_path", "status"))
    assert results == [("forqapp.demo.tasks.add", "SUCCESSFUL")] * 3 + [("forqapp.demo.tasks.sales_report", "FAILED")]
    assert services.queue_info("tasks-default").counts["delayed"] == 1  # the waiting one

    # The dashboard shows them.
    staff = User.objects.create_user("staff", password="pw-staff-123", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(staff)
    page = client.get("/ui/")
    assert page.status_code == 200
    html = page.content.decode()
    assert all(name in html for name in EXPECTED), html


def test_run_again_it_leaves_the_demo_and_reset_makes_it_anew():
    demo()
    ids = set(Message.objects.values_list("id", flat=True))
    assert "the demo is there already" in demo()
    assert set(Message.objects.values_list("id", flat=True)) == ids and states() == EXPECTED
    assert "task results: kept from an earlier run" in demo("--reset")
    assert states() == EXPECTED and not ids & set(Message.objects.filter(queue__startswith="demo-").values_list(
        "id", flat=True))  # made anew
    assert TaskRecord.objects.count() == 4  # (no second set of results)


def test_it_refuses_a_database_with_other_data_unless_forced():
    forqapp.send("orders", "a real order")
    with pytest.raises(CommandError, match=r"holds more than the demo \(queues orders\).*--force"):
        demo()
    assert not states()
    schedules.schedule("nightly", queue="reports", content="x", cron="0 3 * * *")
    with pytest.raises(CommandError, match="schedules nightly"):
        demo()
    demo("--force")
    assert states() == EXPECTED
    assert forqapp.peek("orders").content == "a real order"  # left as it was
