"""The Tasks pages of the HTMX UI (the task results, newest first, filtered and paged; one result in
full) and a tasks queue's retry policy as the ForqBackend applies it. The browser checks are in
tests/test_ui_csp_browser.py."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from forqapp import services
from forqapp.tasks import browse
from forqapp.tasks.models import TaskRecord
from tests.conftest import HX
from tests.tasksapp import tasks
from tests.test_tasks_admin import run_two

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def results():
    """A successful task, a failed one (in its DLQ), one waiting (no row: it never ran)."""
    ran = run_two("ui-f")
    return {**ran, "waiting": tasks.add.enqueue(5, 6).id}


def test_the_tasks_page_lists_results_with_their_status(staff_client, results):
    page = staff_client.get("/ui/tasks/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'href="/ui/tasks/">Tasks</a>' in html  # in the navigation
    ok_row = html.split(f'id="t-{results["ok"]}"')[1].split("</tr>")[0]
    assert "tests.tasksapp.tasks.add" in ok_row and 'data-testid="task-status">successful<' in ok_row
    failed_row = html.split(f'id="t-{results["failed"]}"')[1].split("</tr>")[0]
    assert 'data-testid="task-status">failed<' in failed_row and "tests.tasksapp.tasks.flaky" in failed_row
    assert results["waiting"] not in html  # no result yet: its message is on the queue's page
    only_failed = staff_client.get("/ui/tasks/?status=failed", **HX).content.decode()
    assert results["failed"] in only_failed and results["ok"] not in only_failed
    assert "<!doctype html>" not in only_failed


def test_the_tasks_page_pages_by_keyset(staff_client):
    now = services.now_ms()
    ids = [f"01a00000-0000-7000-8000-{i:012}" for i in range(60)]
    TaskRecord.objects.bulk_create(
        TaskRecord(id=i, backend="default", queue="tasks-default", queue_name="default", task_path="m.t",
                   status="SUCCESSFUL", content='{"call": {"args": [], "kwargs": {}}}', updated_at=now - n)
        for n, i in enumerate(ids))
    first = staff_client.get("/ui/tasks/").content.decode()
    assert first.count('data-testid="task-row"') == browse.PAGE_SIZE
    older = first.split('data-testid="older" href="')[1].split('"')[0].replace("&amp;", "&")
    second = staff_client.get(older).content.decode()
    shown = [part.split('"')[0] for part in second.split('<tr id="t-')[1:]]
    assert shown == ids[browse.PAGE_SIZE:]
    assert staff_client.get("/ui/tasks/?before=junk").status_code == 200


def test_a_task_result_in_full(staff_client, results):
    html = staff_client.get(f"/ui/tasks/{results['failed']}/").content.decode()
    assert 'data-testid="task-status">failed<' in html
    assert html.count("Attempt ") == 3 and "builtins.ValueError" in html and "attempt 3 of ui-f fails" in html
    assert 'data-testid="attempts">3<' in html
    assert "tasks-default-dlq" in html.split('data-testid="message-at"')[1].split("</dd>")[0]
    ok = staff_client.get(f"/ui/tasks/{results['ok']}/").content.decode()
    assert 'data-testid="return-value">3<' in ok and "gone (done)" in ok
    assert staff_client.get("/ui/tasks/not-an-id/").status_code == 404
    assert staff_client.get("/ui/tasks/01a00000-0000-7000-8000-000000000000/").status_code == 404


def test_the_tasks_pages_need_the_task_results_view_permission(db):
    user = User.objects.create_user("clerk", password="pw-clerk-123", is_staff=True)
    client = Client()
    client.force_login(user)
    assert client.get("/ui/tasks/").status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_taskrecord"))
    assert client.get("/ui/tasks/").status_code == 200


def test_a_tasks_queue_shows_the_retries_the_backend_applies(staff_client, settings):
    services.send("tasks-default", "{}")
    plain = staff_client.get("/ui/queues/tasks-default/").content.decode()
    assert 'data-testid="source"' not in plain  # the backend sets nothing: the queue's policy
    assert "retry with the queue&#x27;s max attempts and backoff" in plain
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["default", "other"],
                                  "OPTIONS": {"queue_prefix": "tasks-", "max_attempts": 3, "backoff": [1, 10, 60]}}}
    html = staff_client.get("/ui/queues/tasks-default/").content.decode()
    attempts = html.split('data-field="max_attempts"')[1].split("</div>")[0]
    assert "<dd>3 " in attempts and "tasks backend &#x27;default&#x27;" in attempts
    backoff = html.split('data-field="backoff"')[1].split("</div>")[0]
    assert "1 s, 10 s, 1 min (then every 1 min)" in backoff and 'data-testid="source"' in backoff
    other = staff_client.get("/ui/queues/emails/").content.decode()  # not a tasks queue
    assert 'data-testid="source"' not in other and 'data-testid="task-note"' not in other
