"""Forq's HTTP API routes (the API listener serves exactly these)."""

from django.urls import path

from . import views

urlpatterns = [
    path("healthcheck", views.healthcheck, name="forq-healthcheck"),
    path("metrics", views.metrics_view, name="forq-metrics"),
    path("api/v1/openapi.json", views.openapi, name="forq-openapi"),
    path("api/v1/queues/<str:queue>/messages", views.messages, name="forq-messages"),
    path("api/v1/queues/<str:queue>/messages/<str:message_id>/ack", views.ack, name="forq-ack"),
    path("api/v1/queues/<str:queue>/messages/<str:message_id>/nack", views.nack, name="forq-nack"),
]
