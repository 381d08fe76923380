# ruff: noqa: S106  (test passwords)
"""The UI in Debian's Chromium (pytest-playwright), on the real UI listener as staff use it: log
in, dashboard, DLQ, requeue all (a move task), delete one with confirmation; screenshots (light and dark) under
test-artifacts/screenshots/.

Its fixtures serve tests/test_admin_browser.py too: ``live_ui`` is the real UI listener
(``forq_serve``'s granian UI process with the project's settings), ``staff_user`` a superuser that
process can log in."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from forqapp.ui import freshness

from .conftest import LiveAPI, free_port, start_server, stop_server

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "test-artifacts" / "screenshots"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Chromium not installed at {CHROMIUM} "
                       "(apt-get install -y chromium)"),
]
playwright_sync = pytest.importorskip("playwright.sync_api", reason="pytest-playwright is not installed")


@pytest.fixture
def browser_page():
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs a loop
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"],
        )
        context = browser.new_context(viewport={"width": 1280, "height": 860})
        page = context.new_page()
        page.set_default_timeout(10_000)
        yield page
        context.close()
        browser.close()


class LiveUI(str):
    """The UI listener's URL; ``.api``: the same server's API listener (tests/conftest.py's ``LiveAPI``)."""

    api: LiveAPI


@pytest.fixture(scope="module")
def live_ui(django_db_setup, django_db_blocker):
    """``forq_serve`` with its UI listener on a free port, on the test database; yields its URL
    (a :class:`LiveUI`: its API too)."""
    import httpx

    ui_port = free_port()
    server = start_server({"FORQ_UI_ADDR": f"127.0.0.1:{ui_port}"}, args=())
    url = f"http://127.0.0.1:{ui_port}"
    try:
        deadline = time.monotonic() + 30  # the API answered; the UI process starts alongside it
        while True:
            try:
                if httpx.get(url + "/admin/login/", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the UI listener did not answer within 30 s") from None
                time.sleep(0.1)
        live = LiveUI(url)
        live.api = server
        yield live
    finally:
        stop_server(server)
        server.proc.stdout.close()  # the server's output pipe (a ResourceWarning otherwise)


@pytest.fixture
def staff_user():
    """The superuser "admin" / "pw-admin-123", hashed with a hasher the server's settings know (the
    tests' own settings use MD5, which the project's settings do not accept)."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher
    from django.contrib.auth.models import User

    return User.objects.create(username="admin", is_staff=True, is_superuser=True,
                               password=PBKDF2PasswordHasher().encode("pw-admin-123", "forqsalt", iterations=1000))


@pytest.fixture
def data():
    from django.db import connection

    import forqapp
    from forqapp import ids, services, store
    from forqapp.services.history import record_depth_samples

    freshness.clear()
    forqapp.send_many("emails", [f'{{"to": "user{i}@example.com", "template": "welcome"}}' for i in range(30)])
    forqapp.send_many("payments", [f'{{"order": {i}, "amount": {i * 3}.50}}' for i in range(12)])
    forqapp.send("payments", "later", process_after=services.now_ms() + 600_000)
    services.claim_many("payments", 3)
    forqapp.send_many("sms", ["hi"] * 4)
    now = services.now_ms()
    dead = ids.new_ids(6)
    rows = [store.NewMessage(m, "emails-dlq", f'{{"to": "bounce{i}@example.com", "error": "<script>alert(1)</script>"}}',
                             now, now, now + 86_400_000) for i, m in enumerate(dead)]
    store.for_alias(connection.alias).insert(rows, is_dlq=True)
    for k in range(288):
        wave = 1 + (k % 96) / 96
        record_depth_samples([("emails", False, int(20 * wave)), ("payments", False, int(8 + k % 30)),
                              ("sms", False, 4), ("emails-dlq", True, k // 40)],
                             now=now - (287 - k) * 300_000)
    return dead


def shot(page, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def log_in(page, url: str, username: str = "admin", password: str = "pw-admin-123") -> None:  # noqa: S107 - the test user's
    """Open ``url``, which sends an anonymous browser to the login form, and sign in there."""
    page.goto(url)
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")


def test_dashboard_dlq_requeue_all_and_delete_one(live_ui, browser_page, staff_user, data):
    page = browser_page
    page.goto(live_ui + "/")
    assert "/login/" in page.url
    page.fill("#id_username", "admin")
    page.fill("#id_password", "pw-admin-123")
    page.click("button[type=submit]")
    page.wait_for_selector("#overview")
    assert page.inner_text("[data-testid=dlq-messages]") == "6"
    assert page.locator("table.queues tbody tr").count() == 4  # emails, its DLQ under it, payments, sms
    shot(page, "dashboard-light")
    page.emulate_media(color_scheme="dark")
    shot(page, "dashboard-dark")
    page.emulate_media(color_scheme="light")

    # Open the DLQ from the dashboard; peek at a message (the <script> stays text).
    page.click("a.pill.danger")
    page.wait_for_selector("tbody.msg")
    assert page.locator("tbody.msg").count() == 6
    assert set(page.locator("tbody.msg [data-testid=state]").all_inner_texts()) == {"ready"}  # as the API says
    # At 1280 px the dead-letter table fits its card: every row's actions in view, no side scroll.
    assert page.eval_on_selector("#message-list", "e => e.scrollWidth <= e.clientWidth")
    page.locator("tbody.msg button.link").first.click()
    page.wait_for_selector("pre.content")
    assert "<script>alert(1)</script>" in page.inner_text("pre.content")
    shot(page, "dlq-light")
    page.emulate_media(color_scheme="dark")
    shot(page, "dlq-dark")
    page.emulate_media(color_scheme="light")

    # Delete one, behind the confirmation dialog: cancel first, then confirm.
    first = page.locator("tbody.msg").first
    first_id = first.get_attribute("id")
    first.locator("button.danger").click()
    page.wait_for_selector("#confirm-dialog[open]")
    shot(page, "dlq-confirm")
    page.click("#confirm-dialog button[value=cancel]")
    assert page.locator("tbody.msg").count() == 6
    first.locator("button.danger").click()
    page.click("#confirm-dialog button[value=ok]")
    page.wait_for_selector("[data-testid=flash]")
    assert page.inner_text("[data-testid=flash]") == "Deleted 1 message from emails-dlq."
    assert page.locator(f"#{first_id}").count() == 0
    assert page.locator("tbody.msg").count() == 5
    assert page.inner_text("[data-testid=total]") == "5"

    # Requeue all: a move task, shown at once in its card; the moves job (run here: the test's server
    # runs no jobs, and the card says it waits for them) moves them, and the card, refreshing itself,
    # says so and brings the (now empty) list.
    from forqapp.models import Message
    from tests.test_dlq_moves import run_all

    page.click("text=Requeue all")
    page.click("#confirm-dialog button[value=ok]")
    page.wait_for_selector("#queue-moves [data-testid=move]")
    assert page.inner_text("[data-testid=flash]").startswith("Requeueing 5 messages of emails-dlq back to their queue")
    assert page.inner_text("[data-testid=move-status]") == "waiting for the jobs process"
    assert page.inner_text("[data-testid=move-progress]") == "0 of 5"
    assert page.locator("[data-testid=no-jobs]").is_visible()
    shot(page, "dlq-requeue-all-waiting")
    assert run_all() == 5
    page.wait_for_selector("#queue-moves [data-status=COMPLETED]", timeout=15_000)
    page.wait_for_selector("[data-testid=empty]")
    assert page.inner_text("[data-testid=move-progress]") == "5 of 5"
    assert page.inner_text("[data-testid=total]") == "0"
    assert Message.objects.filter(queue="emails-dlq").count() == 0
    assert Message.objects.filter(queue="emails").count() == 35

    # A regular queue page, light and dark.
    page.goto(live_ui + "/queues/payments/")
    page.wait_for_selector("tbody.msg")
    shot(page, "queue-light")
    page.emulate_media(color_scheme="dark")
    shot(page, "queue-dark")


def test_dlq_actions_without_javascript_ask_on_a_confirmation_page(live_ui, browser_page, staff_user, data):
    """JavaScript off: the DLQ's Requeue, Delete and their "all" forms post as plain forms and get
    the confirmation page (an audit found bare htmx buttons there, which did nothing)."""
    from forqapp.models import Message

    context = browser_page.context.browser.new_context(java_script_enabled=False, viewport={"width": 1280, "height": 860})
    try:
        page = context.new_page()
        page.set_default_timeout(10_000)
        log_in(page, live_ui + "/queues/emails-dlq/")
        page.wait_for_selector("tbody.msg")
        first_id = page.locator("tbody.msg").first.get_attribute("id").removeprefix("m-")
        page.locator("tbody.msg").first.locator("button:has-text('Requeue')").click()
        page.wait_for_selector("[data-testid=confirm-page]")
        assert page.inner_text("[data-testid=confirm-question]") == f"Requeue message {first_id} back to emails?"
        page.click("[data-testid=confirm-submit]")
        page.wait_for_selector("tbody.msg")
        assert Message.objects.get(id=first_id).queue == "emails"
        assert page.locator("tbody.msg").count() == 5
        page.click("button:has-text('Delete all')")
        page.wait_for_selector("[data-testid=confirm-page]")
        page.click("[data-testid=confirm-cancel]")
        page.wait_for_selector("tbody.msg")
        assert Message.objects.filter(queue="emails-dlq").count() == 5  # cancelled: nothing deleted
        page.click("button:has-text('Delete all')")
        page.click("[data-testid=confirm-submit]")
        page.wait_for_selector("[data-testid=empty]")
        assert Message.objects.filter(queue="emails-dlq").count() == 0
    finally:
        context.close()


def test_queue_policy_pause_resume_and_message_details(live_ui, browser_page, staff_user):
    import forqapp
    from forqapp import services

    freshness.clear()
    services.configure_queue("emails", max_attempts=3)
    message_id = forqapp.send("emails", '{"to": "a@example.com"}', priority=9,
                              attributes={"tenant": "<b>acme</b>"}, dedup_id="order-1")
    page = browser_page
    log_in(page, live_ui + "/queues/emails/")
    page.wait_for_selector("#queue-policy")
    assert page.inner_text("[data-testid=queue-state]") == "active"
    assert page.inner_text("[data-field=max_attempts] dd") == "3 this queue"
    assert page.inner_text("[data-field=visibility_timeout] dd") == "5 min global"
    assert page.inner_text("[data-testid=ready]") == "1"

    # Pause, behind the confirmation dialog: cancel first, then confirm.
    page.click("[data-testid=pause]")
    page.wait_for_selector("#confirm-dialog[open]")
    page.click("#confirm-dialog button[value=cancel]")
    assert not services.queue_info("emails").paused
    page.click("[data-testid=pause]")
    page.click("#confirm-dialog button[value=ok]")
    page.wait_for_selector("[data-testid=resume]")
    assert page.inner_text("[data-testid=queue-state]") == "paused"
    assert page.inner_text("[data-testid=flash]").startswith("Paused emails")  # a 403 CSRF before
    assert services.queue_info("emails").paused
    shot(page, "queue-paused-light")
    page.emulate_media(color_scheme="dark")
    shot(page, "queue-paused-dark")
    page.emulate_media(color_scheme="light")

    # Resume: no confirmation.
    page.click("[data-testid=resume]")
    page.wait_for_selector("[data-testid=pause]")
    assert page.inner_text("[data-testid=queue-state]") == "active"
    assert not services.queue_info("emails").paused

    # The message's details: priority, sequence, dedup id, attributes (escaped: shown as text).
    page.click(f"#m-{message_id} button.link")
    page.wait_for_selector("pre.content")
    assert page.inner_text("[data-testid=priority]") == "9"
    assert page.inner_text("[data-testid=dedup-id]") == "order-1"
    assert int(page.inner_text("[data-testid=sequence]")) > 0
    assert page.inner_text("[data-testid=attributes] td") == "<b>acme</b>"
    shot(page, "message-details")


def test_an_action_the_server_fails_or_never_answers_says_so_in_the_flash(live_ui, browser_page, staff_user):
    """htmx swaps nothing on a 5xx or a lost connection; forq.js says it instead of a silent click."""
    from forqapp import services

    freshness.clear()
    services.configure_queue("emails", max_attempts=3)
    page = browser_page
    log_in(page, live_ui + "/queues/emails/")
    page.wait_for_selector("[data-testid=pause]")
    page.route("**/queues/emails/pause/", lambda route: route.fulfill(status=500, body="boom"))
    page.click("[data-testid=pause]")
    page.click("#confirm-dialog button[value=ok]")
    page.wait_for_selector("[data-testid=flash].error")
    assert page.inner_text("[data-testid=flash]") == "Not done: the server answered 500. Reload the page and try again."
    page.unroute("**/queues/emails/pause/")
    # A stale CSRF token (a logout and login in another tab): Django's 403, said as such.
    page.context.clear_cookies(name="csrftoken")
    page.click("[data-testid=pause]")
    page.click("#confirm-dialog button[value=ok]")
    # (expect, not wait_for_function: a string predicate is an eval, which the pages' CSP refuses)
    playwright_sync.expect(page.locator("[data-testid=flash]")).to_contain_text("out of date")
    assert not services.queue_info("emails").paused
    page.route("**/queues/emails/pause/", lambda route: route.abort())
    page.click("[data-testid=pause]")
    page.click("#confirm-dialog button[value=ok]")
    playwright_sync.expect(page.locator("[data-testid=flash]")).to_contain_text("could not be reached")
    assert page.locator("[data-testid=flash]").count() == 1
    assert page.inner_text("[data-testid=queue-state]") == "active" and not services.queue_info("emails").paused


def test_schedules_page_and_a_limited_queues_flow_control(live_ui, browser_page, staff_user):
    import forqapp
    from forqapp import services
    from forqapp.models import Message
    from forqapp.services import schedules

    freshness.clear()
    forqapp.schedule("nightly-report", queue="reports", content='{"report": "nightly"}', cron="0 3 * * *")
    forqapp.schedule("poll-feeds", queue="feeds", content="go", every=300, paused=True)
    page = browser_page
    log_in(page, live_ui + "/")
    page.wait_for_selector("#overview")
    page.click("nav a[href='/schedules/']")
    page.wait_for_selector("table.schedules")
    nightly = page.locator("tbody[data-name='nightly-report']")
    assert nightly.locator("[data-testid=schedule-state]").inner_text() == "active"
    assert "03:00:00 UTC" in nightly.locator("[data-testid=next-run]").inner_text()
    assert page.locator("tbody[data-name='poll-feeds'] [data-testid=schedule-state]").inner_text() == "paused"
    shot(page, "schedules-light")
    page.emulate_media(color_scheme="dark")
    shot(page, "schedules-dark")
    page.emulate_media(color_scheme="light")

    # Run now, behind the confirmation dialog: cancel first, then confirm.
    nightly.locator("[data-testid=run-now]").click()
    page.wait_for_selector("#confirm-dialog[open]")
    page.click("#confirm-dialog button[value=cancel]")
    assert not Message.objects.filter(queue="reports").exists()
    nightly.locator("[data-testid=run-now]").click()
    page.click("#confirm-dialog button[value=ok]")
    page.wait_for_selector("[data-testid=flash]")
    sent = Message.objects.get(queue="reports")  # a 403 CSRF before
    assert page.inner_text("[data-testid=flash]") == (
        f"Sent nightly-report's message to reports now (message {sent.id}); its next run is unchanged.")

    # Pause (confirmed), then resume (no confirmation): the row updates in place.
    nightly.locator("[data-testid=pause]").click()
    page.click("#confirm-dialog button[value=ok]")
    page.wait_for_selector("tbody[data-name='nightly-report'] [data-testid=resume]")
    assert nightly.locator("[data-testid=schedule-state]").inner_text() == "paused"
    assert schedules.get("nightly-report").paused
    nightly.locator("[data-testid=resume]").click()
    page.wait_for_selector("tbody[data-name='nightly-report'] [data-testid=pause]")
    assert not schedules.get("nightly-report").paused
    assert page.inner_text("[data-testid=flash]").startswith("Resumed nightly-report: next run")

    # A limited queue: claims through the server's API process; its page shows in flight against
    # the limit, and the claim the limit held back (counted in that process, read by this one).
    services.configure_queue("limited", max_in_flight=1)
    forqapp.send_many("limited", ["a", "b"])
    assert live_ui.api.consume("limited").status_code == 200
    assert live_ui.api.consume("limited").status_code != 200  # every slot taken: nothing
    services.configure_queue("limited", rate="100/s")
    page.goto(live_ui + "/queues/limited/")
    page.wait_for_selector("#queue-flow")
    assert page.inner_text("[data-testid=in-flight]") == "1 / 1"
    assert page.inner_text("[data-testid=flow-in-flight]") == "1 / 1"
    assert page.inner_text("[data-testid=flow-rate]") == "100/s (a claim every 10 ms)"
    assert int(page.inner_text("[data-reason=concurrency]").split()[-1]) >= 1
    assert "since this server started" in page.inner_text("#queue-flow").lower()
    shot(page, "queue-flow-light")


def test_a_staff_user_with_some_permissions_sees_and_uses_only_those(live_ui, browser_page, data):
    """In a real browser: a staff account that may view dead letters and requeue them, nothing more,
    sees no Delete button and no link to the keys or schedules, requeues one message through the
    dialog, and gets a 403 from the keys page and no change from a forged delete."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher
    from django.contrib.auth.models import Permission, User

    from forqapp.models import Message

    user = User.objects.create(username="clerk", is_staff=True,
                               password=PBKDF2PasswordHasher().encode("pw-clerk-123", "forqsalt", iterations=1000))
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="forqapp", codename__in=["view_queue", "view_deadletter", "change_deadletter"]))
    page = browser_page
    log_in(page, live_ui + "/queues/emails-dlq/", "clerk", "pw-clerk-123")
    page.wait_for_selector("tbody.msg")
    assert page.locator("tbody.msg").count() == 6
    assert page.locator("button.danger:visible").count() == 0  # no Delete, one or all (the dialog's is hidden)
    assert page.locator("nav a[href$='/keys/']").count() == 0
    assert page.locator("nav a[href$='/schedules/']").count() == 0
    first = page.locator("tbody.msg").first
    first_id = first.get_attribute("id")
    first.locator("button", has_text="Requeue").click()
    page.click("#confirm-dialog button[value=ok]")
    page.wait_for_selector("[data-testid=flash]")
    assert page.inner_text("[data-testid=flash]") == "Requeued 1 message to emails."
    assert page.locator(f"#{first_id}").count() == 0
    assert page.goto(live_ui + "/keys/").status == 403
    # A delete forged from the page (its CSRF token, htmx's headers): refused, nothing deleted.
    page.goto(live_ui + "/queues/emails-dlq/")
    page.wait_for_selector("tbody.msg")
    status = page.evaluate("""async () => {
        const token = document.querySelector('[name=csrfmiddlewaretoken]')?.value
            || document.cookie.split('; ').find(c => c.startsWith('csrftoken='))?.split('=')[1];
        const r = await fetch('/queues/emails-dlq/messages/', {method: 'DELETE',
            headers: {'X-CSRFToken': token, 'HX-Request': 'true'}});
        return [r.status, await r.text()];
    }""")
    assert status[0] == 200 and "You do not have the permission to delete dead letters" in status[1], status
    assert Message.objects.filter(queue="emails-dlq").count() == 5


def _user(username: str, *codenames: str):
    from django.contrib.auth.hashers import PBKDF2PasswordHasher
    from django.contrib.auth.models import Permission, User

    user = User.objects.create(username=username, is_staff=True,
                               password=PBKDF2PasswordHasher().encode(f"pw-{username}-123", "forqsalt", iterations=1000))
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="forqapp", codename__in=codenames))
    return user


def test_message_permissions_alone_show_no_dead_letter_in_the_admin_and_login_lands_where_one_may_go(
        live_ui, browser_page, data):
    """In Chromium: a staff user with the message permissions only sees no dead letter on the
    admin's message list and has no requeue/delete action there (it could requeue them), and no
    link to the DLQ's page in the UI; a keys-only user lands on the keys page after login (a bare
    403 before), and a user with no page gets the 403 page with Log out."""
    from forqapp.models import Message

    _user("reader", "view_queue", "view_message", "change_message", "delete_message")
    dead = list(Message.objects.filter(queue="emails-dlq").values_list("id", flat=True))
    assert dead
    page = browser_page
    page.goto(live_ui + "/admin/forqapp/message/")
    page.fill("#id_username", "reader")
    page.fill("#id_password", "pw-reader-123")
    with page.expect_navigation():
        page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    listed = page.inner_html("#result_list tbody")  # (an id shows shortened: whole in its link and tooltip)
    assert Message.objects.filter(queue="emails").values_list("id", flat=True)[0] in listed
    assert not any(message_id in listed for message_id in dead)
    # No action it may use: no requeue or delete of dead letters (no action menu at all).
    assert page.locator("select[name=action] option[value=requeue_messages]").count() == 0
    assert page.locator("select[name=action] option[value=delete_messages]").count() == 0
    page.goto(live_ui + "/queues/emails/")
    page.wait_for_selector("#queue-policy")
    assert page.locator("a[href$='/queues/emails-dlq/']").count() == 0

    browser_page.context.clear_cookies()
    _user("keyholder", "view_apikey")
    log_in(page, live_ui + "/", "keyholder", "pw-keyholder-123")
    page.wait_for_url("**/keys/")
    assert page.locator("button", has_text="Log out").count() == 1

    browser_page.context.clear_cookies()
    _user("nobody")
    log_in(page, live_ui + "/", "nobody", "pw-nobody-123")
    page.wait_for_selector("[data-testid=forbidden]")
    assert "You do not have the permission to view queues." in page.inner_text("[data-testid=forbidden]")
    assert page.locator("button", has_text="Log out").count() == 1


def test_queue_page_shows_the_busiest_message_groups_in_a_browser(live_ui, browser_page, staff_user):
    """The groups card as Chromium renders it: the group policy, each group's ready and in-flight
    counts, light and dark."""
    import forqapp
    from forqapp import services

    freshness.clear()
    services.configure_queue("tenants", group_concurrency=2, group_rate="5/s")
    for i in range(3):
        forqapp.send("tenants", f"a{i}", group="tenant-a")
    forqapp.send("tenants", "b0", group="tenant:b")
    assert len(services.claim_many("tenants", 10)) == 2  # one of each group: their turns
    page = browser_page
    log_in(page, live_ui + "/queues/tenants/")
    page.wait_for_selector("#queue-groups")
    assert page.inner_text("[data-testid=group-policy]") == "Per group: at most 2 in flight, at most 5/s"
    rows = page.locator("#queue-groups tbody tr")
    assert rows.count() == 2
    shown = [[cell.inner_text() for cell in row.locator("td").all()][:3] for row in rows.all()]
    assert shown == [["tenant-a", "2", "1"], ["tenant:b", "0", "1"]]
    shot(page, "queue-groups-light")
    page.emulate_media(color_scheme="dark")
    shot(page, "queue-groups-dark")
    page.emulate_media(color_scheme="light")


def test_a_dlq_requeue_all_at_a_rate_cancelled_and_run_in_a_browser(live_ui, browser_page, staff_user):
    """The DLQ page's "Requeue all" at a rate: the confirmation dialog, the moves card (waiting for
    the jobs process: the test's server runs none), its Cancel; started again, the moves job (run
    here) takes every dead letter back to its source queue, and the card, refreshing itself, says so."""
    import forqapp
    from forqapp.models import Message
    from tests.test_dlq_moves import dead_letter, run_all

    freshness.clear()
    forqapp.configure_queue("emails")
    for n in range(3):
        dead_letter("emails", f"m{n}")
    page = browser_page
    log_in(page, live_ui + "/queues/emails-dlq/")
    page.wait_for_selector("text=Requeue all")
    assert not page.locator("#queue-moves").is_visible()
    page.fill("[data-testid=move-rate]", "2")
    page.click("text=Requeue all")
    page.wait_for_selector("#confirm-dialog[open]")
    page.click("#confirm-dialog button[value=cancel]")  # cancelled: nothing started
    assert forqapp.list_moves("emails-dlq") == []
    page.click("text=Requeue all")
    page.click("#confirm-dialog button[value=ok]")
    page.wait_for_selector("#queue-moves [data-testid=move]")  # answered with the move's card
    (task,) = forqapp.list_moves("emails-dlq")
    assert (task.to_move, task.rate) == (3, 2)
    row = page.locator("#queue-moves tbody tr").first
    assert row.locator("td").nth(0).inner_text() == "waiting for the jobs process"
    assert row.locator("td").nth(3).inner_text() == "2/s"
    row.locator("[data-testid=move-cancel]").click()
    page.wait_for_selector("#confirm-dialog[open]")
    page.click("#confirm-dialog button[value=ok]")
    page.wait_for_selector("#queue-moves [data-status=CANCELLED]")
    assert page.inner_text("[data-testid=flash]") == "Cancelled the move of emails-dlq: 0 message(s) moved."
    assert forqapp.move_info(task.handle).status == "CANCELLED"
    page.fill("[data-testid=move-rate]", "")
    page.click("text=Requeue all")
    page.click("#confirm-dialog button[value=ok]")
    page.wait_for_selector("#queue-moves [data-status=RUNNING]")
    assert run_all() == 3  # the moves job (the test's server runs no jobs)
    page.wait_for_selector("#queue-moves [data-status=COMPLETED]", timeout=15_000)  # the card refreshed itself
    row = page.locator("#queue-moves tbody tr").first
    assert row.locator("td").nth(0).inner_text() == "completed"
    assert row.locator("td").nth(1).inner_text() == "3 of 3"
    assert row.locator("td").nth(2).inner_text() == "each its source queue"
    page.wait_for_selector("[data-testid=empty]")
    shot(page, "dlq-requeue-all")
    assert sorted(m.content for m in Message.objects.filter(queue="emails")) == ["m0", "m1", "m2"]


def test_a_session_that_ends_while_a_page_is_open_logs_in_back_to_that_page(live_ui, browser_page, staff_user, data):
    """Audit: an htmx request of a page whose session had ended sent the browser to the login page
    without ``next``: once logged in, the user landed on the dashboard, not where they were."""
    page = browser_page
    log_in(page, live_ui + "/queues/emails-dlq/")
    page.wait_for_selector("tbody.msg")
    page.context.clear_cookies()  # the session ends (logged out elsewhere, expired)
    page.locator("tbody.msg button.link").first.click()  # an htmx request: answered HX-Redirect
    page.wait_for_url("**/login/?next=**")
    assert "next=/queues/emails-dlq/" in page.url.replace("%2F", "/"), page.url
    page.fill("#id_username", "admin")
    page.fill("#id_password", "pw-admin-123")
    page.click("button[type=submit]")
    page.wait_for_url(live_ui + "/queues/emails-dlq/")
    page.wait_for_selector("tbody.msg")


def test_the_ui_login_page_says_why_a_login_was_refused(live_ui, browser_page, staff_user):
    """A wrong password, or a username no account has (one past Django's 150 characters too), is
    named above the form, which keeps what was typed and marks no field; then the right one logs in.
    (A field's own error — a NUL in the username — cannot be typed in a browser: tests/test_ui.py.)"""
    page = browser_page
    for username in ("nobody-here", "u" * 151):
        log_in(page, live_ui + "/login/", username=username, password="not-the-password")
        page.wait_for_selector("div.flash.error")
        assert "correct username and password" in page.inner_text("div.flash.error")
        assert page.input_value("#id_username") == username
        assert page.locator("#id_username_error").count() == 0
    log_in(page, live_ui + "/login/")
    page.wait_for_url(live_ui + "/")
    shot(page, "ui-login-refusals")
