"""Helpers for a project's ``settings.py`` that reads Forq's environment variables.

A malformed value never raises here (a traceback at settings import is no way to tell a user their
``FORQ_QUEUE_TTL_HOURS`` is wrong): it is recorded in :data:`ERRORS` and the default is used; the
system check ``forqapp.E020`` reports each one, and ``forq_serve`` refuses to start on it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .store.options import database_options

ERRORS: list[str] = []

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    ERRORS.append(f"{name}={raw!r} is not a boolean (use true or false)")
    return default


def env_optional_int(name: str) -> int | None:
    """The integer in ``name``, or None when it is unset or empty (the setting's own default)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    return env_int(name, 0)


def env_header(name: str) -> tuple[str, str] | None:
    """A header and the value that means HTTPS, ``"X-Forwarded-Proto: https"`` in ``name``, as
    Django's ``SECURE_PROXY_SSL_HEADER`` takes it (``("HTTP_X_FORWARDED_PROTO", "https")``); None
    when it is unset or empty."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    header, sep, value = raw.partition(":")
    header, value = header.strip(), value.strip()
    if not sep or not value or not header or not all(c.isalnum() or c == "-" for c in header):
        ERRORS.append(f"{name}={raw!r} is not 'Header-Name: value' (e.g. 'X-Forwarded-Proto: https')")
        return None
    return "HTTP_" + header.upper().replace("-", "_"), value


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw.strip())
    except ValueError:
        ERRORS.append(f"{name}={raw!r} is not an integer")
        return default


def sqlite_database(path: str | os.PathLike[str], *, busy_timeout_s: float = 30.0) -> dict[str, Any]:
    """A ``DATABASES`` entry for a queue in an SQLite file, with the pragmas Forq sets per connection
    (:func:`forqapp.store.options.sqlite_options`)."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # reported where it matters, in one line: forq_serve's start-up checks, migrate's error
    engine = "django.db.backends.sqlite3"
    return {"ENGINE": engine, "NAME": str(path),
            "OPTIONS": database_options(engine, busy_timeout_s=busy_timeout_s)}


def url_database(url: str, *, conn_max_age: int = 600, prepare_threshold: int | None = 5) -> dict[str, Any]:
    """A ``DATABASES`` entry for ``DATABASE_URL`` (dj-database-url), persistent connections checked
    before reuse, with the options of that URL's engine only (psycopg's ``prepare_threshold`` for
    PostgreSQL; nothing PostgreSQL-only for another database)."""
    import dj_database_url

    entry: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=conn_max_age, conn_health_checks=True))
    options = database_options(entry["ENGINE"], prepare_threshold=prepare_threshold)
    if options:
        entry.setdefault("OPTIONS", {}).update(options)
    return entry
