# ruff: noqa: S106  (test passwords)
"""The admin and the HTMX page of scoped API keys (issue 16): staff only, CSRF, the secret shown once
(no-store, not kept in the session), confirmation for revoke and rotate, an audit event per change.
The same flows in a real browser: tests/test_keys_browser.py."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils.html import escape

from forqapp.keys import cache, service
from forqapp.keys.cache import for_token
from forqapp.keys.models import ApiKey, KeyEvent

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.forget()


@pytest.fixture
def staff_client(staff):
    c = Client(enforce_csrf_checks=True)
    c.force_login(staff)
    return c


def csrf(c: Client, url: str) -> str:
    page = c.get(url)
    assert page.status_code == 200
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)


def test_admin_add_shows_the_secret_once(staff_client):
    token = csrf(staff_client, "/admin/forqapp/apikey/add/")
    r = staff_client.post("/admin/forqapp/apikey/add/", {"name": "orders-producer", "grants_text": "orders:produce",
                                                         "expires": "", "csrfmiddlewaretoken": token})
    assert r.status_code == 200, r.content[:500]
    assert "no-store" in r["Cache-Control"]
    html = r.content.decode()
    shown = re.search(r'data-testid="token">([^<]+)<', html).group(1)
    key = for_token(shown)
    assert key is not None and key.allows("orders", "produce") and not key.allows("orders", "consume")
    secret = shown.split(".", 1)[1]
    assert secret not in staff_client.get("/admin/forqapp/apikey/").content.decode()
    change = staff_client.get(f"/admin/forqapp/apikey/{ApiKey.objects.get().pk}/change/").content.decode()
    assert secret not in change and "orders:produce" in change and "created" in change
    assert secret not in str(dict(staff_client.session))
    assert list(KeyEvent.objects.values_list("action", "actor", "via")) == [("created", "staff", "admin")]


def test_admin_expires_takes_a_duration_or_a_date_as_the_keys_page_does(staff_client):
    import time

    token = csrf(staff_client, "/admin/forqapp/apikey/add/")
    r = staff_client.post("/admin/forqapp/apikey/add/", {"name": "thirty", "grants_text": "orders:read",
                                                         "expires": "30d", "csrfmiddlewaretoken": token})
    assert r.status_code == 200 and 'data-testid="token"' in r.content.decode(), r.content.decode()[:2000]
    expires = ApiKey.objects.get(name="thirty").expires_at
    assert abs(expires - (time.time() * 1000 + 30 * 86_400_000)) < 60_000
    r = staff_client.post("/admin/forqapp/apikey/add/", {"name": "dated", "grants_text": "orders:read",
                                                         "expires": "2099-01-02 03:04", "csrfmiddlewaretoken": token})
    assert r.status_code == 200 and ApiKey.objects.get(name="dated").expires_at == 4_071_006_240_000  # UTC
    for bad, says in (("soon", "neither a duration"), ("99999999d", "100 years"), ("2001-01-01", "in the past")):
        r = staff_client.post("/admin/forqapp/apikey/add/", {"name": "bad", "grants_text": "orders:read",
                                                             "expires": bad, "csrfmiddlewaretoken": token})
        assert r.status_code == 200 and says in r.content.decode(), bad
    assert not ApiKey.objects.filter(name="bad").exists()
    change = staff_client.get(f"/admin/forqapp/apikey/{ApiKey.objects.get(name='dated').pk}/change/")
    assert 'value="2099-01-02 03:04:00"' in change.content.decode()
    # The audit log says the expiry as a date, in UTC as every column does (not Unix milliseconds).
    assert "orders:read; expires 2099-01-02 03:04:00 UTC" in change.content.decode()
    assert "4071006240000" not in change.content.decode()


def test_admin_refuses_a_bad_grant(staff_client):
    token = csrf(staff_client, "/admin/forqapp/apikey/add/")
    r = staff_client.post("/admin/forqapp/apikey/add/", {"name": "x", "grants_text": "orders*:produce",
                                                         "csrfmiddlewaretoken": token})
    assert r.status_code == 200 and "a prefix pattern ends with" in r.content.decode()
    assert not ApiKey.objects.exists()


def test_admin_edit_revoke_and_rotate_behind_confirmation(staff_client):
    issued = service.create("worker", ["orders:consume"], actor="t", via="cli")
    pk = issued.key.pk
    token = csrf(staff_client, f"/admin/forqapp/apikey/{pk}/change/")
    r = staff_client.post(f"/admin/forqapp/apikey/{pk}/change/", {
        "grants_text": "orders:consume\norders:read", "expires": "", "csrfmiddlewaretoken": token})
    assert r.status_code == 302, r.content.decode()[:3000]
    assert ApiKey.objects.get().grants == ["orders:consume", "orders:read"]
    assert for_token(issued.token).allows("orders", "read")

    token = csrf(staff_client, "/admin/forqapp/apikey/")
    confirm = staff_client.post("/admin/forqapp/apikey/", {"action": "rotate_keys", "_selected_action": [pk],
                                                           "csrfmiddlewaretoken": token})
    assert confirm.status_code == 200 and "Rotate: yes" in confirm.content.decode()
    assert for_token(issued.token) is not None  # nothing happened yet
    done = staff_client.post("/admin/forqapp/apikey/", {"action": "rotate_keys", "_selected_action": [pk],
                                                        "post": "yes", "csrfmiddlewaretoken": token})
    new_token = re.search(r'data-testid="token">([^<]+)<', done.content.decode()).group(1)
    assert for_token(issued.token) is None and for_token(new_token) is not None

    staff_client.post("/admin/forqapp/apikey/", {"action": "revoke_keys", "_selected_action": [pk], "post": "yes",
                                                 "csrfmiddlewaretoken": token})
    assert for_token(new_token) is None
    assert [e.action for e in KeyEvent.objects.order_by("at", "id")] == ["created", "edited", "rotated", "revoked"]
    # A revoked key stays revoked: disabling or enabling it is refused, by name, and changes nothing.
    other = service.create("other", ["orders:read"], actor="t", via="cli")
    for action, said in (("disable_keys", "Disabled 1 key."), ("enable_keys", "Enabled 1 key.")):
        done = staff_client.post("/admin/forqapp/apikey/", {
            "action": action, "_selected_action": [pk, other.key.pk], "post": "yes", "csrfmiddlewaretoken": token},
            follow=True)
        shown = [str(m) for m in done.context["messages"]][-2:]  # (the revoke's message came first)
        verb = "disabled" if action == "disable_keys" else "enabled"
        assert shown == [f"'worker' is revoked: it cannot be {verb}", said], shown
    assert service.state(ApiKey.objects.get(pk=pk)) == "revoked" and ApiKey.objects.get(pk=pk).enabled
    assert [e.action for e in KeyEvent.objects.filter(key_id=pk).order_by("at", "id")] == [
        "created", "edited", "rotated", "revoked"]
    # Keys are never deleted (the audit log stays): no delete action, no delete page.
    assert staff_client.get(f"/admin/forqapp/apikey/{pk}/delete/").status_code == 403


def test_ui_page_create_rotate_revoke(staff_client):
    page = staff_client.get("/ui/keys/")
    assert page.status_code == 200 and b"No scoped keys yet" in page.content
    token = csrf(staff_client, "/ui/keys/")
    r = staff_client.post("/ui/keys/create/", {"name": "p", "grants": "orders:produce\norders.*:read", "expires": "7d"},
                          HTTP_HX_REQUEST="true", HTTP_X_CSRFTOKEN=token)
    assert r.status_code == 200 and "no-store" in r["Cache-Control"]
    html = r.content.decode()
    assert "<html" not in html  # the partial
    shown = re.search(r'data-testid="token">([^<]+)<', html).group(1)
    assert for_token(shown).allows("orders.eu", "read")
    key = ApiKey.objects.get()
    assert key.expires_at is not None
    listing = staff_client.get("/ui/keys/").content.decode()
    assert shown.split(".", 1)[1] not in listing and "orders.*:read" in listing
    r = staff_client.post(f"/ui/keys/{key.access_key_id}/rotate/", HTTP_HX_REQUEST="true", HTTP_X_CSRFTOKEN=token)
    rotated = re.search(r'data-testid="token">([^<]+)<', r.content.decode()).group(1)
    assert for_token(shown) is None and for_token(rotated) is not None
    r = staff_client.post(f"/ui/keys/{key.access_key_id}/revoke/", HTTP_HX_REQUEST="true", HTTP_X_CSRFTOKEN=token)
    assert "Revoked p" in r.content.decode() and for_token(rotated) is None
    assert [e.via for e in KeyEvent.objects.all()] == ["ui", "ui", "ui"]


def confirmation(response, action: str, question: str) -> str:
    """A server-rendered confirmation page: the whole page, ``question`` escaped, one form posting
    to ``action`` with ``confirmed=yes`` and a CSRF token (returned)."""
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    html = response.content.decode()
    assert "<html" in html and 'data-testid="confirm-page"' in html
    assert escape(question) in html
    (form,) = re.findall(r'<form method="post" action="([^"]*)">(.*?)</form>', html, re.S)
    assert form[0] == action
    assert '<input type="hidden" name="confirmed" value="yes">' in form[1] and 'data-testid="confirm-submit"' in form[1]
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form[1]).group(1)


def test_ui_rotate_and_revoke_without_htmx_ask_first(staff_client):
    """JavaScript off (a plain form submit, no HX-Request): no hx-confirm dialog ran, so the server
    asks on a page of its own; only its Confirm (``confirmed=yes``, with the CSRF token) acts."""
    issued = service.create("<i>ops</i> & co", ["orders:consume"], actor="t", via="cli")
    key_id = issued.key.access_key_id
    listing = staff_client.get("/ui/keys/").content.decode()
    for action in ("rotate", "revoke"):  # the no-JavaScript fallback: plain forms to these URLs
        assert f'method="post" action="/ui/keys/{key_id}/{action}/"' in listing
    token = csrf(staff_client, "/ui/keys/")
    questions = {"rotate": "Rotate <i>ops</i> & co? It gets a new secret; the current one stops working.",
                 "revoke": "Revoke <i>ops</i> & co for good? Its clients are refused within seconds."}
    for action, question in questions.items():
        url = f"/ui/keys/{key_id}/{action}/"
        for posted in ({"csrfmiddlewaretoken": token}, {"csrfmiddlewaretoken": token, "confirmed": "1"}):
            asked = staff_client.post(url, posted)
            confirmation(asked, url, question)
            assert "<i>ops</i>" not in asked.content.decode()
    key = ApiKey.objects.get()
    assert key.revoked_at is None and key.rotated_at is None  # nothing happened
    assert for_token(issued.token) is not None
    assert list(KeyEvent.objects.values_list("action", flat=True)) == ["created"]
    # Confirm without the CSRF token: refused, nothing happens.
    assert staff_client.post(f"/ui/keys/{key_id}/rotate/", {"confirmed": "yes"}).status_code == 403
    assert ApiKey.objects.get().rotated_at is None

    asked = staff_client.post(f"/ui/keys/{key_id}/rotate/", {"csrfmiddlewaretoken": token})
    form_token = confirmation(asked, f"/ui/keys/{key_id}/rotate/", questions["rotate"])
    done = staff_client.post(f"/ui/keys/{key_id}/rotate/", {"csrfmiddlewaretoken": form_token, "confirmed": "yes"})
    assert done.status_code == 200 and "no-store" in done["Cache-Control"] and "<html" in done.content.decode()
    rotated = re.search(r'data-testid="token">([^<]+)<', done.content.decode()).group(1)
    assert for_token(issued.token) is None and for_token(rotated) is not None
    done = staff_client.post(f"/ui/keys/{key_id}/revoke/", {"csrfmiddlewaretoken": form_token, "confirmed": "yes"})
    assert "Revoked &lt;i&gt;ops&lt;/i&gt; &amp; co" in done.content.decode() and for_token(rotated) is None
    assert [(e.action, e.via) for e in KeyEvent.objects.order_by("at", "id")] == [
        ("created", "cli"), ("rotated", "ui"), ("revoked", "ui")]


def test_ui_htmx_rotate_and_revoke_act_at_once(staff_client):
    """htmx asked with hx-confirm already: its POST acts, with no confirmed field."""
    issued = service.create("worker", ["orders:consume"], actor="t", via="cli")
    token = csrf(staff_client, "/ui/keys/")
    url = f"/ui/keys/{issued.key.access_key_id}"
    rotated = staff_client.post(f"{url}/rotate/", HTTP_HX_REQUEST="true", HTTP_X_CSRFTOKEN=token)
    assert 'data-testid="confirm-page"' not in rotated.content.decode() and "<html" not in rotated.content.decode()
    assert ApiKey.objects.get().rotated_at is not None and for_token(issued.token) is None
    revoked = staff_client.post(f"{url}/revoke/", HTTP_HX_REQUEST="true", HTTP_X_CSRFTOKEN=token)
    assert "Revoked worker" in revoked.content.decode() and ApiKey.objects.get().revoked_at is not None


def test_ui_refuses_bad_input_and_escapes(staff_client):
    token = csrf(staff_client, "/ui/keys/")
    r = staff_client.post("/ui/keys/create/", {"name": "<b>x</b>", "grants": "orders:write"}, HTTP_X_CSRFTOKEN=token)
    assert r.status_code == 400 and "actions are" in r.content.decode()
    assert "<b>x</b>" not in r.content.decode() and "&lt;b&gt;x&lt;/b&gt;" in r.content.decode()
    r = staff_client.post("/ui/keys/create/", {"name": "x", "grants": "a:read", "expires": "soon"}, HTTP_X_CSRFTOKEN=token)
    assert r.status_code == 400 and not ApiKey.objects.exists()


def test_pages_need_staff_and_csrf(staff):
    anonymous = Client(enforce_csrf_checks=True)
    assert anonymous.get("/ui/keys/").status_code == 302
    assert anonymous.get("/admin/forqapp/apikey/").status_code == 302
    User.objects.create_user("joe", password="pw-joe-12345")
    joe = Client()
    joe.login(username="joe", password="pw-joe-12345")
    assert joe.post("/ui/keys/create/", {"name": "x", "grants": "*:manage"}).status_code == 302
    no_token = Client(enforce_csrf_checks=True)
    no_token.force_login(staff)
    assert no_token.post("/ui/keys/create/", {"name": "x", "grants": "*:manage"}).status_code == 403
    assert not ApiKey.objects.exists()
