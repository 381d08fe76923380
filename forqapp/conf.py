"""forqapp's settings: ``FORQ_*`` names with Forq's defaults, read from Django settings on access.

Nothing here is read at import time, so tests can override any value with pytest-django's
``settings`` fixture and a project can set them in ``settings.py``.
"""

from __future__ import annotations

from django.conf import settings as django_settings


class Defaults:
    FORQ_DATABASE = "default"  # the database alias the queue lives on
    FORQ_AUTH_SECRET = ""  # X-API-Key of the HTTP API; required (>= 32 chars) to serve
    FORQ_METRICS_ENABLED = False
    FORQ_METRICS_AUTH_SECRET = ""  # X-API-Key of GET /metrics; required when metrics are on
    FORQ_ENV = "local"  # "pro" adds HSTS and secure cookies
    FORQ_QUEUE_TTL_HOURS = 24
    FORQ_DLQ_TTL_HOURS = 168
    FORQ_API_ADDR = "localhost:8080"
    FORQ_UI_ADDR = "localhost:8081"
    FORQ_UI_ENABLED = True
    FORQ_TRUST_PROXY_HEADERS = False
    # Message life (Forq's fixed values; settings here so tests and special deployments can move them)
    FORQ_MAX_ATTEMPTS = 5
    FORQ_BACKOFF_MS = (1_000, 5_000, 15_000, 30_000, 60_000)
    FORQ_VISIBILITY_TIMEOUT_MS = 5 * 60 * 1000  # a message in processing longer than this is stale
    FORQ_LONG_POLL_SECONDS = 30.0
    FORQ_MAX_CONTENT_BYTES = 262_144
    FORQ_MAX_BODY_BYTES = 2 * 1024 * 1024
    FORQ_PROCESS_AFTER_PAST_TOLERANCE_MS = 10_000
    FORQ_PROCESS_AFTER_MAX_MS = 366 * 24 * 3600 * 1000
    # Throttling of failed API-key checks (per client address)
    FORQ_AUTH_MAX_FAILURES = 5
    FORQ_AUTH_FAILURE_WINDOW_S = 60
    FORQ_AUTH_BLOCK_S = 60
    # Wake-ups of waiting consumers: how often a process checks the database for other processes'
    # writes while it has waiters (SQLite: PRAGMA data_version), and the fallback re-check.
    FORQ_WAKE_POLL_MS = 5
    FORQ_WAKE_FALLBACK_MS = 250
    # Server
    FORQ_API_WORKERS = 2  # processes; the throttle and wake-ups work across them
    FORQ_UI_WORKERS = 1
    # Threads that run the async API's database calls, per server process. None: 1 on SQLite (one
    # writer at a time; more threads only trade the GIL back and forth: measured 2,400 vs 1,600
    # produce/s with 4), 4 on PostgreSQL (network round trips overlap).
    FORQ_DB_THREADS = None


class ForqSettings:
    """Reads ``FORQ_*`` from Django settings, falling back to :class:`Defaults`."""

    def __getattr__(self, name: str):
        if not name.startswith("FORQ_"):
            raise AttributeError(name)
        try:
            default = getattr(Defaults, name)
        except AttributeError:
            raise AttributeError(f"unknown forqapp setting {name}") from None
        return getattr(django_settings, name, default)

    @property
    def queue_ttl_ms(self) -> int:
        return int(self.FORQ_QUEUE_TTL_HOURS) * 3_600_000

    @property
    def dlq_ttl_ms(self) -> int:
        return int(self.FORQ_DLQ_TTL_HOURS) * 3_600_000


forq_settings = ForqSettings()
