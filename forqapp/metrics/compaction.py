"""The files of processes gone, merged at scrape time: ``GET /metrics`` stays as fast as the day the
server started, however many short processes (``forq_jobs run`` from cron, ``forq_worker --burst``)
came and went.

In multiprocess mode every process writes ``<type>_<pid>.db`` files in ``PROMETHEUS_MULTIPROC_DIR``
(``gauge_<mode>_<pid>.db`` for gauges) and every scrape reads them all: a cron job each minute
leaves ~4,000 files a day. Before it reads them, a scrape (under the lock of the folding state,
:func:`forqapp.metrics.top.folds`: one scrape at a time, across processes) merges the files of the
processes gone, once there are :data:`MINIMUM_DEAD_FILES` of them, into one archive per kind,
``<kind>_archive.db``, written with prometheus_client's own ``MmapedDict``: its collector reads an
archive as any other file (the type is the part of the name before the first ``_``, a gauge's mode
the second part; ``archive`` is no pid to :func:`forqapp.server.process.metrics_files_of_the_dead`).
Each kind is merged the way prometheus_client adds that kind up, so every sample of a scrape is
the same before and after: counters, histograms (per bucket) and summaries are summed, gauges of
the modes ``sum``, ``min``, ``max`` and ``mostrecent`` are summed, kept lowest, highest, or
latest; ``all`` (one series per pid) and the live modes (dropped with their process) are left alone.

A compaction, and what a process killed at each step leaves:

1. every archive it changes is written in full to ``<kind>_archive.db.new`` (not a ``*.db``: no
   collector reads it), space reserved first (a full disk fails here, cleanly: nothing else
   changed) and fsynced. Killed here: the next scrape deletes the ``.new`` files (no manifest).
2. :data:`MANIFEST` is written (through a temporary file, fsynced, renamed): the new archives and
   the files they merged. Its rename is the commit: from now on the compaction is finished, never
   undone.
3. each ``.new`` replaces its archive (``os.replace``); 4. the merged files are deleted; 5. the
   manifest is deleted. Killed anywhere in 3–5: the next scrape finishes it first (a ``.new`` gone
   was renamed; a merged file gone was deleted) — and even a scrape that cannot (no lock, an
   error) reads no file twice: :class:`Collector` leaves out the files a manifest merged into an
   archive already in place.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import logging
import os
import re
from collections.abc import Callable, Iterable

from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector

from ..server.process import alive

logger = logging.getLogger("forqapp.metrics")

#: Compact once the processes gone have left this many files (a fresh start has none). Fewer cost a
#: scrape nothing worth the rewrite of the archives and the fsyncs a compaction takes; with a cron
#: job each minute, a scrape reads at most 7 files more than the live processes' and compacts
#: every few minutes.
MINIMUM_DEAD_FILES = 8

MANIFEST = "forq-compaction.json"  # (not a *.db: prometheus_client never reads it)
ARCHIVE = "archive"
NEW = ".new"


def _sum(old: tuple[float, float], new: tuple[float, float]) -> tuple[float, float]:
    return old[0] + new[0], max(old[1], new[1])


def _min(old: tuple[float, float], new: tuple[float, float]) -> tuple[float, float]:
    return new if new[0] < old[0] else old


def _max(old: tuple[float, float], new: tuple[float, float]) -> tuple[float, float]:
    return new if new[0] > old[0] else old


def _latest(old: tuple[float, float], new: tuple[float, float]) -> tuple[float, float]:
    return new if new[1] > old[1] else old


#: {kind (a file name's part before ``_<pid>.db``): how two values of one key of it merge}, as
#: prometheus_client's MultiProcessCollector adds them up across files (``(value, timestamp)``).
MERGES: dict[str, Callable[[tuple[float, float], tuple[float, float]], tuple[float, float]]] = {
    "counter": _sum,
    "histogram": _sum,  # the files hold each bucket's own count: the collector accumulates them
    "summary": _sum,
    "gauge_sum": _sum,
    "gauge_min": _min,
    "gauge_max": _max,
    "gauge_mostrecent": _latest,
}
_FILE = re.compile(r"^(" + "|".join(MERGES) + r")_(\d+)\.db$")


def archive_name(kind: str) -> str:
    return f"{kind}_{ARCHIVE}.db"


class Crash(BaseException):
    """Raised by tests at a :func:`_step` to play a process killed there."""


def _step(name: str) -> None:
    """A point where a compaction may be killed (tests replace this)."""


def dead_files(directory: str) -> dict[str, list[str]]:
    """{kind: [file name, ...]} of the processes gone, the kinds that merge only."""
    found: dict[str, list[str]] = {}
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return found
    for name in names:
        match = _FILE.match(name)
        if match and not alive(int(match.group(2))):
            found.setdefault(match.group(1), []).append(name)
    return found


def compact(directory: str, minimum: int | None = None) -> int:
    """Finish a compaction left behind, then merge the files of the processes gone when there are
    at least ``minimum`` (:data:`MINIMUM_DEAD_FILES`); how many were merged. The caller holds the
    directory's lock (:func:`forqapp.metrics.top.folds`). A full disk leaves everything as it was
    (said once, until a compaction succeeds again): the scrape reads the files uncompacted."""
    global _said_full
    finish(directory)
    minimum = MINIMUM_DEAD_FILES if minimum is None else minimum
    dead = dead_files(directory)
    if sum(len(names) for names in dead.values()) < max(1, minimum):
        return 0
    written: list[str] = []
    merged: list[str] = []
    pids: set[int] = set()
    try:
        archives = {}
        for kind, names in dead.items():
            values, readable = _merge(directory, kind, names)
            if not readable:
                continue
            _step("read")
            temporary = os.path.join(directory, archive_name(kind) + NEW)
            written.append(temporary)
            _write_archive(temporary, values)
            _step("archive written")
            archives[kind] = os.path.basename(temporary)
            merged += readable
            pids |= {int(name.rsplit("_", 1)[1][:-3]) for name in readable}
        if not merged or any(alive(pid) for pid in pids):
            _remove(written)  # (a pid taken again by a new process meanwhile: not this time)
            return 0
        _write_json(os.path.join(directory, MANIFEST), {"archives": archives, "merged": merged})
    except OSError as exc:
        _remove(written)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, MANIFEST + NEW))
        if not _said_full:
            _said_full = True
            logger.warning("/metrics: could not compact the %d files of processes gone in %s (%s); "
                           "served uncompacted, nothing lost (said once until a compaction succeeds)",
                           sum(len(names) for names in dead.values()), directory, exc)
        return 0
    _step("manifest written")
    finish(directory)
    _said_full = False
    return len(merged)


_said_full = False


def _merge(directory: str, kind: str, names: list[str]) -> tuple[dict[str, tuple[float, float]], list[str]]:
    """The values of ``kind``'s archive merged with those of ``names``; the names read (a file
    prometheus_client cannot read either is left where it is)."""
    merge = MERGES[kind]
    values: dict[str, tuple[float, float]] = {}
    archive = os.path.join(directory, archive_name(kind))
    if os.path.exists(archive):
        for key, value, timestamp, _ in MmapedDict.read_all_values_from_file(archive):
            values[key] = (value, timestamp)
    readable = []
    for name in names:
        try:
            entries = list(MmapedDict.read_all_values_from_file(os.path.join(directory, name)))
        except FileNotFoundError:
            continue
        except Exception:  # (corrupt: the collector fails on it as before, not the compaction)
            logger.warning("/metrics: %s cannot be read; left uncompacted", name)
            continue
        for key, value, timestamp, _ in entries:
            values[key] = merge(values[key], (value, timestamp)) if key in values else (value, timestamp)
        readable.append(name)
    return values, readable


def _entry_size(key: str) -> int:
    encoded = len(key.encode("utf-8"))
    return 4 + encoded + (8 - (encoded + 4) % 8) + 16  # as MmapedDict lays an entry out


def _write_archive(path: str, values: dict[str, tuple[float, float]]) -> None:
    """``values`` in a new file at ``path`` in prometheus_client's format, fsynced. Its space is
    reserved before MmapedDict maps it: a write through a map past a full disk is a SIGBUS."""
    size = 8 + sum(_entry_size(key) for key in values)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _reserve(fd, size)
    finally:
        os.close(fd)
    _step("space reserved")
    mapped = MmapedDict(path)
    try:
        for key, (value, timestamp) in values.items():
            mapped.write_value(key, value, timestamp)
    finally:
        mapped.close()
    _fsync(path)


def _reserve(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
        return
    except AttributeError:  # (not on this platform)
        pass
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
    os.ftruncate(fd, 0)
    written = 0
    while written < size:  # zeros written: their blocks are allocated now
        written += os.write(fd, bytes(min(size - written, 1 << 20)))


def _write_json(path: str, data: dict) -> None:
    temporary = path + NEW
    with open(temporary, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    _fsync(os.path.dirname(path))


def _fsync(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # (a directory on a system that cannot fsync one)
        pass
    finally:
        os.close(fd)


def _remove(paths: Iterable[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _manifest(directory: str) -> dict | None:
    try:
        with open(os.path.join(directory, MANIFEST)) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("archives"), dict) or not isinstance(
            data.get("merged"), list):
        raise ValueError(f"{MANIFEST}: not a compaction's manifest")
    return data


def finish(directory: str) -> None:
    """A compaction left behind, finished (its manifest written: steps 3–5) or undone (its ``.new``
    archives only: deleted). The caller holds the lock."""
    manifest = _manifest(directory)
    if manifest is None:
        _remove(glob.glob(os.path.join(glob.escape(directory), f"*_{ARCHIVE}.db{NEW}")))
        _remove([os.path.join(directory, MANIFEST + NEW)])
        return
    for kind, temporary in manifest["archives"].items():
        path = os.path.join(directory, temporary)
        if os.path.exists(path):  # (gone: renamed already)
            os.replace(path, os.path.join(directory, archive_name(kind)))
            _step("archive renamed")
    _fsync(directory)
    for name in manifest["merged"]:
        match = _FILE.match(name)
        if match and not alive(int(match.group(2))):  # (a live process's file is never touched)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))
            _step("merged deleted")
    _fsync(directory)
    os.unlink(os.path.join(directory, MANIFEST))
    _step("manifest deleted")
    _fsync(directory)


def left_out(directory: str) -> set[str]:
    """The files a manifest left behind merged into an archive already in place (a compaction
    that could not be finished): a scrape must not read them besides their archive."""
    try:
        manifest = _manifest(directory)
    except (OSError, ValueError):
        return set()
    if manifest is None:
        return set()
    done = {kind for kind, temporary in manifest["archives"].items()
            if not os.path.exists(os.path.join(directory, temporary))}
    return {name for name in manifest["merged"]
            if (match := _FILE.match(name)) and match.group(1) in done}


class Collector(MultiProcessCollector):
    """prometheus_client's collector of a multiprocess directory, less the files :func:`left_out`."""

    def collect(self):
        files = glob.glob(os.path.join(glob.escape(self._path), "*.db"))
        skip = left_out(self._path)
        if skip:
            files = [f for f in files if os.path.basename(f) not in skip]
        return self.merge(files, accumulate=True)


def forget(directory: str, *, gauges_only: bool = False) -> None:
    """A fresh start of the counts (``forq_serve`` alone): the archives, and a compaction left
    behind, go; with ``gauges_only`` (another process writes there still), the gauges' only. The
    manifest goes first: a ``.new`` left then is only deleted, never renamed into place."""
    if not gauges_only:
        _remove([os.path.join(directory, MANIFEST), os.path.join(directory, MANIFEST + NEW)])
    for kind in MERGES:
        if gauges_only and not kind.startswith("gauge_"):
            continue
        path = os.path.join(directory, archive_name(kind))
        _remove([path + NEW, path])
