"""The task results' admin (issue 14 point 4): the list (filters, search by id), the detail page,
"retry" (from the DLQ, or enqueued anew once the dead letter is gone) and "delete" (behind its
confirmation page), staff only, task output escaped. One view test per action; the browser test is
tests/test_tasks_browser.py."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import User

from forqapp import services
from forqapp.models import Message
from forqapp.tasks.compat import TaskResultDoesNotExist, TaskResultStatus
from forqapp.tasks.models import TaskRecord
from forqapp.worker import jobs
from forqapp.worker.runner import Worker
from tests.tasksapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)
URL = "/admin/forqapp/taskrecord/"


def drain() -> dict[str, int]:
    from forqapp.tasks.discovery import with_consumers

    return Worker(with_consumers({}), concurrency=2, prefetch=50, burst=True).run()


def run_two(key: str) -> dict[str, str]:
    """Two tasks run by a worker: ``ok`` succeeds, ``failed`` (``flaky(key, 3)``) fails 3 times
    (max_attempts=3) and lands in tasks-default-dlq. Their ids."""
    tasks._counts.clear()
    ok = tasks.add.enqueue(1, 2)
    failed = tasks.flaky.enqueue(key, 3)
    drain()
    assert jobs.failed() == 1  # → tasks-default-dlq
    return {"ok": ok.id, "failed": failed.id}


@pytest.fixture
def results():
    """A successful task and a failed one in the DLQ."""
    return run_two("admin-f")


def test_the_list_filters_by_status_task_and_queue_and_searches_by_id(staff_client, results):
    page = staff_client.get(URL)
    assert page.status_code == 200
    body = page.content.decode()
    assert results["ok"] in body and results["failed"] in body
    only_failed = staff_client.get(URL, {"status": "FAILED"}).content.decode()
    assert results["failed"] in only_failed and results["ok"] not in only_failed
    by_task = staff_client.get(URL, {"task_path": "tests.tasksapp.tasks.add"}).content.decode()
    assert results["ok"] in by_task and results["failed"] not in by_task
    by_queue = staff_client.get(URL, {"queue_name": "default"}).content.decode()
    assert results["ok"] in by_queue
    found = staff_client.get(URL, {"q": results["failed"]}).content.decode()
    assert results["failed"] in found and results["ok"] not in found
    detail = staff_client.get(f"{URL}{results['failed']}/change/").content.decode()
    assert "attempt 3: builtins.ValueError" in detail and "attempt 3 of admin-f fails" in detail


def test_task_output_is_escaped(staff_client):
    result = tasks.echo.enqueue("<script>alert(1)</script>")
    drain()
    body = staff_client.get(f"{URL}{result.id}/change/").content.decode()
    assert "<script>alert(1)</script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_the_admin_is_staff_only(client, results):
    assert client.get(URL).status_code == 302  # to the login page
    User.objects.create_user("plain", password="pw", is_staff=False)
    client.login(username="plain", password="pw")
    assert client.get(URL).status_code == 302


def test_retry_action_requeues_a_failed_task_from_the_dlq(staff_client, results):
    response = staff_client.post(URL, {"action": "retry_tasks", ACTION_CHECKBOX_NAME: [results["failed"], results["ok"]]},
                          follow=True)
    assert response.status_code == 200
    text = response.content.decode()
    assert "Requeued 1 task from the dead-letter queue." in text
    assert "Skipped 1 task that did not fail" in text
    message = Message.objects.get(id=results["failed"])
    assert (message.queue, message.is_dlq, message.status, message.attempts) == ("tasks-default", False, 0, 0)
    assert TaskRecord.objects.get(id=results["failed"]).status == "READY"
    assert tasks.flaky.get_result(results["failed"]).status == TaskResultStatus.READY
    assert drain() == {"ack": 1}  # its fourth run succeeds
    assert tasks.flaky.get_result(results["failed"]).status == TaskResultStatus.SUCCESSFUL


def test_retry_and_delete_of_a_failed_task_the_failed_job_has_not_moved_yet(staff_client):
    """Out of attempts, a task is FAILED at once, but its message waits in its queue for the failed
    job (minutes): "retry" and "delete" act on it then too."""
    tasks._counts.clear()
    first = tasks.flaky.enqueue("admin-early-1", 3)
    second = tasks.flaky.enqueue("admin-early-2", 3)
    assert drain() == {"nack": 4, "fail": 2}
    assert Message.objects.filter(queue="tasks-default", status=2, is_dlq=False).count() == 2  # not moved yet
    assert tasks.flaky.get_result(first.id).status == TaskResultStatus.FAILED
    response = staff_client.post(URL, {"action": "retry_tasks", ACTION_CHECKBOX_NAME: [first.id]}, follow=True)
    assert "Requeued 1 task from the dead-letter queue." in response.content.decode()
    message = Message.objects.get(id=first.id)
    assert (message.queue, message.is_dlq, message.status) == ("tasks-default", False, 0)
    assert tasks.flaky.get_result(first.id).status == TaskResultStatus.READY
    done = staff_client.post(URL, {"action": "delete_tasks", ACTION_CHECKBOX_NAME: [second.id], "post": "yes"}, follow=True)
    assert "Deleted 1 task result and 1 dead letter." in done.content.decode()
    assert not Message.objects.filter(id=second.id).exists()
    with pytest.raises(TaskResultDoesNotExist):
        tasks.flaky.get_result(second.id)
    assert drain() == {"ack": 1}  # the retried one's fourth run succeeds
    assert tasks.flaky.get_result(first.id).status == TaskResultStatus.SUCCESSFUL


def test_retry_of_a_failed_task_whose_dead_letter_is_gone_enqueues_it_anew(staff_client, results):
    services.delete_dead("tasks-default-dlq", results["failed"])
    response = staff_client.post(URL, {"action": "retry_tasks", ACTION_CHECKBOX_NAME: [results["failed"]]}, follow=True)
    assert "Enqueued 1 task again, with new ids" in response.content.decode()
    (fresh,) = Message.objects.filter(queue="tasks-default")
    assert fresh.id != results["failed"] and '"task":"tests.tasksapp.tasks.flaky"' in fresh.content


def test_delete_action_asks_first_then_deletes_results_and_dead_letters(staff_client, results):
    ids = [results["failed"], results["ok"]]
    confirm = staff_client.post(URL, {"action": "delete_tasks", ACTION_CHECKBOX_NAME: ids})
    assert confirm.status_code == 200 and "Are you sure?" in confirm.content.decode()
    assert "delete-confirmation" in confirm.content.decode()
    assert TaskRecord.objects.count() == 2  # nothing deleted yet
    done = staff_client.post(URL, {"action": "delete_tasks", ACTION_CHECKBOX_NAME: ids, "post": "yes"}, follow=True)
    assert "Deleted 2 task results and 1 dead letter." in done.content.decode()
    assert not TaskRecord.objects.exists()
    assert not Message.objects.filter(id=results["failed"]).exists()


def test_the_default_delete_selected_and_add_are_not_offered(staff_client, results):
    body = staff_client.get(URL).content.decode()
    assert 'value="delete_selected"' not in body and 'value="delete_tasks"' in body
    assert staff_client.get(URL + "add/").status_code == 403


def test_the_result_pages_own_delete_takes_its_dead_letter_too(staff_client, results):
    """Audit: Delete on a failed task's own page deleted the result and left its dead letter in the
    DLQ (get_result still answered FAILED, and no page could retry it any more)."""
    failed = results["failed"]
    page = staff_client.get(f"{URL}{failed}/delete/")
    assert page.status_code == 200
    assert f"Dead letter: tasks-default-dlq / {failed}" in page.content.decode()  # it says so first
    done = staff_client.post(f"{URL}{failed}/delete/", {"post": "yes"}, follow=True)
    assert done.status_code == 200 and "was deleted successfully" in done.content.decode()
    assert not TaskRecord.objects.filter(id=failed).exists()
    assert not Message.objects.filter(id=failed).exists()
    with pytest.raises(TaskResultDoesNotExist):
        tasks.flaky.get_result(failed)


def test_a_result_page_offers_no_save(staff_client, results):
    """Every field is read-only: Save only wrote a "changed" history entry."""
    body = staff_client.get(f"{URL}{results['ok']}/change/").content.decode()
    assert 'name="_save"' not in body and 'name="_continue"' not in body
    assert "Delete" in body  # the page's own delete stays
    from django.contrib.admin.models import LogEntry

    staff_client.post(f"{URL}{results['ok']}/change/", {"_save": "Save"})  # posted by hand: writes nothing
    assert not LogEntry.objects.exists() and TaskRecord.objects.filter(id=results["ok"]).exists()
