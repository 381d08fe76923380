"""Settings for the benchmark: the demo project plus the bench consumers."""

from project.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "bench.benchapp"]  # noqa: F405
# The wall-time figures count from the start: no random start-up wait (forqapp ignores this
# setting before it had one, so before/after runs compare).
FORQ_WORKER_START_JITTER_MS = 0
