"""Bounds on what a request may make a listener take in, driven through the listeners' own apps in
this process (the real servers' side is in test_listeners.py):

* the UI listener's body cap (``DATA_UPLOAD_MAX_MEMORY_SIZE`` and room for multipart framing): a
  ``Content-Length`` over it is 413 before any byte of the body is received, and a body without
  one is cut off once it passes it, before Django reads it.
"""

from __future__ import annotations

import asyncio

import pytest
from django.test import override_settings

from forqapp.ui import asgi as ui_asgi

pytestmark = pytest.mark.django_db(transaction=True)


def _scope(method: str, path: str, headers: dict[str, bytes], *, client: str = "127.0.0.1") -> dict:
    return {
        "type": "http", "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "client": (client, 40000), "server": ("testserver", 80),
        "headers": [(k.lower().encode("latin-1"), v) for k, v in headers.items()],
    }


async def _call(app, scope: dict, receive) -> tuple[int, bytes]:
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    assert sent, "no answer"
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@pytest.fixture(scope="module")
def ui():
    return ui_asgi.embedded_ui_application()


async def _never():
    raise AssertionError("the body was received")


def test_the_ui_refuses_a_content_length_over_its_cap_before_the_body(ui):
    """6 GB announced to the login page, anonymous: 413 from the headers (the whole body was
    spooled to a temporary file before, then refused by the CSRF check)."""
    for length in (b"6000000000", b"10000000", str(ui_asgi.body_limit() + 1).encode()):
        scope = _scope("POST", "/login/", {"host": b"127.0.0.1", "content-length": length,
                                           "content-type": b"multipart/form-data; boundary=x"})
        status, body = asyncio.run(_call(ui, scope, _never))
        assert status == 413 and b"Content Too Large" in body, (length, status, body)


def test_the_ui_cuts_off_a_body_without_a_length_once_it_passes_its_cap(ui):
    """A chunked body that never ends: cut off (413) once past the cap; the rest is never received."""
    received = 0

    async def endless():
        nonlocal received
        received += 65536
        assert received < 10_000_000, "the body was read on and on"
        return {"type": "http.request", "body": b"a" * 65536, "more_body": True}

    scope = _scope("POST", "/login/", {"host": b"127.0.0.1", "content-type": b"application/x-www-form-urlencoded"})
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=100_000):
        limit = ui_asgi.body_limit()
        status, _ = asyncio.run(_call(ui, scope, endless))
    assert status == 413
    assert limit < received <= limit + 65536


def _sent(body: bytes = b""):
    """``receive`` of a client that sends ``body`` whole, then waits for its answer."""
    messages = iter([{"type": "http.request", "body": body, "more_body": False}])

    async def receive():
        message = next(messages, None)
        if message is None:  # the body is in: the client waits for its answer
            await asyncio.Event().wait()
        return message

    return receive


def test_a_body_under_the_cap_still_reaches_django(ui):
    form = b"username=a&password=b"
    receive = _sent(form)

    scope = _scope("POST", "/login/", {"host": b"127.0.0.1", "content-length": str(len(form)).encode(),
                                       "content-type": b"application/x-www-form-urlencoded"})
    status, _ = asyncio.run(_call(ui, scope, receive))
    assert status == 403  # Django's CSRF refusal: the body got through


def test_the_ui_cap_follows_django_and_none_lifts_it():
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000):
        assert ui_asgi.body_limit() == 1000 + ui_asgi.FRAMING_BYTES
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=None):
        assert ui_asgi.body_limit() is None


# --- client faults: one WARNING line, not a traceback ---------------------------------------------


def test_an_invalid_host_on_the_ui_is_a_400_and_one_warning_line(ui, caplog):
    """``Host: a b``: Django answers 400 (DisallowedHost) and logged an ERROR with a traceback for
    each such request: one line at WARNING now, as the other client faults."""

    for host in (b"a b", b"x/y"):
        caplog.clear()
        scope = _scope("GET", "/login/", {"host": host})
        status, _ = asyncio.run(_call(ui, scope, _sent()))
        assert status == 400, host
        records = [r for r in caplog.records if r.name == "django.security.DisallowedHost"]
        assert [r.levelname for r in records] == ["WARNING"], host
        assert records[0].exc_info is None and not records[0].exc_text
        assert not [r for r in caplog.records if r.levelno >= 40 or r.exc_info], caplog.text


# --- a body of a given length, read over RSGI (the API's hot path) -----------------------------


class TricklingProtocol:
    """RSGI's protocol for a client that announced a long body and sends ``pieces`` a byte each,
    ``delay`` apart, then holds: read whole (``await protocol()``) or in chunks (``async for``)."""

    def __init__(self, pieces: int, delay: float) -> None:
        self.pieces, self.delay = pieces, delay
        self.sent = 0

    async def __call__(self) -> bytes:
        async for _ in self:
            pass
        raise AssertionError("unreachable: the body never ends")

    def __aiter__(self):
        return self._chunks()

    async def _chunks(self):
        while True:
            await asyncio.sleep(self.delay if self.sent < self.pieces else 3600)
            self.sent += 1
            yield b"x"


@pytest.mark.parametrize("transport", ["real", "whole-only"])
def test_a_declared_body_under_the_minimum_rate_is_cut_off_after_the_grace(transport, caplog):
    """100,000 bytes announced, a byte every 20 ms (50 B/s): under the 1,000 B/s minimum once the
    grace (0.3 s) is over, so cut off then (408), and the log says how many bytes came. Before, the
    length announced bought it the whole FORQ_BODY_TIMEOUT_S (here 3 s), and the log said 100,000.
    A protocol that cannot be read in chunks keeps the deadline its length gives (the timeout)."""
    from forqapp.server import intake

    protocol = TricklingProtocol(pieces=1000, delay=0.02)
    whole = protocol if transport == "real" else (lambda: protocol())
    with override_settings(FORQ_BODY_GRACE_S=0.3, FORQ_BODY_MIN_RATE_BYTES_S=1000, FORQ_BODY_TIMEOUT_S=3):
        with pytest.raises(intake.BodyRefused) as refused:
            asyncio.run(intake.read_declared("POST", "/api/v1/queues/q/messages", whole, 100_000,
                                             lambda: "192.0.2.77"))
    assert refused.value.status == 408
    (line,) = [r.getMessage() for r in caplog.records if "too slow" in r.getMessage()]
    if transport == "real":
        assert protocol.sent < 100, protocol.sent  # ~15 (0.3 s): cut long before the 3 s timeout
        assert line.startswith(f"POST /api/v1/queues/q/messages: body too slow ({protocol.sent} bytes in "), line
    else:
        assert protocol.sent >= 100, protocol.sent
        assert "fewer than its 100000 bytes" in line, line


def test_a_short_declared_body_is_read_whole_in_one_call():
    """The hot path's body (at most a second's worth at the minimum rate): one ``await protocol()``."""
    from forqapp.server import intake

    class Whole:
        def __aiter__(self):
            raise AssertionError("read in chunks")

        async def __call__(self) -> bytes:
            return b'{"content": "x"}'

    body = asyncio.run(intake.read_declared("POST", "/q", Whole(), 16, lambda: "192.0.2.78"))
    assert body == b'{"content": "x"}'


def test_a_declared_body_read_in_chunks_passes_whole_or_breaks_off_as_400():
    from forqapp.server import intake

    class Chunks:
        def __init__(self, chunks):
            self.chunks = chunks

        async def __call__(self) -> bytes:
            raise AssertionError("read whole")

        def __aiter__(self):
            return self._chunks()

        async def _chunks(self):
            for chunk in self.chunks:
                yield chunk

    text = b"y" * 5000
    pieces = [text[:2000], text[2000:], b""]  # granian ends a body with one empty chunk
    assert asyncio.run(intake.read_declared("POST", "/q", Chunks(pieces), 5000, lambda: "a")) == text
    with pytest.raises(intake.BodyRefused) as refused:  # two: it broke off
        asyncio.run(intake.read_declared("POST", "/q", Chunks([text[:2000], b"", b""]), 5000, lambda: "a"))
    assert refused.value.status == 400
