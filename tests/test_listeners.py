"""The three listeners of ``forq_serve`` (API, SQS, UI) against clients that announce bodies they
never send, send them too slowly, or send what no server should log a traceback for: refused from
the request line and headers before the body is received, cut off when the body takes too long
(:mod:`forqapp.intake`, shared by the three), answered 400 quietly for 1,500 query parameters.

Real servers, raw sockets. "Before the body" is shown by behaviour: the answer arrives although
the client sends none of the body it announced (a server that waited for it would never answer).
"""

from __future__ import annotations

import datetime as dt
import json
import select
import socket
import time

import httpx
import pytest

from .conftest import SECRET, free_port, read_answer, send_raw, start_server, stop_server

pytestmark = pytest.mark.django_db(transaction=True)

KEYS_SECRET = "listeners-test-keys-secret-0123456789ab"  # noqa: S105 - seals scoped keys, here and in the server
REGION = "eu-west-3"


@pytest.fixture(scope="module")
def servers(django_db_blocker):
    """One ``forq_serve`` with its three listeners: {"api": url, "ui": (host, port), "sqs": (host, port)}."""
    ui_port, sqs_port = free_port(), free_port()
    with django_db_blocker.unblock():
        api = start_server({"FORQ_UI_ADDR": f"127.0.0.1:{ui_port}", "FORQ_SQS_ADDR": f"127.0.0.1:{sqs_port}",
                            "FORQ_KEYS_SECRET": KEYS_SECRET, "FORQ_API_WORKERS": "1"}, args=())  # one process: the per-address count is per process
    try:
        for port in (ui_port, sqs_port):
            _wait_for(port)
        host, port = api.url.removeprefix("http://").split(":")
        yield {"api": (host, int(port)), "ui": ("127.0.0.1", ui_port), "sqs": ("127.0.0.1", sqs_port)}
    finally:
        stop_server(api)


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"nothing answers on port {port} after 30 s"
            time.sleep(0.1)


def _sqs_head(action: str, key_id: str, length: int, address: str) -> bytes:
    """An SQS request's head, its Authorization well formed but its signature wrong (no secret is
    needed to send this: ``forq-root`` is every server's root key id)."""
    amz = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    auth = (f"AWS4-HMAC-SHA256 Credential={key_id}/{amz[:8]}/{REGION}/sqs/aws4_request, "
            f"SignedHeaders=host;x-amz-date;x-amz-target, Signature={'0' * 64}")
    return (f"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Amz-Date: {amz}\r\nX-Amz-Target: AmazonSQS.{action}\r\n"
            f"Content-Type: application/x-amz-json-1.0\r\nAuthorization: {auth}\r\nX-Forwarded-For: {address}\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def _sqs_error(answer: tuple[int, dict[str, str], bytes]) -> tuple[int, str]:
    status, headers, body = answer
    assert headers["content-type"] == "application/x-amz-json-1.0"
    return status, json.loads(body)["__type"].removeprefix("com.amazonaws.sqs#")


def _api_head(path: str, key: str, address: str, length: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: forq\r\nX-API-Key: {key}\r\nX-Forwarded-For: {address}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n").encode()


def _scoped_key(settings, grants: list[str]):
    from forqapp.keys import service

    settings.FORQ_KEYS_SECRET = KEYS_SECRET  # this process seals as the server opens
    return service.create(f"listeners-{'-'.join(grants).replace(':', '-').replace(',', '-')}", grants,
                          actor="test", via="test")


# --- SQS: refused before the body -------------------------------------------------------------


def test_sqs_refuses_a_content_length_over_the_cap_before_the_body(servers):
    """100 MB announced under a known key id with a wrong signature: 413 at once (the server read
    the body before it checked the signature, up to its cap, and waited for it)."""
    answer = send_raw(servers["sqs"], _sqs_head("SendMessage", "forq-root", 100_000_000, "192.0.2.31"), timeout=5)
    assert _sqs_error(answer) == (413, "RequestEntityTooLarge")


def test_sqs_refuses_a_throttled_address_before_the_body(servers):
    """Five wrong signatures block the address (FORQ_AUTH_MAX_FAILURES); the sixth request is
    refused from its headers, though it announces 1 MB and sends nothing."""
    address = "192.0.2.32"
    body = b"{}"
    for _ in range(5):
        answer = send_raw(servers["sqs"], _sqs_head("ListQueues", "forq-root", len(body), address) + body, timeout=10)
        assert _sqs_error(answer) == (403, "SignatureDoesNotMatch")
    answer = send_raw(servers["sqs"], _sqs_head("SendMessage", "forq-root", 1_000_000, address), timeout=5)
    assert _sqs_error(answer) == (403, "RequestThrottled")
    # Another address is not throttled: its announced body is waited for (and cut off when it
    # does not come, see below); here it comes, and the wrong signature is what is refused.
    answer = send_raw(servers["sqs"], _sqs_head("ListQueues", "forq-root", len(body), "192.0.2.33") + body, timeout=10)
    assert _sqs_error(answer) == (403, "SignatureDoesNotMatch")


def test_sqs_refuses_a_key_without_the_grant_before_the_body(servers, settings):
    """A key that may only read cannot send to any queue: AccessDenied from the headers."""
    issued = _scoped_key(settings, ["*:read"])
    answer = send_raw(servers["sqs"], _sqs_head("SendMessage", issued.key.access_key_id, 1_000_000, "192.0.2.34"),
                   timeout=5)
    assert _sqs_error(answer) == (403, "AccessDenied")


def test_sqs_refuses_a_missing_or_garbled_authorization_or_an_unknown_key_before_the_body(servers):
    """(So it was already: kept so.)"""
    unknown = _sqs_head("SendMessage", "FQKNOSUCHKEY00000000", 1_000_000, "192.0.2.35")
    assert _sqs_error(send_raw(servers["sqs"], unknown, timeout=5)) == (403, "InvalidClientTokenId")
    head = _sqs_head("SendMessage", "forq-root", 1_000_000, "192.0.2.35")
    missing = b"\r\n".join(line for line in head.split(b"\r\n") if not line.startswith(b"Authorization:"))
    assert _sqs_error(send_raw(servers["sqs"], missing, timeout=5)) == (403, "MissingAuthenticationToken")
    garbled = head.replace(b"Signature=" + b"0" * 64, b"Signature=zz")
    assert _sqs_error(send_raw(servers["sqs"], garbled, timeout=5)) == (403, "IncompleteSignature")


def test_sqs_cuts_off_a_trickling_body(servers):
    """1,000 bytes announced, 10 sent, then nothing: cut off after the grace (FORQ_BODY_GRACE_S,
    5 s) for want of the minimum rate, as on the API (SQS waited 30 s, a figure of its own)."""
    request = _sqs_head("SendMessage", "forq-root", 1000, "192.0.2.36") + b'{"QueueUrl'
    assert _sqs_error(send_raw(servers["sqs"], request, timeout=20)) == (408, "RequestTimeout")


# --- API: a key without the grant ---------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/queues/elsewhere/messages", "/api/v2/queues/elsewhere/messages/batch",
                                  "/api/v1/queues/elsewhere/messages/batch"])
def test_api_refuses_a_key_without_the_grant_before_the_body(servers, settings, path):
    """A valid key that may produce to ``mine`` only, posting to ``elsewhere``: 403 at once."""
    issued = _scoped_key(settings, ["mine:produce"])
    status, headers, body = send_raw(servers["api"], _api_head(path, issued.token, "192.0.2.41", 1_000_000), timeout=5)
    assert (status, json.loads(body)["code"]) == (403, "forbidden.key_scope")
    assert headers["content-type"] == "application/json"
    if path.startswith("/api/v2/"):
        assert json.loads(body)["message"]  # v2's errors say why, as its views answer them


def test_one_address_may_not_hold_more_slow_bodies_than_its_share(servers):
    """Nine bodies from one address, each still arriving after the grace (8 KiB of 100 KB sent:
    above the minimum rate for 8 s more): the ninth is one more than FORQ_BODY_SLOW_PER_ADDRESS
    (8) and is cut off first, 429, while the eight go on."""
    sockets = []
    try:
        for _ in range(9):
            sock = socket.create_connection(servers["api"], timeout=20)
            sockets.append(sock)
            sock.sendall(_api_head("/api/v1/queues/slow/messages", SECRET, "192.0.2.42", 100_000)
                         + b'{"content": "' + b"x" * 8192)
        ready, _, _ = select.select(sockets, [], [], 20)
        assert len(ready) == 1, "one answer first, and only one"
        status, _, body = read_answer(ready[0])
        assert (status, json.loads(body)) == (429, {"code": "too_many_requests"})
    finally:
        for sock in sockets:
            sock.close()


# --- UI: bodies that never end take no turn -------------------------------------------------------


def test_stalled_anonymous_ui_requests_do_not_starve_the_ui(servers):
    """Eight anonymous requests (FORQ_UI_CONCURRENCY) announce a body and never send it: the UI
    still answers a ninth at once (before, the eight held every turn, for ever), and the eight
    are cut off after the grace for want of the minimum rate."""
    sockets = []
    try:
        for k in range(8):
            sock = socket.create_connection(servers["ui"], timeout=20)
            sockets.append(sock)
            sock.sendall((f"POST /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: 192.0.2.5{k}\r\n"
                          "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\n").encode())
        host, port = servers["ui"]
        assert httpx.get(f"http://{host}:{port}/login/", timeout=10).status_code == 200
        for sock in sockets:
            status, _, body = read_answer(sock)
            assert status == 408, body
    finally:
        for sock in sockets:
            sock.close()


def test_the_ui_refuses_a_body_over_its_cap_from_the_headers(servers):
    """6 GB announced to the login page, anonymous, multipart, and none of it sent: 413 at once
    (before, the UI listener took in the whole body, spooled to a temporary file, before the CSRF
    check's 403; a 10 MB one it waited 5 s for, then 408)."""
    for length in (6_000_000_000, 10_000_000):
        request = (f"POST /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: 192.0.2.61\r\n"
                   f"Content-Type: multipart/form-data; boundary=x\r\nContent-Length: {length}\r\n\r\n").encode()
        status, _, body = send_raw(servers["ui"], request, timeout=20)
        assert (status, body) == (413, b"Content Too Large: the request body is over the UI's limit"), length
    host, port = servers["ui"]
    assert httpx.get(f"http://{host}:{port}/login/", timeout=10).status_code == 200  # and on it goes


# --- 1,500 query parameters: 400, no traceback ------------------------------------------------


def test_many_query_parameters_are_a_quiet_400_on_every_listener(django_db_blocker):
    """Over DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000), anonymous: 400 on the UI (Django logged an
    ERROR with a traceback, also for the login redirect such a URL makes), and never an error in
    the log of any listener; an invalid Host on the UI likewise."""
    ui_port, sqs_port = free_port(), free_port()
    with django_db_blocker.unblock():
        api = start_server({"FORQ_UI_ADDR": f"127.0.0.1:{ui_port}", "FORQ_SQS_ADDR": f"127.0.0.1:{sqs_port}"},
                           args=())
    query = "&".join(f"a{k}=1" for k in range(1500))
    try:
        for port in (ui_port, sqs_port):
            _wait_for(port)
        ui = f"http://127.0.0.1:{ui_port}"
        for path in ("/login/", "/", "/admin/", "/admin/login/"):
            assert httpx.get(f"{ui}{path}?{query}", timeout=10).status_code == 400, path
        sqs = httpx.post(f"http://127.0.0.1:{sqs_port}/?{query}", timeout=10)  # no X-Amz-Target
        assert (sqs.status_code, sqs.json()["__type"]) == (400, "com.amazonaws.sqs#InvalidAction")
        for path in ("/api/v2/queues", "/api/v1/queues/q/messages", "/healthcheck"):
            for headers in ({}, {"X-API-Key": SECRET}):
                assert httpx.get(f"{api.url}{path}?{query}", headers=headers, timeout=10).status_code < 500
        # An invalid Host: Django's 400, and an ERROR with a traceback in the log for each, before.
        status, _, _ = send_raw(("127.0.0.1", ui_port), b"GET /login/ HTTP/1.1\r\nHost: a b\r\n\r\n", timeout=10)
        assert status == 400
        assert httpx.get(f"{ui}/login/", timeout=10).status_code == 200  # and on it goes
    finally:
        api.client.close()
        api.proc.terminate()
        output = api.proc.communicate(timeout=30)[0]
    assert "Traceback" not in output, output
    assert " ERROR " not in output, output
    assert "TooManyFieldsSent" in output  # one line, at WARNING
    assert "DisallowedHost" in output  # the same
