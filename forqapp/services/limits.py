"""``FORQ_MAX_QUEUES``: how many queues may exist.

A queue exists once it has its row in ``forq_queues``: made by its first send (on every face: the
HTTP APIs, SQS, the Python API, the tasks backend, schedules, the Spark connector's publish) or by
a configuration (``configure_queue``, the v2 API, SQS ``CreateQueue``, the admin). ``FORQ_QUEUES``
(the project's own configuration) is not refused: its queues count toward the limit, and the check
``forqapp.E050`` keeps it within.
Each of them asks :func:`ensure_queue` first, which makes the row through the store's
:meth:`~forqapp.store.Store.queue_create` — one statement on SQLite's single writer, an advisory
lock then a fresh count on PostgreSQL — so concurrent creations in any number of processes never
pass the limit together. A queue and its dead-letter queue are one queue (the DLQ has no row).
"""

from __future__ import annotations

from .. import errors, store, utils
from ..conf import hot
from ..errors import ForqError
from ..store import Store
from ..vocab import base_of


def refusal(limit: int) -> ForqError:
    return ForqError(errors.QUEUE_LIMIT, f"forqapp holds its limit of {limit} queues (FORQ_MAX_QUEUES): "
                                         "delete a queue, or raise the limit, before creating another")


def ensure_queue(st: Store, name: str) -> None:
    """Give queue ``name`` (or the queue of DLQ ``name``) its row if it has none, within
    ``FORQ_MAX_QUEUES``. Raises ``ForqError`` ``queue.limit_reached`` (409) at the limit, having
    changed nothing."""
    limit = hot("FORQ_MAX_QUEUES")
    if limit is None:
        return  # the send's own statement makes the row (no count, no lock)
    if not st.queue_create(base_of(name), utils.now_ms(), limit):
        raise refusal(limit)


def full(using: str | None = None) -> ForqError | None:
    """The refusal a new queue would get now (for forms that say it before saving: the admin's),
    or None. Only a forecast: :func:`ensure_queue` decides."""
    limit = hot("FORQ_MAX_QUEUES")
    if limit is None:
        return None
    st = store.for_alias(using or hot("FORQ_DATABASE"))
    return refusal(limit) if st.queue_count() >= limit else None
