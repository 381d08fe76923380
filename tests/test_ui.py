# ruff: noqa: S106  (test passwords)
"""The HTMX pages: permissions, CSRF, escaping, every DLQ action's effect, partial vs full."""

from __future__ import annotations

import re
import threading
import time

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.utils.html import escape

import forqapp
from forqapp import ids as forq_ids
from forqapp import services, store
from forqapp.models import Message, QueueDepthSample
from forqapp.services import history, schedules
from forqapp.ui import freshness, queries
from tests.conftest import HX, patch_clock
from tests.test_dlq_moves import run_all

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("live_counts")]

XSS = '<script>alert("x")</script>'


def dead_letters(queue: str, contents: list[str]) -> list[str]:
    """Put messages in ``queue``-dlq the way the jobs do (the store's insert, as DLQ rows)."""
    now = services.now_ms()
    ids = forq_ids.new_ids(len(contents))
    rows = [store.NewMessage(i, queue + "-dlq", c, now, now, now + 3_600_000)
            for i, c in zip(ids, contents, strict=True)]
    store.for_alias(connection.alias).insert(rows, is_dlq=True)
    Message.objects.filter(id__in=ids).update(failure_reason="max_attempts_reached")
    return ids


# --- permissions ------------------------------------------------------------------------------

URLS = ["/ui/", "/ui/queues/emails/", "/ui/queues/emails-dlq/messages/"]


@pytest.mark.parametrize("url", URLS)
def test_anonymous_gets_the_login_page(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/ui/login/?next=")
    assert client.get(response["Location"]).status_code == 200


def test_htmx_anonymous_gets_a_client_redirect_back_to_its_page(client):
    response = client.get("/ui/", **HX)
    assert response.headers["HX-Redirect"] == "/ui/login/"
    # Sent from a page of this site (a session that ended while the page refreshed): back to that page.
    response = client.get("/ui/queues/emails/flow/", HTTP_HX_CURRENT_URL="http://testserver/ui/queues/emails/?x=1", **HX)
    assert response.headers["HX-Redirect"] == "/ui/login/?next=/ui/queues/emails/%3Fx%3D1"
    response = client.get("/ui/queues/emails/flow/", HTTP_HX_CURRENT_URL="https://elsewhere.example/ui/", **HX)
    assert response.headers["HX-Redirect"] == "/ui/login/"  # (another site's page: no next)


def test_non_staff_gets_the_login_page_and_cannot_log_in(client):
    User.objects.create_user("joe", password="pw-joe-12345")
    client.login(username="joe", password="pw-joe-12345")
    response = client.get("/ui/")
    assert response.status_code == 302 and response["Location"].startswith("/ui/login/")
    page = client.get(response["Location"])
    assert b"not staff" in page.content
    response = client.post("/ui/login/", {"username": "joe", "password": "pw-joe-12345"})
    assert response.status_code == 200  # the form again, with an error
    assert b"staff account" in response.content


def test_non_staff_cannot_act(client):
    ids = dead_letters("emails", ["a"])
    User.objects.create_user("joe", password="pw-joe-12345")
    client.login(username="joe", password="pw-joe-12345")
    assert client.post("/ui/queues/emails-dlq/moves/").status_code == 302
    assert client.delete(f"/ui/queues/emails-dlq/messages/{ids[0]}/").status_code == 302
    assert Message.objects.filter(queue="emails-dlq").count() == 1


def staff_with(*codenames: str) -> Client:
    """A logged-in staff user (not a superuser) with forqapp's permissions ``codenames`` only."""
    user = User.objects.create_user(f"staff-{len(codenames)}-{'-'.join(codenames)}"[:150], password="pw-some-12345",
                                    is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="forqapp", codename__in=codenames))
    c = Client()
    c.force_login(user)
    return c


# (method, url, the permission it needs) for every page and action of the UI
ALL_PAGES_AND_ACTIONS = [
    ("get", "/ui/", "view_queue"),
    ("get", "/ui/queues/emails/", "view_message"),
    ("get", "/ui/queues/emails/flow/", "view_message"),
    ("get", "/ui/queues/emails-dlq/", "view_deadletter"),
    ("get", "/ui/queues/emails-dlq/messages/?before={dead}", "view_deadletter"),
    ("get", "/ui/queues/emails/messages/{live}/", "view_message"),
    ("get", "/ui/queues/emails-dlq/messages/{dead}/", "view_deadletter"),
    ("post", "/ui/queues/emails/pause/", "change_queue"),
    ("post", "/ui/queues/emails/resume/", "change_queue"),
    ("post", "/ui/queues/emails-dlq/messages/{dead}/requeue/", "change_deadletter"),
    ("post", "/ui/queues/emails-dlq/moves/", "change_deadletter"),  # requeue all: a move task
    ("get", "/ui/queues/emails-dlq/moves/", "view_deadletter"),
    ("delete", "/ui/queues/emails-dlq/messages/{dead}/", "delete_deadletter"),
    ("delete", "/ui/queues/emails-dlq/messages/", "delete_deadletter"),
    ("get", "/ui/schedules/", "view_schedule"),
    ("post", "/ui/schedules/tick/pause/", "change_schedule"),
    ("post", "/ui/schedules/tick/resume/", "change_schedule"),
    ("post", "/ui/schedules/tick/run/", "change_schedule"),
    ("get", "/ui/keys/", "view_apikey"),
    ("post", "/ui/keys/create/", "add_apikey"),
    ("post", "/ui/keys/{key}/rotate/", "change_apikey"),
    ("post", "/ui/keys/{key}/revoke/", "change_apikey"),
]


def _state() -> tuple:
    """Everything the actions above could change."""
    from forqapp.keys.models import ApiKey
    from forqapp.models import MoveTask

    return (sorted(Message.objects.values_list("id", "queue", "status")), sorted(MoveTask.objects.values_list("source")),
            forqapp.queue_info("emails").paused, schedules.get("tick").paused,
            sorted(ApiKey.objects.values_list("access_key_id", "secret_sealed", "revoked_at")))


@pytest.mark.parametrize(("method", "url", "perm"), ALL_PAGES_AND_ACTIONS)
def test_staff_needs_the_admins_permission_for_each_page_and_action(method, url, perm):
    """A staff account with no permissions gets the admin's 403 there, and here (it once could create
    a key with every grant); with the one permission the admin asks for the same thing, it may."""
    from forqapp.keys import service

    live = forqapp.send("emails", "live")
    dead = dead_letters("emails", ["d1", "d2"])[0]
    forqapp.schedule("tick", queue="emails", content="t", every=3600)
    key = service.create("k", ["emails:produce"], actor="test", via="cli").key.access_key_id
    url = url.format(live=live, dead=dead, key=key)
    data = {"name": "new", "grants": "*+dlq:produce,consume,manage,read", "confirmed": "1"}
    implying = {perm, perm.replace("view_", "change_")}  # the admin's view is met by change too
    others = [p for _, _, p in ALL_PAGES_AND_ACTIONS if p not in implying]
    if url.endswith("/resume/"):  # something to resume
        forqapp.configure_queue("emails", paused=True)
        forqapp.schedule("tick", queue="emails", content="t", every=3600, paused=True)
    before = _state()
    for client, with_others in ((staff_with(), False), (staff_with(*others), True)):
        response = getattr(client, method)(url, data) if method == "post" else getattr(client, method)(url)
        if url == "/ui/" and with_others:  # login's landing: the first page it may see, not a 403
            assert (response.status_code, response["Location"]) == (302, "/ui/schedules/")
        else:
            assert response.status_code == 403, (url, response.status_code)
            assert b'data-testid="forbidden"' in response.content and b"Log out" in response.content
        hx = getattr(client, method)(url, data, **HX) if method == "post" else getattr(client, method)(url, **HX)
        assert hx.status_code == 200 and b"You do not have the permission" in hx.content
        assert hx["HX-Reswap"] == "none"
        assert _state() == before  # nothing changed
    allowed = staff_with(perm)
    response = getattr(allowed, method)(url, data, **HX) if method == "post" else getattr(allowed, method)(url, **HX)
    assert response.status_code == 200 and b"You do not have the permission" not in response.content, url
    if method != "get":
        assert _state() != before, url  # the action happened


def test_pages_show_only_the_buttons_the_user_may_use():
    dead_letters("emails", ["d1"])
    forqapp.schedule("tick", queue="emails", content="t", every=3600)
    viewer = staff_with("view_queue", "view_message", "view_deadletter", "view_schedule", "view_apikey")
    for url in ("/ui/queues/emails-dlq/", "/ui/queues/emails/", "/ui/schedules/", "/ui/keys/"):
        page = viewer.get(url).content.decode()
        for button in ("Requeue", "Delete", 'data-testid="pause"', "Run now", "Create a key"):
            assert button not in page, (url, button)
    assert 'href="/ui/keys/"' in viewer.get("/ui/").content.decode()
    requeuer = staff_with("view_deadletter", "change_deadletter")
    page = requeuer.get("/ui/queues/emails-dlq/").content.decode()
    assert "Requeue all" in page and ">Requeue</button>" in page and "Delete" not in page
    assert 'href="/ui/keys/"' not in page and 'href="/ui/schedules/"' not in page
    operator = staff_with("view_message", "change_queue", "change_schedule", "add_apikey")
    assert 'data-testid="pause"' in operator.get("/ui/queues/emails/").content.decode()
    assert "Run now" in operator.get("/ui/schedules/").content.decode()


def test_view_pages_are_open_to_the_change_permission_too():
    client = staff_with("change_message")
    assert client.get("/ui/queues/emails/").status_code == 200


def test_staff_logs_in_and_out(client, staff):
    response = client.post("/ui/login/", {"username": "staff", "password": "pw-staff-123"})
    assert response.status_code == 302 and response["Location"] == "/ui/"
    assert client.get("/ui/").status_code == 200
    opened = client.get("/ui/logout/")  # no state change on GET: a page with the button that logs out
    assert opened.status_code == 405 and opened["Allow"] == "POST"
    assert b'data-testid="log-out"' in opened.content and b'action="/ui/logout/"' in opened.content
    assert client.get("/ui/").status_code == 200
    response = client.post("/ui/logout/")
    assert response.status_code == 302 and response["Location"] == "/ui/login/"
    assert client.get("/ui/").status_code == 302


# --- referrer policy (issue 10, point 1) --------------------------------------------------------


@pytest.mark.parametrize("url", ["/ui/login/", "/admin/login/", "/ui/"])
def test_ui_and_admin_send_same_origin_referrers(client, staff, url):
    """With ``no-referrer`` browsers send ``Origin: null`` on form posts and Django's CSRF check
    refuses them (the admin was 403 in Chromium: tests/test_admin_browser.py)."""
    client.force_login(staff)
    assert client.get(url)["Referrer-Policy"] == "same-origin"


def test_api_keeps_no_referrer(client):
    response = client.get("/api/v1/queues/emails/messages", HTTP_X_API_KEY="wrong")
    assert response["Referrer-Policy"] == "no-referrer"


def test_no_referrer_policy_is_a_check_warning(settings):
    from django.core.checks import run_checks

    settings.SECURE_REFERRER_POLICY = "no-referrer"
    assert "forqapp.W010" in [w.id for w in run_checks()]
    settings.SECURE_REFERRER_POLICY = ["no-referrer", "strict-origin-when-cross-origin"]
    assert "forqapp.W010" not in [w.id for w in run_checks()]  # browsers apply the last one
    settings.SECURE_REFERRER_POLICY = "same-origin"
    assert "forqapp.W010" not in [w.id for w in run_checks()]


# --- login throttle (issue 10, point 6) -------------------------------------------------------

LOGIN_URLS = ["/ui/login/", "/admin/login/"]
BLOCKED = "Too many failed logins; try again in 15 minutes."


def log_in(url: str, username: str, password: str, address: str = "10.0.0.1"):
    """A login from ``address`` with a fresh client; returns (response, logged in?)."""
    c = Client()
    response = c.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)
    return response, "_auth_user_id" in c.session


@pytest.fixture
def other_staff(db):
    return User.objects.create_user("other", password="pw-other-123", is_staff=True, is_superuser=True)


@pytest.mark.parametrize("url", LOGIN_URLS)
def test_failed_logins_block_a_username_from_every_address(url, staff, other_staff):
    for i in range(5):
        response, ok = log_in(url, "staff", "wrong", address=f"10.0.1.{i}")
        assert response.status_code == 200 and not ok and BLOCKED not in response.content.decode()
    # Blocked now, even with the right password, from a new address; with a clear message.
    response, ok = log_in(url, "staff", "pw-staff-123", address="10.0.2.1")
    assert response.status_code == 200 and not ok
    assert BLOCKED in response.content.decode()
    # Another user, from the same addresses (one failure each), is not.
    assert log_in(url, "other", "pw-other-123", address="10.0.1.0")[1]


@pytest.mark.parametrize("url", LOGIN_URLS)
def test_failed_logins_block_an_address_for_every_username(url, staff, other_staff):
    for name in ["root", "admin", "ops", "staff", "other"]:  # one guess each: a spray
        assert not log_in(url, name, "wrong", address="10.0.0.1")[1]
    response, ok = log_in(url, "staff", "pw-staff-123", address="10.0.0.1")
    assert not ok and BLOCKED in response.content.decode()
    # Another address is not blocked, and these users have one failure each.
    assert log_in(url, "staff", "pw-staff-123", address="10.0.0.2")[1]
    assert log_in(url, "other", "pw-other-123", address="10.0.0.2")[1]


@pytest.mark.parametrize("url", LOGIN_URLS)
def test_thirty_wrong_passwords_then_the_block_ends(url, staff, monkeypatch):
    for _ in range(30):
        log_in(url, "staff", "wrong")
    response, ok = log_in(url, "staff", "pw-staff-123")
    assert not ok and BLOCKED in response.content.decode()
    # Retries while blocked do not extend the block: when it ends, the right password works.
    real_now = services.now_ms
    patch_clock(monkeypatch, lambda: real_now() + 901_000)
    assert log_in(url, "staff", "pw-staff-123")[1]


def test_a_success_does_not_reset_the_address_counter(staff, other_staff):
    """An attacker with an account of their own cannot alternate guesses and successes."""
    for _ in range(4):
        assert not log_in("/admin/login/", "staff", "wrong")[1]
    assert log_in("/admin/login/", "other", "pw-other-123")[1]  # the attacker's own account
    assert not log_in("/admin/login/", "staff", "wrong")[1]  # the 5th failure from this address
    response, ok = log_in("/admin/login/", "other", "pw-other-123")
    assert not ok and BLOCKED in response.content.decode()


def test_wrong_api_keys_do_not_prune_login_counters(staff, monkeypatch):
    """The API's throttle prunes its stale rows after 2 x its 60 s window; login rows (15 min
    window) share the table and must survive it."""
    for _ in range(4):
        log_in("/ui/login/", "staff", "wrong")
    real_now = services.now_ms
    patch_clock(monkeypatch, lambda: real_now() + 300_000)  # 5 minutes later
    services.auth_failed("192.0.2.9")  # a wrong API key: prunes the API's stale rows
    log_in("/ui/login/", "staff", "wrong")
    response, ok = log_in("/ui/login/", "staff", "pw-staff-123", address="10.9.9.9")
    assert not ok and BLOCKED in response.content.decode()


def test_long_usernames_fit_the_throttle(staff):
    for _ in range(5):
        response, ok = log_in("/ui/login/", "x" * 5000, "wrong", address="10.3.3.3")
        assert response.status_code == 200 and not ok
    assert BLOCKED in log_in("/ui/login/", "staff", "pw-staff-123", address="10.3.3.3")[0].content.decode()


def test_the_backend_refuses_other_callers_of_authenticate(staff):
    from django.contrib.auth import authenticate
    from django.test import RequestFactory

    request = RequestFactory().post("/elsewhere/", REMOTE_ADDR="10.4.4.4")
    for _ in range(5):
        assert authenticate(request, username="staff", password="wrong") is None
    assert authenticate(request, username="staff", password="pw-staff-123") is None
    assert authenticate(None, username="staff", password="pw-staff-123") is None  # the username too


# --- pages ------------------------------------------------------------------------------------


def test_dashboard_counts(staff_client):
    forqapp.send("emails", "a")
    forqapp.send("emails", "b")
    forqapp.send("emails", "later", process_after=services.now_ms() + 60_000)
    forqapp.send("sms", "c")
    services.claim("sms")
    dead_letters("emails", ["x", "y"])
    dead_letters("ghost", ["z"])  # a DLQ whose queue is empty
    # staged (Spark) rows are hidden
    services.stage("emails", "tok", [{"content": "staged"}])
    response = staff_client.get("/ui/")
    assert response.status_code == 200
    overview = response.context["overview"]
    rows = {r.name: r for r in overview.rows}
    assert set(rows) == {"emails", "sms", "ghost"}
    assert (rows["emails"].queue.ready, rows["emails"].queue.delayed, rows["emails"].dlq.total) == (2, 1, 2)
    assert rows["sms"].queue.processing == 1
    assert not rows["ghost"].exists and rows["ghost"].dlq.total == 1
    # Queues: the 3 rows (ghost has its row, as a drained queue has) and the 2 DLQs with messages.
    assert (overview.queues, overview.dlqs, overview.messages, overview.dlq_messages) == (5, 2, 4, 3)
    assert b'hx-trigger="every 5s"' in response.content
    Message.objects.filter(queue="sms").delete()  # sms drained: still listed, still counted
    freshness.clear()
    assert staff_client.get("/ui/").context["overview"].queues == 5


def test_dashboard_query_count_does_not_grow_with_queues(staff_client, django_assert_max_num_queries):
    for i in range(15):
        forqapp.send(f"q{i}", "m")
        dead_letters(f"q{i}", ["d"])
    staff_client.get("/ui/")  # session etc. warmed
    with django_assert_max_num_queries(6):
        staff_client.get("/ui/", **HX)


def test_partial_vs_full(staff_client):
    forqapp.send("emails", "a")
    full = staff_client.get("/ui/")
    assert b"<!doctype html>" in full.content and b'id="overview"' in full.content
    assert full["Vary"] and "HX-Request" in full["Vary"]
    partial = staff_client.get("/ui/", **HX)
    assert b"<!doctype html>" not in partial.content and partial.content.lstrip().startswith(b'<div id="overview"')
    restore = staff_client.get("/ui/", HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true")
    assert b"<!doctype html>" in restore.content
    page = staff_client.get("/ui/queues/emails/", **HX)
    assert b"<!doctype html>" not in page.content and b'id="queue-body"' in page.content
    assert b"<!doctype html>" in staff_client.get("/ui/queues/emails/").content


def test_security_headers_and_csrf_token_on_body(staff_client):
    response = staff_client.get("/ui/")
    assert response["X-Frame-Options"] == "DENY"
    assert b'hx-headers=\'{"X-CSRFToken": "' in response.content
    assert b"/static/django_htmx/htmx-2.min.js" in response.content  # self-hosted, no CDN
    assert b"https://" not in response.content.split(b"<body")[0]


def test_queue_page_newest_first_with_keyset_load_more(staff_client):
    ids = forqapp.send_many("emails", [f"m{i}" for i in range(120)])
    response = staff_client.get("/ui/queues/emails/")
    rows = response.context["rows"]
    assert [m.id for m in rows] == ids[::-1][:50]
    assert response.context["next_before"] == ids[70]
    more = staff_client.get(f"/ui/queues/emails/messages/?before={ids[70]}", **HX)
    assert [m.id for m in more.context["rows"]] == ids[::-1][50:100]
    last = staff_client.get(f"/ui/queues/emails/messages/?before={ids[20]}", **HX)
    assert [m.id for m in last.context["rows"]] == ids[::-1][100:]
    assert last.context["next_before"] is None and b"Load more" not in last.content
    assert b"OFFSET" not in str(queries.messages().filter(id__lt="x").order_by("-id")[:51].query).encode()


@pytest.mark.parametrize("depth", [900, 5000])
def test_content_nested_too_deep_to_pretty_print_is_shown_as_it_is(staff_client, depth):
    """JSON nested deeper than the parser (or the indenting encoder) goes: shown as sent, not a 500."""
    content = "[" * depth + "]" * depth
    message_id = forqapp.send("emails", content)
    response = staff_client.get(f"/ui/queues/emails/messages/{message_id}/", **HX)
    assert response.status_code == 200
    assert b"[[[[[[[[" in response.content


def test_details_are_a_peek_not_a_consume(staff_client):
    message_id = forqapp.send("emails", '{"to": "a@example.com", "n": [1, 2]}')
    before = Message.objects.get(id=message_id)
    response = staff_client.get(f"/ui/queues/emails/messages/{message_id}/", **HX)
    assert response.status_code == 200
    assert b"&quot;to&quot;: &quot;a@example.com&quot;" in response.content  # pretty-printed JSON
    assert b'class="msg open"' in response.content
    after = Message.objects.get(id=message_id)
    assert (after.status, after.attempts, after.updated_at) == (before.status, before.attempts, before.updated_at)
    closed = staff_client.get(f"/ui/queues/emails/messages/{message_id}/?closed=1", **HX)
    assert b'class="msg"' in closed.content and b"<pre" not in closed.content
    assert forqapp.receive("emails").id == message_id  # still there to consume


def test_unknown_queue_or_message(staff_client):
    assert staff_client.get("/ui/queues/bad name!/").status_code == 404
    assert staff_client.get("/ui/queues/emails/messages/not-a-uuid/", **HX).status_code == 404
    assert staff_client.get(
        "/ui/queues/emails/messages/0190a0b0-0000-7000-8000-000000000000/", **HX).status_code == 404


# --- XSS ------------------------------------------------------------------------------------------


def test_content_is_escaped_everywhere(staff_client):
    message_id = forqapp.send("emails", XSS)
    dead_id = dead_letters("emails", [XSS])[0]
    pages = [
        staff_client.get("/ui/queues/emails/"),
        staff_client.get(f"/ui/queues/emails/messages/{message_id}/", **HX),
        staff_client.get(f"/ui/queues/emails-dlq/messages/{dead_id}/", **HX),
        staff_client.get(f"/ui/queues/emails-dlq/messages/{dead_id}/"),
    ]
    for page in pages:
        assert page.status_code == 200
        assert XSS.encode() not in page.content
        assert b"&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page.content


def test_dead_letter_rows_and_details_show_the_consumers_error_escaped(staff_client):
    dead_id = dead_letters("emails", ["x"])[0]
    Message.objects.filter(id=dead_id).update(failure_reason="fatal_error", last_error=f"ValueError: {XSS}")
    escaped = b"ValueError: &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
    listing = staff_client.get("/ui/queues/emails-dlq/messages/", **HX)
    detail = staff_client.get(f"/ui/queues/emails-dlq/messages/{dead_id}/", **HX)
    for page in (listing, detail):
        assert page.status_code == 200
        assert escaped in page.content
        assert XSS.encode() not in page.content


# --- DLQ actions ----------------------------------------------------------------------------------


def test_requeue_one(staff_client):
    ids = dead_letters("emails", ["a", "b"])
    original = Message.objects.get(id=ids[0]).received_at
    response = staff_client.post(f"/ui/queues/emails-dlq/messages/{ids[0]}/requeue/", **HX)
    assert response.status_code == 200
    assert b"Requeued 1 message to emails." in response.content
    assert b'id="flash"' in response.content and b'hx-swap-oob="true"' in response.content
    assert f'id="m-{ids[0]}"'.encode() not in response.content  # the row goes away
    m = Message.objects.get(id=ids[0])
    assert (m.queue, m.is_dlq, m.status, m.attempts, m.failure_reason, m.received_at) == (
        "emails", False, 0, 0, None, original)
    assert Message.objects.filter(queue="emails-dlq").count() == 1


def test_requeue_all_is_a_move_task_answered_at_once_with_its_card(staff_client):
    """"Requeue all" starts a move task (the moves job does the work, in batches) and answers with
    the DLQ page's moves card at once: running (here: waiting, no process runs the jobs), 0 of 3."""
    from forqapp.models import MoveTask
    dead_letters("emails", ["a", "b", "c"])
    response = staff_client.post("/ui/queues/emails-dlq/moves/", **HX)
    assert response.status_code == 200
    html = response.content.decode()
    (task,) = MoveTask.objects.all()
    assert (task.source, task.destination, task.rate, task.status, task.to_move) == ("emails-dlq", None, None,
                                                                                   "RUNNING", 3)
    assert "Requeueing 3 messages of emails-dlq back to their queue: a move task, shown below." in html
    assert "It waits for the jobs process: none runs on this database now." in html
    assert 'id="queue-moves"' in html and 'hx-trigger="every 2s"' in html  # it refreshes itself while it runs
    assert 'data-testid="move-status">waiting for the jobs process<' in html and "0 of 3" in html
    assert 'data-testid="no-jobs"' in html and f"/ui/queues/emails-dlq/moves/{task.handle}/cancel/" in html
    assert Message.objects.filter(queue="emails-dlq").count() == 3  # nothing moved by the request itself
    assert run_all() == 3
    # The card's next refresh: completed, no more polling, and the (now empty) list out of band.
    card = staff_client.get("/ui/queues/emails-dlq/moves/", **HX).content.decode()
    assert 'data-testid="move-status">completed<' in card and "3 of 3" in card and "hx-trigger" not in card
    assert 'id="message-list" class="card table-card" hx-swap-oob="true"' in card and "This queue is empty." in card
    assert Message.objects.filter(queue="emails", is_dlq=False, status=0).count() == 3
    assert not Message.objects.filter(queue="emails-dlq").exists()
    # Without htmx, the card's URL is the page.
    assert staff_client.get("/ui/queues/emails-dlq/moves/")["Location"] == "/ui/queues/emails-dlq/"


def test_requeue_all_at_a_rate_and_while_the_jobs_run(staff_client, clock):
    from forqapp.worker import jobs

    dead_letters("emails", ["a", "b", "c", "d", "e"])
    assert services.acquire_lease(jobs.LEASE, "another-process", 60_000)  # a process runs the jobs
    response = staff_client.post("/ui/queues/emails-dlq/moves/", {"rate": "2"}, **HX).content.decode()
    assert "Requeueing 5 messages of emails-dlq back to their queue, 2 a second" in response
    assert "waits for the jobs process" not in response and 'data-testid="move-status">running<' in response
    (task,) = forqapp.list_moves("emails-dlq")
    assert task.rate == 2
    assert jobs.run("moves") == 2  # the rate's worth a second
    card = staff_client.get("/ui/queues/emails-dlq/moves/", **HX).content.decode()
    assert "2 of 5" in card and 'value="40"' in card and "hx-trigger" in card and 'id="message-list"' not in card
    for bad in ("0", "501", "fast"):
        refused = staff_client.post("/ui/queues/emails-dlq/moves/", {"rate": bad}, **HX).content.decode()
        assert "Not started: rate must be an integer from 1 to 500 (messages a second)" in refused
    again = staff_client.post("/ui/queues/emails-dlq/moves/", **HX).content.decode()
    assert "Not started: queue &#x27;emails-dlq&#x27; has a running move task already" in again
    clock.advance(60)  # the lease ran out: nobody runs the jobs now
    card = staff_client.get("/ui/queues/emails-dlq/moves/", **HX).content.decode()
    assert "waiting for the jobs process" in card
    assert len(forqapp.list_moves("emails-dlq")) == 1


def test_delete_one(staff_client):
    ids = dead_letters("emails", ["a", "b"])
    response = staff_client.delete(f"/ui/queues/emails-dlq/messages/{ids[1]}/", **HX)
    assert b"Deleted 1 message from emails-dlq." in response.content
    assert list(Message.objects.values_list("id", flat=True)) == [ids[0]]
    again = staff_client.delete(f"/ui/queues/emails-dlq/messages/{ids[1]}/", **HX)
    assert b"Deleted 0 messages" in again.content


def test_delete_all(staff_client):
    dead_letters("emails", ["a", "b", "c"])
    forqapp.send("emails", "keep me")
    response = staff_client.delete("/ui/queues/emails-dlq/messages/", **HX)
    assert b"Deleted 3 messages from emails-dlq." in response.content
    assert list(Message.objects.values_list("content", flat=True)) == ["keep me"]


CONFIRMED = {"confirmed": "yes"}


def asks(response, action: str, question: str, label: str) -> None:
    """A server-rendered confirmation page (a POST without htmx, whose hx-confirm never ran): the
    question escaped, one form posting ``confirmed=yes`` with a CSRF token back to ``action``."""
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    html = response.content.decode()
    assert "<html" in html and 'data-testid="confirm-page"' in html and escape(question) in html
    (form,) = re.findall(r'<form method="post" action="([^"]*)">(.*?)</form>', html, re.S)
    assert form[0] == action
    assert '<input type="hidden" name="confirmed" value="yes">' in form[1]
    assert re.search(r'name="csrfmiddlewaretoken" value="[^"]+"', form[1])
    assert re.search(rf'data-testid="confirm-submit">{re.escape(label)}</button>', form[1])


def test_actions_without_htmx_redirect_with_a_message(staff_client):
    dead_letters("emails", ["a", "b"])
    response = staff_client.post("/ui/queues/emails-dlq/moves/", {**CONFIRMED, "rate": "7"}, follow=True)
    assert response.redirect_chain[-1][0] == "/ui/queues/emails-dlq/"
    assert b"Requeueing 2 messages of emails-dlq back to their queue, 7 a second" in response.content
    assert b"0 of 2" in response.content  # the page's moves card


def test_dlq_actions_without_htmx_ask_first_then_act_once_confirmed(staff_client):
    ids = dead_letters("emails", ["a", "b", "c", "d"])
    one, two = f"/ui/queues/emails-dlq/messages/{ids[0]}/requeue/", f"/ui/queues/emails-dlq/messages/{ids[1]}/"
    every, delete_all = "/ui/queues/emails-dlq/moves/", "/ui/queues/emails-dlq/messages/"
    for url, method, question, label in [
        (one, "post", f"Requeue message {ids[0]} back to emails?", "Requeue"),
        (two, "post", f"Permanently delete message {ids[1]}? This cannot be undone.", "Delete"),
        (two, "delete", f"Permanently delete message {ids[1]}? This cannot be undone.", "Delete"),
        (every, "post", "Requeue every message of emails-dlq back to the queue it was dead-lettered from? A move "
                        "task does it in the background, in batches; they keep their place in the queue (FIFO by "
                        "receive time).", "Requeue all"),
        (delete_all, "post", "Permanently delete all messages of emails-dlq? This cannot be undone.", "Delete all"),
        (delete_all, "delete", "Permanently delete all messages of emails-dlq? This cannot be undone.", "Delete all"),
    ]:
        asks(getattr(staff_client, method)(url), url, question, label)
        asks(staff_client.post(url, {"confirmed": "no"}), url, question, label)
    assert Message.objects.filter(queue="emails-dlq", is_dlq=True).count() == 4  # nothing happened

    response = staff_client.post(one, CONFIRMED, follow=True)
    assert response.redirect_chain[-1][0] == "/ui/queues/emails-dlq/" and b"Requeued 1 message to emails." in response.content
    response = staff_client.post(two, CONFIRMED, follow=True)
    assert b"Deleted 1 message from emails-dlq." in response.content and not Message.objects.filter(id=ids[1]).exists()
    assert Message.objects.get(id=ids[0]).queue == "emails"
    assert not forqapp.list_moves("emails-dlq")
    response = staff_client.post(every, CONFIRMED, follow=True)
    assert b"Requeueing 2 messages of emails-dlq back to their queue" in response.content
    run_all()
    dead_letters("emails", ["e"])
    response = staff_client.post(delete_all, CONFIRMED, follow=True)
    assert b"Deleted 1 message from emails-dlq." in response.content
    assert not Message.objects.filter(queue="emails-dlq").exists()
    assert Message.objects.filter(queue="emails", is_dlq=False).count() == 3


def test_a_dlq_action_on_a_regular_queue_refuses_without_asking(staff_client):
    message_id = forqapp.send("emails", "a")
    response = staff_client.post(f"/ui/queues/emails/messages/{message_id}/requeue/", follow=True)
    assert b"dead-letter queues only" in response.content and b"confirm-page" not in response.content
    assert Message.objects.filter(id=message_id, queue="emails").exists()


def test_actions_are_dlq_only(staff_client):
    message_id = forqapp.send("emails", "a")
    response = staff_client.post(f"/ui/queues/emails/messages/{message_id}/requeue/", **HX)
    assert b"dead-letter queues only" in response.content
    staff_client.delete("/ui/queues/emails/messages/", **HX)
    staff_client.delete(f"/ui/queues/emails/messages/{message_id}/", **HX)
    assert Message.objects.filter(id=message_id, queue="emails").exists()


def test_no_state_change_on_get(staff_client):
    ids = dead_letters("emails", ["a"])
    staff_client.get("/ui/queues/emails-dlq/moves/", **HX)
    assert not forqapp.list_moves("emails-dlq")
    assert staff_client.get(f"/ui/queues/emails-dlq/messages/{ids[0]}/requeue/").status_code == 405
    staff_client.get("/ui/queues/emails-dlq/messages/", **HX)
    staff_client.get(f"/ui/queues/emails-dlq/messages/{ids[0]}/", **HX)
    assert Message.objects.filter(queue="emails-dlq").count() == 1


def test_csrf_is_enforced(staff):
    ids = dead_letters("emails", ["a", "b"])
    c = Client(enforce_csrf_checks=True)
    c.force_login(staff)
    assert c.post("/ui/queues/emails-dlq/moves/", **HX).status_code == 403
    assert c.delete(f"/ui/queues/emails-dlq/messages/{ids[0]}/", **HX).status_code == 403
    assert c.delete("/ui/queues/emails-dlq/messages/", **HX).status_code == 403
    assert Message.objects.filter(queue="emails-dlq").count() == 2
    # With the token htmx sends (hx-headers on <body>), it works.
    page = c.get("/ui/queues/emails-dlq/")
    token = page.context["csrf_token"]
    ok = c.delete(f"/ui/queues/emails-dlq/messages/{ids[0]}/", HTTP_X_CSRFTOKEN=str(token), **HX)
    assert ok.status_code == 200
    assert Message.objects.filter(queue="emails-dlq").count() == 1


# --- history and charts ----------------------------------------------------------------------------


def test_depth_history_records_prunes_and_charts(staff_client):
    now = services.now_ms()
    day = 24 * 3_600_000
    assert history.record_depth_samples([("emails", False, 9)], now=now - day - 600_000) == 1
    assert history.record_depth_samples([("emails", False, 3), ("emails-dlq", True, 2)],
                                        now=now - 3_600_000) == 2
    # the same 5-minute slot: nothing more
    assert history.record_depth_samples([("emails", False, 4)], now=now - 3_600_000 + 1) == 0
    # the DLQ was drained: it gets a 0; the day-old sample is pruned
    assert history.record_depth_samples([("emails", False, 7)], now=now) == 2
    samples = set(QueueDepthSample.objects.values_list("queue", "depth", "sampled_at"))
    assert samples == {("emails", 3, now - 3_600_000), ("emails-dlq", 2, now - 3_600_000),
                       ("emails", 7, now), ("emails-dlq", 0, now)}
    series = history.depth_series(now=now, buckets=24)
    assert series["emails"][:22] == [None] * 22 and series["emails"][22:] == [3, 7]
    assert series["emails-dlq"][22:] == [2, 0]
    forqapp.send("emails", "x")
    page = staff_client.get("/ui/")
    assert b"<svg" in page.content and b"<polyline" in page.content


@pytest.mark.django_db(transaction=True)
def test_first_dashboard_of_a_process_never_waits_for_a_slow_count(settings, monkeypatch):
    staff = User.objects.create_user("cold", password="pw-cold-123", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_queue"))  # the dashboard's
    client = Client()
    client.force_login(staff)
    forqapp.send_many("cold", ["x"] * 3)
    settings.FORQ_UI_COLD_WAIT_MS = 50
    release = threading.Event()
    real_overview = queries.overview

    def slow_overview(now):
        release.wait(5)  # a count over a large database
        return real_overview(now)

    monkeypatch.setattr(queries, "overview", slow_overview)
    start = time.monotonic()
    first = client.get("/ui/")
    assert time.monotonic() - start < 4  # not held by the slow count (5 s)
    assert b"Counting messages" in first.content
    release.set()
    for _ in range(50):  # the background count lands; the page's own refresh shows it
        refreshed = client.get("/ui/", HTTP_HX_REQUEST="true")
        if b"Counting messages" not in refreshed.content:
            break
        time.sleep(0.1)
    assert b'id="q-cold"' in refreshed.content


# --- queues: policy, paused state, counts (issue 12) --------------------------------------------------


def emails_with_a_policy() -> None:
    """emails: max_attempts 3 and a 30 s visibility of its own, paused; 2 ready, 1 delayed, 1 in
    flight, 1 failed, 2 in its DLQ."""
    services.configure_queue("emails", max_attempts=3, visibility_timeout=30)
    forqapp.send_many("emails", ["r1", "r2"])
    forqapp.send("emails", "later", delay=600)
    forqapp.send_many("emails", ["lease", "fail"])
    _, failing = services.claim_many("emails", 2)
    services.fail(failing, "boom")
    services.configure_queue("emails", paused=True)
    dead_letters("emails", ["x", "y"])


def test_queue_page_shows_policy_paused_state_and_counts(staff_client):
    emails_with_a_policy()
    page = staff_client.get("/ui/queues/emails/")
    assert page.status_code == 200
    stats, dlq = page.context["stats"], page.context["dlq_stats"]
    assert (stats.ready, stats.delayed, stats.processing, stats.failed, dlq.total) == (2, 1, 1, 1, 2)
    html = page.content.decode()
    for testid, value in [("total", 5), ("ready", 2), ("delayed", 1), ("in-flight", 1), ("failed", 1)]:
        assert f'data-testid="{testid}">{value}<' in html
    assert 'data-testid="dlq"><a href="/ui/queues/emails-dlq/">2</a>' in html
    assert 'data-testid="queue-state" title="Receives get nothing; produces are still accepted">paused' in html
    policy = html.split('data-testid="policy"')[1].split("</dl>")[0]
    assert '<div class="override" data-field="max_attempts">' in policy
    assert "<dd>3 <span" in policy and "<dd>30 s <span" in policy
    assert '<div class="global" data-field="retention">' in policy and "<dd>1 d <span" in policy
    assert 'href="/admin/forqapp/queue/emails/change/"' in html
    assert 'action="/ui/queues/emails/resume/"' in html and 'data-testid="resume"' in html
    # The counts agree with the services' (an ended lease counts as ready there and here).
    info = services.queue_info("emails")
    assert info.counts == {"ready": 2, "delayed": 1, "in_flight": 1, "failed": 1, "dlq": 2}


def test_an_ended_lease_counts_as_ready(staff_client):
    forqapp.send("emails", "a")
    delivered = services.claim("emails")
    assert staff_client.get("/ui/queues/emails/").context["stats"].processing == 1
    services.change_visibility(delivered, 0)
    stats = staff_client.get("/ui/queues/emails/").context["stats"]
    assert (stats.ready, stats.processing) == (1, 0)
    assert services.queue_info("emails").counts["ready"] == 1


def test_dlq_page_shows_its_queues_policy_without_a_pause_button(staff_client):
    emails_with_a_policy()
    html = staff_client.get("/ui/queues/emails-dlq/").content.decode()
    assert "Policy of emails" in html and 'data-testid="queue-state"' in html
    assert "/pause/" not in html and "/resume/" not in html
    assert 'data-testid="dlq"' not in html  # a DLQ has no DLQ


def test_a_queue_without_a_row_follows_the_global_settings(staff_client):
    html = staff_client.get("/ui/queues/nothing-yet/").content.decode()
    assert 'data-testid="queue-state">active' in html
    assert 'class="override"' not in html and "/admin/forqapp/queue/" not in html
    assert 'data-testid="pause"' in html


def test_pause_and_resume_from_the_queue_page(staff_client):
    forqapp.send("emails", "a")
    response = staff_client.post("/ui/queues/emails/pause/", **HX)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="queue-policy"')
    assert 'data-testid="queue-state"' in html and ">paused<" in html and 'data-testid="resume"' in html
    assert "Paused emails: receives get nothing until it is resumed" in html and 'hx-swap-oob="true"' in html
    assert services.queue_info("emails").paused and forqapp.receive("emails") is None
    response = staff_client.post("/ui/queues/emails/resume/", **HX)
    assert "Resumed emails" in response.content.decode() and 'data-testid="pause"' in response.content.decode()
    assert not services.queue_info("emails").paused
    # Without htmx: a confirmation page first (nothing changes), then a redirect with the message.
    asks(staff_client.post("/ui/queues/emails/pause/"), "/ui/queues/emails/pause/",
         "Pause emails? Receives get nothing until it is resumed; produces are still accepted.", "Pause")
    assert not services.queue_info("emails").paused
    response = staff_client.post("/ui/queues/emails/pause/", CONFIRMED, follow=True)
    assert response.redirect_chain[-1][0] == "/ui/queues/emails/"
    assert b"Paused emails" in response.content and services.queue_info("emails").paused
    response = staff_client.post("/ui/queues/emails/resume/", follow=True)  # no hx-confirm: no question
    assert b"Resumed emails" in response.content and not services.queue_info("emails").paused


def test_pause_is_post_staff_csrf_and_regular_queues_only(client, staff):
    forqapp.send("emails", "a")
    c = Client(enforce_csrf_checks=True)
    c.force_login(staff)
    opened = c.get("/ui/queues/emails/pause/")  # a browser that opens an action's address: a page that says so
    assert opened.status_code == 405 and opened["Allow"] == "POST"
    assert b"Not a page" in opened.content and b'href="/ui/"' in opened.content
    assert c.get("/ui/queues/emails/pause/", **HX).content == b""  # (htmx: nothing to swap)
    assert c.post("/ui/queues/emails/pause/", **HX).status_code == 403  # no CSRF token
    assert not services.queue_info("emails").paused
    token = str(c.get("/ui/queues/emails/").context["csrf_token"])
    assert c.post("/ui/queues/emails/pause/", HTTP_X_CSRFTOKEN=token, **HX).status_code == 200
    assert services.queue_info("emails").paused
    refused = c.post("/ui/queues/emails-dlq/pause/", HTTP_X_CSRFTOKEN=token, **HX)
    assert b"cannot be paused" in refused.content and refused["HX-Reswap"] == "none"
    User.objects.create_user("joe", password="pw-joe-12345")
    client.login(username="joe", password="pw-joe-12345")
    assert client.post("/ui/queues/emails/resume/").status_code == 302
    assert services.queue_info("emails").paused


def test_dashboard_marks_paused_queues_and_lists_configured_empty_ones(staff_client):
    forqapp.send("emails", "a")
    services.configure_queue("emails", paused=True)
    services.configure_queue("reports", max_length=10)  # configured, no messages yet
    page = staff_client.get("/ui/")
    rows = {r.name: r for r in page.context["overview"].rows}
    assert rows["emails"].paused and not rows["reports"].paused and rows["reports"].configured
    html = page.content.decode()
    assert html.split('id="q-emails"')[1].split("</tr>")[0].count('data-testid="paused"') == 1
    assert 'data-testid="paused"' not in html.split('id="q-reports"')[1].split("</tr>")[0]
    assert '<a class="qname" href="/ui/queues/reports/">reports</a>' in html


# --- messages: issue 12's fields ----------------------------------------------------------------------


def test_message_details_show_priority_attributes_dedup_sequence_and_lease(staff_client):
    mid = forqapp.send("emails", "a", priority=-7, attributes={"tenant": XSS, "kind": "welcome"},
                       dedup_id="order-42")
    m = Message.objects.get(id=mid)
    html = staff_client.get(f"/ui/queues/emails/messages/{mid}/", **HX).content.decode()
    assert 'data-testid="priority">-7<' in html
    assert f'data-testid="sequence">{m.sequence}<' in html and m.sequence > 0
    assert 'data-testid="dedup-id">order-42<' in html
    assert "<code>tenant</code></th><td><code>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;</code>" in html
    assert XSS not in html
    assert 'data-testid="lease-end"' not in html  # not in processing
    delivered = services.claim("emails")
    html = staff_client.get(f"/ui/queues/emails/messages/{mid}/", **HX).content.decode()
    lease_end = queries_dt(delivered.lease_expires_at)
    assert f'data-testid="lease-end">{lease_end} UTC<' in html
    assert "First delivered" in html
    services.change_visibility(delivered, 0)
    html = staff_client.get(f"/ui/queues/emails/messages/{mid}/", **HX).content.decode()
    assert "(ended: the next receive takes it)" in html
    # The list's rows do not load the details' fields (one query for the page, not one per row).
    closed = staff_client.get(f"/ui/queues/emails/messages/{mid}/?closed=1", **HX).content.decode()
    assert 'data-testid="priority"' not in closed


def queries_dt(ms: int) -> str:
    from forqapp.utils import ms_to_datetime

    when = ms_to_datetime(ms)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d}"


def test_queue_page_rows_cost_one_query(staff_client, django_assert_max_num_queries):
    forqapp.send_many("emails", [{"content": f"m{i}", "priority": i, "attributes": {"k": "v"}} for i in range(30)])
    staff_client.get("/ui/queues/emails/")
    with django_assert_max_num_queries(8):
        staff_client.get("/ui/queues/emails/", **HX)


def test_dead_letter_details_show_the_failure_reason(staff_client):
    dead_id = dead_letters("emails", ["x"])[0]
    html = staff_client.get(f"/ui/queues/emails-dlq/messages/{dead_id}/", **HX).content.decode()
    assert 'data-testid="failure-reason">max_attempts_reached<' in html


def test_a_dead_letter_shows_its_real_status_and_the_dlq_page_its_failure_not_a_due_column(staff_client):
    """A DLQ message is ready (consumable in its DLQ), as the API and Spark say: the page shows
    that status, and marks the queue — not the message — as a dead-letter queue, with each row's
    failure reason and when it moved there; a regular queue keeps its Due column."""
    dead_id = dead_letters("emails", ["x" * 40])[0]
    forqapp.send("emails", "live")
    page = staff_client.get("/ui/queues/emails-dlq/")
    dlq = page.content.decode()
    assert 'data-testid="ready">1<' in dlq  # the card and the row agree
    row = dlq.split(f'id="m-{dead_id}"')[1].split("</tbody>")[0]
    assert 'class="status ready" data-testid="state">ready<' in row
    assert ">dead<" not in dlq
    assert 'data-testid="reason">max_attempts_reached<' in row
    assert 'data-testid="moved-at"' in row
    head = dlq.split('<table class="messages">')[1].split("</thead>")[0]
    assert ">Failure reason<" in head and ">Moved at<" in head and ">Due<" not in head
    assert '<span class="badge danger">dead-letter queue</span>' in dlq
    assert "x" * 40 in row  # the preview is not cut short in the HTML
    queue = staff_client.get("/ui/queues/emails/").content.decode()
    assert 'class="status ready" data-testid="state">ready<' in queue
    head = queue.split('<table class="messages">')[1].split("</thead>")[0]
    assert ">Due<" in head and ">Failure reason<" not in head


# --- flow control (issue 13) ----------------------------------------------------------------------------


def unique(prefix: str) -> str:
    """A queue name of this test's own: the throttled-claims counter lives as long as the process."""
    return f"{prefix}-{forq_ids.new_ids(1)[0][-8:]}"


def limited(name: str):
    """``name``: max 2 in flight, 1 claim a minute; 2 leased, 1 ready; one claim held back by the
    rate and one by the concurrency limit. Returns the first delivery."""
    services.configure_queue(name, max_in_flight=2, rate="1/m")
    forqapp.send_many(name, ["a", "b", "c"])
    first = services.claim(name)
    assert first is not None and services.claim(name) is None  # the rate
    services.configure_queue(name, rate=None)
    assert services.claim(name) is not None and services.claim(name) is None  # every slot taken
    services.configure_queue(name, rate="1/m")
    return first


def test_queue_page_shows_in_flight_against_the_limit_the_rate_and_throttled_claims(staff_client):
    name = unique("emails")
    first = limited(name)
    html = staff_client.get(f"/ui/queues/{name}/").content.decode()
    assert 'data-testid="in-flight">2<span class="limit"' in html and "> / 2</span>" in html
    card = html.split('id="queue-flow"')[1].split("</section>")[0]
    assert f'hx-get="/ui/queues/{name}/flow/" hx-trigger="every 5s"' in card
    assert 'data-testid="full"' in card  # every slot taken
    assert 'data-testid="flow-in-flight">2 / 2<' in card and '<meter min="0" max="2" value="2"' in card
    assert 'data-testid="flow-rate">1/m (a claim every 1 min)<' in card
    assert "Throttled claims <span class=\"source\">since this server started</span>" in card
    assert '<span data-reason="concurrency">concurrency 1</span> · <span data-reason="rate">rate 1</span>' in card
    # The card refreshes by itself: an ack frees a slot, one more claim is held back.
    services.ack(first)
    assert services.claim(name) is None  # the rate still holds it back
    partial = staff_client.get(f"/ui/queues/{name}/flow/", **HX).content.decode()
    assert partial.lstrip().startswith('<section id="queue-flow"') and "<!doctype" not in partial
    assert 'data-testid="flow-in-flight">1 / 2<' in partial and 'data-testid="full"' not in partial
    assert '<span data-reason="rate">rate 2</span>' in partial
    assert staff_client.get(f"/ui/queues/{name}/flow/").status_code == 302  # a plain GET: the page


def test_queues_without_limits_have_no_flow_card(staff_client):
    forqapp.send("emails", "a")
    services.claim("emails")
    html = staff_client.get("/ui/queues/emails/").content.decode()
    assert 'id="queue-flow"' not in html and 'data-testid="in-flight">1</span>' in html
    assert staff_client.get("/ui/queues/emails/flow/", **HX).content.strip() == b""
    services.configure_queue("emails", max_in_flight=3)
    dlq = staff_client.get("/ui/queues/emails-dlq/").content.decode()
    assert 'id="queue-flow"' not in dlq  # a DLQ's messages are never claimed


def test_dashboard_shows_in_flight_against_the_limit_and_the_rate(staff_client):
    name = unique("emails")
    limited(name)
    forqapp.send("sms", "a")
    html = staff_client.get("/ui/").content.decode()
    row = html.split(f'id="q-{name}"')[1].split("</tr>")[0]
    assert '<span class="badge" data-testid="rate" title="Rate limit: at most this many receives">1/m</span>' in row
    assert '<td class="num" title="Max in flight 2">2<span class="limit"> / 2</span></td>' in row
    sms = html.split('id="q-sms"')[1].split("</tr>")[0]
    assert 'data-testid="rate"' not in sms and '<td class="num">0</td>' in sms


def test_throttled_claims_add_up_every_process_with_a_multiprocess_dir(tmp_path, monkeypatch):
    """With PROMETHEUS_MULTIPROC_DIR (forq_serve with metrics on), the claims held back in every
    process of the server count, read from the directory's counter files."""
    import subprocess
    import sys

    from forqapp.ui import flow

    script = ("from forqapp import metrics\n"
              "import sys\n"
              "for reason in sys.argv[1:]: metrics.throttled('emails', reason)\n")
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(__import__("pathlib").Path(__file__).resolve().parent.parent)}
    for reasons in (["rate", "rate", "concurrency"], ["rate"]):  # two processes
        subprocess.run([sys.executable, "-c", script, *reasons], env=env, check=True)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    flow.clear()
    assert flow.throttled_claims() == {"emails": {"rate": 3, "concurrency": 1}}
    f = flow.of("emails", {"max_in_flight": 4, "rate": "10/s"}, 3)
    assert (f.in_flight_text, f.rate_text, f.throttled_items) == (
        "3 / 4", "10/s (a claim every 100 ms)", [("concurrency", 1), ("rate", 3)])
    flow.clear()


def test_the_ui_listener_without_a_multiprocess_dir_says_it_cannot_count(staff_client, monkeypatch):
    """forq_serve's UI process makes no claim: with metrics off (no PROMETHEUS_MULTIPROC_DIR) its own
    counter would always read 0, so the pages say the count is not available instead."""
    from forqapp.ui import flow

    name = unique("emails")
    limited(name)
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    monkeypatch.setattr(flow, "_serves_pages_only", True)
    html = staff_client.get(f"/ui/queues/{name}/").content.decode()
    assert 'data-testid="not-counted">not counted here: turn on FORQ_METRICS_ENABLED' in html
    assert 'data-reason="rate"' not in html and 'data-testid="flow-in-flight">2 / 2<' in html
    row = staff_client.get("/admin/forqapp/queue/").content.decode().split(f'value="{name}"')[1].split("</tr>")[0]
    assert ">not counted</span>" in row


# --- schedules (issue 13) -------------------------------------------------------------------------------


def test_schedules_page_lists_schedules_and_is_linked_from_the_nav(staff_client):
    from forqapp.services import schedules
    from forqapp.ui import scheduling

    nightly = forqapp.schedule("nightly-report", queue="reports", content="{}", cron="0 3 * * *")
    forqapp.schedule("poll", queue="feeds", content="go", every=300, catch_up="skip", paused=True, priority=3)
    assert '<a href="/ui/schedules/">Schedules</a>' in staff_client.get("/ui/").content.decode()
    response = staff_client.get("/ui/schedules/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'hx-get="/ui/schedules/" hx-trigger="every 5s' in html
    row = html.split('id="s-nightly-report"')[1].split("</tbody>")[0]
    assert '<a href="/ui/queues/reports/">reports</a>' in row and "<code>cron 0 3 * * *</code>" in row
    assert f'data-testid="next-run">{scheduling.when(nightly.next_run_at)} <span class="muted">(in ' in row
    assert 'data-testid="last-run"><span class="muted">never</span>' in row
    assert 'data-testid="schedule-state">active<' in row and 'data-testid="pause"' in row
    assert 'action="/ui/schedules/nightly-report/run/"' in row and 'href="/admin/forqapp/schedule/nightly-report/change/"' in row
    poll = html.split('id="s-poll"')[1].split("</tbody>")[0]
    assert "<code>every 5 min</code>" in poll and ">skip<" in poll and "p3" in poll
    assert 'data-testid="schedule-state">paused<' in poll and 'data-testid="resume"' in poll
    partial = staff_client.get("/ui/schedules/", **HX).content.decode()
    assert partial.lstrip().startswith('<div id="schedules"') and "<!doctype" not in partial
    schedules.unschedule("nightly-report")
    schedules.unschedule("poll")
    assert 'data-testid="no-schedules"' in staff_client.get("/ui/schedules/").content.decode()


def test_pause_resume_and_run_now_from_the_schedules_page(staff_client):
    from forqapp.services import schedules

    before = forqapp.schedule("nightly", queue="reports", content='{"r": 1}', cron="0 3 * * *", priority=2,
                              attributes={"kind": "report"})
    response = staff_client.post("/ui/schedules/nightly/pause/", **HX)
    html = response.content.decode()
    assert html.lstrip().startswith('<tbody class="schedule" id="s-nightly"')
    assert 'data-testid="schedule-state">paused<' in html and 'data-testid="resume"' in html
    assert "Paused nightly: it sends nothing until it is resumed." in html and 'hx-swap-oob="true"' in html
    info = schedules.get("nightly")
    assert info.paused and info.next_run_at == before.next_run_at
    html = staff_client.post("/ui/schedules/nightly/resume/", **HX).content.decode()
    assert "Resumed nightly: next run" in html and "the ticks missed while it was paused are skipped" in html
    assert not schedules.get("nightly").paused
    # Run now: one message on its queue, its next run unchanged.
    html = staff_client.post("/ui/schedules/nightly/run/", **HX).content.decode()
    m = Message.objects.get(queue="reports")
    assert f"Sent nightly&#x27;s message to reports now (message {m.id}); its next run is unchanged." in html
    assert (m.content, m.priority, m.attributes_dict) == ('{"r": 1}', 2, {"kind": "report"})
    assert schedules.get("nightly").next_run_at == before.next_run_at
    assert forqapp.receive("reports").id == m.id
    # Without htmx: a confirmation page first (nothing changes), then a redirect with the message.
    asks(staff_client.post("/ui/schedules/nightly/pause/"), "/ui/schedules/nightly/pause/",
         "Pause nightly? It sends nothing until it is resumed; the ticks it misses meanwhile are skipped.", "Pause")
    asks(staff_client.post("/ui/schedules/nightly/run/"), "/ui/schedules/nightly/run/",
         "Send nightly's message to reports now? Its ticks are not changed.", "Run now")
    assert not schedules.get("nightly").paused and Message.objects.filter(queue="reports").count() == 1
    response = staff_client.post("/ui/schedules/nightly/pause/", CONFIRMED, follow=True)
    assert response.redirect_chain[-1][0] == "/ui/schedules/"
    assert b"Paused nightly" in response.content and schedules.get("nightly").paused
    response = staff_client.post("/ui/schedules/nightly/run/", CONFIRMED, follow=True)
    assert b"Sent nightly&#x27;s message to reports now" in response.content
    assert Message.objects.filter(queue="reports").count() == 2


def test_a_schedule_deleted_meanwhile_leaves_the_page(staff_client):
    html = staff_client.post("/ui/schedules/gone/run/", **HX).content.decode()
    assert "No schedule &#x27;gone&#x27;: it was deleted meanwhile." in html and "<tbody" not in html
    assert not Message.objects.exists()
    assert staff_client.post("/ui/schedules/bad name!/pause/", **HX).status_code == 404


def test_schedule_actions_are_post_staff_and_csrf(client, staff):
    from forqapp.services import schedules

    forqapp.schedule("nightly", queue="reports", content="{}", cron="0 3 * * *")
    c = Client(enforce_csrf_checks=True)
    c.force_login(staff)
    for action in ("pause", "resume", "run"):
        assert c.get(f"/ui/schedules/nightly/{action}/").status_code == 405
        assert c.post(f"/ui/schedules/nightly/{action}/", **HX).status_code == 403  # no CSRF token
    assert not schedules.get("nightly").paused and not Message.objects.exists()
    token = str(c.get("/ui/schedules/").context["csrf_token"])
    assert c.post("/ui/schedules/nightly/run/", HTTP_X_CSRFTOKEN=token, **HX).status_code == 200
    assert Message.objects.filter(queue="reports").count() == 1
    User.objects.create_user("joe", password="pw-joe-12345")
    client.login(username="joe", password="pw-joe-12345")
    assert client.get("/ui/schedules/").status_code == 302
    assert client.post("/ui/schedules/nightly/pause/").status_code == 302
    assert not schedules.get("nightly").paused


def test_schedules_page_escapes_and_reads_once(staff_client, django_assert_max_num_queries):
    for i in range(10):
        forqapp.schedule(f"s{i}", queue="reports", content=XSS, every=60 + i)
    staff_client.get("/ui/schedules/")
    with django_assert_max_num_queries(4):  # session, user, the schedules
        html = staff_client.get("/ui/schedules/", **HX).content.decode()
    assert html.count('<tbody class="schedule"') == 10 and XSS not in html


# --- a database that cannot serve -------------------------------------------------------------


def _disk_full(*args, **kwargs):
    import sqlite3

    raise sqlite3.OperationalError("database or disk is full")


def test_a_ui_action_on_a_full_disk_is_a_503_that_says_so(staff_client, monkeypatch, caplog):
    forqapp.send("emails", "a")
    monkeypatch.setattr(services, "configure_queue", _disk_full)
    response = staff_client.post("/ui/queues/emails/pause/", **HX)  # htmx: a flash, nothing swapped
    html = response.content.decode()
    assert response["HX-Reswap"] == "none" and response["Retry-After"] == "5"
    assert 'hx-swap-oob="true"' in html and "Not done: the database&#x27;s disk is full. Nothing was changed" in html
    with caplog.at_level("WARNING"):
        for _ in range(3):
            response = staff_client.post("/ui/queues/emails/pause/", CONFIRMED)  # a plain form: a page
    assert not [r for r in caplog.records if r.name == "django.request"]  # only forqapp's line a second
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert b'data-testid="unavailable"' in response.content and b"disk is full" in response.content
    assert not services.queue_info("emails").paused


def test_other_errors_in_a_ui_action_stay_500(staff_client, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(services, "configure_queue", broken)
    staff_client.raise_request_exception = False
    response = staff_client.post("/ui/queues/emails/pause/", **HX)
    assert response.status_code == 500 and b"unavailable" not in response.content


def test_the_admin_on_a_full_disk_is_a_503_page_not_a_500(staff, monkeypatch):
    """The admin's login saves a session: on a full disk the demo project's handler500 answers 503."""
    from django.contrib.sessions.backends.db import SessionStore

    monkeypatch.setattr(SessionStore, "save", _disk_full)
    c = Client(raise_request_exception=False)
    response = c.post("/admin/login/?next=/admin/", {"username": "staff", "password": "pw-staff-123"})
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert b"Not done: the database&#x27;s disk is full." in response.content
    assert b"<nav" not in response.content  # the standalone page: nothing in it reads the database


def test_a_503_for_a_full_disk_logs_one_line_not_a_traceback(staff, monkeypatch, caplog):
    """Django logs an uncaught exception with its traceback after handler500 answers, unless the
    response is marked logged: forqapp's 503 is, and says it in one line a second (one here)."""
    from django.contrib.sessions.backends.db import SessionStore

    from forqapp import errors

    monkeypatch.setattr(SessionStore, "save", _disk_full)
    monkeypatch.setattr(errors, "_said", {})
    c = Client(raise_request_exception=False)
    for _ in range(3):
        response = c.post("/admin/login/?next=/admin/", {"username": "staff", "password": "pw-staff-123"})
        assert response.status_code == 503
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
    lines = [r.getMessage() for r in caplog.records if "disk is full" in r.getMessage()]
    assert lines == ["/admin/login/: the database's disk is full; answered 503 (this line at most once a second)"]
    monkeypatch.setattr(SessionStore, "save", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("a bug")))
    assert c.post("/admin/login/", {"username": "staff", "password": "pw-staff-123"}).status_code == 500
    assert any(r.exc_info and r.name == "django.request" for r in caplog.records)  # any other error: as Django logs it


def test_forqapps_login_and_logout_on_a_full_disk_are_503_without_a_handler500(staff, settings, monkeypatch):
    """The login writes (a new session; a failure counted), the logout too (the session deleted):
    a 503 page in a project that did not set the optional handler500 (they answered a bare 500)."""
    from django.contrib.sessions.backends.db import SessionStore

    settings.ROOT_URLCONF = "tests.urls_without_handler500"
    c = Client(raise_request_exception=False)
    c.get("/ui/login/")  # a session, not yet written
    monkeypatch.setattr(SessionStore, "save", _disk_full)
    response = c.post("/ui/login/", {"username": "staff", "password": "pw-staff-123"})
    assert response.status_code == 503 and b"disk is full" in response.content, response
    monkeypatch.setattr(services, "login_failed", _disk_full)
    response = c.post("/ui/login/", {"username": "staff", "password": "wrong"})
    assert response.status_code == 503 and b"disk is full" in response.content, response
    monkeypatch.undo()
    settings.ROOT_URLCONF = "tests.urls_without_handler500"
    c.force_login(staff)
    monkeypatch.setattr(SessionStore, "delete", _disk_full)
    response = c.post("/ui/logout/")
    assert response.status_code == 503 and b"disk is full" in response.content, response


def test_login_lands_on_the_first_page_the_user_may_see(db):
    from django.contrib.auth.models import Permission

    user = User.objects.create_user("keyholder", password="pw-keys-12345", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_apikey"))
    c = Client()
    response = c.post("/ui/login/", {"username": "keyholder", "password": "pw-keys-12345"}, follow=True)
    assert response.redirect_chain[-1][0] == "/ui/keys/" and response.status_code == 200
    user.user_permissions.clear()
    c.force_login(User.objects.get(pk=user.pk))
    response = c.get("/ui/")  # no page at all: the 403 page, with the navigation's Log out
    assert response.status_code == 403 and b"Log out" in response.content
    assert b"You do not have the permission to view queues." in response.content


def test_the_ui_listener_answers_favicon_ico(client, settings):
    """Browsers ask for /favicon.ico on pages that name no icon (Django's bare 403/404 pages)."""
    settings.ROOT_URLCONF = "project.urls_ui"
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("/forqapp/favicon.svg")
    icon = client.get(response["Location"])
    assert icon.status_code == 200 and b"<svg" in b"".join(icon.streaming_content)
    icon.close()


def test_the_ui_process_serves_a_bounded_number_of_requests_at_once(monkeypatch):
    """Each request holds a thread and a database connection: 200 admin loads at once took 99 of a
    PostgreSQL server's 100 connections. The others wait their turn (once their body is in)."""
    import asyncio

    from django.core.handlers.asgi import ASGIHandler

    from forqapp.ui.asgi import BoundedASGIHandler

    running, most = 0, 0

    async def handle(self, scope, receive, send):  # Django's own, counting
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})

    monkeypatch.setattr(ASGIHandler, "handle", handle)
    bounded = BoundedASGIHandler(3)
    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {"type": "http", "method": "GET", "path": "/", "headers": []}

    async def main():
        await asyncio.gather(*(bounded.handle(scope, receive, send) for _ in range(20)))

    asyncio.run(main())
    assert most == 3 and len(sent) == 20


def test_the_empty_dashboards_example_uses_the_apis_address(staff_client, settings):
    settings.FORQ_API_ADDR = ":9090"  # every interface: reached as localhost
    assert b"http://localhost:9090/api/v1/queues/emails/messages" in staff_client.get("/ui/").content
    settings.FORQ_API_ADDR = "queue.internal:8443"
    assert b"http://queue.internal:8443/api/v1/queues/emails/messages" in staff_client.get("/ui/").content


# --- message groups ---------------------------------------------------------------------------


def test_queue_page_lists_the_busiest_groups_and_the_group_policy(staff_client):
    services.configure_queue("tenants", group_concurrency=2, group_rate="5/s")
    for i in range(3):
        forqapp.send("tenants", f"a{i}", group="tenant-a")
    forqapp.send("tenants", "b0", group="tenant:b")
    services.claim_many("tenants", 10)
    page = staff_client.get("/ui/queues/tenants/")
    assert page.status_code == 200
    assert [(g.name, g.ready, g.in_flight) for g in page.context["groups"]] == [("tenant-a", 2, 1), ("tenant:b", 0, 1)]
    html = page.content.decode()
    card = html.split('data-testid="groups"')[1].split("</section>")[0]
    assert 'data-testid="group-policy">Per group: at most 2 in flight, at most 5/s<' in card
    assert '<tr data-group="tenant-a"><td><code>tenant-a</code></td><td class="num">2</td><td class="num">1</td>' in card
    assert '<tr data-group="tenant:b"><td><code>tenant:b</code></td><td class="num">0</td><td class="num">1</td>' in card
    policy = html.split('data-testid="policy"')[1].split("</dl>")[0]
    assert '<div class="override" data-field="group_concurrency">' in policy and "<dd>2 <span" in policy
    assert '<div class="override" data-field="group_rate">' in policy and "<dd>5/s <span" in policy
    # the same card through htmx (the body partial)
    assert b'data-testid="groups"' in staff_client.get("/ui/queues/tenants/", **HX).content


def test_a_queue_without_groups_or_group_limits_has_no_groups_card_nor_has_a_dlq(staff_client):
    forqapp.send("emails", "x")
    dead_letters("emails", ["y"])
    for url in ("/ui/queues/emails/", "/ui/queues/emails-dlq/"):
        page = staff_client.get(url)
        assert page.context["groups"] is None and b'data-testid="groups"' not in page.content
    policy = staff_client.get("/ui/queues/emails/").content.decode().split('data-testid="policy"')[1]
    assert '<div class="global" data-field="group_concurrency">' in policy and "<dd>no limit <span" in policy


def test_message_details_show_the_group(staff_client):
    grouped = forqapp.send("emails", "x", group="customer/42")
    plain = forqapp.send("emails", "y")
    assert b'<code data-testid="group">customer/42</code>' in staff_client.get(
        f"/ui/queues/emails/messages/{grouped}/", **HX).content
    assert b'data-testid="group"' not in staff_client.get(f"/ui/queues/emails/messages/{plain}/", **HX).content


@pytest.mark.parametrize("url", LOGIN_URLS)
def test_an_invalid_username_is_said_and_its_nul_never_echoed(url, staff):
    """A NUL in the username: the field's error is shown (the UI's page re-rendered with none), and
    the NUL is not echoed into the page; a password left out likewise says so."""
    response, ok = log_in(url, "st\x00aff", "wrong", address="10.5.5.5")
    html = response.content.decode()
    assert response.status_code == 200 and not ok
    assert "Null characters are not allowed." in html
    assert "\x00" not in html and "st\ufffdaff" in html
    response, ok = log_in(url, "staff", "", address="10.5.5.6")
    assert not ok and "This field is required." in response.content.decode()
    response, ok = log_in(url, "x" * 151, "wrong", address="10.5.5.7")
    assert not ok and "Please enter the correct username and password" in response.content.decode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("url", LOGIN_URLS)
def test_concurrent_wrong_passwords_get_no_more_checks_than_the_throttle_allows(url, staff):
    """100 wrong passwords at once from one fresh address, 20 threads each with a database
    connection of its own: exactly FORQ_LOGIN_MAX_FAILURES (5) are checked (told "Please enter the
    correct…"), the others refused as blocked (before, each read "not blocked" before any failure
    was counted: 12 were checked); then the right password is refused too."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    def attempt(k: int) -> str:
        try:
            response, ok = log_in(url, "staff", f"wrong-{k}", address="10.6.6.6")
            assert not ok
            return response.content.decode()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=20) as pool:
        pages = list(pool.map(attempt, range(100)))
    checked = [page for page in pages if "Please enter the correct" in page]
    refused = [page for page in pages if "Too many failed logins" in page]
    assert (len(checked), len(refused)) == (5, 95)
    response, ok = log_in(url, "staff", "pw-staff-123", address="10.6.6.6")
    assert not ok and BLOCKED in response.content.decode()
