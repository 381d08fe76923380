"""A DLQ's "Requeue all" as a message move task (:mod:`forqapp.services.moves`, the mechanism of
SQS's StartMessageMoveTask): started here, answered at once with the DLQ page's moves card, which
refreshes itself (htmx) while a task runs; the ``moves`` job of the process that runs the jobs does
the moving, in batches, at the optional rate. Cancel stops a running task between batches.
A single message's requeue stays synchronous (one row: :func:`forqapp.ui.views.requeue_message`).
The card's rows: :mod:`.movecard`."""

from __future__ import annotations

from django.contrib import messages as flash
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django_htmx.http import reswap

from .. import errors, services, vocab
from ..errors import ForqError
from ..utils import now_ms as _now_ms
from . import confirm, freshness
from .movecard import card_context
from .views import HtmxHttpRequest, _page_context, _partial, _queue, _stats_context, messages_of, ui_view


def _card(request: HtmxHttpRequest, queue: str, level: str, text: str) -> HttpResponse:
    """The moves card, with the flash (and the counts) out of band."""
    context = {**card_context(queue), **_stats_context(queue, _now_ms()), "flash": {"level": level, "text": text},
               "oob": True}
    return render(request, "forqapp/_action_moves.html", context)


def _rate(request: HtmxHttpRequest) -> int | None:
    """The form's optional rate (messages a second); ``start_move`` checks its range."""
    text = request.POST.get("rate", "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        lo, hi = vocab.MOVE_RATE
        raise ForqError(errors.BODY_INVALID, f"rate must be an integer from {lo:.0f} to {hi:.0f} "
                                             "(messages a second)") from None


def _done(request: HtmxHttpRequest, queue: str, level: str, text: str) -> HttpResponse:
    if request.htmx:
        return _card(request, queue, level, text)
    getattr(flash, level)(request, text)
    return redirect("forqapp-ui:queue", queue=queue)


@ui_view("GET", "POST", needs=lambda request, queue: (
    ("view" if request.method == "GET" else "change", messages_of(queue))))
def queue_moves(request: HtmxHttpRequest, queue: str) -> HttpResponse:
    """GET: the moves card (htmx; it polls while a task runs — when its last one ended, the
    message list comes along, out of band). POST: requeue every message of the DLQ: start a move
    task (each message back to the queue it was dead-lettered from, in batches, at the optional
    ``rate``), answered with the card at once."""
    queue = _queue(queue)
    if request.method == "GET":
        if not _partial(request):
            return redirect("forqapp-ui:queue", queue=queue)
        context = {**card_context(queue), **_stats_context(queue, _now_ms()), "oob": True}
        if not context["moves_running"]:  # it polled: a task ran, and has ended since
            context.update(_page_context(queue, _now_ms()), list_oob=True)
            freshness.invalidate()
        return render(request, "forqapp/_action_moves.html", context)
    if not vocab.is_dlq(queue):
        text = "Requeue all is for dead-letter queues only."
        if request.htmx:
            return reswap(render(request, "forqapp/_flash.html", {"flash": {"level": "error", "text": text},
                                                                  "oob": True}), "none")
        flash.error(request, text)
        return redirect("forqapp-ui:queue", queue=queue)
    if confirm.needed(request):
        return confirm.page(request, title=f"Requeue every message of {queue}", label="Requeue all", danger=False,
                            question=f"Requeue every message of {queue} back to the queue it was dead-lettered "
                                     "from? A move task does it in the background, in batches; they keep their "
                                     "place in the queue (FIFO by receive time).",
                            back=reverse("forqapp-ui:queue", args=[queue]), keep=("rate",))
    try:
        task = services.start_move(queue, rate=_rate(request))
    except ForqError as exc:
        return _done(request, queue, "warning", f"Not started: {exc}")
    text = (f"Requeueing {task.to_move} message{'' if task.to_move == 1 else 's'} of {queue} back to their "
            f"queue{'' if task.rate is None else f', {task.rate} a second'}: a move task, shown below.")
    if not services.jobs_running():
        text += " It waits for the jobs process: none runs on this database now."
    return _done(request, queue, "success", text)


@ui_view("POST", needs=lambda request, queue, handle: ("change", messages_of(queue)))
def cancel_move(request: HtmxHttpRequest, queue: str, handle: str) -> HttpResponse:
    """Cancel a running move task of this queue (what it moved stays moved)."""
    queue = _queue(queue)
    if confirm.needed(request):
        return confirm.page(request, title=f"Cancel the move of {queue}", label="Cancel the move", danger=False,
                            question="Cancel this move? What it moved stays moved.",
                            back=reverse("forqapp-ui:queue", args=[queue]))
    try:
        task = services.move_info(handle)
        if task.source != queue:
            raise ForqError(errors.NOT_FOUND_MOVE, "no such move task of this queue", status=404)
        task = services.cancel_move(handle)
    except ForqError:
        return _done(request, queue, "warning", "That move task is not running (it ended, or was cancelled).")
    return _done(request, queue, "success", f"Cancelled the move of {queue}: {task.moved} message(s) moved.")
