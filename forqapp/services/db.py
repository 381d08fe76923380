"""Database calls from async code: a small pool of threads that keep their Django connections.

Django's own ``sync_to_async`` runs each request's database work on a new thread with a new
connection; the API's hot paths instead hand it to these long-lived threads, whose connections
stay open (and whose SQLite pragmas are set once).
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import DatabaseError, connections

from ..conf import forq_settings
from .wakeups import default_db_threads

T = TypeVar("T")


_ERRORS: tuple[type[Exception], ...] = (DatabaseError, sqlite3.Error)


def database_errors() -> tuple[type[Exception], ...]:
    """What a database call may raise: Django's errors (its cursors, the ORM), and the drivers' own
    from the stores' raw cursors (``sqlite3``, ``psycopg``: not ``django.db.DatabaseError``, so an
    ``except DatabaseError`` let them through — a worker died on a PostgreSQL connection terminated).

    psycopg's once it is loaded — a PostgreSQL connection loads it, and none of its errors can be
    raised before: a server on SQLite never imports it (~19 MB of memory per process)."""
    psycopg = sys.modules.get("psycopg")
    return _ERRORS if psycopg is None else (*_ERRORS, psycopg.Error)


_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _lock:
            if _pool is None:
                threads = forq_settings.FORQ_DB_THREADS
                if threads is None:
                    threads = default_db_threads()
                _pool = ThreadPoolExecutor(max_workers=int(threads), thread_name_prefix="forq-db")
    return _pool


def width() -> int:
    """How many database threads the pool has (``FORQ_DB_THREADS``, or the store's default)."""
    return pool()._max_workers


def _call(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    try:
        return fn(*args, **kwargs)
    except database_errors():
        connection = connections[forq_settings.FORQ_DATABASE]
        connection.errors_occurred = True  # (a driver's own error does not say so to Django)
        connection.close_if_unusable_or_obsolete()
        raise


def submit(fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]:
    """Run ``fn`` on a database thread; returns an awaitable future."""
    loop = asyncio.get_running_loop()
    return loop.run_in_executor(pool(), functools.partial(_call, fn, args, kwargs))


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await submit(fn, *args, **kwargs)


async def run_async(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run a service function (``fn``) on one of the database threads of :mod:`forqapp.services.db`, whose
    Django connections stay open: how the async API calls the services."""
    return await run(fn, *args, **kwargs)
