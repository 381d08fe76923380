"""The Tasks pages (staff with the task results' view permission): the recent results of the
Django Tasks backend, newest first, a page at a time (keyset on the time of their last change),
filtered by status; and one result in full. Read-only: they read through
:mod:`forqapp.tasks.browse`; retrying or deleting a result is the Django admin's (linked)."""

from __future__ import annotations

import json

from django.http import Http404, HttpResponse
from django.shortcuts import render

from ..errors import ForqError
from ..tasks import browse
from ..utils import ms_to_datetime
from ..utils import pretty_json as _pretty
from ..validation import message_id as valid_result_id
from .views import HtmxHttpRequest, _partial, ui_view


def _display(row: browse.TaskRow) -> browse.TaskRow:
    """Times as datetimes for the templates (``*_dt``)."""
    for name in ("enqueued_at", "started_at", "finished_at", "updated_at"):
        setattr(row, name.replace("_at", "_dt"), ms_to_datetime(getattr(row, name)))
    return row


@ui_view("GET", needs=("view", "taskrecord"))
def tasks_page(request: HtmxHttpRequest) -> HttpResponse:
    status = request.GET.get("status", "").upper()
    status = status if status in browse.STATUSES else ""
    before = browse.parse_cursor(request.GET.get("before", ""))
    rows, more = browse.recent(status=status or None, before=before)
    context = {"rows": [_display(r) for r in rows], "status": status, "statuses": browse.STATUSES,
               "next_before": rows[-1].cursor if more and rows else None, "paged": before is not None}
    return render(request, "forqapp/_tasks.html" if _partial(request) else "forqapp/tasks.html", context)


@ui_view("GET", needs=("view", "taskrecord"))
def task_detail(request: HtmxHttpRequest, result_id: str) -> HttpResponse:
    try:
        result_id = valid_result_id(result_id)
    except ForqError:
        raise Http404("no such task result") from None
    row = browse.get(result_id)
    if row is None:
        raise Http404("no such task result")
    _display(row)
    return_value = _pretty(row.return_value)[0] if row.return_value is not None else None
    call = _pretty(_json(row.call))[0]
    return render(request, "forqapp/task.html", {"t": row, "return_value": return_value, "call": call})


def _json(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
