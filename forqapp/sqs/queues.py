"""SQS queues on forqapp's queues: names, URLs and ARNs, existence, and the attributes.

Attributes with a policy field live there, so that every face sees them: ``VisibilityTimeout`` →
``visibility_timeout``, ``MessageRetentionPeriod`` → ``retention``, ``RedrivePolicy``'s
``maxReceiveCount`` → ``max_attempts`` (no redrive policy: unlimited). The others
(``DelaySeconds``, ``ReceiveMessageWaitTimeSeconds``, ``MaximumMessageSize``, the redrive policy
as given, a FIFO queue's ``ContentBasedDeduplication``, ``DeduplicationScope`` and
``FifoThroughputLimit``, ``RedriveAllowPolicy``) are kept in the queue row's ``sqs_attributes``. A
``RedrivePolicy``'s ``deadLetterTargetArn`` may name any existing queue of the same type that allows
it (its ``RedriveAllowPolicy``): it is the queue's ``dead_letter_queue`` (forqapp's ``<name>-dlq`` by
default: a queue for SQS as :func:`_lookup` says).

A FIFO queue is one whose name ends with ``.fifo`` (SQS's rule: the name and ``FifoQueue`` go
together); CreateQueue gives it ``group_concurrency`` 1 (each ``MessageGroupId`` a message group,
delivered in order one message at a time). Its dead-letter queue, forqapp's ``<name>.fifo-dlq``,
is ``<name>-dlq.fifo`` to SQS clients (:func:`to_sqs`, :func:`to_forq`), as SQS wants a FIFO
queue's name to end.

Every function here is synchronous (it runs on a database thread: :func:`forqapp.services.run_async`).
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Count, Q

from .. import errors, services, validation, vocab
from ..conf import forq_settings
from ..errors import ForqError
from ..models import Message, Queue, Status
from ..services import queues as queue_services
from ..services.policies import UNLIMITED
from ..vocab import DLQ_SUFFIX, base_of, is_dlq
from . import redrive
from .protocol import SqsError, invalid

NAME_MAX = 80  # forqapp's queue names (vocab.QUEUE_NAME: a DLQ's has its -dlq more)
ACCOUNT = "000000000000"  # forqapp has no accounts: one id in URLs and ARNs (FORQ_SQS_ACCOUNT_ID's default)
NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")  # SQS's queue names (forqapp's too, without the dot)
FIFO_SUFFIX = ".fifo"
FIFO_NAME = re.compile(r"[A-Za-z0-9_-]{1,75}\.fifo")  # a FIFO queue's: 80 characters with ``.fifo``
#: A name a queue URL may carry: an SQS name, or the dead-letter queue ``<name>-dlq`` of one (up to
#: 84 characters: forqapp names it, a client reaches it by the URL or the ARN it was given). A FIFO
#: queue's dead-letter queue keeps the suffix last, as SQS wants of a FIFO queue: ``<name>-dlq.fifo``.
URL_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}(?:-dlq)?|[A-Za-z0-9_-]{1,75}(?:-dlq)?\.fifo")
_FIFO_DLQ = DLQ_SUFFIX + FIFO_SUFFIX  # "-dlq.fifo": SQS's name of forqapp's "<name>.fifo-dlq"
MAX_MESSAGE_SIZE = int(vocab.SQS_MESSAGE_SIZE.hi)  # SQS's limit (1 MiB)
CACHE_S = 1.0  # how long a process trusts what it read about a queue (as forqapp.services.policies does)

DEFAULTS = {  # what CreateQueue gives a new queue (SQS's defaults)
    "VisibilityTimeout": 30, "MessageRetentionPeriod": 345_600, "DelaySeconds": 0,
    "ReceiveMessageWaitTimeSeconds": 0,
}
RANGES = {  # SQS's limits (the table in forqapp.vocab)
    "VisibilityTimeout": vocab.SQS_VISIBILITY_S, "MessageRetentionPeriod": vocab.SQS_RETENTION_S,
    "DelaySeconds": vocab.SQS_DELAY_S, "ReceiveMessageWaitTimeSeconds": vocab.SQS_WAIT_S,
    "MaximumMessageSize": vocab.SQS_MESSAGE_SIZE, "KmsDataKeyReusePeriodSeconds": vocab.SQS_KMS_REUSE_S,
}
#: Kept and answered, meaning nothing to forqapp: the access policy (forqapp's scoped keys decide
#: who may do what) and server-side encryption (forqapp encrypts nothing beyond what its database does).
KEPT = ("Policy", "KmsMasterKeyId", "SqsManagedSseEnabled")
SETTABLE = (*RANGES, "RedrivePolicy", "RedriveAllowPolicy", *KEPT)
READ_ONLY = ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
             "ApproximateNumberOfMessagesDelayed", "CreatedTimestamp", "LastModifiedTimestamp", "QueueArn")
FIFO_ATTRIBUTES = ("FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")
UNSUPPORTED: tuple[str, ...] = ()
KMS_REUSE_DEFAULT = 300  # KmsDataKeyReusePeriodSeconds, SQS's default (shown with a KmsMasterKeyId)
ALL = (*SETTABLE, *READ_ONLY, *FIFO_ATTRIBUTES)


# --- names, URLs, ARNs ---------------------------------------------------------------------------


def is_fifo(name: str) -> bool:
    """Whether queue ``name`` (forqapp's name, or SQS's) is a FIFO queue: its name says so, as on
    SQS (``.fifo``, and ``FifoQueue`` given with it); its dead-letter queue is one too."""
    return base_of(name).endswith(FIFO_SUFFIX)


_REGION = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
REGION_MAX = 32


def region_prefix(region: str | None) -> str:
    """What forqapp's names of ``region``'s queues start with: ``<region>.`` with
    ``FORQ_SQS_SEPARATE_REGIONS`` (an SQS name has no dot but ``.fifo``'s, so the prefix reads back
    one way only), else nothing (None: no region, the prefix of a name already mapped)."""
    if region is None or not forq_settings.FORQ_SQS_SEPARATE_REGIONS:
        return ""
    if len(region) > REGION_MAX or not _REGION.fullmatch(region):
        raise invalid(f"{region[:REGION_MAX + 1]!r} is no region name: forqapp keeps each region's queues apart "
                      "(FORQ_SQS_SEPARATE_REGIONS), by the region the request is signed for")
    return region + "."


def prefix_of(name: str) -> str:
    """The region prefix forqapp's queue ``name`` carries (see :func:`region_prefix`): what is
    before its first dot, with it, when regions are kept apart and that is no ``.fifo``."""
    if not forq_settings.FORQ_SQS_SEPARATE_REGIONS:
        return ""
    head, dot, _ = base_of(name).removesuffix(FIFO_SUFFIX).partition(".")
    return head + dot if dot and _REGION.fullmatch(head) else ""


def to_forq(sqs_name: str, region: str | None = None) -> str:
    """forqapp's name of the queue SQS calls ``sqs_name`` in ``region``: the same (after
    :func:`region_prefix`), except a FIFO queue's dead-letter queue, ``<name>-dlq.fifo`` on SQS
    and ``<name>.fifo-dlq`` in forqapp."""
    prefix = region_prefix(region)
    if sqs_name.endswith(_FIFO_DLQ):
        return prefix + sqs_name[:-len(_FIFO_DLQ)] + FIFO_SUFFIX + DLQ_SUFFIX
    return prefix + sqs_name


def to_sqs(name: str) -> str:
    """SQS's name of forqapp's queue ``name`` (:func:`to_forq`'s inverse, its region prefix off)."""
    name = name[len(prefix_of(name)):]
    if name.endswith(FIFO_SUFFIX + DLQ_SUFFIX):
        return name[:-len(FIFO_SUFFIX + DLQ_SUFFIX)] + _FIFO_DLQ
    return name


def in_region(name: str, region: str) -> bool:
    """Whether forqapp's queue ``name`` is one of ``region``'s SQS queues (every queue is, when
    regions are not kept apart)."""
    prefix = region_prefix(region)
    return not prefix or (name.startswith(prefix) and prefix_of(name) == prefix)


_FIFO_NAME_RULE = ("The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, "
                   "must end with .fifo suffix and be 1 to 80 in length")


def check_name(name: object, fifo: bool | None = None, region: str | None = None) -> str:
    """An SQS queue name (``[A-Za-z0-9_-]``, 1 to 80 characters, as forqapp's own names; a FIFO
    queue's ends with ``.fifo``) → forqapp's name of the queue in ``region`` (:func:`to_forq`;
    with its region prefix, at most 80 characters). ``fifo``: what CreateQueue's ``FifoQueue`` says
    (None: not CreateQueue); the name and it agree, or ``InvalidParameterValue``, as SQS."""
    sqs_name = _check_name(name, fifo)
    prefix = region_prefix(region)
    if prefix and len(prefix) + len(base_of(sqs_name)) > NAME_MAX:
        raise invalid(f"Can only include alphanumeric characters, hyphens, or underscores. 1 to "
                      f"{NAME_MAX - len(prefix)} in length in region {region} (forqapp keeps each region's "
                      f"queues apart: FORQ_SQS_SEPARATE_REGIONS; its name of the queue, {prefix}<name>, takes "
                      f"{NAME_MAX} characters at most)")
    return prefix + sqs_name


def _check_name(name: object, fifo: bool | None = None) -> str:
    """:func:`check_name` without the region."""
    if not isinstance(name, str):
        raise SqsError("MissingParameter", "The request must contain the parameter QueueName.")
    if not name:  # given, but empty (a JSON "", a query protocol's QueueName=)
        raise invalid("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
    if name.endswith(FIFO_SUFFIX) or fifo:
        if not FIFO_NAME.fullmatch(name) or fifo is False:
            raise invalid(_FIFO_NAME_RULE)
        stem = name[:-len(FIFO_SUFFIX)]
        if stem == DLQ_SUFFIX or stem.endswith(DLQ_SUFFIX + DLQ_SUFFIX):
            raise invalid(f"{name!r}: a dead-letter queue has no dead-letter queue of its own")
        return to_forq(name)
    if not NAME.fullmatch(name):
        raise invalid("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
    if name == DLQ_SUFFIX:
        raise invalid(f"{name!r} cannot be a queue here: forqapp names the dead-letter queue of a queue "
                      f"<name>{DLQ_SUFFIX}, and {name!r} would be that of a queue with an empty name")
    if name.endswith(DLQ_SUFFIX + DLQ_SUFFIX):
        raise invalid(f"{name!r}: a dead-letter queue has no dead-letter queue of its own")
    return name


def account() -> str:
    """The account id of every queue URL and ARN (``FORQ_SQS_ACCOUNT_ID``): forqapp has no
    accounts; every region names the same queues unless ``FORQ_SQS_SEPARATE_REGIONS``."""
    return str(forq_settings.FORQ_SQS_ACCOUNT_ID)


@dataclass(frozen=True)
class Origin:
    """Where the client reached this listener (URLs are built from it) and its signing region."""

    scheme: str
    host: str
    region: str

    def __post_init__(self) -> None:
        region_prefix(self.region)  # (with FORQ_SQS_SEPARATE_REGIONS, a region that can name queues, or refused)

    def url(self, name: str) -> str:
        """The URL of forqapp's queue ``name`` (by its SQS name; with ``FORQ_SQS_SEPARATE_REGIONS``,
        one of this region's queues)."""
        return f"{self.scheme}://{self.host}/{account()}/{to_sqs(name)}"

    def arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self.region}:{account()}:{to_sqs(name)}"


def name_from_url(url: object, region: str | None = None) -> str:
    """forqapp's name of the queue a ``QueueUrl`` names in ``region`` (the one the request is signed
    for: see :func:`region_prefix`): ``…/{account}/{name}`` (a trailing slash is tolerated), or a
    bare name. Another account's URL names no queue here."""
    if not isinstance(url, str) or not url:
        raise SqsError("MissingParameter", "The request must contain the parameter QueueUrl.")
    path = url.split("://", 1)[1].partition("/")[2] if "://" in url else url
    parts = [p for p in path.split("?")[0].split("/") if p]
    if len(parts) == 2 and parts[0] == account():
        name = parts[1]
    elif len(parts) == 1 and "://" not in url:
        name = parts[0]
    else:
        raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
    if not URL_NAME.fullmatch(name):
        raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
    forq_name = to_forq(name, region)
    if not vocab.QUEUE_NAME.fullmatch(forq_name):  # (over forqapp's 80 characters with its region)
        raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
    return forq_name


# --- what is known of a queue ---------------------------------------------------------------------


@dataclass
class Known:
    """What the SQS face knows of a queue and its dead-letter queue: whether each exists, and the
    queue's SQS attributes (``meta``; the dead-letter queue's under ``meta["dlq"]``).
    ``placeholder``: the row only holds a dead-letter queue created before its queue (see
    :func:`is_placeholder`)."""

    exists: bool
    dlq_exists: bool
    meta: dict[str, Any] = field(default_factory=dict)
    placeholder: bool = False


_cache: dict[str, tuple[float, Known]] = {}
_lock = threading.Lock()


def forget(name: str | None = None) -> None:
    with _lock:
        if name is None:
            _cache.clear()
        else:
            _cache.pop(base_of(name), None)


#: ``meta[HIDDEN]`` marks the row of a queue ``<name>`` that SQS made only to hold ``<name>-dlq``
#: (CreateQueue of a DLQ before its queue): ``{"last_sequence", "updated_at"}``, the row's as SQS
#: last wrote it. Another face's write changes one of them (a policy write ``updated_at``, a send
#: on SQLite ``last_sequence``; on PostgreSQL a send leaves the row alone, but its messages show),
#: and the row is a queue from then on: SQS then shows it, and never deletes it with its DLQ.
HIDDEN = "hidden"
_ROW = ("sqs_attributes", "last_sequence", "updated_at")


def _row(base: str, *, lock: bool = False) -> tuple[dict[str, Any], int, int] | None:
    rows = Queue.objects.using(services.alias()).filter(name=base)
    if lock:
        rows = rows.select_for_update()
    row = rows.values_list(*_ROW).first()
    return (row[0] or {}, row[1], row[2]) if row else None


def _row_meta(base: str) -> tuple[bool, dict[str, Any]]:
    row = _row(base)
    return row is not None, row[0] if row else {}


def _mark(last_sequence: int, updated_at: int) -> dict[str, int]:
    return {"last_sequence": last_sequence, "updated_at": updated_at}


def is_placeholder(meta: dict[str, Any], last_sequence: int, updated_at: int) -> bool:
    """Whether a row (its ``sqs_attributes``, ``last_sequence``, ``updated_at``) is still only SQS's
    placeholder for a DLQ: no other face wrote to it since (messages aside: see :func:`_lookup`)."""
    return meta.get(HIDDEN) == _mark(last_sequence, updated_at)


def _counts(base: str) -> dict[str, int]:
    try:
        return services.queue_info(base).counts
    except ForqError:
        return {}


def _regular_messages(base: str) -> bool:
    return any(n for state, n in _counts(base).items() if state != "dlq")


def _dead_letters(base: str) -> bool:
    """Whether ``<base>-dlq`` holds messages (one indexed look, not a count)."""
    return Message.objects.using(services.alias()).filter(queue=base + DLQ_SUFFIX).exists()


#: ``meta[DLQ_DELETED]`` marks a ``<name>-dlq`` that DeleteQueue deleted while ``<name>`` is a queue:
#: no queue for SQS from then on (as SQS's deleted queues), even where ``<name>``'s redrive policy
#: names it (:func:`redrives_to_own`), until it is made through SQS again (``meta["dlq"]``) or while
#: it holds messages. DeleteQueue of ``<name>`` drops it with the row.
DLQ_DELETED = "dlq_deleted"


def redrives_to_own(max_attempts: int | None, dead_letter_queue: str | None) -> bool:
    """Whether a queue row's policy (its ``max_attempts`` and ``dead_letter_queue`` columns) sends
    its failures to its own ``<name>-dlq``: a finite ``max_attempts`` (NULL: ``FORQ_MAX_ATTEMPTS``,
    always finite; 0: unlimited) and no other ``dead_letter_queue``. GetQueueAttributes then answers
    a ``RedrivePolicy`` naming ``<name>-dlq``, whichever face set it: a queue another face made (its
    defaults), or a ``RedrivePolicy`` of SQS naming it (one stored before ``meta["dlq"]`` was kept
    too)."""
    return dead_letter_queue is None and max_attempts != UNLIMITED


def _lookup(base: str) -> Known:
    """What is known of ``base`` and ``<base>-dlq`` now. ``<base>-dlq`` exists for SQS when it
    was made through SQS (``meta["dlq"]``: CreateQueue, SetQueueAttributes, AddPermission, TagQueue,
    or a ``RedrivePolicy`` of ``base`` naming it), when ``base`` is a queue whose redrive policy
    names it (:func:`redrives_to_own`; not after DeleteQueue of it: :data:`DLQ_DELETED`), or when
    it holds messages (dead letters); any other ``<base>-dlq`` (an SQS queue without a
    ``RedrivePolicy`` naming it) is no queue (SQS's NonExistentQueue), though forqapp fills it
    when ``base``'s messages expire there."""
    row = Queue.objects.using(services.alias()).filter(name=base).values_list(
        *_ROW, "max_attempts", "dead_letter_queue").first()
    if row is not None:
        meta, last_sequence, updated_at, max_attempts, target = row[0] or {}, row[1], row[2], row[3], row[4]
        real = not is_placeholder(meta, last_sequence, updated_at) or _regular_messages(base)
        dlq = "dlq" in meta or (real and DLQ_DELETED not in meta and redrives_to_own(max_attempts, target)) \
            or _dead_letters(base)
        if real:
            return Known(True, dlq, {k: v for k, v in meta.items() if k != HIDDEN})
        return Known(False, dlq, meta, placeholder=True)  # a DLQ without its queue
    counts = _counts(base)
    regular = any(n for state, n in counts.items() if state != "dlq")
    # (a queue known by its messages alone has the default policy: its failures go to <base>-dlq)
    return Known(regular, regular or bool(counts.get("dlq")), {})


def known(name: str, *, fresh: bool = False) -> Known:
    """What is known of ``name``'s queue: read now with ``fresh`` (the queue actions), else cached
    :data:`CACHE_S` per process (the message actions' hot path: as on SQS, a queue deleted by
    another process may take a moment to disappear for them). A queue exists when it has a row
    (not a placeholder) or messages; ``<name>-dlq`` when made through SQS or holding messages
    (:func:`_lookup`)."""
    base = base_of(name)
    now = time.monotonic()
    cached = None if fresh else _cache.get(base)
    if cached is not None and now - cached[0] < CACHE_S:
        return cached[1]
    info = _lookup(base)
    with _lock:
        _cache[base] = (now, info)
    return info


def existing(name: str, *, fresh: bool = False) -> Known:
    info = known(name, fresh=fresh)
    if not (info.dlq_exists if is_dlq(name) else info.exists):
        raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
    return info


def save_meta(base: str, meta: dict[str, Any]) -> None:
    queue_services.set_sqs_attributes(base, meta or None)
    forget(base)


# --- attributes -----------------------------------------------------------------------------------


def content_cap() -> int:
    """The largest message the SQS listener takes (``FORQ_SQS_MAX_MESSAGE_BYTES``; 1 MiB, SQS's,
    by default): body and attributes, whatever the other faces' ``FORQ_MAX_CONTENT_BYTES``."""
    return int(forq_settings.FORQ_SQS_MAX_MESSAGE_BYTES)


def own(meta: dict[str, Any], dlq: bool = False) -> dict[str, Any]:
    """A queue's own SQS attributes in ``meta`` (its queue's row): a DLQ's are ``meta["dlq"]``."""
    return (meta.get("dlq") or {}) if dlq else meta


def max_message_size(meta: dict[str, Any], dlq: bool = False) -> int:
    return min(int(own(meta, dlq).get("MaximumMessageSize", MAX_MESSAGE_SIZE)), content_cap())


def _integer(name: str, value: object) -> int:
    lo, hi = RANGES[name]
    if not isinstance(value, str) or not re.fullmatch(r"[0-9]{1,10}", value) or int(value) not in RANGES[name]:
        raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}: must be an integer "
                       f"from {lo} to {hi}")
    number = int(value)
    if name == "MaximumMessageSize" and number > content_cap():
        raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter MaximumMessageSize: this server "
                       f"takes messages of at most {content_cap()} bytes (FORQ_SQS_MAX_MESSAGE_BYTES)")
    return number


def _redrive(queue: str, value: object) -> dict[str, Any] | None:
    if value == "" or value is None:
        return None
    try:
        policy = validation.json_loads(value) if isinstance(value, str) else None
    except (ValueError, RecursionError):  # RecursionError: nested ~1,000 deep
        policy = None
    if not isinstance(policy, dict):
        raise SqsError("InvalidAttributeValue", "Invalid value for the parameter RedrivePolicy: not a JSON object")
    unknown = set(policy) - {"deadLetterTargetArn", "maxReceiveCount"}
    if unknown:
        raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter RedrivePolicy: unknown "
                       f"{', '.join(sorted(unknown))}")
    count = policy.get("maxReceiveCount")
    if isinstance(count, str) and re.fullmatch(r"[0-9]{1,4}", count):
        count = int(count)
    if not validation.is_integer(count) or count not in vocab.SQS_MAX_RECEIVE_COUNT:
        lo, hi = vocab.SQS_MAX_RECEIVE_COUNT
        raise SqsError("InvalidAttributeValue", "Invalid value for the parameter RedrivePolicy: maxReceiveCount "
                       f"must be an integer from {lo} to {hi}")
    target = policy.get("deadLetterTargetArn")
    parts = target.split(":") if isinstance(target, str) else []
    if len(parts) != 6 or parts[:3] != ["arn", "aws", "sqs"]:
        raise SqsError("InvalidAttributeValue", "Invalid value for the parameter RedrivePolicy: "
                       "deadLetterTargetArn must be a queue's ARN")
    if parts[4] != account():  # (another account's queue: none here, and SQS wants the same owner)
        raise invalid(f"Value {value} for parameter RedrivePolicy is invalid. Reason: Dead-letter target owner "
                      "should be same as the source.")
    if parts[5].endswith(FIFO_SUFFIX) != is_fifo(queue):
        # AWS's words, its two periods included (clients and tools match them).
        raise invalid(f"Value {value} for parameter RedrivePolicy is invalid. Reason: Dead-letter queue must be "
                      "same type of queue as the source..")
    dlq = to_forq(parts[5], parts[3])  # (in the ARN's region: see region_prefix)
    if dlq == queue or not URL_NAME.fullmatch(parts[5]):
        raise invalid(f"Value {value} for parameter RedrivePolicy is invalid. Reason: "
                      + ("A queue cannot be its own dead-letter queue." if dlq == queue
                         else "Dead letter target does not exist."))
    if dlq != queue + DLQ_SUFFIX:  # (forqapp's own <name>-dlq exists with its queue)
        there = known(dlq, fresh=True)
        if not (there.dlq_exists if is_dlq(dlq) else there.exists):
            raise invalid(f"Value {value} for parameter RedrivePolicy is invalid. Reason: Dead letter target does "
                          "not exist.")
        allow = own(there.meta, is_dlq(dlq)).get("RedriveAllowPolicy")
    else:
        allow = own(known(queue, fresh=True).meta, True).get("RedriveAllowPolicy")
    if not redrive.allows(allow, to_sqs(queue), account()):
        raise invalid(f"Value {value} for parameter RedrivePolicy is invalid. Reason: The dead-letter queue's "
                      f"RedriveAllowPolicy does not allow {to_sqs(queue)!r} as a source queue.")
    return {"deadLetterTargetArn": target, "maxReceiveCount": count, "queue": dlq}


#: A FIFO queue's own attributes, their values, and a new FIFO queue's (SQS's defaults).
FIFO_VALUES = {
    "ContentBasedDeduplication": ("true", "false"),
    "DeduplicationScope": ("queue", "messageGroup"),
    "FifoThroughputLimit": ("perQueue", "perMessageGroupId"),
}
FIFO_DEFAULTS = {"ContentBasedDeduplication": "false", "DeduplicationScope": "queue",
                 "FifoThroughputLimit": "perQueue"}


def _fifo_value(name: str, value: object) -> str:
    allowed = FIFO_VALUES[name]
    if isinstance(value, str):
        for choice in allowed:
            if value == choice or (name == "ContentBasedDeduplication" and value.lower() == choice):
                return choice
    raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}. Reason: Must be one of "
                   f"{', '.join(allowed)}.")


def parse_attributes(queue: str, attributes: object, have: dict[str, Any] | None = None) -> dict[str, Any]:
    """Checked ``Attributes`` of CreateQueue/SetQueueAttributes for forqapp's queue ``queue``:
    {name: int, a FIFO attribute's value, or the redrive policy (None: removed)}. ``have``: the
    queue's SQS attributes now (its ``meta``; a DLQ's own), for the rules between attributes.
    Unknown or read-only names → ``InvalidAttributeName`` (a FIFO queue's attributes on a standard
    queue too), bad values → ``InvalidAttributeValue``; nothing is stored before all are checked."""
    if attributes is None:
        return {}
    if not isinstance(attributes, dict):
        raise invalid("Attributes must be a map of attribute names to strings")
    fifo = is_fifo(queue)
    out: dict[str, Any] = {}
    for name, value in attributes.items():
        if name == "FifoQueue":
            if value not in ("true", "false"):
                raise SqsError("InvalidAttributeValue", "Invalid value for the parameter FifoQueue. Reason: "
                               "Must be true or false.")
            if (value == "true") != fifo:
                raise SqsError("InvalidAttributeValue", "Invalid value for the parameter FifoQueue. Reason: "
                               "Modifying queue type is not supported.")
            continue  # (the name says it: nothing stored)
        if name in FIFO_VALUES:
            if not fifo:
                raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
            out[name] = _fifo_value(name, value)
            continue
        if name in UNSUPPORTED:
            raise SqsError("InvalidAttributeName", f"Unsupported attribute name: {name}")
        if name not in SETTABLE:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
        if name in KEPT:
            out[name] = _kept(name, value)
        elif name == "RedrivePolicy":
            if is_dlq(queue):
                raise SqsError("InvalidAttributeValue", "A dead-letter queue cannot have a redrive policy here")
            out[name] = _redrive(queue, value)
        elif name == "RedriveAllowPolicy":
            out[name] = redrive.parse_allow_policy(value)
        else:
            out[name] = _integer(name, value)
    if out.get("SqsManagedSseEnabled") == "true" and out.get("KmsMasterKeyId"):
        raise SqsError("InvalidAttributeValue", "You can use one type of server-side encryption (SSE) at one time. "
                       "You can either enable KMS SSE or SQS SSE.")
    if out.get("SqsManagedSseEnabled") == "true":
        out["KmsMasterKeyId"] = None  # one kind of SSE at a time: the other is off
    elif out.get("KmsMasterKeyId"):
        out["SqsManagedSseEnabled"] = None
    if fifo:
        merged = {**FIFO_DEFAULTS, **(have or {}), **out}
        if merged["FifoThroughputLimit"] == "perMessageGroupId" and merged["DeduplicationScope"] != "messageGroup":
            raise SqsError("InvalidAttributeValue", "Invalid value for the parameter FifoThroughputLimit. Reason: "
                           "perMessageGroupId is allowed only when the value for DeduplicationScope is "
                           "messageGroup.")
    return out


def _kept(name: str, value: object) -> str | None:
    """``Policy`` (a JSON object; empty: none), ``KmsMasterKeyId`` (a KMS key's id, alias or ARN,
    not looked up; empty: none) or ``SqsManagedSseEnabled`` (true or false), checked; None: removed."""
    if not isinstance(value, str):
        raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
    if name == "SqsManagedSseEnabled":
        if value.lower() not in ("true", "false"):
            raise SqsError("InvalidAttributeValue", "Invalid value for the parameter SqsManagedSseEnabled. "
                           "Reason: Must be true or false.")
        return value.lower() if value.lower() == "true" else None
    if value == "":
        return None
    if name == "Policy":
        try:  # (JSON as RFC 8259 has it: no NaN, Infinity, nor a number past a double's range)
            policy = validation.json_loads(value)
        except (ValueError, RecursionError):
            policy = None
        if not isinstance(policy, dict) or len(value.encode("utf-8")) > POLICY_MAX:
            raise SqsError("InvalidAttributeValue", "Invalid value for the parameter Policy.")
        return value
    if len(value) > 2048 or any(c.isspace() for c in value):
        raise SqsError("InvalidAttributeValue", "Invalid value for the parameter KmsMasterKeyId.")
    return value


POLICY_MAX = 20_480  # bytes: SQS's limit of a queue's policy


def fifo_attributes(meta: dict[str, Any], dlq: bool = False) -> dict[str, str]:
    """A FIFO queue's FIFO attributes (its own, over SQS's defaults); a DLQ's are its own."""
    own = (meta.get("dlq") or {}) if dlq else meta
    return {name: str(own.get(name, default)) for name, default in FIFO_DEFAULTS.items()}


def apply(name: str, attributes: dict[str, Any], meta: dict[str, Any], *, created: bool = False) -> None:
    """Store checked ``attributes`` on SQS queue ``name`` (created with ``meta`` if new;
    ``created``: by CreateQueue, and a FIFO queue then gets ``group_concurrency`` 1: each message
    group in order, one message in flight at a time). Attributes of a DLQ whose queue is no queue
    (no row, or a placeholder: ``meta`` with ``HIDDEN``, the mark read) keep the row a placeholder
    only if it still is one (no row yet and no messages of the queue, or no other face wrote to it):
    the check, the write and the new mark are one transaction, the row locked. A ``RedrivePolicy``
    naming the queue's own ``<name>-dlq`` makes that DLQ (its target exists, as SQS wants)."""
    base = base_of(name)
    dlq = is_dlq(name)
    meta = json.loads(json.dumps(meta))  # a copy
    own = meta.setdefault("dlq", {}) if dlq else meta
    policy: dict[str, Any] = {}
    if created and not dlq and is_fifo(base):
        policy["group_concurrency"] = 1
    for key, value in attributes.items():
        if key == "VisibilityTimeout" and not dlq:
            policy["visibility_timeout"] = value
        elif key == "MessageRetentionPeriod":
            policy["dlq_retention" if dlq else "retention"] = value
        elif key == "RedrivePolicy":
            policy["max_attempts"] = value["maxReceiveCount"] if value else "unlimited"
            policy["dead_letter_queue"] = value.pop("queue") if value else None
            if policy["dead_letter_queue"] == base + DLQ_SUFFIX:
                meta.setdefault("dlq", {})  # (its target: a queue for SQS from now on)
        if value is None or (key in ("VisibilityTimeout", "MessageRetentionPeriod")
                                                          and not dlq) or key == "MessageRetentionPeriod":
            own.pop(key, None)  # held by the policy (or removed)
        else:
            own[key] = value
    with transaction.atomic(using=services.alias()):
        hidden = meta.pop(HIDDEN, None)
        if dlq:
            row = _row(base, lock=True)
            if row is None:
                hidden = None if _regular_messages(base) else True  # (a queue by its messages alone)
            elif hidden is not None and is_placeholder(*row) and hidden == row[0].get(HIDDEN) \
                    and not _regular_messages(base):
                hidden = True
            else:
                hidden = None  # a queue, or another face made it one meanwhile
        services.configure_queue(base, **policy)  # creates the row when new
        if hidden is not None and dlq:
            row = _row(base)
            assert row is not None
            meta[HIDDEN] = _mark(row[1], row[2])
        save_meta(base, meta)


def send(name: str, items: list[validation.SendEntry]) -> list[services.SendResult]:
    """SendMessage's and SendMessageBatch's send of checked ``items`` to queue ``name``: on SQS a
    dead-letter queue is a queue like any, and takes sends (``to_dlq``). A send to the DLQ of a
    placeholder row (the DLQ created before its queue, or kept after it) leaves the row a placeholder,
    and one to a DLQ without a row (its queue deleted) makes a placeholder: the send moves
    its counter (a DLQ's messages are numbered with its queue's), and the mark follows, checked and
    written in the send's transaction, the row locked (as :func:`apply`)."""
    if not is_dlq(name):
        return services.send_entries(name, items)
    base = base_of(name)
    with transaction.atomic(using=services.alias()):
        row = make_row(name)
        hidden = is_placeholder(*row) and not _regular_messages(base)
        results = services.send_entries(name, items, to_dlq=True)
        if hidden:
            after = _row(base)
            assert after is not None
            save_meta(base, {**after[0], HIDDEN: _mark(after[1], after[2])})
    return results


def make_row(name: str) -> tuple[dict[str, Any], int, int]:
    """The row of queue ``name`` (of its queue, for a DLQ), locked, made if there is none (in the
    caller's transaction): a write to a queue known by its messages alone. A DLQ's queue that is no
    queue (its messages too are gone: deleted, or never made) gets a placeholder row, so that it
    stays unseen by SQS until CreateQueue (or another face) makes it."""
    base = base_of(name)
    row = _row(base, lock=True)
    if row is None:
        services.configure_queue(base)
        row = _row(base, lock=True)
        assert row is not None
        if is_dlq(name) and not _regular_messages(base):
            save_meta(base, {**row[0], HIDDEN: _mark(row[1], row[2])})
            row = _row(base, lock=True)
            assert row is not None
    return row


def delete_queue(base: str) -> None:
    """DeleteQueue of queue ``base`` (not a DLQ): its policy, attributes, tags and messages. A
    ``<base>-dlq`` made through SQS (``meta["dlq"]``) is a queue of its own and stays, with its
    attributes, retention and tags, in a placeholder row (as CreateQueue of a DLQ before its queue
    makes one): ``base`` is no queue until CreateQueue (or another face) makes it again. The
    messages of ``<base>-dlq`` are never touched."""
    alias = services.alias()
    with transaction.atomic(using=alias):
        row = _row(base, lock=True)
        meta = row[0] if row else {}
        kept = Queue.objects.using(alias).filter(name=base).values_list("dlq_retention_ms", "sqs_tags").first()
        services.delete_queue(base)
        if "dlq" in meta:
            retention_ms, stored_tags = kept or (None, None)
            services.configure_queue(base, **({} if retention_ms is None else {"dlq_retention": retention_ms / 1000}))
            row = _row(base)
            assert row is not None
            save_meta(base, {"dlq": meta["dlq"], HIDDEN: _mark(row[1], row[2])})
            dlq_tags = (stored_tags or {}).get("dlq")
            queue_services.set_sqs_tags(base, {"dlq": dlq_tags} if dlq_tags else None, using=alias)
    forget(base)


def drop_placeholder(base: str, meta: dict[str, Any]) -> bool:
    """Delete the row of ``base`` if it is still only SQS's placeholder for its DLQ (its mark
    unchanged, no messages): one conditional statement, so a concurrent write of another face
    keeps it. Its messages are never touched. A placeholder's sequence counter was never used
    (a send would have changed it), so the counter floor needs no raising."""
    mark = meta.get(HIDDEN)
    if not isinstance(mark, dict) or not all(isinstance(mark.get(k), int) for k in ("last_sequence", "updated_at")):
        return False
    deleted = queue_services.drop_placeholder(base, mark["last_sequence"], mark["updated_at"])
    forget(base)
    return deleted


def _dlq_counts(name: str, total: int) -> dict[str, int]:
    """A DLQ's counts by state: its messages are received (and in flight) like any queue's."""
    if not total:
        return {"ApproximateNumberOfMessages": 0, "ApproximateNumberOfMessagesNotVisible": 0,
                "ApproximateNumberOfMessagesDelayed": 0}
    now = services.now_ms()
    later = Message.objects.using(services.alias()).filter(queue=name, is_dlq=True, process_after__gt=now)
    counted = later.aggregate(in_flight=Count("id", filter=Q(status=Status.PROCESSING)),
                              delayed=Count("id", filter=Q(status=Status.READY)))
    return {"ApproximateNumberOfMessages": max(0, total - counted["in_flight"] - counted["delayed"]),
            "ApproximateNumberOfMessagesNotVisible": counted["in_flight"],
            "ApproximateNumberOfMessagesDelayed": counted["delayed"]}


def current(name: str, origin: Origin, wanted: set[str] | None = None) -> dict[str, str]:
    """GetQueueAttributes's answer for queue ``name``: ``wanted`` names (None: all), as strings."""
    base = base_of(name)
    dlq = is_dlq(name)
    info = services.queue_info(base)
    _, meta = _row_meta(base)
    own = (meta.get("dlq") or {}) if dlq else meta
    pol = info.policy
    counts = info.counts
    row = Queue.objects.using(services.alias()).filter(name=base).values_list("created_at", "updated_at").first()
    created, updated = row if row else (services.now_ms(), services.now_ms())
    values: dict[str, Any] = {
        "VisibilityTimeout": own.get("VisibilityTimeout", 30) if dlq else round(pol["visibility_timeout"]),
        "MessageRetentionPeriod": round(pol["dlq_retention"] if dlq else pol["retention"]),
        "DelaySeconds": own.get("DelaySeconds", 0),
        "ReceiveMessageWaitTimeSeconds": own.get("ReceiveMessageWaitTimeSeconds", 0),
        "MaximumMessageSize": max_message_size(meta, dlq),
        **(_dlq_counts(name, counts["dlq"]) if dlq else {
            "ApproximateNumberOfMessages": counts["ready"],
            "ApproximateNumberOfMessagesNotVisible": counts["in_flight"],
            "ApproximateNumberOfMessagesDelayed": counts["delayed"],
        }),
        "CreatedTimestamp": created // 1000,
        "LastModifiedTimestamp": updated // 1000,
        "QueueArn": origin.arn(name),
    }
    if is_fifo(base):
        values.update(FifoQueue="true", **fifo_attributes(meta, dlq))
    values["SqsManagedSseEnabled"] = own.get("SqsManagedSseEnabled", "false")
    if own.get("KmsMasterKeyId"):
        values["KmsMasterKeyId"] = own["KmsMasterKeyId"]
        values["KmsDataKeyReusePeriodSeconds"] = own.get("KmsDataKeyReusePeriodSeconds", KMS_REUSE_DEFAULT)
    if own.get("Policy"):
        values["Policy"] = own["Policy"]
    if own.get("RedriveAllowPolicy"):
        values["RedriveAllowPolicy"] = redrive.shown(own["RedriveAllowPolicy"])
    if not dlq and pol["max_attempts"] != "unlimited":
        # maxReceiveCount is the queue's max_attempts (whichever face set it); the target its dead_letter_queue.
        target = origin.arn(pol.get("dead_letter_queue") or base + DLQ_SUFFIX)
        values["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": target, "maxReceiveCount": pol["max_attempts"]},
                                             separators=(",", ":"))
    return {k: str(v) for k, v in values.items() if wanted is None or k in wanted}


def wanted_names(names: object) -> set[str] | None:
    """GetQueueAttributes's ``AttributeNames``: None for all; unknown names →
    ``InvalidAttributeName``."""
    if names is None:
        return set()
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise invalid("AttributeNames must be a list of attribute names")
    unknown = [n for n in names if n not in ALL and n not in UNSUPPORTED and n != "All"]
    if unknown:  # with "All" too, as SQS
        raise SqsError("InvalidAttributeName", f"Unknown Attribute {unknown[0]}.")
    if "All" in names:
        return None
    return set(names)


def forq_error(exc: ForqError) -> SqsError:
    """A refusal of forqapp's services, as SQS words it."""
    if exc.code == errors.NOT_FOUND_QUEUE:
        return SqsError("QueueDoesNotExist", "The specified queue does not exist.")
    if exc.code in (errors.QUEUE_FULL, errors.QUEUE_LIMIT):
        return SqsError("OverLimit", str(exc), 403)
    if exc.code == errors.PRODUCE_TO_DLQ:
        return invalid("forqapp fills a dead-letter queue itself (redrive): send to its queue instead")
    if exc.status >= 500:
        return SqsError("InternalError", "forqapp could not complete the request", 500, fault="Receiver")
    return invalid(str(exc))
