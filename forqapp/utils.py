"""Small helpers shared by the core, the admin and the UI: Forq's clock and display forms."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import NamedTuple


def _clock_offset_ms() -> int:
    """``FORQ_CLOCK_OFFSET_MS``: a shift of this process's host clock, for rehearsing hosts whose
    clocks disagree (a clock 2 s ahead: ``2000``) without touching the machine's. 0 when unset or not
    an integer. Never set it in production: synchronise the hosts' clocks (NTP) instead. With
    ``FORQ_CLOCK = "database"`` the sync measures it away like any other skew."""
    try:
        return int(os.environ.get("FORQ_CLOCK_OFFSET_MS", "0") or 0)
    except ValueError:
        return 0


_OFFSET_MS = _clock_offset_ms()
# The database's clock minus this host's (shifted) clock, in ms, as the last clock sync measured it
# (forqapp.services.clock; 0 on SQLite, with FORQ_CLOCK = "host", and before the first sync).
_DB_OFFSET_MS = 0


def now_ms() -> int:
    """Now, in Unix milliseconds: Forq's time for every column of the queue. The host's clock
    (shifted by ``FORQ_CLOCK_OFFSET_MS``, read at start-up) plus the offset to the database's clock
    that the last clock sync measured (:func:`set_database_offset_ms`; none on SQLite). No query:
    two additions to the host's clock."""
    return time.time_ns() // 1_000_000 + _OFFSET_MS + _DB_OFFSET_MS


def host_us() -> int:
    """This host's clock (shifted by ``FORQ_CLOCK_OFFSET_MS``) in Unix microseconds, without the
    database's offset: what a clock sync compares the database's clock with."""
    return time.time_ns() // 1_000 + _OFFSET_MS * 1_000


def database_offset_ms() -> int:
    """The offset :func:`now_ms` adds to the host's clock (the database's clock minus it, in ms)."""
    return _DB_OFFSET_MS


def set_database_offset_ms(offset_ms: int) -> None:
    """Follow the database's clock from now on: :func:`now_ms` adds ``offset_ms``."""
    global _DB_OFFSET_MS
    _DB_OFFSET_MS = int(offset_ms)


class ClockEstimate(NamedTuple):
    """One clock sync's result: the database's clock minus the host's (µs), and the round trip of
    the sample it came from (µs): the true offset lies within half of it."""

    offset_us: int
    round_trip_us: int

    @property
    def uncertainty_us(self) -> int:
        return (self.round_trip_us + 1) // 2


def estimate_clock_offset(samples: Iterable[tuple[int, int, int]]) -> ClockEstimate | None:
    """The offset of another clock from samples ``(host before, other clock, host after)`` (µs):
    the sample with the shortest round trip, its other clock against the midpoint of the host's two
    readings (as NTP does: the other clock was read somewhere within the round trip, so the error
    is at most half of it). None without a usable sample (a host clock that went back within one)."""
    best: tuple[int, int, int] | None = None
    for before, other, after in samples:
        if after < before:
            continue
        if best is None or after - before < best[2] - best[0]:
            best = (before, other, after)
    if best is None:
        return None
    before, other, after = best
    return ClockEstimate(other - (before + after) // 2, after - before)


def ms_to_datetime(ms: int | None) -> datetime | None:
    """A Unix-milliseconds column as an aware UTC datetime (None stays None)."""
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def pretty_json(content: str) -> tuple[str, bool]:
    """``content`` indented, if it is a JSON object or array: (text, whether it was); anything
    else as given. Non-ASCII stays as it is, and keys keep their order."""
    try:
        value = json.loads(content)
        if not isinstance(value, dict | list):
            return content, False
        return json.dumps(value, indent=2, ensure_ascii=False), True
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser or encoder goes
        return content, False
