"""The worker: ``manage.py forq_worker`` runs the registered consumers (:mod:`.consumers`) with a
:class:`Worker` (:mod:`.runner`); :mod:`.jobs` is the scheduler of forqapp's background jobs."""

from .consumers import Consumer
from .runner import Worker

__all__ = ["Consumer", "Worker"]
