"""The stored keys and their audit log (tables ``forq_api_keys``, ``forq_api_key_events``)."""

from __future__ import annotations

from django.db import models


class ApiKeyQuerySet(models.QuerySet):
    def usable(self, now_ms: int) -> ApiKeyQuerySet:
        """Enabled, not revoked, not expired."""
        return self.filter(enabled=True, revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now_ms))


class ApiKey(models.Model):
    """A scoped API key. The secret is stored sealed (:mod:`forqapp.keys.crypto`), never in clear."""

    name = models.CharField(max_length=100, unique=True)
    access_key_id = models.CharField(max_length=32, unique=True)  # the index a request's key is found by
    secret_sealed = models.TextField()  # AES-256-GCM: v1:base64(nonce | ciphertext | tag)
    grants = models.JSONField(default=list)  # ["orders:produce", "orders.*+dlq:consume,read"]
    enabled = models.BooleanField(default=True)
    created_at = models.BigIntegerField()  # Unix ms, as every time of forqapp
    created_by = models.CharField(max_length=150, blank=True, default="")
    expires_at = models.BigIntegerField(null=True, blank=True)
    revoked_at = models.BigIntegerField(null=True, blank=True)
    rotated_at = models.BigIntegerField(null=True, blank=True)
    last_used_at = models.BigIntegerField(null=True, blank=True)  # to within FORQ_KEYS_CACHE_SECONDS

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        app_label = "forqapp"
        db_table = "forq_api_keys"
        ordering = ("name",)
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.access_key_id})"


class KeyEvent(models.Model):
    """One change to a key (created, revoked, rotated, enabled, disabled, edited), by whom, from where."""

    key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="events")
    action = models.CharField(max_length=20)
    actor = models.CharField(max_length=150)  # a username, or "cli:<os user>"
    via = models.CharField(max_length=10)  # admin, ui, cli, api
    at = models.BigIntegerField()
    detail = models.TextField(blank=True, default="")

    class Meta:
        app_label = "forqapp"
        db_table = "forq_api_key_events"
        ordering = ("-at", "-id")
        indexes = [models.Index(fields=("key", "at"), name="forq_key_events_key_at")]
        verbose_name = "API key event"

    def __str__(self) -> str:
        return f"{self.action} by {self.actor}"
