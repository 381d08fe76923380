"""What every service shares: the store of a database alias, the clock, and the objects a
send and a receive give back."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .. import conf, errors, store, utils, validation
from ..errors import ForqError
from ..store import (
    Delivery,
    Store,
)

T = TypeVar("T")


now_ms = utils.now_ms  # Forq's clock (Unix ms), here for the callers that always took it from services


_hot_setting = conf.hot  # settings every send, claim and ack reads, resolved once


def alias() -> str:
    return str(_hot_setting("FORQ_DATABASE"))


def _store(using: str | None = None) -> Store:
    return store.for_alias(using or alias())


@dataclass
class ReceivedMessage:
    """A delivered (or peeked) message. ``receipt`` names this delivery: ack/nack must echo it (None
    for a peek). Times are Unix ms; ``lease_expires_at`` is when the lease ends (None: not leased)."""

    id: str
    queue: str
    content: str
    attempts: int
    receipt: int | None
    priority: int = 0
    attributes: dict[str, str] = field(default_factory=dict)
    dedup_id: str | None = None
    sequence: int = 0
    received_at: int = 0
    first_received_at: int | None = None
    lease_expires_at: int | None = None
    state: str | None = None  # saved by forqapp.defer(message, state=…)
    # Why it failed (``max_attempts_reached``, ``message_expired``, ``fatal_error``) and the last
    # error a consumer gave: on a peek of one message by its id (forqapp.peek(queue, id)), else None.
    failure_reason: str | None = None
    last_error: str | None = None
    group: str | None = None  # the message's group (None: none)
    # The lease the receive took (ms), which extend() renews for at least: not derived from
    # lease_expires_at, which each renewal moves on (a heartbeat would lengthen it every time).
    lease_ms: int | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_row(cls, row: Delivery) -> ReceivedMessage:
        message = cls(row.id, row.queue, row.content, row.attempts, row.receipt, row.priority,
                      validation.decode_attributes(row.attributes), row.dedup_id, row.sequence,
                      row.received_at, row.first_received_at, row.lease_expires_at, row.state,
                      group=row.group)
        if row.receipt is not None and row.lease_expires_at is not None:
            message.lease_ms = row.lease_expires_at - row.receipt
        return message

    def json(self) -> Any:
        """``content`` parsed as JSON."""
        return json.loads(self.content)


@dataclass(frozen=True)
class SendResult:
    """What a send did: the message's id, sequence and ``received_at`` (the send time it holds,
    Unix ms), or, when ``deduplicated``, the id of the message its dedup id already named (and
    sequence 0, received_at None: nothing was created)."""

    id: str
    sequence: int
    deduplicated: bool = False
    received_at: int | None = None



def _refuse_nul(st: Store, contents: Iterable[str]) -> None:
    if not st.text_holds_nul and any("\x00" in c for c in contents):
        raise ForqError(errors.BODY_INVALID, "content with NUL characters cannot be stored on this database")


STAGE_TTL_MS = 24 * 3_600_000  # staged rows older than this were abandoned (the staged job deletes them)
