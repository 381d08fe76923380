"""Schedules for people, shared by the admin and the HTMX pages: their timing and times in words,
and pause / resume through :func:`forqapp.services.schedules.schedule` (never SQL).

Times are shown in the project's ``TIME_ZONE``, the zone cron expressions tick in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from ..conf import forq_settings
from ..services import schedules
from ..services.schedules import ScheduleInfo
from . import display

NAME = re.compile(r"[A-Za-z0-9._:-]{1,100}")  # schedules.validate's rule for names


def timing(cron: str | None, every_s: float | None) -> str:
    """``"cron 0 3 * * *"`` or ``"every 5 min"``."""
    if cron is not None:
        return f"cron {cron}"
    return f"every {display.duration(every_s)}" if every_s is not None else "—"


def zone() -> str:
    """The project's ``TIME_ZONE`` (schedules' times are shown, and cron ticks, in it)."""
    return str(timezone.get_default_timezone())


def local(ms: int | None) -> datetime | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.get_default_timezone())


def when(ms: int | None) -> str:
    """``"2025-05-06 03:00:00 UTC"`` in ``TIME_ZONE``; ``"—"`` for None."""
    moment = local(ms)
    return "—" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S %Z")


def relative(ms: int | None, now: int) -> str:
    """``"in 4 min"``, ``"2 h ago"``, ``"now"``; ``""`` for None."""
    if ms is None:
        return ""
    delta = ms - now
    if abs(delta) < 1000:
        return "now"
    words = display.duration(round(abs(delta) / 1000)).split(" …")[0]
    return f"in {words}" if delta > 0 else f"{words} ago"


@dataclass(frozen=True)
class Row:
    """A schedule as the schedules page shows it."""

    info: ScheduleInfo
    timing: str
    next_run: str
    next_in: str  # "in 4 min"
    due: bool  # its tick has come: the jobs scheduler sends it on its next run
    last_run: str
    last_ago: str
    declared: bool  # in FORQ_SCHEDULES

    @property
    def name(self) -> str:
        return self.info.name


def row(info: ScheduleInfo, now: int, declared_names: set[str] | frozenset[str] = frozenset()) -> Row:
    return Row(info, timing(info.cron, info.every), when(info.next_run_at), relative(info.next_run_at, now),
               not info.paused and info.next_run_at <= now, when(info.last_run_at),
               relative(info.last_run_at, now), info.name in declared_names)


def set_paused(name: str, paused: bool) -> ScheduleInfo:
    """Pause or resume ``name`` (:func:`forqapp.services.schedules.pause` / :func:`~forqapp.services.schedules.resume`:
    one statement, other fields untouched; a resume skips the ticks that fell while paused). Raises
    ``ForqError`` (``not_found.schedule``) when there is no such schedule."""
    return schedules.pause(name) if paused else schedules.resume(name)


def declared() -> set[str]:
    """The names ``FORQ_SCHEDULES`` declares (``migrate`` and ``forq_queues apply`` set them back)."""
    from django.core.exceptions import ImproperlyConfigured


    try:
        return set(forq_settings.FORQ_SCHEDULES or {})
    except ImproperlyConfigured:  # reported by the system checks (forqapp.E051)
        return set()
