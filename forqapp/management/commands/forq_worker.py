"""``manage.py forq_worker [QUEUE ...]``: run the registered consumers (see :mod:`forqapp.worker`)."""

from __future__ import annotations

import argparse
import signal
import sys

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from ... import validation
from ...errors import ForqError
from ...server import process
from ...server.schema import database_problem, not_applied
from ...tasks.discovery import queue_finder, with_consumers
from ...worker.consumers import registry
from ...worker.jobs import Scheduler
from ...worker.runner import Worker

# Options the --processes children do not get: the supervisor's own, and Django's that only
# ``manage.py`` reads. Every other option (a new one too) reaches them as it was given.
NOT_FOR_CHILDREN = frozenset({"queues", "processes", "with_jobs", "settings", "pythonpath", "no_color", "force_color",
                              "skip_checks"})


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

    def run_from_argv(self, argv):
        """``manage.py forq_worker``: the process exits when the command returns, at once (see
        :func:`forqapp.server.process.skip_final_collection`)."""
        try:
            super().run_from_argv(argv)
        finally:
            process.skip_final_collection()

    def handle(self, *args, **options):
        process.configure_logging(options["verbosity"])
        problems = [f"{e.msg} ({e.id})" for e in checks.run_checks()
                    if e.is_serious() and not e.is_silenced()]
        if problems:
            raise CommandError("; ".join(problems))
        if problem := database_problem():
            raise CommandError(problem)
        if note := not_applied():
            self.stderr.write(f"forq_worker: {note}")
        if note := process.unshared_metrics("forq_worker"):
            self.stderr.write(note)
        try:
            consumers = with_consumers(registry())  # and the queues of TASKS' forqapp.tasks.ForqBackend
        except ImproperlyConfigured as exc:  # e.g. two consumers for one queue
            raise CommandError(str(exc)) from None
        queues = options["queues"] or sorted(consumers)
        missing = [q for q in queues if q not in consumers]
        if missing:
            raise CommandError(f"no consumer registered for {', '.join(missing)}{_hint(missing, consumers)}")
        if not queues:
            raise CommandError("no consumers registered (use @forqapp.consumer or FORQ_CONSUMERS) and no "
                               "forqapp.tasks.ForqBackend in TASKS")
        if options["processes"] > 1:
            return self._supervise(queues, options)
        worker = Worker(
            {q: consumers[q] for q in queues},
            concurrency=options["concurrency"],
            prefetch=options["prefetch"],
            burst=options["burst"],
            max_messages=options["max_messages"],
            # (queues named on the command line: those alone; else new task queues too)
            find_queues=None if options["queues"] else queue_finder(),
        )
        worker.install_signal_handlers()
        scheduler = _start_scheduler(options)
        try:
            counts = worker.run()
        finally:
            if scheduler is not None:
                scheduler.stop()
                scheduler.join(5.0)
            process.mark_dead()
        if options["verbosity"] >= 1:
            handled = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            if options["burst"]:
                self.stdout.write("forq_worker: done, " + (handled or "nothing to do"))
            else:  # stopped (a signal): what it handled while it ran
                self.stdout.write("forq_worker: stopped, " + (f"handled {handled}" if handled else "nothing handled"))

    def _supervise(self, queues: list[str], options: dict) -> None:
        """Run ``--processes`` children (this command with its options, one process each), pass
        signals on, wait."""
        child_options = {k: v for k, v in options.items() if k not in NOT_FOR_CHILDREN}
        supervisor = process.Supervisor()
        for i in range(options["processes"]):
            # (the queues named here, else none: each child runs every queue, and finds new task queues)
            supervisor.start_command(f"worker-{i}", "forq_worker", child_options, args=options["queues"] or [],
                                     ignore_sigint=True)
        scheduler = _start_scheduler(options)
        if scheduler is not None:
            supervisor.on_first_signal(scheduler.stop)
        supervisor.install_signal_handlers()
        codes = list(supervisor.wait().values())
        if scheduler is not None:
            scheduler.stop()
            scheduler.join(5.0)
        if supervisor.signals > 1:  # a second Ctrl-C: the children were killed, as asked
            raise CommandError("second signal: worker processes killed; the messages they were running "
                               "come back after their visibility timeout", returncode=1)
        # A child that got the SIGTERM before installing its handler (still starting) held nothing.
        if any(code and not (supervisor.signals and code == -signal.SIGTERM) for code in codes):
            raise CommandError(f"worker processes exited with {codes}")


def _start_scheduler(options):
    """``--with-jobs``: the background jobs run on a thread of this process."""
    if not options["with_jobs"]:
        return None

    def on_lease(running: bool) -> None:  # said as forq_jobs and forq_serve say it
        if options["verbosity"] >= 1:
            sys.stdout.write(scheduler.lease_line(running) + "\n")
            sys.stdout.flush()

    scheduler = Scheduler(on_lease=on_lease)
    scheduler.install_signal_handlers()  # beside the worker's: the first signal stops both
    scheduler.start_thread()
    return scheduler


def _hint(missing: list[str], consumers: dict) -> str:
    """What the worker does know, and the task queue meant (a task queue's forqapp queue carries
    its backend's ``queue_prefix``: ``default`` is ``tasks-default`` with ``"tasks-"``)."""
    if not consumers:
        return ""
    from ...tasks.running import forq_backends

    meant = sorted({b.forq_queue(m) for b in forq_backends() for m in missing} & set(consumers) - set(missing))
    known = f"; this worker knows {', '.join(sorted(consumers))}"
    return (f" (the task queue's forqapp queue is {', '.join(meant)}){known}" if meant else known)
