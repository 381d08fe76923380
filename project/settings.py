"""The demo / deployable project around forqapp.

Configuration comes from the environment with Forq's variable names (see the docs: reference/settings.md).
Bad values are reported by forqapp's system checks (``manage.py check``) and stop ``forq_serve``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from forqapp.envconfig import (
    env_bool,
    env_header,
    env_int,
    env_optional_int,
    env_str,
    sqlite_database,
    url_database,
)

BASE_DIR = Path(__file__).resolve().parent.parent

FORQ_ENV = env_str("FORQ_ENV", "local")
DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or (
    # Local only: derived from the API secret so a restart keeps sessions. In pro, set DJANGO_SECRET_KEY:
    # nothing refuses the derived key (forqapp cannot tell it from a real one).
    "forq-local-" + os.environ.get("FORQ_AUTH_SECRET", "unset")
)
ALLOWED_HOSTS = [h for h in env_str("DJANGO_ALLOWED_HOSTS", "*").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in env_str("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]
# Behind a proxy that terminates TLS: the header it sets on HTTPS requests ("X-Forwarded-Proto: https"),
# so Django sees them as secure (CSRF's origin check, secure cookies, HSTS, https:// links). Only when
# the proxy always sets (or strips) that header: a client could send it itself otherwise.
SECURE_PROXY_SSL_HEADER = env_header("DJANGO_SECURE_PROXY_SSL_HEADER")
USE_X_FORWARDED_HOST = env_bool("DJANGO_USE_X_FORWARDED_HOST", False)  # the proxy's X-Forwarded-Host

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "django_prometheus",
    "forqapp",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "forqapp.ui.csp.StaffPagesCSPMiddleware",  # the admin's pages get the staff pages' CSP too
    "django_htmx.middleware.HtmxMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = "project.wsgi.application"
ASGI_APPLICATION = "project.asgi.application"  # the whole project under Django's ASGI handler

# DATABASE_URL=postgres://user:pass@host:5432/name selects PostgreSQL (several API and worker hosts on
# one database); persistent connections (a worker must hold its connection), checked before reuse.
# FORQ_DB_CONN_MAX_AGE (seconds, default 600) and, on PostgreSQL only, FORQ_DB_PREPARE_THRESHOLD
# (default 5; "none" behind a pgbouncer in transaction mode older than 1.21) tune it.
# Absent: SQLite at FORQ_DB_PATH (default var/forq.sqlite3 under the repository), tuned for the queue:
# WAL (set by the migrations), synchronous=NORMAL, busy timeout, BEGIN IMMEDIATE for transactions.
FORQ_DB_PATH = env_str("FORQ_DB_PATH", str(BASE_DIR / "var" / "forq.sqlite3"))
DATABASE_URL = env_str("DATABASE_URL", "")
if DATABASE_URL:
    _prepare = env_str("FORQ_DB_PREPARE_THRESHOLD", "5").strip().lower()
    DATABASES: dict[str, Any] = {  # Any: url_database()'s or sqlite_database()'s dict
        "default": url_database(DATABASE_URL, conn_max_age=env_int("FORQ_DB_CONN_MAX_AGE", 600),
                                prepare_threshold=int(_prepare) if _prepare.isdigit() else None)
    }
else:
    DATABASES = {"default": sqlite_database(FORQ_DB_PATH)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# The login throttle first: it refuses a blocked address or username before the password is checked.
AUTHENTICATION_BACKENDS = [
    "forqapp.login_throttle.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "forqapp-ui:login"
LOGIN_REDIRECT_URL = "forqapp-ui:dashboard"
LOGOUT_REDIRECT_URL = "forqapp-ui:login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"

# Security by default.
SECURE_CONTENT_TYPE_NOSNIFF = True
# same-origin, not no-referrer: with no-referrer browsers send "Origin: null" on form posts and
# Django's CSRF check refuses them (the admin's login and actions were 403 in Chromium). The URL still
# never leaves the site. The API listener sets no-referrer itself (it runs no middleware).
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
if FORQ_ENV == "pro":
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = 31_536_000

# forqapp, from Forq's environment variables.
FORQ_AUTH_SECRET = env_str("FORQ_AUTH_SECRET", "")
FORQ_METRICS_ENABLED = env_bool("FORQ_METRICS_ENABLED", False)
FORQ_METRICS_AUTH_SECRET = env_str("FORQ_METRICS_AUTH_SECRET", "")
FORQ_KEYS_SECRET = env_str("FORQ_KEYS_SECRET", "")  # seals scoped keys' secrets; empty: from SECRET_KEY
FORQ_KEYS_CACHE_SECONDS = float(env_str("FORQ_KEYS_CACHE_SECONDS", "5"))
FORQ_QUEUE_TTL_HOURS = env_int("FORQ_QUEUE_TTL_HOURS", 24)
FORQ_DLQ_TTL_HOURS = env_int("FORQ_DLQ_TTL_HOURS", 168)
FORQ_API_ADDR = env_str("FORQ_API_ADDR", "localhost:8080")
FORQ_UI_ADDR = env_str("FORQ_UI_ADDR", "localhost:8081")
FORQ_UI_ENABLED = env_bool("FORQ_UI_ENABLED", True)
FORQ_TRUST_PROXY_HEADERS = env_bool("FORQ_TRUST_PROXY_HEADERS", False)
FORQ_API_WORKERS = env_optional_int("FORQ_API_WORKERS")  # None: 1 on SQLite, 2 on PostgreSQL
FORQ_DB_THREADS = env_int("FORQ_DB_THREADS", 0) or None  # None: 1 on SQLite, 4 on PostgreSQL
FORQ_LONG_POLL_SECONDS = env_int("FORQ_LONG_POLL_SECONDS", 30)
FORQ_WORKER_START_JITTER_MS = env_int("FORQ_WORKER_START_JITTER_MS", 500)
# The throttle of wrong API keys per client address (a test suite of wrong keys may want it looser).
FORQ_AUTH_MAX_FAILURES = env_int("FORQ_AUTH_MAX_FAILURES", 5)
FORQ_AUTH_FAILURE_WINDOW_S = env_int("FORQ_AUTH_FAILURE_WINDOW_S", 60)
FORQ_AUTH_BLOCK_S = env_int("FORQ_AUTH_BLOCK_S", 60)
FORQ_UI_URLCONF = "project.urls_ui"  # the UI listener: admin and UI pages, no API

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {"forqapp": {"level": env_str("FORQ_LOG_LEVEL", "INFO")}},
}
