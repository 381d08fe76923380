"""forqapp: Forq, the durable message queue on an embedded database, as a reusable Django app.

The Python API::

    import forqapp

    forqapp.send("emails", '{"to": "ada@example.com"}')          # inside atomic(): an outbox
    message = forqapp.receive("emails", wait=5)
    if message:
        handle(message.content)
        forqapp.ack(message)                                      # or forqapp.nack(message)

    forqapp.configure_queue("emails", max_attempts=3, visibility_timeout=60, ordering="lifo")
    forqapp.send("emails", "urgent", priority=10, attributes={"kind": "reset"}, dedup_id="reset-42")
    task = forqapp.start_move("emails-dlq")                       # redrive: each back where it failed
"""

from __future__ import annotations

from .errors import Defer, FatalError, ForqError

__all__ = [
    "Defer",
    "FatalError",
    "ForqError",
    "ack",
    "ack_many",
    "cancel_move",
    "change_visibility",
    "configure_queue",
    "defer",
    "delete_queue",
    "extend",
    "fail",
    "group_info",
    "list_moves",
    "list_queues",
    "move_info",
    "nack",
    "nack_many",
    "peek",
    "purge",
    "queue_info",
    "receive",
    "receive_many",
    "requeue",
    "schedule",
    "list_schedules",
    "unschedule",
    "send",
    "send_many",
    "start_move",
]

_SERVICES = {
    "send", "send_many", "receive", "receive_many", "ack", "ack_many", "nack", "nack_many", "fail", "extend",
    "change_visibility", "peek", "defer", "configure_queue", "queue_info", "group_info", "list_queues", "purge", "delete_queue",
    "requeue", "start_move", "list_moves", "move_info", "cancel_move",
}


def __getattr__(name: str):
    # Lazy, so importing forqapp (e.g. from settings or INSTALLED_APPS) never loads models early;
    # then kept here, so that the next ``forqapp.send`` is a plain attribute (no call of this).
    if name in _SERVICES:
        from . import services as module
    elif name in ("schedule", "unschedule", "list_schedules"):
        from .services import schedules as module  # type: ignore[no-redef]
    elif name == "consumer":
        from .worker import consumers as module  # type: ignore[no-redef]
    else:
        raise AttributeError(f"module 'forqapp' has no attribute {name!r}")
    value = globals()[name] = getattr(module, name)
    return value
