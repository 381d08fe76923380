"""forqapp.api.fastpath: Forq's produce, consume and ack answered without Django's request and
response objects — byte for byte what the general path (the views through plumbing) answers, and
only for the requests it may take."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.test import override_settings

import forqapp
from forqapp.api.asgi import APIApplication
from forqapp.keys import service
from forqapp.models import Message

pytestmark = pytest.mark.django_db(transaction=True)

KEY = b"test-secret-0123456789abcdef-0123456789"  # tests/settings.py: this process's key


@pytest.fixture(scope="module")
def apps():
    fast = APIApplication()
    general = APIApplication()
    general._fast = None
    return fast, general


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]], raw_path: bytes | None = None) -> dict:
    return {"type": "http", "http_version": "1.1", "method": method, "scheme": "http", "path": path,
            "raw_path": raw_path if raw_path is not None else path.encode(), "query_string": b"", "root_path": "",
            "client": ("127.0.0.1", 40000), "server": ("testserver", 80), "headers": headers}


def _run(app, scope: dict, body: bytes = b"") -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """One request through ``app``: status, the headers as sent (in order), the body."""

    async def main():
        sent = []
        given = False

        async def receive():
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)  # the client stays

        async def send(message):
            sent.append(message)

        await app(scope, receive, send)
        start, end = sent
        return start["status"], start["headers"], end["body"]

    with override_settings(FORQ_LONG_POLL_SECONDS=0):
        return asyncio.run(main())


def _delivery(queue: str) -> tuple[str, str]:
    forqapp.send(queue, "x")
    message = forqapp.receive(queue)
    return message.id, str(message.receipt)


def _scoped(*grants: str) -> bytes:
    _scoped.made += 1  # type: ignore[attr-defined]
    return service.create(f"fp-{_scoped.made}", list(grants), actor="test", via="cli").token.encode()  # type: ignore[attr-defined]


_scoped.made = 0  # type: ignore[attr-defined]


# (name, a function of nothing that makes the request: method, path, headers, body, raw_path)
CASES = {
    "produce": lambda: ("POST", "/api/v1/queues/fp/messages", [(b"x-api-key", KEY)], b'{"content": "hi"}', None),
    "produce later": lambda: ("POST", "/api/v1/queues/fp/messages", [(b"x-api-key", KEY)],
                              b'{"content": "hi", "processAfter": 99999999999999}', None),
    "produce not json": lambda: ("POST", "/api/v1/queues/fp/messages", [(b"x-api-key", KEY)], b"{", None),
    "produce a list": lambda: ("POST", "/api/v1/queues/fp/messages", [(b"x-api-key", KEY)], b"[1]", None),
    "produce no content": lambda: ("POST", "/api/v1/queues/fp/messages", [(b"x-api-key", KEY)], b"{}", None),
    "produce in the past": lambda: ("POST", "/api/v1/queues/fp/messages", [(b"x-api-key", KEY)],
                                    b'{"content": "x", "processAfter": 1}', None),
    "produce to a dlq": lambda: ("POST", "/api/v1/queues/fp-dlq/messages", [(b"x-api-key", KEY)],
                                 b'{"content": "x"}', None),
    "produce 65 characters": lambda: ("POST", f"/api/v1/queues/{'a' * 65}/messages", [(b"x-api-key", KEY)],
                                      b'{"content": "x"}', None),
    "produce a bad name": lambda: ("POST", "/api/v1/queues/a b/messages", [(b"x-api-key", KEY)],
                                   b'{"content": "x"}', None),
    "produce too big": lambda: ("POST", "/api/v1/queues/fp/messages", [(b"x-api-key", KEY)],
                                json.dumps({"content": "x" * 300_000}).encode(), None),
    "consume nothing": lambda: ("GET", "/api/v1/queues/fp-empty/messages", [(b"x-api-key", KEY)], b"", None),
    "consume a bad name": lambda: ("GET", "/api/v1/queues/a*b/messages", [(b"x-api-key", KEY)], b"", None),
    "ack": lambda: (lambda d: ("POST", f"/api/v1/queues/fp/messages/{d[0]}/ack",
                               [(b"x-api-key", KEY), (b"x-forq-receipt", d[1].encode())], b"", None))(_delivery("fp")),
    "ack a wrong receipt": lambda: (lambda d: ("POST", f"/api/v1/queues/fp/messages/{d[0]}/ack",
                                               [(b"x-api-key", KEY), (b"x-forq-receipt", b"12")], b"", None))(
        _delivery("fp")),
    "ack no receipt": lambda: ("POST", f"/api/v1/queues/fp/messages/{'0' * 8}-0000-7000-8000-{'0' * 12}/ack",
                               [(b"x-api-key", KEY)], b"", None),
    "ack a bad receipt": lambda: ("POST", f"/api/v1/queues/fp/messages/{'0' * 8}-0000-7000-8000-{'0' * 12}/ack",
                                  [(b"x-api-key", KEY), (b"x-forq-receipt", b"--5")], b"", None),
    "ack a bad id": lambda: ("POST", "/api/v1/queues/fp/messages/nope/ack",
                             [(b"x-api-key", KEY), (b"x-forq-receipt", b"5")], b"", None),
    # the general path's: the fast path does not take them
    "wrong key": lambda: ("POST", "/api/v1/queues/fp/messages", [(b"x-api-key", b"wrong")], b'{"content": "x"}', None),
    "no key": lambda: ("GET", "/api/v1/queues/fp/messages", [], b"", None),
    "two keys": lambda: ("GET", "/api/v1/queues/fp/messages", [(b"x-api-key", KEY), (b"x-api-key", KEY)], b"", None),
    "wrong method": lambda: ("PUT", "/api/v1/queues/fp/messages", [(b"x-api-key", KEY)], b"{}", None),
    "escaped slash": lambda: ("GET", "/api/v1/queues/a/b/messages", [(b"x-api-key", KEY)], b"",
                              b"/api/v1/queues/a%2Fb/messages"),
    "scoped, without the grant": lambda: ("POST", "/api/v1/queues/fp/messages",
                                          [(b"x-api-key", _scoped("other:produce"))], b'{"content": "x"}', None),
}
GENERAL_ONLY = {"wrong key", "no key", "two keys", "wrong method", "escaped slash", "scoped, without the grant"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fast_path_answers_exactly_as_the_general_path(apps, case):
    fast, general = apps
    answers = []
    for app in (fast, general):
        method, path, headers, body, raw_path = CASES[case]()
        scope = _scope(method, path, headers, raw_path)
        if app is fast:
            assert (fast._fast.take(scope) is None) == (case in GENERAL_ONLY)
        answers.append(_run(app, scope, body))
    assert answers[0] == answers[1]


class _RSGIHeaders:
    def __init__(self, pairs: list[tuple[bytes, bytes]]):
        self.pairs = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in pairs]

    def items(self) -> list[tuple[str, str]]:
        return list(self.pairs)

    def get(self, key: str, default=None):
        return next((value for name, value in self.pairs if name == key), default)


class _RSGIScope:
    proto, http_version, scheme, query_string = "http", "1.1", "http", ""
    client, server = "127.0.0.1:40000", "testserver:80"

    def __init__(self, method: str, path: str, headers: list[tuple[bytes, bytes]]):
        self.method, self.path, self.headers = method, path, _RSGIHeaders(headers)


class _RSGIProtocol:
    """Granian's RSGI protocol as the API uses it: the body whole or in chunks (ending with an
    empty one), a client that stays, the answer given once."""

    def __init__(self, body: bytes):
        self.body = body
        self.answers: list[tuple[int, list[tuple[bytes, bytes]], bytes]] = []

    async def __call__(self) -> bytes:
        return self.body

    def __aiter__(self):
        async def chunks():
            if self.body:
                yield self.body
            yield b""
        return chunks()

    async def client_disconnect(self) -> None:
        await asyncio.sleep(3600)

    def response_bytes(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.answers.append((status, [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers], body))


def _run_rsgi(app, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes = b""):
    protocol = _RSGIProtocol(body)
    with override_settings(FORQ_LONG_POLL_SECONDS=0):
        asyncio.run(app.__rsgi__(_RSGIScope(method, path, headers), protocol))
    (answer,) = protocol.answers
    return answer


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_over_rsgi_both_paths_answer_as_over_asgi(apps, case, declared):
    """Served over RSGI (forq_serve's way), the fast path and the general path (through the
    adapters) answer what the ASGI app answers (granian sets Content-Length itself)."""
    fast, general = apps
    answers = []
    for app, rsgi in ((fast, False), (fast, True), (general, True)):
        method, path, headers, body, raw_path = CASES[case]()
        if not rsgi:
            status, sent, content = _run(app, _scope(method, path, headers, raw_path), body)
            answers.append((status, [h for h in sent if h[0] != b"content-length"], content))
            continue
        if declared and method == "POST":
            headers = [*headers, (b"content-length", str(len(body)).encode())]
        if app is fast:
            assert (fast._fast.take_rsgi(_RSGIScope(method, path, headers)) is None) == (case in GENERAL_ONLY)
        answers.append(_run_rsgi(app, method, path, headers, body))
    assert answers[0] == answers[1] == answers[2]


def test_consume_answers_as_the_general_path_and_the_message_is_delivered_once(apps):
    fast, general = apps
    answers = []
    for app in (fast, general):
        message_id = forqapp.send("fp-one", "hello \u00e9")
        status, headers, body = _run(app, _scope("GET", "/api/v1/queues/fp-one/messages", [(b"x-api-key", KEY)]))
        got = json.loads(body)
        assert status == 200 and got["id"] == message_id and got["content"] == "hello \u00e9"
        assert (b"X-Forq-Receipt", got["receipt"].encode()) in headers
        row = Message.objects.get(id=message_id)
        assert row.status == 1 and str(row.processing_started_at) == got["receipt"]
        answers.append((status, [h for h in headers if h[0] != b"X-Forq-Receipt"],
                        body.replace(got["id"].encode(), b"ID").replace(got["receipt"].encode(), b"R")))
    assert answers[0] == answers[1]


def test_a_scoped_key_with_the_grant_takes_the_fast_path(apps):
    fast, _ = apps
    token = _scoped("fp-scoped:produce,consume")
    forqapp.send("fp-scoped", "warm")  # the key's first use loads it; cached from then on
    _run(fast, _scope("GET", "/api/v1/queues/fp-scoped/messages", [(b"x-api-key", token)]))
    scope = _scope("POST", "/api/v1/queues/fp-scoped/messages", [(b"x-api-key", token)])
    assert fast._fast.take(scope) is not None
    assert _run(fast, scope, b'{"content": "y"}')[0] == 204
    other = _scope("POST", "/api/v1/queues/fp-other/messages", [(b"x-api-key", token)])
    assert fast._fast.take(other) is None  # no grant there: the general path answers 403
    assert json.loads(_run(fast, other, b'{"content": "y"}')[2])["code"] == "forbidden.key_scope"


def test_in_pro_both_paths_send_hsts(apps):
    fast, general = apps
    answers = []
    with override_settings(FORQ_ENV="pro"):
        for app in (fast, general):
            answers.append(_run(app, _scope("POST", "/api/v1/queues/fp-pro/messages", [(b"x-api-key", KEY)]),
                                b'{"content": "x"}'))
    assert answers[0] == answers[1]
    assert (b"Strict-Transport-Security", b"max-age=31536000; includeSubDomains") in answers[0][1]


@pytest.mark.parametrize("failure", ["database or disk is full", "database is locked"])
def test_a_database_that_cannot_write_is_a_503_to_retry_not_a_500(apps, monkeypatch, caplog, failure):
    """A full disk (or a write lock held past the busy timeout) refuses every write: each face
    answers 503 forq.unhealthy with Retry-After — the client may retry, nothing was written — and
    the log gets one line a second, not a traceback per request."""
    import sqlite3

    from forqapp import errors, store

    def refuse(*args, **kwargs):
        raise sqlite3.OperationalError(failure)

    kind = type(store.for_alias("default"))
    for method in ("insert", "insert_one", "insert_batch", "claim"):
        monkeypatch.setattr(kind, method, refuse)
    errors._said.clear()
    json_body = [(b"x-api-key", KEY), (b"content-type", b"application/json")]
    requests = [("POST", "/api/v1/queues/full/messages", b'{"content": "x"}'),
                ("GET", "/api/v1/queues/full/messages", b""),
                ("POST", "/api/v2/queues/full/messages", b'{"content": "x"}'),
                ("POST", "/api/v2/queues/full/receive", b'{"max_messages": 1}')]
    for app in apps:  # the fast path (v1 produce and consume) and the general one
        for method, path, body in requests:
            status, headers, answer = _run(app, _scope(method, path, json_body), body)
            assert (status, json.loads(answer)["code"]) == (503, errors.UNHEALTHY), (method, path, answer)
            assert (b"retry-after", b"5") in [(k.lower(), v) for k, v in headers], headers
    assert not Message.objects.filter(queue="full").exists()
    lines = [r for r in caplog.records if "answered 503" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None  # one line, no traceback, for 8 refusals
    assert errors.unavailable(sqlite3.OperationalError("no such table: messages")) is None  # a bug: still a 500
    assert errors.unavailable(ValueError(failure)) is None


def sqs(target: str, payload: dict):
    """An SQS request (``AmazonSQS.<target>`` with ``payload``) signed with the root key, through the
    SQS endpoint's ASGI application in this process: its ``httpx.Response``."""
    import httpx
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from forqapp.sqs.asgi import SQSApplication

    body = json.dumps(payload).encode()
    request = AWSRequest("POST", "http://testserver/", data=body, headers={
        "X-Amz-Target": f"AmazonSQS.{target}", "Content-Type": "application/x-amz-json-1.0"})
    SigV4Auth(Credentials("forq-root", KEY.decode()), "sqs", "eu-west-3").add_auth(request)

    async def main():
        transport = httpx.ASGITransport(app=SQSApplication(), client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await client.post("/", content=body, headers=dict(request.headers.items()))

    return asyncio.run(main())


def test_the_sqs_endpoint_says_service_unavailable_when_the_database_cannot_write(monkeypatch):
    import sqlite3

    from forqapp import store

    def refuse(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    forqapp.configure_queue("sqs-full")
    monkeypatch.setattr(type(store.for_alias("default")), "insert_one", refuse)
    monkeypatch.setattr(type(store.for_alias("default")), "insert", refuse)
    monkeypatch.setattr(type(store.for_alias("default")), "insert_batch", refuse)
    response = sqs("SendMessage", {"QueueUrl": "http://testserver/000000000000/sqs-full", "MessageBody": "x"})
    assert response.status_code == 503, response.text
    assert response.json()["__type"].endswith("#ServiceUnavailable"), response.text
    assert not Message.objects.filter(queue="sqs-full").exists()


def test_every_answer_of_the_api_is_counted_by_api_and_status(apps):  # noqa: F811
    """forq_api_requests_total: the API listener answers without Django's middleware, so
    django-prometheus never saw its requests (no 5xx or 429 rate to alert on)."""
    from prometheus_client import REGISTRY

    def count(api: str, status: int) -> float:
        return REGISTRY.get_sample_value("forq_api_requests_total", {"api": api, "status": str(status)}) or 0.0

    json_body = [(b"x-api-key", KEY), (b"content-type", b"application/json")]
    wrong = [(b"x-api-key", b"wrong"), (b"content-type", b"application/json")]
    cases = [("POST", "/api/v1/queues/counted/messages", json_body, b'{"content": "x"}', "v1", 204),
             ("POST", "/api/v1/queues/counted/messages", wrong, b'{"content": "x"}', "v1", 401),
             ("GET", "/api/v2/queues/counted", json_body, b"", "v2", 200),
             ("GET", "/healthcheck", [], b"", "other", 204),
             ("GET", "/nowhere", [], b"", "other", 404)]
    for app in apps:  # the fast path, and the general one
        for method, path, headers, body, api, status in cases:
            before = count(api, status)
            answered = _run(app, _scope(method, path, headers), body)[0]
            assert answered == status, (path, answered)
            assert count(api, status) == before + 1, (path, status)
    before = count("v1", 204)
    assert _run_rsgi(apps[0], "POST", "/api/v1/queues/counted/messages", json_body, b'{"content": "x"}')[0] == 204
    assert count("v1", 204) == before + 1  # over RSGI too (forq_serve's way)
