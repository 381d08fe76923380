"""Django admin for the queue: every message, and the dead letters on their own list.

Read-only: a message is changed only through :mod:`forqapp.services` (requeue, delete), here as
admin actions with a confirmation page. Message content is always escaped (``format_html``).
"""

from __future__ import annotations

import uuid

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse
from django.utils.html import format_html

from . import services, vocab
from .models import DeadLetter, Message
from .ui import freshness, queries
from .utils import ms_to_datetime, pretty_json

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
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.dlq() if self.value() == "yes" else queryset.regular()
        return queryset


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
    list_display = ["id", "queue", "status", "attempts", "due", "received", "failure_reason", "error"]
    list_filter = [QueueFilter, "status", DlqFilter]
    search_fields = ["id"]
    search_help_text = "A message id (exact)."
    ordering = ["-id"]
    list_per_page = 50
    show_full_result_count = False
    actions = [requeue_messages, delete_messages]
    fields = ["id", "queue", "is_dlq", "status", "attempts", "due", "received", "updated",
              "expires", "processing_started", "failure_reason", "last_error", "pretty_content"]
    # mypy types `fields` as the base class's field groups; it holds plain names here.
    readonly_fields = fields  # type: ignore[assignment]

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

    def has_forq_change_permission(self, request):
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")

    def has_forq_delete_permission(self, request):
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.delete_{opts.model_name}")

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

    @admin.display(description="last error")
    def error(self, obj):
        """The consumer's own error, cut for the list (the change page shows all of it)."""
        text = obj.last_error or ""
        if len(text) <= ERROR_PREVIEW:
            return text or "—"
        return format_html('<span title="{}">{}…</span>', text, text[:ERROR_PREVIEW])

    @admin.display(description="content")
    def pretty_content(self, obj):
        text, _ = pretty_json(obj.content)
        return format_html('<pre style="white-space: pre-wrap; max-width: 60rem; margin: 0">{}</pre>', text)


@admin.register(DeadLetter)
class DeadLetterAdmin(MessageAdmin):
    list_filter = [QueueFilter, "status", "failure_reason"]
