"""Input rules of Forq's API, shared by the HTTP API and the Python API. Each raises ForqError."""

from __future__ import annotations

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
    ``FORQ_MAX_CONTENT_BYTES``; bulk callers read the setting once and pass it)."""
    if not isinstance(value, str) or value == "":
        raise ForqError(errors.BODY_INVALID, "content must be a non-empty string")
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
    """Unix ms when the message becomes due; ``None`` means now."""
    if value is None:
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


def receipt(value: object) -> int:
    if value is None or value == "":
        raise ForqError(errors.RECEIPT_MISSING, "X-Forq-Receipt header is missing")
    text = str(value).strip()
    if not text.isascii() or not text.lstrip("-").isdigit() or len(text) > 19:
        raise ForqError(errors.RECEIPT_INVALID, "X-Forq-Receipt is not an integer")
    return int(text)
