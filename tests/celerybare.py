"""A Celery app as the Celery how-to's ``proj/celery.py``: Django is not set up here, the app
registers ``forq://`` itself (for celery's commands other than the worker). Outside the
``tests.celeryapp`` package, whose import sets Django up."""

import os

from celery import Celery

import forqapp.celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
forqapp.celery.register()

app = Celery("bare")
app.conf.broker_url = "forq://"
