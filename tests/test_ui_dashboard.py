"""The dashboard with many queues: a page of the busiest, search, sort and paging, the dead-letter
queues listed under their queue, the 24-hour column before it has a line; and the staff pages'
Content-Security-Policy header (tests/test_ui_csp_browser.py checks the pages work under it)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client

import forqapp
from forqapp import ids, services, store
from forqapp.models import QueueDepthSample
from forqapp.services import history
from forqapp.ui import csp, dashboard
from tests.conftest import HX

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("live_counts")]


def fill(queues: dict[str, int], *, dlq: bool = False) -> None:
    """``{queue: n}``: n messages in each queue (DLQ rows with ``dlq``), in one insert."""
    now = services.now_ms()
    rows = [store.NewMessage(i, q, "m", now, now, now + 3_600_000)
            for q, n in queues.items() for i in ids.new_ids(n)]
    store.for_alias(connection.alias).insert(rows, is_dlq=dlq)


def names(html: str) -> list[str]:
    """The queue rows' names, in the table's order."""
    return [part.split('"')[0] for part in html.split('<tr id="q-')[1:]]


def test_two_thousand_queues_make_a_small_page_of_the_busiest(staff_client):
    fill({f"q{i:04}": 1 for i in range(2000)} | {"busy": 9, "busier": 12})
    full = staff_client.get("/ui/")
    html = full.content.decode()
    assert full.context["overview"].queues == 2002  # the cards count them all
    assert names(html)[:2] == ["busier", "busy"]  # the busiest first
    assert len(names(html)) == dashboard.PER_PAGE
    assert "1–25 of 2002 queues" in html and "page 1 of 81" in html
    assert len(full.content) < 60_000, len(full.content)
    refresh = staff_client.get("/ui/", **HX)
    assert len(refresh.content) < 50_000, len(refresh.content)
    assert len(names(refresh.content.decode())) == dashboard.PER_PAGE


def test_search_sort_and_paging(staff_client):
    fill({f"alpha{i:02}": i + 1 for i in range(30)} | {"beta": 100})
    html = staff_client.get("/ui/?q=alpha").content.decode()
    assert "beta" not in names(html) and names(html)[0] == "alpha29"
    assert 'hx-get="/ui/?q=alpha"' in html  # the refresh keeps the search
    second = staff_client.get("/ui/?q=alpha&page=2", **HX).content.decode()
    assert names(second) == [f"alpha{i:02}" for i in range(4, -1, -1)]
    assert 'hx-get="/ui/?q=alpha&amp;page=2"' in second and "26–30 of 30 queues" in second
    by_name = staff_client.get("/ui/?sort=name").content.decode()
    assert names(by_name)[:3] == ["alpha00", "alpha01", "alpha02"]
    nothing = staff_client.get("/ui/?q=zzz").content.decode()
    assert 'data-testid="no-match"' in nothing
    assert staff_client.get("/ui/?page=999&sort=bogus").status_code == 200  # the last page, by depth


def test_dead_letter_queues_are_listed_under_their_queue(staff_client):
    fill({"emails": 3, "ghost": 0})
    fill({"emails-dlq": 2, "ghost-dlq": 1}, dlq=True)
    page = staff_client.get("/ui/")
    html = page.content.decode()
    assert page.context["overview"].queues == 4  # emails, ghost and their two DLQs
    assert names(html) == ["emails", "emails-dlq", "ghost", "ghost-dlq"]
    row = html.split('<tr id="q-emails-dlq"')[1].split("</tr>")[0]
    assert 'href="/ui/queues/emails-dlq/">emails-dlq</a>' in row and "dead-letter queue" in row
    assert staff_client.get("/ui/?sort=dlq").content.decode().count('data-testid="dlq-row"') == 2
    assert names(staff_client.get("/ui/?q=ghost-dlq").content.decode()) == ["ghost", "ghost-dlq"]


def test_the_24_hour_column_says_collecting_until_it_has_two_samples(staff_client):
    fill({"emails": 1})
    now = services.now_ms()
    html = staff_client.get("/ui/").content.decode()
    row = html.split('<tr id="q-emails"')[1].split("</tr>")[0]
    assert 'data-testid="collecting"' in row and "<svg" not in row
    assert "collecting · first sample in " in row
    history.record_depth_samples([("emails", False, 1)], now=now - 60_000)
    row = staff_client.get("/ui/").content.decode().split('<tr id="q-emails"')[1].split("</tr>")[0]
    assert "collecting · a line within 15 min" in row  # one sample: still no line
    QueueDepthSample.objects.update(sampled_at=now - 20 * 60_000)  # a 15-minute bucket older
    row = staff_client.get("/ui/").content.decode().split('<tr id="q-emails"')[1].split("</tr>")[0]
    assert "<polyline" in row and "collecting" not in row
    queue_page = staff_client.get("/ui/queues/emails/").content.decode()
    assert "<polyline" in queue_page


def test_minutes_to_next_sample():
    slot = history.SLOT_MS
    assert dashboard.minutes_to_next_sample(10 * slot) == 5
    assert dashboard.minutes_to_next_sample(10 * slot + slot - 1) == 1
    assert dashboard.minutes_to_next_sample(10 * slot + 61_000) == 4


@pytest.mark.parametrize("url", ["/ui/", "/ui/queues/emails/", "/ui/schedules/", "/ui/keys/", "/ui/login/",
                                 "/admin/", "/admin/forqapp/queue/", "/admin/login/"])
def test_staff_pages_carry_the_content_security_policy(staff_client, url):
    forqapp.send("emails", "a")
    client = staff_client if url != "/admin/login/" else Client()
    response = client.get(url)
    assert response.status_code == 200
    assert response["Content-Security-Policy"] == csp.POLICY
    assert "script-src 'self';" in csp.POLICY and "unsafe" not in csp.POLICY


def test_the_middleware_leaves_other_pages_and_a_projects_own_policy_alone(rf):
    from django.http import HttpResponse
    from django.urls import ResolverMatch

    def view(request):
        return HttpResponse("x")

    def own(request):
        response = HttpResponse("x")
        response["Content-Security-Policy"] = "default-src 'none'"
        return response

    def call(get_response, namespaces):
        request = rf.get("/")
        request.resolver_match = ResolverMatch(view, (), {}, namespaces=namespaces)
        return csp.StaffPagesCSPMiddleware(get_response)(request)

    assert "Content-Security-Policy" not in call(view, ["shop"])
    assert call(view, ["admin"])["Content-Security-Policy"] == csp.POLICY
    assert call(own, ["admin"])["Content-Security-Policy"] == "default-src 'none'"


def test_pages_turn_off_htmxs_inline_indicator_style(staff_client):
    html = staff_client.get("/ui/").content.decode()
    assert """<meta name="htmx-config" content='{"includeIndicatorStyles": false}'>""" in html
    assert "<script>" not in html and " style=" not in html and "hx-on" not in html
