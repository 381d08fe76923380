"""Forq's ``messages`` table and forqapp's own tables, as Django models.

Times are Unix milliseconds (integers), exactly as Forq stores them. A queue is the set of rows with
the same ``queue`` value; its policy (if any) is its row in ``forq_queues`` (:class:`Queue`), created
on its first produce. The dead-letter queue of ``emails`` is ``emails-dlq`` with ``is_dlq`` set. Every write of the queue goes through :mod:`forqapp.store`; the
model is for reading (admin, UI, analytics) and for the schema.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any, ClassVar

from django.db import models
from django.db.models import F, Q

from . import vocab
from .validation import decode_attributes
from .vocab import DLQ_SUFFIX as DLQ_SUFFIX  # re-exported: older imports take it from here
from .vocab import base_of


class Status(models.IntegerChoices):
    """:class:`forqapp.vocab.Status` with labels, for forms, the admin and the UI."""

    READY = vocab.Status.READY.value, vocab.Status.READY.label
    PROCESSING = vocab.Status.PROCESSING.value, vocab.Status.PROCESSING.label
    FAILED = vocab.Status.FAILED.value, vocab.Status.FAILED.label


class ReadOnlyError(RuntimeError):
    """forqapp's own code wrote one of the queue's tables through the ORM."""


def refuse_forqapp_writes(model: type[models.Model]) -> None:
    """The persistence rule, in code: the queue's tables are written by :mod:`forqapp.store`'s SQL
    (through :mod:`forqapp.services`), never through the ORM by forqapp's own modules — a face that
    tried would skip the store's locking, counters and wake-ups. Raises :class:`ReadOnlyError` when
    the nearest caller outside Django is forqapp's code. A project's own code (a test arranging
    rows, an operator's shell) may still write, at its own risk."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(("django.", __name__)):
        frame = frame.f_back
    caller = "" if frame is None else str(frame.f_globals.get("__name__", ""))
    if caller == "forqapp" or caller.startswith("forqapp."):
        raise ReadOnlyError(f"{caller} wrote {model.__name__} through the ORM: forqapp writes its tables through "
                            "forqapp.services (the store's SQL)")


class ReadOnlyQuerySet(models.QuerySet):
    """A queryset whose writes refuse forqapp's own callers (:func:`refuse_forqapp_writes`)."""

    def update(self, **kwargs: Any) -> int:
        refuse_forqapp_writes(self.model)
        return super().update(**kwargs)

    def delete(self) -> tuple[int, dict[str, int]]:
        refuse_forqapp_writes(self.model)
        return super().delete()

    def create(self, **kwargs: Any) -> Any:
        refuse_forqapp_writes(self.model)
        return super().create(**kwargs)

    def bulk_create(self, objs: Any, *args: Any, **kwargs: Any) -> Any:
        refuse_forqapp_writes(self.model)
        return super().bulk_create(objs, *args, **kwargs)

    def bulk_update(self, objs: Any, fields: Any, *args: Any, **kwargs: Any) -> int:
        refuse_forqapp_writes(self.model)
        return super().bulk_update(objs, fields, *args, **kwargs)


class ReadOnlyModel(models.Model):
    """A model of the queue's tables: ``save()`` and ``delete()`` refuse forqapp's own callers."""

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        refuse_forqapp_writes(type(self))
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        refuse_forqapp_writes(type(self))
        return super().delete(*args, **kwargs)


class MessageQuerySet(ReadOnlyQuerySet):
    def in_queue(self, queue: str) -> MessageQuerySet:
        return self.filter(queue=queue)

    def regular(self) -> MessageQuerySet:
        return self.filter(is_dlq=False)

    def dlq(self) -> MessageQuerySet:
        return self.filter(is_dlq=True)

    def ready(self) -> MessageQuerySet:
        return self.filter(status=Status.READY)

    def delayed(self, now_ms: int) -> MessageQuerySet:
        """Ready, but not due before ``now_ms`` (the UI's "delayed")."""
        return self.ready().filter(process_after__gt=now_ms)


class Message(ReadOnlyModel):
    id = models.CharField(primary_key=True, max_length=36, editable=False)  # UUIDv7, text
    queue = models.CharField(max_length=128)
    is_dlq = models.BooleanField(default=False)
    content = models.TextField()
    status = models.IntegerField(choices=Status.choices, default=Status.READY)
    attempts = models.IntegerField(default=0)
    process_after = models.BigIntegerField()
    processing_started_at = models.BigIntegerField(null=True, blank=True)
    failure_reason = models.TextField(null=True, blank=True)  # noqa: DJ001 - Forq's NULL = no failure
    # The consumer's own error ("module.Class: message") of the last failed attempt, kept into the DLQ.
    last_error = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL = no error recorded
    received_at = models.BigIntegerField()
    updated_at = models.BigIntegerField()
    expires_after = models.BigIntegerField()
    # Higher is delivered first (-1000..1000); FIFO (or LIFO) by ``sequence`` within a priority.
    priority = models.IntegerField(default=0)
    # Up to 10 string key/values, as a JSON object (NULL: none).
    attributes = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL = no attributes
    dedup_id = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001 - NULL = none
    # Strictly increasing per queue, assigned at send, kept through DLQ moves and requeues.
    sequence = models.BigIntegerField(default=0)
    first_received_at = models.BigIntegerField(null=True, blank=True)  # the first claim (Unix ms)
    # A deferred message's saved progress (``forqapp.defer(message, state=…)``), given to its next delivery.
    state = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL = no state saved
    # The message's group ('' = none): claimed in order within it, under the queue's group_concurrency
    # and group_rate, fairly across groups (forq_groups, migration 0018).
    message_group = models.CharField(max_length=128, default="", db_default="", blank=True)
    # The queue a dead letter was moved from (its dead-letter move sets it): where a move task without
    # a destination sends it back. NULL: never dead-lettered (or moved before forqapp kept it).
    dead_letter_source = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001 - NULL = none

    objects = MessageQuerySet.as_manager()

    class Meta:
        db_table = "messages"
        ordering = ["received_at"]
        indexes = [
            # The claim path (migrations 0012-0014): the ready rows due when written, by priority,
            # then sequence; the ready rows written to come due later (delayed, backed off, released)
            # by the time they come due; and the deliveries by their lease end (``process_after``: an
            # ended lease is claimable at once), each in an index of its own, so a claim never walks
            # past the messages in flight or not yet due, and a send writes to one of the three.
            models.Index(
                fields=["queue", "message_group", "-priority", "sequence", "process_after", "status"],
                condition=Q(status=0, process_after__lte=F("received_at")),
                name="idx_queue_claim",
            ),
            models.Index(
                fields=["queue", "message_group", "process_after", "-priority", "sequence"],
                condition=Q(status=0, process_after__gt=F("received_at")),
                name="idx_queue_timed",
            ),
            # The ready rows sent with a due time in the past (a Django task's past ``run_after``), by
            # priority, then that time: the due order's (``ordering`` "due", migration 0017). A plain
            # send writes nothing here.
            models.Index(
                fields=["queue", "message_group", "-priority", "process_after", "sequence"],
                condition=Q(status=0, process_after__lt=F("received_at")),
                name="idx_queue_past",
            ),
            models.Index(
                # (status last: SQLite reads a lease's status from here; PostgreSQL, which takes
                # status = 1 from the condition, can then range over process_after: migration 0016)
                fields=["queue", "message_group", "process_after", "priority", "sequence", "status"],
                condition=Q(status=1),
                name="idx_leases",
            ),
            # Message groups (migration 0018): a group's ready messages in claim order, and the ones
            # that hold one of its slots (leased, or delivered before and waiting: a nack's backoff)
            # by when each can go. The four indexes above lead with (queue, message_group) too, so a
            # claim of the messages without a group ('') reads them as before.
            models.Index(
                fields=["queue", "message_group", "-priority", "sequence", "attempts", "process_after"],
                condition=Q(status=0, message_group__gt=""),
                name="idx_group_ready",
            ),
            models.Index(
                fields=["queue", "message_group", "process_after", "priority", "sequence", "status"],
                condition=(Q(status=1) | Q(status=0, attempts__gt=0)) & Q(message_group__gt=""),
                name="idx_group_held",
            ),
            models.Index(fields=["queue", "is_dlq"], name="idx_for_queue_depth"),
            # The jobs' index (expired and failed messages): ready and failed rows only (migration
            # 0014; SQLite's since 0011), so a claim and an ack write nothing to it.
            models.Index(
                fields=["status", "is_dlq", "expires_after"],
                condition=Q(status=0) | Q(status=2),
                name="idx_expired",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.id}"

    @property
    def regular_queue(self) -> str:
        return base_of(self.queue) if self.is_dlq else self.queue

    @property
    def lease_expires_at(self) -> int | None:
        """When the current delivery's lease ends (Unix ms); None when not in processing. While a
        message is processing, ``process_after`` holds its lease end."""
        return self.process_after if self.status == Status.PROCESSING else None

    @property
    def group(self) -> str | None:
        """The message's group (None: none)."""
        return self.message_group or None

    @property
    def attributes_dict(self) -> dict[str, str]:
        return decode_attributes(self.attributes)


# A module-level name, so django-stubs can type the generated base class.
_MessageManager = models.Manager.from_queryset(MessageQuerySet)


class DeadLetterManager(_MessageManager["DeadLetter"]):
    def get_queryset(self) -> MessageQuerySet:
        # A MessageQuerySet at run time; the stubs type from_queryset()'s get_queryset() as QuerySet.
        return super().get_queryset().dlq()  # type: ignore[attr-defined]


class DeadLetter(Message):
    """Messages in dead-letter queues (a proxy of :class:`Message`, for its own admin list)."""

    objects: ClassVar[DeadLetterManager] = DeadLetterManager()

    class Meta:
        proxy = True
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"


class QueueManager(models.Manager.from_queryset(ReadOnlyQuerySet)):  # type: ignore[misc]
    def get_queryset(self) -> models.QuerySet[Queue]:
        # The row named '' is no queue: SQLite keeps deleted queues' highest sequence number there.
        return super().get_queryset().exclude(name="")


class Queue(ReadOnlyModel):
    """A queue's policy and state: created on its first produce (or by ``configure_queue``,
    ``FORQ_QUEUES``, the admin or the v2 API). A NULL field follows the global setting."""

    name = models.CharField(primary_key=True, max_length=128)
    # Deliveries before a message goes to the DLQ; 0 = unlimited.
    max_attempts = models.IntegerField(null=True, blank=True)
    # JSON: a list of delays (ms) by attempt, or {"base_ms", "max_ms", "jitter"} (exponential).
    backoff = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL = FORQ_BACKOFF_MS
    visibility_timeout_ms = models.BigIntegerField(null=True, blank=True)
    retention_ms = models.BigIntegerField(null=True, blank=True)
    dlq_retention_ms = models.BigIntegerField(null=True, blank=True)
    max_length = models.BigIntegerField(null=True, blank=True)
    ordering = models.CharField(max_length=4, null=True, blank=True,  # noqa: DJ001 - NULL = fifo
                                choices=[("fifo", "FIFO"), ("lifo", "LIFO"), ("due", "by due time")])
    dedup_window_ms = models.BigIntegerField(null=True, blank=True)
    paused = models.BooleanField(default=False)
    # Flow control: at most this many messages in processing at once (NULL: no limit) …
    max_in_flight = models.IntegerField(null=True, blank=True)
    # … and at most this rate of claims: "10/s", "600/m", "100/h", "1000/d" (NULL: no limit).
    rate = models.CharField(max_length=32, null=True, blank=True)  # noqa: DJ001 - NULL = no limit
    # Per message group: at most this many of one group in processing (1: strict order) …
    group_concurrency = models.IntegerField(null=True, blank=True)
    # … and one group's claims at most at this rate (the syntax of ``rate``). NULL: no limit.
    group_rate = models.CharField(max_length=32, null=True, blank=True)  # noqa: DJ001 - NULL = no limit
    # Where its dead letters go: any queue's name (NULL: its own ``<name>-dlq``).
    dead_letter_queue = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001 - NULL = <name>-dlq
    # The rate limit's state: the earliest time (Unix µs) the next claim may happen.
    rate_next_at_us = models.BigIntegerField(default=0, db_default=0)
    # SQLite's per-queue sequence counter (PostgreSQL draws from one database sequence instead).
    last_sequence = models.BigIntegerField(default=0)
    created_at = models.BigIntegerField()
    updated_at = models.BigIntegerField()
    # The SQS face's attributes that no policy field holds (DelaySeconds, ReceiveMessageWaitTimeSeconds,
    # MaximumMessageSize, RedrivePolicy as given, …): forqapp.sqs.queues. NULL: none set.
    sqs_attributes = models.JSONField(null=True, blank=True)
    # The SQS face's queue tags (TagQueue, CreateQueue's tags): {"queue": {key: value}, "dlq": {…}}.
    # NULL: none.
    sqs_tags = models.JSONField(null=True, blank=True)

    objects = QueueManager()

    class Meta:
        db_table = "forq_queues"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Schedule(ReadOnlyModel):
    """A periodic message: every tick of ``cron`` (or every ``every_ms``) enqueues ``content`` on
    ``queue`` exactly once (the tick is the dedup key). ``catch_up`` says what happens to ticks
    missed while nothing ran: ``skip`` them, send ``one``, or send ``all``."""

    name = models.CharField(primary_key=True, max_length=100)
    queue = models.CharField(max_length=128)
    content = models.TextField()
    cron = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001 - NULL = every_ms
    every_ms = models.BigIntegerField(null=True, blank=True)
    catch_up = models.CharField(max_length=4, default="one",
                                choices=[("skip", "skip"), ("one", "one"), ("all", "all")])
    priority = models.IntegerField(default=0)
    attributes = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL = no attributes
    paused = models.BooleanField(default=False)
    next_run_at = models.BigIntegerField()  # Unix ms of the next tick
    last_run_at = models.BigIntegerField(null=True, blank=True)  # Unix ms of the last tick sent
    created_at = models.BigIntegerField()
    updated_at = models.BigIntegerField()

    objects = ReadOnlyQuerySet.as_manager()

    class Meta:
        db_table = "forq_schedules"
        ordering = ["name"]
        indexes = [models.Index(fields=["next_run_at"], name="idx_schedules_next_run")]

    def __str__(self) -> str:
        return self.name


class DedupEntry(ReadOnlyModel):
    """A deduplication id seen on ``queue``: a send with the same id before ``expires_at`` creates
    nothing and answers ``message_id`` (also after that message was acked)."""

    pk = models.CompositePrimaryKey("queue", "dedup_id")
    queue = models.CharField(max_length=128)
    dedup_id = models.CharField(max_length=128)
    message_id = models.CharField(max_length=36)
    expires_at = models.BigIntegerField()  # Unix ms

    objects = ReadOnlyQuerySet.as_manager()

    class Meta:
        db_table = "forq_dedup"
        indexes = [models.Index(fields=["expires_at"], name="idx_dedup_expires")]

    def __str__(self) -> str:
        return f"{self.queue}/{self.dedup_id}"


class QueueDepthSample(models.Model):
    """One queue's depth at one moment, written by the queue-depth job (``forqapp.services.history``) for
    the UI's 24-hour charts. Samples older than 24 hours are pruned as new ones are written."""

    queue = models.CharField(max_length=128)
    is_dlq = models.BooleanField(default=False)
    depth = models.BigIntegerField()
    sampled_at = models.BigIntegerField()  # Unix ms

    class Meta:
        db_table = "forq_queue_depth_samples"
        indexes = [
            # Covering for the chart read (a time range, grouped by queue) and for pruning.
            models.Index(fields=["sampled_at", "queue", "is_dlq", "depth"], name="idx_depth_samples_time"),
        ]

    def __str__(self) -> str:
        return f"{self.queue}={self.depth}@{self.sampled_at}"


class AuthThrottle(ReadOnlyModel):
    """Failed API-key checks per client address, shared by every server process and host (the
    throttle of the HTTP API: docs/how-to/http-api.md). Only requests with a wrong key read or write it."""

    address = models.CharField(primary_key=True, max_length=100)
    failures = models.IntegerField()
    window_start = models.BigIntegerField()  # Unix ms of the first failure counted
    blocked_until = models.BigIntegerField()  # Unix ms; 0 = not blocked
    # Logins of the window whose password is being checked (forqapp.login_throttle): counted
    # against the limit before the check, apart from ``failures``, so that a login which does not
    # fail is never taken for a failure. Always 0 for an API client's address.
    pending = models.IntegerField(db_default=0)

    objects = ReadOnlyQuerySet.as_manager()

    class Meta:
        db_table = "forq_auth_throttle"

    def __str__(self) -> str:
        return f"{self.address}: {self.failures} failures"


class StagedMessage(ReadOnlyModel):
    """A message of an exactly-once Spark write, invisible until its job commits: the job's
    publish moves its rows into ``messages`` in one transaction, an abort deletes them, and the
    expired-dlq job deletes rows abandoned for 24 hours (``forqapp.services.STAGE_TTL_MS``).

    Kept apart from ``messages``: staging touches one B-tree instead of the table's five, and no
    reader of queues (consumers, counts, the UI, snapshots) has anything to skip."""

    pk = models.CompositePrimaryKey("token", "message_id")
    token = models.CharField(max_length=100)  # one Spark task attempt
    message_id = models.CharField(max_length=36)  # the UUIDv7 the message will keep
    queue = models.CharField(max_length=128)
    content = models.TextField()
    process_after = models.BigIntegerField()
    staged_at = models.BigIntegerField()  # Unix ms
    priority = models.IntegerField(default=0)
    attributes = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL = no attributes
    message_group = models.CharField(max_length=128, default="", db_default="", blank=True)  # '' = none

    objects = ReadOnlyQuerySet.as_manager()

    class Meta:
        db_table = "forq_staged"

    def __str__(self) -> str:
        return f"{self.token}/{self.message_id}"


class SinkBatch(ReadOnlyModel):
    """The last micro-batch a Spark streaming query (a *sink*, named by a hash of Spark's id of the
    query, kept in its checkpoint) published into a queue: recorded in the publish's own transaction, so that a batch
    Spark replays after a crash or a restart (same batch id, or an earlier one) publishes nothing
    again. One row per query and queue; deleted with its queue."""

    pk = models.CompositePrimaryKey("queue", "sink")
    queue = models.CharField(max_length=128)
    sink = models.CharField(max_length=100)  # the writer's id for its query
    batch_id = models.BigIntegerField()  # the last batch published
    committed_at = models.BigIntegerField()  # Unix ms

    objects = ReadOnlyQuerySet.as_manager()

    class Meta:
        db_table = "forq_sink_batches"

    def __str__(self) -> str:
        return f"{self.queue}/{self.sink}: batch {self.batch_id}"


class Lease(ReadOnlyModel):
    """A named lease held by one process at a time (e.g. the jobs scheduler of ``forq_serve``):
    every host of one database agrees on one holder, which renews it; an expired lease is taken over."""

    name = models.CharField(primary_key=True, max_length=100)
    holder = models.CharField(max_length=200)  # host:pid:random of the holding process
    expires_at = models.BigIntegerField()  # Unix ms

    objects = ReadOnlyQuerySet.as_manager()

    class Meta:
        db_table = "forq_leases"

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder}"


class MoveTask(ReadOnlyModel):
    """A message move task: the messages of ``source`` (a dead-letter queue, usually) moved in
    batches to ``destination``, or each back to the queue it was dead-lettered from (NULL), at most
    ``rate`` a second. Run by the ``moves`` job (:mod:`forqapp.services.moves`); one running task per
    source at a time. Written through the store only."""

    handle = models.CharField(primary_key=True, max_length=64)
    source = models.CharField(max_length=128)
    destination = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001 - NULL = each one's source
    rate = models.IntegerField(null=True, blank=True)  # messages a second (NULL: as fast as batches go)
    status = models.CharField(max_length=16, choices=[(s.value, s.value) for s in vocab.MoveStatus])
    moved = models.BigIntegerField(default=0)
    to_move = models.BigIntegerField(default=0)  # the source's messages when the task started
    started_at = models.BigIntegerField()  # Unix ms
    updated_at = models.BigIntegerField()
    next_at = models.BigIntegerField()  # the next batch's earliest time (Unix ms): the rate's spacing
    failure_reason = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL = none

    objects = ReadOnlyQuerySet.as_manager()

    class Meta:
        db_table = "forq_move_tasks"
        indexes = [
            models.Index(fields=["source", "started_at"], name="idx_move_tasks_source"),
            models.Index(fields=["status", "next_at"], name="idx_move_tasks_due"),
        ]
        constraints = [
            # One running task per source queue (SQS's rule), held by the database itself.
            models.UniqueConstraint(fields=["source"], condition=models.Q(status="RUNNING"),
                                    name="uniq_move_tasks_running"),
        ]

    def __str__(self) -> str:
        return f"move {self.handle} of {self.source} ({self.status})"


from .keys.models import ApiKey, KeyEvent  # noqa: E402, F401 - scoped API keys live in forqapp.keys
from .tasks.models import TaskRecord  # noqa: E402, F401 - the Django Tasks backend's results
