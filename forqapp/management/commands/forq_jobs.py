"""``manage.py forq_jobs``: Forq's background jobs, all on their intervals or one at a time."""

from __future__ import annotations

import inspect
import re
import sys

from django.core.management.base import BaseCommand, CommandError

from ...server import process
from ...server.schema import database_problem
from ...worker.jobs import JOBS, Scheduler, run
from ..subcommands import add_subcommands


class Command(BaseCommand):
    help = (
        f"Run forqapp's background jobs ({', '.join(JOBS)}) on their intervals until SIGTERM/SIGINT, while this process "
        "holds the database's jobs lease (one scheduler per database: forq_serve's, this, or "
        "forq_worker --with-jobs); or, with `run NAME [--dry-run]`, one job once, lease or not — "
        "can be run from cron."
    )

    def add_arguments(self, parser):
        sub = add_subcommands(parser, dest="action", metavar="{run,list}")
        run_parser = sub.add_parser("run", help="Run one job once and print its count (for cron).")
        run_parser.add_argument("name", choices=sorted(JOBS), metavar="NAME",
                                help="One of: " + ", ".join(sorted(JOBS)) + ".")
        run_parser.add_argument("--dry-run", action="store_true",
                                help="Count what the job would do; change nothing.")
        sub.add_parser("list", help="List the jobs and their intervals.")

    def handle(self, *args, **options):
        process.configure_logging(options["verbosity"])
        action = options.get("action")
        if action == "list":
            for job in JOBS.values():
                summary = _first_sentence(job.func.__doc__ or "")
                self.stdout.write(f"{job.name:12} every {f'{job.every():g}s':7} {summary}")
            return
        if problem := database_problem():  # before migrate: one line, not a traceback
            raise CommandError(problem)
        if action == "run":
            name, dry_run = options["name"], options["dry_run"]
            n = run(name, dry_run=dry_run)
            verb = "would handle" if dry_run else "handled"
            self.stdout.write(f"{name}: {verb} {n}")
            return
        self._run_forever(options["verbosity"])

    def _run_forever(self, verbosity: int) -> None:
        def on_lease(running: bool) -> None:
            if verbosity >= 1:
                self.stdout.write(scheduler.lease_line(running))
                self.stdout.flush()

        if note := process.unshared_metrics("forq_jobs"):
            self.stderr.write(note)
        scheduler = Scheduler(on_lease=on_lease)
        scheduler.install_signal_handlers()
        if verbosity >= 1:
            self.stdout.write("forq_jobs: " + ", ".join(f"{j.name} every {j.every():g}s" for j in scheduler.jobs))
            self.stdout.flush()
        try:
            scheduler.run_forever()
        finally:
            process.mark_dead()
        if verbosity >= 1:
            self.stdout.write("forq_jobs: stopped")
        sys.stdout.flush()


def _first_sentence(doc: str) -> str:
    """A job's docstring's first sentence, on one line (its first paragraph may wrap)."""
    paragraph = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split()).replace("``", "")
    paragraph = re.sub(r":\w+:`~?([^`]*)`", r"\1", paragraph)  # :mod:`forqapp.tasks` → forqapp.tasks
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[:end + 1]
