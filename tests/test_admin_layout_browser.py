# ruff: noqa: S106, F811  (test passwords; the fixtures imported from test_ui_browser)
"""The Django admin's lists at 1366 px in Debian's Chromium, on the real UI listener: messages, dead
letters, queues, API keys and task results fit the window (no sideways scrolling, nothing cut
off), and the copy buttons of a new key's secret copy it."""

from __future__ import annotations

import os

import pytest
from django.db import connection

import forqapp
from forqapp import ids, services, store
from forqapp.keys import service as key_service
from forqapp.models import Message
from forqapp.worker import jobs
from forqapp.worker.runner import Worker
from tests.tasksapp import tasks
from tests.test_ui_browser import CHROMIUM, browser_page, live_ui, shot, staff_user  # noqa: F401  (fixtures)

from .test_admin_browser import admin_login

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Chromium not installed at {CHROMIUM}"),
]

WIDTH = 1366
LONG_ERROR = "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='mail.example.com', port=443): " \
             "Max retries exceeded with url: /v3/messages (Caused by NewConnectionError('Failed to establish " \
             "a new connection: [Errno 111] Connection refused'))"


@pytest.fixture
def busy() -> dict[str, list[str]]:
    """Queues with long policies, messages in every state, dead letters with their failure reason and a
    long error, a few API keys and task results: what a living installation's admin lists show."""
    from forqapp.tasks.discovery import with_consumers

    services.configure_queue("emails", max_attempts=3, visibility_timeout=30, backoff=[1000, 5000, 30000],
                             retention=3 * 86400, rate="10/s", max_in_flight=4, ordering="lifo", dedup_window=600)
    services.configure_queue("payments.eu-west.settlements-nightly", max_attempts="unlimited",
                             backoff={"base_ms": 1000, "max_ms": 300000, "jitter": 0.2})
    forqapp.send_many("emails", [f'{{"to": "user{i}@example.com"}}' for i in range(12)])
    forqapp.send("emails", "later", delay=3600)
    services.claim_many("emails", 2)
    forqapp.send_many("payments.eu-west.settlements-nightly", ["p"] * 3)
    forqapp.send("sms", "hi")
    forqapp.send("x" * 80, "a queue name of 80 characters, without a . - or _ to wrap at")
    now = services.now_ms()
    dead = ids.new_ids(6)
    store.for_alias(connection.alias).insert(
        [store.NewMessage(m, "emails-dlq", f'{{"to": "bounce{i}@example.com"}}', now, now, now + 86_400_000)
         for i, m in enumerate(dead)], is_dlq=True)
    Message.objects.filter(id__in=dead[:3]).update(failure_reason="max_attempts_reached", last_error=LONG_ERROR)
    Message.objects.filter(id__in=dead[3:]).update(failure_reason="fatal_error",
                                                  last_error="forqapp.errors.FatalError: no recipient")
    for name, grants in [("orders-producer", ["orders:produce"]),
                         ("reporting-readonly-everything", ["*:read", "payments.*+dlq:consume,read"]),
                         ("ops", ["*:produce,consume,manage,read"])]:
        key_service.create(name, grants, actor="admin", via="cli")
    tasks._counts.clear()
    tasks.add.enqueue(1, 2)
    tasks.flaky.enqueue("layout", 3)  # fails 3 times: FAILED, its dead letter in tasks-default-dlq
    Worker(with_consumers({}), concurrency=2, prefetch=20, burst=True).run()
    jobs.failed()
    return {"dead": dead}


LISTS = [("messages", "/admin/forqapp/message/"), ("dead-letters", "/admin/forqapp/deadletter/"),
         ("queues", "/admin/forqapp/queue/"), ("api-keys", "/admin/forqapp/apikey/"),
         ("task-results", "/admin/forqapp/taskrecord/")]


def overflow(page) -> dict[str, int]:
    """How far the page and the list's table reach: the window, and the box that holds the table
    (Django's ``.results``, which scrolls sideways what does not fit, hiding it)."""
    return page.evaluate("""() => {
        const table = document.querySelector('#result_list');
        const box = table.parentElement;
        return {
            window: window.innerWidth, page: document.documentElement.scrollWidth,
            box: Math.ceil(box.getBoundingClientRect().right), table: Math.ceil(table.getBoundingClientRect().right),
            boxScroll: box.scrollWidth, boxWidth: box.clientWidth,
        };
    }""")


def fits(sizes: dict[str, int]) -> bool:
    return (sizes["page"] <= sizes["window"] and sizes["table"] <= sizes["box"] <= sizes["window"]
            and sizes["boxScroll"] <= sizes["boxWidth"])


def test_the_admin_lists_fit_1366_px(live_ui, browser_page, staff_user, busy):
    page = browser_page
    page.set_viewport_size({"width": WIDTH, "height": 900})
    page.goto(live_ui + "/admin/")
    admin_login(page)
    too_wide = {}
    for name, url in LISTS:
        page.goto(live_ui + url)
        page.wait_for_selector("#result_list tbody tr")
        shot(page, f"admin-1366-{name}")
        sizes = overflow(page)
        if not fits(sizes):
            too_wide[name] = sizes
    assert not too_wide
    # A dead letter's page: its content and its whole error, within the window.
    page.goto(live_ui + f"/admin/forqapp/deadletter/{busy['dead'][0]}/change/")
    page.wait_for_selector(".field-last_error")
    assert LONG_ERROR in page.inner_text(".field-last_error")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= WIDTH
    shot(page, "admin-1366-dead-letter")


def clipboard(page) -> str:
    return page.evaluate("() => navigator.clipboard.readText()")


def test_the_admin_key_form_is_full_width_and_the_new_secret_copies(live_ui, browser_page, staff_user):
    page = browser_page
    page.set_viewport_size({"width": WIDTH, "height": 900})
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_ui)
    page.goto(live_ui + "/admin/")
    admin_login(page)
    page.goto(live_ui + "/admin/forqapp/apikey/add/")
    # Full-width fields: each placeholder reads whole (no field narrower than its placeholder).
    for field in ("#id_name", "#id_grants_text", "#id_expires"):
        box = page.locator(field).bounding_box()
        assert box["width"] >= 400, (field, box)
        assert page.evaluate(f"""() => {{ const f = document.querySelector('{field}');
            return f.scrollWidth <= f.clientWidth; }}""")
    assert page.get_attribute("#id_expires", "placeholder") == "90d, 12h, 30m or 2027-01-01 00:00 (empty: never)"
    shot(page, "admin-1366-api-key-add")
    page.fill("#id_name", "copy-me")
    page.fill("#id_grants_text", "orders:produce")
    with page.expect_navigation():
        page.click("input[name=_save]")
    page.wait_for_selector("[data-testid=issued-key]")
    token = page.inner_text("[data-testid=token]")
    secret = page.inner_text("[data-testid=secret]")
    assert token.endswith("." + secret)
    page.click("[data-testid=copy-token]")
    page.wait_for_function("() => document.querySelector('[data-testid=copy-token]').textContent === 'Copied'")
    assert clipboard(page) == token
    page.click("[data-testid=copy-secret]")
    page.wait_for_function("() => document.querySelector('[data-testid=copy-secret]').textContent === 'Copied'")
    assert clipboard(page) == secret
    assert page.evaluate("() => document.documentElement.scrollWidth") <= WIDTH
    shot(page, "admin-1366-api-key-created")

