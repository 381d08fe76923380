"""Forq's HTTP API routes (the API listener serves exactly these), in one ordered list.

Path segments may be empty (``/api/v1/queues//messages``), as in Forq's router: the view then
refuses the empty name with Forq's 400 (``bad_request.queue.invalid_name``, ``…messageId.invalid``)
instead of a 404 nobody can parse. Any other path under ``api/v1/`` is a JSON 404.

The v2 API (:mod:`forqapp.api.v2`) lives under ``api/v2/``, after v1's routes and before v1's
catch-all; any other path under ``api/v2/`` is its own JSON 404.

Every route is documented in the OpenAPI document (openapi.json, openapi_bulk.json, openapi_v2.json)
and every documented path is routed, with the same methods (tests/test_routes.py checks both ways).
"""

from django.urls import path, re_path, register_converter

from . import bulk, meta, plumbing, v2, views


class SegmentConverter:
    """One path segment, possibly empty (Django's ``str`` needs at least one character)."""

    regex = "[^/]*"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(SegmentConverter, "forq_segment")

Q = "api/v1/queues/<forq_segment:queue>"
Q2 = "api/v2/queues/<forq_segment:queue>"
M2 = f"{Q2}/messages/<forq_segment:message_id>"
S2 = "api/v2/schedules/<forq_segment:name>"

urlpatterns = [
    path("healthcheck", meta.healthcheck, name="forq-healthcheck"),
    path("metrics", meta.metrics_view, name="forq-metrics"),
    path("api/v1/openapi.json", meta.openapi, name="forq-openapi"),
    # Literal paths first: a segment route placed before them would take their last word for an id
    # (``…/messages/<id>`` would swallow ``…/messages/batch``). Django tries routes in this order.
    path(f"{Q}/messages/batch", bulk.batch, name="forq-batch"),
    path(f"{Q}/messages/claim", bulk.claim, name="forq-claim"),
    path(f"{Q}/messages/ack", bulk.ack, name="forq-ack-many"),
    path(f"{Q}/messages/release", bulk.release, name="forq-release-many"),
    path(f"{Q}/snapshot/bounds", bulk.snapshot_bounds, name="forq-snapshot-bounds"),
    path("api/v1/staged/publish", bulk.publish, name="forq-publish-staged"),
    path("api/v1/staged/discard", bulk.discard, name="forq-discard-staged"),
    # Then the routes with a segment where the literal ones have a word.
    path(f"{Q}/messages", views.messages, name="forq-messages"),
    path(f"{Q}/messages/<forq_segment:message_id>/ack", views.ack, name="forq-ack"),
    path(f"{Q}/messages/<forq_segment:message_id>/nack", views.nack, name="forq-nack"),
    path(f"{Q}/staged/<forq_segment:token>", bulk.stage, name="forq-stage"),
    path(f"{Q}/snapshot", bulk.snapshot, name="forq-snapshot"),
    # The v2 API: literal paths first here too, then those with a segment where they have a word.
    path("api/v2/openapi.json", meta.openapi, name="forq-v2-openapi"),
    path("api/v2/queues", v2.queues, name="forq-v2-queues"),
    path(f"{Q2}/messages/batch", v2.send_batch, name="forq-v2-send-batch"),
    path(f"{Q2}/messages/ack", v2.ack_batch, name="forq-v2-ack-batch"),
    path(f"{Q2}/messages/nack", v2.nack_batch, name="forq-v2-nack-batch"),
    path(f"{Q2}/messages/change-visibility", v2.change_visibility_batch, name="forq-v2-change-visibility-batch"),
    path(f"{Q2}/receive", v2.receive, name="forq-v2-receive"),
    path(f"{Q2}/peek", v2.peek, name="forq-v2-peek"),
    path(f"{Q2}/purge", v2.purge, name="forq-v2-purge"),
    path(f"{Q2}/requeue", v2.requeue, name="forq-v2-requeue"),
    path(Q2, v2.queue, name="forq-v2-queue"),
    path(f"{Q2}/messages", v2.send, name="forq-v2-send"),
    path(M2, v2.message, name="forq-v2-message"),
    path(f"{M2}/ack", v2.ack, name="forq-v2-ack"),
    path(f"{M2}/nack", v2.nack, name="forq-v2-nack"),
    path(f"{M2}/change-visibility", v2.change_visibility, name="forq-v2-change-visibility"),
    path(f"{M2}/defer", v2.defer, name="forq-v2-defer"),
    path("api/v2/schedules", v2.schedule_list, name="forq-v2-schedules"),
    path(S2, v2.schedule, name="forq-v2-schedule"),
    path(f"{S2}/run", v2.run_schedule, name="forq-v2-run-schedule"),
    re_path(r"^api/v2/", v2.unknown_path, name="forq-v2-unknown"),
    # Last: the rest of api/v1/ is forqapp's too, and answers in JSON (also under a project's own urls).
    re_path(r"^api/v1/", plumbing.unknown_path, name="forq-unknown"),
]
