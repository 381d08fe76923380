"""The schedules page (staff with the schedules' view permission): every schedule with its timing,
next and last run; pause, resume and run now (each through :mod:`forqapp.services.schedules`; a
pause and a run now behind a confirmation: htmx's ``hx-confirm``, or, posted without htmx, a
confirmation page: :mod:`.confirm`)."""

from __future__ import annotations

from django.contrib import messages as flash
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from .. import errors
from ..errors import ForqError
from ..services import schedules
from ..utils import now_ms as _now_ms
from . import confirm, freshness, scheduling
from .views import REFRESH_SECONDS, HtmxHttpRequest, _partial, ui_view


def _schedule_name(name: str) -> str:
    if not scheduling.NAME.fullmatch(name):
        raise Http404("no such schedule")
    return name


def _schedules_context(now: int) -> dict:
    declared = scheduling.declared()
    rows = [scheduling.row(info, now, declared) for info in schedules.list_schedules()]
    return {"schedules": rows, "refresh": REFRESH_SECONDS, "zone": scheduling.zone(),
            "paused_count": sum(r.info.paused for r in rows)}


@ui_view("GET", needs=("view", "schedule"))
def schedules_page(request: HtmxHttpRequest) -> HttpResponse:
    context = _schedules_context(_now_ms())
    if _partial(request):
        return render(request, "forqapp/_schedules.html", context)
    return render(request, "forqapp/schedules.html", context)


@ui_view("POST", needs=("change", "schedule"))
def pause_schedule(request: HtmxHttpRequest, name: str) -> HttpResponse:
    name = _schedule_name(name)
    if confirm.needed(request):
        return confirm.page(request, title=f"Pause {name}", label="Pause", danger=False,
                            question=f"Pause {name}? It sends nothing until it is resumed; the ticks it misses "
                                     f"meanwhile are skipped.", back=reverse("forqapp-ui:schedules"))
    return _schedule_action(request, name, "pause")


@ui_view("POST", needs=("change", "schedule"))
def resume_schedule(request: HtmxHttpRequest, name: str) -> HttpResponse:
    return _schedule_action(request, _schedule_name(name), "resume")


@ui_view("POST", needs=("change", "schedule"))
def run_schedule(request: HtmxHttpRequest, name: str) -> HttpResponse:
    name = _schedule_name(name)
    if confirm.needed(request):
        info = _schedule_or_none(name)
        where = f" to {info.queue}" if info is not None else ""
        return confirm.page(request, title=f"Run {name} now", label="Run now", danger=False,
                            question=f"Send {name}'s message{where} now? Its ticks are not changed.",
                            back=reverse("forqapp-ui:schedules"))
    return _schedule_action(request, name, "run")


def _schedule_action(request: HtmxHttpRequest, name: str, action: str) -> HttpResponse:
    """Pause, resume (through ``schedules.schedule``) or run now (``schedules.run_now``); htmx gets
    the schedule's row again (none when it was deleted meanwhile) and the flash out of band."""
    info: schedules.ScheduleInfo | None
    try:
        if action == "run":
            message_id = schedules.run_now(name)
            freshness.invalidate()
            info = schedules.get(name)
            level = "success"
            text = f"Sent {name}'s message to {info.queue} now (message {message_id}); its next run is unchanged."
        else:
            info = scheduling.set_paused(name, action == "pause")
            level = "success"
            text = (f"Paused {name}: it sends nothing until it is resumed." if action == "pause" else
                    f"Resumed {name}: next run {scheduling.when(info.next_run_at)}; the ticks missed while it "
                    f"was paused are skipped.")
    except ForqError as e:
        level = "error"
        if e.code == errors.NOT_FOUND_SCHEDULE:
            info, text = None, f"No schedule {name!r}: it was deleted meanwhile."
        else:
            info, text = _schedule_or_none(name), f"{name}: {e}"
    if not request.htmx:
        getattr(flash, level)(request, text)
        return redirect("forqapp-ui:schedules")
    now = _now_ms()
    context = {"s": None if info is None else scheduling.row(info, now, scheduling.declared()),
               "flash": {"level": level, "text": text}, "oob": True}
    return render(request, "forqapp/_action_schedule.html", context)


def _schedule_or_none(name: str) -> schedules.ScheduleInfo | None:
    try:
        return schedules.get(name)
    except ForqError:
        return None
