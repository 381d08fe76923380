"""Queue-depth history: what the UI's 24-hour charts draw.

The queue-depth job calls :func:`record_depth_samples` with ``services.queue_depths()``'s rows; the
pages read :func:`depth_series`. Samples are rows of :class:`forqapp.models.QueueDepthSample`,
older than 24 hours ones are pruned on every write.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from django.db import transaction
from django.db.models import F, Max

from ..conf import forq_settings
from ..models import QueueDepthSample
from ..utils import now_ms as _now_ms

WINDOW_MS = 24 * 3_600_000
SLOT_MS = 5 * 60_000  # one round of samples per 5 minutes: 288 points a queue over 24 hours


def record_depth_samples(depths: Iterable[tuple[str, bool, int]], *, now: int | None = None,
                         using: str | None = None) -> int:
    """Store one sample per queue: ``depths`` is [(queue, is_dlq, count)]. A queue that had a
    sample last time and is absent now (it was drained) gets a 0, so its chart falls to zero.

    One round is kept per 5-minute slot (the job runs every 30 s; later calls in a slot that
    already has its round write nothing), which keeps the charts' reads small. Prunes samples older
    than 24 hours. Returns how many samples were written."""
    using = using or forq_settings.FORQ_DATABASE
    now = _now_ms() if now is None else now
    rows = {(q, bool(d)): int(n) for q, d, n in depths}
    manager = QueueDepthSample.objects.using(using)
    with transaction.atomic(using=using):
        last = manager.filter(sampled_at__gte=now - WINDOW_MS).aggregate(t=Max("sampled_at"))["t"]
        if last is not None and last // SLOT_MS >= now // SLOT_MS:
            return 0
        if last is not None:
            for q, d, n in manager.filter(sampled_at=last).values_list("queue", "is_dlq", "depth"):
                if n and (q, d) not in rows:
                    rows[(q, d)] = 0
        manager.bulk_create(
            [QueueDepthSample(queue=q, is_dlq=d, depth=n, sampled_at=now) for (q, d), n in rows.items()]
        )
        manager.filter(sampled_at__lt=now - WINDOW_MS).delete()
    return len(rows)


def depth_series(queues: Sequence[str] | None = None, *, buckets: int = 96, now: int | None = None,
                 using: str | None = None) -> dict[str, list[int | None]]:
    """{queue: [depth per bucket]} over the last 24 hours, oldest first: the largest sample of each
    bucket, carried forward over buckets without one; ``None`` before a queue's first sample."""
    using = using or forq_settings.FORQ_DATABASE
    now = _now_ms() if now is None else now
    width = WINDOW_MS // buckets
    start = now - width * buckets
    qs = QueueDepthSample.objects.using(using).filter(sampled_at__gt=start)
    if queues is not None:
        qs = qs.filter(queue__in=list(queues))
    rows = (
        qs.annotate(bucket=(F("sampled_at") - start - 1) / width)
        .values_list("queue", "bucket")
        .annotate(depth=Max("depth"))
        .order_by()
    )
    points: dict[str, dict[int, int]] = defaultdict(dict)
    for queue, bucket, depth in rows:
        points[queue][min(int(bucket), buckets - 1)] = depth
    series: dict[str, list[int | None]] = {}
    for queue, by_bucket in points.items():
        line: list[int | None] = []
        last: int | None = None
        for b in range(buckets):
            last = by_bucket.get(b, last)
            line.append(last)
        series[queue] = line
    return series
