"""The HTMX pages (login, the dashboard, a queue's page and its messages) and what every page
shares (:func:`ui_view`: staff, permissions, methods, headers, 503s); the schedules', tasks' and
keys' pages are :mod:`.schedules`', :mod:`.tasks`' and :mod:`.keys`'. Reads go through
:mod:`.queries` (ORM); every change goes through :mod:`forqapp.services` (validation, SQL in the
store, metrics). GET never changes anything.

An htmx request (that is not a history restore) gets the page's ``_partial`` template; anything
else gets the full page, so every URL also works as a plain link or after a reload. An action the
page confirms with ``hx-confirm`` asks on a page of its own when posted without htmx
(:mod:`.confirm`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any

from django.contrib import messages as flash
from django.contrib.auth import views as auth_views
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.views import defaults
from django.views.decorators.clickjacking import xframe_options_deny
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect, reswap
from django_htmx.middleware import HtmxDetails

from .. import errors, services, vocab
from ..conf import forq_settings, parse_addr
from ..errors import ForqError
from ..login_throttle import AdminLoginThrottleForm
from ..models import Status
from ..services import history
from ..services.policies import Policy
from ..tasks import browse
from ..utils import ms_to_datetime as _dt
from ..utils import now_ms as _now_ms
from ..utils import pretty_json as _pretty
from ..validation import message_id as valid_message_id
from ..validation import queue_name as valid_queue_name
from . import charts, confirm, csp, display, flow, freshness, movecard, queries, taskpolicy
from . import dashboard as dashboard_table

REFRESH_SECONDS = 5
logger = logging.getLogger("forqapp.ui")


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def _partial(request: HtmxHttpRequest) -> bool:
    return bool(request.htmx) and not request.htmx.history_restore_request


def staff_required(view):
    """Active staff only; anyone else goes to the login page (htmx: a full-page redirect)."""

    @wraps(view)
    def wrapper(request: HtmxHttpRequest, *args, **kwargs):
        user = request.user
        if user.is_active and user.is_staff:
            return view(request, *args, **kwargs)
        login_url = reverse("forqapp-ui:login")
        if request.htmx:  # back to the page it was sent from (HX-Current-URL), once logged in
            page = request.htmx.current_url_abs_path
            return HttpResponseClientRedirect(redirect_to_login(page, login_url)["Location"] if page else login_url)
        return redirect_to_login(request.get_full_path(), login_url)

    return wrapper


def same_origin_referrer(view):
    """``Referrer-Policy: same-origin`` on the UI (the API keeps ``no-referrer``): with
    ``no-referrer`` browsers send ``Origin: null`` on form posts and Django's CSRF check refuses
    them. Nothing leaves the site either way. ``project/settings.py`` sets ``same-origin`` for the
    whole UI listener (the admin too); this keeps forqapp's own pages working in a project that
    still sets ``no-referrer`` (system check forqapp.W010 warns about its admin)."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response

    return wrapper


# What a page or action needs: (action, model) — the Django permission the admin asks for the
# same thing (``view`` is met by ``change`` too, as in the admin) — or a function of the request and
# the URL's arguments that says it.
Needs = tuple[str, str] | Callable[..., tuple[str, str]]


def may(user: Any, action: str, model: str) -> bool:
    """Whether ``user`` has forqapp's ``<action>_<model>`` permission (``view``: or ``change``)."""
    if action == "view" and user.has_perm(f"forqapp.change_{model}"):
        return True
    return user.has_perm(f"forqapp.{action}_{model}")


def messages_of(queue: str) -> str:
    """The model whose permissions cover ``queue``'s messages: dead letters in a DLQ."""
    return "deadletter" if vocab.is_dlq(queue) else "message"


# The pages a staff user may land on, in the navigation's order: the first one their permissions
# allow is their home (the dashboard needs view_queue; a keys-only account goes to the keys).
HOMES = ((("view", "queue"), "forqapp-ui:dashboard"), (("view", "schedule"), "forqapp-ui:schedules"),
         (("view", "taskrecord"), "forqapp-ui:tasks"), (("view", "apikey"), "forqapp-ui:keys"))


def home_of(user: Any) -> str | None:
    """The URL of the first page ``user`` may see (None: none of them)."""
    return next((reverse(name) for (action, model), name in HOMES if may(user, action, model)), None)


def permission_required(needs: Needs, *, home: bool = False):
    """The staff user must also have the permission the admin asks for the same page or action
    (a staff account with no permissions sees the admin's 403 and must see it here too): else 403,
    on a page with the navigation (and Log out), and for htmx a flash saying what is missing
    (htmx swaps nothing on a 403). With ``home`` (the dashboard, where login lands), a user who
    may not see it goes to the first page they may see instead."""

    def decorate(view):
        @wraps(view)
        def wrapper(request: HtmxHttpRequest, *args, **kwargs):
            action, model = needs(request, **kwargs) if callable(needs) else needs
            if may(request.user, action, model):
                return view(request, *args, **kwargs)
            text = f"You do not have the permission to {action} {_words(model)}."
            if request.htmx:
                flash_context = {"flash": {"level": "error", "text": text}, "oob": True}
                return reswap(render(request, "forqapp/_flash.html", flash_context), "none")
            if home and request.method == "GET" and (url := home_of(request.user)):
                return redirect(url)
            return render(request, "forqapp/forbidden.html", {"text": text}, status=403)

        return wrapper

    return decorate


def _words(model: str) -> str:
    return {"deadletter": "dead letters", "taskrecord": "task results"}.get(model, f"{model}s")


UNAVAILABLE_TEXT = "Not done: {reason}. Nothing was changed; try again in a few seconds."


def unavailable_response(request: HttpRequest, reason: str) -> HttpResponse:
    """503 with ``Retry-After``, saying why (a full disk, a lock held past the busy timeout, a
    server out of reach); for htmx, the same words as a flash."""
    errors.say_unavailable(logger, request.path, reason)
    text = UNAVAILABLE_TEXT.format(reason=reason)
    if getattr(request, "htmx", False):  # htmx swaps nothing on a 5xx: the flash, out of band
        response = reswap(render(request, "forqapp/_flash.html", {"flash": {"level": "error", "text": text},
                                                                  "oob": True}), "none")
    else:
        response = render(request, "forqapp/unavailable.html", {"text": text}, status=503)
    response["Retry-After"] = "5"
    # Said above, once a second: not Django's "Service Unavailable" line a request as well, nor,
    # when this answers as handler500 (server_error), its error with the traceback: Django's
    # log_response skips a response marked logged.
    response._has_been_logged = True  # type: ignore[attr-defined]  # (django.utils.log.log_response)
    return response


def answers_unavailable(view):
    """A database that cannot serve is a 503 saying so, not a 500."""

    @wraps(view)
    def wrapper(request: HtmxHttpRequest, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except Exception as exc:  # Django's OperationalError, or sqlite3's from the store's own connection
            if (reason := errors.unavailable(exc)) is None:
                raise
            return unavailable_response(request, reason)

    return wrapper


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500`` for a project's URLconf (the demo project's sets it): a database that cannot
    serve — the admin saving a session or a change on a full disk — is a 503 that says so;
    anything else is Django's own 500 page."""
    exc = sys.exc_info()[1]
    if exc is not None and (reason := errors.unavailable(exc)) is not None:
        return csp.add_policy(unavailable_response(request, reason))
    return defaults.server_error(request)


def not_allowed(request: HttpRequest, methods: Sequence[str], *, logout: bool = False) -> HttpResponse:
    """405 with ``Allow``: a page that says so where a browser opened it (an action's address typed
    or bookmarked; for ``logout/``, a button that logs out), nothing for htmx."""
    allowed = ", ".join(methods)
    response: HttpResponse
    if getattr(request, "htmx", False) or request.method not in ("GET", "HEAD"):
        response = HttpResponseNotAllowed(methods)
    else:
        response = render(request, "forqapp/not_allowed.html", {"allowed": allowed, "logout": logout}, status=405)
    response["Allow"] = allowed
    return response


def allow_methods(*methods: str):
    """Django's ``require_http_methods``, with :func:`not_allowed`'s page for the others."""

    def decorate(view):
        @wraps(view)
        def inner(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if request.method not in methods:
                return not_allowed(request, methods)
            return view(request, *args, **kwargs)

        return inner

    return decorate


def ui_view(*methods: str, needs: Needs, home: bool = False):
    """Staff with ``needs``' permission only, the allowed methods, DENY framing, the staff pages'
    Content-Security-Policy, a cache key that varies on HX-Request, and a 503 when the database
    cannot serve."""

    def decorate(view):
        view = answers_unavailable(view)
        view = permission_required(needs, home=home)(view)
        view = staff_required(view)
        view = allow_methods(*methods)(view)
        view = vary_on_headers("HX-Request")(view)
        return csp.protect(same_origin_referrer(xframe_options_deny(view)))

    return decorate


def _queue(queue: str) -> str:
    try:
        return valid_queue_name(queue)
    except ForqError:
        raise Http404("no such queue") from None


def _message_id(message_id: str) -> str:
    try:
        return valid_message_id(message_id)
    except ForqError:
        raise Http404("no such message") from None


def _decorate(message, now: int):
    """Display values for a message row (times as datetimes, ready-but-not-due as delayed). A dead
    letter shows its real status, as the API and Spark say it (ready: consumable in its DLQ); the
    page marks the queue as a dead-letter queue instead."""
    message.received_dt = _dt(message.received_at)
    message.due_dt = _dt(message.process_after)
    message.updated_dt = _dt(message.updated_at)
    message.expires_dt = _dt(message.expires_after)
    message.started_dt = _dt(message.processing_started_at)
    leased = message.status == Status.PROCESSING
    message.lease_dt = message.due_dt if leased else None  # a delivery's process_after is its lease end
    message.lease_ended = leased and message.process_after <= now
    message.state = display.message_state(message.status, False, message.process_after, now)
    return message


def _details(message):
    """What only the opened row shows (fields the list's rows do not load)."""
    message.first_received_dt = _dt(message.first_received_at)
    try:
        attributes = message.attributes_dict
    except ValueError:  # not a JSON object: shown as stored
        attributes = {"(unreadable)": message.attributes}
    message.attrs = list(attributes.items()) if isinstance(attributes, dict) else []
    return message


# --- auth -------------------------------------------------------------------------------------

# Both write (a new session, a failure counted, a session deleted): a 503 on a full disk, with or
# without the project's handler500.
login = csp.protect(same_origin_referrer(xframe_options_deny(answers_unavailable(
    auth_views.LoginView.as_view(
        template_name="forqapp/login.html",
        authentication_form=AdminLoginThrottleForm,  # active staff only; failed logins throttled
        next_page=reverse_lazy("forqapp-ui:dashboard"),
    )
))))


class _LogoutView(auth_views.LogoutView):
    """Django's logout (a POST), and for a browser that opens ``logout/`` a page with the button."""

    def http_method_not_allowed(self, request, *args, **kwargs):
        return not_allowed(request, ["POST"], logout=True)


logout = csp.protect(same_origin_referrer(xframe_options_deny(answers_unavailable(
    _LogoutView.as_view(next_page=reverse_lazy("forqapp-ui:login"))
))))


# --- dashboard --------------------------------------------------------------------------------


def _overview_context(request: HttpRequest, now: int) -> dict:
    """The cards count every queue; the table lists a page of them (:mod:`.dashboard`)."""
    overview = freshness.counts("overview", lambda: queries.overview(_now_ms()),
                                placeholder=queries.Overview(counting=True))
    listing = dashboard_table.Listing.parse(request.GET)
    return {"overview": overview, "table": dashboard_table.table(overview, listing, now),
            "refresh": REFRESH_SECONDS, "now": _dt(now), "api_base": _api_base()}


def _api_base() -> str:
    """The API's URL as a client on this machine reaches it (the empty dashboard's example)."""
    try:
        host, port = parse_addr(forq_settings.FORQ_API_ADDR)
    except ValueError:
        return "http://localhost:8080"
    host = "localhost" if host in ("0.0.0.0", "127.0.0.1", "::") else host  # noqa: S104 - a name, not a bind
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


@ui_view("GET", needs=("view", "queue"), home=True)
def dashboard(request: HtmxHttpRequest) -> HttpResponse:
    context = _overview_context(request, _now_ms())
    if _partial(request):
        return render(request, "forqapp/_overview.html", context)
    return render(request, "forqapp/dashboard.html", context)


# --- queue page -------------------------------------------------------------------------------


def _stats_context(queue: str, now: int) -> dict:
    """The queue's counts by state; a regular queue's with its DLQ's (one grouped read for both)."""
    names = [queue] if vocab.is_dlq(queue) else [queue, vocab.dlq_of(queue)]
    stats = freshness.counts(("queue", queue), lambda: queries.queue_stats(_now_ms(), names))
    return {
        "stats": stats.get(queue) or queries.QueueStats(queue),
        "dlq_stats": None if vocab.is_dlq(queue) else stats.get(names[1]) or queries.QueueStats(names[1]),
    }


def _policy_context(queue: str, info: services.QueueInfo | None = None,
                    resolved: tuple[Policy, bool] | None = None) -> dict:
    """The policy in force (a DLQ shows its queue's), each field marked as the queue's own or the
    global setting, and the paused state: from ``info`` (what a change returned), ``resolved`` (the
    queue's row, read already) or the queue's row."""
    if info is not None:
        policy, overrides, paused, configured = info.policy, info.overrides, info.paused, True
    else:
        pol, configured = resolved or queries.queue_policy(queue)
        policy, overrides, paused = pol.public(), pol.overrides, pol.paused
    items = display.policy_items(policy, overrides)
    backends = [] if vocab.is_dlq(queue) else browse.queue_retries(queue)  # a tasks queue: the backend's retries
    return {"policy_items": taskpolicy.apply(items, backends), "task_notes": taskpolicy.notes(backends),
            "paused": paused, "configured": configured}


def _flow_context(queue: str, stats: queries.QueueStats, pol: Policy) -> dict:
    """A regular queue's flow control: in flight against its limit, its rate, the claims its
    limits held back since this server started (the metrics' counter: no query)."""
    if vocab.is_dlq(queue):
        return {"flow": None}
    return {"flow": flow.of(queue, pol, stats.processing), "since": flow.SINCE, "refresh": REFRESH_SECONDS}


GROUPS_SHOWN = 20  # the queue page's busiest message groups


def _groups_context(queue: str, pol: Policy, now: int) -> dict:
    """A regular queue's busiest message groups (most messages first) and its group policy; the
    card shows when the queue has groups or a group limit."""
    if vocab.is_dlq(queue):
        return {"groups": None}
    rows = display.group_rows(services.busiest_groups(queue, GROUPS_SHOWN), now)
    limited = pol.group_concurrency is not None or pol.group_rate is not None
    return {"groups": rows if rows or limited else None, "groups_shown": GROUPS_SHOWN,
            "group_policy": display.group_policy(pol.group_concurrency, pol.group_rate)}


def _page_context(queue: str, now: int, before: str | None = None) -> dict:
    rows = queries.page(queue, before)
    more = len(rows) > queries.PAGE_SIZE
    rows = [_decorate(m, now) for m in rows[: queries.PAGE_SIZE]]
    return {
        "queue": queue,
        "is_dlq": vocab.is_dlq(queue),
        "rows": rows,
        "next_before": rows[-1].id if more and rows else None,
    }


def _queue_context(queue: str, now: int) -> dict:
    is_dlq = vocab.is_dlq(queue)
    series = history.depth_series([queue], now=now, buckets=288).get(queue)
    resolved = queries.queue_policy(queue)
    stats = _stats_context(queue, now)
    return {
        **stats,
        **_page_context(queue, now),
        **_policy_context(queue, resolved=resolved),
        **_flow_context(queue, stats["stats"], resolved[0]),
        **_groups_context(queue, resolved[0], now),
        "regular_queue": vocab.base_of(queue) if is_dlq else queue,
        "dlq_name": queue if is_dlq else vocab.dlq_of(queue),
        **(movecard.card_context(queue) if is_dlq else {"moves": None}),
        "chart": charts.chart(series, label=f"{queue} depth, last 24 hours",
                              css="line-dlq" if is_dlq else "line-queue",
                              minutes=dashboard_table.minutes_to_next_sample(now) + (0 if series else 5)),
    }


@ui_view("GET", needs=lambda request, queue: ("view", messages_of(queue)))
def queue_page(request: HtmxHttpRequest, queue: str) -> HttpResponse:
    queue = _queue(queue)
    context = _queue_context(queue, _now_ms())
    if _partial(request):
        return render(request, "forqapp/_queue_body.html", context)
    return render(request, "forqapp/queue.html", context)


@ui_view("GET", needs=lambda request, queue: ("view", messages_of(queue)))
def queue_flow(request: HtmxHttpRequest, queue: str) -> HttpResponse:
    """The queue page's flow-control card, refreshed by itself (htmx); empty without limits."""
    queue = _queue(queue)
    if not _partial(request):
        return redirect("forqapp-ui:queue", queue=queue)
    stats = _stats_context(queue, _now_ms())["stats"]
    context = {"queue": queue, **_flow_context(queue, stats, queries.queue_policy(queue)[0])}
    return render(request, "forqapp/_queue_flow.html", context)


@ui_view("GET", "DELETE", "POST", needs=lambda request, queue: (
    ("view", messages_of(queue)) if request.method == "GET" else ("delete", messages_of(queue))))
def queue_messages(request: HtmxHttpRequest, queue: str) -> HttpResponse:
    """GET: the next page of rows ("load more"). DELETE (or POST): delete every message of a DLQ."""
    queue = _queue(queue)
    if request.method == "GET":
        before = request.GET.get("before")
        if before:
            before = _message_id(before)
        if not _partial(request):
            return redirect("forqapp-ui:queue", queue=queue)
        return render(request, "forqapp/_message_rows.html", _page_context(queue, _now_ms(), before))
    return _bulk(request, queue, "delete")


@ui_view("GET", "DELETE", "POST", needs=lambda request, queue, message_id: (
    ("view", messages_of(queue)) if request.method == "GET" else ("delete", messages_of(queue))))
def message_detail(request: HtmxHttpRequest, queue: str, message_id: str) -> HttpResponse:
    """GET: the message row, opened (or closed with ``?closed=1``); a peek, never a consume.
    DELETE (or POST): delete this DLQ message."""
    queue, message_id = _queue(queue), _message_id(message_id)
    if request.method != "GET":
        return _single(request, queue, message_id, "delete")
    # Any: the row also carries display attributes for the template (here and in _decorate).
    message: Any = queries.message(queue, message_id)
    if message is None:
        raise Http404("no such message")
    now = _now_ms()
    _decorate(message, now)
    opened = request.GET.get("closed") != "1"
    if opened:
        _details(message)
        message.pretty, message.is_json = _pretty(message.content)
    message.preview = message.content[: queries.PREVIEW_CHARS]
    message.size = len(message.content)
    context = {"m": message, "queue": queue, "is_dlq": vocab.is_dlq(queue), "open": opened}
    if not _partial(request):
        return render(request, "forqapp/message.html", context)
    return render(request, "forqapp/_message.html", context)


@ui_view("POST", needs=lambda request, queue, message_id: ("change", messages_of(queue)))
def requeue_message(request: HtmxHttpRequest, queue: str, message_id: str) -> HttpResponse:
    """Requeue one dead letter, synchronously (one row; "Requeue all" is a move task: :mod:`.moves`)."""
    return _single(request, _queue(queue), _message_id(message_id), "requeue")


# --- pause and resume -------------------------------------------------------------------------


@ui_view("POST", needs=("change", "queue"))
def pause_queue(request: HtmxHttpRequest, queue: str) -> HttpResponse:
    queue = _queue(queue)
    if not vocab.is_dlq(queue) and confirm.needed(request):
        return confirm.page(request, title=f"Pause {queue}", label="Pause", danger=False,
                            question=f"Pause {queue}? Receives get nothing until it is resumed; produces are "
                                     "still accepted.", back=reverse("forqapp-ui:queue", args=[queue]))
    return _set_paused(request, queue, True)


@ui_view("POST", needs=("change", "queue"))
def resume_queue(request: HtmxHttpRequest, queue: str) -> HttpResponse:
    return _set_paused(request, _queue(queue), False)


def _set_paused(request: HtmxHttpRequest, queue: str, paused: bool) -> HttpResponse:
    """Through ``services.configure_queue`` (creating the queue's row if it has none). A DLQ is
    not paused on its own: its messages are never received."""
    if vocab.is_dlq(queue):
        level, text, info = "error", "A dead-letter queue cannot be paused; pause its queue.", None
    else:
        info = services.configure_queue(queue, paused=paused)
        freshness.invalidate()
        level = "success"
        text = (f"Paused {queue}: receives get nothing until it is resumed; produces are still accepted."
                if paused else f"Resumed {queue}: receives get its messages again.")
    if not request.htmx:
        getattr(flash, level)(request, text)
        return redirect("forqapp-ui:queue", queue=queue)
    context = {"queue": queue, "is_dlq": vocab.is_dlq(queue), "regular_queue": vocab.base_of(queue),
               **_policy_context(queue, info), "flash": {"level": level, "text": text}, "oob": True}
    response = render(request, "forqapp/_action_policy.html", context)
    return reswap(response, "none") if info is None else response


# --- DLQ actions ------------------------------------------------------------------------------


def _plural(n: int) -> str:
    return f"{n} message" if n == 1 else f"{n} messages"


def _run(queue: str, message_id: str | None, action: str) -> tuple[int, str, str]:
    """Do the action through the services; returns (count, flash level, text)."""
    if not vocab.is_dlq(queue):
        return 0, "error", "Requeue and delete are for dead-letter queues only."
    target = vocab.base_of(queue)
    if action == "requeue":
        n = services.requeue(queue, message_id)
        text = f"Requeued {_plural(n)} to {target}."
    else:
        n = services.delete_dead(queue, message_id)
        text = f"Deleted {_plural(n)} from {queue}."
    freshness.invalidate()
    if n == 0:
        gone = "it was already requeued or deleted, or is" if message_id else "messages in processing are"
        return 0, "warning", f"{text[:-1]}: {gone} left alone."
    return n, "success", text


def _ask(request: HtmxHttpRequest, queue: str, message_id: str | None, action: str) -> HttpResponse:
    """The confirmation page of a DLQ action posted without htmx (the page's ``hx-confirm`` texts)."""
    if action == "requeue":  # one message (Requeue all is a move task: .moves)
        title, label = f"Requeue message {message_id}", "Requeue"
        question = f"Requeue message {message_id} back to {vocab.base_of(queue)}?"
    else:
        what = f"message {message_id}" if message_id else f"all messages of {queue}"
        question = f"Permanently delete {what}? This cannot be undone."
        title, label = f"Delete {what}", "Delete" if message_id else "Delete all"
    return confirm.page(request, title=title, question=question, label=label, danger=action == "delete",
                        back=reverse("forqapp-ui:queue", args=[queue]))


def _single(request: HtmxHttpRequest, queue: str, message_id: str, action: str) -> HttpResponse:
    if vocab.is_dlq(queue) and confirm.needed(request):
        return _ask(request, queue, message_id, action)
    n, level, text = _run(queue, message_id, action)
    if not request.htmx:
        getattr(flash, level)(request, text)
        return redirect("forqapp-ui:queue", queue=queue)
    now = _now_ms()
    context = {"queue": queue, "flash": {"level": level, "text": text}, "count": n, "message_id": message_id,
               "oob": True, **_stats_context(queue, now)}
    if n == 0 and level == "error":
        response = render(request, "forqapp/_flash.html", context)
        response["HX-Reswap"] = "none"
        return response
    # The row goes away (or is refreshed when nothing changed); counts and the message update out of band.
    message: Any = queries.message(queue, message_id)  # with display attributes, as in message_detail
    if message is not None:
        context.update(m=_decorate(message, now), is_dlq=True, open=False)
        message.preview = message.content[: queries.PREVIEW_CHARS]
        message.size = len(message.content)
    return render(request, "forqapp/_action_single.html", context)


def _bulk(request: HtmxHttpRequest, queue: str, action: str) -> HttpResponse:
    if vocab.is_dlq(queue) and confirm.needed(request):
        return _ask(request, queue, None, action)
    n, level, text = _run(queue, None, action)
    if not request.htmx:
        getattr(flash, level)(request, text)
        return redirect("forqapp-ui:queue", queue=queue)
    now = _now_ms()
    context = {**_stats_context(queue, now), **_page_context(queue, now),
               "flash": {"level": level, "text": text}, "count": n, "oob": True}
    return render(request, "forqapp/_action_bulk.html", context)
