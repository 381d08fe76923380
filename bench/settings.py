"""Settings for the benchmark: the demo project plus the bench consumers."""

from project.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "bench.benchapp"]  # noqa: F405
