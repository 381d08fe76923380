# ruff: noqa: S106, F811  (test passwords; the fixtures imported from test_ui_browser)
"""The Django admin in Debian's Chromium, on the real UI listener (``forq_serve``'s granian UI
process, ``project.urls_ui``, the project's settings and middleware): log in through the admin's
own form, open the dead letters, requeue and delete through Django's confirmation page; and the
login throttle's message after too many wrong passwords.

A browser, not the test client: the CSRF failure this guards against (``Referrer-Policy:
no-referrer`` → the browser sends ``Origin: null`` → 403) only happens in a real browser."""

from __future__ import annotations

import os

import pytest

from forqapp import ids, services, store
from forqapp.models import Message
from tests.test_ui_browser import CHROMIUM, browser_page, live_ui, shot, staff_user  # noqa: F401  (fixtures)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Chromium not installed at {CHROMIUM}"),
]

PASSWORD = "pw-admin-123"


@pytest.fixture
def dead_letters() -> list[str]:
    from django.db import connection

    now = services.now_ms()
    dead = ids.new_ids(6)
    rows = [store.NewMessage(m, "emails-dlq", f'{{"to": "bounce{i}@example.com"}}', now, now, now + 86_400_000)
            for i, m in enumerate(dead)]
    store.for_alias(connection.alias).insert(rows, is_dlq=True)
    return dead


def admin_login(page, password: str = PASSWORD) -> None:
    """Submit the admin's login form; the answer must not be an error page (a 403 CSRF before)."""
    page.fill("#id_username", "admin")
    page.fill("#id_password", password)
    with page.expect_navigation() as navigation:
        page.click("input[type=submit]")
    response = navigation.value
    assert response.status == 200, f"{response.status}: {page.inner_text('body')[:300]}"


def run_action(page, message_ids: list[str], action: str, confirm: str) -> None:
    """Tick rows, pick the action, "Go", then confirm on Django's intermediate page."""
    for message_id in message_ids:
        page.check(f"input.action-select[value='{message_id}']")
    page.select_option("select[name=action]", action)
    with page.expect_navigation() as navigation:
        page.click("button[name=index]")
    assert navigation.value.status == 200, page.inner_text("body")[:300]
    page.wait_for_selector("body.delete-confirmation")
    assert page.locator("body").inner_text().count("emails-dlq / ") == len(message_ids)
    with page.expect_navigation() as navigation:
        page.click(f"input[type=submit][value^='{confirm}']")
    assert navigation.value.status == 200, page.inner_text("body")[:300]  # a 403 CSRF before
    page.wait_for_selector("ul.messagelist")


def test_admin_login_and_dead_letter_actions_in_a_browser(live_ui, browser_page, staff_user, dead_letters):
    page = browser_page
    response = page.goto(live_ui + "/admin/")
    assert "/admin/login/" in page.url and response.status == 200
    admin_login(page)
    page.wait_for_selector("#site-name")
    assert "/admin/login/" not in page.url, page.content()[:2000]  # was a 403 CSRF page
    assert page.locator("a[href='/admin/forqapp/deadletter/']").count() >= 1

    page.click("a[href='/admin/forqapp/deadletter/']")
    page.wait_for_selector("#result_list")
    assert page.locator("#result_list tbody tr").count() == 6
    # Each row's real status (stored as ready, waiting for a requeue: as the API says it), under the
    # list's title; the status column's header sorts.
    statuses = page.locator("#result_list tbody td.field-message_status")
    assert statuses.all_inner_texts() == ["ready"] * 6
    assert page.inner_text("h1") == "Dead letters"
    assert page.locator("#result_list thead th.column-message_status a").count() == 1
    shot(page, "admin-dead-letters")

    # "No, take me back" on the confirmation page goes back to the list, nothing done (Django's
    # cancel.js: the page stayed put without it).
    page.check(f"input.action-select[value='{dead_letters[0]}']")
    page.select_option("select[name=action]", "requeue_messages")
    with page.expect_navigation():
        page.click("button[name=index]")
    page.wait_for_selector("body.delete-confirmation")
    page.click("a.cancel-link")
    page.wait_for_selector("#result_list")
    assert page.url.endswith("/admin/forqapp/deadletter/") and Message.objects.filter(queue="emails-dlq").count() == 6

    # Requeue two through the confirmation page: they leave the dead letters, back in "emails".
    run_action(page, dead_letters[:2], "requeue_messages", "Requeue")
    assert page.inner_text("ul.messagelist li.success") == "Requeued 2 messages."
    assert page.locator("#result_list tbody tr").count() == 4
    assert Message.objects.filter(queue="emails-dlq").count() == 4
    assert set(Message.objects.filter(queue="emails").values_list("id", flat=True)) == set(dead_letters[:2])

    # Delete one, the same way: gone from the list and from the database.
    run_action(page, dead_letters[2:3], "delete_messages", "Delete")
    assert page.inner_text("ul.messagelist li.success") == "Deleted 1 message."
    assert page.locator("#result_list tbody tr").count() == 3
    assert page.locator(f"input.action-select[value='{dead_letters[2]}']").count() == 0
    assert not Message.objects.filter(id=dead_letters[2]).exists()
    assert Message.objects.filter(queue="emails-dlq").count() == 3


def test_admin_login_is_throttled_with_a_clear_message(live_ui, browser_page, staff_user):
    from forqapp.conf import forq_settings

    page = browser_page
    page.goto(live_ui + "/admin/login/")
    for _ in range(forq_settings.FORQ_LOGIN_MAX_FAILURES):
        admin_login(page, password="wrong-password")
        page.wait_for_selector(".errornote")
        assert "Please enter the correct username and password" in page.inner_text(".errornote")
    # The right password now gets the throttle's message, not the admin.
    admin_login(page)
    page.wait_for_selector(".errornote")
    assert "Too many failed logins; try again in 15 minutes." in page.inner_text(".errornote")
    assert "/admin/login/" in page.url
    shot(page, "admin-login-throttled")


def pick_action(page, queue: str, action: str) -> None:
    """Tick ``queue``'s row, pick the action, "Go"; the answer must not be an error page."""
    page.check(f"input.action-select[value='{queue}']")
    page.select_option("select[name=action]", action)
    with page.expect_navigation() as navigation:
        page.click("button[name=index]")
    assert navigation.value.status == 200, page.inner_text("body")[:300]


def test_queue_admin_pause_purge_and_policy_form_in_a_browser(live_ui, browser_page, staff_user):
    import forqapp

    forqapp.send_many("emails", ["a", "b", "c"])
    forqapp.send("sms", "d")
    page = browser_page
    page.goto(live_ui + "/admin/")
    admin_login(page)
    page.click("a[href='/admin/forqapp/queue/']")
    page.wait_for_selector("#result_list")
    assert page.locator("#result_list tbody tr").count() == 2
    emails = page.locator("#result_list tbody tr", has=page.locator("input[value='emails']"))
    assert emails.locator("td.field-ready").inner_text() == "3"
    policy = emails.locator("td.field-policy span.forq-policy")
    assert policy.inner_text() == "the global settings" and "Max attempts: 5 (global)" in policy.get_attribute("title")

    # Pause: reversible, so no confirmation page.
    pick_action(page, "emails", "pause_queues")
    assert page.inner_text("ul.messagelist li.success") == "Paused 1 queue: emails."
    assert services.queue_info("emails").paused and not services.queue_info("sms").paused
    assert emails.locator("td.field-paused img").get_attribute("alt") == "True"
    shot(page, "admin-queues")

    # Purge: Django's confirmation page first, then every message of the queue is gone.
    pick_action(page, "emails", "purge_queues")
    page.wait_for_selector("body.delete-confirmation")
    assert "emails: 3 messages" in page.inner_text("ul.forq-purge")
    assert Message.objects.filter(queue="emails").count() == 3
    shot(page, "admin-queue-purge-confirm")
    with page.expect_navigation() as navigation:
        page.click("input[type=submit][value^='Purge']")
    assert navigation.value.status == 200, page.inner_text("body")[:300]  # a 403 CSRF before
    assert page.inner_text("ul.messagelist li.success") == "Purged 1 queue (emails): deleted 3 messages."
    assert not Message.objects.filter(queue="emails").exists()
    assert Message.objects.filter(queue="sms").count() == 1

    # The policy form: every field's error at once, on its field; nothing saved.
    page.click("#result_list a[href='/admin/forqapp/queue/emails/change/']")
    page.wait_for_selector("#id_max_attempts")
    page.fill("#id_max_attempts", "-3")
    page.fill("#id_rate", "10/x")
    with page.expect_navigation():
        page.click("input[name=_save]")
    assert "max_attempts must be an integer" in page.inner_text(".field-max_attempts .errorlist")
    assert "rate must be" in page.inner_text(".field-rate .errorlist")
    assert services.queue_info("emails").overrides == {}
    page.fill("#id_rate", "")
    # ... and saved through configure_queue.
    page.fill("#id_max_attempts", "3")
    page.fill("#id_visibility_timeout", "30")
    page.fill("#id_backoff", "1000, 5000")
    page.select_option("#id_ordering", "lifo")
    page.uncheck("#id_paused")
    shot(page, "admin-queue-form")
    with page.expect_navigation() as navigation:
        page.click("input[name=_save]")
    assert navigation.value.status == 200, page.inner_text("body")[:300]
    assert "was changed successfully" in page.inner_text("ul.messagelist li.success")
    info = services.queue_info("emails")
    assert info.overrides == {"max_attempts": 3, "visibility_timeout": 30, "backoff": [1000, 5000],
                              "ordering": "lifo"}
    assert not info.paused

    # A value configure_queue refuses: the form again, the error on its field, nothing saved.
    page.click("#result_list a[href='/admin/forqapp/queue/emails/change/']")
    page.fill("#id_visibility_timeout", "99999")
    with page.expect_navigation():
        page.click("input[name=_save]")
    error = page.locator(".form-row.field-visibility_timeout .errorlist")
    assert error.inner_text() == "visibility_timeout must be from 0 to 43200 seconds"
    assert services.queue_info("emails").overrides["visibility_timeout"] == 30


def test_schedule_admin_add_run_now_pause_and_delete_in_a_browser(live_ui, browser_page, staff_user):
    from forqapp.services import schedules

    page = browser_page
    page.goto(live_ui + "/admin/")
    admin_login(page)
    page.click("a[href='/admin/forqapp/schedule/']")
    page.wait_for_selector("#changelist")
    page.click("#content-main a.addlink[href='/admin/forqapp/schedule/add/']")
    page.wait_for_selector("#id_name")

    # A cron schedules.validate refuses: the form again, the error on its field, nothing saved.
    page.fill("#id_name", "nightly-report")
    page.fill("#id_queue", "reports")
    page.fill("#id_content", '{"report": "nightly",\n "to": "ops@example.com"}')
    page.fill("#id_cron", "61 3 * * *")
    page.select_option("#id_catch_up", "all")
    page.fill("#id_priority", "5")
    page.fill("#id_attributes", '{"kind": "report"}')
    with page.expect_navigation() as navigation:
        page.click("input[name=_save]")
    assert navigation.value.status == 200, page.inner_text("body")[:300]  # a 403 CSRF before
    assert page.inner_text(".form-row.field-cron .errorlist").startswith("cron '61 3 * * *'")
    assert schedules.list_schedules() == []
    shot(page, "admin-schedule-form-error")

    page.fill("#id_cron", "0 3 * * *")
    with page.expect_navigation():
        page.click("input[name=_save]")
    assert "was added successfully" in page.inner_text("ul.messagelist li.success")
    info = schedules.get("nightly-report")
    assert (info.queue, info.content, info.cron, info.catch_up, info.priority, info.attributes, info.paused) == (
        "reports", '{"report": "nightly",\n "to": "ops@example.com"}', "0 3 * * *", "all", 5, {"kind": "report"},
        False)
    row = page.locator("#result_list tbody tr", has=page.locator("input[value='nightly-report']"))
    assert row.locator("td.field-timing").inner_text() == "cron 0 3 * * *"
    assert "03:00:00 UTC" in row.locator("td.field-next_run").inner_text()
    assert row.locator("td.field-last_run").inner_text() == "never"
    shot(page, "admin-schedules")

    # Run now: its message is on the queue, its ticks unchanged.
    pick_action(page, "nightly-report", "run_schedules_now")
    sent = Message.objects.get(queue="reports")
    assert page.inner_text("ul.messagelist li.success") == f"Sent 1 message: nightly-report → {sent.id}."
    assert (sent.content, sent.priority, sent.attributes_dict) == (info.content, 5, {"kind": "report"})
    assert schedules.get("nightly-report").next_run_at == info.next_run_at

    # Pause: no confirmation; the list shows it paused.
    pick_action(page, "nightly-report", "pause_schedules")
    assert page.inner_text("ul.messagelist li.success") == "Paused 1 schedule: nightly-report."
    assert schedules.get("nightly-report").paused
    assert row.locator("td.field-paused img").get_attribute("alt") == "True"

    # Delete: Django's confirmation page first, then schedules.unschedule.
    pick_action(page, "nightly-report", "delete_selected")
    page.wait_for_selector("body.delete-confirmation")
    assert schedules.list_schedules() != []
    with page.expect_navigation() as navigation:
        page.click("input[type=submit]")
    assert navigation.value.status == 200, page.inner_text("body")[:300]
    assert page.inner_text("ul.messagelist li.success") == "Successfully deleted 1 schedule."
    assert schedules.list_schedules() == []
    assert Message.objects.filter(queue="reports").count() == 1  # its sent message stays


def test_queue_admin_dead_letter_queue_and_sqs_tags_in_a_browser(live_ui, browser_page, staff_user):
    """The queue's change page: its SQS tags shown as text (escaped), and the policy form's
    dead-letter queue, set to another queue and saved through configure_queue."""
    import forqapp
    from forqapp.services.queues import set_sqs_tags

    forqapp.configure_queue("parking")
    forqapp.send("emails", "a")
    set_sqs_tags("emails", {"queue": {"team": "<b>billing</b>"}, "dlq": {"env": "prod"}})
    page = browser_page
    page.goto(live_ui + "/admin/forqapp/queue/emails/change/")
    admin_login(page)
    page.wait_for_selector("#id_dead_letter_queue")
    tags = page.locator(".field-sqs_queue_tags .readonly")
    assert tags.inner_text() == "team = <b>billing</b>\ndead-letter queue: env = prod"
    assert tags.locator("b").count() == 0  # text, not markup
    assert page.input_value("#id_dead_letter_queue") == ""  # unset: the default, emails-dlq
    page.fill("#id_dead_letter_queue", "parking")
    shot(page, "admin-queue-dead-letter-queue")
    with page.expect_navigation() as navigation:
        page.click("input[name=_save]")
    assert navigation.value.status == 200, page.inner_text("body")[:300]
    assert "was changed successfully" in page.inner_text("ul.messagelist li.success")
    assert services.queue_info("emails").policy["dead_letter_queue"] == "parking"
    # A queue that does not exist: the form again, the error on its field, nothing saved.
    page.click("#result_list a[href='/admin/forqapp/queue/emails/change/']")
    page.fill("#id_dead_letter_queue", "nowhere")
    with page.expect_navigation():
        page.click("input[name=_save]")
    assert page.locator(".form-row.field-dead_letter_queue .errorlist").count() == 1
    assert services.queue_info("emails").policy["dead_letter_queue"] == "parking"


def test_admin_redrives_a_queues_dead_letters_as_a_move_task_in_a_browser(live_ui, browser_page, staff_user):
    """The queues' list: "Redrive all dead letters" on a queue, Django's confirmation page, the message
    with the move task's handle; its change page shows the move (waiting: the test's server runs no jobs)
    and cancels it behind a confirmation page; started again, the moves job (run here) completes it."""
    import forqapp
    from tests.test_dlq_moves import dead_letter, run_all

    forqapp.configure_queue("emails")
    for n in range(2):
        dead_letter("emails", f"m{n}")
    page = browser_page
    page.goto(live_ui + "/admin/forqapp/queue/")
    admin_login(page)
    page.wait_for_selector("#result_list")

    def redrive() -> None:
        page.goto(live_ui + "/admin/forqapp/queue/")
        page.check("input.action-select[value='emails']")
        page.select_option("select[name=action]", "redrive_dead_letters")
        with page.expect_navigation():
            page.click("button[name=index]")
        page.wait_for_selector("body.delete-confirmation")
        assert "emails-dlq (of emails): 2 messages" in page.inner_text("ul.forq-redrive")
        with page.expect_navigation() as navigation:
            page.click("input[type=submit][value^='Redrive']")
        assert navigation.value.status == 200, page.inner_text("body")[:300]
        page.wait_for_selector("ul.messagelist")

    redrive()
    (task,) = forqapp.list_moves("emails-dlq")
    assert f"move task {task.handle}" in page.inner_text("ul.messagelist")
    page.goto(live_ui + "/admin/forqapp/queue/emails/change/")
    moves = page.locator("table.forq-moves tbody tr")
    assert moves.count() == 1 and "waiting for the jobs process" in moves.first.inner_text()
    assert "0 of 2" in moves.first.inner_text()
    shot(page, "admin-queue-move")
    with page.expect_navigation():
        page.click("a.forq-move-cancel")
    with page.expect_navigation() as navigation:
        page.click("input[type=submit][value^='Cancel the move']")
    assert navigation.value.status == 200, page.inner_text("body")[:300]
    assert "Cancelled the move of emails-dlq: 0 message(s) moved." in page.inner_text("ul.messagelist")
    assert forqapp.move_info(task.handle).status == "CANCELLED"
    redrive()
    assert run_all() == 2
    page.goto(live_ui + "/admin/forqapp/queue/emails/change/")
    latest = page.locator("table.forq-moves tbody tr").first
    assert latest.get_attribute("data-status") == "COMPLETED" and "2 of 2" in latest.inner_text()
    assert Message.objects.filter(queue="emails").count() == 2
