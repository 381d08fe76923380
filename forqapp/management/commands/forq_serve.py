"""``manage.py forq_serve``: the API on FORQ_API_ADDR, the admin UI on FORQ_UI_ADDR, and the
background jobs (:class:`forqapp.server.serving.Server`).

It refuses to start, in one line, on a bad setting, a database that is not ready or a port that
cannot be listened on. Then it replaces itself (same pid) with the Django-free supervisor
:mod:`forqapp.server.supervise`. The jobs run in the API workers, only while one holds the database's jobs
lease, so any number of ``forq_serve`` (and ``forq_jobs``) on one database run them once;
``--no-jobs`` or ``FORQ_SERVE_JOBS=false`` leaves them to ``forq_jobs`` or cron.
"""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from ... import services
from ...checks import serve_problems
from ...conf import forq_settings
from ...server.schema import migrate_command, not_applied
from ...server.serving import Server, listeners, unbindable


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def database_problems() -> list[str]:
    """What keeps the database from serving (unreachable, unusable, unmigrated), one line each."""
    problems = services.startup_problems()
    if problems:
        return problems
    connection = connections[forq_settings.FORQ_DATABASE]
    try:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:  # noqa: BLE001 - reported in one line
        return [f"database {connection.settings_dict['NAME']!s} unusable ({exc})"]
    finally:
        connection.close()
    if pending:
        return [f"the database has unapplied migrations: run `python {migrate_command()}`"]
    return []


class Command(BaseCommand):
    help = (
        "Serve forqapp's HTTP API (FORQ_API_ADDR), admin UI (FORQ_UI_ADDR) and, when FORQ_SQS_ADDR is set, "
        "its SQS-compatible endpoint with granian, and run "
        "the background jobs (one scheduler per database, by a lease in the database)."
    )
    requires_system_checks: list = []  # checked below, with one-line messages

    def add_arguments(self, parser):
        parser.add_argument("--api-workers", type=_positive, default=None,
                            help="API worker processes (default FORQ_API_WORKERS, else 1 on SQLite, 2 on PostgreSQL).")
        parser.add_argument("--ui-workers", type=_positive, default=None,
                            help="UI worker processes (default FORQ_UI_WORKERS, 1).")
        parser.add_argument("--no-ui", action="store_true", help="Serve the API only.")
        parser.add_argument("--no-jobs", action="store_true",
                            help="Run no background jobs (FORQ_SERVE_JOBS=false does the same): "
                                 "leave them to forq_jobs or cron.")

    def handle(self, *args, **options):
        problems = serve_problems()
        if problems:  # the listeners' addresses must parse before they can be tried
            raise CommandError("cannot start: " + "; ".join(problems))
        where = listeners(ui=not options["no_ui"])
        problems = database_problems() + [
            f"{setting} {host}:{port} cannot be listened on ({reason})"
            for setting, (host, port) in where.values()
            if (reason := unbindable(host, port))
        ]
        if problems:
            raise CommandError("cannot start: " + "; ".join(problems))
        if note := not_applied():
            self.stderr.write(f"forq_serve: {note}")
        connections[forq_settings.FORQ_DATABASE].close()  # none open in the processes it forks
        server = Server(where, api_workers=options["api_workers"], ui_workers=options["ui_workers"],
                        jobs=not options["no_jobs"] and forq_settings.FORQ_SERVE_JOBS,
                        verbosity=options["verbosity"], stdout=self.stdout, stderr=self.stderr)
        if server.run():
            sys.exit(1)
