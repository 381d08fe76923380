"""Grants: a queue pattern and the actions it allows, in one line of text (``PATTERN:ACTION[,ACTION]``).

Patterns:

* ``orders`` — exactly the queue ``orders``;
* ``orders.*`` — every queue whose name starts with ``orders.`` (and has more after it). The prefix
  must end with ``.``, ``-`` or ``_``, so a prefix grant never matches a longer unrelated name
  (``orders*`` would cover ``orders2`` and ``ordersarchive``: refused);
* ``*`` — every queue.

A grant covers dead-letter queues (``orders-dlq``) only when it says so: ``orders+dlq`` covers
``orders`` and ``orders-dlq``, ``orders.*+dlq`` and ``*+dlq`` likewise; ``orders-dlq`` (the DLQ's
own name) covers the DLQ alone. ``orders``, ``orders.*`` and ``*`` never match a DLQ.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..vocab import DLQ_SUFFIX, QUEUE_NAME, is_dlq
from . import ACTIONS

DLQ_FLAG = "+dlq"
PREFIX_SEPARATORS = (".", "-", "_")
_PREFIX = re.compile(r"[a-zA-Z0-9._-]{1,79}")  # a name has at least one character more


class GrantError(ValueError):
    """A grant that does not parse; the message says why (shown by the CLI, the admin and the UI)."""


@dataclass(frozen=True)
class Grant:
    pattern: str  # a queue name, PREFIX* or *
    actions: frozenset[str]
    dlq: bool = False  # covers the DLQs of the queues it matches

    def matches(self, queue: str) -> bool:
        if is_dlq(queue):
            if queue == self.pattern:
                return True  # the DLQ named by itself
            if not self.dlq:
                return False
            queue = queue[: -len(DLQ_SUFFIX)]
        pattern = self.pattern
        if pattern == "*":
            return True
        if pattern.endswith("*"):
            prefix = pattern[:-1]
            return len(queue) > len(prefix) and queue.startswith(prefix)
        return queue == pattern

    def __str__(self) -> str:
        actions = ",".join(a for a in ACTIONS if a in self.actions)
        return f"{self.pattern}{DLQ_FLAG if self.dlq else ''}:{actions}"


def parse(text: str) -> Grant:
    """``PATTERN[+dlq]:ACTION[,ACTION…]`` → :class:`Grant`; :class:`GrantError` if it is not one."""
    if not isinstance(text, str):
        raise GrantError("a grant is text: PATTERN:ACTION[,ACTION]")
    pattern, sep, actions_text = text.strip().rpartition(":")
    if not sep or not pattern:
        raise GrantError(f"{text[:80]!r} is not PATTERN:ACTION[,ACTION] (e.g. orders:produce)")
    dlq = pattern.endswith(DLQ_FLAG)
    if dlq:
        pattern = pattern[: -len(DLQ_FLAG)]
    _check_pattern(pattern, text)
    actions = [a.strip().lower() for a in actions_text.split(",") if a.strip()]
    unknown = [a for a in actions if a not in ACTIONS]
    if not actions or unknown:
        raise GrantError(f"{text[:80]!r}: actions are {', '.join(ACTIONS)} (got {actions_text[:40]!r})")
    return Grant(pattern, frozenset(actions), dlq)


def _check_pattern(pattern: str, text: str) -> None:
    if pattern == "*":
        return
    if pattern.endswith("*"):
        prefix = pattern[:-1]
        if not _PREFIX.fullmatch(prefix) or not prefix.endswith(PREFIX_SEPARATORS):
            raise GrantError(f"{text[:80]!r}: a prefix pattern ends with '.*', '-*' or '_*' (e.g. orders.*), "
                             "so that it cannot match a longer unrelated name")
        return
    if not QUEUE_NAME.fullmatch(pattern):
        raise GrantError(f"{text[:80]!r}: {pattern[:70]!r} is not a queue name, PREFIX.* or *")


def parse_all(texts: list[str] | tuple[str, ...]) -> tuple[Grant, ...]:
    """Every grant of a list; at least one."""
    grants = tuple(parse(t) for t in texts)
    if not grants:
        raise GrantError("a key needs at least one grant (PATTERN:ACTION[,ACTION])")
    return grants


def dumps(grants: tuple[Grant, ...] | list[Grant]) -> list[str]:
    """The stored form (``ApiKey.grants``): one canonical line per grant."""
    return [str(g) for g in grants]
