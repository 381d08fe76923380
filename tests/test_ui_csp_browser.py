# ruff: noqa: S106, F811  (test passwords; the fixtures imported from test_ui_browser)
"""Every staff page in Debian's Chromium at 1366 px, on the real UI listener, under the staff pages'
Content-Security-Policy: the header is there, nothing is refused (no ``securitypolicyviolation``
event, no console error), the htmx parts work (search, paging, the Tasks filter, a confirmation
dialog), and no page scrolls sideways. Screenshots under test-artifacts/screenshots/ (1366-*.png).
"""

from __future__ import annotations

import json
import os

import pytest

from forqapp.ui import csp
from tests.test_ui_browser import CHROMIUM, data, live_ui, log_in, shot, staff_user  # noqa: F401  (fixtures)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Chromium not installed at {CHROMIUM}"),
]
playwright_sync = pytest.importorskip("playwright.sync_api", reason="pytest-playwright is not installed")

WIDTH = 1366
# Collects the policy's refusals in the page (an init script runs before the page's own and is not
# subject to its policy).
WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(e.violatedDirective + " " + (e.blockedURI || "inline") + " " + (e.sample || ""));
});
"""


@pytest.fixture
def wide():
    """A 1366 px wide page; ``wide.errors``: its console errors and failed requests."""
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs a loop
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync"])
        context = browser.new_context(viewport={"width": WIDTH, "height": 900})
        context.add_init_script(WATCH)
        context.grant_permissions(["clipboard-read", "clipboard-write"])
        page = context.new_page()
        page.set_default_timeout(10_000)
        page.errors = []
        page.on("console", lambda m: m.type == "error" and page.errors.append(m.text))
        page.on("pageerror", lambda e: page.errors.append(str(e)))
        yield page
        context.close()
        browser.close()


@pytest.fixture
def more_data(data):
    """The dashboard's data and: a policy, a paused queue, a schedule, task results, a key."""
    import forqapp
    from forqapp import services
    from forqapp.keys import service as keys
    from forqapp.models import Message, QueueDepthSample
    from forqapp.services import schedules
    from forqapp.tasks.models import TaskRecord

    services.configure_queue("payments", max_in_flight=5, rate="20/s", max_attempts=3)
    forqapp.send_many("webhooks", [f'{{"event": "order.paid", "order": {i}}}' for i in range(17)])
    forqapp.send("webhooks", '{"event": "retry"}', process_after=services.now_ms() + 120_000)
    now = services.now_ms()
    # The data fixture took each 5-minute slot's round already: these rows go in beside it.
    QueueDepthSample.objects.bulk_create(QueueDepthSample(queue="webhooks", is_dlq=False, depth=10 + (k * 7) % 23,
                                                          sampled_at=now - (287 - k) * 300_000) for k in range(288))
    services.configure_queue("sms", paused=True)
    schedules.schedule("nightly-report", queue="reports", content='{"report": "daily"}', cron="0 2 * * *")
    now = services.now_ms()
    errors = json.dumps([{"exception_class_path": "builtins.ValueError",
                          "traceback": 'Traceback (most recent call last):\n  File "tasks.py", line 9\nValueError: <b>no</b>'}])
    TaskRecord.objects.bulk_create([
        TaskRecord(id=f"01a00000-0000-7000-8000-{i:012}", backend="default", queue="tasks-default",
                   queue_name="default", task_path="shop.tasks.send_receipt" if i % 2 else "shop.tasks.rebuild_search_index",
                   status="SUCCESSFUL" if i % 3 else "FAILED", content='{"call": {"args": [42], "kwargs": {"lang": "en"}}}',
                   return_value='{"sent": true}' if i % 3 else None, errors=errors if i % 3 == 0 else "[]",
                   worker_ids='["host-1:4242"]', enqueued_at=now - 60_000 * i, started_at=now - 60_000 * i + 50,
                   finished_at=now - 60_000 * i + 900, updated_at=now - 60_000 * i + 900)
        for i in range(1, 8)])
    Message.objects.filter(queue="emails-dlq").update(failure_reason="max_attempts_reached",
                                                      last_error="SMTP 550: mailbox unavailable")
    keys.create("spark-reader", ["emails:consume", "payments:produce,consume"], actor="admin", via="test")
    return data


def check(page, url: str, name: str) -> None:
    """``url`` answered with the policy, nothing refused, nothing wider than the window."""
    response = page.goto(url)
    assert response is not None and response.status < 400, (url, response and response.status)
    assert response.headers.get("content-security-policy") == csp.POLICY, url
    settle(page, url, name)


def settle(page, url: str, name: str) -> None:
    page.wait_for_load_state("networkidle")
    assert page.evaluate("window.__csp") == [], (url, page.evaluate("window.__csp"))
    assert page.errors == [], (url, page.errors)
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH, (url, "scrolls sideways")
    assert page.evaluate("document.querySelectorAll('style').length") == 0, (url, "an inline <style>")
    shot(page, f"1366-{name}")


def test_every_staff_page_works_under_the_policy_at_1366_px(live_ui, wide, staff_user, more_data):
    page = wide
    log_in(page, live_ui + "/")
    page.wait_for_selector("#overview")
    check(page, live_ui + "/", "dashboard")
    assert page.locator("[data-testid=dlq-row]").count() == 1

    # htmx under the policy: the search narrows the table (and the refresh keeps it).
    page.fill("input[name=q]", "pay")
    playwright_sync.expect(page.locator("table.queues tbody tr")).to_have_count(1)  # (no wait_for_function: it evals)
    assert "q=pay" in page.url
    page.select_option("select[name=sort]", "name")
    page.wait_for_url("**sort=name**")
    settle(page, page.url, "dashboard-search")

    for path, name in [("/queues/emails/", "queue"), ("/queues/payments/", "queue-limits"),
                       ("/queues/emails-dlq/", "dlq"), ("/schedules/", "schedules"), ("/tasks/", "tasks"),
                       ("/tasks/01a00000-0000-7000-8000-000000000003/", "task"), ("/keys/", "keys")]:
        check(page, live_ui + path, name)

    # A key created from the page; its token copied with the Copy button (forq.js).
    page.goto(live_ui + "/keys/")
    page.fill("[data-testid=key-name]", "ingest")
    page.fill("[data-testid=key-grants]", "orders:produce")
    page.click("[data-testid=create-key]")
    page.wait_for_selector("[data-testid=issued-key]")
    page.click("[data-testid=copy-token]")
    playwright_sync.expect(page.locator("[data-testid=copy-token]")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == page.inner_text("[data-testid=token]")
    settle(page, page.url, "keys-issued")

    # A DLQ row opened, and the confirmation dialog (forq.js) under the policy.
    page.goto(live_ui + "/queues/emails-dlq/")
    page.locator("tbody.msg button.link").first.click()
    page.wait_for_selector("pre.content")
    assert "<script>alert(1)</script>" in page.inner_text("pre.content")
    page.locator("tbody.msg").first.locator("button.danger").click()
    page.wait_for_selector("#confirm-dialog[open]")
    page.click("#confirm-dialog button[value=cancel]")
    settle(page, page.url, "dlq-open")

    # The Tasks page's filter, by htmx.
    page.goto(live_ui + "/tasks/")
    page.click("[data-testid=status-filter] >> text=Failed")
    page.wait_for_url("**status=failed**")
    assert set(page.locator("[data-testid=task-status]").all_inner_texts()) == {"failed"}
    settle(page, page.url, "tasks-failed")

    # The Django admin, served by the same listener, under the same policy.
    for path, name in [("/admin/", "admin"), ("/admin/forqapp/queue/", "admin-queues"),
                       ("/admin/forqapp/queue/payments/change/", "admin-queue"),
                       ("/admin/forqapp/message/", "admin-messages"), ("/admin/forqapp/deadletter/", "admin-dlq"),
                       ("/admin/forqapp/schedule/", "admin-schedules"), ("/admin/forqapp/taskrecord/", "admin-tasks"),
                       ("/admin/forqapp/apikey/", "admin-keys"), ("/admin/forqapp/apikey/add/", "admin-key-add")]:
        check(page, live_ui + path, name)

    # The admin's confirmations of what is not a deletion: under the policy, their button in the
    # admin's plain colours, not the red of a deletion's (a rule in admin.css, not an inline style).
    red = "rgb(186, 33, 33)"
    for path, action, name in [("/admin/forqapp/deadletter/", "requeue_messages", "admin-requeue"),
                               ("/admin/forqapp/queue/?q=emails", "redrive_dead_letters", "admin-redrive")]:
        page.goto(live_ui + path)
        page.locator("#result_list input.action-select").first.check()
        page.select_option("select[name=action]", action)
        page.click("button[name=index]")
        page.wait_for_selector("input[type=submit].not-destructive")
        settle(page, page.url, name)
        background = page.eval_on_selector("input[type=submit].not-destructive",
                                           "e => getComputedStyle(e).backgroundColor")
        assert background != red, (name, background)

    # An action's address opened as a page says so; logout/ opened as a page offers its button.
    for path, name in [("/queues/emails/pause/", "not-a-page"), ("/logout/", "logout-page")]:
        response = page.goto(live_ui + path)
        assert response is not None and response.status == 405, (path, response and response.status)
        page.wait_for_load_state("networkidle")
        assert [e for e in page.errors if "status of 405" not in e] == [], page.errors  # (Chromium logs the 405)
        page.errors.clear()
        settle(page, page.url, name)
    page.click("[data-testid=log-out]")
    page.wait_for_url("**/login/")
    assert page.goto(live_ui + "/").url.startswith(live_ui + "/login/?next=")


def test_the_login_page_and_a_logged_out_admin_work_under_the_policy(live_ui, wide, staff_user):
    page = wide
    check(page, live_ui + "/login/", "login")
    check(page, live_ui + "/admin/login/", "admin-login")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "pw-admin-123")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    settle(page, page.url, "admin-after-login")
