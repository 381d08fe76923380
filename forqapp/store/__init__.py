"""Raw SQL, one class per database behind one contract (:class:`~forqapp.store.base.Store`):
:class:`~forqapp.store.sqlite.SQLiteStore`, :class:`~forqapp.store.postgresql.PostgreSQLStore`.

Only :mod:`forqapp.services` calls a store (:mod:`forqapp.checks` asks it for its system checks).
:func:`for_alias` gives the store of a Django database alias, made once per process.
"""

from __future__ import annotations

import threading
from importlib import import_module

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..conf import forq_settings
from .base import (
    BATCH,
    POLICY_COLUMNS,
    Claim,
    Delivery,
    GroupState,
    LeaseHolder,
    MessageRow,
    MoveStep,
    MoveTaskRow,
    NewMessage,
    QueueCounts,
    QueueDepth,
    QueueRow,
    ScheduleRow,
    SnapshotBounds,
    SnapshotRow,
    StagedMessage,
    StateCounts,
    Store,
    ThrottleState,
    queue_counts_of,
)

__all__ = [
    "BATCH",
    "POLICY_COLUMNS",
    "GroupState",
    "Claim",
    "Delivery",
    "LeaseHolder",
    "MessageRow",
    "MoveStep",
    "MoveTaskRow",
    "NewMessage",
    "QueueCounts",
    "QueueDepth",
    "QueueRow",
    "ScheduleRow",
    "SnapshotBounds",
    "SnapshotRow",
    "StagedMessage",
    "StateCounts",
    "Store",
    "ThrottleState",
    "queue_counts_of",
    "for_alias",
    "configure_connection",
    "store_class",
]

# Django's ``connection.vendor`` → the store class serving it (imported on first use: the
# PostgreSQL store needs psycopg, which a SQLite-only install lacks).
CLASSES = {
    "sqlite": "forqapp.store.sqlite.SQLiteStore",
    "postgresql": "forqapp.store.postgresql.PostgreSQLStore",
}

_stores: dict[str, Store] = {}
_lock = threading.Lock()


def store_class(vendor: str) -> type[Store]:
    try:
        module, _, name = CLASSES[vendor].rpartition(".")
    except KeyError:
        raise NotImplementedError(f"forqapp supports SQLite and PostgreSQL, not {vendor!r}") from None
    cls: type[Store] = getattr(import_module(module), name)
    return cls


def for_alias(alias: str) -> Store:
    """The store of the Django database ``alias`` (one per alias and process; no connection made)."""
    try:
        return _stores[alias]
    except KeyError:
        with _lock:
            if alias not in _stores:
                _stores[alias] = store_class(connections[alias].vendor)(alias)
            return _stores[alias]


def configure_connection(sender: object, connection: BaseDatabaseWrapper, **kwargs: object) -> None:
    """``connection_created``: on the queue's database, SQLite's ``synchronous`` is
    ``FORQ_SYNCHRONOUS`` (after the ``init_command`` of its ``OPTIONS``, whatever that says)."""
    if connection.vendor == "sqlite" and connection.alias == forq_settings.FORQ_DATABASE:
        mode = forq_settings.FORQ_SYNCHRONOUS  # checked: NORMAL or FULL
        connection.connection.execute(f"PRAGMA synchronous={mode}")
