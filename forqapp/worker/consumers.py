"""Consumers: the functions ``forq_worker`` runs for each queue.

Register one with the decorator, in any installed app's ``consumers.py`` (found like ``admin.py``)::

    import forqapp

    @forqapp.consumer("emails", decode="json")
    def send_email(message):          # message.id, .queue, .content, .attempts, .receipt
        mail(message.content["to"])   # returning acks; raising nacks; FatalError fails at once

or map queues to dotted paths in settings: ``FORQ_CONSUMERS = {"emails": "myapp.jobs.send_email"}``
(a value may also be ``{"handler": "myapp.jobs.send_email", "decode": "json"}``).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules, import_string

from .. import validation
from ..conf import SETTINGS
from ..errors import Defer, FatalError, ForqError

DECODERS = (None, "json")


@dataclass(frozen=True)
class Consumer:
    queue: str
    handler: Callable[[Any], Any]
    decode: str | None = None

    def __call__(self, message) -> Any:
        """Run the handler on a :class:`~forqapp.services.ReceivedMessage`. With ``decode="json"``
        the handler gets a copy whose ``content`` (and saved ``state``) is the parsed JSON, and the
        ``state`` of a :class:`Defer` it raises is saved as JSON; content that is not JSON can never
        succeed, so it raises :class:`FatalError` (the message fails without retries)."""
        if self.decode != "json":
            return self.handler(message)
        try:
            content = json.loads(message.content)
            state = None if message.state is None else json.loads(message.state)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested ~1,000 deep
            raise FatalError(f"message {message.id} is not JSON: {exc}") from exc
        try:
            return self.handler(dataclasses.replace(message, content=content, state=state))
        except Defer as defer:  # the state the handler saved, as JSON text
            if defer.state is not None:
                defer.state = json.dumps(defer.state)
            raise


_registry: dict[str, Consumer] = {}
_lock = threading.Lock()
_discovered = False


def register(queue: str, handler: Callable[[Any], Any], *, decode: str | None = None) -> Consumer:
    """Register ``handler`` as the consumer of ``queue`` (one consumer per queue)."""
    try:
        queue = validation.queue_name(queue)
    except ForqError as exc:
        raise ImproperlyConfigured(f"forqapp consumer: invalid queue name {queue!r}") from exc
    if decode not in DECODERS:
        raise ImproperlyConfigured(f"forqapp consumer for {queue!r}: decode must be None or 'json'")
    entry = Consumer(queue, handler, decode)
    with _lock:
        existing = _registry.get(queue)
        if existing is not None and existing.handler is not handler:
            name = f"{handler.__module__}.{handler.__qualname__}"
            raise ImproperlyConfigured(
                f"forqapp consumer for {queue!r} registered twice ({name} and "
                f"{existing.handler.__module__}.{existing.handler.__qualname__})"
            )
        _registry[queue] = entry
    return entry


def consumer(queue: str, *, decode: str | None = None):
    """Decorator: ``@forqapp.consumer("emails")`` registers the function as the queue's consumer.
    The function is returned unchanged, so it can still be called directly (e.g. in tests)."""

    def decorate(func):
        register(queue, func, decode=decode)
        return func

    return decorate


def unregister(queue: str) -> None:
    with _lock:
        _registry.pop(queue, None)


def settings_consumers() -> tuple[list[tuple[str, Callable[[Any], Any], str | None]], list[str]]:
    """``FORQ_CONSUMERS`` as (queue, handler, decode) entries, and one line per entry that is wrong.

    Importing each dotted path here (not on first use) lets the system check ``forqapp.E040`` name
    a typo before a worker starts, and the worker refuse it in one line."""
    mapping = SETTINGS["FORQ_CONSUMERS"].raw() or {}  # raw: a wrong type is one of the problems
    if not isinstance(mapping, dict):
        return [], ["FORQ_CONSUMERS must be a dict of queue name to dotted path"]
    entries, problems = [], []
    for queue, spec in mapping.items():
        decode = None
        if isinstance(spec, dict):
            decode = spec.get("decode")
            spec = spec.get("handler")
        where = f"FORQ_CONSUMERS[{queue!r}]"
        if not isinstance(spec, str):
            problems.append(f"{where} must be a dotted path (got {spec!r})")
            continue
        try:
            validation.queue_name(queue)
        except ForqError:
            problems.append(f"{where}: invalid queue name")
            continue
        if decode not in DECODERS:
            problems.append(f"{where}: decode must be None or 'json' (got {decode!r})")
            continue
        try:
            handler = import_string(spec)
        except Exception as exc:  # noqa: BLE001 - any failure to import is the path's problem, in one line
            reason = " ".join(str(exc).split()) or type(exc).__name__
            problems.append(f"{where}: cannot import {spec!r} ({reason})")
            continue
        if not callable(handler):
            problems.append(f"{where}: {spec!r} is not callable")
            continue
        entries.append((queue, handler, decode))
    return entries, problems


def _from_settings() -> None:
    entries, problems = settings_consumers()
    if problems:
        raise ImproperlyConfigured("; ".join(problems))
    for queue, handler, decode in entries:
        register(queue, handler, decode=decode)


def discover() -> None:
    """Import every installed app's ``consumers`` module and load ``FORQ_CONSUMERS`` (once)."""
    global _discovered
    if _discovered:
        return
    autodiscover_modules("consumers")
    _from_settings()
    _discovered = True


def registry() -> dict[str, Consumer]:
    """Every registered consumer, by queue (after discovery)."""
    discover()
    with _lock:
        return dict(_registry)
