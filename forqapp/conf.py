"""forqapp's settings: ``FORQ_*`` names with Forq's defaults, read from Django settings on access.

Nothing here is read at import time, so tests can override any value with pytest-django's
``settings`` fixture and a project can set them in ``settings.py``.

The two secrets also fall back to the environment (Forq's variable names): a project that leaves
them out of ``settings.py`` (as the README's install section does) still gets the key its
deployment exports. A non-empty setting wins.
"""

from __future__ import annotations

import os

from django.conf import settings as django_settings

# Read from os.environ when settings.py leaves them unset or empty (an empty secret is never valid).
ENV_FALLBACK = frozenset({"FORQ_AUTH_SECRET", "FORQ_METRICS_AUTH_SECRET"})


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
    # A request body that arrives too slowly is cut off (408; forqapp's ASGI app, i.e. forq_serve):
    # complete within FORQ_BODY_TIMEOUT_S, and after FORQ_BODY_GRACE_S at least
    # FORQ_BODY_MIN_RATE_BYTES_S on average (0: no rate). A normal client sends its body at once.
    FORQ_BODY_TIMEOUT_S = 30.0
    FORQ_BODY_GRACE_S = 5.0
    FORQ_BODY_MIN_RATE_BYTES_S = 1024
    FORQ_PROCESS_AFTER_PAST_TOLERANCE_MS = 10_000
    FORQ_PROCESS_AFTER_MAX_MS = 366 * 24 * 3600 * 1000
    # Throttling of failed API-key checks (per client address)
    FORQ_AUTH_MAX_FAILURES = 5
    FORQ_AUTH_FAILURE_WINDOW_S = 60
    FORQ_AUTH_BLOCK_S = 60
    # Throttling of failed logins (the UI's and the admin's), per client address and per username:
    # the FORQ_LOGIN_MAX_FAILURES-th failure within FORQ_LOGIN_FAILURE_WINDOW_S blocks for FORQ_LOGIN_BLOCK_S
    FORQ_LOGIN_MAX_FAILURES = 5
    FORQ_LOGIN_FAILURE_WINDOW_S = 900
    FORQ_LOGIN_BLOCK_S = 900
    # Wake-ups of waiting consumers: how often a process checks the database for other processes'
    # writes while it has waiters (SQLite: PRAGMA data_version), and the fallback re-check.
    FORQ_WAKE_POLL_MS = 5
    FORQ_WAKE_FALLBACK_MS = 250
    # Server
    FORQ_API_WORKERS = 2  # processes; the throttle and wake-ups work across them
    # Background jobs: forq_serve runs the scheduler unless this is False (or --no-jobs; the
    # environment variable FORQ_SERVE_JOBS counts when settings.py leaves it out). Every long-running
    # scheduler (forq_serve's, forq_jobs, forq_worker --with-jobs) runs jobs only while it holds the
    # database lease "forq-jobs": one per database. It lasts this long, renewed every third of it.
    FORQ_SERVE_JOBS = True
    FORQ_JOBS_LEASE_MS = 30_000
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
        value = getattr(django_settings, name, default)
        if not value and name in ENV_FALLBACK:
            return os.environ.get(name, default)
        return value

    @property
    def queue_ttl_ms(self) -> int:
        return int(self.FORQ_QUEUE_TTL_HOURS) * 3_600_000

    @property
    def dlq_ttl_ms(self) -> int:
        return int(self.FORQ_DLQ_TTL_HOURS) * 3_600_000


forq_settings = ForqSettings()
