"""Counts that stay fast at any size: computed live while that is cheap, served from memory and
refreshed in the background once it is not (stale-while-revalidate).

Counting rows is linear in SQLite and PostgreSQL alike (a covering-index scan, ~1M rows in a few
hundred ms), and the dashboard asks every few seconds. When a count took longer than
``FORQ_UI_LIVE_COUNTS_MS`` (default 100), later requests get the last result at
once while one background thread recomputes it, at most every ``4 × its cost`` (at least 1 s). Below
the threshold (most installations, and the tests) every request counts live.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from django.db import connections

from ..conf import forq_settings

logger = logging.getLogger("forqapp.ui")

MIN_AGE_S = 1.0


@dataclass
class _Entry:
    value: Any
    at: float  # monotonic time the computation started
    cost: float  # seconds it took
    refreshing: bool = False


_entries: dict[Hashable, _Entry] = {}
_lock = threading.Lock()


def _threshold_s() -> float:
    return forq_settings.FORQ_UI_LIVE_COUNTS_MS / 1000


def _compute(key: Hashable, compute: Callable[[], Any]) -> Any:
    start = time.monotonic()
    value = compute()
    with _lock:
        _entries[key] = _Entry(value, start, time.monotonic() - start)
    return value


def _refresh(key: Hashable, compute: Callable[[], Any]) -> None:
    try:
        _compute(key, compute)
    except Exception:  # noqa: BLE001 - a failed refresh keeps the old value and is retried later
        logger.exception("refreshing UI counts %r failed", key)
        with _lock:
            if key in _entries:
                _entries[key].refreshing = False
    finally:
        connections.close_all()  # this thread's connections only


_first: dict[Hashable, threading.Thread] = {}


def _cold_wait_s() -> float | None:
    value = forq_settings.FORQ_UI_COLD_WAIT_MS
    return None if value is None else value / 1000


def counts(key: Hashable, compute: Callable[[], Any], placeholder: Any = None) -> Any:
    """``compute()``, or its last result while a background thread brings it up to date.

    The first read in a process has no last result. With a ``placeholder``, it computes on a
    background thread and waits ``FORQ_UI_COLD_WAIT_MS`` (200) for it: a small database answers in
    time, a large one gets the placeholder ("counting…") at once instead of a page that takes
    seconds, until the count is in. ``FORQ_UI_COLD_WAIT_MS = None`` always counts in the request."""
    wait = _cold_wait_s()
    if placeholder is not None and wait is not None:
        with _lock:
            cold = key not in _entries
            if cold and key not in _first:
                _first[key] = threading.Thread(target=_first_count, args=(key, compute), daemon=True,
                                               name="forq-ui-first-count")
                _first[key].start()
            thread = _first.get(key)
        if cold and thread is not None:
            thread.join(wait)
            with _lock:
                if key not in _entries:
                    return placeholder
    with _lock:
        entry = _entries.get(key)
        if entry is not None and entry.cost >= _threshold_s():
            if not entry.refreshing and time.monotonic() - entry.at >= max(MIN_AGE_S, 4 * entry.cost):
                entry.refreshing = True
                threading.Thread(target=_refresh, args=(key, compute), daemon=True,
                                 name="forq-ui-counts").start()
            return entry.value
    return _compute(key, compute)


def _first_count(key: Hashable, compute: Callable[[], Any]) -> None:
    try:
        _refresh(key, compute)
    finally:
        with _lock:
            _first.pop(key, None)


def invalidate() -> None:
    """After a change: slow counts refresh on their next read (fast ones are always live)."""
    with _lock:
        for entry in _entries.values():
            entry.at = float("-inf")


def clear() -> None:
    with _lock:
        _entries.clear()
        _first.clear()
