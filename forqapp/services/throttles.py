"""The API-key throttle and the login throttle (one table: login throttles under ``login-…`` keys)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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


# How long a login refused only because other logins from its address (or of its username) are
# being checked waits for one of them to end before it is told to try again in a moment: an
# office behind one address logging in at once waits a check's time, not a window's.
LOGIN_BUSY_WAIT_S = 10.0


@dataclass(frozen=True)
class LoginAttempt:
    """What :func:`login_attempt` decided. ``until``: refused, the key blocked until then (Unix
    ms). ``busy``: refused only because other logins are being checked (try again in a moment).
    Else it may be checked, and ``windows`` maps each key to the window it was counted in, which
    :func:`login_failed` (``reserved``) or :func:`login_released` must be given; ``windows`` None:
    not counted (the database could not write), to be checked and counted as before the count
    came first."""

    until: int = 0
    busy: bool = False
    windows: dict[str, int] | None = None


def login_attempt(keys: Iterable[str], *, using: str | None = None, wait_s: float | None = None) -> LoginAttempt:
    """Before a login's password is checked: count it against each of ``keys`` as a login being
    checked (one atomic statement per key), so that of concurrent wrong passwords at most
    ``FORQ_LOGIN_MAX_FAILURES`` per window are ever checked (a check read first let a burst
    through before any failure was counted). Logins being checked are no failures: a key is
    blocked by failures only, and a login refused only because the window's failures and logins
    being checked come to the limit waits up to ``wait_s`` (:data:`LOGIN_BUSY_WAIT_S`) for one
    of them to end. Best-effort: a database that cannot write now (a full disk, a write lock held
    past the busy timeout, a server out of reach) counts nothing, says so in the log, and the
    login is refused only if a key is blocked (read as before the count came first)."""
    keys = [key[:100] for key in keys]
    deadline = time.monotonic() + (LOGIN_BUSY_WAIT_S if wait_s is None else wait_s)
    pause = 0.01
    while True:
        try:
            attempt = _login_reserve(keys, using)
        except Exception as exc:
            reason = errors.unavailable(exc)
            if reason is None:
                raise
            errors.say_unavailable(logger, "counting a login before its password is checked", reason,
                                   "checked without counting it first")
            return LoginAttempt(until=login_blocked_until(keys, using=using))
        if not attempt.busy or time.monotonic() >= deadline:
            return attempt
        time.sleep(pause * (0.5 + random.random()))  # noqa: S311 (a jitter, not a secret)
        pause = min(pause * 2, 0.2)


def _login_reserve(keys: list[str], using: str | None) -> LoginAttempt:
    """One try of :func:`login_attempt`: every key counted, or none (those counted released)."""
    st = _store(using)
    now = base.now_ms()
    window, limit, _ = _login_bounds()
    taken: dict[str, int] = {}
    try:
        for key in keys:
            reserved, until = st.login_attempt(key, now, window, limit)
            if not reserved:
                login_released(taken, using=using)
                return LoginAttempt(until=until, busy=not until)
            taken[key] = reserved
    except BaseException:
        login_released(taken, using=using)
        raise
    return LoginAttempt(windows=taken)


def _login_checked(windows: Mapping[str, int], failed: bool, using: str | None) -> bool:
    """Best-effort: each key's login counted in its window was checked; False when the database
    could not be written (said in the log; never raised to the one logging in)."""
    st = _store(using)
    now = base.now_ms()
    window, limit, block = _login_bounds()
    done = True
    for key, reserved in windows.items():
        try:
            st.login_checked(key[:100], reserved, now, failed, window, limit, block)
        except Exception as exc:
            done = False
            reason = errors.unavailable(exc)
            what = "counting a failed login" if failed else "ending a login's count"
            if reason is None:
                logger.exception("%s: failed; the login goes on", what)
            else:
                errors.say_unavailable(logger, what, reason, "the login goes on")
    return done


def login_released(windows: Mapping[str, int], *, using: str | None = None) -> None:
    """A login :func:`login_attempt` counted (in ``windows``) did not fail (it succeeded, or was
    not checked): no longer being checked. Only in the window it was counted in: one that started
    anew since is left alone. Best-effort (logged, never raised)."""
    if windows:
        _login_checked(windows, False, using)


def login_failed(keys: Iterable[str], *, reserved: Mapping[str, int] | None = None, using: str | None = None) -> int:
    """Count a failed login against each of ``keys``: the ``FORQ_LOGIN_MAX_FAILURES``-th within
    ``FORQ_LOGIN_FAILURE_WINDOW_S`` blocks that key for ``FORQ_LOGIN_BLOCK_S``. ``reserved``: a
    login :func:`login_attempt` counted already (its windows), whose failure counts in those
    windows only, best-effort (logged, never raised). Returns until when the login is now blocked
    (Unix ms, or 0)."""
    if reserved is not None:
        if not _login_checked(reserved, True, using):
            return 0
        try:
            return login_blocked_until(reserved, using=using)
        except Exception as exc:
            reason = errors.unavailable(exc)
            if reason is None:
                logger.exception("reading a login's block: failed; the login goes on")
            else:
                errors.say_unavailable(logger, "reading a login's block", reason, "the login goes on")
            return 0
    st = _store(using)
    now = base.now_ms()
    window, limit, block = _login_bounds()
    return max((st.login_failed(key[:100], now, window, limit, block) for key in keys), default=0)
