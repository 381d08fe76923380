"""``manage.py forq_keys``: create, list, revoke and rotate scoped API keys (:mod:`forqapp.keys`)."""

from __future__ import annotations

import argparse

from django.core.management.base import BaseCommand, CommandError

from ...keys import cli, service
from ...server.schema import database_problem
from ..subcommands import add_subcommands


class Command(BaseCommand):
    help = (
        "Scoped API keys. `create NAME --grant PATTERN:ACTION[,ACTION] … [--expires 90d|DATE]` prints the "
        "access key id, the secret (shown once) and, last, the X-API-Key token; `list`; `revoke KEY`; "
        "`rotate KEY` (a new secret, same id and grants). KEY is a name or an access key id. Patterns: "
        "a queue name, PREFIX.* or *; add +dlq to cover the dead-letter queues. Actions: produce, "
        "consume, manage, read."
    )

    def add_arguments(self, parser):
        sub = add_subcommands(parser, dest="action", metavar="{create,list,revoke,rotate}", required=True)
        create = sub.add_parser("create", help="Create a key.")
        create.add_argument("name")
        create.add_argument("--grant", action="append", required=True, metavar="PATTERN:ACTION[,ACTION]",
                            help="e.g. orders:produce, orders.*:consume,read, orders+dlq:manage (repeatable)")
        create.add_argument("--expires", type=cli.parse_expires, metavar="90d|2027-01-01",
                            help="a duration from now (s, m, h, d, w) or an ISO date/time (UTC)")
        listing = sub.add_parser("list", help="List the keys, their grants, state and last use.")
        listing.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="Print JSON.")
        # (before the subcommand too: `forq_keys --json list`, as `forq_queues --json list`)
        parser.add_argument("--json", action="store_true", help="Print JSON (list).")
        for name, text in (("revoke", "Revoke a key for good."), ("rotate", "Give a key a new secret.")):
            sub.add_parser(name, help=text).add_argument("key", help="name or access key id")

    def handle(self, *args, **options):
        if problem := database_problem():
            raise CommandError(problem)
        action = options["action"]
        if action in ("create", "rotate") and (problem := cli.sealing_problem()):
            raise CommandError(problem)
        try:
            if action == "create":
                issued = service.create(options["name"], options["grant"], expires_at=options.get("expires"),
                                        actor=cli.actor(), via="cli")
                lines = cli.issued_lines(issued)
            elif action == "list":
                lines = cli.listing(options.get("json", False))
            elif action == "revoke":
                key = service.find(options["key"])
                done = service.revoke(key, actor=cli.actor(), via="cli")
                lines = [f"revoked {key}" if done else f"{key} was revoked already"]
            else:
                lines = cli.issued_lines(service.rotate(service.find(options["key"]), actor=cli.actor(), via="cli"))
        except service.KeyError_ as exc:
            raise CommandError(str(exc)) from None
        for line in lines:
            self.stdout.write(line)
