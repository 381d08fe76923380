"""A task's message: its path, arguments and origin as strict JSON (what ``enqueue`` sends and the
worker reads), and the refusal of arguments JSON cannot carry."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings

from .compat import InvalidTaskError


class TaskArgumentsError(InvalidTaskError, TypeError):
    """A task's arguments that do not survive a strict JSON round trip, or whose JSON is over
    ``FORQ_MAX_CONTENT_BYTES``. A ``TypeError`` too, as the framework's own ``normalize_json``
    raises, with its wording (``Unsupported type: <class 'datetime.datetime'>``)."""


def _unsupported(value: Any) -> Any:
    raise TypeError(f"Unsupported type: {type(value)}")  # Django's normalize_json's wording


def dumps(value: Any) -> str:
    """``value`` as strict JSON text (no NaN, no infinity, no object that is not JSON). Raises
    ``TypeError("Unsupported type: <class …>")`` (Django's words) for an object JSON has no type
    for, ``ValueError`` for NaN or infinity, ``RecursionError`` when nested ~1,000 deep."""
    return json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False, default=_unsupported)


def to_json(value: Any, what: str) -> str:
    """``value`` as strict JSON text; raises :class:`TaskArgumentsError` saying what was refused
    (Django's ``Unsupported type: <class …>`` first)."""
    try:
        return dumps(value)
    except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: nested ~1,000 deep
        raise TaskArgumentsError(f"{exc} ({what} must be JSON: str, int, float, bool, None, lists and dicts "
                                 f"of them)") from None


def round_trip(args: Iterable[Any], kwargs: dict[str, Any]) -> tuple[str, list[Any], dict[str, Any]]:
    """(the JSON of ``{"args", "kwargs"}``, and the args and kwargs the task will receive: tuples
    become lists, int dict keys become strings — what the result shows is exactly what runs)."""
    text = to_json({"args": list(args), "kwargs": kwargs}, "a task's arguments")
    try:
        back = json.loads(text)
    except RecursionError:  # the encoder went a level or two deeper than the parser goes
        raise TaskArgumentsError("a task's arguments are nested too deep") from None
    return text, back["args"], back["kwargs"]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def unix_us(when: datetime) -> int:
    """``when`` in Unix microseconds, exactly (a naive one is in local time, ``TIME_ZONE``, as
    Django reads naive datetimes when ``USE_TZ`` is off)."""
    return (when.astimezone(UTC) - _EPOCH) // _MICROSECOND


def task_time(us: int | None) -> datetime | None:
    """Unix microseconds as the Tasks framework's datetimes are: aware (UTC) when ``USE_TZ`` is on,
    naive local time (``TIME_ZONE``) when it is off, as ``django.utils.timezone.now()``."""
    if us is None:
        return None
    when = _EPOCH + us * _MICROSECOND
    return when if settings.USE_TZ else when.astimezone().replace(tzinfo=None)


def task_time_ms(ms: int | None) -> datetime | None:
    """:func:`task_time` of Unix milliseconds (forqapp's columns)."""
    return None if ms is None else task_time(ms * 1000)


def encode(task_path: str, args_kwargs: str, queue_name: str, backend: str, enqueued_at: int,
           run_after_us: int | None = None) -> str:
    """The message content of a task (the ``{"args", "kwargs"}`` JSON spliced in, not re-encoded);
    ``run_after_us`` (Unix µs) as the task asked it, for the results to show it exactly
    (``run_after``: the same in ms, as contents made before it was kept in µs)."""
    fields: dict[str, Any] = {"task": task_path, "queue_name": queue_name, "backend": backend,
                              "enqueued_at": enqueued_at}
    if run_after_us is not None:
        fields["run_after"] = run_after_us // 1000
        fields["run_after_us"] = run_after_us
    head = to_json(fields, "a task")
    return head[:-1] + ',"call":' + args_kwargs + "}"


def decode(content: str) -> dict[str, Any]:
    """A task message's content: ``task``, ``queue_name``, ``backend``, ``enqueued_at`` and
    ``call`` (``{"args", "kwargs"}``)."""
    try:
        data = json.loads(content)
    except RecursionError:  # a message sent to a task queue by other means, nested ~1,000 deep
        raise ValueError("not a task message: nested too deep") from None
    if not isinstance(data, dict) or not isinstance(data.get("task"), str) or not isinstance(data.get("call"), dict):
        raise ValueError("not a task message")
    return data
