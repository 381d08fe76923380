"""The rehearsal's hosts: the demo project, the ``rh-work`` consumer and the Django Tasks backend."""

from project.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "bench.rehearsal.app"]  # noqa: F405
TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["default"],
                     "OPTIONS": {"queue_prefix": "rh-tasks-"}}}
FORQ_WORKER_START_JITTER_MS = 0
# A schedule ticking every second: exactly one message a tick, whichever API host's scheduler holds
# the jobs lease, across restarts and clocks that differ.
FORQ_SCHEDULES = {"rh-tick": {"queue": "rh-sched", "every": 1, "content": "tick"}}
