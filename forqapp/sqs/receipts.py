"""Receipt handles: opaque to the client, new on every delivery, naming the queue, the message
and the delivery (forqapp's receipt number), with a MAC so that a handle altered or made up is
told apart (``ReceiptHandleIsInvalid``) from a stale one (a settle that finds nothing)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import NamedTuple

from .. import validation
from ..conf import forq_settings
from ..errors import ForqError
from .protocol import SqsError, missing

_TAG = 12  # bytes of HMAC-SHA256 kept


class Handle(NamedTuple):
    queue: str
    message_id: str
    receipt: int


def _key() -> bytes:
    return hashlib.sha256(b"forqapp sqs receipt handle\x00" + forq_settings.FORQ_AUTH_SECRET.encode()).digest()


def make(queue: str, message_id: str, receipt: int) -> str:
    raw = f"{queue}\x00{message_id}\x00{receipt}".encode()
    tag = hmac.new(_key(), raw, hashlib.sha256).digest()[:_TAG]
    return base64.urlsafe_b64encode(raw + tag).decode("ascii").rstrip("=")


def parse(handle: object, queue: str) -> Handle:
    """The delivery ``handle`` names on ``queue``; ``ReceiptHandleIsInvalid`` when it was not made
    here for that queue, ``MissingParameter`` when there is none."""
    if handle is None:
        raise missing("ReceiptHandle")
    bad = SqsError("ReceiptHandleIsInvalid", f"The input receipt handle \"{str(handle)[:200]}\" is not a valid "
                   "receipt handle.", 404)  # (SQS's status for it: its API reference and the SDKs' models)
    if not isinstance(handle, str) or not 0 < len(handle) <= 1024:
        raise bad
    try:
        data = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4))
    except (binascii.Error, ValueError):
        raise bad from None
    raw, tag = data[:-_TAG], data[-_TAG:]
    if len(data) <= _TAG or not hmac.compare_digest(tag, hmac.new(_key(), raw, hashlib.sha256).digest()[:_TAG]):
        raise bad
    try:
        name, message_id, receipt = raw.decode().split("\x00")
        parsed = Handle(name, validation.message_id(message_id), int(receipt))
    except (ValueError, ForqError):
        raise bad from None
    if parsed.queue != queue:
        raise bad
    return parsed
