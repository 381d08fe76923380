"""The ASGI application of the API listener.

It serves :mod:`forqapp.api.urls` and nothing else, calling the views directly: Django's own
``ASGIHandler`` spends ~1 ms of thread hand-offs per request (request signals and middleware run
through ``sync_to_async``), which would cap the API far below what SQLite can take. What the
middleware would have added, the views add themselves (security headers, errors as JSON).

It also does two things a queue needs from its server:

* the 2 MiB body cap is enforced while the body arrives, so an oversized request is refused
  (413) before it is read whole; and
* a long-polling consume is cancelled as soon as the client goes away, so it never claims a
  message for a connection nobody listens to (a claim already running is given back).
"""

from __future__ import annotations

import asyncio
import io
import logging
import os

import django
from django.core.handlers.asgi import ASGIRequest
from django.urls import Resolver404, get_resolver

logger = logging.getLogger("forqapp.api")


# Requests that may wait (long polls): cancelled as soon as their client disconnects.
_WAITING = {("GET", "forq-messages"), ("POST", "forq-claim")}


class DisconnectWatch:
    """Cancels a waiting view's task when its client disconnects (ASGI ``http.disconnect``)."""

    def __init__(self, task: asyncio.Task, receive):
        self.task = task
        self.receive = receive
        self.listener: asyncio.Task | None = None
        self.disconnected = False

    def arm(self) -> None:
        if self.listener is None:
            self.listener = asyncio.ensure_future(self._listen())

    async def _listen(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self.disconnected = True
        self.task.cancel()

    def close(self) -> None:
        if self.listener is not None:
            self.listener.cancel()


class APIApplication:
    urlconf = "forqapp.api.urls"

    def __init__(self):
        django.setup(set_prefix=False)
        from . import errors
        from .api import views
        from .conf import forq_settings

        self._views = views
        self._errors = errors
        self._settings = forq_settings
        self._resolver = get_resolver(self.urlconf)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            match = self._resolver.resolve(_route_path(scope))
        except Resolver404:
            await self._respond(send, self._views.not_found(None))
            return
        body = await self._read_body(scope, receive)
        if body is None:
            code = self._errors.CONTENT_EXCEEDS_LIMIT
            await self._respond(send, self._views.secure(self._views.error_response(code, 413)))
            return
        request = ASGIRequest(scope, io.BytesIO(body))
        view = match.func(request, *match.args, **match.kwargs)
        if (scope["method"], match.url_name) in _WAITING:
            response = await self._unless_disconnected(view, request, receive)
            if response is None:
                return
        else:
            response = await view
        await self._respond(send, response)

    async def _read_body(self, scope, receive) -> bytes | None:
        """The whole body, or None as soon as it is known to exceed the cap."""
        limit = self._settings.FORQ_MAX_BODY_BYTES
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    if int(value) > limit:
                        return None
                except ValueError:
                    pass
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return b""
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    @staticmethod
    async def _unless_disconnected(view, request, receive):
        """Run a view that may wait; if its client disconnects while it waits, cancel it and
        return None. The disconnect listener starts only when the view is about to wait
        (``request.forq_watch.arm()``), so requests answered at once pay nothing for it."""
        task = asyncio.ensure_future(view)
        watch = request.forq_watch = DisconnectWatch(task, receive)
        try:
            return await task
        except asyncio.CancelledError:
            if watch.disconnected:
                return None
            raise
        finally:
            watch.close()

    @staticmethod
    async def _respond(send, response) -> None:
        content = response.content
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.items()]
        headers.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    @staticmethod
    async def _lifespan(receive, send) -> None:
        watcher = None
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                drain_file = os.environ.get("FORQ_DRAIN_FILE")
                if drain_file:
                    watcher = asyncio.ensure_future(_watch_drain_file(drain_file))
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                from .api import views

                views.drain()
                if watcher is not None:
                    watcher.cancel()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _route_path(scope) -> str:
    """The path to route on. An encoded slash stays inside its segment, as Forq's router keeps it
    (Forq's SDKs escape queue names): a queue name "a/b" sent as ``a%2Fb`` is refused as an invalid
    name rather than routed as two segments."""
    raw = scope.get("raw_path")
    if raw and (b"%2F" in raw or b"%2f" in raw):
        return raw.decode("latin-1")
    return scope["path"]


async def _watch_drain_file(path: str) -> None:
    """``forq_serve`` creates this file when it is told to stop. The server then waits for
    in-flight requests before it shuts the app down, so waiting long polls must end first: they
    answer 204 at once instead of holding the shutdown for up to 30 s."""
    from .api import views

    while not os.path.exists(path):
        await asyncio.sleep(0.2)
    views.drain()


def api_application():
    """Factory for ASGI servers: ``granian --interface asgi --factory forqapp.asgi:api_application``."""
    return APIApplication()


def ui_application():
    """The UI listener: Django's ASGI handler on ``FORQ_UI_URLCONF`` (admin and UI pages, no API)."""
    django.setup(set_prefix=False)
    from django.conf import settings
    from django.core.asgi import get_asgi_application

    urlconf = getattr(settings, "FORQ_UI_URLCONF", None)
    if urlconf:
        settings.ROOT_URLCONF = urlconf  # this process serves the UI only
    return get_asgi_application()
