"""Forq's error codes, and the exception that carries one (used by the Python API and the HTTP API)."""

from __future__ import annotations

import threading
import time
from typing import Any

CONTENT_EXCEEDS_LIMIT = "bad_request.body.content.exceeds_limit"
PROCESS_AFTER_IN_PAST = "bad_request.body.processAfter.in_past"
PROCESS_AFTER_TOO_FAR = "bad_request.body.processAfter.too_far"
BODY_INVALID = "bad_request.body.invalid"
QUEUE_INVALID_NAME = "bad_request.queue.invalid_name"
MESSAGE_ID_INVALID = "bad_request.messageId.invalid"
PRODUCE_TO_DLQ = "bad_request.queue.produce_to_dlq"
DLQ_ONLY_OPERATION = "bad_request.dlq_only_operation"
RECEIPT_MISSING = "bad_request.receipt.missing"
RECEIPT_INVALID = "bad_request.receipt.invalid"
UNAUTHORIZED = "unauthorized"
FORBIDDEN = "forbidden.key_scope"  # forqapp's own: a valid scoped key without the grant (403)
TOO_MANY_REQUESTS = "too_many_requests"
NOT_FOUND_MESSAGE = "not_found.message"
# forqapp's own: every answer of the API is JSON, so are these (Forq's router answers them in text).
NOT_FOUND_ROUTE = "not_found.route"  # no such endpoint
METHOD_NOT_ALLOWED = "method_not_allowed"
REQUEST_TIMEOUT = "request_timeout"  # the body arrived too slowly (FORQ_BODY_TIMEOUT_S, ..._MIN_RATE_...)
UNHEALTHY = "forq.unhealthy"
QUEUE_FULL = "queue.full"  # the queue holds its max_length of messages (503)
QUEUE_LIMIT = "queue.limit_reached"  # forqapp's own: FORQ_MAX_QUEUES queues exist; no new one (409)
NOT_FOUND_QUEUE = "not_found.queue"  # forqapp's own: no such queue (v2 API)
NOT_FOUND_SCHEDULE = "not_found.schedule"  # forqapp's own: no such schedule
# The Python API's own (no HTTP API answers them, so they are not in STATUS; raised with their status):
NOT_FOUND_MOVE = "not_found.move"  # no such message move task (or not running, to cancel): 404
MOVE_RUNNING = "move.running"  # the source queue has a running move task already: 409
INTERNAL = "internal"

STATUS = {
    CONTENT_EXCEEDS_LIMIT: 400,
    PROCESS_AFTER_IN_PAST: 400,
    PROCESS_AFTER_TOO_FAR: 400,
    BODY_INVALID: 400,
    QUEUE_INVALID_NAME: 400,
    MESSAGE_ID_INVALID: 400,
    PRODUCE_TO_DLQ: 400,
    DLQ_ONLY_OPERATION: 400,
    RECEIPT_MISSING: 400,
    RECEIPT_INVALID: 400,
    UNAUTHORIZED: 401,
    FORBIDDEN: 403,
    NOT_FOUND_MESSAGE: 404,
    NOT_FOUND_ROUTE: 404,
    METHOD_NOT_ALLOWED: 405,
    REQUEST_TIMEOUT: 408,
    TOO_MANY_REQUESTS: 429,
    INTERNAL: 500,
    UNHEALTHY: 503,
    QUEUE_FULL: 503,
    QUEUE_LIMIT: 409,
    NOT_FOUND_QUEUE: 404,
    NOT_FOUND_SCHEDULE: 404,
}


class ForqError(Exception):
    """A request forqapp refuses, with Forq's error ``code`` and the HTTP ``status`` it maps to
    (and ``headers`` the answer carries, e.g. ``Retry-After`` on a 429)."""

    def __init__(self, code: str, message: str | None = None, *, status: int | None = None,
                 headers: dict[str, str] | None = None):
        self.code = code
        self.status = status or STATUS.get(code, 400)
        self.headers = headers or {}
        super().__init__(message or code)


class FatalError(Exception):
    """Raised by a consumer to fail a message at once, without retries (it goes to the DLQ)."""


class Defer(Exception):  # noqa: N818 - an instruction to the worker, not an error
    """Raised by a consumer to put its message back on the queue ``delay`` (seconds or timedelta)
    from now, keeping its id and attempts, with ``state`` saved for the next delivery
    (``message.state``; with ``decode="json"``, any JSON value). See :func:`forqapp.defer`."""

    def __init__(self, delay: float = 0, state: object = None):
        super().__init__(f"defer {delay}s")
        self.delay = delay
        self.state = state


# --- the database cannot serve now (a 503, not a 500) ----------------------------------------------

UNAVAILABLE_RETRY_AFTER = "5"  # seconds, in the 503's Retry-After

_UNAVAILABLE = (
    ("disk is full", "the database's disk is full"),
    ("no space left on device", "the database's disk is full"),
    ("database is locked", "the database is busy: a write lock was held past the busy timeout"),
    ("disk i/o error", "the database's disk failed a read or write"),
    ("could not connect", "the database server cannot be reached"),
    ("connection refused", "the database server cannot be reached"),
    ("server closed the connection", "the database server closed the connection"),
    ("terminating connection", "the database server closed the connection"),
    ("connection is lost", "the database server closed the connection"),
    ("connection is closed", "the database server closed the connection"),
    ("connection already closed", "the database server closed the connection"),
    ("consuming input failed", "the database server closed the connection"),
    ("could not receive data from server", "the database server closed the connection"),
    ("could not send data to server", "the database server closed the connection"),
    ("no connection to the server", "the database server closed the connection"),
    ("ssl syscall error", "the database server closed the connection"),
    ("too many clients", "the database server has no connection slot free"),
    ("remaining connection slots are reserved", "the database server has no connection slot free"),
    ("not currently accepting connections", "the database server accepts no connections now"),
    ("the database system is starting up", "the database server is starting"),
    ("the database system is shutting down", "the database server is shutting down"),
    # PostgreSQL recovering from a crash: "not yet accepting connections" until it is consistent
    ("the database system is not yet accepting connections", "the database server is recovering"),
    ("the database system is not accepting connections", "the database server accepts no connections now"),
    ("the database system is in recovery mode", "the database server is recovering"),
    ("could not translate host name", "the database server cannot be reached"),
    ("no route to host", "the database server cannot be reached"),
    ("network is unreachable", "the database server cannot be reached"),
    ("connection timed out", "the database server cannot be reached"),
    ("timeout expired", "the database server cannot be reached"),
)
# PostgreSQL's SQLSTATEs of the same states, for errors that carry one (psycopg's ``sqlstate``):
# class 08 (connection exceptions) and these.
_UNAVAILABLE_SQLSTATES = {
    "53100": "the database's disk is full",
    "53300": "the database server has no connection slot free",
    "57P01": "the database server closed the connection",  # admin_shutdown (a fast shutdown, a restart)
    "57P02": "the database server closed the connection",  # crash_shutdown (another backend crashed)
    "57P03": "the database server accepts no connections now",  # cannot_connect_now (starting, recovering)
    "57P05": "the database server closed the connection",  # idle_session_timeout
}
_said: dict[str, float] = {}
_said_lock = threading.Lock()
_clock = time.monotonic


def unavailable(exc: BaseException) -> str | None:
    """Why the database cannot serve a request now — a full disk, a write lock held past the busy
    timeout, a server out of reach — so the answer is 503 ``forq.unhealthy`` with Retry-After (the
    client may retry; nothing was written) rather than a 500; None for any other failure. Only an
    ``OperationalError`` or ``InterfaceError`` (sqlite3's, psycopg's or Django's) qualifies."""
    if not any(c.__name__ in ("OperationalError", "InterfaceError") for c in type(exc).__mro__):
        return None
    for cause in (exc, exc.__cause__):  # Django's wrapper keeps the driver's error as its cause
        state = getattr(cause, "sqlstate", None)
        if isinstance(state, str) and (state.startswith("08") or state in _UNAVAILABLE_SQLSTATES):
            return _UNAVAILABLE_SQLSTATES.get(state, "the database server cannot be reached")
    text = str(exc).lower()
    return next((reason for needle, reason in _UNAVAILABLE if needle in text), None)


def say_unavailable(logger: Any, where: str, reason: str, outcome: str = "answered 503") -> None:
    """One warning line (no traceback) per reason and second: a full disk refuses every write, and
    a traceback each would fill the log (and the disk) in seconds."""
    now = _clock()
    with _said_lock:  # threads of one process (the worker's, the jobs', the notifier's) share it
        if now - _said.get(reason, -1.0) < 1.0:
            return
        _said[reason] = now
    logger.warning("%s: %s; %s (this line at most once a second)", where, reason, outcome)


def log_failure(logger: Any, where: str, exc: BaseException, outcome: str, *, traceback: bool = True) -> None:
    """How every background component (the jobs, the schedules, the worker and its task settling,
    the notifier) says that ``where`` failed with ``exc`` and what happens next (``outcome``): a
    database that cannot serve now (:func:`unavailable`: a full disk, a server restarting or out of
    reach) in one line a second, never a traceback each try; anything else (a bug) with its
    traceback (without one when ``traceback`` is False)."""
    reason = unavailable(exc)
    if reason is not None:
        say_unavailable(logger, where, reason, outcome)
    elif traceback:
        logger.error("%s failed; %s", where, outcome, exc_info=exc)
    else:
        logger.warning("%s failed: %s; %s", where, exc, outcome)
