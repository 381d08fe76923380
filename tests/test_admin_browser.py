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
    shot(page, "admin-dead-letters")

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
