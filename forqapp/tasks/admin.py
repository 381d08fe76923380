"""The admin of task results (``forq_task_results``): filter by status, task and queue, search by
id, and two actions — "retry" (a failed task runs again: its dead letter goes back to its queue,
or, once the DLQ let it go, it is enqueued anew) and "delete" (behind a confirmation page: the
results and the dead letters of failed tasks). Rows are read-only; every write goes through
:mod:`forqapp.services`; anything from a task is escaped (``format_html``)."""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.db.models import Q
from django.utils.html import format_html, format_html_join

from .. import services, vocab
from ..admin import cells as admin_cells
from ..models import Message
from ..utils import ms_to_datetime, pretty_json
from .models import TaskRecord, TaskStatus

CONFIRM_LIMIT = 1000  # results listed on the confirmation page


def _dt(ms: int | None) -> str:
    when = ms_to_datetime(ms)
    return "—" if when is None else when.strftime("%Y-%m-%d %H:%M:%S UTC")


def _confirm(modeladmin, request, queryset, *, action: str, verb: str, question: str):
    return admin_cells.confirm_action(modeladmin, request, list(queryset.only("id", "queue")[:CONFIRM_LIMIT]),
                                      skipped=0, action=action, verb=verb, question=question)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _failed_to_dlq(ids: list[str]) -> None:
    """A task out of attempts is a failed message in its queue until the ``failed`` job moves it
    to ``<queue>-dlq`` (minutes later): if one of ``ids`` is, do that job's work now, so "retry" and
    "delete" act on it as on a dead letter."""
    if Message.objects.filter(id__in=ids, is_dlq=False, status=vocab.Status.FAILED).exists():
        services.move_failed_to_dlq()


@admin.action(description="Retry selected failed tasks", permissions=["change"])
def retry_tasks(modeladmin, request, queryset):
    requeued = resent = skipped = 0
    _failed_to_dlq(list(queryset.values_list("id", flat=True)))
    for record in queryset.order_by().iterator():
        message = Message.objects.filter(id=record.id).values("queue", "is_dlq").first()
        if message is not None and message["is_dlq"]:
            requeued += services.requeue(message["queue"], record.id)
        elif message is None and record.status == TaskStatus.FAILED:
            content = json.loads(record.content)
            content["enqueued_at"] = services.now_ms()
            services.send(record.queue, json.dumps(content, separators=(",", ":"), ensure_ascii=False),
                          priority=record.priority)
            resent += 1
        else:
            skipped += 1
            continue
        TaskRecord.objects.filter(id=record.id).update(status=TaskStatus.READY, finished_at=None,
                                                        updated_at=services.now_ms())
    if requeued:
        modeladmin.message_user(request, f"Requeued {_plural(requeued, 'task')} from the dead-letter queue.",
                                messages.SUCCESS)
    if resent:
        modeladmin.message_user(request, f"Enqueued {_plural(resent, 'task')} again, with new ids (their dead "
                                         "letters were gone).", messages.SUCCESS)
    if skipped:
        modeladmin.message_user(request, f"Skipped {_plural(skipped, 'task')} that did not fail (or are still "
                                         "being retried).", messages.WARNING)


def _delete_with_dead_letters(ids: list[str]) -> tuple[int, int]:
    """Delete the results ``ids`` and the dead letters of the failed ones: (results, dead letters)."""
    _failed_to_dlq(ids)
    dead = 0
    for message_id, queue in Message.objects.filter(id__in=ids, is_dlq=True).values_list("id", "queue"):
        if vocab.is_dlq(queue):
            dead += services.delete_dead(queue, message_id)
    deleted, _ = TaskRecord.objects.filter(id__in=ids).delete()
    return deleted, dead


@admin.action(description="Delete selected task results", permissions=["delete"])
def delete_tasks(modeladmin, request, queryset):
    if request.POST.get("post") != "yes":
        return _confirm(modeladmin, request, queryset, action="delete_tasks", verb="Delete",
                        question="These task results are deleted for good, with the dead letters of the failed "
                                 "ones (a task still waiting or running is not stopped); this cannot be undone:")
    deleted, dead = _delete_with_dead_letters(list(queryset.values_list("id", flat=True)))
    also = f" and {_plural(dead, 'dead letter')}" if dead else ""
    modeladmin.message_user(request, f"Deleted {_plural(deleted, 'task result')}{also}.", messages.SUCCESS)
    return None


@admin.register(TaskRecord)
class TaskRecordAdmin(admin.ModelAdmin):
    # Fits 1366 px beside the sidebars: a short id and compact dates (whole in their tooltips).
    list_display = ("short_id", "task_cell", "status_badge", "queue_cell", "attempts", "updated_on", "finished_on")
    list_filter = ("status", "task_path", "queue_name", "backend")
    search_fields = ("=id",)
    actions = [retry_tasks, delete_tasks]
    list_per_page = 50
    show_full_result_count = False
    fields = ("id", "task_path", "status", "backend", "queue_name", "queue", "priority", "call", "returned",
              "error_list", "workers", "enqueued", "started", "last_attempted", "finished", "updated")
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # ours confirms and deletes the dead letters too
        return actions

    def delete_model(self, request, obj: TaskRecord) -> None:
        """The result page's own Delete: its dead letter goes too, as with the list's action (it
        stayed in the DLQ, and get_result still answered FAILED)."""
        _delete_with_dead_letters([obj.id])

    def delete_queryset(self, request, queryset) -> None:
        _delete_with_dead_letters(list(queryset.values_list("id", flat=True)))

    def get_deleted_objects(self, objs, request):
        """The confirmation page lists the dead letters that go with the results (a failed task's
        message, in its DLQ or about to be moved there)."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        ids = [obj.id for obj in objs]
        dead = list(Message.objects.filter(Q(is_dlq=True) | Q(status=vocab.Status.FAILED), id__in=ids)
                    .values_list("queue", "id"))
        if dead:
            deleted = [*deleted, *(f"Dead letter: {queue} / {message_id}" for queue, message_id in dead)]
            counts = {**counts, "dead letters": len(dead)}
        return deleted, counts, perms_needed, protected

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # Every field is read-only: no Save buttons (a Save wrote a "changed" entry for nothing).
        extra_context = {**(extra_context or {}), "show_save": False, "show_save_and_continue": False,
                         "show_save_and_add_another": False, "title": "Task result"}
        return super().change_view(request, object_id, form_url, extra_context)

    def save_model(self, request, obj, form, change) -> None:
        pass  # nothing on the page can change (a Save posted by hand writes nothing)

    def log_change(self, request, obj, message):
        return None  # and leaves no "No fields changed." entry in the history

    @property
    def media(self):
        return super().media + admin_cells.MEDIA

    short_id = admin_cells.column("id", admin_cells.short_id, "id")
    task_cell = admin_cells.column("task_path", admin_cells.breakable, "task path")
    queue_cell = admin_cells.column("queue_name", admin_cells.breakable, "queue")
    updated_on = admin_cells.column("updated_at", admin_cells.when, "updated")
    finished_on = admin_cells.column("finished_at", admin_cells.when, "finished")

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: TaskRecord) -> str:
        return format_html('<span class="forq-task-status forq-task-{}">{}</span>', obj.status.lower(),
                           obj.get_status_display())

    @admin.display(description="attempts")
    def attempts(self, obj: TaskRecord) -> int:
        return len(obj.worker_ids_list())

    updated = admin_cells.column("updated_at", _dt, "updated")
    finished = admin_cells.column("finished_at", _dt, "finished")
    enqueued = admin_cells.column("enqueued_at", _dt, "enqueued", sortable=False)
    started = admin_cells.column("started_at", _dt, "started", sortable=False)
    last_attempted = admin_cells.column("last_attempted_at", _dt, "last attempted", sortable=False)

    @admin.display(description="arguments")
    def call(self, obj: TaskRecord) -> str:
        try:
            call = json.dumps(obj.args_kwargs().get("call"), indent=2, ensure_ascii=False)
        except ValueError:
            call = obj.content
        return format_html("<pre>{}</pre>", call)

    @admin.display(description="return value")
    def returned(self, obj: TaskRecord) -> str:
        if obj.return_value is None:
            return "—"
        return format_html("<pre>{}</pre>", pretty_json(obj.return_value)[0])

    @admin.display(description="errors")
    def error_list(self, obj: TaskRecord) -> str:
        errors = obj.errors_list()
        if not errors:
            return "—"
        return format_html_join("", "<p><strong>attempt {}: {}</strong></p><pre>{}</pre>",
                                ((i, e.get("exception_class_path", "?"), e.get("traceback", ""))
                                 for i, e in enumerate(errors, 1)))

    @admin.display(description="worker ids")
    def workers(self, obj: TaskRecord) -> str:
        return ", ".join(obj.worker_ids_list()) or "—"
