"""``manage.py forq_jobs``: Forq's background jobs, all on their intervals or one at a time."""

from __future__ import annotations

import logging
import os
import signal
import sys

from django.core.management.base import BaseCommand, CommandError

from ...jobs import JOBS, Scheduler, run
from ...schema import database_problem

VERBOSITY_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


class Command(BaseCommand):
    help = (
        "Run forqapp's background jobs (expired, failed, stale, expired-dlq, failed-dlq, "
        "db-optimize, queue-depth) on Forq's intervals until SIGTERM/SIGINT, while this process "
        "holds the database's jobs lease (one scheduler per database: forq_serve's, this, or "
        "forq_worker --with-jobs); or, with `run NAME [--dry-run]`, one job once, lease or not — "
        "can be run from cron."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", metavar="{run,list}")
        run_parser = sub.add_parser("run", help="Run one job once and print its count (for cron).")
        run_parser.add_argument("name", choices=sorted(JOBS), metavar="NAME",
                                help="One of: " + ", ".join(sorted(JOBS)) + ".")
        run_parser.add_argument("--dry-run", action="store_true",
                                help="Count what the job would do; change nothing.")
        sub.add_parser("list", help="List the jobs and their intervals.")

    def handle(self, *args, **options):
        logging.getLogger("forqapp").setLevel(VERBOSITY_LEVELS.get(options["verbosity"], logging.DEBUG))
        action = options.get("action")
        if action == "list":
            for job in JOBS.values():
                self.stdout.write(f"{job.name:12} every {job.every():g}s  {job.func.__doc__.strip().splitlines()[0]}")
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
                self.stdout.write("forq_jobs: " + (
                    "running the jobs (this process holds the database's jobs lease)" if running
                    else "standing by: another process holds the database's jobs lease and runs the jobs"))
                self.stdout.flush()

        scheduler = Scheduler(on_lease=on_lease)
        stops = 0

        def on_signal(signum, frame):
            nonlocal stops
            stops += 1
            if stops > 1:
                os._exit(1)
            logging.getLogger("forqapp").warning("forq_jobs: %s received, stopping",
                                                 signal.Signals(signum).name)
            scheduler.stop()

        signal.signal(signal.SIGTERM, on_signal)
        # A SIGINT ignored from the start stays ignored: forq_serve starts this process so, and stops
        # it with one SIGTERM (a Ctrl-C reaches the whole process group: two signals would make
        # this process exit at once, without giving the lease up).
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, on_signal)
        if verbosity >= 1:
            self.stdout.write("forq_jobs: " + ", ".join(f"{j.name} every {j.every():g}s" for j in scheduler.jobs))
            self.stdout.flush()
        try:
            scheduler.run_forever()
        finally:
            if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
                from prometheus_client import multiprocess

                multiprocess.mark_process_dead(os.getpid())
        if verbosity >= 1:
            self.stdout.write("forq_jobs: stopped")
        sys.stdout.flush()
