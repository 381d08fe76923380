"""The rules of one value each (a queue name, a content, a receipt, a duration, a policy field),
shared by every face and the Python API. Each raises ForqError; the bounds come from the table of
limits in :mod:`forqapp.vocab`."""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from itertools import chain
from typing import Any, TypeGuard

from .. import errors, vocab
from ..errors import ForqError
from ..vocab import QUEUE_NAME, V1_QUEUE_NAME, Bounds, is_dlq


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


_JSON = json.JSONDecoder(parse_constant=_not_json, parse_float=_finite)


def json_loads(raw: bytes | str) -> Any:
    """A request body's JSON as RFC 8259 has it (ValueError else): ``json.loads`` but for
    ``NaN``, ``Infinity`` and ``-Infinity``, which no JSON has, and a number past a double's range
    (``1e400``), which it reads as infinity: a field that would take one as "unlimited" or as
    "no number" never sees it. Bytes must be UTF-8 without a byte order mark, as RFC 8259 asks
    of JSON exchanged between systems (and Forq's Go reads): ``json.loads`` would also take UTF-16
    and UTF-32, and a leading BOM."""
    if isinstance(raw, (bytes, bytearray)):
        if raw[:3] == b"\xef\xbb\xbf":
            raise ValueError("a byte order mark before the JSON")
        text = raw.decode("utf-8", "surrogatepass")
    else:
        text = raw
    return _JSON.decode(text)


# Names already found valid, each with whether it names a DLQ: every send, claim and ack checks its
# queue's name, and a dict lookup is a fifth of the pattern's cost. Bounded: emptied when full.
_valid_names: dict[str, bool] = {}
_VALID_NAMES_MAX = 10_000


def queue_name(queue: object, *, produce: bool = False) -> str:
    if not isinstance(queue, str):
        raise ForqError(errors.QUEUE_INVALID_NAME, f"invalid queue name {queue!r}")
    dlq = _valid_names.get(queue)
    if dlq is None:
        if not QUEUE_NAME.fullmatch(queue):
            raise ForqError(errors.QUEUE_INVALID_NAME, f"invalid queue name {queue!r}")
        if len(_valid_names) >= _VALID_NAMES_MAX:
            _valid_names.clear()
        dlq = _valid_names[queue] = is_dlq(queue)
    if produce and dlq:
        raise ForqError(errors.PRODUCE_TO_DLQ, f"cannot produce to dead-letter queue {queue!r}")
    return queue


def v1_queue_name(queue: object, *, produce: bool = False) -> str:
    """:func:`queue_name` under Forq's v1 contract: at most 64 characters, a DLQ's name included
    (400 ``bad_request.queue.invalid_name`` otherwise), where forqapp's other faces take 80."""
    if not isinstance(queue, str) or not V1_QUEUE_NAME.fullmatch(queue):
        raise ForqError(errors.QUEUE_INVALID_NAME, f"invalid queue name {queue!r}")
    return queue_name(queue, produce=produce)


def dlq_name(queue: object) -> str:
    queue = queue_name(queue)
    if not is_dlq(queue):
        raise ForqError(errors.DLQ_ONLY_OPERATION, f"{queue!r} is not a dead-letter queue")
    return queue


@dataclass(frozen=True, slots=True)
class SendLimits:
    """The settings a send is checked against (:func:`forqapp.conf.send_limits` reads them):
    ``FORQ_MAX_CONTENT_BYTES``, ``FORQ_PROCESS_AFTER_PAST_TOLERANCE_MS``, ``FORQ_PROCESS_AFTER_MAX_MS``."""

    content_bytes: int
    past_ms: int
    ahead_ms: int


def content(value: object, limit: int) -> str:
    """``value`` if it is storable message content of at most ``limit`` bytes in UTF-8
    (``FORQ_MAX_CONTENT_BYTES``). The empty string is content like any other: Forq stores it."""
    if not isinstance(value, str):
        raise ForqError(errors.BODY_INVALID, "content must be a string")
    if value.isascii():  # one byte a character: no encoding needed to measure it
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate ("\ud800" in JSON): not storable text
            raise ForqError(errors.BODY_INVALID, "content is not valid Unicode text") from None
    if size > limit:
        raise ForqError(errors.CONTENT_EXCEEDS_LIMIT, f"content is over {limit} bytes")
    return value


def process_after(value: object, now: int, limits: SendLimits, name: str = "processAfter") -> int:
    """Unix ms when the message becomes due; ``None`` or ``0`` means now (Forq treats 0, Go's zero
    value, as absent), within ``limits``' past tolerance and horizon. ``name``: the field as the
    caller's request spells it (Forq's body: ``processAfter``; v2's: ``process_after``)."""
    if value is None or (type(value) is int and value == 0):  # not False, which is no integer here
        return now
    if not is_integer(value):
        raise ForqError(errors.BODY_INVALID, f"{name} must be an integer (Unix ms)")
    if value < now - limits.past_ms:
        raise ForqError(errors.PROCESS_AFTER_IN_PAST, f"{name} is in the past")
    if value > now + limits.ahead_ms:
        raise ForqError(errors.PROCESS_AFTER_TOO_FAR, f"{name} is more than 366 days ahead")
    return value


def message_id(value: object) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise ForqError(errors.MESSAGE_ID_INVALID, f"invalid message id {value!r}") from None


_RECEIPT = re.compile(r"[-+]?[0-9]{1,19}")  # ASCII digits only (no "--5", no Unicode digits); a sign, as Go's ParseInt
_INT64 = range(-(2**63), 2**63)  # what a receipt is stored as (SQLite INTEGER, PostgreSQL bigint)


def receipt(value: object, name: str | None = None) -> int:
    """A delivery's receipt (``X-Forq-Receipt``, or ``receipt`` in a bulk body) as an integer. A
    value out of the 64-bit range is refused here, as Go's ParseInt does in Forq: the database
    would otherwise fail on it (SQLite: "Python int too large to convert"). ``name``: a body's
    field (the v2 API's ``receipt``), whose errors name it; None: Forq's header and its words."""
    if value is None or value == "":
        if name is None:
            raise ForqError(errors.RECEIPT_MISSING, "X-Forq-Receipt header is missing")
        # (a body's empty string: missing, as the header's, in the words of a wrong receipt)
        raise ForqError(errors.RECEIPT_MISSING, f"{name} is missing" if value is None else _RECEIPT_TEXT.format(name))
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _bad_receipt(name, "is not an integer")
    if isinstance(value, str):
        text = value.strip()
        if not _RECEIPT.fullmatch(text):
            raise _bad_receipt(name, "is not an integer")
        value = int(text)
    if value not in _INT64:
        raise _bad_receipt(name, "is out of range")
    return value


def _bad_receipt(name: str | None, why: str) -> ForqError:
    if name is None:
        return ForqError(errors.RECEIPT_INVALID, f"X-Forq-Receipt {why}")
    return ForqError(errors.RECEIPT_INVALID, _RECEIPT_TEXT.format(name))


_RECEIPT_TEXT = "{} must be a receive's receipt: a 64-bit integer (or its digits)"


def _invalid(message: str) -> ForqError:
    return ForqError(errors.BODY_INVALID, message)


def is_integer(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an integer (an int, not a bool): every integer reader asks this."""
    return isinstance(value, int) and not isinstance(value, bool)


def integer(value: object, name: str, bounds: Bounds) -> int:
    """``value``, an integer within ``bounds`` (else 400 ``bad_request.body_invalid``:
    "``name`` must be an integer from lo to hi")."""
    if not is_integer(value) or value not in bounds:
        raise _invalid(f"{name} must be an integer from {_seconds(bounds.lo)} to {_seconds(bounds.hi)}")
    return value


def int_field(value: object, name: str, lo: int, hi: int, default: int) -> int:
    """:func:`integer` from ``lo`` to ``hi``, or ``default`` when absent (None)."""
    return default if value is None else integer(value, name, Bounds(lo, hi))


# --- message options and queue policy ---------------------------------------------------------

_DEDUP_ID = re.compile(rf"[\x21-\x7e]{{1,{vocab.DEDUP_ID_MAX}}}")  # printable ASCII, no spaces


def priority(value: object) -> int:
    return 0 if value is None else integer(value, "priority", vocab.PRIORITY)


def attributes(value: object) -> str | None:
    """Up to 10 string key/values, as the JSON text stored (None when there are none)."""
    if value is None:
        return None
    # The usual case in one pass that checks and encodes (2.1 -> ~0.9 µs for three pairs, which
    # shows on send_many's 100,000 rows a second): plain ASCII str pairs within bounds; anything
    # else goes the checked way below (its exact error, or text that is not ASCII).
    if type(value) is dict and len(value) <= vocab.MAX_ATTRIBUTES:
        parts = []
        for key, item in value.items():
            if not (type(key) is str and type(item) is str and 0 < len(key) <= vocab.ATTRIBUTE_KEY_MAX
                    and len(item) <= vocab.ATTRIBUTE_VALUE_MAX and key.isascii() and item.isascii()):
                break
            parts.append(_JSON_STRING(key) + ":" + _JSON_STRING(item))
        else:
            return "{" + ",".join(parts) + "}" if parts else None
    return _attributes_checked(value)


def attributes_json(value: dict[str, str] | None) -> str | None:
    """Attributes checked already (a parsed input's) as the JSON text stored, as :func:`attributes`
    writes it (None when there are none)."""
    return _ATTRIBUTES_JSON(value) if value else None


def attributes_many(values: list[Any]) -> list[str | None] | None:
    """:func:`attributes` of each of ``values`` (dicts or None), checked a column at a time, for
    send_many's usual batch: None unless every dict holds 1 to 10 pairs of printable ASCII
    strings within bounds and without ``"`` or ``\\``, whose JSON is the text between quotes.
    The caller then checks each value on its own (and raises the exact error)."""
    sets = [v for v in values if v is not None]
    if not sets:
        return values
    if set(map(type, sets)) != {dict} or min(map(len, sets)) < 1 or max(map(len, sets)) > vocab.MAX_ATTRIBUTES:
        return None
    try:  # (str.join refuses a key or value that is not a string)
        texts = [None if v is None else '{"' + '","'.join(map(_JSON_PAIR, v.items())) + '"}' for v in values]
    except TypeError:
        return None
    # The texts checked in one string (a copy of them: one C call each check rather than one a
    # text). Printable ASCII, four quotes a pair and no backslash: no key or value holds a quote or
    # anything JSON escapes. The lengths by len(), as attributes() measures them.
    every = "".join(filter(None, texts))
    keys = list(chain.from_iterable(sets))
    if every.isascii() and every.isprintable() and every.count('"') == 4 * len(keys) and "\\" not in every \
            and min(map(len, keys)) >= 1 and max(map(len, keys)) <= vocab.ATTRIBUTE_KEY_MAX \
            and max(map(len, chain.from_iterable(map(dict.values, sets)))) <= vocab.ATTRIBUTE_VALUE_MAX:
        return texts
    return None


_JSON_PAIR: Callable[[tuple[str, str]], str] = '":"'.join


# The decoder's own scanner (C): it keeps no state between calls. (Set by JSONDecoder.__init__, not
# in its type stubs.)
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def decode_attributes(text: str | None) -> dict[str, str]:
    """Stored attributes (:func:`attributes`' JSON text, or None) as a dict. The stored text is
    always one JSON object, so the scanner reads it straight: 0.3 µs against json.loads' 1 µs,
    on every message a receive hands out. Anything else is read by json.loads (and its error)."""
    if not text:
        return {}
    try:
        value, end = _scan_json(text, 0)
    except (StopIteration, ValueError):
        end = -1
    return value if end == len(text) and type(value) is dict else json.loads(text)


def _attributes_checked(value: object) -> str | None:
    if not isinstance(value, dict):
        raise _invalid("attributes must be an object of strings")
    if len(value) > vocab.MAX_ATTRIBUTES:
        raise _invalid(f"attributes holds more than {vocab.MAX_ATTRIBUTES} keys")
    for key, item in value.items():
        if not isinstance(key, str) or not 1 <= len(key) <= vocab.ATTRIBUTE_KEY_MAX:
            raise _invalid(f"an attribute key must be a string of 1 to {vocab.ATTRIBUTE_KEY_MAX} characters")
        if not isinstance(item, str) or len(item) > vocab.ATTRIBUTE_VALUE_MAX:
            raise _invalid(f"attribute {key!r} must be a string of at most {vocab.ATTRIBUTE_VALUE_MAX} characters")
        if not (key.isascii() and item.isascii()) and not is_text(key + item):  # a lone surrogate
            raise _invalid(f"attribute {key!r} holds characters that cannot be stored")
    if not value:
        return None
    return _ATTRIBUTES_JSON(value)


# One encoder for every message's attributes: json.dumps with options builds a new JSONEncoder on
# each call, which costs more than encoding three short pairs.
_ATTRIBUTES_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_JSON_STRING: Callable[[str], str] = json.encoder.encode_basestring  # (C) what that encoder writes for a str


def is_text(text: str) -> bool:
    """Whether ``text`` is storable Unicode (no lone surrogate, as ``"\\ud800"`` in JSON)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def dedup_id(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _DEDUP_ID.fullmatch(value):
        raise _invalid(f"dedup_id must be 1 to {vocab.DEDUP_ID_MAX} printable ASCII characters, no spaces")
    return value


def group(value: object) -> str | None:
    """A message's group (:data:`forqapp.vocab.GROUP_NAME`), or None for none."""
    if value is None:
        return None
    if not isinstance(value, str) or not vocab.GROUP_NAME.fullmatch(value):
        raise _invalid(f"group must be 1 to {vocab.GROUP_MAX} characters of A-Z a-z 0-9 _ . : / = + @ -")
    return value


def duration_ms(value: object, name: str, lo_s: float, hi_s: float) -> int:
    """Seconds (int or float) or a ``timedelta``, from ``lo_s`` to ``hi_s``, in whole ms."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 1e15:
        seconds = float(value)  # (compared first: an int too big for a float would overflow; NaN fails it)
    else:
        raise _invalid(f"{name} must be a number of seconds or a timedelta")
    if not lo_s <= seconds <= hi_s:
        raise _invalid(f"{name} must be from {_seconds(lo_s)} to {_seconds(hi_s)} seconds")
    return round(seconds * 1000)


def _seconds(value: float) -> str:
    """A bound as people read it: 31622400 (a year), not 3.16224e+07; 0.001 as is (an infinite
    one, a setting's, as ``inf``)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def optional_duration_ms(value: object, name: str, lo_s: float, hi_s: float) -> int | None:
    return None if value is None else duration_ms(value, name, lo_s, hi_s)


DAY_S = float(vocab.DAY_S)
YEAR_S = float(vocab.YEAR_S)


def backoff(value: object) -> str:
    """A backoff policy as the JSON text stored: a list of 1 to 100 delays (ms, ≥ 0), or an
    exponential one, ``{"base_ms", "max_ms", "jitter"}`` (jitter a fraction from 0 to 1)."""
    if isinstance(value, (list, tuple)):
        if len(value) not in vocab.BACKOFF_DELAYS or not all(is_integer(v) and v in vocab.BACKOFF_MS for v in value):
            raise _invalid("backoff must be 1 to 100 delays in ms (integers from 0 to a year)")
        return json.dumps(list(value))
    if isinstance(value, dict):
        if set(value) - {"base_ms", "max_ms", "jitter"} or "base_ms" not in value:
            raise _invalid('an exponential backoff is {"base_ms", "max_ms"?, "jitter"?}')
        base, cap, jit = value["base_ms"], value.get("max_ms", 3_600_000), value.get("jitter", 0)
        for name, v in (("base_ms", base), ("max_ms", cap)):
            if not is_integer(v) or v not in vocab.BACKOFF_BASE_MS:
                raise _invalid(f"backoff {name} must be an integer from 1 to a year in ms")
        if cap < base:
            raise _invalid("backoff max_ms must be at least base_ms")
        if isinstance(jit, bool) or not isinstance(jit, (int, float)) or not 0 <= jit <= 1:
            raise _invalid("backoff jitter must be a fraction from 0 to 1")
        return json.dumps({"base_ms": base, "max_ms": cap, "jitter": jit})
    raise _invalid("backoff must be a list of delays in ms or an exponential {base_ms, max_ms, jitter}")


def max_attempts(value: object) -> int:
    """At least 1, or unlimited (``"unlimited"``, ``math.inf`` or 0): stored as 0 (not ``False``,
    ``0.0`` or another number that only equals 0)."""
    if value == "unlimited" or (is_integer(value) and value == 0) or (
            isinstance(value, float) and math.isinf(value) and value > 0):
        return 0
    if not is_integer(value) or value not in vocab.MAX_ATTEMPTS:
        hi = int(vocab.MAX_ATTEMPTS.hi)
        raise _invalid(f'max_attempts must be an integer from {vocab.MAX_ATTEMPTS.lo} to {hi}, or "unlimited"')
    return value


def ordering(value: object) -> str:
    if value not in vocab.ORDERINGS:
        raise _invalid('ordering must be "fifo", "lifo" or "due"')
    return str(value)


def max_length(value: object) -> int:
    if not is_integer(value) or value not in vocab.MAX_LENGTH:
        raise _invalid(f"max_length must be an integer from {vocab.MAX_LENGTH.lo} to 10**{math.log10(vocab.MAX_LENGTH.hi):.0f}")
    return value


def max_in_flight(value: object) -> int:
    return integer(value, "max_in_flight", vocab.MAX_IN_FLIGHT)


def group_concurrency(value: object) -> int:
    return integer(value, "group_concurrency", vocab.GROUP_CONCURRENCY)


_RATE = re.compile(r"([1-9][0-9]{0,8})/([0-9]*\.?[0-9]*)(s|m|h|d)")
_RATE_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def rate(value: object, name: str = "rate") -> str:
    """A rate limit: ``"N/s"``, ``"N/m"``, ``"N/h"``, ``"N/d"`` (or ``"N/2.5s"``), or a minimum
    interval between claims (seconds or timedelta, stored as ``"1/<seconds>s"``). ``name``: the
    field's, in the error (``group_rate`` has the same syntax)."""
    if isinstance(value, (int, float, timedelta)) and not isinstance(value, bool):
        return f"1/{duration_ms(value, name, *vocab.RATE_INTERVAL_S) / 1000:g}s"
    if isinstance(value, str) and (match := _RATE.fullmatch(value.strip())):
        count, amount, unit = match.groups()
        try:
            period = float(amount or 1) * _RATE_UNIT_S[unit]
        except ValueError:
            period = 0
        if 0.001 <= period <= DAY_S * 366 and int(count) / period <= 1_000_000:
            return value.strip()
    raise _invalid(f'{name} must be like "10/s", "600/m", "100/h", "1/2.5s", or a minimum interval in seconds')


def rate_interval_us(value: str) -> int:
    """The spacing of claims (µs) of a stored rate."""
    match = _RATE.fullmatch(value)
    if match is None:  # stored by an older or hand-edited row: refuse loudly rather than unlimit
        raise ValueError(f"bad stored rate {value!r}")
    count, amount, unit = match.groups()
    return max(1, round(float(amount or 1) * _RATE_UNIT_S[unit] * 1_000_000 / int(count)))


def paused(value: object) -> bool:
    if not isinstance(value, bool):
        raise _invalid("paused must be true or false")
    return value


def dead_letter_queue(value: object) -> str:
    """A queue's ``dead_letter_queue``: a queue name (whether it exists is the service's check)."""
    if not isinstance(value, str) or not QUEUE_NAME.fullmatch(value):
        raise _invalid(f"dead_letter_queue must be a queue's name, not {str(value)[:100]!r}")
    return value


# Each policy field: (stored column, the rule that turns a given value into the stored one).
POLICY_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "max_attempts": ("max_attempts", max_attempts),
    "backoff": ("backoff", backoff),
    "visibility_timeout": ("visibility_timeout_ms",
                           lambda v: duration_ms(v, "visibility_timeout", *vocab.VISIBILITY_S)),
    "retention": ("retention_ms", lambda v: duration_ms(v, "retention", *vocab.RETENTION_S)),
    "dlq_retention": ("dlq_retention_ms", lambda v: duration_ms(v, "dlq_retention", *vocab.RETENTION_S)),
    "max_length": ("max_length", max_length),
    "ordering": ("ordering", ordering),
    "dedup_window": ("dedup_window_ms", lambda v: duration_ms(v, "dedup_window", *vocab.DEDUP_WINDOW_S)),
    "max_in_flight": ("max_in_flight", max_in_flight),
    "rate": ("rate", rate),
    "group_concurrency": ("group_concurrency", group_concurrency),
    "group_rate": ("group_rate", lambda v: rate(v, "group_rate")),
    "dead_letter_queue": ("dead_letter_queue", dead_letter_queue),
    "paused": ("paused", paused),
}


def policy(values: dict) -> dict:
    """A queue's policy as given (``configure_queue``'s keywords, ``FORQ_QUEUES``, the v2 API's
    body) → the stored columns. None resets a field to the global setting (``paused``: False)."""
    unknown = set(values) - set(POLICY_FIELDS)
    if unknown:
        raise _invalid(f"unknown policy field(s): {', '.join(sorted(map(str, unknown)))}")
    out = {}
    for name, value in values.items():
        column, rule = POLICY_FIELDS[name]
        out[column] = (False if name == "paused" else None) if value is None else rule(value)
    return out


# --- a JSON body's values (the v2 API) --------------------------------------------------------


def fields(value: object, what: str, allowed: Iterable[str]) -> dict[str, Any]:
    """``value``, a JSON object holding no field but ``allowed`` (a misspelt ``prority`` must not
    pass silently)."""
    if not isinstance(value, dict):
        raise _invalid(f"{what} must be a JSON object")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise _invalid(f"unknown field {unknown[0][:64]!r} in {what}")
    return value


def seconds(value: object, name: str, bounds: Bounds | tuple[float, float]) -> float:
    """A duration in a JSON body: a finite number of seconds within ``bounds`` (Python's JSON reads
    ``1e999`` as infinity, and a 400-digit integer is no float). Returned as given (int or float)."""
    lo, hi = bounds
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not (isinstance(value, int) or math.isfinite(value)) or not lo <= value <= hi):
        raise _invalid(f"{name} must be a number of seconds from {_seconds(lo)} to {_seconds(hi)}")
    return value


def text(value: object, name: str, lo: int, hi: int) -> str:
    """A string of ``lo`` to ``hi`` characters that a database can store (no NUL, no lone surrogate)."""
    if not isinstance(value, str) or not lo <= len(value) <= hi:
        raise _invalid(f"{name} must be a string of {lo} to {hi} characters")
    if "\x00" in value or not is_text(value):
        raise _invalid(f"{name} must be Unicode text without NUL characters")
    return value


def boolean(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise _invalid(f"{name} must be true or false")
    return value


def delay_bounds(limits: SendLimits) -> Bounds:
    """A delay's (a send's, a defer's): 0 to ``FORQ_PROCESS_AFTER_MAX_MS`` (366 days by default)."""
    return Bounds(0, limits.ahead_ms / 1000)
