"""Small helpers shared by the core, the admin and the UI: Forq's clock and display forms."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime


def _clock_offset_ms() -> int:
    """``FORQ_CLOCK_OFFSET_MS``: a shift of this process's queue clock, for rehearsing hosts whose
    clocks disagree (a clock 2 s ahead: ``2000``) without touching the machine's. 0 when unset or not
    an integer. Never set it in production: synchronise the hosts' clocks (NTP) instead."""
    try:
        return int(os.environ.get("FORQ_CLOCK_OFFSET_MS", "0") or 0)
    except ValueError:
        return 0


_OFFSET_MS = _clock_offset_ms()


def now_ms() -> int:
    """Now, in Unix milliseconds: Forq's time for every column of the queue (shifted by
    ``FORQ_CLOCK_OFFSET_MS``, read at start-up)."""
    return time.time_ns() // 1_000_000 + _OFFSET_MS


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
