"""The admin of every message (:class:`MessageAdmin`) and of the dead letters on their own list
(:class:`DeadLetterAdmin`): read-only, with the dead letters' requeue and delete actions, each
through :mod:`forqapp.services` behind a confirmation page."""

from __future__ import annotations

import uuid

from django.contrib import admin, messages
from django.utils.html import format_html, format_html_join

from .. import services, vocab
from ..models import DeadLetter, Message, Status
from ..ui.views import may as user_may  # the UI's rule: "view" is met by "change" too
from ..utils import now_ms, pretty_json
from . import cells as admin_cells
from .cells import date_text as _dt
from .filters import DeadLetterStatusFilter, DlqFilter, QueueFilter

ERROR_PREVIEW = 80  # characters of last_error in the lists


def _confirm(modeladmin, request, queryset, *, action: str, verb: str, question: str):
    """The confirmation page of an action on dead letters (the regular messages selected are skipped)."""
    return admin_cells.confirm_action(modeladmin, request, list(queryset.dlq().only("id", "queue")[:1000]),
                                      skipped=queryset.regular().count(), action=action, verb=verb,
                                      question=question)


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
    fields = ["id", "queue", "group", "is_dlq", "message_status", "priority", "sequence", "attempts", "due", "lease_end",
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
        return user_may(request.user, "view", "deadletter")

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

    @admin.display(description="group", ordering="message_group")
    def group(self, obj):
        """Its message group (escaped as any value of a message), "—" for none."""
        return format_html("<code>{}</code>", obj.message_group) if obj.message_group else "—"

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
