"""Connection ``OPTIONS`` each database needs for the queue, for a project's ``DATABASES``.

Django-free (read by ``settings.py`` through :mod:`forqapp.envconfig`); keyed by Django ENGINE, so
an option of one driver is never given to another.
"""

from __future__ import annotations

from typing import Any


def sqlite_options(*, busy_timeout_s: float = 30.0) -> dict[str, Any]:
    """The pragmas Forq sets per connection. WAL itself is persistent and set by the migrations.
    ``transaction_mode="IMMEDIATE"`` makes every ``atomic()`` block take the write lock up front,
    so no transaction fails on a lock upgrade."""
    return {
        "timeout": busy_timeout_s,
        "transaction_mode": "IMMEDIATE",
        "init_command": (
            "PRAGMA synchronous=NORMAL;"
            "PRAGMA temp_store=MEMORY;"
            f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)};"
            "PRAGMA optimize=0x10002;"
        ),
    }


def postgresql_options(*, prepare_threshold: int | None = 5) -> dict[str, Any]:
    """psycopg's ``prepare_threshold`` (None: never prepare, as a pgbouncer in transaction mode
    older than 1.21 needs), and libpq's ``connect_timeout``: a server out of reach (a cut link, a
    host gone) fails a new connection in 10 s, answered 503 and retried, where libpq would wait for
    the kernel's SYN retries (over 2 minutes) with a thread and a request held."""
    return {"prepare_threshold": prepare_threshold, "connect_timeout": 10}


def database_options(engine: str, *, busy_timeout_s: float = 30.0,
                     prepare_threshold: int | None = 5) -> dict[str, Any]:
    """The ``OPTIONS`` for a ``DATABASES`` entry of ``engine``; each tuning value applies only to
    the engine it belongs to. An engine forqapp has no store for gets none."""
    if engine == "django.db.backends.sqlite3":
        return sqlite_options(busy_timeout_s=busy_timeout_s)
    if engine in ("django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis"):
        return postgresql_options(prepare_threshold=prepare_threshold)
    return {}
