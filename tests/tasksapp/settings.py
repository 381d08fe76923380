"""Settings of ``forq_worker`` subprocesses in the Tasks tests: the test settings' ``TASKS``, the
demo project otherwise (as tests/workerapp/settings.py)."""

from tests.workerapp.settings import *  # noqa: F403

TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["default", "other"],
                     "OPTIONS": {"queue_prefix": "tasks-"}}}
