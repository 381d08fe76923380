"""The list filters of the messages' and dead letters' admin lists: by queue (a DLQ's only on the
dead letters' list), in a dead-letter queue or not, and by the statuses dead letters have now."""

from __future__ import annotations

from django.contrib import admin

from .. import vocab
from ..models import DeadLetter, Status
from ..ui import freshness, queries


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
