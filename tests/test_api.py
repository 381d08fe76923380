"""The HTTP contract (SPEC §1), case by case, against a real server process."""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid

import httpx
import pytest

import forqapp
from forqapp import services
from forqapp.models import Message, Status

from .conftest import SECRET

pytestmark = pytest.mark.django_db(transaction=True)

SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
}


def code(response: httpx.Response) -> str:
    return response.json()["code"]


def consume_one(live_api, queue: str) -> dict:
    response = live_api.consume(queue)
    assert response.status_code == 200, response.text
    return response.json()


# --- happy path ----------------------------------------------------------------------------


def test_produce_consume_ack(live_api):
    response = live_api.produce("orders", "first")
    assert response.status_code == 204
    assert response.content == b"" and "content-type" not in response.headers
    body = consume_one(live_api, "orders")
    assert set(body) == {"id", "content", "receipt"}
    assert body["content"] == "first"
    assert uuid.UUID(body["id"]).version == 7
    assert body["receipt"].isdigit()
    assert live_api.settle("ack", "orders", body["id"], body["receipt"]).status_code == 204
    assert not Message.objects.filter(id=body["id"]).exists()


def test_every_response_has_security_headers(live_api):
    for response in (
        live_api.client.get("/healthcheck"),
        live_api.produce("hdr", "x"),
        live_api.produce("bad name", "x"),
        httpx.get(live_api.url + "/api/v1/queues/hdr/messages", timeout=5),
        live_api.client.delete("/api/v1/queues/hdr/messages"),
    ):
        for name, value in SECURITY_HEADERS.items():
            assert response.headers.get(name) == value, (response.status_code, name)


def test_healthcheck_needs_no_key(live_api):
    assert httpx.get(live_api.url + "/healthcheck", timeout=5).status_code == 204


def test_fifo_by_receive_time(live_api):
    for i in range(5):
        assert live_api.produce("fifo", f"m{i}").status_code == 204
    got = []
    for _ in range(5):
        body = consume_one(live_api, "fifo")
        got.append(body["content"])
        live_api.settle("ack", "fifo", body["id"], body["receipt"])
    assert got == [f"m{i}" for i in range(5)]


def test_unknown_fields_are_ignored(live_api):
    response = live_api.client.post("/api/v1/queues/extra/messages", json={"content": "x", "priority": 9})
    assert response.status_code == 204


def test_consume_empty_queue_long_polls_then_204(live_api):
    start = time.monotonic()
    response = live_api.consume("empty")
    assert response.status_code == 204
    assert time.monotonic() - start >= 1.5  # the fixture's server waits FORQ_LONG_POLL_SECONDS=2


def test_consume_from_dlq_is_allowed(live_api):
    assert live_api.consume("orders-dlq").status_code == 204


# --- delayed messages, nack backoff, failure ---------------------------------------------------


def test_delayed_message_is_not_due_before_process_after(live_api):
    due = services.now_ms() + 1500
    assert live_api.produce("later", "x", processAfter=due).status_code == 204
    response = live_api.client.get("/api/v1/queues/later/messages", timeout=10)
    assert response.status_code == 200
    assert services.now_ms() >= due


def test_nack_backs_off_then_fails_after_max_attempts(live_api, settings):
    live_api.produce("retry", "x")
    body = consume_one(live_api, "retry")
    nacked_at = services.now_ms()
    assert live_api.settle("nack", "retry", body["id"], body["receipt"]).status_code == 204
    row = Message.objects.get(id=body["id"])
    assert row.status == Status.READY and row.attempts == 1
    assert 1000 <= row.process_after - nacked_at <= 1100  # first backoff: 1 s
    # Attempts 2..5: skip the waiting by making it due, then nack again.
    for attempt in range(2, 6):
        Message.objects.filter(id=body["id"]).update(process_after=0)
        body = consume_one(live_api, "retry")
        assert live_api.settle("nack", "retry", body["id"], body["receipt"]).status_code == 204
        row = Message.objects.get(id=body["id"])
        assert row.attempts == attempt
    assert row.status == Status.FAILED


# --- receipts ---------------------------------------------------------------------------------


def test_old_receipt_no_longer_matches_after_redelivery(live_api):
    live_api.produce("fence", "x")
    first = consume_one(live_api, "fence")
    # The delivery's lease ends and the message is delivered again (by the next consume itself).
    Message.objects.filter(id=first["id"]).update(process_after=1)
    second = consume_one(live_api, "fence")
    assert second["id"] == first["id"] and second["receipt"] != first["receipt"]
    assert code(live_api.settle("ack", "fence", first["id"], first["receipt"])) == "not_found.message"
    assert live_api.settle("ack", "fence", second["id"], second["receipt"]).status_code == 204


@pytest.mark.parametrize("op", ["ack", "nack"])
def test_receipt_rules(live_api, op):
    live_api.produce("rcpt", "x")
    body = consume_one(live_api, "rcpt")
    missing = live_api.settle(op, "rcpt", body["id"], None)
    assert (missing.status_code, code(missing)) == (400, "bad_request.receipt.missing")
    invalid = live_api.settle(op, "rcpt", body["id"], "abc")
    assert (invalid.status_code, code(invalid)) == (400, "bad_request.receipt.invalid")
    wrong = live_api.settle(op, "rcpt", body["id"], int(body["receipt"]) + 1)
    assert (wrong.status_code, code(wrong)) == (404, "not_found.message")
    other_queue = live_api.settle(op, "other", body["id"], body["receipt"])
    assert (other_queue.status_code, code(other_queue)) == (404, "not_found.message")
    assert live_api.settle(op, "rcpt", body["id"], body["receipt"]).status_code == 204
    again = live_api.settle(op, "rcpt", body["id"], body["receipt"])
    assert (again.status_code, code(again)) == (404, "not_found.message")


OUT_OF_RANGE_RECEIPTS = [2**63, 10**19 - 1, -(2**63) - 1, "--5", "---1", "5-", "+-5", "++5"]


@pytest.mark.parametrize("receipt", OUT_OF_RANGE_RECEIPTS)
@pytest.mark.parametrize("op", ["ack", "nack"])
def test_a_receipt_that_is_no_64_bit_integer_is_invalid(live_api, op, receipt):
    response = live_api.settle(op, "rcpt-range", str(uuid.uuid4()), str(receipt))
    assert (response.status_code, code(response)) == (400, "bad_request.receipt.invalid")


@pytest.mark.parametrize("receipt", [*OUT_OF_RANGE_RECEIPTS, "٣"])  # ٣: an Arabic-Indic digit 3
@pytest.mark.parametrize("op", ["ack", "release"])
def test_a_bulk_receipt_that_is_no_64_bit_integer_is_invalid(live_api, op, receipt):
    for value in {receipt, str(receipt)}:  # as a JSON number and as a string
        response = live_api.client.post(f"/api/v1/queues/rcpt-range/messages/{op}",
                                        json={"deliveries": [{"id": str(uuid.uuid4()), "receipt": value}]})
        assert (response.status_code, code(response)) == (400, "bad_request.receipt.invalid")


def test_the_largest_receipt_is_a_valid_one(live_api):
    response = live_api.settle("ack", "rcpt-range", str(uuid.uuid4()), str(2**63 - 1))
    assert (response.status_code, code(response)) == (404, "not_found.message")


def test_a_receipt_with_a_plus_sign_is_an_integer_as_forq_reads_it(live_api):
    """Forq parses the header with Go's strconv.ParseInt, which takes a leading "+" (an audit
    found "+1" refused as 400 here, where Forq answers 404 for a receipt that is not current)."""
    live_api.produce("rcpt-plus", "x")
    body = consume_one(live_api, "rcpt-plus")
    response = live_api.settle("ack", "rcpt-plus", body["id"], "+1")
    assert (response.status_code, code(response)) == (404, "not_found.message")
    assert live_api.settle("ack", "rcpt-plus", body["id"], "+" + body["receipt"]).status_code == 204


def test_unknown_message_is_404(live_api):
    response = live_api.settle("ack", "q", str(uuid.uuid4()), 1)
    assert (response.status_code, code(response)) == (404, "not_found.message")


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize("queue", ["bad name", "a" * 65, "col:on", "ünï", "semi;colon"])
def test_invalid_queue_names(live_api, queue):
    for response in (live_api.produce(queue, "x"), live_api.consume(queue)):
        assert (response.status_code, code(response)) == (400, "bad_request.queue.invalid_name")


def test_longest_valid_queue_name(live_api):
    assert live_api.produce("a._-Z9" + "b" * 58, "x").status_code == 204


def test_v1_keeps_forqs_64_characters_where_forqapp_takes_80(live_api):
    """Forq's v1 contract (SPEC: ``^[a-zA-Z0-9._-]{1,64}$``) does not change with forqapp's 80:
    its produce, consume, ack and nack refuse a longer name, one that v2 and the bulk endpoints
    (the Spark connector's) take; a 64-character name's DLQ (68) is out of v1's reach too."""
    for name in ("a" * 65, "q" * 80, "b" * 64 + "-dlq"):
        for response in (live_api.produce(name, "x"), live_api.consume(name),
                         live_api.settle("ack", name, str(uuid.uuid4()), 1),
                         live_api.settle("nack", name, str(uuid.uuid4()), 1)):
            assert (response.status_code, code(response)) == (400, "bad_request.queue.invalid_name"), name
    longest = "q" * 80
    sent = live_api.client.post(f"/api/v2/queues/{longest}/messages", json={"content": "v2"})
    assert sent.status_code == 201, sent.text
    batch = live_api.client.post(f"/api/v1/queues/{longest}/messages/batch", json={"messages": [{"content": "bulk"}]})
    assert batch.status_code == 200, batch.text
    claimed = live_api.client.post(f"/api/v1/queues/{longest}/messages/claim", json={"max": 5}).json()["messages"]
    assert sorted(m["content"] for m in claimed) == ["bulk", "v2"]
    for bad in ("q" * 81, "q" * 85 + "-dlq"):
        refused_v2 = live_api.client.post(f"/api/v2/queues/{bad}/messages", json={"content": "x"})
        refused_bulk = live_api.client.post(f"/api/v1/queues/{bad}/messages/batch", json={"messages": [{"content": "x"}]})
        for response in (refused_v2, refused_bulk):
            assert (response.status_code, code(response)) == (400, "bad_request.queue.invalid_name"), bad


def test_produce_to_dlq_is_refused(live_api):
    response = live_api.produce("emails-dlq", "x")
    assert (response.status_code, code(response)) == (400, "bad_request.queue.produce_to_dlq")


@pytest.mark.parametrize("message_id", ["not-a-uuid", "1234", "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz"])
def test_invalid_message_id(live_api, message_id):
    response = live_api.settle("ack", "q", message_id, 1)
    assert (response.status_code, code(response)) == (400, "bad_request.messageId.invalid")


def test_a_slash_in_a_queue_name_is_an_invalid_name(live_api):
    """Forq's SDKs escape queue names: "a/b" arrives as a%2Fb, one segment, as Forq routes it."""
    for response in (live_api.client.post("/api/v1/queues/a%2Fb/messages", json={"content": "x"}),
                     live_api.client.get("/api/v1/queues/a%2fb/messages")):
        assert (response.status_code, code(response)) == (400, "bad_request.queue.invalid_name")


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1,2]", b'"text"', b"{}", b'{"content": 5}', b'{"content": null}',
     b'{"content": "x", "processAfter": "soon"}', b'{"content": "x", "processAfter": 1.5}',
     b'{"content": "x", "processAfter": true}', b"\xff\xfe",
     b'{"content": "\\ud800"}', b'{"content": "a\\udfffb"}'],  # lone surrogates: valid JSON, not text
)
def test_invalid_bodies(live_api, body):
    response = live_api.client.post("/api/v1/queues/q/messages", content=body)
    assert (response.status_code, code(response)) == (400, "bad_request.body.invalid")


@pytest.mark.parametrize("path", ["/api/v1/queues/q/messages", "/api/v1/queues/q/messages/batch"])
def test_deeply_nested_json_is_an_invalid_body(live_api, path):
    """json.loads gives up (RecursionError) around 1,000 levels: a 400 like any other bad JSON."""
    for depth in (1_000, 100_000):
        nested = b'{"content": "x", "messages": ' + b"[" * depth + b"]" * depth + b"}"
        response = live_api.client.post(path, content=nested)
        assert (response.status_code, code(response)) == (400, "bad_request.body.invalid")


def test_empty_content_is_stored_as_forq_does(live_api):
    assert live_api.produce("empty-content", "").status_code == 204
    body = consume_one(live_api, "empty-content")
    assert body["content"] == ""
    assert live_api.settle("ack", "empty-content", body["id"], body["receipt"]).status_code == 204


def test_process_after_0_means_due_now_as_forq_does(live_api):
    assert live_api.produce("pa-zero", "x", processAfter=0).status_code == 204
    row = Message.objects.get(queue="pa-zero")
    assert row.process_after <= services.now_ms()
    assert consume_one(live_api, "pa-zero")["content"] == "x"


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("POST", "/api/v1/queues//messages", "bad_request.queue.invalid_name"),
        ("GET", "/api/v1/queues//messages", "bad_request.queue.invalid_name"),
        ("POST", f"/api/v1/queues//messages/{uuid.UUID(int=1)}/ack", "bad_request.queue.invalid_name"),
        ("POST", "/api/v1/queues/q/messages//ack", "bad_request.messageId.invalid"),
        ("POST", "/api/v1/queues/q/messages//nack", "bad_request.messageId.invalid"),
    ],
)
def test_an_empty_path_segment_is_forqs_400(live_api, method, path, expected):
    """Forq's router matches empty segments: the SDKs get a JSON error they can parse, not a 404."""
    response = live_api.client.request(method, path, json={"content": "x"}, headers={"X-Forq-Receipt": "1"})
    assert (response.status_code, code(response)) == (400, expected)
    assert response.headers["content-type"] == "application/json"


@pytest.mark.parametrize("path", ["/api/v1/nowhere", "/api/v1/queues/q", "/api/v1/queues/q/messages/x/y/z",
                                  "/api/v2/nowhere", "/nowhere"])
def test_unknown_paths_are_a_json_404(live_api, path):
    response = live_api.client.post(path, json={"content": "x"})
    assert (response.status_code, code(response)) == (404, "not_found.route")
    for name, value in SECURITY_HEADERS.items():
        assert response.headers[name] == value


def test_content_limit_counts_utf8_bytes(live_api):
    assert live_api.produce("big", "x" * 262_144).status_code == 204
    too_big = live_api.produce("big", "é" * 131_073)  # 262,146 bytes in UTF-8
    assert (too_big.status_code, code(too_big)) == (400, "bad_request.body.content.exceeds_limit")


def test_body_over_2_mib_is_refused_with_413(live_api):
    payload = json.dumps({"content": "x" * (2 * 1024 * 1024 + 10)}).encode()
    response = live_api.client.post("/api/v1/queues/q/messages", content=payload)
    assert (response.status_code, code(response)) == (413, "bad_request.body.content.exceeds_limit")


def test_process_after_bounds(live_api):
    now = services.now_ms()
    past = live_api.produce("pa", "x", processAfter=now - 11_000)
    assert (past.status_code, code(past)) == (400, "bad_request.body.processAfter.in_past")
    far = live_api.produce("pa", "x", processAfter=now + 367 * 24 * 3600 * 1000)
    assert (far.status_code, code(far)) == (400, "bad_request.body.processAfter.too_far")
    assert live_api.produce("pa", "x", processAfter=now - 5_000).status_code == 204
    assert live_api.produce("pa", "x", processAfter=now + 365 * 24 * 3600 * 1000).status_code == 204


def test_content_is_checked_before_process_after_as_the_spec_orders(live_api):
    """Audit: a bad content with a processAfter in the past answered processAfter.in_past; SPEC
    checks the body and the content's size first. The batch and the staged write too."""
    def post(path, body):
        return live_api.client.post(path, content=json.dumps(body).encode())

    for body, expected in (({"content": 5, "processAfter": 1}, "bad_request.body.invalid"),
                           ({"processAfter": 1}, "bad_request.body.invalid"),
                           ({"content": "x" * 262_145, "processAfter": 1}, "bad_request.body.content.exceeds_limit")):
        for path, payload in (("/api/v1/queues/order/messages", body),
                              ("/api/v1/queues/order/messages/batch", {"messages": [body]}),
                              ("/api/v1/queues/order/staged/t1", {"messages": [body]})):
            answer = post(path, payload)
            assert (answer.status_code, code(answer)) == (400, expected), (path, body)


def test_wrong_method_is_405(live_api):
    for response in (live_api.client.delete("/api/v1/queues/q/messages"),
                     live_api.client.get(f"/api/v1/queues/q/messages/{uuid.uuid4()}/ack")):
        assert (response.status_code, code(response)) == (405, "method_not_allowed")
        assert "POST" in response.headers["allow"]


def test_a_lower_case_method_is_405(live_api):
    """Methods are case-sensitive (RFC 9110): ``get`` is not GET, and takes no message."""
    assert live_api.produce("lower-method").status_code == 204
    for method, path in (("get", "/api/v1/queues/lower-method/messages"),
                         ("post", "/api/v1/queues/lower-method/messages"),
                         ("Get", "/api/v2/queues/lower-method")):
        url = httpx.URL(live_api.url)
        conn = http.client.HTTPConnection(url.host, url.port, timeout=10)  # (httpx upper-cases it)
        conn.request(method, path, b'{"content": "x"}', {"X-API-Key": SECRET, "Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 405, (method, path, response.status)
        assert "allow" in {k.lower() for k in response.headers}
        conn.close()
    taken = live_api.consume("lower-method")
    assert taken.status_code == 200 and taken.json()["content"] == "hello"
    assert live_api.consume("lower-method").status_code == 204  # nothing more was stored


# --- auth and throttling --------------------------------------------------------------------


def _as(address: str, key: str | None) -> dict:
    headers = {"X-Forwarded-For": f"10.9.9.9, {address}"}
    if key is not None:
        headers["X-API-Key"] = key
    return headers


def test_missing_or_wrong_key_is_401(live_api):
    url = live_api.url + "/api/v1/queues/q/messages"
    for key in (None, "wrong", SECRET + "x", SECRET[:-1]):
        response = httpx.post(url, json={"content": "x"}, headers=_as(f"192.0.2.{len(key or '')}", key))
        assert (response.status_code, code(response)) == (401, "unauthorized")


def test_throttle_after_five_failures_but_valid_key_passes(live_api):
    url = live_api.url + "/api/v1/queues/q/messages"
    address = "198.51.100.77"
    for _ in range(5):
        assert httpx.post(url, json={"content": "x"}, headers=_as(address, "nope")).status_code == 401
    blocked = httpx.post(url, json={"content": "x"}, headers=_as(address, "nope"))
    assert (blocked.status_code, code(blocked)) == (429, "too_many_requests")
    assert 1 <= int(blocked.headers["retry-after"]) <= 60  # seconds until the block ends
    assert httpx.post(url, json={"content": "x"}, headers=_as(address, None)).status_code == 429
    assert httpx.post(url, json={"content": "x"}, headers=_as(address, SECRET)).status_code == 204
    other = httpx.post(url, json={"content": "x"}, headers=_as("198.51.100.78", "nope"))
    assert other.status_code == 401


@pytest.mark.parametrize("query", ["limit=" + "1" * 4301, "&".join(f"p{i}=1" for i in range(1001)),
                                   "limit=0", "limit=10001", "limit=%D9%A3"])
def test_bad_snapshot_queries_are_400(live_api, query):
    response = live_api.client.get(f"/api/v1/queues/q/snapshot?{query}")
    assert (response.status_code, code(response)) == (400, "bad_request.body.invalid")


def test_metrics_needs_its_own_key(live_api):
    # A produce of this test's own: the counter has no sample until a queue produced (on a server
    # whose first test this is, it would be absent).
    assert live_api.client.post("/api/v1/queues/metrics-q/messages", json={"content": "x"}).status_code == 204
    assert httpx.get(live_api.url + "/metrics", headers=_as("203.0.113.5", SECRET)).status_code == 401
    from .conftest import METRICS_SECRET

    response = httpx.get(live_api.url + "/metrics", headers=_as("203.0.113.6", METRICS_SECRET))
    assert response.status_code == 200
    assert 'forq_messages_produced_total{queue_name="metrics-q",queue_type="regular"}' in response.text
    # As Prometheus's scrape config sends it (authorization: credentials: …): a bearer token.
    bearer = {**_as("203.0.113.7", None), "Authorization": f"Bearer {METRICS_SECRET}"}
    assert httpx.get(live_api.url + "/metrics", headers=bearer).status_code == 200
    for wrong in (f"Bearer {SECRET}", f"Basic {METRICS_SECRET}", "Bearer"):
        refused = httpx.get(live_api.url + "/metrics", headers={**_as("203.0.113.8", None), "Authorization": wrong})
        assert refused.status_code == 401, wrong


# --- long poll --------------------------------------------------------------------------------


def test_long_poll_wakes_on_produce_from_another_process(live_api):
    result = {}

    def poll():
        start = time.monotonic()
        response = live_api.client.get("/api/v1/queues/wake/messages")
        result["status"], result["elapsed"] = response.status_code, time.monotonic() - start

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.5)
    forqapp.send("wake", "now")  # this test process is not the server process
    thread.join(10)
    # Woken by the write itself, not by the end of the 2 s poll (that would answer 204); the
    # benchmarks measure the latency.
    assert result["status"] == 200


def test_abandoned_long_poll_does_not_swallow_a_message(live_api):
    with pytest.raises(httpx.ReadTimeout):
        live_api.client.get("/api/v1/queues/gone/messages", timeout=0.5)
    time.sleep(0.3)
    live_api.produce("gone", "x")
    time.sleep(0.3)
    row = Message.objects.get(queue="gone")
    assert row.status == Status.READY and row.attempts == 0
    assert consume_one(live_api, "gone")["content"] == "x"


def test_openapi_document(live_api):
    doc = httpx.get(live_api.url + "/api/v1/openapi.json", timeout=5).json()
    assert doc["openapi"].startswith("3.1")
    assert "/api/v1/queues/{queue}/messages" in doc["paths"]
    assert "/api/v1/queues/{queue}/messages/{messageId}/ack" in doc["paths"]


def test_abandoned_bulk_claim_does_not_swallow_messages(live_api):
    with pytest.raises(httpx.ReadTimeout):
        live_api.client.post("/api/v1/queues/gone-bulk/messages/claim", json={"max": 5, "wait": 2}, timeout=0.5)
    time.sleep(0.3)
    live_api.produce("gone-bulk", "x")
    time.sleep(0.3)
    row = Message.objects.get(queue="gone-bulk")
    assert row.status == Status.READY and row.attempts == 0


def test_throttle_is_shared_by_every_server_process():
    from .conftest import start_server, stop_server

    api = start_server({"FORQ_API_WORKERS": "2"})
    try:
        url = api.url + "/api/v1/queues/q/messages"
        address = "198.51.100.99"
        # A new connection per request: the two worker processes take turns.
        statuses = [httpx.post(url, json={"content": "x"}, headers=_as(address, "nope")).status_code
                    for _ in range(8)]
        assert statuses == [401] * 5 + [429] * 3
    finally:
        stop_server(api)


# --- issue 12 through Forq's v1 API: the queue's policy applies, the contract is unchanged ------


def test_v1_produce_beyond_max_length_is_503_queue_full(live_api):
    forqapp.configure_queue("capped", max_length=2)
    assert live_api.produce("capped", "a").status_code == 204
    assert live_api.produce("capped", "b").status_code == 204
    full = live_api.produce("capped", "c")
    assert (full.status_code, code(full)) == (503, "queue.full")
    assert Message.objects.filter(queue="capped").count() == 2
    body = consume_one(live_api, "capped")
    assert live_api.settle("ack", "capped", body["id"], body["receipt"]).status_code == 204
    assert live_api.produce("capped", "c").status_code == 204  # room again


def test_v1_consume_of_a_paused_queue_gets_nothing_until_resumed(live_api):
    forqapp.configure_queue("held", paused=True)
    assert live_api.produce("held", "x").status_code == 204  # sends are still accepted
    assert live_api.consume("held").status_code == 204
    forqapp.configure_queue("held", paused=False)
    deadline = time.monotonic() + 5  # the server process reads the policy again within a second
    while (response := live_api.consume("held")).status_code == 204 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert response.status_code == 200 and set(response.json()) == {"id", "content", "receipt"}


def test_v1_consume_delivers_by_priority_and_keeps_forqs_shape(live_api):
    forqapp.send("prio", "low", priority=-5)
    forqapp.send("prio", "high", priority=7)
    forqapp.send("prio", "normal")
    got = [consume_one(live_api, "prio")["content"] for _ in range(3)]
    assert got == ["high", "normal", "low"]
