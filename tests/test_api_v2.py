"""The v2 HTTP API (issue 12, point 6), against a real server (``live_api``: forq_serve), plus the
in-process ASGI app (no request gets a 500) and Django's own handler (``include("forqapp.urls")``).

Policies set from this process (``forqapp.configure_queue``) are read by the server within
``forqapp.services.policies.CACHE_S``; each test sets them before the server first sees its queue, or waits.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from urllib.parse import quote, unquote

import httpx
import pytest
from django.db import connection
from django.test import override_settings
from django.urls import resolve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import forqapp
from forqapp import errors, services
from forqapp.api import plumbing
from forqapp.api.asgi import APIApplication
from forqapp.models import Message, Status
from forqapp.services.policies import CACHE_S

from .test_hostile import APP_SECRET, _call, _pieces, _scope, header_values, json_values, methods, queries

pytestmark = pytest.mark.django_db(transaction=True)

V2 = "/api/v2"


def call(live_api, method: str, path: str, body=None, **kw) -> httpx.Response:
    """``method`` on ``/api/v2{path}``: ``body`` as JSON (bytes as they are)."""
    if isinstance(body, bytes):
        kw["content"] = body
    elif body is not None:
        kw["json"] = body
    return live_api.client.request(method, V2 + path, **kw)


def send(live_api, queue: str, content: str = "hello", **fields) -> httpx.Response:
    return call(live_api, "POST", f"/queues/{queue}/messages", {"content": content, **fields})


def receive(live_api, queue: str, **fields) -> list[dict]:
    response = call(live_api, "POST", f"/queues/{queue}/receive", fields)
    assert response.status_code == 200, response.text
    return response.json()["messages"]


def refused(response: httpx.Response, status: int, code: str) -> None:
    """An error answer: ``status``, ``{"code": code, "message": <text>}``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["code"] == code, body
    assert isinstance(body["message"], str) and body["message"], body


def near(value: int, expected: int, slack_ms: int = 3000) -> bool:
    return abs(value - expected) <= slack_ms


# --- send and receive ---------------------------------------------------------------------------


def test_send_then_receive_carries_every_field(live_api):
    response = send(live_api, "v2-basic", "hi", priority=5, attributes={"kind": "greeting", "lang": "en"},
                    dedup_id="greet-1")
    assert response.status_code == 201, response.text
    sent = response.json()
    assert set(sent) == {"id", "sequence", "deduplicated"} and sent["deduplicated"] is False
    assert uuid.UUID(sent["id"]).version == 7 and sent["sequence"] >= 1
    assert response.headers["location"] == f"{V2}/queues/v2-basic/messages/{sent['id']}"
    row = Message.objects.get(id=sent["id"])
    assert (row.priority, row.attributes_dict, row.dedup_id, row.sequence) == (
        5, {"kind": "greeting", "lang": "en"}, "greet-1", sent["sequence"])

    before = services.now_ms()
    (got,) = receive(live_api, "v2-basic", max_messages=10, visibility_timeout=60)
    assert set(got) == {"id", "content", "attempts", "receipt", "priority", "attributes", "dedup_id", "sequence",
                        "received_at", "first_received_at", "lease_expires_at", "state", "group"}
    assert got["state"] is None  # no defer saved one
    assert (got["id"], got["content"], got["attempts"], got["priority"]) == (sent["id"], "hi", 1, 5)
    assert got["attributes"] == {"kind": "greeting", "lang": "en"} and got["dedup_id"] == "greet-1"
    assert got["sequence"] == sent["sequence"] and got["receipt"].lstrip("-").isdigit()
    assert near(got["first_received_at"], before) and near(got["lease_expires_at"], before + 60_000)
    assert got["received_at"] <= got["first_received_at"]

    ack = call(live_api, "POST", f"/queues/v2-basic/messages/{got['id']}/ack", {"receipt": got["receipt"]})
    assert ack.status_code == 204 and ack.content == b""
    assert not Message.objects.filter(id=sent["id"]).exists()


def test_a_receipt_may_be_given_as_an_integer(live_api):
    send(live_api, "v2-int-receipt")
    (got,) = receive(live_api, "v2-int-receipt")
    ack = call(live_api, "POST", f"/queues/v2-int-receipt/messages/{got['id']}/ack", {"receipt": int(got["receipt"])})
    assert ack.status_code == 204


def test_sequences_increase_and_priorities_come_first(live_api):
    q = "v2-priority"
    sent = [send(live_api, q, content, priority=p).json() for content, p in
            [("low", 0), ("high", 10), ("mid", 5), ("high2", 10), ("neg", -1000)]]
    sequences = [s["sequence"] for s in sent]
    assert sequences == sorted(sequences) and len(set(sequences)) == 5
    got = receive(live_api, q, max_messages=10)
    assert [m["content"] for m in got] == ["high", "high2", "mid", "low", "neg"]


def test_receive_takes_at_most_max_messages(live_api):
    for i in range(4):
        send(live_api, "v2-max", f"m{i}")
    assert [m["content"] for m in receive(live_api, "v2-max", max_messages=3)] == ["m0", "m1", "m2"]
    assert [m["content"] for m in receive(live_api, "v2-max", max_messages=3)] == ["m3"]
    assert receive(live_api, "v2-max", max_messages=3) == []  # no wait given: answers at once


def test_a_delayed_message_waits_and_a_long_poll_gets_it(live_api):
    assert send(live_api, "v2-delay", "later", delay=1).status_code == 201
    assert receive(live_api, "v2-delay") == []
    assert call(live_api, "GET", "/queues/v2-delay/peek").json() == {"message": None}
    start = time.monotonic()
    (got,) = receive(live_api, "v2-delay", wait=2)
    assert got["content"] == "later" and 0.3 < time.monotonic() - start  # when due: before its 2 s wait ended


def test_process_after_is_unix_ms(live_api):
    due = services.now_ms() + 60_000
    assert send(live_api, "v2-due", process_after=due).status_code == 201
    assert Message.objects.get(queue="v2-due").process_after == due


def test_retention_overrides_the_queue_ttl(live_api):
    before = services.now_ms()
    send(live_api, "v2-retention", retention=120)
    assert near(Message.objects.get(queue="v2-retention").expires_after, before + 120_000)


def test_long_poll_wakes_on_a_send(live_api):
    got: list = []
    poller = threading.Thread(target=lambda: got.append(receive(live_api, "v2-wake", wait=2)))
    poller.start()
    time.sleep(0.3)
    sent_at = time.monotonic()
    send(live_api, "v2-wake", "wake up")
    poller.join(5)
    assert [m["content"] for m in got[0]] == ["wake up"]  # woken: before its 2 s wait ended
    assert time.monotonic() - sent_at < 5


def test_an_abandoned_long_poll_does_not_swallow_a_message(live_api):
    with pytest.raises(httpx.ReadTimeout):
        call(live_api, "POST", "/queues/v2-gone/receive", {"wait": 2}, timeout=0.5)
    time.sleep(0.3)
    send(live_api, "v2-gone", "x")
    time.sleep(0.3)
    row = Message.objects.get(queue="v2-gone")
    assert row.status == Status.READY and row.attempts == 0


def test_random_order_among_due_messages(live_api):
    for i in range(30):
        send(live_api, "v2-random", f"m{i}")
    orders = []
    for _ in range(3):  # three random draws of five: all three in FIFO order by chance is ~(1/30^5)^3
        got = [m["sequence"] for m in receive(live_api, "v2-random", max_messages=5, random=True)]
        assert len(got) == 5
        orders.append(got)
    everything = sorted(Message.objects.filter(queue="v2-random").values_list("sequence", flat=True))
    assert any(o != everything[i * 5:i * 5 + 5] for i, o in enumerate(orders))


# --- deduplication -------------------------------------------------------------------------------


def test_dedup_returns_the_original_id_also_after_ack(live_api):
    q = "v2-dedup"
    first = send(live_api, q, "one", dedup_id="order-42")
    assert first.status_code == 201
    original = first.json()["id"]
    again = send(live_api, q, "two", dedup_id="order-42")
    assert again.status_code == 200 and "location" not in again.headers
    assert again.json() == {"id": original, "sequence": 0, "deduplicated": True}
    assert list(Message.objects.filter(queue=q).values_list("content", flat=True)) == ["one"]

    (got,) = receive(live_api, q)
    assert call(live_api, "POST", f"/queues/{q}/messages/{original}/ack", {"receipt": got["receipt"]}).status_code == 204
    after_ack = send(live_api, q, "three", dedup_id="order-42")
    assert (after_ack.status_code, after_ack.json()["id"]) == (200, original)
    assert not Message.objects.filter(queue=q).exists()

    other = send(live_api, q, "four", dedup_id="order-43")
    assert other.status_code == 201 and other.json()["id"] != original


def test_dedup_ends_with_its_window(live_api):
    q = "v2-dedup-window"
    first = send(live_api, q, dedup_id="short", dedup_window=0.5).json()["id"]
    assert send(live_api, q, dedup_id="short").json()["id"] == first
    time.sleep(0.7)
    later = send(live_api, q, dedup_id="short")
    assert later.status_code == 201 and later.json()["id"] != first
    assert Message.objects.filter(queue=q).count() == 2


# --- send batches -------------------------------------------------------------------------------


def test_a_batch_reports_each_entry_and_sends_the_valid_ones(live_api):
    q = "v2-batch"
    entries = [
        {"content": "a"},
        {"content": 5},
        {"content": "b", "priority": 9, "attributes": {"k": "v"}},
        {"content": "d", "delay": 1, "process_after": services.now_ms() + 5000},
        "not an object",
        {"content": "e", "prority": 1},
        {"content": "f", "dedup_id": "same"},
        {"content": "g", "dedup_id": "same"},
        {"content": "h", "process_after": 1},
        {"content": "nul \x00" if connection.vendor == "postgresql" else 7},  # PostgreSQL's text holds no NUL
    ]
    response = call(live_api, "POST", f"/queues/{q}/messages/batch", {"entries": entries})
    assert response.status_code == 200, response.text
    body = response.json()
    ok = {s["index"]: s for s in body["successful"]}
    assert sorted(ok) == [0, 2, 6, 7]
    assert ok[7] == {"index": 7, "id": ok[6]["id"], "sequence": 0, "deduplicated": True}
    assert ok[0]["sequence"] < ok[2]["sequence"] < ok[6]["sequence"]
    failed = {f["index"]: f for f in body["failed"]}
    assert sorted(failed) == [1, 3, 4, 5, 8, 9]
    assert all(f["message"] for f in failed.values())
    assert failed[8]["code"] == errors.PROCESS_AFTER_IN_PAST
    assert {failed[i]["code"] for i in (1, 3, 4, 5, 9)} == {errors.BODY_INVALID}
    assert sorted(Message.objects.filter(queue=q).values_list("content", flat=True)) == ["a", "b", "f"]


@pytest.mark.parametrize("body", [{"entries": []}, {"entries": [{"content": "x"}] * 11}, {}, {"entries": "x"},
                                  {"entries": [{"content": "x"}], "extra": 1}])
def test_a_batch_of_the_wrong_shape_is_refused_whole(live_api, body):
    refused(call(live_api, "POST", "/queues/v2-batch-shape/messages/batch", body), 400, errors.BODY_INVALID)
    assert not Message.objects.filter(queue="v2-batch-shape").exists()


# --- leases: expiry, change visibility, stale receipts ------------------------------------------------


def test_an_expired_lease_is_received_again_with_no_job_running(live_api):
    q = "v2-lease"  # live_api runs no jobs: only the receive itself can take the message back
    send(live_api, q)
    (first,) = receive(live_api, q, visibility_timeout=1)
    assert receive(live_api, q) == []
    time.sleep(1.2)
    (second,) = receive(live_api, q, visibility_timeout=60)
    assert (second["id"], second["attempts"]) == (first["id"], 2)
    assert second["receipt"] != first["receipt"]
    assert second["first_received_at"] == first["first_received_at"]
    stale = call(live_api, "POST", f"/queues/{q}/messages/{first['id']}/ack", {"receipt": first["receipt"]})
    refused(stale, 404, errors.NOT_FOUND_MESSAGE)
    assert Message.objects.filter(id=first["id"]).exists()
    current = call(live_api, "POST", f"/queues/{q}/messages/{second['id']}/ack", {"receipt": second["receipt"]})
    assert current.status_code == 204


def test_change_visibility_extends_and_releases_and_refuses_a_stale_receipt(live_api):
    q = "v2-visibility"
    send(live_api, q)
    (got,) = receive(live_api, q, visibility_timeout=30)
    path = f"/queues/{q}/messages/{got['id']}/change-visibility"

    before = services.now_ms()
    assert call(live_api, "POST", path, {"receipt": got["receipt"], "visibility_timeout": 600}).status_code == 204
    shown = call(live_api, "GET", f"/queues/{q}/messages/{got['id']}").json()
    assert near(shown["lease_expires_at"], before + 600_000) and shown["receipt"] is None

    assert call(live_api, "POST", path, {"receipt": got["receipt"], "visibility_timeout": 0}).status_code == 204
    (again,) = receive(live_api, q)  # released: receivable at once
    assert (again["id"], again["attempts"]) == (got["id"], 2)
    stale = call(live_api, "POST", path, {"receipt": got["receipt"], "visibility_timeout": 60})
    refused(stale, 404, errors.NOT_FOUND_MESSAGE)
    refused(call(live_api, "POST", path, {"receipt": again["receipt"]}), 400, errors.BODY_INVALID)
    refused(call(live_api, "POST", path, {"receipt": again["receipt"], "visibility_timeout": 43_201}),
            400, errors.BODY_INVALID)


def test_settle_batches_report_each_entry(live_api):
    q = "v2-settle"
    for i in range(4):
        send(live_api, q, f"m{i}")
    m = receive(live_api, q, max_messages=4, visibility_timeout=600)
    entries = [
        {"id": m[0]["id"], "receipt": m[0]["receipt"]},
        {"id": m[1]["id"], "receipt": str(int(m[1]["receipt"]) + 1)},  # not its receipt
        {"id": "not-an-id", "receipt": "1"},
        {"id": m[2]["id"], "receipt": m[2]["receipt"]},
        {"id": m[3]["id"]},
        {"id": m[3]["id"], "receipt": "1", "extra": True},
    ]
    response = call(live_api, "POST", f"/queues/{q}/messages/ack", {"entries": entries})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["successful"] == [{"index": 0, "id": m[0]["id"]}, {"index": 3, "id": m[2]["id"]}]
    assert [(f["index"], f["code"]) for f in body["failed"]] == [
        (1, errors.NOT_FOUND_MESSAGE), (2, errors.MESSAGE_ID_INVALID), (4, errors.RECEIPT_MISSING),
        (5, errors.BODY_INVALID)]
    assert sorted(Message.objects.filter(queue=q).values_list("content", flat=True)) == ["m1", "m3"]

    before = services.now_ms()
    changed = call(live_api, "POST", f"/queues/{q}/messages/change-visibility",
                   {"entries": [{"id": m[1]["id"], "receipt": m[1]["receipt"]}], "visibility_timeout": 1200})
    assert changed.json() == {"successful": [{"index": 0, "id": m[1]["id"]}], "failed": []}
    assert near(Message.objects.get(id=m[1]["id"]).lease_expires_at, before + 1_200_000)

    nacked = call(live_api, "POST", f"/queues/{q}/messages/nack",
                  {"entries": [{"id": m[1]["id"], "receipt": m[1]["receipt"]},
                               {"id": m[3]["id"], "receipt": m[3]["receipt"]}]})
    assert [s["index"] for s in nacked.json()["successful"]] == [0, 1]
    for row in Message.objects.filter(queue=q):
        assert row.status == Status.READY and row.attempts == 1 and row.process_after > before  # backed off


def test_nack_keeps_the_error(live_api):
    send(live_api, "v2-nack")
    (got,) = receive(live_api, "v2-nack")
    path = f"/queues/v2-nack/messages/{got['id']}/nack"
    assert call(live_api, "POST", path, {"receipt": got["receipt"], "error": "boom"}).status_code == 204
    row = Message.objects.get(id=got["id"])
    assert (row.status, row.attempts, row.last_error) == (Status.READY, 1, "boom")
    refused(call(live_api, "POST", path, {"receipt": got["receipt"]}), 404, errors.NOT_FOUND_MESSAGE)
    # The message, looked at by its id, says why (an audit found it only in the admin and the UI).
    shown = call(live_api, "GET", f"/queues/v2-nack/messages/{got['id']}").json()
    assert (shown["failure_reason"], shown["last_error"]) == (None, "boom")


# --- peek -------------------------------------------------------------------------------------------


def test_peek_changes_nothing(live_api):
    q = "v2-peek"
    send(live_api, q, "low")
    high = send(live_api, q, "high", priority=3).json()["id"]
    rows_before = list(Message.objects.filter(queue=q).order_by("id").values())
    peeked = call(live_api, "GET", f"/queues/{q}/peek").json()["message"]
    assert (peeked["id"], peeked["receipt"], peeked["attempts"], peeked["lease_expires_at"]) == (high, None, 0, None)
    assert call(live_api, "GET", f"/queues/{q}/peek").json()["message"] == peeked  # again: the same
    assert call(live_api, "GET", f"/queues/{q}/messages/{high}").json() == {
        **peeked, "failure_reason": None, "last_error": None}  # one message by id: why it failed too
    assert list(Message.objects.filter(queue=q).order_by("id").values()) == rows_before

    (got,) = receive(live_api, q)
    assert got["id"] == high
    shown = call(live_api, "GET", f"/queues/{q}/messages/{high}").json()
    assert shown["attempts"] == 1 and shown["lease_expires_at"] and shown["receipt"] is None
    refused(call(live_api, "GET", f"/queues/{q}/messages/{uuid.uuid4()}"), 404, errors.NOT_FOUND_MESSAGE)
    refused(call(live_api, "GET", f"/queues/other-{q}/messages/{high}"), 404, errors.NOT_FOUND_MESSAGE)
    refused(call(live_api, "GET", f"/queues/{q}/messages/nope"), 400, errors.MESSAGE_ID_INVALID)


# --- queues: policy, list, purge, delete, paused, max_length -------------------------------------------


def test_policy_put_then_get(live_api):
    q = "v2-policy"
    put = call(live_api, "PUT", f"/queues/{q}",
               {"max_attempts": 3, "visibility_timeout": 45, "ordering": "lifo", "max_length": 100,
                "backoff": {"base_ms": 500, "max_ms": 8000, "jitter": 0.1}})
    assert put.status_code == 200, put.text
    assert put.json()["overrides"] == {"max_attempts": 3, "visibility_timeout": 45, "ordering": "lifo",
                                       "max_length": 100, "backoff": {"base_ms": 500, "max_ms": 8000, "jitter": 0.1}}
    got = call(live_api, "GET", f"/queues/{q}").json()
    assert got == put.json()
    assert got["policy"]["max_attempts"] == 3 and got["policy"]["retention"] == 24 * 3600  # the global setting
    assert got["paused"] is False and got["created_at"]

    patched = call(live_api, "PATCH", f"/queues/{q}", {"paused": True, "max_attempts": "unlimited",
                                                        "max_in_flight": 4, "rate": "100/s"}).json()
    assert patched["paused"] is True and patched["overrides"]["ordering"] == "lifo"
    assert patched["policy"]["max_attempts"] == "unlimited"
    assert (patched["overrides"]["max_in_flight"], patched["overrides"]["rate"]) == (4, "100/s")
    reset = call(live_api, "PATCH", f"/queues/{q}", {"ordering": None}).json()
    assert "ordering" not in reset["overrides"] and reset["policy"]["ordering"] == "fifo"

    replaced = call(live_api, "PUT", f"/queues/{q}", {"dedup_window": 60}).json()  # PUT: the rest reset
    assert replaced["overrides"] == {"dedup_window": 60} and replaced["paused"] is False


@pytest.mark.parametrize("body", [
    {"max_attempts": -1}, {"max_attempts": True}, {"ordering": "random"}, {"bogus": 1}, {"paused": "yes"},
    {"visibility_timeout": 43_201}, {"retention": 0}, {"max_length": 0}, {"backoff": []}, {"backoff": "fast"},
    {"backoff": {"base_ms": 10, "max_ms": 5}}, {"dedup_window": 10**30}, {"rate": 10**400}, {"rate": "fast"},
    {"max_in_flight": 0}, [], "x",
])
def test_a_bad_policy_is_400_and_changes_nothing(live_api, body):
    refused(call(live_api, "PUT", "/queues/v2-bad-policy", body), 400, errors.BODY_INVALID)
    refused(call(live_api, "GET", "/queues/v2-bad-policy"), 404, errors.NOT_FOUND_QUEUE)


def test_a_non_finite_duration_is_400(live_api):
    for raw in (b'{"visibility_timeout": 1e999}', b'{"visibility_timeout": NaN}', b'{"retention": -Infinity}'):
        refused(call(live_api, "PATCH", "/queues/v2-inf", raw), 400, errors.BODY_INVALID)
    refused(call(live_api, "POST", "/queues/v2-inf/receive", b'{"visibility_timeout": 1e999}'), 400, errors.BODY_INVALID)
    refused(call(live_api, "POST", "/queues/v2-inf/messages", b'{"content": "x", "delay": 1e999}'),
            400, errors.BODY_INVALID)


@pytest.mark.parametrize("encode", [
    lambda text: text.encode("utf-16"), lambda text: text.encode("utf-16-le"), lambda text: text.encode("utf-32"),
    lambda text: b"\xef\xbb\xbf" + text.encode(),
], ids=["utf-16", "utf-16-le", "utf-32", "utf-8-bom"])
def test_json_that_is_not_plain_utf8_is_400(live_api, encode):
    """RFC 8259's JSON between systems is UTF-8 with no byte order mark (Forq's Go refuses the
    rest): not stored, on v1 and v2."""
    body = encode('{"content": "not utf-8"}')
    v1 = live_api.client.post("/api/v1/queues/v1-utf16/messages", content=body)
    assert v1.status_code == 400 and v1.json() == {"code": errors.BODY_INVALID}, v1.text
    refused(call(live_api, "POST", "/queues/v2-utf16/messages", body), 400, errors.BODY_INVALID)
    refused(call(live_api, "PATCH", "/queues/v2-utf16", encode('{"max_attempts": 3}')), 400, errors.BODY_INVALID)
    assert call(live_api, "GET", "/queues/v2-utf16").status_code == 404
    assert live_api.client.get("/api/v1/queues/v1-utf16/messages").status_code == 204


def test_the_queue_list_shows_counts_by_state(live_api):
    q = "v2-counts"
    send(live_api, q, "ready")
    send(live_api, q, "leased")
    send(live_api, q, "delayed", delay=600)
    receive(live_api, q)  # "ready" leased
    listed = {info["name"]: info for info in call(live_api, "GET", "/queues").json()["queues"]}
    assert listed[q]["counts"] == {"ready": 1, "delayed": 1, "in_flight": 1, "failed": 0, "dlq": 0}
    assert listed[q]["last_sequence"] >= 3
    assert call(live_api, "GET", f"/queues/{q}").json()["counts"] == listed[q]["counts"]


def test_purge_deletes_every_message_of_the_queue(live_api):
    q = "v2-purge"
    for i in range(3):
        send(live_api, q, f"m{i}")
    receive(live_api, q)  # one in flight: purged too
    send(live_api, "v2-purge-other")
    refused(call(live_api, "POST", f"/queues/{q}/purge", {"x": 1}), 400, errors.BODY_INVALID)  # takes no field
    assert Message.objects.filter(queue=q).count() == 3
    assert call(live_api, "POST", f"/queues/{q}/purge").json() == {"purged": 3}
    assert not Message.objects.filter(queue=q).exists()
    assert Message.objects.filter(queue="v2-purge-other").count() == 1
    assert receive(live_api, q) == []


def test_delete_a_queue(live_api):
    q = "v2-delete"
    send(live_api, q)
    assert call(live_api, "DELETE", f"/queues/{q}").status_code == 204
    assert not Message.objects.filter(queue=q).exists()
    refused(call(live_api, "GET", f"/queues/{q}"), 404, errors.NOT_FOUND_QUEUE)
    refused(call(live_api, "DELETE", f"/queues/{q}"), 404, errors.NOT_FOUND_QUEUE)
    assert q not in [info["name"] for info in call(live_api, "GET", "/queues").json()["queues"]]


def test_a_paused_queue_receives_nothing_but_accepts_sends(live_api):
    q = "v2-paused"
    forqapp.configure_queue(q, paused=True)  # before the server first reads this queue's policy
    assert send(live_api, q, "kept").status_code == 201
    assert receive(live_api, q, max_messages=10) == []
    assert call(live_api, "GET", f"/queues/{q}").json()["paused"] is True
    forqapp.configure_queue(q, paused=False)
    time.sleep(CACHE_S + 0.2)  # the server's processes read the policy again
    assert [m["content"] for m in receive(live_api, q)] == ["kept"]


def test_max_length_refuses_sends_with_503_queue_full(live_api):
    q = "v2-full"
    forqapp.configure_queue(q, max_length=2)
    assert [send(live_api, q, f"m{i}").status_code for i in range(2)] == [201, 201]
    refused(send(live_api, q, "one too many"), 503, errors.QUEUE_FULL)
    batch = call(live_api, "POST", f"/queues/{q}/messages/batch", {"entries": [{"content": "x"}]})
    refused(batch, 503, errors.QUEUE_FULL)
    v1 = live_api.client.post(f"/api/v1/queues/{q}/messages", json={"content": "x"})
    assert (v1.status_code, v1.json()) == (503, {"code": errors.QUEUE_FULL})  # v1: the same status and code
    assert Message.objects.filter(queue=q).count() == 2
    (got,) = receive(live_api, q)
    call(live_api, "POST", f"/queues/{q}/messages/{got['id']}/ack", {"receipt": got["receipt"]})
    assert send(live_api, q, "room again").status_code == 201


def test_the_dlq_gets_a_message_out_of_attempts_at_receive(live_api):
    q = "v2-redrive"
    forqapp.configure_queue(q, max_attempts=1)
    send(live_api, q)
    (got,) = receive(live_api, q, visibility_timeout=0)  # the lease ends at once, attempts used up
    assert receive(live_api, q) == []  # redriven by this receive, not delivered a second time
    row = Message.objects.get(id=got["id"])
    assert row.is_dlq and row.queue == f"{q}-dlq"
    shown = call(live_api, "GET", f"/queues/{q}-dlq/messages/{got['id']}").json()
    assert (shown["attempts"], shown["failure_reason"], shown["last_error"]) == (0, "max_attempts_reached", None)
    peeked = forqapp.peek(f"{q}-dlq", got["id"])
    assert (peeked.failure_reason, peeked.last_error) == ("max_attempts_reached", None)
    assert forqapp.peek(f"{q}-dlq").failure_reason is None  # only a peek by id says it
    assert call(live_api, "GET", f"/queues/{q}").json()["counts"]["dlq"] == 1


# --- a DLQ's requeue and delete (manage on the DLQ) ------------------------------------------------------


def dead(live_api, q: str, n: int) -> list[str]:
    """``n`` messages sent to ``q`` that ran out of attempts: now in ``q-dlq`` (the ids, in order)."""
    forqapp.configure_queue(q, max_attempts=1)  # before the server first reads this queue's policy
    ids = [send(live_api, q, f"dead-{i}").json()["id"] for i in range(n)]
    assert len(receive(live_api, q, max_messages=10, visibility_timeout=0)) == n  # leases end at once
    assert receive(live_api, q, max_messages=10) == []  # this receive moves them to the DLQ
    assert sorted(Message.objects.filter(queue=f"{q}-dlq", is_dlq=True).values_list("id", flat=True)) == sorted(ids)
    return ids


def in_dlq(q: str) -> set[str]:
    return {str(i) for i in Message.objects.filter(queue=f"{q}-dlq", is_dlq=True).values_list("id", flat=True)}


def test_requeue_one_message_of_a_dlq(live_api):
    q = "v2-requeue-one"
    first, second = dead(live_api, q, 2)
    response = call(live_api, "POST", f"/queues/{q}-dlq/requeue", {"id": first})
    assert (response.status_code, response.json()) == (200, {"requeued": 1})
    assert in_dlq(q) == {second}
    row = Message.objects.get(id=first)
    assert (row.queue, row.is_dlq, row.status, row.attempts) == (q, False, Status.READY, 0)
    (got,) = receive(live_api, q, max_messages=10)  # receivable again, a first attempt
    assert (got["id"], got["content"], got["attempts"]) == (first, "dead-0", 1)
    refused(call(live_api, "POST", f"/queues/{q}-dlq/requeue", {"id": first}), 404, errors.NOT_FOUND_MESSAGE)


def test_requeue_every_message_of_a_dlq(live_api):
    q = "v2-requeue-all"
    ids = dead(live_api, q, 3)
    response = call(live_api, "POST", f"/queues/{q}-dlq/requeue")  # no body: all of them
    assert (response.status_code, response.json()) == (200, {"requeued": 3})
    assert in_dlq(q) == set()
    assert [m["id"] for m in receive(live_api, q, max_messages=10)] == ids  # their FIFO place kept
    again = call(live_api, "POST", f"/queues/{q}-dlq/requeue", {"id": None})  # null: all, none left
    assert (again.status_code, again.json()) == (200, {"requeued": 0})


def test_delete_one_message_of_a_dlq(live_api):
    q = "v2-dead-delete-one"
    first, second = dead(live_api, q, 2)
    response = call(live_api, "DELETE", f"/queues/{q}-dlq/messages/{first}")
    assert (response.status_code, response.content) == (204, b"")
    assert in_dlq(q) == {second} and not Message.objects.filter(id=first).exists()
    refused(call(live_api, "DELETE", f"/queues/{q}-dlq/messages/{first}"), 404, errors.NOT_FOUND_MESSAGE)
    refused(call(live_api, "GET", f"/queues/{q}-dlq/messages/{first}"), 404, errors.NOT_FOUND_MESSAGE)


def test_purge_of_a_dlq_deletes_every_dead_message_and_nothing_else(live_api):
    q = "v2-dead-delete-all"
    dead(live_api, q, 2)
    send(live_api, q, "alive")  # the queue's own message stays
    response = call(live_api, "POST", f"/queues/{q}-dlq/purge")
    assert (response.status_code, response.json()) == (200, {"purged": 2})
    assert in_dlq(q) == set()
    assert list(Message.objects.filter(queue=q).values_list("content", flat=True)) == ["alive"]
    assert call(live_api, "GET", f"/queues/{q}").json()["counts"]["dlq"] == 0


def test_requeue_and_delete_refuse_a_name_that_is_not_a_dlq(live_api):
    q = "v2-regular-queue"
    message_id = send(live_api, q, "stays").json()["id"]
    refused(call(live_api, "POST", f"/queues/{q}/requeue"), 400, errors.DLQ_ONLY_OPERATION)
    refused(call(live_api, "POST", f"/queues/{q}/requeue", {"id": message_id}), 400, errors.DLQ_ONLY_OPERATION)
    refused(call(live_api, "DELETE", f"/queues/{q}/messages/{message_id}"), 400, errors.DLQ_ONLY_OPERATION)
    row = Message.objects.get(id=message_id)
    assert (row.queue, row.is_dlq, row.content) == (q, False, "stays")


def test_requeue_and_delete_of_an_unknown_message_are_404(live_api):
    q = "v2-dead-unknown"
    (kept,) = dead(live_api, q, 1)
    other = send(live_api, "v2-dead-unknown-other", "not in this dlq").json()["id"]
    for missing in (MID, other):  # no such id; a message, but not this DLQ's
        refused(call(live_api, "POST", f"/queues/{q}-dlq/requeue", {"id": missing}), 404, errors.NOT_FOUND_MESSAGE)
        refused(call(live_api, "DELETE", f"/queues/{q}-dlq/messages/{missing}"), 404, errors.NOT_FOUND_MESSAGE)
    assert in_dlq(q) == {kept} and Message.objects.filter(id=other, is_dlq=False).exists()
    refused(call(live_api, "POST", f"/queues/{q}-dlq/requeue", {"id": "nope"}), 400, errors.MESSAGE_ID_INVALID)
    refused(call(live_api, "POST", f"/queues/{q}-dlq/requeue", {"ids": [kept]}), 400, errors.BODY_INVALID)
    refused(call(live_api, "DELETE", f"/queues/{q}-dlq/messages/nope"), 400, errors.MESSAGE_ID_INVALID)
    assert in_dlq(q) == {kept}


def test_requeue_and_delete_need_a_right_key(live_api):
    q = "v2-dead-no-key"
    (kept,) = dead(live_api, q, 1)
    wrong = {"X-API-Key": "not-the-key", "X-Forwarded-For": "198.51.100.16"}  # a throttle count of its own
    for method, path, body in [("POST", f"/queues/{q}-dlq/requeue", {}), ("POST", f"/queues/{q}-dlq/purge", None),
                               ("DELETE", f"/queues/{q}-dlq/messages/{kept}", None)]:
        response = call(live_api, method, path, body, headers=wrong)
        assert (response.status_code, response.json()["code"]) == (401, errors.UNAUTHORIZED), (method, path)
    assert in_dlq(q) == {kept}


def test_requeue_and_delete_need_manage_on_the_dlq(live_api, client):
    """Scoped keys, under Django's handler (the server seals keys with its own server key)."""
    from forqapp.keys import service

    q = "v2-dead-scope"
    first, second = dead(live_api, q, 2)

    def as_key(name: str, *grants: str):
        token = service.create(name, list(grants), actor="test", via="cli").token
        return lambda method, path, body=None: client.generic(
            method, V2 + path, b"" if body is None else json.dumps(body), content_type="application/json",
            HTTP_X_API_KEY=token)

    # manage on the queue alone (a grant covers a DLQ only when it says so), or other actions on the DLQ: 403
    for key in (as_key("dead-queue-manager", f"{q}:manage", f"{q}-*:manage", "*:manage"),
                as_key("dead-reader", f"{q}+dlq:read,consume,produce")):
        for method, path, body in [("POST", f"/queues/{q}-dlq/requeue", {}), ("POST", f"/queues/{q}-dlq/purge", None),
                                   ("DELETE", f"/queues/{q}-dlq/messages/{first}", None)]:
            response = key(method, path, body)
            assert (response.status_code, response.json()["code"]) == (403, errors.FORBIDDEN), (method, path)
            assert response.json()["message"]
    assert in_dlq(q) == {first, second}
    requeuer = as_key("dead-manager", f"{q}+dlq:manage")
    response = requeuer("POST", f"/queues/{q}-dlq/requeue", {"id": first})
    assert (response.status_code, response.json()) == (200, {"requeued": 1})
    deleter = as_key("dlq-only-manager", f"{q}-dlq:manage")  # the DLQ named by itself
    assert deleter("DELETE", f"/queues/{q}-dlq/messages/{second}").status_code == 204
    assert in_dlq(q) == set() and Message.objects.filter(id=first, queue=q, is_dlq=False).exists()
    assert deleter("POST", f"/queues/{q}/purge").status_code == 403  # not the queue itself
    assert Message.objects.filter(id=first).exists()


# --- hostile input: always a 4xx with a code ----------------------------------------------------------


MID = "0190f5c6-4b7a-7c3e-9d2f-1a2b3c4d5e6f"


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), [
    ("POST", "/queues/q/messages", b"{", 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", b"", 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", b"[]", 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", b"\xff\xfe", 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", b'{"content": "\\ud800"}', 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": 1}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "priority": 10**30}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "priority": 1.5}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "priority": True}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "delay": -1}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "delay": "5"}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "delay": 10**400}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "attributes": {"k": 1}}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "attributes": {"": "v"}}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "attributes": {str(i): "v" for i in range(11)}},
     400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "attributes": ["k", "v"]}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "dedup_id": "has space"}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "dedup_id": "d" * 129}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "dedup_window": 0}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "retention": 0.5}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x", "process_after": 1}, 400, errors.PROCESS_AFTER_IN_PAST),
    ("POST", "/queues/q/messages", {"content": "x", "process_after": 2**62}, 400, errors.PROCESS_AFTER_TOO_FAR),
    ("POST", "/queues/q/messages", {"content": "x", "processAfter": 0}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages", {"content": "x" * 262_145}, 400, errors.CONTENT_EXCEEDS_LIMIT),
    ("POST", "/queues/bad%20name/messages", {"content": "x"}, 400, errors.QUEUE_INVALID_NAME),
    ("POST", "/queues//messages", {"content": "x"}, 400, errors.QUEUE_INVALID_NAME),
    ("POST", f"/queues/{'a' * 81}/messages", {"content": "x"}, 400, errors.QUEUE_INVALID_NAME),  # 80 at most
    ("POST", f"/queues/{'a' * 81}-dlq/receive", {}, 400, errors.QUEUE_INVALID_NAME),  # a DLQ: its queue's + 4
    ("POST", "/queues/q-dlq/messages", {"content": "x"}, 400, errors.PRODUCE_TO_DLQ),
    ("POST", "/queues/q/receive", {"max_messages": 11}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/receive", {"max_messages": 0}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/receive", {"max_messages": "3"}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/receive", {"wait": 3}, 400, errors.BODY_INVALID),  # over FORQ_LONG_POLL_SECONDS (2)
    ("POST", "/queues/q/receive", {"wait": -1}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/receive", {"visibility_timeout": 43_201}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/receive", {"random": "yes"}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/receive", {"peek": True}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/receive", b"[1]", 400, errors.BODY_INVALID),
    ("POST", f"/queues/q/messages/{MID}/ack", {}, 400, errors.RECEIPT_MISSING),
    ("POST", f"/queues/q/messages/{MID}/ack", {"receipt": "abc"}, 400, errors.RECEIPT_INVALID),
    ("POST", f"/queues/q/messages/{MID}/ack", {"receipt": 2**63}, 400, errors.RECEIPT_INVALID),
    ("POST", f"/queues/q/messages/{MID}/ack", {"receipt": 1.0}, 400, errors.RECEIPT_INVALID),
    ("POST", f"/queues/q/messages/{MID}/ack", {"receipt": "1"}, 404, errors.NOT_FOUND_MESSAGE),
    ("POST", "/queues/q/messages/nope/ack", {"receipt": "1"}, 400, errors.MESSAGE_ID_INVALID),
    ("POST", f"/queues/q/messages/{MID}/nack", {"receipt": "1", "error": "\x00"}, 400, errors.BODY_INVALID),
    ("POST", f"/queues/q/messages/{MID}/nack", {"receipt": "1", "error": 5}, 400, errors.BODY_INVALID),
    ("POST", f"/queues/q/messages/{MID}/change-visibility", {"receipt": "1"}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages/ack", {"entries": [{"id": MID, "receipt": "1"}] * 11}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages/nack", {"entries": {}}, 400, errors.BODY_INVALID),
    ("POST", "/queues/q/messages/change-visibility", {"entries": [{"id": MID, "receipt": "1"}]},
     400, errors.BODY_INVALID),
    ("GET", "/queues/bad%20name/peek", None, 400, errors.QUEUE_INVALID_NAME),
    ("GET", "/queues/nowhere-at-all", None, 404, errors.NOT_FOUND_QUEUE),
    ("GET", "/queues/q-dlq", None, 400, errors.PRODUCE_TO_DLQ),
    ("GET", "/nothing", None, 404, errors.NOT_FOUND_ROUTE),
    ("GET", "/queues/q/messages/x/y", None, 404, errors.NOT_FOUND_ROUTE),
])
def test_bad_requests_are_4xx_with_a_code_and_a_message(live_api, method, path, body, status, code):
    refused(call(live_api, method, path, body), status, code)
    assert not Message.objects.exists()


def test_wrong_methods_are_405_with_allow(live_api):
    for method, path, allow in [("GET", "/queues/q/messages", "POST"), ("DELETE", "/queues/q/receive", "POST"),
                                ("POST", "/queues", "GET"), ("POST", "/queues/q", "GET, PUT, PATCH, DELETE"),
                                ("GET", "/queues/q/messages/batch", "POST"), ("PUT", "/queues/q/peek", "GET")]:
        response = call(live_api, method, path)
        assert (response.status_code, response.json()["code"]) == (405, errors.METHOD_NOT_ALLOWED), (method, path)
        assert response.headers["allow"] == allow


def test_the_key_and_the_size_limit_apply(live_api):
    no_key = httpx.post(live_api.url + V2 + "/queues/q/messages", json={"content": "x"}, timeout=5)
    assert (no_key.status_code, no_key.json()["code"]) == (401, errors.UNAUTHORIZED)
    too_big = call(live_api, "POST", "/queues/q/messages", b'{"content": "' + b"x" * (2 * 1024 * 1024) + b'"}')
    assert (too_big.status_code, too_big.json()["code"]) == (413, errors.CONTENT_EXCEEDS_LIMIT)
    # v2's refusals from the headers and the body's size carry its message; v1's the code alone
    assert no_key.json()["message"] == "missing or wrong X-API-Key"
    assert too_big.json()["message"] == "the body is over the size limit"
    assert call(live_api, "GET", "/queues/q/messages").json()["message"].startswith("method not allowed")
    v1_too_big = live_api.client.post("/api/v1/queues/q/messages", content=b"x" * (2 * 1024 * 1024 + 1))
    assert (v1_too_big.status_code, v1_too_big.json()) == (413, {"code": errors.CONTENT_EXCEEDS_LIMIT})
    for response in (no_key, too_big, call(live_api, "GET", "/queues")):
        assert response.headers["x-content-type-options"] == "nosniff"


def test_the_document_describes_v2_and_is_served_at_both_addresses(live_api):
    v1 = httpx.get(live_api.url + "/api/v1/openapi.json", timeout=5)
    v2 = httpx.get(live_api.url + "/api/v2/openapi.json", timeout=5)
    assert v1.content == v2.content
    paths = v1.json()["paths"]
    assert "/api/v1/queues/{queue}/messages" in paths
    assert {"/api/v2/queues", "/api/v2/queues/{queue}", "/api/v2/queues/{queue}/receive",
            "/api/v2/queues/{queue}/messages/{messageId}/change-visibility"} <= set(paths)


def test_v1_answers_as_before(live_api):
    """v2's messages are v1's: v1 consumes what v2 sends, with v1's own shape."""
    send(live_api, "v2-and-v1", "both", priority=7, attributes={"a": "b"})
    consumed = live_api.consume("v2-and-v1")
    assert consumed.status_code == 200 and set(consumed.json()) == {"id", "content", "receipt"}
    produced = live_api.produce("v2-and-v1", "v1")
    assert produced.status_code == 204 and produced.content == b""


# --- under Django's own handler (include("forqapp.urls")) ---------------------------------------------


def test_under_django_the_v2_api_answers_the_same(client):
    client.defaults["HTTP_X_API_KEY"] = APP_SECRET
    put = client.put("/api/v2/queues/dj-v2", {"max_length": 5}, content_type="application/json")
    assert put.status_code == 200 and put.json()["overrides"] == {"max_length": 5}
    sent = client.post("/api/v2/queues/dj-v2/messages", {"content": "x"}, content_type="application/json")
    assert sent.status_code == 201
    for response, status, code in [
        (client.get("/api/v2/queues/dj-v2/receive"), 405, errors.METHOD_NOT_ALLOWED),
        (client.get("/api/v2/elsewhere"), 404, errors.NOT_FOUND_ROUTE),
        (client.get("/api/v2/queues", HTTP_X_API_KEY="wrong"), 401, errors.UNAUTHORIZED),
        (client.post("/api/v2/queues/dj-v2/messages", "{", content_type="application/json"), 400, errors.BODY_INVALID),
    ]:
        assert response.status_code == status
        assert response.json()["code"] == code and response.json()["message"]  # here every error has one


# --- no request gets a 500 (the ASGI app, in this process) ---------------------------------------------


segments = st.sampled_from(["q", "q", "", "q-dlq", "a" * 65, "a" * 81, "a/b", ".", "%", MID, "ünï"]) | st.text(max_size=12)
nasty = st.sampled_from([10**400, 10**30, 2**63, -(2**63) - 1, -1, 0, 1, 0.0005, 1e300, 43_201, "", "1", True,
                         None, [], {}])
values = nasty | st.integers() | st.floats() | st.text(max_size=6) | json_values  # floats: NaN, Infinity too
receipts = st.sampled_from(["1", "-1", "9" * 19, "1e3", " 7 "]) | values


def mostly(valid: st.SearchStrategy) -> st.SearchStrategy:
    """A valid value three times in four, else anything (deeper paths, then the odd value)."""
    return st.sampled_from(range(4)).flatmap(lambda n: values if n == 3 else valid)


seconds = st.floats(0.001, 100) | st.integers(1, 100)
MESSAGE = {
    "content": mostly(st.text(max_size=8)), "priority": mostly(st.integers(-1000, 1000)), "delay": mostly(seconds),
    "process_after": values,
    "attributes": mostly(st.dictionaries(st.text(min_size=1, max_size=4), st.text(max_size=4), max_size=3)),
    "dedup_id": mostly(st.sampled_from(["a", "b", "order-1"])), "dedup_window": mostly(seconds),
    "retention": mostly(st.integers(1, 1000)),
}
POLICY = {
    "max_attempts": mostly(st.integers(0, 10) | st.just("unlimited")), "ordering": mostly(st.sampled_from(["fifo", "lifo"])),
    "max_length": mostly(st.integers(1, 100)), "paused": mostly(st.booleans()), "visibility_timeout": mostly(seconds),
    "retention": mostly(seconds), "dlq_retention": mostly(seconds), "dedup_window": mostly(seconds),
    "backoff": mostly(st.lists(st.integers(0, 1000), min_size=1, max_size=3) | st.fixed_dictionaries(
        {"base_ms": st.integers(1, 100)}, optional={"max_ms": values, "jitter": st.floats(0, 1) | values})),
}
DELIVERY = {"id": mostly(st.just(MID)), "receipt": receipts}
SCHEDULE = {
    "queue": mostly(st.just("q")), "content": mostly(st.text(max_size=8)),
    "cron": mostly(st.sampled_from(["* * * * *", "0 3 * * *", "0 0 31 2 *", "bad", "L L L L L"]) | st.text(max_size=12)),
    "every": mostly(seconds), "catch_up": mostly(st.sampled_from(["skip", "one", "all"])),
    "priority": mostly(st.integers(-1000, 1000)), "paused": mostly(st.booleans()),
    "attributes": mostly(st.dictionaries(st.text(min_size=1, max_size=4), st.text(max_size=4), max_size=3)),
}


def _entries(fields: dict) -> st.SearchStrategy:
    return st.lists(st.fixed_dictionaries({}, optional=fields) | values, max_size=12) | values


# Each endpoint, with the fields its body may hold (unknown ones are mixed in too).
ENDPOINTS = {
    "/api/v2/queues": {},
    "/api/v2/queues/{queue}": POLICY,
    "/api/v2/queues/{queue}/purge": {},
    "/api/v2/queues/{queue}/requeue": {"id": mostly(st.just(MID))},
    "/api/v2/queues/{queue}/peek": {},
    "/api/v2/queues/{queue}/receive": {"max_messages": mostly(st.integers(1, 10)),
                                       "wait": st.sampled_from([0, -1, 1e300, 2**63, "1"]),
                                       "visibility_timeout": mostly(seconds), "random": mostly(st.booleans())},
    "/api/v2/queues/{queue}/messages": MESSAGE,
    "/api/v2/queues/{queue}/messages/batch": {"entries": _entries(MESSAGE)},
    "/api/v2/queues/{queue}/messages/ack": {"entries": _entries(DELIVERY)},
    "/api/v2/queues/{queue}/messages/nack": {"entries": _entries(DELIVERY)},
    "/api/v2/queues/{queue}/messages/change-visibility": {"entries": _entries(DELIVERY), "visibility_timeout": mostly(seconds)},
    "/api/v2/queues/{queue}/messages/{id}": {},
    "/api/v2/queues/{queue}/messages/{id}/ack": {"receipt": receipts},
    "/api/v2/queues/{queue}/messages/{id}/nack": {"receipt": receipts, "error": st.text(max_size=8) | values},
    "/api/v2/queues/{queue}/messages/{id}/change-visibility": {"receipt": receipts,
                                                               "visibility_timeout": mostly(seconds)},
    "/api/v2/queues/{queue}/messages/{id}/defer": {"receipt": receipts, "delay": mostly(seconds),
                                                   "state": mostly(st.text(max_size=8))},
    "/api/v2/schedules": {},
    "/api/v2/schedules/{name}": SCHEDULE,
    "/api/v2/schedules/{name}/run": {},
}


def _bodies(fields: dict) -> st.SearchStrategy:
    """Mostly a JSON object of the endpoint's fields (NaN and Infinity included, as Python's JSON
    writes and reads them), sometimes with an unknown one; sometimes anything at all."""
    objects = st.fixed_dictionaries({}, optional=fields)
    odd = st.fixed_dictionaries({}, optional={**fields, "unknown": values})
    return st.sampled_from(range(5)).flatmap(lambda n: st.one_of(
        odd.map(lambda o: json.dumps(o).encode()),
        json_values.map(lambda o: json.dumps(o).encode()),
        st.binary(max_size=40),
        st.integers(900, 3000).map(lambda d: b'{"entries": ' + b"[" * d + b"]" * d + b"}"),
    ) if n == 4 else objects.map(lambda o: json.dumps(o).encode()))


request_headers = st.fixed_dictionaries(
    {},
    optional={"content-type": st.sampled_from([b"application/json", b""]) | header_values,
              "content-length": st.sampled_from([b"0", b"-1", b"abc", b"3000000"]) | header_values},
)


@pytest.fixture(scope="module")
def app():
    return APIApplication()


def _methods(template: str) -> tuple[str, ...]:
    """The methods the route of ``template`` serves."""
    match = resolve(template.format(queue="q", id=MID, name="s"), urlconf="forqapp.api.urls")
    return plumbing.spec(match.func).methods


def often(draw, usual, other, one_in: int = 5):
    """``usual`` most of the time, else a draw of ``other``: most requests are well-formed but for
    one part, so that they reach the view's reading of the body rather than stop at the route."""
    return draw(other) if draw(st.sampled_from(range(one_in))) == one_in - 1 else usual  # 0: the simplest


@st.composite
def requests(draw, template: str):
    parts = {name: often(draw, usual, segments) for name, usual in (("queue", "q"), ("id", MID), ("name", "s"))}
    raw = template.format(**{k: quote(v, safe="") for k, v in parts.items()})
    raw += often(draw, "", st.sampled_from(["/", "//", "/x"]), 10)
    method = often(draw, draw(st.sampled_from(_methods(template))), methods, 8)
    headers = draw(request_headers)
    headers["x-api-key"] = often(draw, APP_SECRET.encode(), st.sampled_from([b"", b"wrong", "é".encode()]), 10)
    body = draw(_bodies(ENDPOINTS[template]))
    return {"method": method, "raw_path": raw, "query": draw(queries), "headers": headers, "body": body,
            "client": f"10.{draw(st.integers(0, 255))}.1.1"}


@pytest.mark.parametrize("template", ENDPOINTS)
@settings(max_examples=80, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_no_request_gets_a_500(app, template, data):
    r = data.draw(requests(template))
    path = unquote(r["raw_path"], errors="replace")
    scope = _scope(r["method"], path, r["headers"], query=r["query"], raw_path=r["raw_path"].encode(),
                   client=r["client"])
    with override_settings(FORQ_LONG_POLL_SECONDS=0):
        status, headers, body = asyncio.run(_call(app, scope, _pieces((0, r["body"]))))
    assert 200 <= status < 500, (status, body)
    assert headers["x-content-type-options"] == "nosniff"
    if status >= 400:
        assert headers["content-type"] == "application/json", (status, body)
        assert json.loads(body)["code"] in errors.STATUS


@pytest.mark.parametrize("value", ["false", "0.0", "1e-400", "1e400", "Infinity", "-Infinity", "NaN", '""', "[]"])
def test_a_policy_or_schedule_number_that_only_looks_like_one_is_refused(client, value):
    """``max_attempts`` of ``false``, ``0.0`` or ``1e-400`` (equal to 0) or an infinite number was
    taken as "unlimited" (dead-lettering off), and a falsy schedule ``priority`` as 0. Only an
    integer, ``"unlimited"`` or null is a ``max_attempts``; ``NaN``, ``Infinity`` and ``1e400``
    are no JSON (400 ``bad_request.body.invalid`` from the parse); v1's produce refuses them too."""
    client.defaults["HTTP_X_API_KEY"] = APP_SECRET
    for path, body, writes in [
            ("/api/v2/queues/loose", f'{{"max_attempts": {value}}}', (client.put, client.patch)),
            ("/api/v2/schedules/loose", f'{{"queue": "loose", "content": "c", "every": 60, "priority": {value}}}',
             (client.put,))]:
        for method in writes:
            answer = method(path, body, content_type="application/json")
            assert (answer.status_code, answer.json()["code"]) == (400, errors.BODY_INVALID), (path, answer.json())
    assert client.get("/api/v2/queues/loose").status_code == 404
    assert client.get("/api/v2/schedules/loose").status_code == 404
    produced = client.post("/api/v1/queues/loose/messages", f'{{"content": "x", "extra": {value}}}',
                           content_type="application/json")
    if value in ("Infinity", "-Infinity", "NaN", "1e400"):
        assert (produced.status_code, produced.json()) == (400, {"code": errors.BODY_INVALID})
    else:  # (an unknown field is ignored)
        assert produced.status_code == 204
    assert client.put("/api/v2/queues/loose", '{"max_attempts": 0}', content_type="application/json").json()[
        "overrides"] == {"max_attempts": "unlimited"}
