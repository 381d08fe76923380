"""The per-process key cache: what makes a scoped key cost one dict lookup and one ``hmac`` compare.

Each process remembers, per access key id, the usable :class:`~forqapp.keys.Key` (or that there is
none) for ``FORQ_KEYS_CACHE_SECONDS`` (default 5): a revocation, a disable, a rotation or an expiry
takes effect on every host within that time (an expiry at once: it is checked on every use). An
unknown id is remembered too, so a client guessing ids costs one read per id and period, and a
wrong id takes the same path as a wrong secret (a compare against a dummy secret): their timings
match (``tests/test_keys_timing.py``).

A refusal is never older than :data:`RECHECK_SECONDS`: when a cached answer refuses a token and was
read more than that ago, the database is asked again. So a key rotated (or created) through another
process works here within a quarter of a second, not a cache period, while a client sending wrong
secrets costs at most one read per id, process and quarter second (and the auth throttle stops it).

Last use: a use that loads the key (a miss) writes it at once (one ``UPDATE``); a use answered
from the cache is noted in memory, and the next load writes it. So at most one write per key,
process and period, never one per request; ``last_used_at`` is right to within the period.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from ..conf import forq_settings
from . import ROOT_ACCESS_KEY_ID, Key, crypto, grants
from .tokens import ID, SEPARATOR

if TYPE_CHECKING:
    from .models import ApiKey

logger = logging.getLogger("forqapp.keys")

RECHECK_SECONDS = 0.25  # a refusal from a cached answer older than this asks the database again
MAX_ENTRIES = 10_000  # ids remembered per process (guessed ids must not grow it without bound)
_DUMMY = "x" * 40  # compared against when the id is unknown: a wrong id costs what a wrong secret costs

_NOBODY = Key("", _DUMMY)  # an unknown id's entry: it goes through the same steps as a known key

_entries: dict[str, tuple[float, float, Key]] = {}  # id -> (trusted until, read at, key): monotonic
_used: dict[str, int] = {}  # access key id -> last use (Unix ms) not yet written
_lock = threading.Lock()
MISS: Any = object()


def _api_keys() -> type[ApiKey]:
    """The model: imported on first use, since this module is imported while apps load (the API's
    ASGI module imports it before ``django.setup()``)."""
    from .models import ApiKey

    return ApiKey


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def root_key() -> Key | None:
    entry = _root_entry()
    return None if entry is None else entry[0]


def _root_entry() -> tuple[Key, bytes] | None:
    """The root key and its secret's bytes (encoded once, not for each request)."""
    secret = forq_settings.FORQ_AUTH_SECRET
    if not secret:
        return None
    entry = _root.get(secret)
    if entry is None:
        _root.clear()
        key = Key(ROOT_ACCESS_KEY_ID, secret, root=True, name="FORQ_AUTH_SECRET")
        entry = _root[secret] = (key, secret.encode("utf-8"))
    return entry


_root: dict[str, tuple[Key, bytes]] = {}


def _entry(access_key_id: str) -> Key:
    """The cached key (:data:`_NOBODY` for an unknown, expired or unusable one), or :data:`MISS`."""
    entry = _entries.get(access_key_id)
    if entry is None or entry[0] < time.monotonic():
        return MISS
    key = entry[2]
    if key.expires_at is not None and key.expires_at <= _now_ms():
        return _NOBODY
    return key


def cached(access_key_id: str) -> Key | None:
    """The cached answer for ``access_key_id`` (a Key or None), or :data:`MISS`; never a query."""
    key = _entry(access_key_id)
    return None if key is _NOBODY else key


def for_access_key(access_key_id: str) -> Key | None:
    if access_key_id == ROOT_ACCESS_KEY_ID:
        return root_key()
    key = cached(access_key_id)
    if key is MISS:
        key = load(access_key_id)
        if key is not None:
            write_last_use(access_key_id)
    elif key is not None:
        _used[access_key_id] = _now_ms()
    return key


def check_token(token: str | None, *, query: bool = True) -> Key | None:
    """The key ``token`` names if its secret is right (constant time), else None. Without
    ``query``, :data:`MISS` when the key is not cached (the caller asks again off the event loop)."""
    if not token:
        return None
    given = token.encode("utf-8", "surrogatepass")
    root = _root_entry()
    if root is not None and hmac.compare_digest(given, root[1]):
        return root[0]
    access_key_id, sep, secret = token.partition(SEPARATOR)
    if not sep:
        return None
    key = _entry(access_key_id)  # (a cached id was shaped right when it was loaded)
    loaded = key is MISS
    if loaded:
        if not ID.fullmatch(access_key_id):
            return None
        if not query:
            return MISS
        key = load(access_key_id) or _NOBODY
    # An unknown id is compared against a dummy secret: a wrong id costs what a wrong secret costs.
    given_secret = secret.encode("utf-8", "surrogatepass")
    if not hmac.compare_digest(given_secret, key.secret.encode("utf-8")):
        if loaded or not recheck_due(access_key_id):
            return None
        # Refused by an answer read a while ago: the key may have been rotated or created elsewhere.
        if not query:
            return MISS
        key = load(access_key_id) or _NOBODY
        loaded = True
        if not hmac.compare_digest(given_secret, key.secret.encode("utf-8")):
            return None
    if key is _NOBODY:
        return None
    if loaded:
        write_last_use(access_key_id)  # at most once per key, process and cache period
    else:
        _used[access_key_id] = _now_ms()  # written on the next load
    return key


def recheck_due(access_key_id: str) -> bool:
    """Whether a refusal of ``access_key_id`` (a scoped key's: the root key is never cached) should
    ask the database again (:func:`load`): its cached answer is older than :data:`RECHECK_SECONDS`."""
    if access_key_id == ROOT_ACCESS_KEY_ID:
        return False
    entry = _entries.get(access_key_id)
    return entry is None or time.monotonic() - entry[1] >= RECHECK_SECONDS


def for_token(token: str | None) -> Key | None:
    return check_token(token)


def for_token_cached(token: str | None) -> Key | None:
    """:func:`for_token` without a query: the key, None (wrong or unknown), or :data:`MISS` when the
    id is not cached (then call :func:`for_token` off the event loop)."""
    return check_token(token, query=False)


def write_last_use(access_key_id: str) -> None:
    """Write the key's last use: now (one ``UPDATE``, after a load: the use that caused it)."""
    _used.pop(access_key_id, None)
    _api_keys().objects.filter(access_key_id=access_key_id).update(last_used_at=_now_ms())


def load(access_key_id: str) -> Key | None:
    """Read the key from the database (and write its pending last use); cache the answer."""
    now = _now_ms()
    row = (_api_keys().objects.usable(now).filter(access_key_id=access_key_id)
           .values_list("name", "secret_sealed", "grants", "expires_at").first())
    key = None
    if row is None:
        # An unknown id does the work a known one does (open a sealed secret, parse grants), so that
        # a wrong id costs what a wrong secret costs on a cold cache too (tests/test_keys_timing.py).
        sealed_id, sealed, grant_texts = _dummy_row()
        try:
            Key(sealed_id, crypto.unseal(sealed, sealed_id), grants.parse_all(json.loads(grant_texts)))
        except (crypto.SealError, grants.GrantError):  # the server key changed meanwhile: the next call reseals
            _dummies.clear()
    else:
        name, sealed, grant_texts, expires_at = row
        try:
            secret = crypto.unseal(sealed, access_key_id)
            key = Key(access_key_id, secret, grants.parse_all(grant_texts), name=name, expires_at=expires_at)
        except (crypto.SealError, grants.GrantError) as exc:
            logger.error("API key %s cannot be used: %s", access_key_id, exc)
    with _lock:
        if len(_entries) >= MAX_ENTRIES:
            _entries.clear()
        now_s = time.monotonic()
        _entries[access_key_id] = (now_s + forq_settings.FORQ_KEYS_CACHE_SECONDS, now_s, key or _NOBODY)
    return key


_dummies: dict[str, tuple[str, str, str]] = {}  # server key material -> a sealed dummy row


def _dummy_row() -> tuple[str, str, str]:
    """(access key id, sealed secret, grants as stored JSON) of a key that does not exist, sealed
    under the current server key: what :func:`load` opens for an unknown id."""
    material = crypto.server_key_material()
    row = _dummies.get(material)
    if row is None:
        _dummies.clear()
        dummy_id = "FQK" + "A" * 17
        row = _dummies[material] = (dummy_id, crypto.seal(_DUMMY, dummy_id), json.dumps(["dummy:read"]))
    return row


def flush_last_used() -> int:
    """Write every pending last use now (tests; a server's shutdown). How many keys were written."""
    pending = list(_used.items())
    _used.clear()
    for access_key_id, used in pending:
        _api_keys().objects.filter(access_key_id=access_key_id).exclude(last_used_at__gte=used).update(last_used_at=used)
    return len(pending)


def forget(access_key_id: str | None = None) -> None:
    """Drop the cached answer for one id (or all): this process sees a change at once."""
    with _lock:
        if access_key_id is None:
            _entries.clear()
            _used.clear()
        else:
            _entries.pop(access_key_id, None)
