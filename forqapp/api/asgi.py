"""The application of the API listener (``forq_serve``: ``forqapp.api.asgi:api_application``), an
ASGI application that is also an RSGI one: ``forq_serve`` serves it over granian's RSGI, the hot
calls natively and the rest through :mod:`forqapp.server.rsgi`'s adapters to the same ASGI code.

It serves :mod:`forqapp.api.urls` and nothing else, calling the views directly: Django's own
``ASGIHandler`` spends ~1 ms of thread hand-offs per request (request signals and middleware run
through ``sync_to_async``), which would cap the API far below what SQLite can take. What the
middleware would have added, the views add themselves (:mod:`forqapp.api.plumbing`: security
headers, errors as JSON).

It also does what a queue needs from its server against clients that are slow, hostile or gone:

* the method, the API key and its grant for the path's queue are checked from the headers,
  before any byte of the body is received: a wrong key is answered 401 (a throttled address 429),
  a key without the grant 403, at once, and cost no memory;
* the body is read under :mod:`forqapp.intake`'s bounds, shared with the SQS and UI listeners:
  the 2 MiB cap (a ``Content-Length`` over it is 413 at once, a body that grows past it is cut
  off), a body that arrives too slowly is cut off (408: ``FORQ_BODY_TIMEOUT_S`` in all, and after
  ``FORQ_BODY_GRACE_S`` at least ``FORQ_BODY_MIN_RATE_BYTES_S`` on average), and so is one more
  slow body from an address that has ``FORQ_BODY_SLOW_PER_ADDRESS`` (429); and
* a request that may wait (its endpoint says so: ``waits``) is cancelled as soon as its client
  goes away once it waits, so it never claims a message for a connection nobody listens to (a
  claim already running is given back: :mod:`forqapp.services.waiting`).

Every answer is JSON (``{"code": …}`` for errors), unknown paths included. At start-up it watches
for ``forq_serve``'s drain request, and at shutdown it drains (:func:`forqapp.services.waiting.drain`).
Under ``forq_serve`` with its jobs on (and only then: it says so in the environment), each worker
runs a jobs scheduler thread from lifespan startup to shutdown (:class:`forqapp.worker.jobs.ServerJobs`):
the one holding the database's jobs lease runs the jobs, and gives the lease up at shutdown. When
``forq_serve`` asks for it (one API worker and one UI worker), the worker also serves the UI's
listener from lifespan startup to shutdown (:mod:`forqapp.server.embedded`).
"""

from __future__ import annotations

import io
import logging
import os

import django
from django.core.exceptions import SuspiciousOperation
from django.core.handlers.asgi import ASGIRequest
from django.urls import Resolver404, get_resolver

from .. import errors, metrics
from ..conf import hot
from ..server import embedded, intake, process, rsgi
from ..worker.jobs import ServerJobs
from . import fastpath, plumbing
from .fastpath import FastPath
from .plumbing import BODY_CODES, BodyRefused

logger = logging.getLogger("forqapp.api")

# Set in the ASGI scope of a request served through RSGI (its path percent-decoded, no raw path).
_DECODED_PATH = "forqapp.decoded_path"


class APIApplication:
    urlconf = "forqapp.api.urls"

    def __init__(self):
        django.setup(set_prefix=False)
        self._resolver = get_resolver(self.urlconf)
        self._fast: FastPath | None = FastPath(self._unless_disconnected)
        self._rsgi_lifespan: rsgi.Lifespan | None = None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        fast = self._fast
        if fast is not None and (taken := fast.take(scope)) is not None:  # Forq's hot calls
            answer = await fast.answer(taken, lambda: self._read_body(scope, receive), receive,
                                       scope["method"], scope["path"])
            if answer is not None:
                status, headers, content = answer
                metrics.api_request(scope["path"], status)
                sent = fastpath.encoded(headers)
                sent.append((b"content-length", str(len(content)).encode()))
                await send({"type": "http.response.start", "status": status, "headers": sent})
                await send({"type": "http.response.body", "body": content})
            return
        await self._general(scope, receive, send)

    async def __rsgi__(self, scope, protocol):
        """The same, served through granian's RSGI (``forq_serve``'s way: :mod:`forqapp.server.rsgi`)."""
        if scope.proto != "http":
            return
        fast = self._fast
        if fast is not None and (taken := fast.take_rsgi(scope)) is not None:
            answer = await fast.answer(taken, lambda: self._read_rsgi_body(scope, protocol),
                                       rsgi.DisconnectReceive(protocol), scope.method, scope.path)
            if answer is not None:
                metrics.api_request(scope.path, answer[0])
                protocol.response_bytes(*answer)
            return
        asgi_scope = rsgi.asgi_scope(scope)
        asgi_scope[_DECODED_PATH] = True
        await self._general(asgi_scope, rsgi.BodyReceive(protocol), rsgi.ResponseSend(protocol))

    def __rsgi_init__(self, loop) -> None:
        self._rsgi_lifespan = rsgi.Lifespan(self._lifespan)
        self._rsgi_lifespan.startup(loop)

    def __rsgi_del__(self, loop) -> None:
        if self._rsgi_lifespan is not None:
            self._rsgi_lifespan.shutdown(loop)

    async def _general(self, scope, receive, send) -> None:
        """Any request the fast path did not take: Django's request, the resolver, the view."""
        try:
            match = self._resolver.resolve(_route_path(scope))
        except Resolver404:
            await self._respond(scope, send, plumbing.not_found(None))
            return
        if match.func is plumbing.unknown_path and scope.get(_DECODED_PATH):
            match = self._escaped_slash(scope["path"]) or match
        body_file = io.BytesIO()  # filled below, once the headers passed
        try:
            request = ASGIRequest(scope, body_file)
        except (ValueError, SuspiciousOperation):
            # Raw non-ASCII bytes in the query string (Django decodes it as UTF-8); a charset that
            # names no codec (a NUL in it); a charset given with more query fields than
            # DATA_UPLOAD_MAX_NUMBER_FIELDS (the query is parsed again for it): a bad request.
            await self._respond(scope, send, plumbing.secure(plumbing.error_response(errors.BODY_INVALID)))
            return
        refused = await plumbing.early_refusal(request, match.func, match.kwargs)
        if refused is not None:  # wrong method or key, throttled, no grant: the body is never received
            await self._respond(scope, send, refused)
            return
        endpoint = plumbing.spec(match.func)
        if scope["method"] in ("POST", "PUT", "PATCH") and endpoint is not None:  # the methods with a body
            try:
                body = await self._read_body(scope, receive)
            except BodyRefused as exc:
                response = plumbing.secure(plumbing.error_response(exc.code, exc.status))
                await self._respond(scope, send, plumbing.worded(match.func, response))
                return
            body_file.write(body)
            body_file.seek(0)
        view = match.func(request, *match.args, **match.kwargs)
        if endpoint is not None and scope["method"] in endpoint.waits:
            response = await self._unless_disconnected(view, receive)
            if response is None:
                return
        else:
            response = await view
        await self._respond(scope, send, response)

    def _escaped_slash(self, path: str):
        """For a path served through RSGI (percent-decoded) that routes nowhere: the route of the
        path as it was if the client escaped a slash in a queue's name (Forq's SDKs escape names:
        "a/b" arrives as ``a%2Fb``, which the views refuse as an invalid name), or None."""
        for escaped in rsgi.escaped_slash_paths(path):
            try:
                match = self._resolver.resolve(escaped)
            except Resolver404:
                continue
            if match.func is not plumbing.unknown_path:
                return match
        return None

    async def _read_rsgi_body(self, scope, protocol) -> bytes:
        """:meth:`_read_body` of an RSGI request: read whole when its length is given
        (:func:`forqapp.server.intake.read_declared`), else in chunks."""
        limit = hot("FORQ_MAX_BODY_BYTES")
        declared = scope.headers.get("content-length")
        try:
            if declared is None or not declared.isdigit():
                return await intake.read_body(rsgi.asgi_scope(scope), rsgi.BodyReceive(protocol), limit)
            if len(declared) > 18 or int(declared) > limit:
                raise intake.BodyRefused(intake.TOO_LARGE)
            return await intake.read_declared(scope.method, scope.path, protocol, int(declared),
                                              lambda: intake.client_address(rsgi.asgi_scope(scope)))
        except intake.BodyRefused as exc:
            raise BodyRefused(BODY_CODES[exc.reason], exc.status) from None

    async def _read_body(self, scope, receive) -> bytes:
        """The whole body, under ``forq_serve``'s bounds (:func:`forqapp.intake.read_body`: the
        ``FORQ_MAX_BODY_BYTES`` cap, ``FORQ_BODY_*``); :class:`BodyRefused` with the API's code."""
        try:
            return await intake.read_body(scope, receive, hot("FORQ_MAX_BODY_BYTES"))
        except intake.BodyRefused as exc:
            raise BodyRefused(BODY_CODES[exc.reason], exc.status) from None

    @staticmethod
    async def _unless_disconnected(view, receive):
        """Run a view that may wait (:func:`forqapp.server.intake.unless_disconnected`); None if
        its client disconnected while it waited."""
        response = await intake.unless_disconnected(view, receive)
        return None if response is intake.GONE else response

    @staticmethod
    async def _respond(scope, send, response) -> None:
        metrics.api_request(scope["path"], response.status_code)
        content = response.content
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.items()]
        headers.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    async def _lifespan(self, receive, send) -> None:
        await intake.lifespan(receive, send, start_jobs=_server_jobs, listeners=embedded.from_environment())


def _server_jobs():
    """The jobs scheduler of this worker, started, when ``forq_serve`` runs the jobs (it says so,
    with its verbosity, in :data:`forqapp.server.process.SERVE_JOBS_ENV`); else None: served by anything
    else (or ``forq_serve --no-jobs``), the API runs no jobs."""
    verbosity = os.environ.get(process.SERVE_JOBS_ENV)
    if not verbosity:
        return None
    jobs = ServerJobs(int(verbosity))
    jobs.start()
    return jobs


def _route_path(scope) -> str:
    """The path to route on. An encoded slash stays inside its segment, as Forq's router keeps it
    (Forq's SDKs escape queue names): a queue name "a/b" sent as ``a%2Fb`` is refused as an invalid
    name rather than routed as two segments."""
    raw = scope.get("raw_path")
    if raw and (b"%2F" in raw or b"%2f" in raw):
        return raw.decode("latin-1")
    return scope["path"]


def api_application():
    """Factory for ASGI and RSGI servers: ``granian --interface rsgi --factory
    forqapp.api.asgi:api_application`` (``forq_serve``'s way), or ``--interface asgi``."""
    return APIApplication()
