"""The queue admin's message move tasks (:mod:`forqapp.services.moves`, as the UI's "Requeue all"
and SQS's StartMessageMoveTask): the "Redrive all dead letters" action (a move task for each
selected queue's dead-letter queue, behind Django's confirmation page), the change page's list of
the queue's moves (:func:`moves_html`) and the cancel of a running one (:func:`cancel_view`, a
confirmation page of its own). Each needs the dead letters' change permission, as their requeue.

The moving is the ``moves`` job's, in the process that runs the jobs: a task started while none
runs says it waits for one (:mod:`forqapp.ui.movecard`)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from .. import services, vocab
from ..errors import ForqError
from ..ui import movecard, queries
from ..utils import now_ms

PERMISSION = "forqapp.change_deadletter"  # the dead letters' requeue asks the same


def dlq_of(queue: Any) -> str:
    """Where ``queue``'s dead letters go: its ``dead_letter_queue``, else its own ``<name>-dlq``."""
    return getattr(queue, "dead_letter_queue", None) or vocab.dlq_of(queue.name)


def _plan(queryset) -> list[dict[str, Any]]:
    """Each dead-letter queue of the selected queues, once (two queues may share one): its
    queues, its messages and its running task, if any."""
    plan: dict[str, dict[str, Any]] = {}
    for queue in queryset.order_by("name")[:1000]:
        plan.setdefault(dlq_of(queue), {"dlq": dlq_of(queue), "queues": []})["queues"].append(queue.name)
    stats = queries.queue_stats(now_ms(), list(plan))
    for dlq, row in plan.items():
        row["messages"] = stats[dlq].total if dlq in stats else 0
        row["running"] = next((t for t in services.list_moves(dlq, 1) if t.running), None)
    return list(plan.values())


@admin.action(description="Redrive all dead letters of selected queues (a move task each)",
              permissions=["redrive"])
def redrive_dead_letters(modeladmin, request, queryset):
    """Start a move task for each selected queue's dead-letter queue: every message back to the
    queue it was dead-lettered from, in batches, by the ``moves`` job."""
    plan = _plan(queryset)
    if request.POST.get("post") != "yes":
        context = {
            **modeladmin.admin_site.each_context(request),
            "title": "Are you sure?",
            "opts": modeladmin.model._meta,
            "plan": plan,
            "startable": any(p["messages"] and not p["running"] for p in plan),
            "no_jobs": None if services.jobs_running() else movecard.NO_JOBS,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across", "0"),
        }
        return TemplateResponse(request, "forqapp/admin/confirm_redrive.html", context)
    started, refused = [], []
    for p in plan:
        if not p["messages"]:
            refused.append(f"{p['dlq']}: no messages")
            continue
        try:
            task = services.start_move(p["dlq"])
        except ForqError as exc:
            refused.append(f"{p['dlq']}: {exc}")
        else:
            started.append(f"{task.source} ({task.to_move} message{'' if task.to_move == 1 else 's'}, "
                           f"move task {task.handle})")
    if started:
        waits = "" if services.jobs_running() else " They wait for the jobs process: none runs on this database now."
        modeladmin.message_user(request, f"Started redriving {'; '.join(started)}: the moves job takes each message "
                                         f"back to its queue, in batches.{waits}", messages.SUCCESS)
    if refused:
        modeladmin.message_user(request, f"Not started: {'; '.join(refused)}.", messages.WARNING)
    return None


def moves_html(queue: Any, user: Any) -> str:
    """The change page's list of the queue's dead-letter queue's move tasks (the latest first):
    status, moved of total, destination, rate, started and ended; a running one's cancel link for
    a user who may requeue dead letters."""
    dlq = dlq_of(queue)
    rows = movecard.move_rows(dlq)
    if not rows:
        return format_html("None yet. The action “Redrive all dead letters” of the queues' list starts one for {}.",
                           dlq)
    may_cancel = user is not None and user.has_perm(PERMISSION)

    def cancel(row: movecard.MoveRow) -> str:
        if not (row.task.running and may_cancel):
            return ""
        url = reverse("admin:forqapp_queue_move_cancel", args=[queue.name, row.task.handle])
        return format_html('<a href="{}" class="forq-move-cancel">cancel</a>', url)

    body = format_html_join(
        "", '<tr data-status="{}"><td>{}</td><td>{} of {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>'
            "<td><code>{}</code></td><td>{}</td></tr>",
        ((r.task.status, r.status, r.task.moved, r.task.to_move, r.destination,
          f"{r.task.rate}/s" if r.task.rate else "—", r.started, r.finished, r.task.handle, cancel(r)) for r in rows))
    waiting = format_html('<p class="forq-no-jobs"><strong>{}</strong></p>', movecard.NO_JOBS) if any(
        r.waiting for r in rows) else ""
    return format_html('{}<div>of <code>{}</code>, the latest first</div><table class="forq-moves"><thead><tr>'
                       "<th>status</th><th>moved</th><th>to</th><th>rate</th><th>started</th><th>ended</th>"
                       "<th>task</th><th></th></tr></thead><tbody>{}</tbody></table>", waiting, dlq, body)


def cancel_view(modeladmin, request, object_id: str, handle: str):
    """GET: Django's confirmation page for cancelling the queue's running move task ``handle``;
    POST: cancel it (what it moved stays moved) and go back to the queue's change page."""
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied
    queue = modeladmin.get_object(request, object_id)
    if queue is None:
        raise Http404("no such queue")
    back = reverse("admin:forqapp_queue_change", args=[queue.name])
    try:
        task = services.move_info(handle)
    except ForqError:
        raise Http404("no such move task") from None
    if task.source != dlq_of(queue):
        raise Http404("no such move task of this queue")
    if request.method != "POST":
        context = {**modeladmin.admin_site.each_context(request), "title": "Are you sure?",
                   "opts": modeladmin.model._meta, "queue": queue, "task": task, "back": back}
        return TemplateResponse(request, "forqapp/admin/confirm_move_cancel.html", context)
    try:
        task = services.cancel_move(handle)
    except ForqError:
        modeladmin.message_user(request, "That move task is not running (it ended, or was cancelled).",
                                messages.WARNING)
    else:
        modeladmin.message_user(request, f"Cancelled the move of {task.source}: {task.moved} message(s) moved.",
                                messages.SUCCESS)
    return HttpResponseRedirect(back)
