"""Is the queue's database ready for forqapp? For commands that would otherwise fail on their first
query with a traceback (``forq_worker`` or ``forq_jobs`` started before ``migrate``), and does it
hold what ``FORQ_QUEUES`` declares (a changed setting not applied yet)."""

from __future__ import annotations

from django.db import DatabaseError, connections
from django.db.migrations.loader import MigrationLoader

from .. import services
from ..conf import forq_settings
from ..models import Message

NO_TABLES = "the database has no forqapp tables"


def migrate_command(using: str | None = None) -> str:
    """The ``migrate`` that applies forqapp's migrations to the database ``using`` (the queue's by
    default): ``--database`` named when it is not ``default``, which a plain ``migrate`` leaves."""
    alias = using or forq_settings.FORQ_DATABASE
    return "manage.py migrate" if alias == "default" else f"manage.py migrate --database {alias}"


def database_problem(using: str | None = None) -> str | None:
    """One line saying why forqapp cannot work on its database yet, or None when it can."""
    connection = connections[using or forq_settings.FORQ_DATABASE]
    try:
        tables = connection.introspection.table_names()
        if Message._meta.db_table not in tables:
            return f"{NO_TABLES}: run {migrate_command(using)}"
        # Tables from an older forqapp: a newer column (e.g. last_error) would fail mid-work.
        loader = MigrationLoader(connection)
        applied = {name for app, name in loader.applied_migrations if app == "forqapp"}
        missing = sorted(name for app, name in loader.graph.nodes if app == "forqapp" and name not in applied)
    except DatabaseError as exc:
        return f"database {connection.settings_dict.get('NAME')!s} unusable ({' '.join(str(exc).split())})"
    if missing:
        return f"the database lacks forqapp migrations ({', '.join(missing)}): run {migrate_command(using)}"
    return None


def not_applied(using: str | None = None) -> str | None:
    """One line naming the queues whose ``FORQ_QUEUES`` entry the database does not hold yet (the
    setting changed since the last ``migrate``), or None. For the commands that start work."""
    if not forq_settings.FORQ_QUEUES:
        return None
    try:
        names = services.undeclared(forq_settings.FORQ_QUEUES, using=using)
    except DatabaseError:
        return None  # database_problem() says what is wrong
    if not names:
        return None
    return (f"FORQ_QUEUES is not what the database holds for {', '.join(names)}: run manage.py forq_queues apply "
            "(or migrate) to apply it")
