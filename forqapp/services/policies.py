"""A queue's policy, resolved: its own fields where it has them, the global settings elsewhere.

Pure (no database): :mod:`forqapp.services` reads the queue's row (:class:`forqapp.store.QueueRow`)
and caches the :class:`Policy` built here for :data:`CACHE_S`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.signals import setting_changed

from ..conf import forq_settings
from ..store import QueueRow
from ..validation import rate_interval_us
from ..vocab import base_of
from .base import _store

#: How long a process keeps a queue's policy before reading it again: a change made by another
#: process (the admin, the v2 API, ``configure_queue``) takes effect everywhere within this.
CACHE_S = 1.0

UNLIMITED = 0  # max_attempts


@dataclass(frozen=True)
class Policy:
    max_attempts: int  # 0: unlimited
    backoff: Any  # as configured: a list of ms, or {"base_ms", "max_ms", "jitter"}
    backoff_ms: tuple[int, ...]  # the delay table the store indexes by attempt (last one repeats)
    jitter: float
    visibility_timeout_ms: int
    retention_ms: int
    dlq_retention_ms: int
    max_length: int | None
    ordering: str
    dedup_window_ms: int
    max_in_flight: int | None
    rate: str | None
    rate_interval_us: int | None  # the spacing of claims the rate gives
    paused: bool
    group_concurrency: int | None = None  # per message group: messages in processing at once
    group_rate: str | None = None  # per message group: the rate of its claims
    group_rate_interval_us: int | None = None  # the spacing of one group's claims
    dead_letter_queue: str | None = None  # where its dead letters go (None: its own <name>-dlq)
    overrides: dict[str, Any] = field(default_factory=dict)  # the fields the queue sets itself
    exists: bool = False  # the queue has its row (a send to a queue without one creates it: FORQ_MAX_QUEUES)

    @property
    def limited(self) -> bool:
        """Whether claims must respect a concurrency or rate limit."""
        return self.max_in_flight is not None or self.rate_interval_us is not None

    def public(self) -> dict[str, Any]:
        """The policy as the Python and v2 APIs show it (durations in seconds)."""
        return {
            "max_attempts": "unlimited" if self.max_attempts == UNLIMITED else self.max_attempts,
            "backoff": self.backoff,
            "visibility_timeout": self.visibility_timeout_ms / 1000,
            "retention": self.retention_ms / 1000,
            "dlq_retention": self.dlq_retention_ms / 1000,
            "max_length": self.max_length,
            "ordering": self.ordering,
            "dedup_window": self.dedup_window_ms / 1000,
            "max_in_flight": self.max_in_flight,
            "rate": self.rate,
            "group_concurrency": self.group_concurrency,
            "group_rate": self.group_rate,
            "dead_letter_queue": self.dead_letter_queue,  # (None: <name>-dlq; QueueInfo shows it so)
            "paused": self.paused,
        }


def backoff_table(backoff: Any) -> tuple[tuple[int, ...], float]:
    """(delays by attempt, jitter) of a backoff policy: a list as is; an exponential one doubles
    from ``base_ms`` up to ``max_ms``, the table ending at the cap (which then repeats)."""
    if isinstance(backoff, dict):
        base = int(backoff["base_ms"])
        cap = int(backoff.get("max_ms", base))
        table: list[int] = []
        delay = base
        while delay < cap and len(table) < 64:
            table.append(delay)
            delay *= 2
        table.append(cap)
        return tuple(table), float(backoff.get("jitter", 0))
    return tuple(int(ms) for ms in backoff), 0.0


PUBLIC_NAMES = {  # stored column → the policy field's name in the APIs
    "max_attempts": "max_attempts", "backoff": "backoff", "visibility_timeout_ms": "visibility_timeout",
    "retention_ms": "retention", "dlq_retention_ms": "dlq_retention", "max_length": "max_length",
    "ordering": "ordering", "dedup_window_ms": "dedup_window", "max_in_flight": "max_in_flight", "rate": "rate",
    "group_concurrency": "group_concurrency", "group_rate": "group_rate", "dead_letter_queue": "dead_letter_queue",
}


def resolve(row: QueueRow | None) -> Policy:
    s = forq_settings
    backoff: Any = list(s.FORQ_BACKOFF_MS)
    overrides: dict[str, Any] = {}
    if row is not None:
        for column, name in PUBLIC_NAMES.items():
            value = getattr(row, column)
            if value is None:
                continue
            if column == "backoff":
                value = json.loads(value)
            elif column.endswith("_ms"):
                value = value / 1000
            elif column == "max_attempts" and value == UNLIMITED:
                value = "unlimited"
            overrides[name] = value
        if row.backoff is not None:
            backoff = json.loads(row.backoff)
    table, jitter = backoff_table(backoff)

    def pick(value: Any, default: Any) -> Any:
        return default if value is None else value

    return Policy(
        max_attempts=pick(row and row.max_attempts, s.FORQ_MAX_ATTEMPTS),
        backoff=backoff,
        backoff_ms=table,
        jitter=jitter,
        visibility_timeout_ms=pick(row and row.visibility_timeout_ms, s.FORQ_VISIBILITY_TIMEOUT_MS),
        retention_ms=pick(row and row.retention_ms, s.queue_ttl_ms),
        dlq_retention_ms=pick(row and row.dlq_retention_ms, s.dlq_ttl_ms),
        max_length=row.max_length if row else None,
        ordering=pick(row and row.ordering, "fifo"),
        dedup_window_ms=pick(row and row.dedup_window_ms, round(s.FORQ_DEDUP_WINDOW_S * 1000)),
        max_in_flight=row.max_in_flight if row else None,
        rate=row.rate if row else None,
        rate_interval_us=rate_interval_us(row.rate) if row and row.rate else None,
        paused=bool(row and row.paused),
        group_concurrency=row.group_concurrency if row else None,
        group_rate=row.group_rate if row else None,
        group_rate_interval_us=rate_interval_us(row.group_rate) if row and row.group_rate else None,
        dead_letter_queue=row.dead_letter_queue if row else None,
        overrides=overrides,
        exists=row is not None,
    )


# --- queue policy ------------------------------------------------------------------------------

_policies: dict[tuple[str, str], tuple[float, Policy]] = {}
_default: list[Policy] = []  # the policy of every queue without a row: resolve(None), until a setting changes


def _resolved(row: QueueRow | None) -> Policy:
    if row is not None:
        return resolve(row)
    if not _default:
        _default.append(resolve(None))
    return _default[0]


def _forget_default(**kwargs: Any) -> None:
    _default.clear()


setting_changed.connect(_forget_default)


def policy(queue: str, *, using: str | None = None) -> Policy:
    """``queue``'s policy (a DLQ's is its regular queue's), read at most every
    :data:`forqapp.services.policies.CACHE_S` seconds by each process."""
    name = base_of(queue)
    st = _store(using)
    key = (st.alias, name)
    cached = _policies.get(key)
    now = time.monotonic()
    if cached is not None and now - cached[0] < CACHE_S:
        return cached[1]
    resolved = _resolved(st.queue_get(name))
    _policies[key] = (now, resolved)
    return resolved


def policies(queues: Sequence[str], *, using: str | None = None) -> dict[str, Policy]:
    """:func:`policy` of each of ``queues``, the ones not cached read in one go (the notifier's
    look at every waited queue); queues of the same settings share one resolved policy."""
    st = _store(using)
    now = time.monotonic()
    out: dict[str, Policy] = {}
    missing: dict[str, list[str]] = {}
    for queue in queues:
        name = base_of(queue)
        cached = _policies.get((st.alias, name))
        if cached is not None and now - cached[0] < CACHE_S:
            out[queue] = cached[1]
        else:
            missing.setdefault(name, []).append(queue)
    if missing:
        rows = st.queue_get_many(list(missing))
        alike: dict[tuple[Any, ...] | None, Policy] = {}
        for name, asked in missing.items():
            row = rows.get(name)
            key = None if row is None else (*(getattr(row, c) for c in PUBLIC_NAMES), row.paused)
            resolved = alike.get(key)
            if resolved is None:
                resolved = alike[key] = _resolved(row)
            _policies[(st.alias, name)] = (now, resolved)
            for queue in asked:
                out[queue] = resolved
    return out


def forget_policies() -> None:
    """Drop this process's cached policies (after a change, and in tests)."""
    _policies.clear()
    _default.clear()


def of_row(row: Any) -> Policy:
    """The policy in force of a ``forq_queues`` row read some other way (the admin's and the UI's
    ORM reads; None: no row, the global settings), resolved as :func:`resolve` does."""
    if row is None:
        return resolve(None)
    return resolve(QueueRow(*(getattr(row, name) for name in QueueRow._fields)))
