"""Celery on forqapp: the ``forq://`` broker (a kombu transport, :mod:`forqapp.celery.transport`).

``broker_url = "forq://"`` (in a Django project, ``CELERY_BROKER_URL = "forq://"``) runs Celery on
forqapp's queues, on the project's own database: ``forq://ALIAS`` names another database alias.
forqapp registers the ``forq`` scheme with kombu when Django loads it, if kombu is installed (Celery
and kombu are optional: ``pip install forqapp[celery]``).
"""

from __future__ import annotations

TRANSPORT = "forqapp.celery.transport:Transport"


def register() -> bool:
    """Make ``forq://`` a kombu transport; False when kombu is not installed."""
    try:
        from kombu.transport import TRANSPORT_ALIASES  # (optional: forqapp runs without it)
    except ImportError:
        return False
    TRANSPORT_ALIASES.setdefault("forq", TRANSPORT)
    return True
