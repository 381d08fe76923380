"""The schedules' admin (:class:`ScheduleAdmin`): a schedule is checked by ``schedules.validate``
and saved by ``schedules.schedule`` (:class:`ScheduleForm`); pause, resume, run now and delete call
:mod:`forqapp.services.schedules` too."""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode

from .. import vocab
from ..errors import ForqError
from ..models import Schedule
from ..services import schedules
from ..ui import freshness, scheduling
from ..utils import now_ms
from .cells import listed as _listed

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
        help_text=f"Or a fixed period, in seconds ({vocab.SCHEDULE_EVERY_S.lo:.0f} to {vocab.SCHEDULE_EVERY_S.hi:.0f}). Blank when Cron is set.")
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
