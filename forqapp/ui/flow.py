"""A queue's flow control for people: in flight against its ``max_in_flight``, its ``rate``, and the
claims its limits held back (``forq_claims_throttled_total``, by reason). Shared by the admin and
the HTMX pages.

The throttled claims are prometheus_client's counter, never a database read: the counts of this
process (the registry's ``forq_claims_throttled_total``), or, with ``PROMETHEUS_MULTIPROC_DIR``
(``forq_serve`` sets a fresh one at every start when ``FORQ_METRICS_ENABLED``), the sum over
every process of the server, read from that directory's counter files at most every
:data:`MULTIPROCESS_TTL_S`. Either way: since this server started. ``forq_serve``'s UI process
claims nothing itself: without that directory (metrics off) it has no count to show, and says so
(:func:`counted`).
"""

from __future__ import annotations

import glob
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .. import metrics, vocab
from ..services.policies import Policy
from ..validation import rate_interval_us
from . import display

REASONS = ("concurrency", "rate")
SAMPLE = "forq_claims_throttled_total"
MULTIPROCESS_TTL_S = 2.0
SINCE = "since this server started"
NOT_COUNTED = "not counted here: turn on FORQ_METRICS_ENABLED (forq_serve then adds up every process's claims)"

_lock = threading.Lock()
_cached: tuple[float, dict[str, dict[str, int]]] | None = None
_serves_pages_only = False  # forq_serve's UI listener: the claims happen in other processes


def pages_only() -> None:
    """Called by the UI listener's application (:mod:`forqapp.ui.asgi`): this process serves the
    pages, never a claim."""
    global _serves_pages_only
    _serves_pages_only = True


def counted() -> bool:
    """Whether this process sees the server's throttled claims: every process's through
    ``PROMETHEUS_MULTIPROC_DIR``, or its own where the claims are made (not the UI listener's)."""
    return _multiprocess_dir() is not None or not _serves_pages_only


def _multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir") or None


def _add(counts: dict[str, dict[str, int]], samples: Any) -> None:
    for sample in samples:
        if sample.name != SAMPLE:
            continue  # "_created" and the like
        queue, reason = sample.labels.get("queue_name"), sample.labels.get("reason")
        if queue and reason and sample.value:
            per_queue = counts.setdefault(queue, {})
            per_queue[reason] = per_queue.get(reason, 0) + int(sample.value)


def _read_multiprocess(path: str) -> dict[str, dict[str, int]]:
    """The counter files' sum, as a scrape reads them: under the scrapes' lock, shared (no
    compaction runs meanwhile), a file a compaction left merged into an archive already in place
    left out (:func:`forqapp.metrics.compaction.left_out`); without the lock (it could not be
    taken), a read that lost a file to a compaction is read again."""
    from ..metrics import top

    with top.reading(path):
        return _read_counters(path)


def _read_counters(path: str) -> dict[str, dict[str, int]]:
    from prometheus_client import multiprocess

    from ..metrics import compaction

    for attempt in range(3):
        counts: dict[str, dict[str, int]] = {}
        skip = compaction.left_out(path)
        files = [f for f in glob.glob(os.path.join(glob.escape(path), "counter_*.db"))  # counters only
                 if os.path.basename(f) not in skip]
        try:
            for metric in multiprocess.MultiProcessCollector.merge(files, accumulate=True):
                _add(counts, metric.samples)
        except FileNotFoundError:
            if attempt == 2:
                raise
            continue
        return counts
    raise AssertionError("unreachable")


def throttled_claims() -> dict[str, dict[str, int]]:
    """{queue: {reason: claims held back}} since this server started, queues with none left out."""
    global _cached
    path = _multiprocess_dir()
    if path is None:
        counts: dict[str, dict[str, int]] = {}
        for metric in metrics.claims_throttled_total.collect():  # the counter REGISTRY serves
            _add(counts, metric.samples)
        return counts
    with _lock:
        if _cached is not None and time.monotonic() - _cached[0] < MULTIPROCESS_TTL_S:
            return _cached[1]
    counts = _read_multiprocess(path)
    with _lock:
        _cached = (time.monotonic(), counts)
    return counts


def clear() -> None:
    """Forget the cached multiprocess read (tests)."""
    global _cached
    with _lock:
        _cached = None


@dataclass(frozen=True)
class Flow:
    """One queue's flow control, as the pages show it."""

    queue: str
    in_flight: int
    max_in_flight: int | None
    rate: str | None
    rate_interval_us: int | None
    throttled: dict[str, int] = field(default_factory=dict)  # {reason: n}
    counted: bool = True  # False: this process cannot see the claims (see counted())

    @property
    def limited(self) -> bool:
        return self.max_in_flight is not None or self.rate is not None

    @property
    def in_flight_text(self) -> str:
        """``"3 / 4"`` with a limit, else ``"3"``."""
        return f"{self.in_flight} / {self.max_in_flight}" if self.max_in_flight is not None else str(self.in_flight)

    @property
    def full(self) -> bool:
        """Every slot taken: the next claim gets nothing until a delivery settles or its lease ends."""
        return self.max_in_flight is not None and self.in_flight >= self.max_in_flight

    @property
    def rate_text(self) -> str:
        """``"10/s (a claim every 100 ms)"``, or ``"no limit"``."""
        if self.rate is None:
            return "no limit"
        if not self.rate_interval_us:
            return self.rate
        return f"{self.rate} (a claim every {display.duration(self.rate_interval_us / 1_000_000)})"

    @property
    def throttled_total(self) -> int:
        return sum(self.throttled.values())

    @property
    def throttled_items(self) -> list[tuple[str, int]]:
        """Every reason, with 0 for those that held nothing back."""
        return [(reason, self.throttled.get(reason, 0)) for reason in (*REASONS, *sorted(set(self.throttled) - set(REASONS)))]

    @property
    def throttled_text(self) -> str:
        if not self.counted:
            return NOT_COUNTED
        return ", ".join(f"{n} by {'the concurrency limit' if r == 'concurrency' else 'the rate' if r == 'rate' else r}"
                         for r, n in self.throttled_items)


def of(queue: str, policy: Policy | dict[str, Any], in_flight: int,
       throttled: dict[str, dict[str, int]] | None = None) -> Flow:
    """The flow of ``queue`` from its resolved policy (a :class:`Policy` or its ``public()`` dict,
    as ``services.queue_info`` gives it) and its live leases. ``throttled``: a
    :func:`throttled_claims` already read for the whole page."""
    if isinstance(policy, Policy):
        max_in_flight, rate, interval = policy.max_in_flight, policy.rate, policy.rate_interval_us
    else:
        max_in_flight, rate = policy.get("max_in_flight"), policy.get("rate")
        interval = _interval_us(rate)
    counts = throttled_claims() if throttled is None else throttled
    base = vocab.base_of(queue) if vocab.is_dlq(queue) else queue
    return Flow(queue, in_flight, max_in_flight, rate, interval, dict(counts.get(base, {})), counted())


def _interval_us(rate: str | None) -> int | None:
    if rate is None:
        return None
    try:
        return rate_interval_us(str(rate))
    except ValueError:  # a rate the pages cannot read is shown as stored
        return None
