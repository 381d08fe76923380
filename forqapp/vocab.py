"""The queue's words, shared by the stores, services, models, UI and the Spark connector.

Django-free on purpose: :mod:`forqapp.spark` runs on Spark executors without Django settings and
imports this module too. Every status code, failure reason and DLQ name rule lives here once.
"""

from __future__ import annotations

import re
from enum import IntEnum, StrEnum


class Status(IntEnum):
    """``messages.status``: a message is ready (waiting, maybe delayed), processing (claimed by
    a consumer, named by its receipt) or failed (out of attempts, or failed by its consumer;
    the failed job moves it to its DLQ)."""

    READY = 0
    PROCESSING = 1
    FAILED = 2

    @property
    def label(self) -> str:
        return self.name.lower()


STATUS_LABELS: tuple[str, ...] = tuple(s.label for s in Status)  # indexed by the status code


class FailureReason(StrEnum):
    """``messages.failure_reason`` of a message in a DLQ: why it got there."""

    MAX_ATTEMPTS_REACHED = "max_attempts_reached"
    MESSAGE_EXPIRED = "message_expired"
    #: forqapp's own: its consumer failed the message (``FatalError`` / ``fail()``); set by the
    #: fail itself, and kept when the failed job moves the message to its DLQ.
    FATAL_ERROR = "fatal_error"


# --- queue names ----------------------------------------------------------------------------

#: forqapp's queue names: 1 to 80 characters (SQS's limit), and the dead-letter queue of any of
#: them (``<name>-dlq``: up to 84). Not ``.`` nor ``..``: in a URL those are dot segments, which
#: browsers and most HTTP clients resolve away (``/queues/../`` is ``/``), so no page could name them.
NOT_DOT_SEGMENT = r"(?!\.\.?$)"
QUEUE_NAME_PATTERN = NOT_DOT_SEGMENT + r"[a-zA-Z0-9._-]{1,80}(?:-dlq)?"
QUEUE_NAME = re.compile(QUEUE_NAME_PATTERN)  # use with fullmatch
#: Forq's v1 contract (SPEC: ``^[a-zA-Z0-9._-]{1,64}$``, DLQs included): the v1 API's four
#: endpoints keep it (:func:`forqapp.validation.v1_queue_name`).
V1_QUEUE_NAME_PATTERN = NOT_DOT_SEGMENT + r"[a-zA-Z0-9._-]{1,64}"
V1_QUEUE_NAME = re.compile(V1_QUEUE_NAME_PATTERN)

DLQ_SUFFIX = "-dlq"


def is_dlq(name: str) -> bool:
    """Whether ``name`` is a dead-letter queue (``emails-dlq``)."""
    return name.endswith(DLQ_SUFFIX)


def dlq_of(name: str) -> str:
    """The dead-letter queue of ``name`` (``emails`` → ``emails-dlq``)."""
    return name + DLQ_SUFFIX


def base_of(name: str) -> str:
    """The regular queue a DLQ belongs to (``emails-dlq`` → ``emails``); a regular name unchanged."""
    return name.removesuffix(DLQ_SUFFIX)


# --- snapshot reads -------------------------------------------------------------------------

# The columns of a snapshot row, in order: the store's SELECT, the API's JSON keys and the Spark
# schema all follow this tuple.
SNAPSHOT_COLUMNS: tuple[str, ...] = (
    "id", "queue", "content", "status", "attempts", "received_at", "process_after", "failure_reason",
    "priority", "attributes", "dedup_id", "sequence", "first_received_at", "last_error",
)

# --- messages and queues --------------------------------------------------------------------

PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
MAX_ATTRIBUTES = 10
ATTRIBUTE_KEY_MAX, ATTRIBUTE_VALUE_MAX = 64, 1024
DEDUP_ID_MAX = 128
VISIBILITY_MAX_S = 12 * 3600  # a receive's lease: 0 s to 12 h

ORDERINGS = ("fifo", "lifo", "due")
