# ruff: noqa: F811  (the fixtures imported from test_ui_browser)
"""The task results' admin in Debian's Chromium, on the real UI listener (``forq_serve``): log in
through the admin's form, filter the failed tasks, retry one, delete one through the confirmation
page — real form POSTs with Django's CSRF token, as a browser sends them."""

from __future__ import annotations

import os

import pytest

from forqapp.models import Message
from forqapp.tasks.models import TaskRecord
from forqapp.worker import jobs
from forqapp.worker.runner import Worker
from tests.tasksapp import tasks
from tests.test_admin_browser import admin_login
from tests.test_ui_browser import CHROMIUM, browser_page, live_ui, shot, staff_user  # noqa: F401  (fixtures)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Chromium not installed at {CHROMIUM}"),
]


def test_task_results_admin_retry_and_delete_in_a_browser(live_ui, browser_page, staff_user):
    from forqapp.tasks.discovery import with_consumers

    tasks._counts.clear()
    ok = tasks.add.enqueue(20, 22)
    failed = [tasks.flaky.enqueue(f"browser-{i}", 3).id for i in range(3)]  # 3 failures each: FAILED
    Worker(with_consumers({}), concurrency=2, prefetch=20, burst=True).run()
    assert jobs.failed() == 3

    page = browser_page
    page.goto(live_ui + "/admin/")
    admin_login(page)
    page.goto(live_ui + "/admin/forqapp/taskrecord/?status=FAILED")
    page.wait_for_selector("#result_list")
    assert page.locator("#result_list tbody tr").count() == 3
    assert ok.id not in page.inner_text("#result_list")
    shot(page, "admin-task-results")

    # Retry one: it leaves the DLQ, READY again.
    page.check(f"input.action-select[value='{failed[0]}']")
    page.select_option("select[name=action]", "retry_tasks")
    with page.expect_navigation() as navigation:
        page.click("button[name=index]")
    assert navigation.value.status == 200, page.inner_text("body")[:300]  # a 403 CSRF before
    assert page.inner_text("ul.messagelist li.success") == "Requeued 1 task from the dead-letter queue."
    message = Message.objects.get(id=failed[0])
    assert (message.queue, message.is_dlq) == ("tasks-default", False)

    # Delete the other through Django's confirmation page.
    page.goto(live_ui + "/admin/forqapp/taskrecord/")
    page.check(f"input.action-select[value='{failed[1]}']")
    page.select_option("select[name=action]", "delete_tasks")
    with page.expect_navigation() as navigation:
        page.click("button[name=index]")
    assert navigation.value.status == 200
    page.wait_for_selector("body.delete-confirmation")
    assert f"tasks-default / {failed[1]}" in page.inner_text("body")
    assert TaskRecord.objects.filter(id=failed[1]).exists()  # not before the confirmation
    with page.expect_navigation() as navigation:
        page.click("input[type=submit][value^='Delete']")
    assert navigation.value.status == 200, page.inner_text("body")[:300]
    assert page.inner_text("ul.messagelist li.success") == "Deleted 1 task result and 1 dead letter."
    assert not TaskRecord.objects.filter(id=failed[1]).exists()
    assert not Message.objects.filter(id=failed[1]).exists()
    assert page.locator(f"input.action-select[value='{failed[1]}']").count() == 0

    # The third from its own page: read-only (no Save), and its Delete takes the dead letter too
    # (it stayed in the DLQ before).
    page.goto(live_ui + f"/admin/forqapp/taskrecord/{failed[2]}/change/")
    page.wait_for_selector("a.deletelink")
    assert page.locator("input[name=_save]").count() == 0
    with page.expect_navigation():
        page.click("a.deletelink")
    with page.expect_navigation() as navigation:
        page.click("input[type=submit]")
    assert navigation.value.status == 200, page.inner_text("body")[:300]
    assert "was deleted successfully" in page.inner_text("ul.messagelist li.success")
    assert not TaskRecord.objects.filter(id=failed[2]).exists()
    assert not Message.objects.filter(id=failed[2]).exists()
