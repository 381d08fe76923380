"""A tasks queue's retries as the ``ForqBackend`` applies them, on its queue page's policy card.

The worker retries a failed task by the backend's ``OPTIONS`` (``max_attempts``, ``backoff``) when
it sets them, and by the queue's policy otherwise; the queue's ``max_attempts`` stays the ceiling
(:mod:`forqapp.tasks.retrying`, :mod:`forqapp.tasks.running`). The card shows those two fields
as the worker applies them, marked as the backend's, and says a task's own ``@retries`` wins.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..tasks.browse import BackendRetries
from . import display


@dataclass(frozen=True)
class Item(display.PolicyItem):
    """A policy field with where its value comes from, when it is neither the queue nor the global
    settings (``source``: words for the badge)."""

    source: str = ""


def backoff(value: Any) -> str:
    """The backend's ``backoff`` (seconds, a list of them, or a function) in words."""
    if callable(value):
        return f"computed by {getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', repr(value))}"
    seconds = value if isinstance(value, list | tuple) else [value]
    return display.backoff([round(float(s) * 1000) for s in seconds])


def apply(items: list[display.PolicyItem], backends: list[BackendRetries]) -> list[display.PolicyItem]:
    """``items`` with ``max_attempts`` and ``backoff`` as the tasks backend applies them (one
    backend on the queue; several that differ are rare and shown in :func:`notes` only)."""
    if len(backends) != 1 or backends[0].problem:
        return items
    backend = backends[0]
    source = f"tasks backend {backend.alias!r}"
    out: list[display.PolicyItem] = []
    for item in items:
        if item.field == "max_attempts" and backend.max_attempts is not None:
            queue_max = item.value
            value = str(backend.max_attempts) if queue_max == "unlimited" else str(
                min(backend.max_attempts, int(queue_max)))
            out.append(Item(**{**dataclasses.asdict(item), "value": value, "source": source,
                               "help": f"the backend's OPTIONS['max_attempts'] ({backend.max_attempts}), under the "
                                       f"queue's ({queue_max}); a task's own @retries overrides it"}))
        elif item.field == "backoff" and backend.backoff is not None:
            out.append(Item(**{**dataclasses.asdict(item), "value": backoff(backend.backoff), "source": source,
                               "help": "the backend's OPTIONS['backoff']; a task's own @retries overrides it"}))
        else:
            out.append(item)
    return out


def notes(backends: list[BackendRetries]) -> list[str]:
    """One line a backend running tasks on the queue: what its retries are."""
    lines = []
    for b in backends:
        if b.problem:
            lines.append(f"Tasks of backend {b.alias!r}: its retry OPTIONS are refused ({b.problem}).")
            continue
        parts = []
        if b.max_attempts is not None:
            parts.append(f"at most {b.max_attempts} attempts")
        if b.backoff is not None:
            parts.append(f"backoff {backoff(b.backoff)}")
        policy = ", ".join(parts) if parts else "the queue's max attempts and backoff"
        lines.append(f"Tasks of backend {b.alias!r} (queue_name {b.queue_name!r}) retry with {policy}; "
                     "a task's own @retries overrides it.")
    return lines
