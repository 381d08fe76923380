"""``manage.py forq_queues``: list the queues with their policy and counts, or apply ``FORQ_QUEUES``."""

from __future__ import annotations

import argparse
import json

from django.core.management.base import BaseCommand, CommandError

from ... import services
from ...conf import forq_settings
from ...errors import ForqError
from ...server.schema import database_problem, not_applied
from ...services import schedules
from ..subcommands import add_subcommands


class Command(BaseCommand):
    help = (
        "List the queues (policy, paused, counts by state), or `apply` the FORQ_QUEUES setting (each "
        "queue it names gets exactly that policy; fields it leaves out follow the global settings) and "
        "FORQ_SCHEDULES (each schedule it names is created or updated). Idempotent; `migrate` applies "
        "both too."
    )

    def add_arguments(self, parser):
        sub = add_subcommands(parser, dest="action", metavar="{list,apply}")
        listing = sub.add_parser("list", help="List every queue (the default).")
        sub.add_parser("apply", help="Apply FORQ_QUEUES.")
        parser.add_argument("--json", action="store_true", help="Print JSON (list).")
        # (after the subcommand too: `forq_queues list --json`, as `forq_keys list --json`)
        listing.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="Print JSON.")

    def handle(self, *args, **options):
        if problem := database_problem():
            raise CommandError(problem)
        if options.get("action") == "apply":
            try:
                applied = apply_declared_queues()
            except ForqError as e:
                raise CommandError(f"FORQ_QUEUES: {e}") from None
            for name in applied:
                self.stdout.write(f"applied the policy of {name}")
            try:
                scheduled = schedules.declare()
            except ForqError as e:
                raise CommandError(f"FORQ_SCHEDULES: {e}") from None
            for name in scheduled:
                self.stdout.write(f"applied the schedule {name}")
            if not applied and not scheduled:
                self.stdout.write("FORQ_QUEUES and FORQ_SCHEDULES declare nothing")
            return
        queues = services.list_queues()
        if options["json"]:
            self.stdout.write(json.dumps([q.json() for q in queues], indent=2))
            return
        for q in queues:
            counts = " ".join(f"{k}={v}" for k, v in q.counts.items())
            own = ", ".join(f"{k}={v}" for k, v in q.overrides.items()) or "global policy"
            self.stdout.write(f"{q.name:24} {'PAUSED ' if q.paused else ''}{counts}  ({own})")
        if note := not_applied():
            self.stderr.write(note)


def after_migrate(using: str) -> None:
    """``FORQ_QUEUES`` and ``FORQ_SCHEDULES`` applied after a migrate of forqapp's database (not
    after a partial or backwards one: the tables must be as the code expects)."""
    if using != forq_settings.FORQ_DATABASE or not (forq_settings.FORQ_QUEUES or forq_settings.FORQ_SCHEDULES):
        return
    if database_problem(using) is None:
        apply_declared_queues(using)
        schedules.declare(using)


def apply_declared_queues(using: str | None = None) -> list[str]:
    """Give every queue of ``FORQ_QUEUES`` exactly its declared policy; returns their names."""
    declared = forq_settings.FORQ_QUEUES
    for name, fields in declared.items():
        services.declare_queue(name, dict(fields), using=using)
    return list(declared)
