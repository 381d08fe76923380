"""``GET /metrics`` stays small whatever the number of queues: per-queue series for the
``FORQ_METRICS_TOP_QUEUES`` deepest queues only, the others summed into one ``queue_name="(other)"``
series per metric (and per other label: ``queue_type``, ``outcome``, …).

The counting itself is untouched (every per-queue series still exists in each process); the folding
happens here, once per scrape, on what the registry (or every process's files) collected. A queue's
DLQ goes with its queue; the queues are ranked by their depth (``forq_queue_depth``, which the
queue-depth job refreshes), then by messages produced, then by name. ``forq_metrics_queues_folded``
says how many queues the ``(other)`` series hold. ``(other)`` cannot be a queue's name (parentheses
are not allowed in one).

A queue moves in and out of the top set as depths change, and every series of a counter (or a
histogram) must still only grow, or Prometheus reads a fall as a reset and ``rate()`` counts the
whole history again. So the scrape remembers, for each counter sample of a queue that has moved
(:class:`Folds`): what it counted while folded (``acc``: kept in ``(other)`` for good, and taken off
its own series), and, while it is folded, its value when it was folded (``mark``: only what it
counts after goes to ``(other)``). A queue's own series then resumes where it stopped, ``(other)``
never falls, and at every scrape the series add up to the exact totals. With several processes
(``PROMETHEUS_MULTIPROC_DIR``), the memory is a file beside their counts, read and written under a
lock by the scrape of whichever process serves it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from .. import errors
from ..vocab import base_of

OTHER = "(other)"
LABEL = "queue_name"
logger = logging.getLogger("forqapp.metrics")
STATE_FILE = "forq-top-queues.json"  # in PROMETHEUS_MULTIPROC_DIR (prometheus_client reads only *.db)
_COUNTING = ("counter", "histogram", "summary")  # families whose samples only grow (but _created)


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


def _key(sample: Any) -> str:
    return json.dumps([sample.name, sorted(sample.labels.items())], separators=(",", ":"))


def _counts(family: Metric, sample: Any) -> bool:
    return family.type in _COUNTING and not sample.name.endswith("_created")


class Folds:
    """What the scrapes remember of the queues that moved (see the module): which queues have their
    own series, which are folded, and per counter sample of a moved queue ``[acc, mark]``."""

    def __init__(self, data: dict[str, Any] | None = None):
        data = data or {}
        self.kept: set[str] = set(data.get("kept", ()))
        self.folded: set[str] = set(data.get("folded", ()))
        # {queue (its base name): {sample: [acc, mark]}}, for the queues that have moved only
        self.samples: dict[str, dict[str, list[float]]] = data.get("samples", {})
        self.changed = False
        self.locked = False  # read under the directory's lock (a scrape may compact its files)

    def dump(self) -> str:
        return json.dumps({"kept": sorted(self.kept), "folded": sorted(self.folded), "samples": self.samples})

    def fold(self, families: list[Metric], keep: set[str] | None) -> Iterator[Metric]:
        """``families`` with the queues outside ``keep`` (None: all stay) summed into ``(other)``."""
        queues = {base_of(q) for q in _queues(families)}
        keep = queues if keep is None else keep
        moved_in = {q for q in queues & keep if q in self.folded}
        moved_out = {q for q in queues - keep if q in self.kept}
        if moved_in or moved_out or not queues <= self.kept | self.folded:
            self.changed = True
        for family in families if moved_in or moved_out else ():  # the moves: what a queue counted
            if family.type not in _COUNTING:                       # so far stays where it was counted
                continue
            for sample in family.samples:
                queue = sample.labels.get(LABEL)
                if queue is None or not _counts(family, sample):
                    continue
                base = base_of(queue)
                if base in moved_in:
                    entries = self.samples.setdefault(base, {})
                    acc, mark = entries.get(_key(sample), (0.0, 0.0))
                    entries[_key(sample)] = [acc + max(0.0, sample.value - mark), 0.0]
                elif base in moved_out:
                    entries = self.samples.setdefault(base, {})
                    acc, _ = entries.get(_key(sample), (0.0, 0.0))
                    entries[_key(sample)] = [acc, sample.value]
        self.kept = (self.kept - (queues - keep)) | (queues & keep)
        self.folded = (self.folded - keep) | (queues - keep)
        if not self.folded and not self.samples:
            yield from families
            return
        # A queue folded at this scrape shows its own series a last time, at the value its mark
        # holds (what it counted since the scrape before goes to its own series, not lost).
        shown = self.kept | moved_out
        for family in families:
            yield self._folded(family, shown)
        yield GaugeMetricFamily("forq_metrics_queues_folded",
                                'Queues whose series /metrics sums under queue_name="(other)" '
                                "(FORQ_METRICS_TOP_QUEUES).", value=len(self.folded & queues))

    def _folded(self, family: Metric, shown: set[str]) -> Metric:
        out = Metric(family.name, family.documentation, family.type, family.unit)
        others: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for sample in family.samples:
            queue = sample.labels.get(LABEL)
            if queue is None:
                out.samples.append(sample)
                continue
            counts = _counts(family, sample)
            base = base_of(queue)
            entries = self.samples.get(base) if counts else None  # (a queue that never moved: none)
            acc, mark = entries.get(_key(sample), (0.0, 0.0)) if entries else (0.0, 0.0)
            kept = base in shown
            if kept and not acc:
                out.samples.append(sample)
                continue
            if kept:  # its own series, less what it counted while folded (that stays in (other))
                own, into_other = max(0.0, sample.value - acc), min(acc, sample.value)
                out.add_sample(sample.name, sample.labels, own)
            else:  # what it counted before its last fold, and what it counted since
                into_other = acc + max(0.0, sample.value - mark) if counts else sample.value
            key = (sample.name, tuple(sorted({**sample.labels, LABEL: OTHER}.items())))
            if key not in others:
                others[key] = into_other
            elif sample.name.endswith("_created"):  # a counter's creation time: the earliest
                others[key] = min(others[key], into_other)
            else:
                others[key] += into_other
        for (name, pairs), value in others.items():
            out.add_sample(name, dict(pairs), value)
        return out


_memory = Folds()  # without a multiprocess directory: this process's scrapes'
_memory_lock = threading.Lock()


@contextlib.contextmanager
def folds(directory: str | None) -> Iterator[Folds]:
    """The scrapes' memory, held for one scrape (read, and written back if it changed): this
    process's, or with ``directory`` the file every process's scrape shares, under its lock."""
    if not directory:
        with _memory_lock:
            yield _memory
        return
    path = os.path.join(directory, STATE_FILE)
    try:
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # (a full disk, a directory gone: the scrape still answers)
        _cannot_keep(exc)
        yield Folds()
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            with open(path) as f:
                state = Folds(json.load(f))
        except (OSError, ValueError):
            state = Folds()
        state.locked = True
        yield state
        if state.changed:
            temporary = f"{path}.{os.getpid()}"
            try:
                with open(temporary, "w") as f:
                    f.write(state.dump())
                os.replace(temporary, path)
            except OSError as exc:  # the next scrape finds the same moves again: nothing falls
                _cannot_keep(exc)
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
    finally:
        os.close(fd)  # (the lock goes with it)


@contextlib.contextmanager
def reading(directory: str) -> Iterator[bool]:
    """Held while a reader other than the scrape (the staff pages' counts) reads ``directory``'s
    files: a shared lock on the scrapes' own, so no compaction runs meanwhile (it runs under the
    scrape's exclusive hold). Whether it was taken (a full disk, a directory gone: not)."""
    try:
        fd = os.open(os.path.join(directory, STATE_FILE) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield True
    finally:
        os.close(fd)  # (the lock goes with it)


def _cannot_keep(exc: OSError) -> None:
    errors.say_unavailable(logger, "/metrics (what the scrapes remember of folded queues)", str(exc),
                           "served without keeping it")


def forget(directory: str | None = None) -> None:
    """A fresh start of the counts: the scrapes' memory goes too (tests; ``forq_serve`` alone)."""
    global _memory
    if directory:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, STATE_FILE))
        return
    with _memory_lock:
        _memory = Folds()


class TopQueues:
    """A collector over ``source`` (a registry) whose per-queue series are folded (see the module);
    ``directory``: the multiprocess directory, whose file keeps what the scrapes remember. With
    ``compact``, the files of its processes gone are merged first, under the same lock
    (:mod:`forqapp.metrics.compaction`)."""

    def __init__(self, source: Any, n: int, directory: str | None = None, *, compact: bool = False):
        self.source, self.n, self.directory, self.compact = source, n, directory, compact

    def collect(self) -> Iterator[Metric]:
        with folds(self.directory) as state:  # (the values read under the lock: scrapes in turn)
            if self.compact and self.directory and state.locked:
                _compact(self.directory)
            families: list[Metric] = list(self.source.collect())
            folded = list(state.fold(families, top(families, self.n)))
        yield from folded


_compaction_failed = False


def _compact(directory: str) -> None:
    global _compaction_failed
    from . import compaction

    try:
        compaction.compact(directory)
    except Exception:  # (the scrape reads the files as they are: compaction.Collector skips none twice)
        if not _compaction_failed:  # (said once until a compaction succeeds again)
            logger.exception("/metrics: the compaction of %s failed; served uncompacted", directory)
        _compaction_failed = True
    else:
        _compaction_failed = False


def _queues(families: Iterable[Metric]) -> set[str]:
    return {s.labels[LABEL] for f in families for s in f.samples if LABEL in s.labels}
