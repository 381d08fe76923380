"""Raw SQL, one module per database backend, with the same functions: :mod:`.sqlite`, :mod:`.postgresql`.

Callers get the module for a Django connection with :func:`for_connection` and pass it the DB-API
connection from :func:`raw`.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

_MODULES = {"sqlite": "forqapp.store.sqlite", "postgresql": "forqapp.store.postgresql"}


def for_connection(connection) -> ModuleType:
    try:
        return import_module(_MODULES[connection.vendor])
    except KeyError:
        raise NotImplementedError(
            f"forqapp supports SQLite and PostgreSQL, not {connection.vendor!r}"
        ) from None


def raw(connection):
    """The DB-API connection under a Django connection wrapper (opened if needed)."""
    connection.ensure_connection()
    return connection.connection
