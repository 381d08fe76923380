"""Django admin: queues (policy, state, counts, flow control; pause, resume, purge), schedules
(edit, pause, resume, run now, delete), every message, and the dead letters on their own list.

Nothing here writes to the database itself: a queue's policy is saved by
``services.configure_queue`` after the form checked it with ``validation.policy`` (the rules of
``forqapp.configure_queue``, the v2 API and ``FORQ_QUEUES``); pause, resume, purge, requeue and delete
are admin actions that call :mod:`forqapp.services`, the destructive ones behind a confirmation page.
A schedule is checked by ``schedules.validate`` and saved by ``schedules.schedule``; pause, resume,
run now and delete call :mod:`forqapp.schedules` too. Messages are read-only. Anything from a message or a queue is escaped (``format_html``).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import mark_safe

from . import admin_cells, errors, limits, schedules, services, validation, vocab
from .errors import ForqError
from .keys import admin as keys_admin  # noqa: F401 - registers the API keys' admin
from .models import DeadLetter, Message, Queue, Schedule, Status
from .tasks import admin as tasks_admin  # noqa: F401 - registers the task results' admin
from .ui import display, flow, freshness, queries, scheduling
from .utils import ms_to_datetime, now_ms, pretty_json

ERROR_PREVIEW = 80  # characters of last_error in the lists


def _dt(ms: int | None) -> str:
    when = ms_to_datetime(ms)
    return "—" if when is None else when.strftime("%Y-%m-%d %H:%M:%S UTC")


class QueueFilter(admin.SimpleListFilter):
    title = "queue"
    parameter_name = "queue"

    def lookups(self, request, model_admin):
        names = freshness.counts("queue-names", queries.queue_names)
        if model_admin.model is DeadLetter:
            names = [n for n in names if vocab.is_dlq(n)]
        return [(n, n) for n in names]

    def queryset(self, request, queryset):
        return queryset.in_queue(self.value()) if self.value() else queryset


class DlqFilter(admin.SimpleListFilter):
    title = "dead-letter queue"
    parameter_name = "dlq"

    def lookups(self, request, model_admin):
        if not model_admin.may_see_dead_letters(request):
            return []  # no choice to make: the list holds no dead letters (the filter is hidden)
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.dlq() if self.value() == "yes" else queryset.regular()
        return queryset


class DeadLetterStatusFilter(admin.SimpleListFilter):
    """The statuses dead letters have now (most are ready, waiting for a requeue; one received from
    its DLQ is processing): never a choice that lists nothing."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        dead = DeadLetter.objects.order_by()
        return [(str(s.value), s.label) for s in Status if dead.filter(status=s).exists()]

    def queryset(self, request, queryset):
        try:
            return queryset.filter(status=Status(int(self.value()))) if self.value() else queryset
        except ValueError:
            return queryset.none()


def _confirm(modeladmin, request, queryset, *, action: str, verb: str, question: str):
    """Django's intermediate confirmation page for an action (as ``delete_selected`` has)."""
    dead = list(queryset.dlq().only("id", "queue")[:1000])
    skipped = queryset.regular().count()
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Are you sure?",
        "opts": modeladmin.model._meta,
        "queryset": dead,
        "skipped": skipped,
        "action": action,
        "verb": verb,
        "question": question,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
    }
    return TemplateResponse(request, "forqapp/admin/confirm_action.html", context)


def _apply(modeladmin, request, queryset, fn, done: str) -> None:
    count = 0
    skipped = 0
    for message_id, queue, is_dlq in queryset.values_list("id", "queue", "is_dlq").order_by().iterator():
        if not is_dlq or not vocab.is_dlq(queue):
            skipped += 1
            continue
        count += fn(queue, message_id)
    modeladmin.message_user(request, f"{done} {count} message{'s' if count != 1 else ''}.", messages.SUCCESS)
    if skipped:
        modeladmin.message_user(
            request, f"Skipped {skipped} not in a dead-letter queue (requeue and delete are DLQ only).",
            messages.WARNING,
        )


@admin.action(description="Requeue selected dead letters to their queue", permissions=["forq_change"])
def requeue_messages(modeladmin, request, queryset):
    if request.POST.get("post") != "yes":
        return _confirm(modeladmin, request, queryset, action="requeue_messages", verb="Requeue",
                        question="These dead letters go back to their queue, ready, attempts reset:")
    _apply(modeladmin, request, queryset, services.requeue, "Requeued")
    return None


@admin.action(description="Delete selected dead letters", permissions=["forq_delete"])
def delete_messages(modeladmin, request, queryset):
    if request.POST.get("post") != "yes":
        return _confirm(modeladmin, request, queryset, action="delete_messages", verb="Delete",
                        question="These dead letters are deleted for good; this cannot be undone:")
    _apply(modeladmin, request, queryset, services.delete_dead, "Deleted")
    return None


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    # Fits 1366 px beside the sidebars: a short id, a compact date, the failure cut to a few lines
    # (each whole in a tooltip and on the message's page); priority and attempts are narrow.
    list_display = ["short_id", "queue_cell", "message_status", "priority", "attempts", "received_on", "failure"]
    list_filter = [QueueFilter, "status", DlqFilter]
    search_fields = ["id"]
    search_help_text = "A message id (exact)."
    ordering = ["-id"]
    list_per_page = 50
    show_full_result_count = False
    actions = [requeue_messages, delete_messages]
    fields = ["id", "queue", "is_dlq", "message_status", "priority", "sequence", "attempts", "due", "lease_end",
              "received", "first_received", "updated", "expires", "processing_started", "dedup_id",
              "attributes_table", "failure_reason", "last_error", "pretty_content"]
    # mypy types `fields` as the base class's field groups; it holds plain names here.
    readonly_fields = fields  # type: ignore[assignment]
    list_title = "Messages"

    @property
    def media(self):
        return super().media + admin_cells.MEDIA

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {"title": self.list_title, **(extra_context or {})})

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            return queryset.filter(id=str(uuid.UUID(term))), False  # primary-key lookup
        except ValueError:
            return queryset.none(), False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # deletes go through the "delete" action (services), never the ORM

    # Dead letters are the DeadLetter model's, on either list: seeing them needs its view (or
    # change) permission, and the actions, which act on dead letters only, its change and delete
    # permissions — as the UI pages ask (a user with the message permissions alone could requeue
    # and delete dead letters here).
    def may_see_dead_letters(self, request) -> bool:
        from .ui.views import may

        return may(request.user, "view", "deadletter")

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        return queryset if self.may_see_dead_letters(request) else queryset.regular()

    def has_forq_change_permission(self, request):
        return request.user.has_perm("forqapp.change_deadletter")

    def has_forq_delete_permission(self, request):
        return request.user.has_perm("forqapp.delete_deadletter")

    @admin.display(description="status", ordering="status")
    def message_status(self, obj):
        """The stored status, as the API and Spark say it (a dead letter is ready, waiting for a
        requeue or a delete: its queue and failure say it is dead); a ready message not yet due
        and a lease that ended say so."""
        now = now_ms()
        status = Status(obj.status).label
        if obj.status == Status.PROCESSING and obj.process_after <= now:
            return format_html('{} <span class="quiet" title="{}">(lease ended)</span>', status,
                               "The next receive takes it.")
        if obj.status == Status.READY and obj.process_after > now:
            return format_html('{} <span class="quiet" title="due {}">(delayed)</span>', status,
                               admin_cells.full_time(obj.process_after))
        return status

    short_id = admin_cells.column("id", admin_cells.short_id, "id")
    queue_cell = admin_cells.column("queue", admin_cells.breakable, "queue")
    received_on = admin_cells.column("received_at", admin_cells.when, "received")

    @admin.display(description="failure", ordering="failure_reason")
    def failure(self, obj):
        """Why it failed (in words; the stored code in the tooltip) over the consumer's own error, cut
        to a few lines (whole in its tooltip and on the message's page)."""
        if not obj.failure_reason and not obj.last_error:
            return "—"
        reason = (format_html('<strong class="forq-reason" title="{}">{}</strong>', obj.failure_reason,
                              obj.failure_reason.replace("_", " ")) if obj.failure_reason else "")
        return format_html("{}{}", reason, admin_cells.clipped(obj.last_error, ERROR_PREVIEW, css="forq-error",
                                                                empty=""))

    @admin.display(description="due", ordering="process_after")
    def due(self, obj):
        return _dt(obj.process_after)

    @admin.display(description="received", ordering="received_at")
    def received(self, obj):
        return _dt(obj.received_at)

    @admin.display(description="updated")
    def updated(self, obj):
        return _dt(obj.updated_at)

    @admin.display(description="expires")
    def expires(self, obj):
        return _dt(obj.expires_after)

    @admin.display(description="processing started")
    def processing_started(self, obj):
        return _dt(obj.processing_started_at)

    @admin.display(description="first delivered")
    def first_received(self, obj):
        return _dt(obj.first_received_at)

    @admin.display(description="lease end")
    def lease_end(self, obj):
        """While in processing, the delivery's lease end (``process_after``); after it, the next
        receive takes the message again."""
        end = obj.lease_expires_at
        if end is None:
            return "— (not in processing)"
        if end <= now_ms():
            return f"{_dt(end)} (ended: the next receive takes it)"
        return _dt(end)

    @admin.display(description="attributes")
    def attributes_table(self, obj):
        try:
            attributes = obj.attributes_dict
        except ValueError:
            return obj.attributes  # not a JSON object: as stored (escaped by the admin)
        if not attributes:
            return "—"
        rows = format_html_join("", "<tr><th><code>{}</code></th><td><code>{}</code></td></tr>",
                                attributes.items())
        return format_html('<table class="forq-attributes">{}</table>', rows)

    @admin.display(description="content")
    def pretty_content(self, obj):
        text, _ = pretty_json(obj.content)
        return format_html('<pre class="forq-content">{}</pre>', text)


@admin.register(DeadLetter)
class DeadLetterAdmin(MessageAdmin):
    # Attempts start again at 0 in a DLQ, and the priority is the queue's business: the failure and
    # when the DLQ's retention drops it instead.
    list_display = ["short_id", "queue_cell", "message_status", "failure", "received_on", "expires_on"]
    list_filter = [QueueFilter, DeadLetterStatusFilter, "failure_reason"]
    list_title = "Dead letters"

    # When the DLQ's retention deletes it (unless requeued or deleted first).
    expires_on = admin_cells.column("expires_after", admin_cells.when, "dropped")


# --- queues -----------------------------------------------------------------------------------

POLICY_FIELDS = tuple(validation.POLICY_FIELDS)  # configure_queue's keywords, "paused" included
DURATIONS = ("visibility_timeout", "retention", "dlq_retention", "dedup_window")
_DURATION_COLUMNS = {name: column for name, (column, _) in validation.POLICY_FIELDS.items() if name in DURATIONS}


def _global(field: str) -> str:
    return display.value(field, queries.policy_of(None).public().get(field))


class LooseField(forms.CharField):
    """A policy field this form has no special field for (a newer one): JSON if it parses (``10``,
    ``true``), else the text (``10/s``); ``validation.policy`` judges it."""

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if not text:
            return None
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            return text


class QueueForm(forms.ModelForm):
    """A queue's policy. A blank field follows the global setting; a value is checked by
    ``validation.policy`` (``configure_queue``'s rules) and saved through ``configure_queue``."""

    max_attempts = forms.CharField(
        required=False, max_length=20, label="Max attempts",
        help_text='Deliveries before a message goes to the DLQ: 1 to 1000000, or "unlimited" (0 means unlimited too).')
    backoff = forms.CharField(
        required=False, max_length=2000, label="Backoff", widget=forms.TextInput(attrs={"size": 60}),
        help_text=format_html("Delays in ms by attempt, the last one repeating (<code>{}</code> or a JSON list), "
                              "or exponential: <code>{}</code>.", "1000, 5000, 30000",
                              '{"base_ms": 1000, "max_ms": 300000, "jitter": 0.2}'))
    visibility_timeout = forms.FloatField(
        required=False, label="Visibility timeout (s)", help_text="The lease a receive takes: 0 to 43200 seconds.")
    retention = forms.FloatField(
        required=False, label="Retention (s)", help_text="How long a message may wait in the queue (seconds).")
    dlq_retention = forms.FloatField(
        required=False, label="DLQ retention (s)", help_text="How long a message stays in the DLQ (seconds).")
    max_length = forms.IntegerField(
        required=False, label="Max length", help_text="A produce beyond it is refused (503, queue.full).")
    ordering = forms.ChoiceField(
        required=False, label="Ordering", choices=[("", "—"), ("fifo", "FIFO"), ("lifo", "LIFO"), ("due", "by due time")],
        help_text="Within a priority: oldest (FIFO) or newest (LIFO) first, or by due time.")
    dedup_window = forms.FloatField(
        required=False, label="Dedup window (s)", help_text="How long a dedup id is remembered (seconds).")
    max_in_flight = forms.IntegerField(
        required=False, label="Max in flight",
        help_text="Deliveries leased at once; receives beyond it get nothing until one settles.")
    rate = forms.CharField(
        required=False, max_length=32, label="Rate",
        help_text=format_html("At most this many receives: <code>{}</code>, <code>{}</code>, <code>{}</code>, "
                              "<code>{}</code> (or <code>{}</code>: one per 2.5 seconds).",
                              "10/s", "600/m", "100/h", "1000/d", "1/2.5s"))
    paused = forms.BooleanField(
        required=False, label="Paused", help_text="Receives get nothing; produces are still accepted.")

    class Meta:
        model = Queue
        fields = ["name"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in POLICY_FIELDS:
            if name not in self.fields:
                self.fields[name] = LooseField(required=False, label=display.label(name), max_length=200,
                                               help_text=next((h for n, _, h in display.FIELDS if n == name), ""))
        ordering = self.fields["ordering"]
        assert isinstance(ordering, forms.ChoiceField)  # noqa: S101 - declared above
        ordering.choices = [("", f"— ({_global('ordering')})"), ("fifo", "FIFO"), ("lifo", "LIFO"), ("due", "by due time")]
        for name in POLICY_FIELDS:
            if name in self.fields and name != "paused":
                field = self.fields[name]
                field.help_text = format_html("{} Blank: the global setting ({}).", field.help_text, _global(name))
        if self.instance.pk is not None:
            for name in POLICY_FIELDS:
                # What the page showed travels with the form, so only the fields this user edited
                # are saved: a pause (or any change) made meanwhile elsewhere is not undone.
                self.fields[name].show_hidden_initial = True
            row = self.instance
            self.initial.setdefault("max_attempts", {None: "", 0: "unlimited"}.get(row.max_attempts, row.max_attempts))
            self.initial.setdefault("backoff", row.backoff or "")
            for name, column in _DURATION_COLUMNS.items():
                ms = getattr(row, column)
                self.initial.setdefault(name, None if ms is None else ms / 1000)
            self.initial.setdefault("max_length", row.max_length)
            self.initial.setdefault("max_in_flight", row.max_in_flight)
            self.initial.setdefault("rate", row.rate or "")
            self.initial.setdefault("ordering", row.ordering or "")
            self.initial.setdefault("paused", row.paused)
            for name in POLICY_FIELDS:
                if isinstance(self.fields[name], LooseField):
                    column = validation.POLICY_FIELDS[name][0]
                    stored = getattr(row, column, None)
                    self.initial.setdefault(name, stored / 1000 if column.endswith("_ms") and stored is not None
                                            else stored)

    def clean_name(self) -> str:
        try:
            return validation.queue_name(self.cleaned_data.get("name"), produce=True)
        except ForqError as e:
            raise forms.ValidationError(str(e)) from None

    def clean_max_attempts(self) -> int | str | None:
        text = (self.cleaned_data.get("max_attempts") or "").strip().lower()
        if not text:
            return None
        if text in ("unlimited", "0", "∞"):
            return "unlimited"
        try:
            return int(text)
        except ValueError:
            raise forms.ValidationError('An integer, or "unlimited".') from None

    def clean_backoff(self) -> Any:
        text = (self.cleaned_data.get("backoff") or "").strip()
        if not text:
            return None
        if text[0] in "[{":
            try:
                return json.loads(text)
            except (ValueError, RecursionError):
                raise forms.ValidationError("Not valid JSON.") from None
        try:
            return [int(part) for part in text.split(",")]
        except ValueError:
            raise forms.ValidationError("Delays in ms, separated by commas, or JSON.") from None

    def policy_values(self) -> dict[str, Any]:
        """The fields to save: on a new queue those given, on a queue those the user changed
        from what the page showed. None: the global setting."""
        adding = self.instance._state.adding
        values = {}
        for name in POLICY_FIELDS:
            if name not in self.fields or (not adding and name not in self.changed_data):
                continue
            value = self.cleaned_data.get(name)
            if value is None or value == "":
                value = None
            if adding and (value is None or value is False):  # (0 is a value: a 0 s visibility)
                continue
            values[name] = value
        return values

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean()
        if not self.errors:
            try:
                validation.policy(self.policy_values())
            except ForqError as e:
                text = str(e)
                field = next((n for n in sorted(POLICY_FIELDS, key=len, reverse=True)
                              if re.search(rf"\b{n}\b", text)), None)
                self.add_error(field if field in self.fields else None, text)
        if not self.errors and self.instance._state.adding and (refused := limits.full()) is not None:
            self.add_error(None, str(refused))  # FORQ_MAX_QUEUES (the save itself enforces it)
        return cleaned


def _policy_html(public: dict[str, Any], overrides: dict[str, Any], *, inline: bool = False) -> str:
    """Each field: the queue's own value in bold, the global setting's grey. ``inline``: one
    paragraph (the list), else a line each (the change page)."""
    items = display.policy_items(public, overrides)
    return format_html_join(
        " · " if inline else "", "<span>{}: {}</span>" if inline else "<div>{}: {}</div>",
        ((item.label, format_html('<strong title="set on this queue">{}</strong>', item.value) if item.overridden
          else format_html('<span class="quiet" title="the global setting">{}</span>', item.value))
         for item in items),
    )


_REASON_HELP = {"concurrency": "held back by max in flight (every slot taken)",
                "rate": "held back by the rate (the next slot had not come)"}


def _stats(names: list[str]) -> dict[str, queries.QueueStats]:
    """Counts of these queues and their DLQs, in two grouped reads."""
    return queries.queue_stats(now_ms(), [n for name in names for n in (name, vocab.dlq_of(name))])


def _confirm_purge(modeladmin, request, queryset):
    names = list(queryset.values_list("name", flat=True)[:1000])
    stats = _stats(names)
    rows = [(name, stats.get(name, queries.QueueStats(name)).total) for name in names]
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Are you sure?",
        "opts": modeladmin.model._meta,
        "queues": rows,
        "total": sum(n for _, n in rows),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
    }
    return TemplateResponse(request, "forqapp/admin/confirm_purge.html", context)


def _names(queryset) -> list[str]:
    return list(queryset.order_by("name").values_list("name", flat=True))


def _listed(names: list[str]) -> str:
    return ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")


def _set_paused(modeladmin, request, queryset, paused: bool) -> None:
    names = _names(queryset)
    for name in names:
        services.configure_queue(name, paused=paused)
    freshness.invalidate()
    verb = "Paused" if paused else "Resumed"
    modeladmin.message_user(
        request, f"{verb} {len(names)} queue{'s' if len(names) != 1 else ''}: {_listed(names)}.", messages.SUCCESS)


@admin.action(description="Pause selected queues (receives get nothing; produces are accepted)",
              permissions=["change"])
def pause_queues(modeladmin, request, queryset):
    _set_paused(modeladmin, request, queryset, True)


@admin.action(description="Resume selected queues", permissions=["change"])
def resume_queues(modeladmin, request, queryset):
    _set_paused(modeladmin, request, queryset, False)


@admin.action(description="Purge selected queues (delete all their messages)", permissions=["purge"])
def purge_queues(modeladmin, request, queryset):
    if request.POST.get("post") != "yes":
        return _confirm_purge(modeladmin, request, queryset)
    names = _names(queryset)
    deleted = sum(services.purge(name) for name in names)
    freshness.invalidate()
    modeladmin.message_user(
        request, f"Purged {len(names)} queue{'s' if len(names) != 1 else ''} ({_listed(names)}): "
        f"deleted {deleted} message{'s' if deleted != 1 else ''}.", messages.SUCCESS)
    return None


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    form = QueueForm
    # The counts first, the policy last: it wraps in the width they leave (the queue's own settings
    # only, the whole policy in a tooltip and on the queue's page).
    list_display = ["name", "paused", "ready", "delayed", "in_flight", "failed", "dlq", "throttled", "policy"]
    search_fields = ["name"]
    search_help_text = "A queue name (or part of it)."
    ordering = ["name"]
    list_per_page = 50
    show_full_result_count = False
    actions = [pause_queues, resume_queues, purge_queues]
    info_fields = ["counts", "flow_control", "resolved_policy", "last_sequence_number", "created", "updated", "links"]

    @property
    def media(self):
        return super().media + admin_cells.MEDIA

    def get_fieldsets(self, request, obj=None):
        policy = ("Policy", {
            "fields": list(POLICY_FIELDS),
            "description": "A blank field follows the global setting (FORQ_* settings); saving goes "
                           "through forqapp.configure_queue, with its checks.",
        })
        if obj is None:
            return [(None, {"fields": ["name"]}), policy]
        if not self.has_change_permission(request, obj):
            return [(None, {"fields": ["name", "paused", *self.info_fields]})]
        return [(None, {"fields": ["name", *self.info_fields]}), policy]

    def get_readonly_fields(self, request, obj=None):
        return [] if obj is None else ["name", *self.info_fields]

    def get_form(self, request, obj=None, change=False, **kwargs):
        # The policy fields are the form's own; the only model field it sets is a new queue's name.
        kwargs["fields"] = ["name"] if obj is None else []
        return super().get_form(request, obj, change, **kwargs)

    def save_model(self, request, obj, form, change):
        values = form.policy_values()
        if values or not change:
            services.configure_queue(obj.name, **values)
        freshness.invalidate()

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        """A refusal the form could not foresee (another process took the last place under
        FORQ_MAX_QUEUES between the form's check and the save) is said on the form's page, not a 500."""
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ForqError as exc:
            if exc.code != errors.QUEUE_LIMIT:
                raise
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def save_related(self, request, form, formsets, change):
        pass  # a queue has no related objects; the form saved nothing itself

    def has_delete_permission(self, request, obj=None):
        return False  # deleting a queue (and its messages) is services.delete_queue / the v2 API

    def has_purge_permission(self, request):
        """Purge deletes messages: the message delete permission."""
        return request.user.has_perm(f"{Message._meta.app_label}.delete_{Message._meta.model_name}")

    # -- the list: each page's policies resolved in Python, its counts in two grouped reads, the
    # -- throttled claims from the metrics' counter (no query) ---------------------------------

    def get_changelist_instance(self, request):
        changelist = super().get_changelist_instance(request)
        rows = list(changelist.result_list)
        stats = _stats([q.name for q in rows])
        throttled = flow.throttled_claims()
        for q in rows:
            q.forq_policy = queries.policy_of(q)
            q.forq_stats = stats.get(q.name) or queries.QueueStats(q.name)
            q.forq_dlq = stats.get(vocab.dlq_of(q.name)) or queries.QueueStats(vocab.dlq_of(q.name))
            q.forq_flow = flow.of(q.name, q.forq_policy, q.forq_stats.processing, throttled)
        changelist.result_list = rows
        return changelist

    def _flow_of(self, obj: Any) -> flow.Flow:
        if not hasattr(obj, "forq_flow"):
            resolved = getattr(obj, "forq_policy", None) or queries.policy_of(obj)
            obj.forq_flow = flow.of(obj.name, resolved, self._counts_of(obj)[0].processing)
        return obj.forq_flow

    def _counts_of(self, obj: Any) -> tuple[queries.QueueStats, queries.QueueStats]:
        if not hasattr(obj, "forq_stats"):
            stats = _stats([obj.name])
            obj.forq_stats = stats.get(obj.name) or queries.QueueStats(obj.name)
            obj.forq_dlq = stats.get(vocab.dlq_of(obj.name)) or queries.QueueStats(vocab.dlq_of(obj.name))
        return obj.forq_stats, obj.forq_dlq

    @admin.display(description="policy set on this queue")
    def policy(self, obj):
        """What the queue sets itself, one line each; the rest follows the global settings. The
        whole policy in force is in the tooltip (and on the queue's page)."""
        resolved = getattr(obj, "forq_policy", None) or queries.policy_of(obj)
        items = display.policy_items(resolved.public(), resolved.overrides)
        everything = " · ".join(f"{i.label}: {i.value}{'' if i.overridden else ' (global)'}" for i in items)
        own = [i for i in items if i.overridden]
        if not own:
            return format_html('<span class="quiet forq-policy" title="{}">the global settings</span>', everything)
        return format_html(
            '<span class="forq-policy" title="{}">{}{}</span>', everything,
            format_html_join("", '<span class="forq-own">{}: <strong>{}</strong></span>',
                             ((i.label, i.value) for i in own)),
            mark_safe('<span class="quiet forq-own">the rest: global</span>') if len(own) < len(items) else "")

    @admin.display(description="ready")
    def ready(self, obj):
        return self._counts_of(obj)[0].ready

    @admin.display(description="delayed")
    def delayed(self, obj):
        return self._counts_of(obj)[0].delayed

    @admin.display(description="in flight")
    def in_flight(self, obj):
        """Live leases; ``3 / 4`` against the queue's max in flight (bold when every slot is taken)."""
        f = self._flow_of(obj)
        if f.full:
            return format_html('<strong title="every slot taken: claims get nothing until one settles">{}</strong>',
                               f.in_flight_text)
        return f.in_flight_text

    @admin.display(description="throttled claims")
    def throttled(self, obj):
        """Claims the queue's limits held back, by reason; "—" for a queue without limits."""
        f = self._flow_of(obj)
        if not f.limited and not f.throttled_total:
            return "—"
        if not f.counted:
            return format_html('<span class="quiet" title="{}">not counted</span>', flow.NOT_COUNTED)
        return format_html_join("", '<span title="{}">{}: {}</span>',
                                ((f"{_REASON_HELP.get(r, r)}, {flow.SINCE}", r, n) for r, n in f.throttled_items))

    @admin.display(description="failed")
    def failed(self, obj):
        return self._counts_of(obj)[0].failed

    @admin.display(description="DLQ")
    def dlq(self, obj):
        dead = self._counts_of(obj)[1]
        if not dead.total:
            return 0
        url = reverse("admin:forqapp_deadletter_changelist") + "?" + urlencode({"queue": dead.name})
        return format_html('<a href="{}">{}</a>', url, dead.total)

    # -- the change page: the queue as services.queue_info reports it ------------------------

    def _info(self, obj: Any) -> services.QueueInfo:
        if not hasattr(obj, "forq_info"):
            obj.forq_info = services.queue_info(obj.name)
        return obj.forq_info

    @admin.display(description="messages")
    def counts(self, obj):
        c = self._info(obj).counts
        return format_html(
            "ready {} · delayed {} · in flight {} · failed {} · in the DLQ {}",
            c["ready"], c["delayed"], c["in_flight"], c["failed"], c["dlq"])

    @admin.display(description="flow control")
    def flow_control(self, obj):
        info = self._info(obj)
        f = flow.of(obj.name, info.policy, info.counts["in_flight"])
        if not f.limited and not f.throttled_total:
            return "No limits: set Max in flight or Rate below to limit this queue's claims."
        return format_html(
            "<div>in flight: {}{}</div><div>rate: {}</div><div>throttled claims ({}): {}</div>",
            f.in_flight_text, " (every slot taken)" if f.full else "", f.rate_text, flow.SINCE,
            f.throttled_text)

    @admin.display(description="policy in force")
    def resolved_policy(self, obj):
        info = self._info(obj)
        return format_html("{}<div>{}</div>", _policy_html(info.policy, info.overrides),
                           "paused: receives get nothing" if info.paused else "not paused")

    @admin.display(description="last sequence")
    def last_sequence_number(self, obj):
        """As the API reports it (on PostgreSQL the stored column stays 0: one database sequence
        numbers every queue, and the store reads the queue's number from its messages)."""
        return self._info(obj).last_sequence

    @admin.display(description="created")
    def created(self, obj):
        return _dt(obj.created_at)

    @admin.display(description="updated")
    def updated(self, obj):
        return _dt(obj.updated_at)

    def get_object(self, request, object_id, from_field=None):
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:
            obj.viewer = request.user  # for links(): only the pages this user may open
        return obj

    @admin.display(description="see")
    def links(self, obj):
        from .ui.views import may as user_may  # the UI's rule: "view" is met by "change" too

        user = getattr(obj, "viewer", None)

        def may(action: str, model: str) -> bool:
            return user is not None and user_may(user, action, model)

        links = []
        if may("view", "message"):
            links.append(("its messages",
                          reverse("admin:forqapp_message_changelist") + "?" + urlencode({"queue": obj.name})))
        if may("view", "deadletter"):
            links.append(("its dead letters", reverse("admin:forqapp_deadletter_changelist") + "?"
                          + urlencode({"queue": vocab.dlq_of(obj.name)})))
        if may("view", "message"):
            try:
                links.append(("its page in the Forq UI", reverse("forqapp-ui:queue", args=[obj.name])))
            except NoReverseMatch:  # a project that does not serve forqapp's UI pages
                pass
        return format_html_join(" · ", '<a href="{1}">{0}</a>', links) if links else "—"


# --- schedules --------------------------------------------------------------------------------

SCHEDULE_FIELDS = schedules.FIELDS  # schedule()'s keywords: queue, content, cron, every, catch_up, …
# schedules.validate's messages → the field each is about (the first that matches); None: the form's.
_SCHEDULE_ERRORS = [
    (re.compile(r"schedule's name"), "name"),
    (re.compile(r"cron or every"), None),
    (re.compile(r"^cron\b"), "cron"),
    (re.compile(r"^every\b"), "every"),
    (re.compile(r"queue"), "queue"),
    (re.compile(r"^content\b"), "content"),
    (re.compile(r"catch_up"), "catch_up"),
    (re.compile(r"priority"), "priority"),
    (re.compile(r"attribute"), "attributes"),
    (re.compile(r"paused"), "paused"),
]


class ScheduleForm(forms.ModelForm):
    """A schedule: checked by ``schedules.validate`` (the rules of ``forqapp.schedule`` and
    ``FORQ_SCHEDULES``), saved by ``schedules.schedule``. On a schedule, only the fields this user
    changed are saved over what is stored (a pause made meanwhile elsewhere is not undone)."""

    queue = forms.CharField(max_length=128, label="Queue", help_text="The queue each tick sends its message to.")
    content = forms.CharField(
        required=False, strip=False, label="Content", widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        help_text="The message each tick sends (text, often JSON).")
    cron = forms.CharField(
        required=False, max_length=200, label="Cron",
        help_text=format_html("Five fields (minute hour day month weekday), in the project's time zone: "
                              "<code>{}</code> is every day at 03:00, <code>{}</code> every 15 minutes. "
                              "Blank when Every is set.", "0 3 * * *", "*/15 * * * *"))
    every = forms.FloatField(
        required=False, label="Every (s)",
        help_text="Or a fixed period, in seconds (1 to 31622400). Blank when Cron is set.")
    catch_up = forms.ChoiceField(
        label="Catch up", initial="one",
        choices=[("one", "one: send one message for the missed ticks"),
                 ("skip", "skip: send none (a tick under a minute late is on time)"),
                 ("all", f"all: send every missed tick (at most {schedules.MAX_CATCH_UP})")],
        help_text="Ticks missed while nothing ran (downtime; a pause's are skipped on resume).")
    priority = forms.IntegerField(
        required=False, initial=0, label="Priority", help_text="Of the messages it sends (higher first).")
    attributes = forms.CharField(
        required=False, label="Attributes", widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text=format_html("Of the messages it sends: a JSON object of strings, e.g. <code>{}</code>.",
                              '{"kind": "report"}'))
    paused = forms.BooleanField(required=False, label="Paused", help_text="A paused schedule sends nothing.")

    class Meta:
        model = Schedule
        fields = ["name"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "name" in self.fields:
            self.fields["name"].help_text = "1 to 100 of A-Z a-z 0-9 . _ : - (the dedup key of its ticks)."
        row = self.instance
        if row.pk is not None:
            for name in SCHEDULE_FIELDS:
                if name in self.fields:  # (a view-only page has none)
                    self.fields[name].show_hidden_initial = True  # only what this user changed is saved
            every = None if row.every_ms is None else row.every_ms / 1000
            self.initial.update(
                queue=row.queue, content=row.content, cron=row.cron or "",
                every=int(every) if every is not None and every.is_integer() else every,
                catch_up=row.catch_up, priority=row.priority, paused=row.paused,
                attributes=_attributes_text(row.attributes))

    def clean_attributes(self) -> dict[str, Any] | None:
        text = (self.cleaned_data.get("attributes") or "").strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            raise forms.ValidationError("Not valid JSON.") from None

    def clean_content(self) -> str:
        # Browsers send a textarea's line breaks as CRLF: stored as the LF that was typed.
        return (self.cleaned_data.get("content") or "").replace("\r\n", "\n")

    def clean_cron(self) -> str | None:
        return (self.cleaned_data.get("cron") or "").strip() or None

    def schedule_fields(self) -> dict[str, Any]:
        """``schedule()``'s keywords: a new schedule's from the form; a schedule's as stored, with
        the fields this user changed from what the page showed."""
        values = {name: self.cleaned_data.get(name) for name in SCHEDULE_FIELDS}
        values["priority"] = values["priority"] or 0
        values["content"] = values["content"] or ""
        if self.instance._state.adding:
            return values
        try:
            stored = schedules.get(self.instance.pk).json()
        except ForqError:  # deleted meanwhile: save what the form holds
            return values
        merged = {name: stored[name] for name in SCHEDULE_FIELDS}
        merged["attributes"] = merged["attributes"] or None
        changed = {name for name in SCHEDULE_FIELDS if name in self.changed_data}
        if changed & {"cron", "every"}:  # the timing is one choice: both as the form has them
            changed |= {"cron", "every"}
        merged.update({name: values[name] for name in changed})
        return merged

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean()
        if not self.errors:
            name = self.cleaned_data.get("name") if self.instance._state.adding else self.instance.pk
            try:
                schedules.validate(name, self.schedule_fields())
            except ForqError as e:
                text = str(e)
                field = next((f for pattern, f in _SCHEDULE_ERRORS if pattern.search(text)), None)
                self.add_error(field if field in self.fields else None, text)
        return cleaned


def _attributes_text(stored: str | None) -> str:
    if not stored:
        return ""
    try:
        return json.dumps(json.loads(stored), ensure_ascii=False)
    except ValueError:
        return stored


def _schedule_names(queryset) -> list[str]:
    return list(queryset.order_by("name").values_list("name", flat=True))


def _set_schedules_paused(modeladmin, request, queryset, paused: bool) -> None:
    names = _schedule_names(queryset)
    done = []
    for name in names:
        try:
            scheduling.set_paused(name, paused)
            done.append(name)
        except ForqError as e:
            modeladmin.message_user(request, f"{name}: {e}", messages.ERROR)
    if done:
        verb = "Paused" if paused else "Resumed"
        tail = "" if paused else " Ticks missed while paused are skipped: each next run is the first from now."
        modeladmin.message_user(
            request, f"{verb} {len(done)} schedule{'s' if len(done) != 1 else ''}: {_listed(done)}.{tail}",
            messages.SUCCESS)


@admin.action(description="Pause selected schedules", permissions=["change"])
def pause_schedules(modeladmin, request, queryset):
    _set_schedules_paused(modeladmin, request, queryset, True)


@admin.action(description="Resume selected schedules", permissions=["change"])
def resume_schedules(modeladmin, request, queryset):
    _set_schedules_paused(modeladmin, request, queryset, False)


@admin.action(description="Run selected schedules now (send their message once; ticks unchanged)",
              permissions=["change"])
def run_schedules_now(modeladmin, request, queryset):
    sent = []
    for name in _schedule_names(queryset):
        try:
            message_id = schedules.run_now(name)
        except ForqError as e:  # gone meanwhile, its queue full, …
            modeladmin.message_user(request, f"{name}: {e}", messages.ERROR)
            continue
        sent.append(f"{name} → {message_id}")
    if sent:
        freshness.invalidate()
        modeladmin.message_user(
            request, f"Sent {len(sent)} message{'s' if len(sent) != 1 else ''}: {_listed(sent)}.", messages.SUCCESS)


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = ["name", "queue", "timing", "catch_up", "next_run", "last_run", "paused"]
    list_filter = ["paused", "catch_up"]
    search_fields = ["name", "queue"]
    search_help_text = "A schedule or queue name (or part of it)."
    ordering = ["name"]
    list_per_page = 50
    actions = [pause_schedules, resume_schedules, run_schedules_now]  # and Django's delete_selected
    info_fields = ["next_run", "last_run", "created", "updated", "declared", "links"]

    def get_fieldsets(self, request, obj=None):
        fields = ("Schedule", {
            "fields": list(SCHEDULE_FIELDS),
            "description": "Checked with the rules of forqapp.schedule and saved through it. Changing "
                           "cron or every moves the next run; other changes keep it.",
        })
        if obj is None:
            return [(None, {"fields": ["name"]}), fields]
        if not self.has_change_permission(request, obj):
            return [(None, {"fields": ["name", "queue", "schedule_timing", "catch_up", "priority", "paused",
                                       *self.info_fields]})]
        return [(None, {"fields": ["name", *self.info_fields]}), fields]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        if not self.has_change_permission(request, obj):
            return ["name", "queue", "schedule_timing", "catch_up", "priority", "paused", *self.info_fields]
        return ["name", *self.info_fields]

    def get_form(self, request, obj=None, change=False, **kwargs):
        # The schedule's fields are the form's own; the only model field it sets is a new one's name.
        kwargs["fields"] = ["name"] if obj is None else []
        return super().get_form(request, obj, change, **kwargs)

    def save_model(self, request, obj, form, change):
        info = schedules.schedule(obj.pk, **form.schedule_fields())
        obj.next_run_at, obj.last_run_at = info.next_run_at, info.last_run_at

    def save_related(self, request, form, formsets, change):
        pass  # a schedule has no related objects; the form saved nothing itself

    # Deletes (the change page's, and the "delete selected" action's, each after Django's
    # confirmation page) go through schedules.unschedule, never the ORM.

    def delete_model(self, request, obj):
        schedules.unschedule(obj.pk)

    def delete_queryset(self, request, queryset):
        for name in _schedule_names(queryset):
            schedules.unschedule(name)

    @admin.display(description="timing")
    def timing(self, obj):
        text = scheduling.timing(obj.cron, None if obj.every_ms is None else obj.every_ms / 1000)
        return format_html('<span class="nowrap">{}</span>', text)

    @admin.display(description="timing")
    def schedule_timing(self, obj):
        return self.timing(obj)

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, obj):
        now = now_ms()
        text = format_html('<span class="nowrap">{}</span>', scheduling.when(obj.next_run_at))
        if obj.paused:
            return format_html('{} <span class="quiet">(paused: not sent)</span>', text)
        if obj.next_run_at <= now:
            return format_html('{} <span class="quiet">(due: the jobs scheduler sends it)</span>', text)
        return format_html('{} <span class="quiet">({})</span>', text, scheduling.relative(obj.next_run_at, now))

    @admin.display(description="last run", ordering="last_run_at")
    def last_run(self, obj):
        if obj.last_run_at is None:
            return "never"
        return format_html('<span class="nowrap">{}</span> <span class="quiet">({})</span>',
                           scheduling.when(obj.last_run_at), scheduling.relative(obj.last_run_at, now_ms()))

    @admin.display(description="created")
    def created(self, obj):
        return scheduling.when(obj.created_at)

    @admin.display(description="updated")
    def updated(self, obj):
        return scheduling.when(obj.updated_at)

    @admin.display(description="FORQ_SCHEDULES")
    def declared(self, obj):
        if obj.name in scheduling.declared():
            return ("Declared in FORQ_SCHEDULES: migrate and forq_queues apply set it back to the "
                    "settings' values (its next run is kept while its timing is the same).")
        return "Not declared in the settings."

    @admin.display(description="see")
    def links(self, obj):
        links = [("its queue", reverse("admin:forqapp_queue_changelist") + "?" + urlencode({"q": obj.queue})),
                 ("its queue's messages",
                  reverse("admin:forqapp_message_changelist") + "?" + urlencode({"queue": obj.queue}))]
        try:
            links.append(("the schedules page in the Forq UI", reverse("forqapp-ui:schedules")))
        except NoReverseMatch:  # a project that does not serve forqapp's UI pages
            pass
        return format_html_join(" · ", '<a href="{1}">{0}</a>', links)
