"""Keeps forqapp's tables on the ``FORQ_DATABASE`` alias (e.g. a queue in its own SQLite file).

    DATABASE_ROUTERS = ["forqapp.routers.ForqRouter"]
"""

from __future__ import annotations

from .conf import forq_settings

APP = "forqapp"


class ForqRouter:
    def db_for_read(self, model, **hints):
        return forq_settings.FORQ_DATABASE if model._meta.app_label == APP else None

    db_for_write = db_for_read

    def allow_relation(self, obj1, obj2, **hints):
        return None

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        if app_label == APP:
            return db == forq_settings.FORQ_DATABASE
        return None
