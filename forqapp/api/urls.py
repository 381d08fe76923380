"""Forq's HTTP API routes (the API listener serves exactly these)."""

from django.urls import path

from . import bulk, views

urlpatterns = [
    path("healthcheck", views.healthcheck, name="forq-healthcheck"),
    path("metrics", views.metrics_view, name="forq-metrics"),
    path("api/v1/openapi.json", views.openapi, name="forq-openapi"),
    path("api/v1/queues/<str:queue>/messages", views.messages, name="forq-messages"),
    path("api/v1/queues/<str:queue>/messages/<str:message_id>/ack", views.ack, name="forq-ack"),
    path("api/v1/queues/<str:queue>/messages/<str:message_id>/nack", views.nack, name="forq-nack"),
]

# Bulk endpoints (the Spark connector): forqapp/api/bulk.py, documented in openapi_bulk.json.
urlpatterns += [
    path("api/v1/queues/<str:queue>/messages/batch", bulk.batch, name="forq-batch"),
    path("api/v1/queues/<str:queue>/messages/claim", bulk.claim, name="forq-claim"),
    path("api/v1/queues/<str:queue>/messages/ack", bulk.ack, name="forq-ack-many"),
    path("api/v1/queues/<str:queue>/messages/release", bulk.release, name="forq-release-many"),
    path("api/v1/queues/<str:queue>/staged/<str:token>", bulk.stage, name="forq-stage"),
    path("api/v1/staged/publish", bulk.publish, name="forq-publish-staged"),
    path("api/v1/staged/discard", bulk.discard, name="forq-discard-staged"),
    path("api/v1/queues/<str:queue>/snapshot", bulk.snapshot, name="forq-snapshot"),
    path("api/v1/queues/<str:queue>/snapshot/bounds", bulk.snapshot_bounds, name="forq-snapshot-bounds"),
]
