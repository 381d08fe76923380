"""``manage.py forq_demo``: demo queues, messages, dead letters, a schedule and task results (:mod:`forqapp.demo`)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from ... import demo
from ...server.schema import database_problem


class Command(BaseCommand):
    help = (
        "Fill the database with a demo to look at in the admin UI: queues with policies (priorities, a rate "
        "limit, max_in_flight, visibility timeouts, a paused one), messages ready, delayed and in flight, "
        "dead letters that really failed, two schedules and, with a forqapp.tasks.ForqBackend in TASKS, task "
        "results. Every name starts with demo-. Run again, it leaves the demo as it is (--reset makes it "
        "anew). Refuses a database that holds anything else unless --force."
    )

    def add_arguments(self, parser):
        parser.add_argument("--reset", action="store_true",
                            help="delete the demo's queues, messages and schedules, then make them again")
        parser.add_argument("--force", action="store_true",
                            help="add the demo to a database that holds other queues, schedules or task results")

    def handle(self, *args, **options):
        if problem := database_problem():
            raise CommandError(problem)
        others = demo.other_data()
        if others and not options["force"]:
            raise CommandError(f"this database holds more than the demo ({'; '.join(others)}): forq_demo is for a "
                               "database to look around in; --force adds the demo beside that data")
        if demo.present():
            if not options["reset"]:
                self.stdout.write("forq_demo: the demo is there already (--reset makes it anew)")
                return
            demo.remove()
        filled = demo.fill()
        self.stdout.write(f"forq_demo: queues {', '.join(filled.queues)}; {filled.dead_letters} dead letter(s); "
                          f"schedules {', '.join(filled.schedules)}")
        if filled.tasks:
            self.stdout.write("forq_demo: task results: " + ", ".join(f"{k} {v}" for k, v in sorted(filled.tasks.items())))
        for note in filled.notes:
            self.stdout.write(f"forq_demo: {note}")
