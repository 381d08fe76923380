"""The ASGI application of the SQS listener (``FORQ_SQS_ADDR``; ``forq_serve`` runs it with
granian as ``forqapp.sqs.asgi:sqs_application``).

It speaks SQS's JSON 1.0 protocol: ``POST /`` with ``X-Amz-Target: AmazonSQS.<Action>`` and a
SigV4 ``Authorization`` (or a presigned URL's signature in the query string); and SQS's query
protocol (:mod:`.query`), taken by its content type: a form-encoded ``POST`` or a ``GET``, the
action in its parameters (``Action=…``), answered in XML. As the API's app does, it refuses what
it can from the headers before it receives the body (unknown action, missing or malformed
signature, unknown key, an address the failed-authentication throttle blocks, a key with no grant
for the action on any queue, a ``Content-Length`` over the cap), reads the body under
:mod:`forqapp.intake`'s bounds (the cap, the ``FORQ_BODY_*`` timeouts and per-address limit), and
cancels a long poll whose client went away (what it claimed meanwhile is given back). Wrong
signatures count toward the address's throttle (``FORQ_AUTH_MAX_FAILURES``…), shared with the API;
as the signature covers the body, a blocked address is refused before its body is received, signed
rightly or not. On the query protocol the action is named in the body: it and its grant are
checked once the body is in (before, when the query string names it). Every answer is SQS's JSON
(or XML); an unexpected failure is logged and answered ``InternalError`` (500), never a bare error
page.
"""

from __future__ import annotations

import datetime as dt
import logging

import django

from .. import errors, metrics, services, validation
from ..conf import forq_settings
from ..errors import ForqError
from ..keys import ROOT_ACCESS_KEY_ID
from ..keys import cache as key_cache
from ..server import intake
from ..services import waiting
from . import protocol, query, sigv4
from .protocol import SqsError

logger = logging.getLogger("forqapp.sqs")

_SUSPECTS_MAX = 10_000  # addresses remembered as having failed to authenticate
_BODY_REFUSALS = {  # intake's reasons, as SQS words them
    intake.TOO_LARGE: ("RequestEntityTooLarge", "The request body is over {limit} bytes"),
    intake.TOO_SLOW: ("RequestTimeout", "The request body arrived too slowly"),
    intake.INCOMPLETE: ("SerializationException", "The request body ended before it was complete"),
    intake.TOO_MANY: ("RequestThrottled", "Too many slow request bodies from this address"),
}


class SQSApplication:
    def __init__(self) -> None:
        django.setup(set_prefix=False)
        from . import actions, queues  # (they import the models: after django.setup())

        self.actions, self.queues = actions, queues
        self._suspects: dict[str, int] = {}  # address -> when (Unix ms) this process last saw it fail

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers: dict[str, list[str]] = {}
        for name, value in scope.get("headers", ()):
            headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
        label = ["other"]  # the metric's action: a bounded label set
        wanted = (headers.get("x-amz-target") or [""])[0].partition(".")[2]
        if wanted in self.actions.ACTIONS or wanted == self.actions.RECEIVE:
            label[0] = wanted
        speaks_query = query.is_query(scope["method"], headers)
        try:
            if speaks_query:
                answer = await self._handle_query(scope, receive, headers, label)
            else:
                answer = await self._handle(scope, receive, headers)
        except protocol.SqsError as exc:
            answer = (query.error if speaks_query else protocol.error)(exc)
        except _Gone:
            return
        except Exception as exc:
            action = label[0]
            reason = errors.unavailable(exc)
            if reason is not None:  # SQS's own word for "try again later"
                errors.say_unavailable(logger, f"SQS {action}", reason)
                failure = protocol.SqsError(
                    "ServiceUnavailable", f"The request has failed due to a temporary failure of the server: {reason}.",
                    503, fault="Receiver")
            else:
                logger.exception("SQS %s failed", action)
                failure = protocol.SqsError(
                    "InternalError", "We encountered an internal error. Please try again.", 500, fault="Receiver")
            answer = (query.error if speaks_query else protocol.error)(failure)
        metrics.sqs_request(label[0], answer[0])
        status, headers_out, body = answer
        await send({"type": "http.response.start", "status": status, "headers": headers_out})
        await send({"type": "http.response.body", "body": body})

    async def _handle(self, scope, receive, headers) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """A JSON 1.0 request: the action in ``X-Amz-Target``, known before the body."""
        if scope["method"] != "POST":
            raise protocol.SqsError("InvalidAction", "forqapp's SQS endpoint speaks SQS's JSON 1.0 protocol (POST / "
                                    "with X-Amz-Target: AmazonSQS.<Action>) and its query protocol (a form-encoded "
                                    "POST, or a GET, with Action=<Action>)")
        target = (headers.get("x-amz-target") or [""])[0]
        prefix, _, action = target.partition(".")
        if prefix != "AmazonSQS" or not action:
            raise protocol.SqsError("InvalidAction", "X-Amz-Target must be AmazonSQS.<Action> (JSON 1.0 protocol)")
        handler = self._handler(action)
        # Authentication from the headers, before the body is received.
        auth, key, address = await self._authenticate(scope, headers)
        # The signature covers the body: what can be refused before it is received, is.
        await self._unless_throttled(address)
        refused = self.actions.refused_by_grants(key, action)
        if refused is not None:
            raise refused
        body = await self._read_body(scope, receive)
        key = await self._verify(scope, headers, auth, key, address, body)
        if handler is None and action != self.actions.RECEIVE:  # an SQS action forqapp does not do
            raise protocol.SqsError("UnsupportedOperation", f"{action} is not supported by forqapp's SQS endpoint")
        try:
            payload = validation.json_loads(body or b"{}")
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
            payload = None
        if not isinstance(payload, dict):
            raise protocol.SqsError("SerializationException", "The request body is not a JSON object")
        ctx = self.actions.Context(key, self._origin(scope, headers, auth.region))
        if handler is not None:
            return protocol.answer(await services.run_async(self._run, handler, ctx, payload))
        return await self._receive(ctx, payload, receive, protocol.answer)

    async def _handle_query(self, scope, receive, headers, label) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """A query-protocol request: ``Action=…`` and its parameters form-encoded in the body (or
        the query string). The key and the signature's form and time are checked from the headers
        (or the query string's ``X-Amz-…``) before the body is received, and so are the action and
        its grant when the query string names it; otherwise they are once the body is in."""
        if scope["method"] not in ("GET", "POST"):
            raise protocol.SqsError("InvalidAction", "The query protocol is a form-encoded POST or a GET")
        raw_query = scope.get("query_string", b"").decode("latin-1")
        in_url = query.form(raw_query)
        auth, key, address = await self._authenticate(scope, headers)
        await self._unless_throttled(address)
        if in_url.get("Action"):  # known before the body: refused before it is received
            self._query_action(key, in_url["Action"])
        body = await self._read_body(scope, receive)
        key = await self._verify(scope, headers, auth, key, address, body)
        params = query.merged(in_url, query.form(body))
        action = params.get("Action", "")
        handler = self._query_action(key, action)
        if handler is not None or action == self.actions.RECEIVE:
            label[0] = action  # (the JSON protocol's label set)
        if handler is None and action != self.actions.RECEIVE:
            raise protocol.SqsError("UnsupportedOperation", f"{action} is not supported by forqapp's SQS endpoint")
        payload = query.parse(action, params)
        path = scope.get("path") or "/"
        if "QueueUrl" not in payload and path.strip("/") and query.takes_queue_url(action):
            payload["QueueUrl"] = path  # the queue's URL the request was sent to
        ctx = self.actions.Context(key, self._origin(scope, headers, auth.region))
        if handler is not None:
            return query.answer(action, await services.run_async(self._run, handler, ctx, payload))
        return await self._receive(ctx, payload, receive, lambda answer: query.answer(action, answer))

    def _handler(self, action: str):
        """The function of ``action``; ``None`` for ReceiveMessage and the SQS actions forqapp does
        not do; ``InvalidAction`` for what is no SQS action."""
        handler = self.actions.ACTIONS.get(action)
        if handler is None and action != self.actions.RECEIVE and action not in self.actions.UNSUPPORTED:
            raise protocol.SqsError("InvalidAction", f"The action {action} is not valid for this endpoint.")
        return handler

    def _query_action(self, key, action: str):
        if not action:
            raise protocol.SqsError("MissingAction", "The request must contain the parameter Action.")
        handler = self._handler(action)
        refused = self.actions.refused_by_grants(key, action)
        if refused is not None:
            raise refused
        return handler

    async def _authenticate(self, scope, headers):
        """(the signature's parts, the key, the client's address): the key named by the
        ``Authorization`` header (or a presigned URL's query string), known and not expired."""
        auth = sigv4.parse(headers, dt.datetime.now(dt.UTC), scope.get("query_string", b"").decode("latin-1"))
        address = self._address(scope, headers)
        key = key_cache.cached(auth.access_key_id) if auth.access_key_id != ROOT_ACCESS_KEY_ID \
            else key_cache.root_key()
        if key is key_cache.MISS:
            key = await services.run_async(key_cache.for_access_key, auth.access_key_id)
        if (key is None or key.expired(services.now_ms())) and key_cache.recheck_due(auth.access_key_id):
            key = await services.run_async(key_cache.load, auth.access_key_id)  # created or enabled elsewhere?
        if key is None or key.expired(services.now_ms()):
            await self._failed(address)
            raise protocol.SqsError("InvalidClientTokenId", "The security token included in the request is invalid.",
                                    403)
        return auth, key, address

    async def _verify(self, scope, headers, auth, key, address, body: bytes):
        """The key whose secret signed the request (over its body), re-read once if it may have
        been rotated elsewhere; ``SignatureDoesNotMatch`` (counted for the throttle) if none did."""
        request = sigv4.canonical_request(scope["method"], scope.get("raw_path", b"/").decode("latin-1") or "/",
                                          scope.get("query_string", b"").decode("latin-1"), headers,
                                          auth.signed_headers, body)
        if not sigv4.verify(key.secret, auth, request) and key_cache.recheck_due(auth.access_key_id):
            key = await services.run_async(key_cache.load, auth.access_key_id)  # rotated elsewhere?
        if key is None or not sigv4.verify(key.secret, auth, request):
            await self._failed(address)
            raise protocol.SqsError("SignatureDoesNotMatch", "The request signature we calculated does not match the "
                                    "signature you provided. Check your AWS Secret Access Key and signing method.", 403)
        return key

    def _run(self, handler, ctx, payload):
        try:
            return handler(ctx, payload)
        except ForqError as exc:
            raise self.queues.forq_error(exc) from None

    async def _receive(self, ctx, payload, receive, encode) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        actions = self.actions
        plan = await services.run_async(self._run, actions.receive_plan, ctx, payload)
        if plan.retry is not None:  # a ReceiveRequestAttemptId retried: what that receive took
            got = plan.retry
        elif plan.wait:
            got = await intake.unless_disconnected(
                waiting.claim_async(actions.take, plan.queue, float(plan.wait), plan, nothing=[]), receive)
            if got is intake.GONE:
                raise _Gone()
        else:
            got = await services.run_async(actions.take, plan.queue, plan)
        # On a database thread: if the answer cannot be made, what was claimed is given back.
        return await services.run_async(actions.receive_answer, ctx, plan, got, encode)

    def _origin(self, scope, headers, region):
        scheme = scope.get("scheme", "http")
        if forq_settings.FORQ_TRUST_PROXY_HEADERS and headers.get("x-forwarded-proto"):
            scheme = headers["x-forwarded-proto"][-1].split(",")[-1].strip()
        host = (headers.get("host") or [""])[0]
        if not host:
            server = scope.get("server") or ("localhost", None)
            host = f"{server[0]}:{server[1]}" if server[1] else str(server[0])
        return self.queues.Origin(scheme if scheme in ("http", "https") else "http", host, region)

    def _address(self, scope, headers) -> str:
        if forq_settings.FORQ_TRUST_PROXY_HEADERS:
            hops = [h.strip() for h in ",".join(headers.get("x-forwarded-for", [])).split(",") if h.strip()]
            if hops:
                return hops[-1]
        client = scope.get("client")
        return client[0] if client else "unknown"

    async def _failed(self, address: str) -> None:
        self._suspect(address)
        retry_after = await services.run_async(services.auth_retry_after, address)
        if not retry_after:  # counted, unless concurrent wrong keys blocked the address meanwhile
            retry_after = await services.run_async(services.auth_failed, address)
        if retry_after:
            raise _throttled(retry_after)

    def _suspect(self, address: str) -> None:
        suspects = self._suspects
        if len(suspects) >= _SUSPECTS_MAX:
            suspects.clear()  # forgetting costs a body read per address, at most
        suspects[address] = services.now_ms()

    async def _unless_throttled(self, address: str) -> None:
        """``RequestThrottled`` for an address the failed-authentication throttle blocks, before
        its body is received (a valid signature included: it cannot be checked without the body).
        Asked of the database only for addresses this process saw fail lately, so a client that
        never failed costs no query."""
        seen = self._suspects.get(address)
        if seen is None:
            return
        settings = forq_settings
        if services.now_ms() - seen > (settings.FORQ_AUTH_FAILURE_WINDOW_S + settings.FORQ_AUTH_BLOCK_S) * 1000:
            del self._suspects[address]
            return
        retry_after = await services.run_async(services.auth_retry_after, address)
        if retry_after:
            raise _throttled(retry_after)

    def _limit(self) -> int:
        # A batch of the largest size this server stores, JSON-escaped (botocore's ensure_ascii
        # makes a 2- or 4-byte UTF-8 character 6 or 12 bytes: 3x), with ten entries' attributes.
        return max(int(forq_settings.FORQ_MAX_BODY_BYTES), 3 * self.queues.content_cap() + 524_288)

    async def _read_body(self, scope, receive) -> bytes:
        """The body under :func:`forqapp.intake.read_body`'s bounds (``FORQ_BODY_*``), refused as
        SQS words it."""
        limit = self._limit()
        try:
            return await intake.read_body(scope, receive, limit)
        except intake.BodyRefused as exc:
            shape, message = _BODY_REFUSALS[exc.reason]
            raise protocol.SqsError(shape, message.format(limit=limit), exc.status) from None

    async def _lifespan(self, receive, send) -> None:
        await intake.lifespan(receive, send)


def _throttled(retry_after: int) -> Exception:
    return SqsError("RequestThrottled", f"Too many failed authentications from this address: "
                    f"retry in {retry_after} s", 403)


class _Gone(Exception):
    """The client went away: nobody to answer."""


def sqs_application() -> SQSApplication:
    """Factory for ASGI servers: ``granian --interface asgi --factory forqapp.sqs.asgi:sqs_application``."""
    return SQSApplication()
