"""The cells of forqapp's admin lists, made to fit a 1366 px window beside Django's sidebars: a long
id shortened to its last characters (the whole id in a tooltip, and on its page), a date in a few
characters (the full date, to the millisecond, in a tooltip), a long text cut to a few lines (the
whole text in a tooltip and on the detail page). Everything escaped (``format_html``); the look is
``forqapp/admin.css``'s (:data:`MEDIA`: no inline style, the staff pages' Content-Security-Policy
allows none). And two texts the change pages and the actions' messages share: a date
(:func:`date_text`), a list of names (:func:`listed`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ..utils import ms_to_datetime, now_ms

ID_TAIL = 8  # characters of an id the lists show: a UUIDv7's random end (its start is a clock)

#: The admin pages' stylesheet and script (the lists' cells, the copy buttons).
MEDIA = forms.Media(css={"all": ["forqapp/admin.css"]}, js=["forqapp/copy.js"])


def full_time(ms: int) -> str:
    """``2026-11-28 08:32:01.123 UTC``."""
    when = ms_to_datetime(ms)
    assert when is not None  # noqa: S101 - ms is an int
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d} UTC"


def date_text(ms: int | None) -> str:
    """A change page's date: ``2026-11-28 08:32:01 UTC`` ("—" for none)."""
    when = ms_to_datetime(ms)
    return "—" if when is None else when.strftime("%Y-%m-%d %H:%M:%S UTC")


def compact_time(ms: int, now: int | None = None) -> str:
    """Today's ``08:32:01``; this year's ``Nov 28 08:32``; older ``2025-11-28`` (in UTC, as the
    tooltip of :func:`when` says)."""
    when = ms_to_datetime(ms)
    today = datetime.fromtimestamp((now_ms() if now is None else now) / 1000, tz=when.tzinfo) if when else None
    if when is None or today is None:
        return "—"
    if when.date() == today.date():
        return when.strftime("%H:%M:%S")
    if when.year == today.year:
        return when.strftime("%b %d %H:%M")
    return when.strftime("%Y-%m-%d")


def when(ms: int | None, now: int | None = None, *, empty: str = "—") -> SafeString | str:
    """A date cell: compact, on one line, the full date in its tooltip."""
    if ms is None:
        return empty
    return format_html('<time class="forq-when" title="{}">{}</time>', full_time(ms), compact_time(ms, now))


def short_id(value: str) -> SafeString:
    """An id cell: ``…cb2b792c2d79``-like, monospace, the whole id in its tooltip."""
    shown = value if len(value) <= ID_TAIL + 1 else "…" + value[-ID_TAIL:]
    return format_html('<code class="forq-id" title="{}">{}</code>', value, shown)


def breakable(name: str) -> SafeString:
    """A queue's (or a task's) name that wraps after its ``.``, ``-`` and ``_``, not in a word."""
    parts = [part for part in re.split(r"(?<=[._-])", name) if part]
    return format_html('<span class="forq-name">{}</span>', format_html_join(mark_safe("<wbr>"), "{}",
                                                                             ((p,) for p in parts)))


def clipped(text: str | None, limit: int, *, css: str = "forq-clip", empty: str = "—") -> SafeString | str:
    """A long text cut to ``limit`` characters (and to a few lines by the stylesheet), the whole text
    in its tooltip."""
    if not text:
        return empty
    shown = text if len(text) <= limit else text[:limit] + "…"
    return format_html('<span class="{}" title="{}">{}</span>', css, text, shown)


def column(field: str, cell: Callable[[Any], Any], description: str, *, sortable: bool = True) -> Callable[..., Any]:
    """A ``ModelAdmin`` method showing ``cell(obj.<field>)`` under ``description``, sorted by
    ``field`` (unless not ``sortable``): ``short_id = column("id", short_id, "id")`` in a class body."""

    def method(modeladmin: admin.ModelAdmin, obj: Any) -> Any:
        return cell(getattr(obj, field))

    method.__name__ = method.__qualname__ = f"{field}_cell"
    return admin.display(description=description, ordering=field if sortable else None)(method)


def listed(names: list[str]) -> str:
    """The first ten of ``names`` (an action's message): ``a, b, c`` or ``a, …, j and 5 more``."""
    return ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")


def confirm_action(modeladmin, request, rows: list, *, skipped: int, action: str, verb: str,
                   question: str) -> TemplateResponse:
    """Django's intermediate confirmation page for an action (as ``delete_selected`` has): ``rows``
    listed (each with ``id`` and ``queue``), ``skipped`` selected rows the action leaves alone."""
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Are you sure?",
        "opts": modeladmin.model._meta,
        "queryset": rows,
        "skipped": skipped,
        "action": action,
        "verb": verb,
        "question": question,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
    }
    return TemplateResponse(request, "forqapp/admin/confirm_action.html", context)
