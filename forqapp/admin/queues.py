"""The queues' admin (:class:`QueueAdmin`): each queue's policy (:class:`QueueForm`, saved
through ``services.configure_queue`` after ``validation.policy`` checked it), state, counts and
flow control; pause, resume and purge (behind a confirmation page) through :mod:`forqapp.services`."""

from __future__ import annotations

import json
import re
from functools import partial
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import mark_safe

from .. import errors, services, validation, vocab
from ..errors import ForqError
from ..models import Message, Queue
from ..services import limits
from ..services import queues as queue_services
from ..ui import display, flow, freshness, queries
from ..ui.views import may as user_may  # the UI's rule: "view" is met by "change" too
from ..utils import now_ms
from . import cells as admin_cells
from . import moves as admin_moves
from .cells import date_text as _dt
from .cells import listed as _listed

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
        required=False, label="Visibility timeout (s)", help_text=f"The lease a receive takes: 0 to {vocab.VISIBILITY_MAX_S} seconds.")
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
    group_concurrency = forms.IntegerField(
        required=False, label="Group concurrency", min_value=1,
        help_text="Per message group: messages in flight at once (1: one at a time, in order).")
    group_rate = forms.CharField(
        required=False, max_length=32, label="Group rate",
        help_text=format_html("Per message group: at most this many receives (<code>{}</code>, <code>{}</code>).",
                              "5/s", "600/m"))
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
            self.initial.setdefault("group_concurrency", row.group_concurrency)
            self.initial.setdefault("group_rate", row.group_rate or "")
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
            values = self.policy_values()
            for name, value in values.items():  # each field's own error on it, all at once
                try:
                    validation.policy({name: value})
                except ForqError as e:
                    self.add_error(name if name in self.fields else None, str(e))
        if not self.errors:
            try:
                validation.policy(values)
                if values.get("dead_letter_queue") is not None:
                    name = self.instance.name if not self.instance._state.adding else self.cleaned_data["name"]
                    queue_services.check_dead_letter_queue(str(name), values["dead_letter_queue"])
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
                "rate": "held back by the rate (the next slot had not come)",
                "group": "held back by the group limits (every group with messages at its limit)"}
GROUPS_SHOWN = 20  # the change page's busiest message groups


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
    actions = [pause_queues, resume_queues, purge_queues, admin_moves.redrive_dead_letters]
    info_fields = ["counts", "move_tasks", "flow_control", "busiest_groups", "resolved_policy", "last_sequence_number",
                   "created", "updated", "sqs_queue_tags", "links"]

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

    def has_redrive_permission(self, request):
        """Redrive requeues dead letters: their change permission, as their requeue."""
        return request.user.has_perm(admin_moves.PERMISSION)

    def get_urls(self):
        cancel = path("<path:object_id>/moves/<str:handle>/cancel/",
                      self.admin_site.admin_view(partial(admin_moves.cancel_view, self)),
                      name=f"{self.opts.app_label}_{self.opts.model_name}_move_cancel")
        return [cancel, *super().get_urls()]

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

    @admin.display(description="move tasks")
    def move_tasks(self, obj):
        """Its dead-letter queue's move tasks (a redrive, the UI's "Requeue all", SQS's
        StartMessageMoveTask): running and recent, with their progress; cancel for a running one."""
        return admin_moves.moves_html(obj, getattr(obj, "viewer", None))

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

    @admin.display(description="message groups")
    def busiest_groups(self, obj):
        """The groups with the most messages (ready, in flight, when the next claim may come), and
        the group policy; names escaped as any value of a message."""
        info = self._info(obj)
        rows = display.group_rows(services.busiest_groups(obj.name, GROUPS_SHOWN), now_ms())
        policy = format_html("{} · {} group{} with messages",
                             display.group_policy(info.policy.get("group_concurrency"), info.policy.get("group_rate")),
                             info.groups, "" if info.groups == 1 else "s")
        if not rows:
            return policy
        table = format_html_join(
            "", '<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>',
            ((g.name, g.ready, g.in_flight, g.next_eligible) for g in rows))
        return format_html('<div>{}</div><table class="forq-groups"><thead><tr><th>group ({} busiest)</th>'
                           "<th>ready</th><th>in flight</th><th>next eligible</th></tr></thead>"
                           "<tbody>{}</tbody></table>", policy, GROUPS_SHOWN, table)

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

    @admin.display(description="SQS tags")
    def sqs_queue_tags(self, obj):
        """The tags SQS clients gave the queue (TagQueue) and its dead-letter queue, escaped."""
        tags = obj.sqs_tags or {}
        rows = [(label, key, value) for label, part in (("", "queue"), ("dead-letter queue: ", "dlq"))
                for key, value in sorted((tags.get(part) or {}).items())]
        if not rows:
            return "—"
        return format_html_join(mark_safe("<br>"), "{}<code>{}</code> = <code>{}</code>", rows)

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

