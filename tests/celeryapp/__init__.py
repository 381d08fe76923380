"""A Celery app on ``forq://`` for tests/test_celery.py. Its worker runs in a subprocess
(``celery -A tests.celeryapp worker``) on the test database; each task appends a line
``run KEY TIME [EXTRA]`` to the file named by ``$FORQ_CELERY_RUNS``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import django
from django.apps import apps

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
if not apps.ready:  # the worker: Django first (it registers forq:// with kombu)
    django.setup()

from celery import Celery  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402

app = Celery("celeryapp")
app.conf.update(
    # forq:// (the tests); bench/celery_bench.py also runs it on kombu's SQS and Redis transports
    broker_url=os.environ.get("FORQ_CELERY_BROKER", "forq://"),
    broker_transport_options={"visibility_timeout": float(os.environ.get("FORQ_CELERY_VISIBILITY", "30")),
                              **json.loads(os.environ.get("FORQ_CELERY_TRANSPORT_OPTIONS", "{}"))},
    task_acks_late=True,
    worker_prefetch_multiplier=4,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


def _record(key: str, extra: str = "") -> None:
    with open(os.environ["FORQ_CELERY_RUNS"], "a", encoding="utf-8") as f:  # one short append: atomic
        f.write(f"run {key} {time.time():.6f} {extra}\n")


@app.task
def record(key: str) -> None:
    _record(key)


@app.task(bind=True)
def retry_once(self, key: str) -> None:
    _record(key)
    if self.request.retries == 0:
        raise self.retry(countdown=1)


@app.task
def sees_user(key: str) -> None:
    _record(key, str(User.objects.filter(username=key).exists()))


@app.task
def stuck_once(key: str) -> None:
    """Runs for ten minutes the first time (the test kills its worker meanwhile), at once after."""
    _record(key)
    marker = Path(os.environ["FORQ_CELERY_RUNS"] + "." + key)
    if not marker.exists():
        marker.touch()
        time.sleep(600)
