"""``GET /metrics`` stays small whatever the number of queues: per-queue series for the
``FORQ_METRICS_TOP_QUEUES`` deepest queues only, the others summed into one ``queue_name="(other)"``
series per metric (and per other label: ``queue_type``, ``outcome``, …).

The counting itself is untouched (every per-queue series still exists in each process); the folding
happens here, once per scrape, on what the registry (or every process's files) collected. A queue's
DLQ goes with its queue; the queues are ranked by their depth (``forq_queue_depth``, which the
queue-depth job refreshes), then by messages produced, then by name. ``forq_metrics_queues_folded``
says how many queues the ``(other)`` series hold. ``(other)`` cannot be a queue's name (parentheses
are not allowed in one).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from ..vocab import base_of

OTHER = "(other)"
LABEL = "queue_name"


def _rank(families: list[Metric]) -> dict[str, tuple[float, float]]:
    """{queue (its DLQ's under the queue): (depth, produced)}."""
    rank: dict[str, list[float]] = {}
    for family in families:
        column = {"forq_queue_depth": 0, "forq_messages_produced": 1}.get(family.name)
        for sample in family.samples:
            queue = sample.labels.get(LABEL)
            if queue is None:
                continue
            entry = rank.setdefault(base_of(queue), [0.0, 0.0])
            if column is not None and sample.name in ("forq_queue_depth", "forq_messages_produced_total"):
                entry[column] += sample.value
    return {q: (v[0], v[1]) for q, v in rank.items()}


def top(families: list[Metric], n: int) -> set[str] | None:
    """The queues (by their base name) whose series stay, or None when there are at most ``n``."""
    rank = _rank(families)
    if len(rank) <= n:
        return None
    ordered = sorted(rank, key=lambda q: (-rank[q][0], -rank[q][1], q))
    return set(ordered[:n])


def _folded(family: Metric, keep: set[str]) -> Metric:
    out = Metric(family.name, family.documentation, family.type, family.unit)
    others: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for sample in family.samples:
        queue = sample.labels.get(LABEL)
        if queue is None or base_of(queue) in keep:
            out.samples.append(sample)
            continue
        key = (sample.name, tuple(sorted({**sample.labels, LABEL: OTHER}.items())))
        if key not in others:
            others[key] = sample.value
        elif sample.name.endswith("_created"):  # a counter's creation time: the earliest
            others[key] = min(others[key], sample.value)
        else:
            others[key] += sample.value
    for (name, pairs), value in others.items():
        out.add_sample(name, dict(pairs), value)
    return out


class TopQueues:
    """A collector over ``source`` (a registry) whose per-queue series are folded (see the module)."""

    def __init__(self, source: Any, n: int):
        self.source, self.n = source, n

    def collect(self) -> Iterator[Metric]:
        families: list[Metric] = list(self.source.collect())
        keep = top(families, self.n)
        if keep is None:
            yield from families
            return
        folded = len({base_of(q) for q in _queues(families)} - keep)
        for family in families:
            yield _folded(family, keep)
        yield GaugeMetricFamily("forq_metrics_queues_folded",
                                'Queues whose series /metrics sums under queue_name="(other)" '
                                "(FORQ_METRICS_TOP_QUEUES).", value=folded)


def _queues(families: Iterable[Metric]) -> set[str]:
    return {s.labels[LABEL] for f in families for s in f.samples if LABEL in s.labels}
