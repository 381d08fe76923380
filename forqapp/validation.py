"""Input rules of Forq's API, shared by the HTTP API and the Python API. Each raises ForqError."""

from __future__ import annotations

import re
import uuid

from . import errors
from .conf import forq_settings
from .errors import ForqError
from .vocab import QUEUE_NAME, is_dlq


def queue_name(queue: object, *, produce: bool = False) -> str:
    if not isinstance(queue, str) or not QUEUE_NAME.fullmatch(queue):
        raise ForqError(errors.QUEUE_INVALID_NAME, f"invalid queue name {queue!r}")
    if produce and is_dlq(queue):
        raise ForqError(errors.PRODUCE_TO_DLQ, f"cannot produce to dead-letter queue {queue!r}")
    return queue


def dlq_name(queue: object) -> str:
    queue = queue_name(queue)
    if not is_dlq(queue):
        raise ForqError(errors.DLQ_ONLY_OPERATION, f"{queue!r} is not a dead-letter queue")
    return queue


def content(value: object, limit: int | None = None) -> str:
    """``value`` if it is storable message content of at most ``limit`` bytes in UTF-8 (default:
    ``FORQ_MAX_CONTENT_BYTES``; bulk callers read the setting once and pass it). The empty string
    is content like any other: Forq stores it."""
    if not isinstance(value, str):
        raise ForqError(errors.BODY_INVALID, "content must be a string")
    if limit is None:
        limit = forq_settings.FORQ_MAX_CONTENT_BYTES
    if value.isascii():  # one byte a character: no encoding needed to measure it
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate ("\ud800" in JSON): not storable text
            raise ForqError(errors.BODY_INVALID, "content is not valid Unicode text") from None
    if size > limit:
        raise ForqError(errors.CONTENT_EXCEEDS_LIMIT, f"content is over {limit} bytes")
    return value


def process_after(value: object, now: int) -> int:
    """Unix ms when the message becomes due; ``None`` or ``0`` means now (Forq treats 0, Go's zero
    value, as absent)."""
    if value is None or (type(value) is int and value == 0):  # not False, which is no integer here
        return now
    if isinstance(value, bool) or not isinstance(value, int):
        raise ForqError(errors.BODY_INVALID, "processAfter must be an integer (Unix ms)")
    if value < now - forq_settings.FORQ_PROCESS_AFTER_PAST_TOLERANCE_MS:
        raise ForqError(errors.PROCESS_AFTER_IN_PAST, "processAfter is in the past")
    if value > now + forq_settings.FORQ_PROCESS_AFTER_MAX_MS:
        raise ForqError(errors.PROCESS_AFTER_TOO_FAR, "processAfter is more than 366 days ahead")
    return value


def message_id(value: object) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise ForqError(errors.MESSAGE_ID_INVALID, f"invalid message id {value!r}") from None


_RECEIPT = re.compile(r"-?[0-9]{1,19}")  # ASCII digits only (no "--5", no Unicode digits)
_INT64 = range(-(2**63), 2**63)  # what a receipt is stored as (SQLite INTEGER, PostgreSQL bigint)


def receipt(value: object) -> int:
    """A delivery's receipt (``X-Forq-Receipt``, or ``receipt`` in a bulk body) as an integer. A
    value out of the 64-bit range is refused here, as Go's ParseInt does in Forq: the database
    would otherwise fail on it (SQLite: "Python int too large to convert")."""
    if value is None or value == "":
        raise ForqError(errors.RECEIPT_MISSING, "X-Forq-Receipt header is missing")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ForqError(errors.RECEIPT_INVALID, "X-Forq-Receipt is not an integer")
    if isinstance(value, str):
        text = value.strip()
        if not _RECEIPT.fullmatch(text):
            raise ForqError(errors.RECEIPT_INVALID, "X-Forq-Receipt is not an integer")
        value = int(text)
    if value not in _INT64:
        raise ForqError(errors.RECEIPT_INVALID, "X-Forq-Receipt is out of range")
    return value
