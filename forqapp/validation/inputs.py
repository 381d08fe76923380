"""Typed inputs: a request's values parsed once, by a face, into a frozen value (a send entry, a
delivery, a receive's options, a policy change, a schedule), checked by the rules of
:mod:`.rules` in the order the API documents, with the API's own words for each refusal. A
service given one trusts it; a service given plain Python values (``forqapp.send(...)``) checks
them itself, once, by the same rules."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cronsim import CronSim, CronSimError
from django.utils import timezone

from .. import vocab
from . import rules
from .rules import (
    POLICY_FIELDS,
    SendLimits,
    _invalid,
    attributes,
    boolean,
    content,
    dedup_id,
    delay_bounds,
    fields,
    group,
    integer,
    message_id,
    policy,
    priority,
    process_after,
    receipt,
    seconds,
)

# --- typed inputs: a request parsed once ---------------------------------------------------------
#
# Each is what a face read from its request, checked by the rules above in the order the API
# documents, with the API's own words for each refusal. A service given one trusts it; a service
# given plain Python values (``forqapp.send(...)``) checks them itself, once, by the same rules.

Storable = Callable[[str], bool]  # whether the database stores a text (PostgreSQL's holds no NUL)


def _nul_free(value: str, what: str, storable: Storable | None) -> None:
    if "\x00" in value and storable is not None and not storable(value):
        raise _invalid(f"{what} with NUL characters cannot be stored on this database")


@dataclass(frozen=True, slots=True)
class SendEntry:
    """One message to send (v2's body, or an entry of its batch): ``content`` and send's options,
    durations in seconds as given. :meth:`item` is what :func:`forqapp.services.send_entries` takes."""

    content: str
    delay: float | None = None
    process_after: int | None = None
    priority: int | None = None
    attributes: dict[str, str] | None = None
    dedup_id: str | None = None
    dedup_window: float | None = None
    retention: float | None = None
    group: str | None = None

    FIELDS = ("content", "delay", "process_after", "priority", "attributes", "dedup_id", "dedup_window",
              "retention", "group")

    @classmethod
    def parse(cls, item: object, *, now: int, limits: SendLimits, storable: Storable | None = None) -> SendEntry:
        """``item``, a JSON object of :data:`FIELDS` (null is absent); ``now``: Unix ms, for
        ``process_after``; ``storable``: the database's test for a text holding NUL."""
        given = {name: value for name, value in fields(item, "a message", cls.FIELDS).items() if value is not None}
        body = content(given.get("content"), limits.content_bytes)
        _nul_free(body, "content", storable)
        if "delay" in given and "process_after" in given:
            raise _invalid("give delay or process_after, not both")
        if "delay" in given:
            seconds(given["delay"], "delay", delay_bounds(limits))
        if "process_after" in given:
            process_after(given["process_after"], now, limits, "process_after")
        priority(given.get("priority"))
        attributes(given.get("attributes"))
        dedup_id(given.get("dedup_id"))
        group(given.get("group"))
        if "dedup_window" in given:
            seconds(given["dedup_window"], "dedup_window", vocab.DEDUP_WINDOW_S)
        if "retention" in given:
            seconds(given["retention"], "retention", vocab.RETENTION_S)
        return cls(**{**given, "content": body})

    def item(self) -> dict[str, Any]:
        """The options given (none of them None), with ``content``."""
        return {name: value for name in self.FIELDS if (value := getattr(self, name)) is not None}


@dataclass(frozen=True, slots=True)
class Delivery:
    """A delivery named by its queue, its message's id and its receipt: what an ack, a nack, a
    change of visibility or a defer needs (and all it reads of a received message)."""

    queue: str
    id: str
    receipt: int

    @classmethod
    def parse(cls, queue: str, id_value: object, receipt_value: object, *,
              receipt_name: str | None = None) -> Delivery:
        """``queue`` (already checked: its rules are the face's) and the id and receipt as given;
        ``receipt_name``: the body field the receipt came in (None: Forq's ``X-Forq-Receipt``)."""
        return cls(queue, message_id(id_value), receipt(receipt_value, receipt_name))

    @classmethod
    def entry(cls, queue: str, item: object) -> Delivery:
        """A v2 batch's entry ``{"id", "receipt"}``."""
        item = fields(item, "an entry", ("id", "receipt"))
        return cls.parse(queue, item.get("id"), item.get("receipt"), receipt_name="receipt")


@dataclass(frozen=True, slots=True)
class ReceiveOptions:
    """A receive's options: up to ``max_messages``, waiting up to ``wait`` seconds for the first,
    leased for ``visibility_timeout`` seconds (None: the queue's), in ``random`` order or not."""

    max_messages: int = 1
    wait: float = 0
    visibility_timeout: float | None = None
    random: bool = False

    FIELDS = ("max_messages", "wait", "visibility_timeout", "random")

    @classmethod
    def parse(cls, body: dict[str, Any], *, longest_wait: float) -> ReceiveOptions:
        """v2's receive body (every field optional; null is absent); ``longest_wait``:
        ``FORQ_LONG_POLL_SECONDS``."""
        get = body.get
        return cls(
            1 if get("max_messages") is None else integer(get("max_messages"), "max_messages", vocab.V2_ENTRIES),
            0 if get("wait") is None else seconds(get("wait"), "wait", (0, longest_wait)),
            None if get("visibility_timeout") is None else visibility(get("visibility_timeout")),
            False if get("random") is None else boolean(get("random"), "random"),
        )


def visibility(value: object) -> float:
    """A lease in a JSON body (``visibility_timeout``): 0 s to 12 h."""
    if value is None:
        raise _invalid("visibility_timeout is missing")
    return seconds(value, "visibility_timeout", vocab.VISIBILITY_S)


@dataclass(frozen=True, slots=True)
class PolicyChange:
    """A change of a queue's policy: ``fields`` as given (``configure_queue``'s keywords; None
    resets one to the global setting) and ``columns``, the stored values they make."""

    fields: dict[str, Any]
    columns: dict[str, Any]

    @classmethod
    def parse(cls, body: object, *, replace: bool = False) -> PolicyChange:
        """A PUT's body (``replace``: every field; an absent one resets to the global setting) or a
        PATCH's (only the fields given), checked by :func:`policy`."""
        given = fields(body, "the body", POLICY_FIELDS)
        for name, value in given.items():  # durations become floats: a 400-digit integer is none
            if isinstance(value, int) and not -(2**53) <= value <= 2**53:
                raise _invalid(f"{name} is out of range")
        values = {**dict.fromkeys(POLICY_FIELDS), **given} if replace else dict(given)
        return cls(values, policy(values))


SCHEDULE_FIELDS = ("queue", "content", "cron", "every", "catch_up", "priority", "attributes", "paused")
CATCH_UP = ("skip", "one", "all")


@dataclass(frozen=True, slots=True)
class ScheduleInput:
    """A schedule as v2's PUT gives it: the fields given (null is absent), checked here where the
    HTTP API says more than :func:`forqapp.services.schedules.validate` (which checks the rest: the name,
    cron, catch_up, priority, attributes): the required fields, ``every``'s seconds, NUL."""

    fields: dict[str, Any]

    @classmethod
    def parse(cls, body: object, *, storable: Storable | None = None) -> ScheduleInput:
        given = {name: value for name, value in fields(body, "the body", SCHEDULE_FIELDS).items()
                 if value is not None}
        for required in ("queue", "content"):
            if required not in given:
                raise _invalid(f"{required} is missing")
        if isinstance(given["content"], str):
            _nul_free(given["content"], "content", storable)
        if "every" in given:
            seconds(given["every"], "every", vocab.SCHEDULE_EVERY_S)
        return cls(given)


def _check_cron(cron: object) -> str:
    if not isinstance(cron, str) or len(cron) > 200:
        raise _invalid("cron must be a cron expression (five fields)")
    if len(cron.split()) != 5:  # (cronsim would read a sixth as seconds)
        raise _invalid(f"cron {cron!r}: five fields are needed (minute hour day-of-month month day-of-week)")
    try:
        next(iter(CronSim(cron, timezone.now())))
    except (CronSimError, StopIteration) as exc:
        raise _invalid(f"cron {cron!r}: {exc}") from None
    return cron


SCHEDULE_NAME = re.compile(vocab.NOT_DOT_SEGMENT + r"[A-Za-z0-9._:-]{1,100}")  # ("." and "..": no URL could name them)


def schedule(name: object, fields: dict[str, Any], *, content_limit: int) -> tuple[str, tuple[Any, ...]]:
    """``name`` and the schedule's ``fields`` (:func:`schedule`'s keywords) → (name, the stored
    values from ``queue`` to ``paused``), ``content`` at most ``content_limit`` bytes. Raises
    ``ForqError``; touches no database (the ``FORQ_SCHEDULES`` check uses it)."""
    if not isinstance(name, str) or not SCHEDULE_NAME.fullmatch(name):
        raise _invalid("a schedule's name is 1 to 100 of A-Z a-z 0-9 . _ : - (not . nor ..)")
    unknown = set(fields) - set(SCHEDULE_FIELDS)
    if unknown:
        raise _invalid(f"unknown schedule field(s): {', '.join(sorted(map(str, unknown)))}")
    if "queue" not in fields or "content" not in fields:
        raise _invalid("a schedule needs a queue and a content")
    queue = rules.queue_name(fields["queue"], produce=True)
    content = rules.content(fields["content"], content_limit)
    cron, every = fields.get("cron"), fields.get("every")
    if (cron is None) == (every is None):
        raise _invalid("give a schedule cron or every, one of them")
    cron = None if cron is None else _check_cron(cron)
    every_ms = None if every is None else rules.duration_ms(every, "every", 1, 366 * 86_400)
    catch_up = fields.get("catch_up", "one")
    if catch_up not in CATCH_UP:
        raise _invalid('catch_up must be "skip", "one" or "all"')
    return name, (queue, content, cron, every_ms, catch_up, rules.priority(fields.get("priority", 0)),
                  rules.attributes(fields.get("attributes")), rules.paused(fields.get("paused", False)))
