# ruff: noqa: S106  (test passwords)
"""Django admin: read-only message lists and detail, escaped content, DLQ-only actions with
confirmation; the queues: policy, state and counts, the policy form, pause, resume and purge."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

import forqapp
from forqapp import ids as forq_ids
from forqapp import services, store
from forqapp.models import Message
from forqapp.utils import ms_to_datetime

pytestmark = pytest.mark.django_db(transaction=True)
XSS = '{"html": "<script>alert(1)</script>"}'


def dead(queue: str, n: int) -> list[str]:
    now = services.now_ms()
    ids = forq_ids.new_ids(n)
    store.for_alias(connection.alias).insert(
        [store.NewMessage(i, queue + "-dlq", XSS, now, now, now + 1000) for i in ids], is_dlq=True
    )
    return ids


def test_changelists_filters_and_search(staff_client):
    mid = forqapp.send("emails", "a")
    d = dead("emails", 2)
    page = staff_client.get("/admin/forqapp/message/")
    assert page.status_code == 200 and mid.encode() in page.content and d[0].encode() in page.content
    assert b"?queue=emails-dlq" in page.content
    filtered = staff_client.get("/admin/forqapp/message/?dlq=yes")
    assert mid.encode() not in filtered.content and d[0].encode() in filtered.content
    found = staff_client.get(f"/admin/forqapp/message/?q={mid}")
    assert mid.encode() in found.content and d[0].encode() not in found.content
    dl = staff_client.get("/admin/forqapp/deadletter/")
    assert mid.encode() not in dl.content and d[1].encode() in dl.content


def test_the_lists_say_each_messages_real_status(staff_client):
    """A dead letter is stored as ready (waiting for a requeue): the lists say "ready", as the API
    and Spark do, never "dead" (its queue, the dead letters' list and its failure say what it is);
    a message not yet due is ready "(delayed)"; a lease that ended says so."""
    import re

    ready, later = forqapp.send("emails", "a"), forqapp.send("emails", "b", delay=3600)
    forqapp.send("lapsed", "c")
    lapsed = services.claim("lapsed", visibility_timeout=0)
    d = dead("emails", 1)[0]
    page = staff_client.get("/admin/forqapp/message/").content.decode()
    cells = {mid: re.sub("<[^>]*>", "", re.search(rf"{mid}.*?field-message_status\">(.*?)</td>", page, re.S).group(1))
             for mid in (ready, later, lapsed.id, d)}
    assert cells == {ready: "ready", later: "ready (delayed)", lapsed.id: "processing (lease ended)", d: "ready"}, cells
    for url in ("/admin/forqapp/deadletter/", f"/admin/forqapp/deadletter/{d}/change/", "/admin/forqapp/message/"):
        page = staff_client.get(url).content.decode()
        assert ">dead<" not in page and "dead</span>" not in page, url
    listing = staff_client.get("/admin/forqapp/deadletter/").content.decode()
    assert "<title>Dead letters | forqapp admin</title>" in listing and "<h1>Dead letters</h1>" in listing
    assert re.sub("<[^>]*>", "", re.search(r'field-message_status">(.*?)</td>', listing, re.S).group(1)) == "ready"


def test_detail_is_read_only_escaped_and_pretty(staff_client):
    d = dead("emails", 1)[0]
    page = staff_client.get(f"/admin/forqapp/message/{d}/change/")
    assert page.status_code == 200
    assert b"<script>alert(1)</script>" not in page.content
    assert b"&quot;html&quot;: &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;" in page.content
    assert b'name="_save"' not in page.content
    assert staff_client.get("/admin/forqapp/message/add/").status_code == 403


@pytest.mark.parametrize("action", ["requeue_messages", "delete_messages"])
def test_actions_confirm_then_act_on_dlq_only(staff_client, action):
    regular = forqapp.send("emails", "a")
    d = dead("emails", 2)
    data = {"action": action, "_selected_action": [regular, *d]}
    confirm = staff_client.post("/admin/forqapp/message/", data)
    assert confirm.status_code == 200 and b"Are you sure?" in confirm.content
    assert b"1 selected message not in a dead-letter queue will be skipped" in confirm.content
    assert Message.objects.filter(queue="emails-dlq").count() == 2  # nothing yet
    done = staff_client.post("/admin/forqapp/message/", {**data, "post": "yes"}, follow=True)
    assert done.status_code == 200
    assert not Message.objects.filter(queue="emails-dlq").exists()
    assert Message.objects.filter(id=regular, queue="emails").exists()
    if action == "requeue_messages":
        assert b"Requeued 2 messages." in done.content
        assert Message.objects.filter(queue="emails", is_dlq=False).count() == 3
    else:
        assert b"Deleted 2 messages." in done.content
        assert Message.objects.count() == 1


@pytest.mark.parametrize("codenames", [["view_message", "change_message", "delete_message"], ["view_queue"]])
def test_dead_letters_need_the_dead_letter_permissions_on_the_message_list_too(db, codenames):
    """The message list holds dead letters as well: a user with the message permissions alone
    neither sees nor requeues nor deletes them there (they could, and the UI refused them)."""
    from django.contrib.auth.models import Permission

    user = User.objects.create_user("msgs", password="pw-msgs-12345", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    c = Client()
    c.force_login(user)
    regular = forqapp.send("emails", "a")
    d = dead("emails", 2)
    page = c.get("/admin/forqapp/message/")
    if "view_message" not in codenames:
        assert page.status_code == 403
        return
    assert page.status_code == 200 and d[0].encode() not in page.content and regular.encode() in page.content
    assert b'value="requeue_messages"' not in page.content and b"?dlq=yes" not in page.content
    assert d[0].encode() not in c.get("/admin/forqapp/message/?dlq=yes").content
    assert c.get(f"/admin/forqapp/message/{d[0]}/change/").status_code == 302  # "does not exist": to the list
    for action in ("requeue_messages", "delete_messages"):
        c.post("/admin/forqapp/message/", {"action": action, "_selected_action": d, "post": "yes"})
    assert Message.objects.filter(id__in=d, queue="emails-dlq").count() == 2  # untouched
    assert c.get("/admin/forqapp/deadletter/").status_code == 403
    # With the dead-letter permissions: seen and requeued from the message list as well.
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_deadletter", "change_deadletter"]))
    c.force_login(User.objects.get(pk=user.pk))  # a fresh permission cache
    page = c.get("/admin/forqapp/message/?dlq=yes")
    assert d[0].encode() in page.content and b'value="requeue_messages"' in page.content
    assert b'value="delete_messages"' not in page.content  # no delete_deadletter
    c.post("/admin/forqapp/message/", {"action": "requeue_messages", "_selected_action": d, "post": "yes"})
    assert Message.objects.filter(id__in=d, queue="emails", is_dlq=False).count() == 2


def test_non_staff_cannot_use_the_admin(client):
    User.objects.create_user("joe", password="pw-joe-12345")
    client.login(username="joe", password="pw-joe-12345")
    assert client.get("/admin/forqapp/message/").status_code == 302


def test_the_consumers_error_shows_in_the_admin_and_the_ui(staff_client):
    d, long = dead("emails", 2)
    Message.objects.filter(id=d).update(failure_reason="fatal_error",
                                        last_error="forqapp.errors.FatalError: no <b>recipient</b>")
    Message.objects.filter(id=long).update(last_error="ValueError: " + "x" * 300)
    for url in ("/admin/forqapp/deadletter/", "/admin/forqapp/message/"):
        page = staff_client.get(url).content.decode()
        assert '<th scope="col" class="sortable column-failure">' in page
        assert '<strong class="forq-reason" title="fatal_error">fatal error</strong>' in page
        assert "forqapp.errors.FatalError: no &lt;b&gt;recipient&lt;/b&gt;" in page  # escaped
        assert "ValueError: " + "x" * 68 + "…" in page  # cut in the list, whole in its title
    for url in (f"/admin/forqapp/deadletter/{d}/change/", f"/admin/forqapp/message/{d}/change/"):
        page = staff_client.get(url).content.decode()
        assert "forqapp.errors.FatalError: no &lt;b&gt;recipient&lt;/b&gt;" in page
    ui = staff_client.get(f"/ui/queues/emails-dlq/messages/{d}/")
    assert ui.status_code == 200
    assert 'data-testid="last-error">forqapp.errors.FatalError: no &lt;b&gt;recipient&lt;/b&gt;' in ui.content.decode()


# --- messages: issue 12's fields ------------------------------------------------------------------


def test_message_detail_of_content_nested_too_deep_to_pretty_print(staff_client):
    mid = forqapp.send("emails", "[" * 5000 + "]" * 5000)
    page = staff_client.get(f"/admin/forqapp/message/{mid}/change/")
    assert page.status_code == 200 and b"[[[[[[[[" in page.content


def test_message_detail_shows_priority_attributes_dedup_sequence_and_lease(staff_client):
    mid = forqapp.send("emails", "a", priority=7, attributes={"tenant": "<b>acme</b>", "kind": "welcome"},
                       dedup_id="order-42")
    page = staff_client.get(f"/admin/forqapp/message/{mid}/change/").content.decode()
    m = Message.objects.get(id=mid)
    for label in ("priority", "sequence", "lease end", "first delivered", "dedup id", "attributes"):
        assert label in page.lower()
    assert f'<div class="readonly">{m.sequence}</div>' in page and m.sequence > 0
    assert '<div class="readonly">7</div>' in page
    assert "order-42" in page
    assert "<th><code>tenant</code></th><td><code>&lt;b&gt;acme&lt;/b&gt;</code></td>" in page  # escaped
    assert "<b>acme</b>" not in page
    assert "— (not in processing)" in page
    delivered = forqapp.receive("emails")
    assert delivered is not None and delivered.id == mid
    page = staff_client.get(f"/admin/forqapp/message/{mid}/change/").content.decode()
    lease_end = ms_to_datetime(delivered.lease_expires_at).strftime("%Y-%m-%d %H:%M:%S UTC")
    first = ms_to_datetime(delivered.first_received_at).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert lease_end in page and first in page and "(ended" not in page
    services.change_visibility(delivered, 0)  # the lease ends now: the next receive takes it
    page = staff_client.get(f"/admin/forqapp/message/{mid}/change/").content.decode()
    assert "(ended: the next receive takes it)" in page
    listing = staff_client.get("/admin/forqapp/message/").content.decode()
    assert '<td class="field-priority">7</td>' in listing


# --- queues ----------------------------------------------------------------------------------------


def queue_state():
    """emails: max_attempts 3 and a 30 s visibility of its own, paused; 2 ready, 1 delayed, 1 in
    flight, 1 failed, 2 in its DLQ. sms: the global policy, 1 ready."""
    services.configure_queue("emails", max_attempts=3, visibility_timeout=30, paused=True)
    forqapp.send_many("emails", ["r1", "r2"])
    forqapp.send("emails", "later", delay=600)
    forqapp.send_many("emails", ["lease", "fail"])
    services.configure_queue("emails", paused=False)
    leased, failing = services.claim_many("emails", 2)
    services.fail(failing, "boom")
    services.configure_queue("emails", paused=True)
    dead("emails", 2)
    forqapp.send("sms", "hi")
    return leased


def test_queue_list_shows_policy_state_and_counts(staff_client):
    queue_state()
    page = staff_client.get("/admin/forqapp/queue/")
    assert page.status_code == 200
    html = page.content.decode()
    emails, sms = html.split('class="field-name"')[1:3]
    # Policy: the queue's own values, a line each; the rest global; the whole policy in the tooltip.
    assert '<span class="forq-own">Max attempts: <strong>3</strong></span>' in emails
    assert '<span class="forq-own">Visibility timeout: <strong>30 s</strong></span>' in emails
    assert "the rest: global" in emails and "Retention: 1 d (global)" in emails  # (the tooltip)
    assert 'title="Max attempts: 5 (global) · ' in sms and ">the global settings</span>" in sms
    assert "forq-own" not in sms
    # Paused state and counts by state.
    assert 'alt="True"' in emails.split('class="field-policy"')[0]
    assert 'alt="False"' in sms.split('class="field-policy"')[0]
    for field, value in [("ready", 2), ("delayed", 1), ("in_flight", 1), ("failed", 1)]:
        assert f'<td class="field-{field}">{value}</td>' in emails
    assert '?queue=emails-dlq">2</a></td>' in emails
    assert '<td class="field-ready">1</td>' in sms and '<td class="field-dlq">0</td>' in sms
    assert staff_client.get("/admin/forqapp/queue/?q=ema").content.decode().count('class="field-name"') == 1


def test_queue_list_query_count_does_not_grow_with_queues(staff_client, django_assert_max_num_queries):
    for i in range(20):
        forqapp.send(f"q{i}", "m")
    staff_client.get("/admin/forqapp/queue/")
    with django_assert_max_num_queries(8):  # session, user, count, page, two grouped counts
        page = staff_client.get("/admin/forqapp/queue/")
    assert page.content.decode().count('class="field-name"') == 20


def test_pause_and_resume_actions(staff_client):
    forqapp.send("emails", "a")
    forqapp.send("sms", "b")
    done = staff_client.post("/admin/forqapp/queue/", {"action": "pause_queues", "_selected_action": ["emails", "sms"]},
                              follow=True)
    assert b"Paused 2 queues: emails, sms." in done.content
    assert services.queue_info("emails").paused and services.queue_info("sms").paused
    assert forqapp.receive("emails") is None  # paused: receives get nothing
    done = staff_client.post("/admin/forqapp/queue/", {"action": "resume_queues", "_selected_action": ["emails"]},
                              follow=True)
    assert b"Resumed 1 queue: emails." in done.content
    assert not services.queue_info("emails").paused and services.queue_info("sms").paused
    assert forqapp.receive("emails").content == "a"


def test_purge_asks_first_then_deletes_the_queues_messages(staff_client):
    queue_state()
    data = {"action": "purge_queues", "_selected_action": ["emails"]}
    confirm = staff_client.post("/admin/forqapp/queue/", data)
    assert confirm.status_code == 200 and b"Are you sure?" in confirm.content
    assert b"<li>emails: 5 messages</li>" in confirm.content
    assert b"cannot be undone" in confirm.content
    assert Message.objects.filter(queue="emails").count() == 5  # nothing yet
    done = staff_client.post("/admin/forqapp/queue/", {**data, "post": "yes"}, follow=True)
    assert b"Purged 1 queue (emails): deleted 5 messages." in done.content
    assert not Message.objects.filter(queue="emails").exists()
    assert Message.objects.filter(queue="emails-dlq").count() == 2  # its DLQ is kept
    assert Message.objects.filter(queue="sms").count() == 1
    info = services.queue_info("emails")
    assert info.paused and info.overrides["max_attempts"] == 3  # the queue and its policy stay


def test_purge_needs_the_delete_permission(db):
    from django.contrib.auth.models import Permission

    user = User.objects.create_user("ops", password="pw-ops-12345", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=["view_queue", "change_queue"]))
    c = Client()
    c.force_login(user)
    forqapp.send("emails", "a")
    page = c.get("/admin/forqapp/queue/").content.decode()
    assert 'value="pause_queues"' in page and 'value="purge_queues"' not in page
    c.post("/admin/forqapp/queue/", {"action": "purge_queues", "_selected_action": ["emails"], "post": "yes"})
    assert Message.objects.filter(queue="emails").count() == 1
    assert c.get("/admin/forqapp/queue/emails/delete/").status_code == 403  # no deletes at all


def policy_post(name: str, **fields) -> dict:
    """The change form's fields as a browser posts them, with what the page showed as initial."""
    info = services.queue_info(name)
    shown = {k: "" for k in ("max_attempts", "backoff", "visibility_timeout", "retention", "dlq_retention",
                             "max_length", "ordering", "dedup_window", "max_in_flight", "rate",
                             "group_concurrency", "group_rate")}
    for key, value in info.overrides.items():
        shown[key] = json.dumps(value) if key == "backoff" else str(value)
    data = {**shown, **{f"initial-{k}": v for k, v in shown.items()}}
    if info.paused:
        data["paused"] = data["initial-paused"] = "on"
    for key, value in fields.items():
        if key == "paused":
            data.pop("paused", None)
            if value:
                data["paused"] = "on"
        else:
            data[key] = value
    return data


def test_queue_page_shows_the_last_sequence_the_api_reports(staff_client):
    """(On PostgreSQL the stored column stays 0: the page once showed 0 there.)"""
    forqapp.send_many("numbered", ["a", "b", "c"])
    last = forqapp.queue_info("numbered").last_sequence
    assert last >= 3
    html = staff_client.get("/admin/forqapp/queue/numbered/change/").content.decode()
    assert re.search(rf"<label>last sequence:</label>\s*<div class=\"readonly\">{last}</div>", html, re.IGNORECASE)


def test_policy_form_saves_through_configure_queue(staff_client):
    forqapp.send("emails", "a")
    page = staff_client.get("/admin/forqapp/queue/emails/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="visibility_timeout"' in html and 'name="initial-visibility_timeout"' in html
    assert "Blank: the global setting (5 min)." in html
    assert "ready 1 · delayed 0 · in flight 0 · failed 0 · in the DLQ 0" in html
    data = policy_post("emails", max_attempts="3", backoff="1000, 2000", visibility_timeout="30",
                       retention="7200", dlq_retention="86400", max_length="100", ordering="lifo",
                       dedup_window="60", max_in_flight="4", rate="10/s", paused=True)
    done = staff_client.post("/admin/forqapp/queue/emails/change/", data, follow=True)
    assert done.status_code == 200 and b"was changed successfully" in done.content
    info = services.queue_info("emails")
    assert info.overrides == {"max_attempts": 3, "backoff": [1000, 2000], "visibility_timeout": 30,
                              "retention": 7200, "dlq_retention": 86400, "max_length": 100,
                              "ordering": "lifo", "dedup_window": 60, "max_in_flight": 4, "rate": "10/s"}
    assert info.paused
    # Blank resets a field to the global setting; "unlimited" attempts; JSON exponential backoff.
    data = policy_post("emails", max_attempts="unlimited", visibility_timeout="",
                       backoff='{"base_ms": 500, "max_ms": 60000, "jitter": 0.1}')
    staff_client.post("/admin/forqapp/queue/emails/change/", data)
    info = services.queue_info("emails")
    assert "visibility_timeout" not in info.overrides and info.policy["visibility_timeout"] == 300
    assert info.policy["max_attempts"] == "unlimited"
    assert info.policy["backoff"] == {"base_ms": 500, "max_ms": 60000, "jitter": 0.1}
    assert info.overrides["ordering"] == "lifo" and info.paused  # untouched fields kept


def test_policy_form_does_not_undo_a_change_made_meanwhile(staff_client):
    forqapp.send("emails", "a")
    data = policy_post("emails", max_attempts="4")  # the page, as loaded: not paused
    services.configure_queue("emails", paused=True)  # another admin pauses it meanwhile
    staff_client.post("/admin/forqapp/queue/emails/change/", data)
    info = services.queue_info("emails")
    assert info.overrides["max_attempts"] == 4 and info.paused


@pytest.mark.parametrize(("field", "value", "error"), [
    ("visibility_timeout", "50000", "visibility_timeout must be from 0 to 43200 seconds"),
    ("max_attempts", "-1", "max_attempts must be an integer from 1 to 1000000"),
    ("max_attempts", "many", "An integer, or &quot;unlimited&quot;."),
    ("backoff", "[1000, ", "Not valid JSON."),
    ("backoff", '{"base_ms": 5000, "max_ms": 10}', "backoff max_ms must be at least base_ms"),
    ("max_length", "0", "max_length must be an integer from 1 to 10**12"),
    ("dedup_window", "-5", "dedup_window must be from 0.001 to 43200 seconds"),
    ("retention", "nan", "Enter a number."),
    ("max_in_flight", "0", "max_in_flight must be an integer from 1 to 1000000"),
    ("rate", "fast", "rate must be"),
])
def test_policy_form_refuses_what_configure_queue_refuses(staff_client, field, value, error):
    forqapp.send("emails", "a")
    before = services.queue_info("emails")
    page = staff_client.post("/admin/forqapp/queue/emails/change/", policy_post("emails", **{field: value}))
    assert page.status_code == 200  # the form again
    html = page.content.decode()
    assert error in html
    assert f"field-{field}" in html.split(error)[0].rsplit('<div class="form-row', 1)[1]  # on its field
    assert services.queue_info("emails").overrides == before.overrides


def test_policy_form_shows_every_fields_error_at_once(staff_client):
    forqapp.send("emails", "a")
    page = staff_client.post("/admin/forqapp/queue/emails/change/",
                             policy_post("emails", max_attempts="-3", rate="10/x", max_in_flight="0"))
    html = page.content.decode()
    for field, error in [("max_attempts", "max_attempts must be an integer from 1 to 1000000"),
                         ("rate", "rate must be"), ("max_in_flight", "max_in_flight must be an integer")]:
        assert error in html, field
        assert f"field-{field}" in html.split(error)[0].rsplit('<div class="form-row', 1)[1]  # on its field


def test_add_a_queue(staff_client):
    page = staff_client.get("/admin/forqapp/queue/add/")
    assert page.status_code == 200 and b'name="name"' in page.content
    done = staff_client.post("/admin/forqapp/queue/add/", {"name": "reports", "max_length": "10", "ordering": "",
                                                            "visibility_timeout": "0"}, follow=True)
    assert done.status_code == 200 and b"was added successfully" in done.content
    info = services.queue_info("reports")
    assert info.overrides == {"max_length": 10, "visibility_timeout": 0} and not info.paused
    for name, error in [("bad name!", "invalid queue name"), ("reports-dlq", "cannot produce to dead-letter"),
                        ("reports", "already exists")]:
        page = staff_client.post("/admin/forqapp/queue/add/", {"name": name})
        assert page.status_code == 200 and error in page.content.decode()


def test_view_only_staff_see_the_queue_but_cannot_change_it(db):
    from django.contrib.auth.models import Permission

    user = User.objects.create_user("viewer", password="pw-viewer-123", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_queue"))
    c = Client()
    c.force_login(user)
    services.configure_queue("emails", max_attempts=2)
    page = c.get("/admin/forqapp/queue/emails/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="max_attempts"' not in html and '<strong title="set on this queue">2</strong>' in html
    assert 'value="pause_queues"' not in c.get("/admin/forqapp/queue/").content.decode()
    c.post("/admin/forqapp/queue/", {"action": "pause_queues", "_selected_action": ["emails"]})
    assert not services.queue_info("emails").paused
    assert "its messages" not in html and "its dead letters" not in html  # links it may not follow: none
    user.user_permissions.add(Permission.objects.get(codename="view_message"))
    c.force_login(User.objects.get(pk=user.pk))
    html = c.get("/admin/forqapp/queue/emails/change/").content.decode()
    assert "its messages" in html and "its page in the Forq UI" in html and "its dead letters" not in html
    dead("emails", 2)  # its DLQ holds messages: counted on the page, not linked
    queue_page = c.get("/ui/queues/emails/").content.decode()
    assert "/ui/queues/emails-dlq/" not in queue_page  # no link to the DLQ page, which would be a 403
    user.user_permissions.add(Permission.objects.get(codename="view_deadletter"))
    c.force_login(User.objects.get(pk=user.pk))
    assert "its dead letters" in c.get("/admin/forqapp/queue/emails/change/").content.decode()
    assert "→ emails-dlq" in c.get("/ui/queues/emails/").content.decode()


def test_a_newer_policy_field_gets_a_plain_form_field_and_shows_in_the_policy():
    from forqapp.admin.queues import LooseField
    from forqapp.ui import display

    field = LooseField(required=False)
    assert (field.clean("10"), field.clean(" 10/s "), field.clean(""), field.clean("true")) == (10, "10/s", None, True)
    items = display.policy_items({"max_attempts": 5, "rate": "10/s", "burst_size": 3, "paused": False},
                                 {"rate": "10/s"})
    assert [(i.label, i.value, i.overridden) for i in items] == [
        ("Max attempts", "5", False), ("Rate", "10/s", True), ("Burst size", "3", False)]


# --- flow control (issue 13) -------------------------------------------------------------------------


def limited_queue(name: str):
    """``name``: max 2 in flight and 1 claim a minute; 2 leased, 1 ready; one claim held back by
    the rate, one by the concurrency limit. Returns the first delivery."""
    services.configure_queue(name, max_in_flight=2, rate="1/m")
    forqapp.send_many(name, ["a", "b", "c"])
    first = services.claim(name)
    assert first is not None
    assert services.claim(name) is None  # the rate: the next slot is a minute away
    services.configure_queue(name, rate=None)
    assert services.claim(name) is not None
    assert services.claim(name) is None  # 2 in flight: every slot taken
    services.configure_queue(name, rate="1/m")
    return first


def test_queue_list_and_page_show_in_flight_against_the_limit_and_throttled_claims(staff_client):
    name = f"flow-{forq_ids.new_ids(1)[0][-8:]}"  # the counter lives as long as the process
    first = limited_queue(name)
    forqapp.send("sms", "hi")
    html = staff_client.get("/admin/forqapp/queue/").content.decode()
    assert "throttled claims" in html.lower() and 'since this server started">concurrency: 1</span>' in html
    row = html.split(f'value="{name}"')[1].split("</tr>")[0]
    assert '<td class="field-in_flight"><strong title="every slot taken' in row and ">2 / 2</strong>" in row
    assert ">concurrency: 1</span><span" in row and ">rate: 1</span>" in row
    sms = html.split('value="sms"')[1].split("</tr>")[0]
    assert '<td class="field-in_flight">0</td>' in sms and '<td class="field-throttled">—</td>' in sms
    page = staff_client.get(f"/admin/forqapp/queue/{name}/change/").content.decode()
    assert "in flight: 2 / 2 (every slot taken)" in page
    assert "rate: 1/m (a claim every 1 min)" in page
    assert "throttled claims (since this server started): 1 by the concurrency limit, 1 by the rate" in page
    # A delivery settles: a slot frees.
    services.ack(first)
    assert "in flight: 1 / 2</div>" in staff_client.get(f"/admin/forqapp/queue/{name}/change/").content.decode()
    assert "No limits" in staff_client.get("/admin/forqapp/queue/sms/change/").content.decode()


# --- schedules (issue 13) -----------------------------------------------------------------------------


def schedule_post(name: str | None = None, **fields) -> dict:
    """The schedule form as a browser posts it: on a schedule, with what the page showed as initial."""
    from forqapp.services import schedules

    shown = {"queue": "", "content": "", "cron": "", "every": "", "catch_up": "one", "priority": "0",
             "attributes": ""}
    paused = False
    if name is not None:
        info = schedules.get(name)
        shown.update(queue=info.queue, content=info.content, cron=info.cron or "",
                     every="" if info.every is None else f"{info.every:g}", catch_up=info.catch_up,
                     priority=str(info.priority), attributes=json.dumps(info.attributes) if info.attributes else "")
        paused = info.paused
    data = {**shown, **{f"initial-{k}": v for k, v in shown.items()}}
    if name is not None:
        data["initial-paused"] = str(paused)
    if paused:
        data["paused"] = "on"
    for key, value in fields.items():
        if key == "paused":
            data.pop("paused", None)
            if value:
                data["paused"] = "on"
        else:
            data[key] = value
    return data


def test_schedule_list_shows_timing_next_and_last_run_and_paused(staff_client):
    from forqapp.models import Schedule
    from forqapp.services import schedules

    nightly = forqapp.schedule("nightly-report", queue="reports", content="{}", cron="0 3 * * *")
    forqapp.schedule("poll", queue="feeds", content="go", every=300, catch_up="skip", paused=True)
    page = staff_client.get("/admin/forqapp/schedule/")
    assert page.status_code == 200
    html = page.content.decode()
    row, poll = html.split('class="field-name"')[1:3]
    next_run = ms_to_datetime(nightly.next_run_at).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert next_run.endswith("03:00:00 UTC")
    assert '<td class="field-queue">reports</td>' in row and '<td class="field-timing"><span class="nowrap">cron 0 3 * * *</span></td>' in row
    assert '<td class="field-catch_up">one</td>' in row
    assert f'<td class="field-next_run"><span class="nowrap">{next_run}</span> <span class="quiet">(in ' in row
    assert '<td class="field-last_run">never</td>' in row and 'alt="False"' in row
    assert '<td class="field-timing"><span class="nowrap">every 5 min</span></td>' in poll and "(paused: not sent)" in poll and 'alt="True"' in poll
    # After a tick: its last run.
    schedules.run_due()  # nothing due yet
    Schedule.objects.filter(name="nightly-report").update(next_run_at=services.now_ms() - 1000)  # time passes
    assert schedules.run_due() == 1
    info = schedules.get("nightly-report")
    row = staff_client.get("/admin/forqapp/schedule/").content.decode().split('class="field-name"')[1]
    last = ms_to_datetime(info.last_run_at).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f'<td class="field-last_run"><span class="nowrap">{last}</span> <span class="quiet">(' in row
    assert staff_client.get("/admin/forqapp/schedule/?q=feeds").content.decode().count('class="field-name"') == 1


def test_add_a_schedule_through_the_form(staff_client):
    from forqapp.services import schedules

    page = staff_client.get("/admin/forqapp/schedule/add/")
    assert page.status_code == 200 and b'name="cron"' in page.content and b'name="every"' in page.content
    data = {**schedule_post(), "name": "nightly-report", "queue": "reports", "content": '{"kind":\r\n"nightly"}',
            "cron": "0 3 * * *", "catch_up": "all", "priority": "5", "attributes": '{"tenant": "acme"}'}
    done = staff_client.post("/admin/forqapp/schedule/add/", data, follow=True)
    assert done.status_code == 200 and b"was added successfully" in done.content
    info = schedules.get("nightly-report")
    assert (info.queue, info.content, info.cron, info.every, info.catch_up, info.priority, info.attributes,
            info.paused) == ("reports", '{"kind":\n"nightly"}', "0 3 * * *", None, "all", 5, {"tenant": "acme"}, False)
    assert ms_to_datetime(info.next_run_at).strftime("%H:%M:%S") == "03:00:00"
    every = {**schedule_post(), "name": "poll", "queue": "feeds", "content": "go", "every": "90", "paused": "on"}
    staff_client.post("/admin/forqapp/schedule/add/", every)
    info = schedules.get("poll")
    assert (info.every, info.cron, info.paused) == (90, None, True)
    again = staff_client.post("/admin/forqapp/schedule/add/", data)
    assert again.status_code == 200 and "already exists" in again.content.decode()


@pytest.mark.parametrize(("field", "value", "error"), [
    ("cron", "61 * * * *", "cron &#x27;61 * * * *&#x27;"),
    ("cron", "every day", "cron &#x27;every day&#x27;"),
    ("every", "0.5", "every must be from 1 to"),  # (cron blanked below)
    ("queue", "bad name!", "invalid queue name"),
    ("queue", "reports-dlq", "cannot produce to dead-letter queue"),
    ("priority", "1001", "priority must be an integer"),
    ("attributes", "[1, 2]", "attributes must be an object of strings"),
    ("attributes", "{oops", "Not valid JSON."),
    ("name", "bad name!", "a schedule&#x27;s name is 1 to 100"),
])
def test_schedule_form_refuses_what_schedule_refuses_on_its_field(staff_client, field, value, error):
    from forqapp.models import Schedule

    data = {**schedule_post(), "name": "nightly", "queue": "reports", "content": "{}",
            "cron": "" if field == "every" else "0 3 * * *", field: value}
    page = staff_client.post("/admin/forqapp/schedule/add/", data)
    assert page.status_code == 200  # the form again
    html = page.content.decode()
    assert error in html
    assert f"field-{field}" in html.split(error)[0].rsplit('<div class="form-row', 1)[1]  # on its field
    assert not Schedule.objects.exists()


def test_schedule_form_wants_cron_or_every(staff_client):
    from forqapp.models import Schedule

    base = {**schedule_post(), "name": "nightly", "queue": "reports", "content": "{}"}
    for timing in ({}, {"cron": "0 3 * * *", "every": "60"}):
        page = staff_client.post("/admin/forqapp/schedule/add/", {**base, **timing})
        assert page.status_code == 200 and "give a schedule cron or every, one of them" in page.content.decode()
    assert not Schedule.objects.exists()


def test_schedule_change_saves_only_the_changed_fields_and_keeps_the_next_run(staff_client):
    from forqapp.services import schedules

    before = forqapp.schedule("nightly", queue="reports", content="{}", cron="0 3 * * *", priority=1)
    page = staff_client.get("/admin/forqapp/schedule/nightly/change/").content.decode()
    assert 'value="0 3 * * *"' in page and 'name="initial-cron"' in page and "Not declared in the settings." in page
    data = schedule_post("nightly", priority="7", content="[1]")
    schedules.schedule("nightly", queue="reports", content="{}", cron="0 3 * * *", priority=1, paused=True)  # meanwhile
    done = staff_client.post("/admin/forqapp/schedule/nightly/change/", data, follow=True)
    assert b"was changed successfully" in done.content
    info = schedules.get("nightly")
    assert (info.priority, info.content, info.paused) == (7, "[1]", True)  # the pause made meanwhile is kept
    assert info.next_run_at == before.next_run_at  # same timing: same next tick
    # A new timing moves the next run; cron → every clears the cron.
    staff_client.post("/admin/forqapp/schedule/nightly/change/", schedule_post("nightly", cron="", every="600"))
    info = schedules.get("nightly")
    assert (info.cron, info.every) == (None, 600) and info.next_run_at != before.next_run_at
    bad = staff_client.post("/admin/forqapp/schedule/nightly/change/", schedule_post("nightly", every="", cron="x"))
    assert "cron &#x27;x&#x27;" in bad.content.decode() and schedules.get("nightly").every == 600


def test_schedule_actions_pause_resume_and_run_now(staff_client):
    from forqapp.services import schedules

    a = forqapp.schedule("a", queue="reports", content='{"report": "a"}', cron="0 3 * * *", priority=4,
                         attributes={"kind": "report"})
    forqapp.schedule("b", queue="feeds", content="go", every=60)
    url = "/admin/forqapp/schedule/"
    done = staff_client.post(url, {"action": "pause_schedules", "_selected_action": ["a", "b"]}, follow=True)
    assert b"Paused 2 schedules: a, b." in done.content
    assert schedules.get("a").paused and schedules.get("b").paused
    assert schedules.get("a").next_run_at == a.next_run_at
    done = staff_client.post(url, {"action": "resume_schedules", "_selected_action": ["a"]}, follow=True)
    assert b"Resumed 1 schedule: a." in done.content and b"Ticks missed while paused are skipped" in done.content
    assert not schedules.get("a").paused and schedules.get("b").paused
    # Run now: one message on its queue, with its content, priority and attributes; ticks unchanged.
    done = staff_client.post(url, {"action": "run_schedules_now", "_selected_action": ["a"]}, follow=True)
    m = Message.objects.get(queue="reports")
    assert f"Sent 1 message: a → {m.id}.".encode() in done.content
    assert (m.content, m.priority, m.attributes_dict) == ('{"report": "a"}', 4, {"kind": "report"})
    info = schedules.get("a")
    assert (info.next_run_at, info.last_run_at) == (a.next_run_at, None)
    received = forqapp.receive("reports")
    assert received is not None and received.id == m.id


def test_schedule_delete_asks_first_then_unschedules(staff_client):
    from forqapp.services import schedules

    forqapp.schedule("a", queue="reports", content="{}", cron="0 3 * * *")
    forqapp.schedule("b", queue="reports", content="{}", every=60)
    data = {"action": "delete_selected", "_selected_action": ["a"]}
    confirm = staff_client.post("/admin/forqapp/schedule/", data)
    assert confirm.status_code == 200 and b"Are you sure you want to delete the selected schedule" in confirm.content
    assert [s.name for s in schedules.list_schedules()] == ["a", "b"]  # nothing yet
    done = staff_client.post("/admin/forqapp/schedule/", {**data, "post": "yes"}, follow=True)
    assert b"Successfully deleted 1 schedule" in done.content
    assert [s.name for s in schedules.list_schedules()] == ["b"]
    # The change page's delete, behind its confirmation page too.
    assert b"Are you sure you want to delete the schedule" in staff_client.get("/admin/forqapp/schedule/b/delete/").content
    staff_client.post("/admin/forqapp/schedule/b/delete/", {"post": "yes"})
    assert schedules.list_schedules() == []


def test_schedule_content_and_attributes_are_escaped(staff_client):
    forqapp.schedule("x", queue="reports", content=XSS, every=60, attributes={"k": "<b>v</b>"})
    html = staff_client.get("/admin/forqapp/schedule/x/change/").content.decode()
    assert "<script>alert(1)</script>" not in html and "<b>v</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;b&gt;v&lt;/b&gt;" in html


def test_schedule_admin_needs_staff_and_its_permissions(client, db):
    from django.contrib.auth.models import Permission

    from forqapp.services import schedules

    forqapp.schedule("a", queue="reports", content="{}", every=60)
    User.objects.create_user("joe", password="pw-joe-12345")
    client.login(username="joe", password="pw-joe-12345")
    assert client.get("/admin/forqapp/schedule/").status_code == 302
    viewer = User.objects.create_user("viewer", password="pw-viewer-123", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename="view_schedule"))
    c = Client()
    c.force_login(viewer)
    page = c.get("/admin/forqapp/schedule/a/change/").content.decode()
    assert 'name="cron"' not in page and "every 1 min" in page
    listing = c.get("/admin/forqapp/schedule/").content.decode()
    assert 'value="run_schedules_now"' not in listing and 'value="delete_selected"' not in listing
    c.post("/admin/forqapp/schedule/", {"action": "pause_schedules", "_selected_action": ["a"]})
    c.post("/admin/forqapp/schedule/", {"action": "run_schedules_now", "_selected_action": ["a"]})
    c.post("/admin/forqapp/schedule/a/delete/", {"post": "yes"})
    assert not schedules.get("a").paused and not Message.objects.exists()
    assert c.get("/admin/forqapp/schedule/add/").status_code == 403


def test_schedule_admin_enforces_csrf(db):
    from forqapp.services import schedules

    user = User.objects.create_user("root", password="pw-root-123", is_staff=True, is_superuser=True)
    c = Client(enforce_csrf_checks=True)
    c.force_login(user)
    forqapp.schedule("a", queue="reports", content="{}", every=60)
    response = c.post("/admin/forqapp/schedule/", {"action": "run_schedules_now", "_selected_action": ["a"]})
    assert response.status_code == 403 and not Message.objects.exists()
    response = c.post("/admin/forqapp/schedule/a/change/", schedule_post("a", paused=True))
    assert response.status_code == 403 and not schedules.get("a").paused


# --- message groups ---------------------------------------------------------------------------


def test_queue_page_lists_its_busiest_groups_and_the_group_policy(staff_client):
    services.configure_queue("tenants", group_concurrency=1, group_rate="5/s")
    for i in range(3):
        forqapp.send("tenants", f"a{i}", group="tenant-a")
    forqapp.send("tenants", "b0", group="tenant:b@x")
    forqapp.send("tenants", "plain")
    claimed = services.claim_many("tenants", 10)
    assert sorted(m.group or "" for m in claimed) == ["", "tenant-a", "tenant:b@x"]
    html = staff_client.get("/admin/forqapp/queue/tenants/change/").content.decode()
    assert "per group: one at a time (in order), at most 5/s · 2 groups with messages" in html
    rows = re.findall(r"<tr><td><code>([^<]*)</code></td><td>(\d+)</td><td>(\d+)</td><td>([^<]*)</td></tr>", html)
    assert [(name, int(ready), int(in_flight)) for name, ready, in_flight, _ in rows] == [
        ("tenant-a", 2, 1), ("tenant:b@x", 0, 1)]  # the most messages first
    assert all(when.startswith("in ") or when == "now" for _, _, _, when in rows)
    # the policy form edits both fields (through configure_queue)
    assert 'name="group_concurrency"' in html and 'name="group_rate"' in html
    done = staff_client.post("/admin/forqapp/queue/tenants/change/",
                             policy_post("tenants", group_concurrency="3", group_rate=""), follow=True)
    assert b"was changed successfully" in done.content
    info = services.queue_info("tenants")
    assert info.overrides["group_concurrency"] == 3 and "group_rate" not in info.overrides
    refused = staff_client.post("/admin/forqapp/queue/tenants/change/", policy_post("tenants", group_rate="fast"))
    assert refused.status_code == 200 and b"group_rate" in refused.content
    assert services.queue_info("tenants").policy["group_rate"] is None


def test_a_queue_without_groups_says_so_and_a_message_shows_its_group(staff_client):
    plain = forqapp.send("emails", "x")
    html = staff_client.get("/admin/forqapp/queue/emails/change/").content.decode()
    assert "no group limits · 0 groups with messages" in html
    assert 'class="forq-groups"' not in html
    grouped = forqapp.send("emails", "y", group="customer/42")
    page = staff_client.get(f"/admin/forqapp/message/{grouped}/change/").content.decode()
    assert "<code>customer/42</code>" in page
    assert re.search(r"field-group.*?<div class=\"readonly\">—</div>",
                     staff_client.get(f"/admin/forqapp/message/{plain}/change/").content.decode(), re.S)


# --- move tasks: the queues' "Redrive all dead letters", their progress and cancel ------------------


def test_the_queue_admin_redrives_dead_letters_as_move_tasks_shows_and_cancels_them(staff_client):
    from forqapp.models import MoveTask
    from tests.test_dlq_moves import dead_letter, run_all

    forqapp.configure_queue("emails")
    forqapp.configure_queue("ops")
    for name in ("mail", "sms"):  # two queues, one dead-letter queue of theirs
        forqapp.configure_queue(name, dead_letter_queue="ops-dlq")
    for n in range(3):
        dead_letter("emails", f"e{n}")
    dead_letter("mail", "m0")
    dead_letter("sms", "s0")
    changelist = staff_client.get("/admin/forqapp/queue/")
    assert b'value="redrive_dead_letters"' in changelist.content
    data = {"action": "redrive_dead_letters", "_selected_action": ["emails", "mail", "sms", "ops"]}
    confirm = staff_client.post("/admin/forqapp/queue/", data)
    html = confirm.content.decode()
    assert confirm.status_code == 200 and "Are you sure?" in html
    # Each dead-letter queue once: ops-dlq is mail's and sms's (set), and ops's own.
    assert "emails-dlq (of emails): 3 messages" in html and "ops-dlq (of mail, ops, sms): 2 messages" in html
    assert "No process runs the jobs on this database now" in html and "Redrive: yes, I’m sure" in html
    assert not MoveTask.objects.exists()  # nothing yet
    done = staff_client.post("/admin/forqapp/queue/", {**data, "post": "yes"}, follow=True).content.decode()
    tasks = {t.source: t for t in MoveTask.objects.all()}
    assert sorted(tasks) == ["emails-dlq", "ops-dlq"]
    assert (f"Started redriving emails-dlq (3 messages, move task {tasks['emails-dlq'].handle}); ops-dlq "
            f"(2 messages, move task {tasks['ops-dlq'].handle})") in done
    assert "They wait for the jobs process: none runs on this database now." in done
    # The change page: the running move, waiting (no process runs the jobs here), and its cancel.
    page = staff_client.get("/admin/forqapp/queue/emails/change/").content.decode()
    assert "Move tasks" in page and "waiting for the jobs process" in page and "0 of 3" in page
    cancel = f"/admin/forqapp/queue/emails/moves/{tasks['emails-dlq'].handle}/cancel/"
    assert f'href="{cancel}"' in page and "each its source queue" in page
    asked = staff_client.get(cancel)
    assert asked.status_code == 200 and b"Cancel the move: yes" in asked.content
    assert forqapp.move_info(tasks["emails-dlq"].handle).running
    cancelled = staff_client.post(cancel, follow=True).content.decode()
    assert "Cancelled the move of emails-dlq: 0 message(s) moved." in cancelled
    assert 'data-status="CANCELLED"' in cancelled and f'href="{cancel}"' not in cancelled
    assert b"not running (cancelled)" in staff_client.get(cancel).content
    assert staff_client.get(f"/admin/forqapp/queue/mail/moves/{tasks['emails-dlq'].handle}/cancel/").status_code == 404
    # Again: ops-dlq's task still runs (said on the confirmation page, refused at the post); the moves job
    # then takes every dead letter home.
    again = staff_client.post("/admin/forqapp/queue/", data).content.decode()
    assert "a move task is running already</strong> (0 of 2)" in again
    done = staff_client.post("/admin/forqapp/queue/", {**data, "post": "yes"}, follow=True).content.decode()
    assert "Not started: ops-dlq: queue &#x27;ops-dlq&#x27; has a running move task already." in done
    assert run_all() == 5
    assert sorted(Message.objects.filter(is_dlq=False).values_list("content", flat=True)) == [
        "e0", "e1", "e2", "m0", "s0"]
    page = staff_client.get("/admin/forqapp/queue/sms/change/").content.decode()
    assert 'data-status="COMPLETED"' in page and "2 of 2" in page and "of <code>ops-dlq</code>" in page
    empty = staff_client.post("/admin/forqapp/queue/", {"action": "redrive_dead_letters", "_selected_action": ["emails"]})
    assert b"There is nothing to redrive." in empty.content
    done = staff_client.post("/admin/forqapp/queue/", {"action": "redrive_dead_letters", "_selected_action": ["emails"],
                                                      "post": "yes"}, follow=True)
    assert b"Not started: emails-dlq: no messages." in done.content


def test_redrive_and_its_cancel_need_the_dead_letters_change_permission(db):
    from django.contrib.auth.models import Permission

    from tests.test_dlq_moves import dead_letter

    forqapp.configure_queue("emails")
    dead_letter("emails", "x")
    user = User.objects.create_user("ops", password="pw-ops-12345", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=["view_queue", "change_queue"]))
    c = Client()
    c.force_login(user)
    assert b'value="redrive_dead_letters"' not in c.get("/admin/forqapp/queue/").content
    c.post("/admin/forqapp/queue/", {"action": "redrive_dead_letters", "_selected_action": ["emails"], "post": "yes"})
    assert forqapp.list_moves("emails-dlq") == []  # refused
    task = forqapp.start_move("emails-dlq")
    page = c.get("/admin/forqapp/queue/emails/change/").content.decode()
    assert "0 of 1" in page and "/cancel/" not in page  # seen, not cancellable
    cancel = f"/admin/forqapp/queue/emails/moves/{task.handle}/cancel/"
    assert c.get(cancel).status_code == 403 and c.post(cancel).status_code == 403
    assert forqapp.move_info(task.handle).running
    user.user_permissions.add(Permission.objects.get(codename="change_deadletter"))
    c.force_login(User.objects.get(pk=user.pk))
    assert b'value="redrive_dead_letters"' in c.get("/admin/forqapp/queue/").content
    c.post(cancel)
    assert forqapp.move_info(task.handle).status == "CANCELLED"
