"""The queue's words, shared by the stores, services, models, UI and the Spark connector.

Django-free on purpose: :mod:`forqapp.spark` runs on Spark executors without Django settings and
imports this module too. Every status code, failure reason, DLQ name rule and input limit (the
table of limits, below) lives here once.
"""

from __future__ import annotations

import re
from enum import IntEnum, StrEnum
from typing import NamedTuple


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

# --- message groups -------------------------------------------------------------------------

#: A message's group (LonnyMQ's channel, SQS FIFO's ``MessageGroupId``): 1 to 128 characters of
#: these. Messages of one group are claimed in order under the queue's ``group_concurrency`` and
#: ``group_rate``; across groups, fairly. No group (None; stored as ``''``): as any message.
GROUP_MAX = 128
GROUP_NAME_PATTERN = rf"[A-Za-z0-9_.:/=+@-]{{1,{GROUP_MAX}}}"
GROUP_NAME = re.compile(GROUP_NAME_PATTERN)  # use with fullmatch


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
    "priority", "attributes", "dedup_id", "sequence", "first_received_at", "last_error", "group",
)

# --- limits: the one table ------------------------------------------------------------------
#
# Every bound an input is checked against, written once: the typed inputs of
# :mod:`forqapp.validation` read them, and so do the faces (v1, v2, SQS, the tasks backend, the
# admin's forms) and the OpenAPI documents' test (``tests/test_limits.py``), which holds
# ``forqapp/api/openapi*.json`` to them. A bound is a pair (lo, hi), both included. Durations are in
# seconds unless the name says ms.


class Bounds(NamedTuple):
    """An inclusive range: ``lo <= value <= hi``."""

    lo: float
    hi: float

    def __contains__(self, value: object) -> bool:  # a range, not the pair
        return self.lo <= value <= self.hi  # type: ignore[operator]


DAY_S = 86_400
YEAR_S = 366 * DAY_S  # the longest retention, schedule period, backoff delay (in ms) and delay

PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
PRIORITY = Bounds(PRIORITY_MIN, PRIORITY_MAX)
MAX_ATTRIBUTES = 10
ATTRIBUTE_KEY_MAX, ATTRIBUTE_VALUE_MAX = 64, 1024
DEDUP_ID_MAX = 128
VISIBILITY_MAX_S = 12 * 3600  # a receive's lease: 0 s to 12 h
VISIBILITY_S = Bounds(0, VISIBILITY_MAX_S)
DEDUP_WINDOW_MIN_S, DEDUP_WINDOW_MAX_S = 0.001, 12 * 3600  # how long a dedup id is remembered
DEDUP_WINDOW_S = Bounds(DEDUP_WINDOW_MIN_S, DEDUP_WINDOW_MAX_S)
RETENTION_S = Bounds(1, YEAR_S)  # a message's (a send's, a queue's, a DLQ's)
MAX_ATTEMPTS = Bounds(1, 1_000_000)  # or unlimited (0)
BACKOFF_DELAYS = Bounds(1, 100)  # delays in a backoff list
BACKOFF_MS = Bounds(0, YEAR_S * 1000)  # each delay of a backoff list
BACKOFF_BASE_MS = Bounds(1, YEAR_S * 1000)  # an exponential backoff's base_ms and max_ms
MAX_LENGTH = Bounds(1, 10**12)
MAX_IN_FLIGHT = Bounds(1, 1_000_000)
GROUP_CONCURRENCY = Bounds(1, 1_000_000)  # a queue's group_concurrency (messages of one group in flight)
RATE_INTERVAL_S = Bounds(0.001, DAY_S)  # a rate given as the least interval between claims
SCHEDULE_EVERY_S = Bounds(1, YEAR_S)  # a schedule's period

#: The v2 API's: messages in a send batch, deliveries in a settle batch, messages in a receive;
#: a nack's failure reason (characters).
V2_MAX_ENTRIES = 10
V2_ENTRIES = Bounds(1, V2_MAX_ENTRIES)
ERROR_TEXT_MAX = 2_000

#: The bulk endpoints' (the Spark connector's, ``forqapp/api/bulk.py``): items in one request, a
#: claim's ``max`` and ``wait``, a snapshot page's ``limit``.
BULK_MAX_ITEMS = 10_000
BULK_CLAIM = Bounds(1, 10_000)
BULK_WAIT_S = Bounds(0, 30)
BULK_PAGE = Bounds(1, 10_000)

#: The SQS listener's own, narrower than forqapp's where SQS is (AWS's documented limits): they
#: apply to what comes in through it, and its queues' attributes.
SQS_BATCH_MAX = 10  # entries in a batch, messages in a receive
SQS_MAX_MESSAGES = Bounds(1, SQS_BATCH_MAX)
SQS_VISIBILITY_S = Bounds(0, 43_200)  # VisibilityTimeout, and a delivery's lease in all
SQS_DELAY_S = Bounds(0, 900)  # DelaySeconds
SQS_WAIT_S = Bounds(0, 20)  # WaitTimeSeconds, ReceiveMessageWaitTimeSeconds
SQS_RETENTION_S = Bounds(60, 1_209_600)  # MessageRetentionPeriod: 1 minute to 14 days
SQS_MESSAGE_SIZE = Bounds(1_024, 1_048_576)  # MaximumMessageSize (bytes)
SQS_MAX_RECEIVE_COUNT = Bounds(1, 1000)  # a RedrivePolicy's maxReceiveCount
SQS_KMS_REUSE_S = Bounds(60, 86_400)  # KmsDataKeyReusePeriodSeconds

ORDERINGS = ("fifo", "lifo", "due")

#: A message move task (a DLQ's redrive, SQS's StartMessageMoveTask): its rate (messages a second)
#: and how many tasks ListMessageMoveTasks shows.
MOVE_RATE = Bounds(1, 500)
MOVE_LIST = Bounds(1, 10)
#: The database lease whose holder (one process per database: forq_serve's API worker, forq_jobs,
#: forq_worker --with-jobs) runs the jobs, the ``moves`` job among them.
JOBS_LEASE = "forq-jobs"
#: ListDeadLetterSourceQueues' MaxResults.
SQS_SOURCES_MAX = Bounds(1, 1000)


class MoveStatus(StrEnum):
    """A message move task's status (SQS's words): running until its source has no more messages
    to move (completed), it is cancelled, or it cannot go on (failed)."""

    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
