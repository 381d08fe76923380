"""Settings for worker subprocesses in the tests: the demo project plus the ``tests.workerapp``
consumers, with overrides from the ``FORQ_TEST_SETTINGS`` environment variable (JSON)."""

import json
import os

from project.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.workerapp"]  # noqa: F405
FORQ_WORKER_START_JITTER_MS = 0  # workers claim at once (the tests time them)
for _name, _value in json.loads(os.environ.get("FORQ_TEST_SETTINGS", "{}")).items():
    globals()[_name] = _value
