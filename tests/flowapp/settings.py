"""Settings for the worker subprocesses of tests/test_flow.py and tests/test_defer.py: the test
worker app's (``tests.workerapp.settings``) plus the ``tests.flowapp`` consumers."""

from tests.workerapp.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.flowapp"]  # noqa: F405
