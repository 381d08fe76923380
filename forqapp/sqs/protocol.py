"""The SQS JSON 1.0 protocol's errors and answers.

An error is answered with SQS's status (400; 403 for authentication), a body
``{"__type": "com.amazonaws.sqs#<Shape>", "message": …}`` (botocore takes the exception class from
the shape) and the ``x-amzn-query-error: <Code>;Sender`` header (botocore's ``Error.Code``: the
query protocol's code, e.g. ``AWS.SimpleQueueService.NonExistentQueue``).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

CONTENT_TYPE = "application/x-amz-json-1.0"

#: Shapes whose query-protocol code differs from the shape's name.
QUERY_CODES = {
    "QueueDoesNotExist": "AWS.SimpleQueueService.NonExistentQueue",
    "QueueNameExists": "QueueAlreadyExists",
    "MessageNotInflight": "AWS.SimpleQueueService.MessageNotInflight",
    "EmptyBatchRequest": "AWS.SimpleQueueService.EmptyBatchRequest",
    "TooManyEntriesInBatchRequest": "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
    "BatchEntryIdsNotDistinct": "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
    "InvalidBatchEntryId": "AWS.SimpleQueueService.InvalidBatchEntryId",
    "BatchRequestTooLong": "AWS.SimpleQueueService.BatchRequestTooLong",
    "UnsupportedOperation": "AWS.SimpleQueueService.UnsupportedOperation",
    "PurgeQueueInProgress": "AWS.SimpleQueueService.PurgeQueueInProgress",
}


class SqsError(Exception):
    """A refusal, as SQS words it: ``shape`` (e.g. ``QueueDoesNotExist``), a message, the status."""

    def __init__(self, shape: str, message: str, status: int = 400, *, fault: str = "Sender"):
        super().__init__(message)
        self.shape, self.message, self.status, self.fault = shape, message, status, fault

    @property
    def code(self) -> str:
        return QUERY_CODES.get(self.shape, self.shape)

    def entry(self, entry_id: str) -> dict[str, Any]:
        """The batch ``Failed`` entry this error makes for ``entry_id``."""
        return {"Id": entry_id, "SenderFault": self.fault == "Sender", "Code": self.code, "Message": self.message}


def invalid(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


def missing(name: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {name}.")


def malformed(why: str) -> SqsError:
    """``MalformedQueryString``: the query protocol's parameters (a form or a query string) are no form."""
    return SqsError("MalformedQueryString", f"The request's parameters are not a valid form: {why}")


def given_twice(name: str) -> SqsError:
    return malformed(f"the parameter {name[:100]} is given more than once")


def request_id() -> str:
    return str(uuid.uuid4())


def answer(payload: dict[str, Any]) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    try:
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate the client sent, echoed in a batch's Failed message, has no UTF-8:
        # JSON's \uXXXX escape carries it (not a 500).
        body = json.dumps(payload, separators=(",", ":")).encode("ascii")
    return 200, _headers(body), body


def error(exc: SqsError) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    body = json.dumps({"__type": f"com.amazonaws.sqs#{exc.shape}", "message": exc.message}).encode("utf-8")
    headers = _headers(body)
    headers.append((b"x-amzn-query-error", f"{exc.code};{exc.fault}".encode("latin-1")))
    return exc.status, headers, body


def _headers(body: bytes) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", CONTENT_TYPE.encode()),
        (b"x-amzn-requestid", request_id().encode()),
        (b"content-length", str(len(body)).encode()),
        (b"x-content-type-options", b"nosniff"),
    ]
