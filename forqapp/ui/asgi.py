"""The ASGI application of the UI listener (``forq_serve``: ``forqapp.ui.asgi:ui_application``)."""

from __future__ import annotations

import asyncio
import tempfile
from typing import Any, BinaryIO

import django
from asgiref.sync import sync_to_async
from django.core.exceptions import SuspiciousOperation
from django.core.handlers.asgi import ASGIHandler
from django.db import connections

from ..conf import forq_settings
from ..server import intake
from ..server.serving import static_from_finders, ui_urlconf
from .flow import pages_only


def ui_application():
    """The UI listener: Django's ASGI handler on ``FORQ_UI_URLCONF`` (admin and UI pages, no API).

    Static files that were not collected into ``STATIC_ROOT`` are served here through Django's
    staticfiles finders, so the pages have their CSS and htmx in any project (see
    :mod:`forqapp.server.serving`)."""
    django.setup(set_prefix=False)
    from django.conf import settings

    no_persistent_connections(settings.DATABASES)
    pages_only()  # no claim is made here: the throttled-claims counts come from the other processes
    return _application()


def embedded_ui_application():
    """The same listener, served inside ``forq_serve``'s API worker (:mod:`forqapp.server.embedded`):
    that process's settings are left as they are (its API threads keep their connections open); each
    UI request closes the connections its thread opened instead."""
    django.setup(set_prefix=False)
    return _application(close_connections=True)


def _application(*, close_connections: bool = False):
    intake.quiet_client_faults()  # 1,500 query parameters: a 400, not a traceback in the log
    # FORQ_UI_URLCONF, if set: this process serves the UI only (each request's urlconf; settings unchanged)
    application: Any = BoundedASGIHandler(forq_settings.FORQ_UI_CONCURRENCY, urlconf=ui_urlconf(),
                                          close_connections=close_connections)
    if static_from_finders():
        from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

        application = ASGIStaticFilesHandler(application)
    return _answered(application)


def no_persistent_connections(databases: dict) -> None:
    """``CONN_MAX_AGE = 0`` for every database of this process. Django's ASGI handler runs each
    request's sync code in a thread of its own, and a connection is per thread: with persistent
    connections each request left one open behind it (on PostgreSQL, dozens per UI process within
    minutes, up to ``max_connections``). Django's documentation says as much: under ASGI, disable
    persistent connections (or use the backend's pool, ``OPTIONS["pool"]``, which needs 0 too)."""
    for entry in databases.values():
        entry["CONN_MAX_AGE"] = 0


class BoundedASGIHandler(ASGIHandler):
    """Django's ASGI handler serving at most ``limit`` HTTP requests at once; the others wait their
    turn (the static files, served around it, do not). Each request runs in a thread with a
    database connection of its own, so this bounds the process's connections too.

    A request takes its turn once its body is in, read under :mod:`forqapp.intake`'s bounds (as the
    API's: the ``FORQ_BODY_*`` timeouts and per-address limit, and :func:`body_limit`'s cap):
    requests whose bodies never end hold no turn, and are cut off (408, or 429 for one slow body
    too many from an address). Before, eight of them took every turn, and the UI answered nobody.
    A ``Content-Length`` over the cap is refused (413) before any byte of the body is received, and
    a body that grows past it is cut off there (it was spooled whole to a temporary file first,
    anonymous: 6 GB to a login page's CSRF refusal)."""

    def __init__(self, limit: int, urlconf: str | None = None, *, close_connections: bool = False) -> None:
        super().__init__()
        self.limit = limit
        self.urlconf = urlconf  # each request's (Django resolves and reverses with it), else ROOT_URLCONF
        self.close_connections = close_connections  # each request's own, in its thread, once answered
        self.slots: asyncio.Semaphore | None = None

    def create_request(self, scope, body_file):
        request, error = super().create_request(scope, body_file)
        if request is not None and self.urlconf is not None:
            request.urlconf = self.urlconf
        return request, error

    async def handle(self, scope, receive, send):
        from django.conf import settings

        body = tempfile.SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b")
        try:
            await intake.read_body(scope, receive, body_limit(), into=body)
        except intake.BodyRefused as exc:
            body.close()
            await _plain(send, exc.status, _REFUSALS[exc.reason])
            return
        body.seek(0)
        if self.slots is None:
            self.slots = asyncio.Semaphore(self.limit)  # made on the server's event loop
        try:
            async with self.slots:
                try:
                    await super().handle(scope, _Received(body, receive), send)
                finally:
                    if self.close_connections:  # in the request's thread (its ThreadSensitiveContext)
                        await sync_to_async(connections.close_all)()
        finally:
            body.close()  # Django's handler closes it too, on the paths it expects

    async def read_body(self, receive):
        if isinstance(receive, _Received):  # read already, by handle()
            return receive.body
        return await super().read_body(receive)


#: Room for a form's multipart framing (boundaries and part headers) above its fields' own bytes.
FRAMING_BYTES = 1024 * 1024


def body_limit() -> int | None:
    """The largest request body the UI listener takes: Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``
    (2.5 MB by default; the most form data Django accepts, files aside) and
    :data:`FRAMING_BYTES` for multipart framing. The admin's and the UI's forms take no file, so
    no body they send comes near it; None (no cap) where the project sets
    ``DATA_UPLOAD_MAX_MEMORY_SIZE = None``. A project whose own admin takes uploads on this
    listener raises ``DATA_UPLOAD_MAX_MEMORY_SIZE`` to the size they need."""
    from django.conf import settings

    cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return None if cap is None else int(cap) + FRAMING_BYTES


class _Received:
    """A request's ``receive`` whose body :class:`BoundedASGIHandler` has read (``body``); what
    comes after it (the disconnect) is received as before."""

    def __init__(self, body: BinaryIO, receive) -> None:
        self.body, self.receive = body, receive

    async def __call__(self):
        return await self.receive()


_REFUSALS = {
    intake.TOO_LARGE: b"Content Too Large: the request body is over the UI's limit",
    intake.TOO_SLOW: b"Request Timeout: the request body arrived too slowly",
    intake.INCOMPLETE: b"Bad Request: the request body ended before it was complete",
    intake.TOO_MANY: b"Too Many Requests: too many slow request bodies from this address",
}


async def _plain(send, status: int, text: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(text)).encode())]})
    await send({"type": "http.response.body", "body": text})


_BAD_REQUEST = b"Bad Request: the request body ended before it was complete"


def _answered(application):
    """``application``, but a request it leaves unanswered, or could not make a request of, gets
    a 400. Django's handler answers nothing when the body ends early (``RequestAborted``): the
    client went away, or its chunked framing was malformed, which granian reports the same way;
    granian then filled in a plain-text 500. A client gone gets the 400 nowhere."""

    async def app(scope, receive, send):
        started = False

        async def tracking_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        if scope["type"] != "http":
            return await application(scope, receive, send)
        try:
            await application(scope, receive, tracking_send)
        except (ValueError, SuspiciousOperation):
            # Raised as Django builds the request, before any view: a charset in the Content-Type
            # that names no codec (a NUL in it), or given with more query fields than
            # DATA_UPLOAD_MAX_NUMBER_FIELDS (the query is parsed again for it). The client's fault.
            if started:
                raise
        if not started:
            try:
                await _plain(send, 400, _BAD_REQUEST)
            except Exception:  # noqa: BLE001, S110 - the client is gone: nobody to tell
                pass

    return app
