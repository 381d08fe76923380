"""What waiters may claim now (the notifier's reads), and the store's defaults for the servers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ..conf import forq_settings
from . import base
from .base import _store
from .policies import CACHE_S
from .policies import policies as policies_of

T = TypeVar("T")

# --- wake-ups (the notifier's reads) and the database threads -------------------------------


def wake_version(*, using: str | None = None) -> int:
    """A number that changes when another connection commits something that may make a message
    due (see :attr:`forqapp.store.Store.wakeups`)."""
    return _store(using).data_version()


def wake_exact(*, using: str | None = None) -> bool:
    """Whether :func:`wake_version` unchanged means nothing was committed (SQLite's counter), not
    merely that no notification came (PostgreSQL's, which may be lost with its connection)."""
    return _store(using).wakeups == "data_version"


def wake_changes(*, using: str | None = None) -> set[str] | None:
    """The queues the changes :func:`wake_version` counted since the last call were to (None: not
    known, so any queue may have changed)."""
    return _store(using).changed_queues()


def wake_fd(*, using: str | None = None) -> int | None:
    """A file descriptor readable when :func:`wake_version` may have changed (None: poll it)."""
    return _store(using).change_fd()


def wake_drain(*, using: str | None = None) -> bool:
    """Consume what made :func:`wake_fd` readable: whether a change may be on its way."""
    return _store(using).drain_changes()


@dataclass
class Due:
    """What waiters may claim now: messages due per queue (up to a limit; queues with none left
    out), and the earliest time (Unix ms) something of a waited queue with none due comes due by
    the clock (a delayed message, a lease's end, a rate slot, a message group's turn), if any;
    ``quiet``: the open queues without limits that had nothing due, each with the time something
    of it comes due by the clock (None: nothing does) — until then, only a commit can give it a
    message to claim."""

    counts: dict[str, int]
    recheck_at: int | None = None
    quiet: dict[str, int | None] = field(default_factory=dict)


def due(queues: Sequence[str], limit: int, *, using: str | None = None) -> Due:
    """How many messages waiters could claim now in ``queues``: a read, no write lock. Paused
    queues count none, and a limited queue no more than its free slots (none before its next rate
    slot, whose time comes back in :attr:`Due.recheck_at`), so waiters never wake to claim nothing.
    A paused queue, or one at its ``max_in_flight``, is looked at again once its settings are read
    again (:data:`~forqapp.services.policies.CACHE_S`): another process may have changed them."""
    st = _store(using)
    now = base.now_ms()
    policies = policies_of(queues, using=st.alias)
    open_queues = [q for q, p in policies.items() if not p.paused]
    counts = st.has_due(open_queues, now, limit) if open_queues else {}
    recheck_at = None
    if len(open_queues) < len(policies):  # paused: look again when the policy is read again
        recheck_at = now + round(CACHE_S * 1000)
    for queue in [q for q in counts if policies[q].limited]:
        pol = policies[queue]
        state = st.throttle_state(queue, now)
        free = counts[queue]
        if pol.max_in_flight is not None:
            free = min(free, pol.max_in_flight - state.in_flight)
            if free <= 0:  # a limit raised elsewhere is seen when the settings are read again
                again = now + round(CACHE_S * 1000)
                recheck_at = again if recheck_at is None else min(recheck_at, again)
        if pol.rate_interval_us is not None and state.rate_next_at_us > now * 1000:
            slot = -(-state.rate_next_at_us // 1000)
            recheck_at = slot if recheck_at is None else min(recheck_at, slot)
            free = 0
        if free > 0:
            counts[queue] = free
        else:
            del counts[queue]
    # a delayed message, a lease's end, a group's turn (its rate, a backoff): look again then
    idle = [q for q in open_queues if q not in counts]
    turns = st.next_turns(idle)
    for turn in turns.values():
        if turn > now:
            recheck_at = turn if recheck_at is None else min(recheck_at, turn)
    quiet = {q: turns.get(q) for q in idle if not policies[q].limited}
    return Due(counts, recheck_at, quiet)


def due_counts(queues: Sequence[str], limit: int, *, using: str | None = None) -> dict[str, int]:
    """:func:`due`'s counts alone."""
    return due(queues, limit, using=using).counts


def wake_poll_interval(*, using: str | None = None) -> float:
    """Seconds the notifier sleeps between :func:`wake_version` checks while consumers wait."""
    return _store(using).poll_interval(forq_settings.FORQ_WAKE_POLL_MS / 1000)


def default_api_workers(*, using: str | None = None) -> int:
    """``forq_serve``'s API processes when ``FORQ_API_WORKERS`` is unset."""
    return _store(using).default_api_workers


def default_db_threads(*, using: str | None = None) -> int:
    """The async API's database threads when ``FORQ_DB_THREADS`` is unset."""
    return _store(using).default_db_threads


def startup_problems(*, using: str | None = None) -> list[str]:
    """What stops a server from starting on the database, before it is even opened."""
    return _store(using).startup_problems()
