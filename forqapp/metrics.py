"""Every Prometheus metric of forqapp (SPEC §4), defined once here and nowhere else.

The API, the Python API, the worker and the jobs all count through the helpers below. With several
processes (``forq_serve`` workers, ``forq_worker``, ``forq_jobs``) set ``PROMETHEUS_MULTIPROC_DIR``
to a directory shared by them; ``GET /metrics`` then adds up every process's values.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

_QUEUE = ("queue_name", "queue_type")

messages_produced_total = Counter(
    "forq_messages_produced_total", "Messages produced.", _QUEUE
)
messages_consumed_total = Counter(
    "forq_messages_consumed_total", "Messages delivered to consumers.", _QUEUE
)
messages_acked_total = Counter("forq_messages_acked_total", "Messages acknowledged.", _QUEUE)
messages_nacked_total = Counter("forq_messages_nacked_total", "Messages negatively acknowledged.", _QUEUE)
messages_requeued_total = Counter(
    "forq_messages_requeued_total", "DLQ messages requeued to their queue.", ("queue_name",)
)
queue_depth = Gauge(
    "forq_queue_depth", "Messages in a queue.", _QUEUE, multiprocess_mode="mostrecent"
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


def _type(queue: str) -> str:
    return "dlq" if queue.endswith("-dlq") else "regular"


def produced(queue: str, n: int = 1) -> None:
    messages_produced_total.labels(queue, _type(queue)).inc(n)


def consumed(queue: str, n: int = 1) -> None:
    messages_consumed_total.labels(queue, _type(queue)).inc(n)


def acked(queue: str, n: int = 1) -> None:
    messages_acked_total.labels(queue, _type(queue)).inc(n)


def nacked(queue: str, n: int = 1) -> None:
    messages_nacked_total.labels(queue, _type(queue)).inc(n)


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


def exposition() -> tuple[bytes, str]:
    """The text of ``GET /metrics``: this process's registry, or every process's values when
    ``PROMETHEUS_MULTIPROC_DIR`` is set."""
    import os

    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
    from prometheus_client import multiprocess

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
