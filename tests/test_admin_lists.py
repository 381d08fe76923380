# ruff: noqa: S106  (test passwords)
"""The admin's lists as a 1366 px window needs them (the layout itself: tests/test_admin_layout_browser.py):
short ids and compact dates with the whole value in a tooltip, the failure shown, a dead letter's
real status and only the status choices dead letters have; the product's one name, forqapp; the
admin key form's full-width fields and the copy buttons of a new secret, in static files only."""

from __future__ import annotations

import re

import pytest
from django.db import connection

import forqapp
from forqapp import ids as forq_ids
from forqapp import services, store
from forqapp.admin.cells import compact_time, full_time
from forqapp.keys import service as key_service
from forqapp.models import Message

pytestmark = pytest.mark.django_db(transaction=True)


def dead(queue: str, n: int) -> list[str]:
    now = services.now_ms()
    ids = forq_ids.new_ids(n)
    store.for_alias(connection.alias).insert(
        [store.NewMessage(i, queue, "x", now, now, now + 60_000) for i in ids], is_dlq=True)
    return ids


def columns(html: str) -> list[str]:
    return re.findall(r'<th scope="col" class="[^"]*column-([a-z_]+)', html)


def status_choices(html: str) -> list[str]:
    section = html.split("By status", 1)[1].split("</ul>", 1)[0]
    return re.findall(r'<a href="\?status(?:__exact)?=[^"]*"[^>]*>([^<]+)</a>', section)


def test_the_message_list_shows_short_ids_compact_dates_and_the_failure(staff_client):
    mid = forqapp.send("emails", "a")
    d = dead("emails-dlq", 1)[0]
    Message.objects.filter(id=d).update(failure_reason="max_attempts_reached", last_error="ValueError: " + "y" * 200)
    html = staff_client.get("/admin/forqapp/message/").content.decode()
    assert columns(html) == ["short_id", "queue_cell", "message_status", "priority", "attempts", "received_on",
                             "failure"]
    assert f'<code class="forq-id" title="{mid}">…{mid[-8:]}</code>' in html
    received = Message.objects.get(id=mid).received_at
    assert f'<time class="forq-when" title="{full_time(received)}">{compact_time(received)}</time>' in html
    assert " UTC</td>" not in html  # no date in full, on four lines, in a cell
    assert '<strong class="forq-reason" title="max_attempts_reached">max attempts reached</strong>' in html
    assert re.search(r'<span class="forq-error" title="ValueError: y{200}">ValueError: y{68}…</span>', html)
    assert "<h1>Messages</h1>" in html


def test_a_dead_letter_shows_its_real_status_and_the_filter_only_the_statuses_dead_letters_have(staff_client):
    d = dead("emails-dlq", 2)
    html = staff_client.get("/admin/forqapp/deadletter/").content.decode()
    assert columns(html) == ["short_id", "queue_cell", "message_status", "failure", "received_on", "expires_on"]
    assert "<h1>Dead letters</h1>" in html
    assert html.count('<td class="field-message_status">ready</td>') == 2 and ">dead<" not in html
    assert status_choices(html) == ["ready"]  # not processing nor failed: no dead letter is
    # One received from its DLQ (allowed): processing, and the filter offers it.
    claimed = services.claim("emails-dlq")
    assert claimed is not None and claimed.id in d
    html = staff_client.get("/admin/forqapp/deadletter/").content.decode()
    assert status_choices(html) == ["ready", "processing"]
    only = staff_client.get("/admin/forqapp/deadletter/?status=1").content.decode()
    assert claimed.id in only and next(i for i in d if i != claimed.id) not in only
    assert staff_client.get("/admin/forqapp/deadletter/?status=x").status_code == 200  # nothing listed, no 500
    # The messages' own list keeps every status (a regular message may be failed).
    assert status_choices(staff_client.get("/admin/forqapp/message/").content.decode()) == ["ready", "processing",
                                                                                       "failed"]


def test_the_admin_says_forqapp(staff_client):
    index = staff_client.get("/admin/").content.decode()
    assert '<div id="site-name"><a href="/admin/">forqapp admin</a></div>' in index
    assert "<title>forqapp | forqapp admin</title>" in index and "<h1>forqapp</h1>" in index
    assert "Django administration" not in index and "Site administration" not in index
    assert not re.search(r"\bForq\b", index)  # the app's section too
    assert "<title>Messages | forqapp admin</title>" in staff_client.get("/admin/forqapp/message/").content.decode()


def test_the_task_and_key_lists_are_compact(staff_client):
    from forqapp.tasks.discovery import with_consumers
    from forqapp.tasks.models import TaskRecord
    from forqapp.worker.runner import Worker
    from tests.tasksapp import tasks

    result = tasks.add.enqueue(1, 2)
    Worker(with_consumers({}), concurrency=1, prefetch=10, burst=True).run()
    html = staff_client.get("/admin/forqapp/taskrecord/").content.decode()
    assert f'<code class="forq-id" title="{result.id}">…{result.id[-8:]}</code>' in html
    updated = TaskRecord.objects.get(id=result.id).updated_at
    assert f'title="{full_time(updated)}">{compact_time(updated)}</time>' in html
    assert '<span class="forq-name">tests.<wbr>tasksapp.<wbr>tasks.<wbr>add</span>' in html
    key = key_service.create("ops", ["*:read"], actor="root", via="cli").key
    html = staff_client.get("/admin/forqapp/apikey/").content.decode()
    assert f'<code class="forq-id">{key.access_key_id}</code>' in html
    assert f'title="{full_time(key.created_at)}">{compact_time(key.created_at)}</time>' in html


def test_compact_times():
    day = 86_400_000
    now = 1_795_847_085_758  # 2026-11-28 (UTC)
    assert compact_time(now, now) == "06:24:45"
    assert compact_time(now - 3 * day, now) == "Nov 25 06:24"
    assert compact_time(now - 400 * day, now) == "2025-10-24"
    assert full_time(now) == "2026-11-28 06:24:45.758 UTC"


NO_INLINE = [re.compile(r"\son[a-z]+="), re.compile(r"\sstyle=")]


def own_scripts_are_static(html: str) -> None:
    """No inline event handler or style; every script with code is a static file."""
    for pattern in NO_INLINE:
        assert not pattern.search(html), pattern.search(html)
    for tag, body in re.findall(r"(<script[^>]*>)(.*?)</script>", html, re.S):
        assert "src=" in tag or 'type="application/json"' in tag or not body.strip(), tag + body


def test_the_admin_key_form_and_its_new_secret_with_copy_buttons(staff_client):
    form = staff_client.get("/admin/forqapp/apikey/add/").content.decode()
    assert re.search(r'<input type="text" name="name" class="forq-wide" placeholder="orders-producer"', form)
    assert 'class="forq-wide" placeholder="90d, 12h, 30m or 2027-01-01 00:00 (empty: never)"' in form
    assert re.search(r'<textarea name="grants_text" cols="40" rows="4" class="forq-wide" placeholder="orders:produce', form)
    assert re.search(r'<link href="/static/forqapp/admin.css"[^>]*rel="stylesheet">', form)
    assert '<script src="/static/forqapp/copy.js"></script>' in form
    own_scripts_are_static(form)
    done = staff_client.post("/admin/forqapp/apikey/add/", {"name": "copy-me", "grants_text": "orders:produce", "expires": ""})
    html = done.content.decode()
    assert done.status_code == 200 and 'data-testid="issued-key"' in html
    for what in ("access-key-id", "secret", "token"):
        element = re.search(rf'<code class="forq-secret" id="([^"]+)" data-testid="{what}">', html).group(1)
        assert f'<button type="button" class="button forq-copy" data-copy="{element}" data-testid="copy-{what}">Copy' in html
    assert '<script src="/static/forqapp/copy.js" defer></script>' in html
    assert '<link rel="stylesheet" href="/static/forqapp/admin.css">' in html
    own_scripts_are_static(html)

