"""Test settings: the demo project, with the queue in a file-based SQLite database (the tests run
several processes and threads on it, as production does) or, with DATABASE_URL, PostgreSQL."""

import os
import tempfile

os.environ.setdefault("FORQ_AUTH_SECRET", "test-secret-0123456789abcdef-0123456789")
_own_file = "FORQ_DB_PATH" not in os.environ  # a file of this run's own, not one the caller named
os.environ.setdefault("FORQ_DB_PATH", os.path.join(tempfile.gettempdir(), f"forq-test-{os.getpid()}.sqlite3"))

from project.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
FORQ_WAKE_FALLBACK_MS = 100
FORQ_WORKER_START_JITTER_MS = 0
# Dashboard counts in the request: most tests hold their data in a transaction other threads can't
# see. tests/test_ui.py::test_first_dashboard_of_a_process_never_waits_for_a_slow_count covers the
# background first count.
FORQ_UI_COLD_WAIT_MS = None
# The Django Tasks backend (issue 14): the tasks of tests/tasksapp run on forqapp's "tasks-…" queues.
TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["default", "other"],
                     "OPTIONS": {"queue_prefix": "tasks-"}}}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": os.environ["FORQ_DB_PATH"] + ".test"}  # noqa: F405
    # This run's SQLite files, removed when the session ends (tests/conftest.py): Django deletes the
    # test database but not its -wal (tens of MB) and -shm, which threads holding a connection until
    # the process exits (the notifier's) keep, nor the API's -writer.lock. A FORQ_DB_PATH given by the
    # caller itself is kept.
    TEST_SQLITE_FILES = [
        os.environ["FORQ_DB_PATH"] + suffix
        for suffix in ((".test", ".test-wal", ".test-shm", ".test-writer.lock")
                       + (("", "-wal", "-shm", "-writer.lock") if _own_file else ()))
    ]
