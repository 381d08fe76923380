"""The API-key throttle and the login throttle (one table: login throttles under ``login-…`` keys)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TypeVar

from .. import errors
from ..conf import forq_settings
from . import base
from .base import _store

T = TypeVar("T")

logger = logging.getLogger("forqapp.auth")

# --- API-key throttle -----------------------------------------------------------------------


def auth_blocked(address: str, *, using: str | None = None) -> bool:
    """Is ``address`` refused for too many wrong keys? (Shared by every process and host.)"""
    return _store(using).auth_blocked_until(address[:100]) > base.now_ms()


def auth_retry_after(address: str, *, using: str | None = None) -> int:
    """Whole seconds until ``address`` may try a key again (a 429's ``Retry-After``); 0: not blocked."""
    left_ms = _store(using).auth_blocked_until(address[:100]) - base.now_ms()
    return max(0, -(-left_ms // 1000))  # rounded up: retrying at once after would still be refused


def auth_failed(address: str, *, using: str | None = None) -> int:
    """Count a wrong key from ``address``: the ``FORQ_AUTH_MAX_FAILURES``-th within
    ``FORQ_AUTH_FAILURE_WINDOW_S`` blocks it for ``FORQ_AUTH_BLOCK_S``. Returns 0 when the key is
    to be refused as wrong (401), or the whole seconds until the address may try again when it is
    blocked already (429: this failure is not counted, its block not extended). One atomic
    statement decides, so that of concurrent wrong keys from one address exactly the first
    ``FORQ_AUTH_MAX_FAILURES`` are answered 401 (a check read first let them all through before
    any was counted). A database that cannot write now (a full disk, a write lock held past the
    busy timeout, a server out of reach) does not count it, and says so in the log at most once a
    second; the key is refused all the same (0: 401, not the 503 of a write that failed)."""
    now = base.now_ms()
    try:
        until = _store(using).auth_failed(address[:100], now, forq_settings.FORQ_AUTH_FAILURE_WINDOW_S * 1000,
                                          forq_settings.FORQ_AUTH_MAX_FAILURES, forq_settings.FORQ_AUTH_BLOCK_S * 1000)
    except Exception as exc:
        reason = errors.unavailable(exc)
        if reason is None:
            raise
        errors.say_unavailable(logger, "counting a wrong API key", reason, "refused without counting it")
        return 0
    if until >= 0:
        return 0
    return max(1, -(-(-until - now) // 1000))  # blocked already: rounded up, as auth_retry_after


# --- login throttle (the API-key throttle's table, under "login-…" keys) ----------------------


def login_blocked_until(keys: Iterable[str], *, using: str | None = None) -> int:
    """Until when (Unix ms) a login is refused for any of ``keys`` (:mod:`forqapp.login_throttle`'s
    address and username keys); 0 when it is not."""
    st = _store(using)
    until = max((st.auth_blocked_until(key[:100]) for key in keys), default=0)
    return until if until > base.now_ms() else 0


def _login_bounds() -> tuple[int, int, int]:
    return (forq_settings.FORQ_LOGIN_FAILURE_WINDOW_S * 1000, forq_settings.FORQ_LOGIN_MAX_FAILURES,
            forq_settings.FORQ_LOGIN_BLOCK_S * 1000)


def login_attempt(keys: Iterable[str], *, using: str | None = None) -> int:
    """Before a login's password is checked: count it against each of ``keys`` as a failure to
    come (one atomic statement per key). Returns 0 when it may be checked — then
    :func:`login_failed` (``reserved=True``) or :func:`login_released` must follow — else until
    when it is refused (Unix ms; nothing stays counted). So that of concurrent wrong passwords at
    most ``FORQ_LOGIN_MAX_FAILURES`` per window are ever checked (a check read first let a burst
    through before any failure was counted)."""
    st = _store(using)
    now = base.now_ms()
    window, limit, _ = _login_bounds()
    taken: list[str] = []
    until = 0
    for key in keys:
        refused = st.login_attempt(key[:100], now, window, limit)
        if refused:
            until = max(until, refused)
        else:
            taken.append(key)
    if until:
        login_released(taken, using=using)
    return until


def login_released(keys: Iterable[str], *, using: str | None = None) -> None:
    """A login :func:`login_attempt` counted did not fail (it succeeded, or was not checked)."""
    st = _store(using)
    now = base.now_ms()
    window, limit, block = _login_bounds()
    for key in keys:
        st.login_checked(key[:100], now, False, window, limit, block)


def login_failed(keys: Iterable[str], *, reserved: bool = False, using: str | None = None) -> int:
    """Count a failed login against each of ``keys``: the ``FORQ_LOGIN_MAX_FAILURES``-th within
    ``FORQ_LOGIN_FAILURE_WINDOW_S`` blocks that key for ``FORQ_LOGIN_BLOCK_S``. ``reserved``: a
    login :func:`login_attempt` counted already, which stays counted. Returns until when the login
    is now blocked (Unix ms, or 0)."""
    st = _store(using)
    now = base.now_ms()
    window, limit, block = _login_bounds()
    if reserved:
        for key in keys:
            st.login_checked(key[:100], now, True, window, limit, block)
        return login_blocked_until(keys, using=using)
    return max((st.login_failed(key[:100], now, window, limit, block) for key in keys), default=0)
