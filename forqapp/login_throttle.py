"""Failed-login throttle for the UI's login and Django's admin login.

Failures are counted per client address and per username in the database (the API-key throttle's
table, under ``login-ip:…`` and ``login-user:…`` keys), so every process and host enforce one
limit. The ``FORQ_LOGIN_MAX_FAILURES``-th failure within ``FORQ_LOGIN_FAILURE_WINDOW_S`` blocks
that address or username for ``FORQ_LOGIN_BLOCK_S``; while blocked, even the right password is
refused. Nothing resets a counter early: a success with the attacker's own account must not
clear their address's failures, or they could alternate guesses and successes.

Three pieces:

* :class:`LoginThrottleForm` / :class:`AdminLoginThrottleForm`: refuse a blocked login before the
  password is checked, with a message that says how long to wait (the UI's login view and
  ``admin.site.login_form`` use them, so both pages are covered with no setting);
* :func:`record_failure`, connected to Django's ``user_login_failed`` signal (in ``apps.py``);
* :class:`LoginThrottleBackend`, first in ``AUTHENTICATION_BACKENDS``: the same refusal for any
  other code that calls ``authenticate()`` with a request.
"""

from __future__ import annotations

import math
from contextvars import ContextVar

from asgiref.sync import sync_to_async
from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm, UsernameField
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils.crypto import salted_hmac

from . import services
from .api.auth import client_address
from .services import throttles

REFUSED = "_forq_login_refused"  # set on a request the throttle refused: not one more failure


BUSY = "Too many logins at once; try again in a moment."


class _Attempt:
    """A login the form counted before checking it (:func:`forqapp.services.throttles.login_attempt`):
    the window each key counted it in."""

    def __init__(self, windows: dict[str, int]) -> None:
        self.windows, self.failed = windows, False


_attempt: ContextVar[_Attempt | None] = ContextVar("forq_login_attempt", default=None)


def user_key(username: str) -> str:
    """The throttle key of a username: an HMAC of it (case-folded), so any length fits the key
    column and a password typed into the username field is never stored in clear."""
    digest = salted_hmac("forqapp.login_throttle", username.strip().casefold(), algorithm="sha256")
    return "login-user:" + digest.hexdigest()


def keys(request, username: str | None) -> list[str]:
    found = []
    if request is not None:
        found.append("login-ip:" + client_address(request)[:91])
    if username:
        found.append(user_key(str(username)))
    return found


def blocked_until(request, username: str | None) -> int:
    """Until when (Unix ms) this login is refused; 0 when it may go ahead."""
    return services.login_blocked_until(keys(request, username))


def blocked_message(until: int) -> str:
    minutes = max(1, math.ceil((until - services.now_ms()) / 60_000))
    return f"Too many failed logins; try again in {minutes} minute{'s' if minutes != 1 else ''}."


def record_failure(sender, credentials, request=None, **kwargs) -> None:
    """``user_login_failed``: count the failure against the address and the username, unless the
    throttle itself refused the attempt (a blocked client's retries do not extend its block)."""
    if request is not None and getattr(request, REFUSED, False):
        return
    attempt = _attempt.get()
    if attempt is not None:  # the login form's: counted already, before the password was checked
        if not attempt.failed:
            attempt.failed = True
            services.login_failed(list(attempt.windows), reserved=attempt.windows)
        return
    username = credentials.get(get_user_model().USERNAME_FIELD) or credentials.get("username")
    services.login_failed(keys(request, username))


class LoginThrottleBackend:
    """Authenticates nobody; refuses (``PermissionDenied`` stops ``authenticate()``) a blocked
    address or username before the next backend checks the password.

    Deliberately no ``get_user``: Django's test client's ``force_login`` picks the first backend
    that has one, and a session must never name this backend (it loads no users)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        username = username or kwargs.get(get_user_model().USERNAME_FIELD)
        if blocked_until(request, username):
            if request is not None:
                setattr(request, REFUSED, True)
            raise PermissionDenied("too many failed logins")
        return None

    async def aauthenticate(self, request, **credentials):
        return await sync_to_async(self.authenticate)(request, **credentials)


class _ShownUsernameField(UsernameField):
    """The username field, whose value is shown again without its NUL characters (refused by the
    field: "Null characters are not allowed."), which no page should echo."""

    def prepare_value(self, value):
        value = super().prepare_value(value)
        return value.replace("\x00", "\ufffd") if isinstance(value, str) else value


class LoginThrottleForm(AuthenticationForm):
    """Django's login form, refusing a blocked login with how long to wait.

    A login whose password is to be checked is counted first, as a login being checked, in one
    statement per key (address, username), and counted as a failure if it fails: so however many
    come at once, at most ``FORQ_LOGIN_MAX_FAILURES`` wrong passwords per window are ever checked
    (a check read first let 12 of 100 concurrent ones through). One refused only because others
    are being checked (it waits a little first) is told to try again in a moment, and is no
    failure. Counting first is best-effort: a database that cannot write now lets the login be
    checked after a read of its block, as before."""

    username = _ShownUsernameField(widget=forms.TextInput(attrs={"autofocus": True}))

    def clean(self):
        username, password = self.cleaned_data.get("username"), self.cleaned_data.get("password")
        if username is None or not password:  # no password is checked
            until = blocked_until(self.request, username)
            if until:
                raise ValidationError(blocked_message(until), code="throttled")
            return super().clean()
        counted = throttles.login_attempt(keys(self.request, username))
        if counted.until:
            raise ValidationError(blocked_message(counted.until), code="throttled")
        if counted.busy:
            raise ValidationError(BUSY, code="throttled")
        if counted.windows is None:  # not counted first (the database could not write): as before
            return super().clean()
        attempt = _Attempt(counted.windows)
        token = _attempt.set(attempt)
        try:
            return super().clean()
        finally:
            _attempt.reset(token)
            if not attempt.failed:
                throttles.login_released(attempt.windows)


class AdminLoginThrottleForm(LoginThrottleForm, AdminAuthenticationForm):
    """The admin's login form (active staff only), throttled."""
