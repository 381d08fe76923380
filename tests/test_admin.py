# ruff: noqa: S106  (test passwords)
"""Django admin: read-only lists and detail, escaped content, DLQ-only actions with confirmation."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

import forqapp
from forqapp import ids as forq_ids
from forqapp import services, store
from forqapp.models import Message

pytestmark = pytest.mark.django_db(transaction=True)
XSS = '{"html": "<script>alert(1)</script>"}'


@pytest.fixture
def admin_client_(db):
    user = User.objects.create_user("root", password="pw-root-123", is_staff=True, is_superuser=True)
    c = Client()
    c.force_login(user)
    return c


def dead(queue: str, n: int) -> list[str]:
    now = services.now_ms()
    ids = forq_ids.new_ids(n)
    store.for_alias(connection.alias).insert(
        [store.NewMessage(i, queue + "-dlq", XSS, now, now, now + 1000) for i in ids], is_dlq=True
    )
    return ids


def test_changelists_filters_and_search(admin_client_):
    mid = forqapp.send("emails", "a")
    d = dead("emails", 2)
    page = admin_client_.get("/admin/forqapp/message/")
    assert page.status_code == 200 and mid.encode() in page.content and d[0].encode() in page.content
    assert b"?queue=emails-dlq" in page.content
    filtered = admin_client_.get("/admin/forqapp/message/?dlq=yes")
    assert mid.encode() not in filtered.content and d[0].encode() in filtered.content
    found = admin_client_.get(f"/admin/forqapp/message/?q={mid}")
    assert mid.encode() in found.content and d[0].encode() not in found.content
    dl = admin_client_.get("/admin/forqapp/deadletter/")
    assert mid.encode() not in dl.content and d[1].encode() in dl.content


def test_detail_is_read_only_escaped_and_pretty(admin_client_):
    d = dead("emails", 1)[0]
    page = admin_client_.get(f"/admin/forqapp/message/{d}/change/")
    assert page.status_code == 200
    assert b"<script>alert(1)</script>" not in page.content
    assert b"&quot;html&quot;: &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;" in page.content
    assert b'name="_save"' not in page.content
    assert admin_client_.get("/admin/forqapp/message/add/").status_code == 403


@pytest.mark.parametrize("action", ["requeue_messages", "delete_messages"])
def test_actions_confirm_then_act_on_dlq_only(admin_client_, action):
    regular = forqapp.send("emails", "a")
    d = dead("emails", 2)
    data = {"action": action, "_selected_action": [regular, *d]}
    confirm = admin_client_.post("/admin/forqapp/message/", data)
    assert confirm.status_code == 200 and b"Are you sure?" in confirm.content
    assert b"1 selected message not in a dead-letter queue will be skipped" in confirm.content
    assert Message.objects.filter(queue="emails-dlq").count() == 2  # nothing yet
    done = admin_client_.post("/admin/forqapp/message/", {**data, "post": "yes"}, follow=True)
    assert done.status_code == 200
    assert not Message.objects.filter(queue="emails-dlq").exists()
    assert Message.objects.filter(id=regular, queue="emails").exists()
    if action == "requeue_messages":
        assert b"Requeued 2 messages." in done.content
        assert Message.objects.filter(queue="emails", is_dlq=False).count() == 3
    else:
        assert b"Deleted 2 messages." in done.content
        assert Message.objects.count() == 1


def test_non_staff_cannot_use_the_admin(client):
    User.objects.create_user("joe", password="pw-joe-12345")
    client.login(username="joe", password="pw-joe-12345")
    assert client.get("/admin/forqapp/message/").status_code == 302


def test_the_consumers_error_shows_in_the_admin_and_the_ui(admin_client_):
    d, long = dead("emails", 2)
    Message.objects.filter(id=d).update(failure_reason="fatal_error",
                                        last_error="forqapp.errors.FatalError: no <b>recipient</b>")
    Message.objects.filter(id=long).update(last_error="ValueError: " + "x" * 300)
    for url in ("/admin/forqapp/deadletter/", "/admin/forqapp/message/"):
        page = admin_client_.get(url).content.decode()
        assert "last error" in page.lower() and "fatal_error" in page
        assert "forqapp.errors.FatalError: no &lt;b&gt;recipient&lt;/b&gt;" in page  # escaped
        assert "ValueError: " + "x" * 68 + "…" in page  # cut in the list, whole in its title
    for url in (f"/admin/forqapp/deadletter/{d}/change/", f"/admin/forqapp/message/{d}/change/"):
        page = admin_client_.get(url).content.decode()
        assert "forqapp.errors.FatalError: no &lt;b&gt;recipient&lt;/b&gt;" in page
    ui = admin_client_.get(f"/ui/queues/emails-dlq/messages/{d}/")
    assert ui.status_code == 200
    assert 'data-testid="last-error">forqapp.errors.FatalError: no &lt;b&gt;recipient&lt;/b&gt;' in ui.content.decode()
