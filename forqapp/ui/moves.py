"""The DLQ page's redrive as a message move task (:mod:`forqapp.services.moves`, the mechanism of
SQS's StartMessageMoveTask): start one (every message back to the queue it was dead-lettered
from, in batches, by the ``moves`` job), and cancel a running one. The page lists the DLQ's latest
tasks with their progress (``moves`` in its context)."""

from __future__ import annotations

from django.contrib import messages as flash
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django_htmx.http import HttpResponseClientRedirect

from .. import errors, services, vocab
from ..errors import ForqError
from . import confirm
from .views import HtmxHttpRequest, _queue, messages_of, ui_view


def _back(request: HtmxHttpRequest, queue: str) -> HttpResponse:
    url = reverse("forqapp-ui:queue", args=[queue])
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


@ui_view("POST", needs=lambda request, queue: ("change", messages_of(queue)))
def start_redrive(request: HtmxHttpRequest, queue: str) -> HttpResponse:
    """Start moving every message of a DLQ back to its source queue (a move task)."""
    queue = _queue(queue)
    if not vocab.is_dlq(queue):
        flash.error(request, "A redrive is for dead-letter queues only.")
        return _back(request, queue)
    if confirm.needed(request):
        return confirm.page(request, title=f"Redrive {queue}", label="Redrive", danger=False,
                            question=f"Move every message of {queue} back to the queue it was dead-lettered "
                                     "from, in the background?",
                            back=reverse("forqapp-ui:queue", args=[queue]))
    try:
        task = services.start_move(queue)
    except ForqError as exc:
        flash.warning(request, f"Not started: {exc}")
    else:
        flash.success(request, f"Started moving {task.to_move} message(s) of {queue} back to their queues.")
    return _back(request, queue)


@ui_view("POST", needs=lambda request, queue, handle: ("change", messages_of(queue)))
def cancel_redrive(request: HtmxHttpRequest, queue: str, handle: str) -> HttpResponse:
    """Cancel a running move task of this queue (what it moved stays moved)."""
    queue = _queue(queue)
    try:
        task = services.move_info(handle)
        if task.source != queue:
            raise ForqError(errors.NOT_FOUND_MOVE, "no such move task of this queue", status=404)
        task = services.cancel_move(handle)
    except ForqError:
        flash.warning(request, "That move task is not running (it ended, or was cancelled).")
    else:
        flash.success(request, f"Cancelled the move of {queue}: {task.moved} message(s) moved.")
    return _back(request, queue)
