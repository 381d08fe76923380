"""Queue tags: TagQueue, UntagQueue, ListQueueTags, and CreateQueue's ``tags``.

Tags mean nothing to forqapp: they are kept, durably, in the queue row's ``sqs_tags``
(``{"queue": {…}, "dlq": {…}}``: a dead-letter queue has tags of its own), shown on the admin's
queue page, and deleted with the queue. SQS's limits apply: at most 50 tags a queue, keys of 1 to
128 characters, values of 0 to 256, each of Unicode letters, digits and white space and
``_ . : / = + - @`` (AWS's tag pattern, ``[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*``), no key starting with
AWS's reserved ``aws:`` (in any case). A change is read, checked and written in one transaction, the
row locked, so concurrent TagQueue calls from several processes each keep their tags.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from django.db import transaction

from .. import keys, services
from ..models import Queue
from ..services import queues as queue_services
from ..vocab import base_of, is_dlq
from . import queues
from .protocol import invalid, missing

MAX_TAGS = 50
KEY_MAX, VALUE_MAX = 128, 256
RESERVED_PREFIX = "aws:"
_PUNCTUATION = frozenset("_.:/=+-@")
_CHARACTERS = "Unicode letters, digits, white space, and the characters _ . : / = + - @"


def _allowed(text: str) -> bool:
    """Whether every character of ``text`` is one AWS takes in a tag (``\\p{L}``, ``\\p{N}``,
    ``\\p{Z}`` and ``_ . : / = + - @``)."""
    return all(c in _PUNCTUATION or unicodedata.category(c)[0] in "LNZ" for c in text)


def check(tags: object, queue: str, *, required: bool = True) -> dict[str, str]:
    """Tags as given (``Tags`` of TagQueue, ``tags`` of CreateQueue) for SQS queue ``queue``,
    checked: {key: value}."""
    if tags is None or tags == {}:
        if required:
            raise missing("Tags")
        return {}
    if not isinstance(tags, dict):
        raise invalid("Tags must be a map of tag keys to values")
    if len(tags) > MAX_TAGS:
        raise invalid(f"Too many tags added for queue {queue}.")
    for key, value in tags.items():
        if not isinstance(key, str) or not 1 <= len(key) <= KEY_MAX:
            raise invalid(f"Tag keys must be between 1 and {KEY_MAX} characters in length.")
        if not isinstance(value, str) or len(value) > VALUE_MAX:
            raise invalid(f"Tag values must be between 0 and {VALUE_MAX} characters in length.")
        if key[:len(RESERVED_PREFIX)].lower() == RESERVED_PREFIX:
            raise invalid(f"Tag key {key} is invalid. Tag keys cannot start with the reserved prefix "
                          f"{RESERVED_PREFIX}")
        if not _allowed(key):
            raise invalid(f"Tag key {key} is invalid. Tag keys can only contain {_CHARACTERS}.")
        if not _allowed(value):
            raise invalid(f"Tag value {value} is invalid. Tag values can only contain {_CHARACTERS}.")
    return dict(tags)


def _queue(ctx: Any, body: dict[str, Any], action: str) -> str:
    """The queue ``QueueUrl`` names, if it exists (read now) and the key may do ``action`` on it."""
    name = queues.name_from_url(body.get("QueueUrl"), ctx.origin.region)
    ctx.need(name, action)
    queues.existing(name, fresh=True)
    return name


def _part(name: str) -> str:
    return "dlq" if is_dlq(name) else "queue"


def of(name: str) -> dict[str, str]:
    """The tags of forqapp's queue ``name`` (SQS's queue or its dead-letter queue)."""
    row = Queue.objects.using(services.alias()).filter(name=base_of(name)).values_list("sqs_tags", flat=True).first()
    return dict(((row or {}).get(_part(name))) or {})


def change(name: str, add: dict[str, str] | None = None, remove: list[str] | None = None) -> None:
    """Add ``add`` (a key given again: its new value) and remove ``remove`` (a key not there: no
    matter) on queue ``name``: one transaction, the row locked; over :data:`MAX_TAGS` in all →
    ``InvalidParameterValue`` and nothing changed."""
    base = base_of(name)
    alias = services.alias()
    with transaction.atomic(using=alias):
        meta = queues.make_row(name)[0]  # (a queue known by its messages only: its row now)
        if is_dlq(name) and add and "dlq" not in meta:
            queues.save_meta(base, {**meta, "dlq": {}})  # a DLQ tagged through SQS is made so
        stored = dict(Queue.objects.using(alias).filter(name=base).values_list("sqs_tags", flat=True).first() or {})
        tags = dict(stored.get(_part(name)) or {})
        tags.update(add or {})
        for key in remove or ():
            tags.pop(key, None)
        if len(tags) > MAX_TAGS:
            raise invalid(f"Too many tags added for queue {queues.to_sqs(name)}.")
        if tags:
            stored[_part(name)] = tags
        else:
            stored.pop(_part(name), None)
        queue_services.set_sqs_tags(base, stored or None, using=alias)


def drop(name: str) -> None:
    """Forget the tags of ``name`` (its dead-letter queue deleted alone; a queue's row goes with it)."""
    change(name, remove=list(of(name)))


# --- the actions ----------------------------------------------------------------------------------


def tag_queue(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    name = _queue(ctx, body, keys.MANAGE)
    change(name, add=check(body.get("Tags"), queues.to_sqs(name)))
    return {}


def untag_queue(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    name = _queue(ctx, body, keys.MANAGE)
    given = body.get("TagKeys")
    if given is None or given == []:
        raise missing("TagKeys")
    if not isinstance(given, list) or not all(isinstance(k, str) for k in given):
        raise invalid("TagKeys must be a list of tag keys")
    for key in given:
        if not 1 <= len(key) <= KEY_MAX:
            raise invalid(f"Tag keys must be between 1 and {KEY_MAX} characters in length.")
    change(name, remove=given)
    return {}


def list_queue_tags(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    name = _queue(ctx, body, keys.READ)
    tags = of(name)
    return {"Tags": tags} if tags else {}


def created(name: str, tags: dict[str, str]) -> None:
    """CreateQueue's ``tags`` on the queue it has just made."""
    if tags:
        change(name, add=tags)

