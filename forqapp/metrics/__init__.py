"""Every Prometheus metric of forqapp (docs: reference/metrics.md), defined once here and nowhere else.

The API, the Python API, the worker and the jobs all count through the helpers below. With several
processes (``forq_serve`` workers, ``forq_worker``, ``forq_jobs``) set ``PROMETHEUS_MULTIPROC_DIR``
to a directory shared by them; ``GET /metrics`` then adds up every process's values.
"""

from __future__ import annotations

import contextlib
from typing import Any

from prometheus_client import Counter, Gauge

from .. import vocab
from ..conf import forq_settings
from ..server.process import metrics_files_of_the_dead
from . import compaction
from .top import TopQueues

_QUEUE = ("queue_name", "queue_type")

messages_produced_total = Counter(
    "forq_messages_produced_total", "Messages produced.", _QUEUE
)
messages_consumed_total = Counter(
    "forq_messages_consumed_total", "Messages delivered to consumers.", _QUEUE
)
messages_acked_total = Counter("forq_messages_acked_total", "Messages acknowledged.", _QUEUE)
messages_nacked_total = Counter("forq_messages_nacked_total", "Messages negatively acknowledged.", _QUEUE)
messages_failed_total = Counter(
    "forq_messages_failed_total", "Messages failed at once by their consumer (fail(), FatalError).", _QUEUE
)
messages_requeued_total = Counter(
    "forq_messages_requeued_total", "DLQ messages requeued to their queue.", ("queue_name",)
)
queue_depth = Gauge(
    "forq_queue_depth", "Messages in a queue.", _QUEUE, multiprocess_mode="mostrecent"
)
queue_in_flight = Gauge(
    "forq_queue_in_flight", "Messages of a queue under a live lease (every consumer, process and host).",
    ("queue_name",), multiprocess_mode="mostrecent"
)
queue_groups_ready = Gauge(
    "forq_queue_groups_ready", "Message groups of a queue that have ready messages.",
    ("queue_name",), multiprocess_mode="mostrecent"
)
messages_moved_to_dlq_total = Counter(
    "forq_messages_moved_to_dlq_total", "Messages moved to a DLQ.", ("reason",)
)
messages_stale_recovered_total = Counter(
    "forq_messages_stale_recovered_total", "Stale deliveries made ready (or failed) again."
)
messages_cleanup_total = Counter(
    "forq_messages_cleanup_total", "Messages deleted by jobs or users.", ("reason",)
)
sends_deduplicated_total = Counter(
    "forq_sends_deduplicated_total", "Sends that created nothing: their dedup id was seen in its window.",
    ("queue_name",)
)
sends_refused_full_total = Counter(
    "forq_sends_refused_full_total", "Sends refused because the queue was at its max_length.", ("queue_name",)
)
messages_redriven_total = Counter(
    "forq_messages_redriven_total", "Used-up messages a claim moved to the DLQ instead of delivering.",
    ("queue_name",)
)


move_tasks_total = Counter(
    "forq_move_tasks_total", "Message move tasks (DLQ redrives) started, and ended by status.", ("event",)
)
messages_moved_total = Counter("forq_messages_moved_total", "Messages moved by message move tasks.")


def move_batch(moved: int, ended: str | None, *, started: bool = False) -> None:
    """A move task started (``started``), or one batch of one moved ``moved`` messages and the task
    ``ended`` (its status: COMPLETED, CANCELLED, FAILED) or not (None)."""
    if started:
        move_tasks_total.labels("started").inc()
    if moved:
        messages_moved_total.inc(moved)
    if ended:
        move_tasks_total.labels(ended.lower()).inc()


def queue_type(queue: str) -> str:
    """The ``queue_type`` label: ``dlq`` or ``regular``."""
    return "dlq" if vocab.is_dlq(queue) else "regular"



# A queue's child of each per-message counter, found once: ``labels()`` takes a lock and builds its
# key on every call (~1.5 µs, twice per claim+ack); prometheus_client keeps a child for good once made.
_children: dict[tuple[Counter, str], Any] = {}


def _per_queue(metric: Counter, queue: str) -> Any:
    child = _children.get((metric, queue))
    if child is None:
        child = _children[(metric, queue)] = metric.labels(queue, queue_type(queue))
    return child


def produced(queue: str, n: int = 1) -> None:
    _per_queue(messages_produced_total, queue).inc(n)


def consumed(queue: str, n: int = 1) -> None:
    _per_queue(messages_consumed_total, queue).inc(n)


def acked(queue: str, n: int = 1) -> None:
    _per_queue(messages_acked_total, queue).inc(n)


def nacked(queue: str, n: int = 1) -> None:
    _per_queue(messages_nacked_total, queue).inc(n)


def failed(queue: str, n: int = 1) -> None:
    messages_failed_total.labels(queue, queue_type(queue)).inc(n)


def requeued(queue: str, n: int) -> None:
    messages_requeued_total.labels(queue).inc(n)


def moved_to_dlq(reason: str, n: int) -> None:
    if n:
        messages_moved_to_dlq_total.labels(reason).inc(n)


def stale_recovered(n: int) -> None:
    if n:
        messages_stale_recovered_total.inc(n)


def cleaned_up(reason: str, n: int) -> None:
    if n:
        messages_cleanup_total.labels(reason).inc(n)


claims_throttled_total = Counter(
    "forq_claims_throttled_total", "Claims a queue's limit held back.", ("queue_name", "reason")
)
messages_deferred_total = Counter(
    "forq_messages_deferred_total", "Messages deferred with their state (forqapp.defer, Defer).", ("queue_name",)
)
schedule_ticks_total = Counter(
    "forq_schedule_ticks_total", "Messages sent by schedules.", ("schedule",)
)
schedule_missed_total = Counter(
    "forq_schedule_missed_total", "Schedule ticks skipped after downtime (catch_up).", ("schedule",)
)


def throttled(queue: str, reason: str) -> None:
    claims_throttled_total.labels(queue, reason).inc()


def deferred(queue: str) -> None:
    messages_deferred_total.labels(queue).inc()


def schedule_ticked(name: str, n: int = 1) -> None:
    if n:
        schedule_ticks_total.labels(name).inc(n)


schedule_failures_total = Counter(
    "forq_schedule_failures_total", "Schedule ticks that could not be sent (kept for the next run).", ("schedule",)
)


def schedule_failed(name: str) -> None:
    schedule_failures_total.labels(name).inc()


api_key_forbidden_total = Counter(
    "forq_api_key_forbidden_total", "Requests refused 403: the scoped API key lacks the grant.",
    ("access_key_id", "action")
)


def schedule_missed(name: str, n: int) -> None:
    if n:
        schedule_missed_total.labels(name).inc(n)


def deduplicated(queue: str, n: int = 1) -> None:
    if n:
        sends_deduplicated_total.labels(queue).inc(n)


def refused_full(queue: str, n: int = 1) -> None:
    sends_refused_full_total.labels(queue).inc(n)


def redriven(queue: str, n: int) -> None:
    if n:
        messages_redriven_total.labels(queue).inc(n)
        messages_moved_to_dlq_total.labels("failed").inc(n)


def exposition() -> tuple[bytes, str]:
    """The text of ``GET /metrics``: this process's registry, or every process's values when
    ``PROMETHEUS_MULTIPROC_DIR`` is set; per-queue series for the ``FORQ_METRICS_TOP_QUEUES``
    deepest queues, the others summed (:mod:`forqapp.metrics.top`)."""
    import os

    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        REGISTRY,
        CollectorRegistry,
        generate_latest,
    )

    top = forq_settings.FORQ_METRICS_TOP_QUEUES  # per-queue series for the deepest queues only
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        # A process killed (-9, out of memory) never marked its live gauges dead: its in-flight
        # count would stay in the sum for ever. Marked here, at each scrape (its counters stay).
        # (Their files removed here, not by multiprocess.mark_process_dead, which fails on a file
        # that another scrape at once removed first.)
        for files in metrics_files_of_the_dead(directory).values():
            for path in files:
                if os.path.basename(path).startswith("gauge_live"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
        # The files of processes gone are merged into archives first (compaction: a scrape reads
        # a few files, not one per process that ever counted), then read, under one lock.
        registry = CollectorRegistry()
        registry.register(compaction.Collector(None, path=directory))
        return generate_latest(TopQueues(registry, top, directory, compact=True)), CONTENT_TYPE_LATEST
    return generate_latest(TopQueues(REGISTRY, top)), CONTENT_TYPE_LATEST


# --- worker and jobs -------------------------------------------------------------------------
# In multiprocess mode, every process marks its live gauges dead on exit, and a supervisor its
# children's (forqapp.server.process.mark_dead).

from prometheus_client import Histogram  # noqa: E402

worker_handler_duration_seconds = Histogram(
    "forq_worker_handler_duration_seconds",
    "Time a consumer took to handle a message, by queue.",
    ("queue_name",),
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
)
worker_in_flight = Gauge(
    "forq_worker_in_flight",
    "Messages claimed by forq_worker and not yet settled, by queue.",
    ("queue_name",),
    multiprocess_mode="livesum",
)
worker_handled_total = Counter(
    "forq_worker_handled_total",
    "Messages handled by forq_worker, by queue and outcome (ack, nack, fail, defer, lost).",
    ("queue_name", "outcome"),
)
job_runs_total = Counter(
    "forq_job_runs_total", "Background job runs, by job and result (ok, error).", ("job", "result")
)


def handled(queue: str, outcome: str, seconds: float | None = None) -> None:
    worker_handled_total.labels(queue, outcome).inc()
    if seconds is not None:
        worker_handler_duration_seconds.labels(queue).observe(seconds)


def in_flight(queue: str, delta: int) -> None:
    worker_in_flight.labels(queue).inc(delta)


def set_queue_depths(depths, previous=()) -> set:
    """Set the depth gauge from [(queue, is_dlq, n)]; queues seen before and now empty go to 0.
    Returns the label set, to pass back as ``previous`` next time."""
    seen = set()
    for queue, is_dlq, n in depths:
        labels = (queue, "dlq" if is_dlq else "regular")
        queue_depth.labels(*labels).set(n)
        seen.add(labels)
    for labels in set(previous) - seen:
        queue_depth.labels(*labels).set(0)
    return seen


def set_in_flight(counts: dict[str, int], previous=()) -> set:
    """Set the in-flight gauge from {queue: leases}; queues seen before and now idle go to 0."""
    for queue, n in counts.items():
        queue_in_flight.labels(queue).set(n)
    for queue in set(previous) - set(counts):
        queue_in_flight.labels(queue).set(0)
    return set(counts)


def set_groups_ready(counts: dict[str, int], previous=()) -> set:
    """Set the ready-groups gauge from {queue: groups}; queues seen before and now without go to 0."""
    for queue, n in counts.items():
        queue_groups_ready.labels(queue).set(n)
    for queue in set(previous) - set(counts):
        queue_groups_ready.labels(queue).set(0)
    return set(counts)


def job_ran(job: str, ok: bool) -> None:
    job_runs_total.labels(job, "ok" if ok else "error").inc()


sqs_requests_total = Counter(
    "forq_sqs_requests_total", "Requests to the SQS-compatible endpoint, by action and HTTP status.",
    ("action", "status"),
)


def sqs_request(action: str, status: int) -> None:
    sqs_requests_total.labels(action, str(status)).inc()


api_requests_total = Counter(
    "forq_api_requests_total",
    "Requests the HTTP API answered, by API (v1: Forq's, v2, other: /healthcheck, /metrics, unknown "
    "paths) and HTTP status.",
    ("api", "status"),
)
_api_children: dict[tuple[str, int], Any] = {}


def api_request(path: str, status: int) -> None:
    """One answer of the API listener (its child found once: the hot calls answer thousands a second)."""
    api = "v1" if path.startswith("/api/v1/") else "v2" if path.startswith("/api/v2/") else "other"
    child = _api_children.get((api, status))
    if child is None:
        child = _api_children[(api, status)] = api_requests_total.labels(api, str(status))
    child.inc()


clock_offset_seconds = Gauge(
    "forq_clock_offset_seconds",
    "The queue database's clock minus this host's, as the last clock sync measured it: what the queue "
    "clock adds to the host's (FORQ_CLOCK = \"database\", PostgreSQL).",
    multiprocess_mode="mostrecent",
)


def clock_offset(offset_ms: int) -> None:
    clock_offset_seconds.set(offset_ms / 1000)
