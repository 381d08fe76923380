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
