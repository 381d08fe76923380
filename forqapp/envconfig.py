"""Helpers for a project's ``settings.py`` that reads Forq's environment variables.

A malformed value never raises here (a traceback at settings import is no way to tell a user their
``FORQ_QUEUE_TTL_HOURS`` is wrong): it is recorded in :data:`ERRORS` and the default is used; the
system check ``forqapp.E020`` reports each one, and ``forq_serve`` refuses to start on it.
"""

from __future__ import annotations

import os
from pathlib import Path

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


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw.strip())
    except ValueError:
        ERRORS.append(f"{name}={raw!r} is not an integer")
        return default


def sqlite_database(path: str | os.PathLike[str], *, busy_timeout_s: float = 30.0) -> dict:
    """A ``DATABASES`` entry for a queue in an SQLite file, with the pragmas Forq sets per connection.

    WAL itself is persistent and set by the migrations. ``transaction_mode="IMMEDIATE"`` makes every
    ``atomic()`` block take the write lock up front, so no transaction fails on a lock upgrade.
    """
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # reported where it matters, in one line: forq_serve's start-up checks, migrate's error
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {
            "timeout": busy_timeout_s,
            "transaction_mode": "IMMEDIATE",
            "init_command": (
                "PRAGMA synchronous=NORMAL;"
                "PRAGMA temp_store=MEMORY;"
                f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)};"
                "PRAGMA optimize=0x10002;"
            ),
        },
    }
