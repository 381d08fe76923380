"""The API against hostile clients (issue 10, points 3 and 4).

* A wrong key never makes the server receive a body: 401 (429 when throttled) from the headers
  alone, on a real ``forq_serve`` over a raw socket.
* A body that arrives too slowly is cut off (408).
* No request hypothesis can make, on any endpoint, gets a 500 or an answer that is not JSON.
* Under Django's own handler (``include("forqapp.urls")``) the views keep these answers.
"""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from urllib.parse import quote, unquote, urlencode

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forqapp import errors
from forqapp.api.asgi import APIApplication
from forqapp.models import Message

from .conftest import SECRET, free_port, send_raw, start_server, stop_server

pytestmark = pytest.mark.django_db(transaction=True)

APP_SECRET = "test-secret-0123456789abcdef-0123456789"  # tests/settings.py: this process's key


# --- a real server, raw sockets ---------------------------------------------------------------


def _send_raw(live_api, request: bytes, *, timeout: float) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as is to ``live_api`` and read one response (head and Content-Length body)."""
    host, port = live_api.url.removeprefix("http://").split(":")
    return send_raw((host, int(port)), request, timeout=timeout)


def _post_head(queue: str, key: str, address: str, content_length: int) -> bytes:
    return (f"POST /api/v1/queues/{queue}/messages HTTP/1.1\r\nHost: forq\r\nX-API-Key: {key}\r\n"
            f"X-Forwarded-For: {address}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {content_length}\r\n\r\n").encode()


def test_wrong_key_is_401_without_the_body(live_api):
    """The client announces 2 MiB - 1 KiB and sends none of it: answered at once from the headers.
    (Before, the server waited for the body, for ever: the timeout below would fire.)"""
    status, headers, body = _send_raw(live_api, _post_head("q", "wrong", "192.0.2.201", 2_097_000), timeout=3)
    assert (status, json.loads(body)) == (401, {"code": "unauthorized"})
    assert headers["content-type"] == "application/json"


def test_throttled_address_is_429_with_retry_after_without_the_body(live_api):
    address = "192.0.2.202"
    for _ in range(5):
        assert _send_raw(live_api, _post_head("q", "wrong", address, 2_097_000), timeout=3)[0] == 401
    status, headers, body = _send_raw(live_api, _post_head("q", "wrong", address, 2_097_000), timeout=3)
    assert (status, json.loads(body)) == (429, {"code": "too_many_requests"})
    assert 1 <= int(headers["retry-after"]) <= 60


def test_concurrent_wrong_keys_get_no_more_401s_than_the_throttle_allows(live_api):
    """200 wrong keys at once from one fresh address, over 50 connections: exactly
    FORQ_AUTH_MAX_FAILURES (5) are answered 401, the rest 429 (before, each request read "not
    blocked" before any had counted its failure: 16 were 401), and a right key from there still
    passes."""
    import httpx

    address = "192.0.2.230"

    async def burst() -> list[int]:
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=live_api.url, limits=limits, timeout=60) as client:
            answers = await asyncio.gather(*(
                client.get("/api/v1/queues/q/messages", headers={"X-API-Key": f"wrong-{k}", "X-Forwarded-For": address})
                for k in range(200)))
        return [answer.status_code for answer in answers]

    statuses = asyncio.run(burst())
    assert (statuses.count(401), statuses.count(429)) == (5, 195), sorted(set(statuses))
    right = httpx.get(f"{live_api.url}/api/v2/queues", headers={"X-API-Key": SECRET, "X-Forwarded-For": address})
    assert right.status_code == 200


def test_right_key_with_a_normal_body_still_works(live_api):
    body = json.dumps({"content": "over a raw socket"}).encode()
    status, _, _ = _send_raw(live_api, _post_head("raw", SECRET, "192.0.2.203", len(body)) + body, timeout=10)
    assert status == 204
    assert Message.objects.get(queue="raw").content == "over a raw socket"


def test_a_body_that_stops_arriving_is_cut_off(live_api):
    """A right key, 1,000 bytes announced, 10 sent, then nothing: after the grace period
    (FORQ_BODY_GRACE_S, 5 s) the body is under the minimum rate, and the server answers 408."""
    request = _post_head("slow", SECRET, "192.0.2.204", 1000) + b'{"content"'
    status, _, body = _send_raw(live_api, request, timeout=20)
    assert (status, json.loads(body)) == (408, {"code": "request_timeout"})
    assert not Message.objects.filter(queue="slow").exists()


def test_a_declared_body_that_trickles_is_cut_off_after_the_grace(live_api):
    """A right key, 100,000 bytes announced, then a byte a second: under the minimum rate
    (FORQ_BODY_MIN_RATE_BYTES_S, 1,024 B/s) once the grace (5 s) is over, so 408 then. Before, the
    length announced bought it the whole FORQ_BODY_TIMEOUT_S (30 s): no answer within 20 s here."""
    import select
    import time

    from .conftest import read_answer

    host, port = live_api.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(_post_head("trickle", SECRET, "192.0.2.205", 100_000) + b'{"content": "')
        deadline = time.monotonic() + 20
        while not select.select([sock], [], [], 1)[0]:
            assert time.monotonic() < deadline, "no answer within 20 s"
            sock.sendall(b"x")
        status, _, body = read_answer(sock)
    assert (status, json.loads(body)) == (408, {"code": "request_timeout"})
    assert not Message.objects.filter(queue="trickle").exists()


@pytest.mark.parametrize("path", ["/api/v1/queues/chunked/messages", "/api/v2/queues/chunked/messages"])
def test_a_malformed_chunked_body_is_400_json(live_api, path):
    """Granian reports a malformed chunk size as a disconnect; the app answers 400 (it sent nothing
    before, and granian filled in a plain-text 500)."""
    request = (f"POST {path} HTTP/1.1\r\nHost: forq\r\nX-API-Key: {SECRET}\r\n"
               "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
               'zz\r\n{"content":"x"}\r\n0\r\n\r\n').encode()
    status, headers, body = _send_raw(live_api, request, timeout=10)
    expected = {"code": "bad_request.body.invalid"}
    if "/v2/" in path:  # v2 words it
        expected["message"] = "the body is invalid"
    assert (status, json.loads(body)) == (400, expected)
    assert headers["content-type"] == "application/json"
    assert not Message.objects.filter(queue="chunked").exists()


def test_the_ui_listener_answers_bad_requests_with_400(django_db_blocker):
    import time

    import httpx

    ui_port = free_port()
    with django_db_blocker.unblock():
        server = start_server({"FORQ_UI_ADDR": f"127.0.0.1:{ui_port}"}, args=())
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{ui_port}/login/", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the UI listener did not answer within 30 s"
                time.sleep(0.1)
        request = (b"POST /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded"
                   b"\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nusername=a\r\n0\r\n\r\n")
        with socket.create_connection(("127.0.0.1", ui_port), timeout=10) as sock:
            sock.sendall(request)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                assert chunk, data
                data += chunk
        assert data.startswith(b"HTTP/1.1 400"), data
        # A charset with more query fields than DATA_UPLOAD_MAX_NUMBER_FIELDS: Django fails to make
        # the request (the query is parsed again for the charset): 400, not the server's 500.
        many = "&".join(f"a{k}=1" for k in range(1001))
        response = httpx.get(f"http://127.0.0.1:{ui_port}/login/?{many}", timeout=5,
                             headers={"Content-Type": "text/plain; charset=utf-8"})
        assert response.status_code == 400, response
        assert httpx.get(f"http://127.0.0.1:{ui_port}/login/", timeout=5).status_code == 200  # and on it goes
    finally:
        stop_server(server)


def test_a_client_gone_mid_body_stores_nothing_and_the_server_goes_on(live_api):
    host, port = live_api.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(_post_head("gone", SECRET, "192.0.2.205", 1000) + b'{"content": "par')
    body = json.dumps({"content": "after"}).encode()
    assert _send_raw(live_api, _post_head("gone", SECRET, "192.0.2.205", len(body)) + body, timeout=10)[0] == 204
    assert [m.content for m in Message.objects.filter(queue="gone")] == ["after"]


def _chunked_head(path: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: forq\r\nX-API-Key: {SECRET}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()


def _chunks(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)


@pytest.mark.parametrize("path", ["/api/v1/queues/chunks/messages", "/api/v2/queues/chunks/messages"])
def test_a_chunked_body_is_read_whole(live_api, path):
    """Without a Content-Length (the fast path's v1 produce and the general path's v2 send)."""
    request = _chunked_head(path) + _chunks(b'{"con', b'tent": "in', b' pieces"}') + b"0\r\n\r\n"
    status, _, _ = _send_raw(live_api, request, timeout=10)
    assert status in (201, 204)
    assert [m.content for m in Message.objects.filter(queue="chunks")] == ["in pieces"]


def test_a_chunked_body_over_the_cap_is_413(live_api):
    piece = b" " * 65536
    request = _chunked_head("/api/v1/queues/big/messages") + _chunks(b'{"content": "x"', *[piece] * 40)
    status, _, body = _send_raw(live_api, request + b"0\r\n\r\n", timeout=20)
    assert (status, json.loads(body)["code"]) == (413, "bad_request.body.content.exceeds_limit")
    assert not Message.objects.filter(queue="big").exists()


@pytest.mark.parametrize("path", ["/api/v1/queues/cut/messages", "/api/v2/queues/cut/messages"])
def test_a_chunked_body_whose_client_goes_before_its_end_stores_nothing(live_api, path):
    """The chunks received make a whole JSON body, but the last chunk never came: not a request."""
    host, port = live_api.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(_chunked_head(path) + _chunks(b'{"content": "half"}'))
    body = json.dumps({"content": "after"}).encode()
    assert _send_raw(live_api, _post_head("cut", SECRET, "192.0.2.206", len(body)) + body, timeout=10)[0] == 204
    assert [m.content for m in Message.objects.filter(queue="cut")] == ["after"]


# --- the ASGI app in this process: what it receives, and when it gives up ---------------------


def _scope(method: str, path: str, headers: dict[str, bytes], *, query: bytes = b"", raw_path: bytes | None = None,
           client: str = "127.0.0.1") -> dict:
    return {
        "type": "http", "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": raw_path if raw_path is not None else path.encode("utf-8"),
        "query_string": query, "root_path": "", "client": (client, 40000), "server": ("testserver", 80),
        "headers": [(k.lower().encode("latin-1"), v) for k, v in headers.items()],
    }


async def _call(app, scope: dict, chunks) -> tuple[int, dict[str, str], bytes]:
    """Run one request through ``app``; ``chunks`` is an async iterator of (delay_s, bytes) pieces
    of the body (the last one ends it). Returns status, headers and body."""
    sent: list[dict] = []
    done = asyncio.Event()

    async def receive():
        try:
            delay, chunk, more = await anext(chunks)
        except StopAsyncIteration:
            await done.wait()  # the body is over: the next event is the client leaving
            return {"type": "http.disconnect"}
        await asyncio.sleep(delay)
        return {"type": "http.request", "body": chunk, "more_body": more}

    async def send(message):
        sent.append(message)

    try:
        await app(scope, receive, send)
    finally:
        done.set()
    if not sent:
        return 0, {}, b""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in sent[0]["headers"]}
    return sent[0]["status"], headers, b"".join(m.get("body", b"") for m in sent[1:])


async def _pieces(*pieces: tuple[float, bytes]):
    for i, (delay, chunk) in enumerate(pieces):
        yield delay, chunk, i < len(pieces) - 1


@pytest.fixture(scope="module")
def app():
    return APIApplication()


def test_a_wrong_key_never_receives_the_body(app):
    async def never():
        raise AssertionError("the body was received")
        yield  # an async generator

    scope = _scope("POST", "/api/v1/queues/q/messages", {"x-api-key": b"wrong", "content-length": b"2097000"},
                   client="192.0.2.210")
    status, _, body = asyncio.run(_call(app, scope, never()))
    assert (status, json.loads(body)) == (401, {"code": "unauthorized"})


@pytest.mark.parametrize(
    ("overrides", "pieces"),
    [
        # under the minimum rate after the grace period: 1 byte every 50 ms is 20 B/s < 1,000 B/s
        ({"FORQ_BODY_GRACE_S": 0.1, "FORQ_BODY_MIN_RATE_BYTES_S": 1000}, [(0.05, b"{")] * 40 + [(0, b"}")]),
        # fast enough, but not complete within the total deadline
        ({"FORQ_BODY_TIMEOUT_S": 0.3, "FORQ_BODY_MIN_RATE_BYTES_S": 0}, [(0.05, b" ")] * 40 + [(0, b"{}")]),
    ],
)
def test_a_slow_body_is_cut_off_with_408(app, overrides, pieces):
    scope = _scope("POST", "/api/v1/queues/q/messages", {"x-api-key": APP_SECRET.encode()})
    with override_settings(**overrides):
        status, _, body = asyncio.run(_call(app, scope, _pieces(*pieces)))
    assert (status, json.loads(body)) == (408, {"code": "request_timeout"})


def test_a_body_in_many_chunks_at_a_normal_pace_passes(app):
    text = json.dumps({"content": "x" * 5000}).encode()
    pieces = [(0.001, text[i:i + 100]) for i in range(0, len(text), 100)]
    scope = _scope("POST", "/api/v1/queues/chunked/messages", {"x-api-key": APP_SECRET.encode()})
    with override_settings(FORQ_BODY_GRACE_S=0.05, FORQ_BODY_MIN_RATE_BYTES_S=1000):
        status, _, _ = asyncio.run(_call(app, scope, _pieces(*pieces)))
    assert status == 204
    assert Message.objects.get(queue="chunked").content == "x" * 5000


def test_the_key_is_checked_once_per_request_under_the_asgi_app(app, monkeypatch):
    from forqapp.api import plumbing

    calls = []
    real = plumbing.key_cache.for_token_cached  # the API key (root or scoped: forqapp.keys)
    monkeypatch.setattr(plumbing.key_cache, "for_token_cached", lambda *a: calls.append(a) or real(*a))
    scope = _scope("POST", "/api/v1/queues/once/messages", {"x-api-key": APP_SECRET.encode()})
    status, _, _ = asyncio.run(_call(app, scope, _pieces((0, b'{"content": "x"}'))))
    assert status == 204 and len(calls) == 1
    assert Message.objects.get(queue="once").content == "x"


# --- no 500, whatever the request ---------------------------------------------------------------

ENDPOINTS = [
    "/healthcheck",
    "/metrics",
    "/api/v1/openapi.json",
    "/api/v1/queues/{queue}/messages",
    "/api/v1/queues/{queue}/messages/{id}/ack",
    "/api/v1/queues/{queue}/messages/{id}/nack",
    "/api/v1/queues/{queue}/messages/batch",
    "/api/v1/queues/{queue}/messages/claim",
    "/api/v1/queues/{queue}/messages/ack",
    "/api/v1/queues/{queue}/messages/release",
    "/api/v1/queues/{queue}/staged/{token}",
    "/api/v1/staged/publish",
    "/api/v1/staged/discard",
    "/api/v1/queues/{queue}/snapshot",
    "/api/v1/queues/{queue}/snapshot/bounds",
]
SOME_ID = "0190f5c6-4b7a-7c3e-9d2f-1a2b3c4d5e6f"
segments = st.one_of(
    st.sampled_from(["q", "", "q-dlq", "a" * 65, "a" * 81, "a/b", ".", "..", "%", "tok.1", SOME_ID, "ünï"]),
    st.text(max_size=12),
)
json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
receipts = st.one_of(st.integers(), st.text(max_size=22), st.sampled_from(
    [2**63, 2**63 - 1, 10**19 - 1, -(2**63) - 1, "--5", "---1", "9" * 19, "1e3", " 7 ", "+5", "٣"]))
messages = st.fixed_dictionaries({}, optional={"content": st.text(max_size=12) | json_values,
                                                "processAfter": st.integers() | json_values})
deliveries = st.fixed_dictionaries({}, optional={"id": segments | json_values, "receipt": receipts | json_values})
staged = st.fixed_dictionaries({}, optional={"token": segments | json_values, "queue": segments | json_values})
objects = st.fixed_dictionaries({}, optional={
    "content": st.text(max_size=12) | json_values,
    "processAfter": st.integers() | json_values,
    "messages": st.lists(messages | json_values, max_size=4) | json_values,
    "deliveries": st.lists(deliveries | json_values, max_size=4) | json_values,
    "staged": st.lists(staged | json_values, max_size=3) | json_values,
    "max": st.integers() | json_values,
    "wait": st.sampled_from([0, 0.001, -1, 31, 1e300, "1", None, True, [], {}]),  # never a long wait
})
bodies = st.one_of(
    objects.map(lambda o: json.dumps(o).encode()),
    json_values.map(lambda o: json.dumps(o).encode()),
    st.binary(max_size=40),
    st.integers(900, 5000).map(lambda n: b'{"content": "x", "messages": ' + b"[" * n + b"]" * n + b"}"),
    st.integers(900, 5000).map(lambda n: b"{" + b'"a":{' * n + b"}" * (n + 1)),
)
header_values = st.binary(max_size=30).filter(lambda v: b"\r" not in v and b"\n" not in v)
headers = st.fixed_dictionaries(
    {"x-api-key": st.sampled_from([APP_SECRET.encode()] * 3 + [b"", b"wrong", "é".encode()])},
    optional={
        "x-forq-receipt": receipts.map(lambda r: str(r).encode("utf-8")) | header_values,
        "content-type": st.sampled_from([b"application/json", b"text/plain; charset=nope", b""]) | header_values,
        "content-length": st.sampled_from([b"0", b"-1", b"abc", b"9" * 5000, b"3000000"]) | header_values,
        "x-forwarded-for": header_values,
        "accept": header_values,
    },
)
queries = st.one_of(
    st.lists(st.tuples(st.sampled_from(["after", "upto", "limit", "format"]) | st.text(max_size=5),
                       st.text(max_size=12) | st.sampled_from([SOME_ID, "1" * 4301, "0", "10001", "columns"])),
             max_size=5).map(lambda pairs: urlencode(pairs).encode()),
    st.just(b"&".join(b"a%d=1" % i for i in range(1001))),
    st.binary(max_size=30),
)
methods = st.sampled_from(["GET", "POST", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS"])
KNOWN_CODES = set(errors.STATUS)


@st.composite
def requests(draw, template: str):
    parts = {name: draw(segments) for name in ("queue", "id", "token")}
    raw = template.format(**{k: quote(v, safe="") for k, v in parts.items()})
    raw += draw(st.sampled_from(["", "", "", "/", "//", "/x"]))
    return {"method": draw(methods), "raw_path": raw, "query": draw(queries), "headers": draw(headers),
            "body": draw(bodies), "client": f"10.{draw(st.integers(0, 255))}.0.1"}


@pytest.mark.parametrize("template", ENDPOINTS)
@settings(max_examples=100, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_no_request_gets_a_500(app, template, data):
    r = data.draw(requests(template))
    path = unquote(r["raw_path"], errors="replace")  # as a server decodes it
    scope = _scope(r["method"], path, r["headers"], query=r["query"], raw_path=r["raw_path"].encode(),
                   client=r["client"])
    with override_settings(FORQ_LONG_POLL_SECONDS=0):
        status, headers, body = asyncio.run(_call(app, scope, _pieces((0, r["body"]))))
    assert status != 500 and 200 <= status < 500, (status, body)
    assert headers["x-content-type-options"] == "nosniff"
    if status >= 400 and path.startswith("/api/"):
        assert headers["content-type"] == "application/json", (status, body)
        assert json.loads(body)["code"] in KNOWN_CODES


@pytest.mark.parametrize(("charset", "query"), [
    (b"utf-8", b"&".join(b"a%d=1" % k for k in range(1001))),  # more fields than DATA_UPLOAD_MAX_NUMBER_FIELDS
    (b"utf\x00", b""),  # no codec has that name (codecs.lookup raises ValueError, not LookupError)
])
def test_a_charset_django_cannot_take_is_a_400(app, charset, query):
    """A charset in the Content-Type makes Django parse the query string again, and look the
    codec up, as it builds the request: both failures are the client's (they were a 500). Forq's
    produce, answered without a Django request, reads neither (as Forq): 204."""
    for path, expected in (("/api/v2/queues/q/messages", 400), ("/api/v1/queues/q/messages", 204)):
        headers = {"content-type": b"application/json; charset=" + charset, "x-api-key": APP_SECRET.encode()}
        status, headers, body = asyncio.run(_call(app, _scope("POST", path, headers, query=query),
                                                  _pieces((0, b'{"content": "x"}'))))
        assert status == expected, (path, status, body)
        assert headers["x-content-type-options"] == "nosniff"
        if status == 400:
            assert json.loads(body)["code"] == errors.BODY_INVALID, body


# --- under Django's own handler: include("forqapp.urls") ----------------------------------------


def test_under_django_the_edges_answer_json(client, settings):
    """The project's urls mount ``include("forqapp.urls")``: Django's handler, Django's body reading."""
    client.defaults["HTTP_X_API_KEY"] = APP_SECRET
    cases = [
        (client.post("/api/v1/queues//messages", {"content": "x"}, content_type="application/json"),
         400, "bad_request.queue.invalid_name"),
        (client.post("/api/v1/queues/q/messages//ack", HTTP_X_FORQ_RECEIPT="1"),
         400, "bad_request.messageId.invalid"),
        (client.get("/api/v1/nowhere"), 404, "not_found.route"),
        (client.put("/api/v1/queues/q/messages"), 405, "method_not_allowed"),
        (client.get("/api/v1/queues/q/snapshot?" + "&".join(f"a{i}=1" for i in range(1001))),
         400, "bad_request.body.invalid"),
        (client.post(f"/api/v1/queues/q/messages/{uuid.uuid4()}/ack", HTTP_X_FORQ_RECEIPT=str(2**63)),
         400, "bad_request.receipt.invalid"),
    ]
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000  # Django's own cap, below forqapp's
    cases.append((client.post("/api/v1/queues/q/messages", {"content": "x" * 2000},
                              content_type="application/json"), 413, errors.CONTENT_EXCEEDS_LIMIT))
    for response, status, code in cases:
        assert (response.status_code, response.json()) == (status, {"code": code})
    ok = client.post("/api/v1/queues/dj/messages", {"content": ""}, content_type="application/json")
    assert ok.status_code == 204 and Message.objects.get(queue="dj").content == ""
    assert "GET" in cases[3][0]["Allow"]
