"""``manage.py forq_worker [QUEUE ...]``: run the registered consumers (see :mod:`forqapp.worker`)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from ... import validation
from ...consumers import registry
from ...errors import ForqError
from ...schema import database_problem
from ...worker import Worker

VERBOSITY_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be at least 1")
    return number


def queue_name(value: str) -> str:
    try:
        return validation.queue_name(value)
    except ForqError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid queue name") from None


class Command(BaseCommand):
    help = (
        "Run forqapp consumers: claim messages of the given queues (default: every queue with a "
        "registered consumer) straight from the database and handle them on N threads. First "
        "SIGTERM/SIGINT finishes the messages in flight and exits; a second exits at once."
    )
    # The system checks run in handle(), so that a bad FORQ_CONSUMERS path or a database without
    # forqapp's tables is one line and exit code 1, not a report or a traceback.
    requires_system_checks: list = []

    def add_arguments(self, parser):
        parser.add_argument("queues", nargs="*", type=queue_name, metavar="QUEUE",
                            help="Queues to consume (each needs a registered consumer).")
        parser.add_argument("--concurrency", "-c", type=positive_int, default=1,
                            help="Handler threads (default 1).")
        parser.add_argument("--prefetch", type=positive_int, default=None,
                            help="Messages held at once, running or waiting for a thread "
                                 "(default: --concurrency). More drains no-op handlers faster; "
                                 "each held message counts an attempt if the process crashes.")
        parser.add_argument("--processes", type=positive_int, default=1,
                            help="Worker processes, each with --concurrency threads (default 1). "
                                 "This process then supervises them (and runs the jobs with --with-jobs); "
                                 "--max-messages applies to each.")
        parser.add_argument("--burst", action="store_true",
                            help="Drain what is due, then exit.")
        parser.add_argument("--max-messages", type=positive_int, default=None,
                            help="Exit after handling this many messages.")
        parser.add_argument("--with-jobs", action="store_true",
                            help="Also run the background jobs (as forq_jobs does) in this process.")

    def handle(self, *args, **options):
        logging.getLogger("forqapp").setLevel(VERBOSITY_LEVELS.get(options["verbosity"], logging.DEBUG))
        problems = [f"{e.msg} ({e.id})" for e in checks.run_checks()
                    if e.is_serious() and not e.is_silenced()]
        if problems:
            raise CommandError("; ".join(problems))
        if problem := database_problem():
            raise CommandError(problem)
        try:
            consumers = registry()
        except ImproperlyConfigured as exc:  # e.g. two consumers for one queue
            raise CommandError(str(exc)) from None
        queues = options["queues"] or sorted(consumers)
        missing = [q for q in queues if q not in consumers]
        if missing:
            raise CommandError(f"no consumer registered for {', '.join(missing)}")
        if not queues:
            raise CommandError("no consumers registered (use @forqapp.consumer or FORQ_CONSUMERS)")
        if options["processes"] > 1:
            return self._supervise(queues, options)
        worker = Worker(
            {q: consumers[q] for q in queues},
            concurrency=options["concurrency"],
            prefetch=options["prefetch"],
            burst=options["burst"],
            max_messages=options["max_messages"],
        )
        scheduler = _start_scheduler(options)
        stops = 0

        def on_signal(signum, frame):
            nonlocal stops
            stops += 1
            if stops > 1:
                sys.stderr.write("forq_worker: second signal, exiting now\n")
                sys.stderr.flush()
                os._exit(1)
            logging.getLogger("forqapp").warning(
                "forq_worker: %s received, finishing the messages in flight (again to exit now)",
                signal.Signals(signum).name)
            worker.stop()
            if scheduler is not None:
                scheduler.stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        try:
            counts = worker.run()
        finally:
            if scheduler is not None:
                scheduler.stop()
                scheduler.join(5.0)
            if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
                from prometheus_client import multiprocess

                multiprocess.mark_process_dead(os.getpid())
        if options["verbosity"] >= 1:
            self.stdout.write(
                "forq_worker: done, " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "nothing to do")
            )

    def _supervise(self, queues: list[str], options: dict) -> None:
        """Run ``--processes`` children (``forq_worker --processes 1``), pass signals on, wait."""
        from django.conf import settings

        command = [sys.executable, "-m", "django", "forq_worker", *queues,
                   "--concurrency", str(options["concurrency"]), "--verbosity", str(options["verbosity"]),
                   "--settings", settings.SETTINGS_MODULE]
        if options["prefetch"]:
            command += ["--prefetch", str(options["prefetch"])]
        if options["burst"]:
            command.append("--burst")
        if options["max_messages"]:
            command += ["--max-messages", str(options["max_messages"])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        children = [subprocess.Popen(command, env=env) for _ in range(options["processes"])]
        scheduler = _start_scheduler(options)
        stops = 0

        def on_signal(signum, frame):
            nonlocal stops
            stops += 1
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGKILL if stops > 1 else signal.SIGTERM)
            if stops > 1:
                os._exit(1)
            if scheduler is not None:
                scheduler.stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        codes = [child.wait() for child in children]
        if scheduler is not None:
            scheduler.stop()
            scheduler.join(5.0)
        # A child that got the SIGTERM before installing its handler (still starting) held nothing.
        if any(code and not (stops and code == -signal.SIGTERM) for code in codes):
            raise CommandError(f"worker processes exited with {codes}")


def _start_scheduler(options):
    """``--with-jobs``: the background jobs run on a thread of this process."""
    if not options["with_jobs"]:
        return None
    from ...jobs import Scheduler

    scheduler = Scheduler()
    scheduler.start_thread()
    return scheduler
