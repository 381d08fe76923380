"""A queue's policy for people: each field's value in words and whether the queue sets it itself or
follows the global setting. Shared by the admin and the HTMX pages; plain text (templates escape it).

Input is the policy as the Python and v2 APIs show it (``QueueInfo.policy``, ``Policy.public()``):
durations in seconds, ``max_attempts`` an integer or ``"unlimited"``, ``backoff`` a list of ms or
``{"base_ms", "max_ms", "jitter"}``, ``max_length`` an integer or None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import vocab

#: (field, label, what it does), in the order the pages show them.
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("max_attempts", "Max attempts", "deliveries before a message goes to the dead-letter queue"),
    ("backoff", "Backoff", "the delay before a nacked message is delivered again"),
    ("visibility_timeout", "Visibility timeout", "the lease a receive takes"),
    ("retention", "Retention", "how long a message may wait in the queue"),
    ("dlq_retention", "DLQ retention", "how long a message stays in the dead-letter queue"),
    ("max_length", "Max length", "a produce beyond it is refused (503 queue.full)"),
    ("ordering", "Ordering", "within a priority: oldest (FIFO) or newest (LIFO) first, or by due time"),
    ("dedup_window", "Dedup window", "how long a dedup id is remembered"),
    ("max_in_flight", "Max in flight", "deliveries leased at once; receives beyond it get nothing"),
    ("rate", "Rate", "at most this many receives per second, minute, hour or day"),
    ("group_concurrency", "Group concurrency",
     "per message group: messages in flight at once (1: one at a time, in order)"),
    ("group_rate", "Group rate", "per message group: at most this many receives per period"),
)
_KNOWN = {name for name, _, _ in FIELDS}


@dataclass(frozen=True)
class PolicyItem:
    field: str
    label: str
    value: str  # in words
    overridden: bool  # set on the queue (else: the global setting)
    help: str


def message_state(status: int, is_dlq: bool, process_after: int, now: int) -> str:
    """A message's state as staff read it (the queue pages and the admin): a dead letter, stored as
    ready while it waits for a requeue or a delete, is "dead"; a ready message not yet due
    "delayed"; otherwise its status."""
    if is_dlq and status != vocab.Status.PROCESSING:
        return "dead"
    if status == vocab.Status.READY and process_after > now:
        return "delayed"
    return vocab.Status(status).label


def duration(seconds: float | None) -> str:
    """``90`` → ``"1 min 30 s"``, ``0.25`` → ``"250 ms"``, ``86400`` → ``"1 d"``."""
    if seconds is None:
        return "—"
    ms = round(seconds * 1000)
    if ms < 1000:
        return f"{ms} ms"
    if ms % 1000:
        return f"{ms / 1000:g} s"
    parts = []
    rest = ms // 1000
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size} {unit}")
            rest %= size
    return " ".join(parts[:2]) + ("" if len(parts) <= 2 else " …")


def backoff(value: Any) -> str:
    """A list of ms → ``"1 s, 5 s, 15 s (then every 15 s)"``; exponential → ``"2 s doubling to 5 min"``."""
    if isinstance(value, Mapping):
        text = f"{duration(value.get('base_ms', 0) / 1000)} doubling to {duration(value.get('max_ms', 0) / 1000)}"
        jitter = value.get("jitter") or 0
        return text + (f", jitter {jitter:.0%}" if jitter else "")
    if isinstance(value, list | tuple) and value:
        delays = [duration(ms / 1000) for ms in value]
        shown = ", ".join(delays[:6]) + (", …" if len(delays) > 6 else "")
        return f"{shown} (then every {delays[-1]})" if len(delays) > 1 else f"every {delays[0]}"
    return str(value)


def value(field: str, raw: Any) -> str:
    if field == "max_attempts":
        return "unlimited" if raw in ("unlimited", 0, None) else str(raw)
    if field == "backoff":
        return backoff(raw)
    if field == "max_length":
        return "no limit" if raw is None else f"{raw:,} messages"
    if raw is None:
        return "no limit" if field in ("max_in_flight", "rate", "group_concurrency", "group_rate") else "—"
    if field == "ordering":
        return "by due time" if raw == "due" else str(raw or "fifo").upper()
    if field in ("visibility_timeout", "retention", "dlq_retention", "dedup_window"):
        return duration(raw)
    return str(raw)


@dataclass(frozen=True)
class GroupRow:
    """A message group as the queue pages list it (its name as stored: templates escape it)."""

    name: str
    ready: int
    in_flight: int
    next_eligible: str  # "now", "in 2.5 s", or "—" (no messages)


def group_rows(groups: Any, now: int) -> list[GroupRow]:
    """``services.busiest_groups``' answer for people: when each group's next claim may come. A
    group left without messages (its row stays until a claim passes it) is not shown."""
    return [GroupRow(g.group, g.ready, g.in_flight, next_eligible(g.next_eligible_at, now)) for g in groups
            if g.ready or g.in_flight]


def group_policy(concurrency: int | None, rate: str | None) -> str:
    """``"per group: one at a time (in order), at most 5/s"``, or ``"no group limits"``."""
    parts = []
    if concurrency is not None:
        parts.append("one at a time (in order)" if concurrency == 1 else f"at most {concurrency} in flight")
    if rate:
        parts.append(f"at most {rate}")
    return "per group: " + ", ".join(parts) if parts else "no group limits"


def next_eligible(at: int | None, now: int) -> str:
    if at is None:
        return "—"
    return "now" if at <= now else f"in {duration((at - now) / 1000)}"


def label(field: str) -> str:
    return next((text for name, text, _ in FIELDS if name == field), field.replace("_", " ").capitalize())


def policy_items(policy: Mapping[str, Any], overrides: Mapping[str, Any]) -> list[PolicyItem]:
    """Every policy field of a resolved ``policy`` (``paused`` apart), marking those in ``overrides``;
    the known ones in :data:`FIELDS`' order, any other after them."""
    known = [(name, text, help_text) for name, text, help_text in FIELDS if name in policy]
    others = [(name, label(name), "") for name in policy if name not in _KNOWN and name != "paused"]
    return [PolicyItem(name, text, value(name, policy.get(name)), name in overrides, help_text)
            for name, text, help_text in known + others]
