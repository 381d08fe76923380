"""forqapp: Forq, the durable message queue on an embedded database, as a reusable Django app.

The Python API::

    import forqapp

    forqapp.send("emails", '{"to": "ada@example.com"}')          # inside atomic(): an outbox
    message = forqapp.receive("emails", wait=5)
    if message:
        handle(message.content)
        forqapp.ack(message)                                      # or forqapp.nack(message)
"""

from __future__ import annotations

from .errors import FatalError, ForqError

__all__ = [
    "FatalError",
    "ForqError",
    "ack",
    "extend",
    "fail",
    "nack",
    "receive",
    "send",
    "send_many",
]

_SERVICES = {"send", "send_many", "receive", "ack", "nack", "fail", "extend"}


def __getattr__(name: str):
    # Lazy, so importing forqapp (e.g. from settings or INSTALLED_APPS) never loads models early.
    if name in _SERVICES:
        from . import services

        return getattr(services, name)
    if name == "consumer":
        from .consumers import consumer

        return consumer
    raise AttributeError(f"module 'forqapp' has no attribute {name!r}")
