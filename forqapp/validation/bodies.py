"""The bulk endpoints' request bodies (the Spark connector's: ``forqapp/api/bulk.py``)."""

from __future__ import annotations

import re

from .. import vocab
from .rules import _invalid, integer, message_id, queue_name, receipt

# --- bulk request bodies (the Spark connector's endpoints, forqapp/api/bulk.py) -------------------

MAX_BATCH = vocab.BULK_MAX_ITEMS  # messages in one batch produce or staged write (the 2 MiB body cap applies too)
MAX_CLAIM = int(vocab.BULK_CLAIM.hi)  # messages in one claim
MAX_DELIVERIES = vocab.BULK_MAX_ITEMS  # deliveries in one ack or release
MAX_STAGED = vocab.BULK_MAX_ITEMS  # (token, queue) pairs in one publish or discard
MAX_PAGE = int(vocab.BULK_PAGE.hi)  # rows in one snapshot page
MAX_WAIT_S = float(vocab.BULK_WAIT_S.hi)  # longest wait of a bulk claim
DEFAULT_CLAIM = 100
DEFAULT_PAGE = "1000"
SNAPSHOT_FORMATS = ("rows", "columns")

_TOKEN = re.compile(r"[A-Za-z0-9._-]{1,100}")
_LIMIT = re.compile(r"[0-9]{1,5}")


def list_field(body: dict, name: str, limit: int) -> list:
    """``body[name]``, a list of at most ``limit`` items."""
    value = body.get(name)
    if not isinstance(value, list):
        raise _invalid(f"{name} must be a list")
    if len(value) > limit:
        raise _invalid(f"{name} holds more than {limit} items")
    return value


def token(value: object) -> str:
    """A staged write's token (the writer's id for one task attempt)."""
    if not isinstance(value, str) or not _TOKEN.fullmatch(value):
        raise _invalid("token must match ^[A-Za-z0-9._-]{1,100}$")
    return value


def batch_items(body: dict) -> list[dict]:
    """The ``messages`` of a batch: every item checked for shape here, for content and
    ``processAfter`` by the service (the whole batch is refused if one item is bad)."""
    items = list_field(body, "messages", MAX_BATCH)
    for item in items:
        if not isinstance(item, dict):
            raise _invalid("each message must be an object")
    return items


def staged_pairs(body: dict) -> list[tuple[str, str]]:
    """The ``staged`` [(token, queue)] of a publish or discard."""
    pairs = []
    for item in list_field(body, "staged", MAX_STAGED):
        if not isinstance(item, dict):
            raise _invalid("each staged entry must be an object {token, queue}")
        pairs.append((token(item.get("token")), queue_name(item.get("queue"), produce=True)))
    return pairs


def sink_batch(body: dict) -> tuple[str, str, int] | None:
    """A publish's optional ``sink`` ``{"queue", "id", "batch"}``: the streaming query (``id``, a
    token) and its micro-batch id that publishes the staged rows into ``queue``; None without one."""
    sink = body.get("sink")
    if sink is None:
        return None
    if not isinstance(sink, dict):
        raise _invalid("sink must be an object {queue, id, batch}")
    batch = sink.get("batch")
    if isinstance(batch, bool) or not isinstance(batch, int) or not 0 <= batch < 2**63:
        raise _invalid("sink.batch must be an integer from 0 (the micro-batch id)")
    return queue_name(sink.get("queue"), produce=True), token(sink.get("id")), batch


def deliveries(body: dict) -> list[tuple[str, int]]:
    """The ``deliveries`` [(id, receipt)] of a bulk ack or release."""
    out = []
    for item in list_field(body, "deliveries", MAX_DELIVERIES):
        if not isinstance(item, dict):
            raise _invalid("each delivery must be an object {id, receipt}")
        out.append((message_id(item.get("id")), receipt(item.get("receipt"))))
    return out


def claim_limit(body: dict) -> int:
    """A bulk claim's ``max`` (default 100)."""
    return DEFAULT_CLAIM if body.get("max") is None else integer(body["max"], "max", vocab.BULK_CLAIM)


def claim_wait(body: dict) -> float:
    """A bulk claim's ``wait``: seconds to wait for the first message (default 0)."""
    wait = body.get("wait", 0)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or wait not in vocab.BULK_WAIT_S:
        raise _invalid(f"wait must be a number of seconds from 0 to {MAX_WAIT_S:g}")
    return float(wait)


def page_limit(raw: str | None) -> int:
    """A snapshot's ``limit`` query parameter (default 1000)."""
    raw = DEFAULT_PAGE if raw is None else raw
    # At most 5 ASCII digits before int(): Python's int() refuses over 4,300 digits (ValueError).
    if not _LIMIT.fullmatch(raw) or int(raw) not in vocab.BULK_PAGE:
        raise _invalid(f"limit must be an integer from 1 to {MAX_PAGE}")
    return int(raw)


def page_format(raw: str | None) -> str:
    """A snapshot's ``format`` query parameter: ``rows`` (default) or ``columns``."""
    raw = SNAPSHOT_FORMATS[0] if raw is None else raw
    if raw not in SNAPSHOT_FORMATS:
        raise _invalid("format must be rows or columns")
    return raw


def optional_message_id(value: str | None) -> str | None:
    """A message id query parameter; absent or empty is None."""
    if value is None or value == "":
        return None
    return message_id(value)
