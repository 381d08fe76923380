"""Settings for the django-tasks-db comparison: a plain project with its database backend on SQLite."""

import os

SECRET_KEY = "bench"  # noqa: S105
INSTALLED_APPS = ["django_tasks", "django_tasks_db", "bench.benchapp"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("FORQ_BENCH_TASKS_DB", "/tmp/forq-bench-tasks.sqlite3"),  # noqa: S108
        "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL;",
                    "transaction_mode": "IMMEDIATE", "timeout": 30},
    }
}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
