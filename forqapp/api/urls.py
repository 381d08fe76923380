"""Forq's HTTP API routes (the API listener serves exactly these).

Path segments may be empty (``/api/v1/queues//messages``), as in Forq's router: the view then
refuses the empty name with Forq's 400 (``bad_request.queue.invalid_name``, ``…messageId.invalid``)
instead of a 404 nobody can parse. Any other path under ``api/v1/`` is a JSON 404.
"""

from django.urls import path, re_path, register_converter

from . import bulk, views


class SegmentConverter:
    """One path segment, possibly empty (Django's ``str`` needs at least one character)."""

    regex = "[^/]*"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(SegmentConverter, "forq_segment")

urlpatterns = [
    path("healthcheck", views.healthcheck, name="forq-healthcheck"),
    path("metrics", views.metrics_view, name="forq-metrics"),
    path("api/v1/openapi.json", views.openapi, name="forq-openapi"),
    path("api/v1/queues/<forq_segment:queue>/messages", views.messages, name="forq-messages"),
    path("api/v1/queues/<forq_segment:queue>/messages/<forq_segment:message_id>/ack", views.ack, name="forq-ack"),
    path("api/v1/queues/<forq_segment:queue>/messages/<forq_segment:message_id>/nack", views.nack,
         name="forq-nack"),
]

# Bulk endpoints (the Spark connector): forqapp/api/bulk.py, documented in openapi_bulk.json.
urlpatterns += [
    path("api/v1/queues/<forq_segment:queue>/messages/batch", bulk.batch, name="forq-batch"),
    path("api/v1/queues/<forq_segment:queue>/messages/claim", bulk.claim, name="forq-claim"),
    path("api/v1/queues/<forq_segment:queue>/messages/ack", bulk.ack, name="forq-ack-many"),
    path("api/v1/queues/<forq_segment:queue>/messages/release", bulk.release, name="forq-release-many"),
    path("api/v1/queues/<forq_segment:queue>/staged/<forq_segment:token>", bulk.stage, name="forq-stage"),
    path("api/v1/staged/publish", bulk.publish, name="forq-publish-staged"),
    path("api/v1/staged/discard", bulk.discard, name="forq-discard-staged"),
    path("api/v1/queues/<forq_segment:queue>/snapshot", bulk.snapshot, name="forq-snapshot"),
    path("api/v1/queues/<forq_segment:queue>/snapshot/bounds", bulk.snapshot_bounds, name="forq-snapshot-bounds"),
]

# Last: the rest of api/v1/ is forqapp's too, and answers in JSON (also under a project's own urls).
urlpatterns += [re_path(r"^api/v1/", views.unknown_path, name="forq-unknown")]
