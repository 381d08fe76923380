"""The ASGI application of the API listener.

It serves :mod:`forqapp.api.urls` and nothing else, calling the views directly: Django's own
``ASGIHandler`` spends ~1 ms of thread hand-offs per request (request signals and middleware run
through ``sync_to_async``), which would cap the API far below what SQLite can take. What the
middleware would have added, the views add themselves (security headers, errors as JSON).

It also does what a queue needs from its server against clients that are slow, hostile or gone:

* the method and the API key are checked from the headers, before any byte of the body is
  received: a wrong key is answered 401 (a throttled address 429) at once, and costs no memory;
* the 2 MiB body cap is enforced while the body arrives, so an oversized request is refused
  (413) before it is read whole;
* a body that arrives too slowly is cut off (408): ``FORQ_BODY_TIMEOUT_S`` in all, and after
  ``FORQ_BODY_GRACE_S`` at least ``FORQ_BODY_MIN_RATE_BYTES_S`` on average; and
* a long-polling consume is cancelled as soon as the client goes away, so it never claims a
  message for a connection nobody listens to (a claim already running is given back).

Every answer is JSON (``{"code": …}`` for errors), unknown paths included.
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


class BodyRefused(Exception):
    """The body is not read whole: too big (413) or too slow (408)."""

    def __init__(self, code: str, status: int):
        self.code, self.status = code, status


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
        body_file = io.BytesIO()  # filled below, once the headers passed
        try:
            request = ASGIRequest(scope, body_file)
        except UnicodeDecodeError:  # raw non-ASCII bytes in the query string (Django decodes it as UTF-8)
            await self._respond(send, self._views.secure(self._views.error_response(self._errors.BODY_INVALID)))
            return
        refused = await self._views.early_refusal(request, match.func)
        if refused is not None:  # wrong method or key, throttled: the body is never received
            await self._respond(send, refused)
            return
        if scope["method"] == "POST" and hasattr(match.func, "forq_endpoint"):  # no other view reads one
            try:
                body = await self._read_body(scope, receive)
            except BodyRefused as exc:
                response = self._views.error_response(exc.code, exc.status)
                await self._respond(send, self._views.secure(response))
                return
            if body is None:
                return  # the client went away: nobody to answer
            body_file.write(body)
            body_file.seek(0)
        view = match.func(request, *match.args, **match.kwargs)
        if (scope["method"], match.url_name) in _WAITING:
            response = await self._unless_disconnected(view, request, receive)
            if response is None:
                return
        else:
            response = await view
        await self._respond(send, response)

    async def _read_body(self, scope, receive) -> bytes | None:
        """The whole body, or None if the client went away. Raises :class:`BodyRefused` as soon as
        the body is known to exceed the cap (413), or when it arrives too slowly (408).

        Too slow: not complete within ``FORQ_BODY_TIMEOUT_S``, or, after ``FORQ_BODY_GRACE_S``,
        less than ``FORQ_BODY_MIN_RATE_BYTES_S`` received on average. Each chunk moves the
        deadline on by the time it buys at that rate; a client that holds, sends nothing."""
        settings = self._settings
        limit = settings.FORQ_MAX_BODY_BYTES
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    if int(value) > limit:
                        raise BodyRefused(self._errors.CONTENT_EXCEEDS_LIMIT, 413)
                except ValueError:
                    pass
        loop = asyncio.get_running_loop()
        start = loop.time()
        last = start + float(settings.FORQ_BODY_TIMEOUT_S)
        grace, rate = float(settings.FORQ_BODY_GRACE_S), float(settings.FORQ_BODY_MIN_RATE_BYTES_S or 0)
        chunks, size = [], 0
        try:
            async with asyncio.timeout_at(min(last, start + grace) if rate else last) as deadline:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise BodyRefused(self._errors.CONTENT_EXCEEDS_LIMIT, 413)
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
                    if rate:
                        deadline.reschedule(min(last, start + grace + size / rate))
        except TimeoutError:
            logger.info("%s %s: body too slow (%d bytes in %.1f s), cut off", scope["method"],
                        scope["path"], size, loop.time() - start)
            raise BodyRefused(self._errors.REQUEST_TIMEOUT, 408) from None

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
    """The UI listener: Django's ASGI handler on ``FORQ_UI_URLCONF`` (admin and UI pages, no API).

    Static files that were not collected into ``STATIC_ROOT`` are served here through Django's
    staticfiles finders, so the pages have their CSS and htmx in any project (see
    :mod:`forqapp.serving`)."""
    django.setup(set_prefix=False)
    from django.conf import settings
    from django.core.asgi import get_asgi_application

    from .serving import static_from_finders

    urlconf = getattr(settings, "FORQ_UI_URLCONF", None)
    if urlconf:
        settings.ROOT_URLCONF = urlconf  # this process serves the UI only
    application = get_asgi_application()
    if static_from_finders():
        from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

        application = ASGIStaticFilesHandler(application)
    return application
