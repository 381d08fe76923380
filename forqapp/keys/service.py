"""Creating, revoking, rotating, enabling and disabling keys: the one path the CLI, the admin and the
HTMX pages take. Each change is one transaction with its :class:`~forqapp.keys.models.KeyEvent`
(the audit log) and drops this process's cached copy; other processes see it within
``FORQ_KEYS_CACHE_SECONDS``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import IntegrityError, router, transaction

from ..utils import ms_to_datetime, now_ms
from . import cache, crypto, grants, tokens
from .models import ApiKey, KeyEvent

MAX_NAME = 100


class KeyError_(ValueError):  # noqa: N801 - not the builtin KeyError
    """A change refused (bad name, bad grant, unknown key, name taken); the message says why."""


@dataclass(frozen=True)
class Issued:
    """A key with its secret in clear: shown once, never stored so."""

    key: ApiKey
    secret: str

    @property
    def token(self) -> str:
        return tokens.token(self.key.access_key_id, self.secret)


def _atomic():
    return transaction.atomic(using=router.db_for_write(ApiKey))


def _event(key: ApiKey, action: str, actor: str, via: str, detail: str = "") -> None:
    KeyEvent.objects.create(key=key, action=action, actor=actor[:150], via=via, at=now_ms(), detail=detail)


def check_name(name: str) -> str:
    name = (name or "").strip()
    if not name or len(name) > MAX_NAME or any(c in name for c in "\x00\r\n"):
        raise KeyError_(f"a key's name is 1 to {MAX_NAME} characters on one line")
    return name


def create(name: str, grant_texts: Sequence[str], *, expires_at: int | None = None, actor: str,
           via: str) -> Issued:
    """A new key; the secret is in the answer only."""
    name = check_name(name)
    try:
        parsed = grants.parse_all(list(grant_texts))
    except grants.GrantError as exc:
        raise KeyError_(str(exc)) from None
    now = now_ms()
    if expires_at is not None and expires_at <= now:
        raise KeyError_("the expiry is in the past")
    access_key_id, secret = tokens.new_access_key_id(), tokens.new_secret()
    try:
        with _atomic():
            key = ApiKey.objects.create(
                name=name, access_key_id=access_key_id, secret_sealed=crypto.seal(secret, access_key_id),
                grants=grants.dumps(parsed), created_at=now, created_by=actor[:150], expires_at=expires_at)
            _event(key, "created", actor, via, "; ".join(key.grants) + _expiry(expires_at))
    except IntegrityError:
        raise KeyError_(f"a key named {name!r} exists already") from None
    cache.forget(access_key_id)
    return Issued(key, secret)


def find(ref: str) -> ApiKey:
    """A key by access key id or by name."""
    key = ApiKey.objects.filter(access_key_id=ref).first() or ApiKey.objects.filter(name=ref).first()
    if key is None:
        raise KeyError_(f"no key {ref!r} (give its name or access key id)")
    return key


def revoke(key: ApiKey, *, actor: str, via: str) -> bool:
    """Revoke for good (False if it was already). Its requests fail within the cache period."""
    with _atomic():
        done = ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=now_ms())
        if done:
            _event(key, "revoked", actor, via)
    cache.forget(key.access_key_id)
    key.refresh_from_db()
    return bool(done)


def rotate(key: ApiKey, *, actor: str, via: str) -> Issued:
    """A new secret for the same access key id and grants; the old secret stops working (within the
    cache period on other processes)."""
    if key.revoked_at is not None:
        raise KeyError_(f"{key.name!r} is revoked: create a new key")
    secret = tokens.new_secret()
    with _atomic():
        ApiKey.objects.filter(pk=key.pk).update(secret_sealed=crypto.seal(secret, key.access_key_id),
                                                rotated_at=now_ms())
        _event(key, "rotated", actor, via)
    cache.forget(key.access_key_id)
    key.refresh_from_db()
    return Issued(key, secret)


def set_enabled(key: ApiKey, enabled: bool, *, actor: str, via: str) -> bool:
    """Enable or disable (False if it was already); a revoked key stays revoked and is refused."""
    with _atomic():
        done = (ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).exclude(enabled=enabled)
                .update(enabled=enabled))
        if done:
            _event(key, "enabled" if enabled else "disabled", actor, via)
    cache.forget(key.access_key_id)
    key.refresh_from_db()
    if not done and key.revoked_at is not None:
        raise KeyError_(f"{key.name!r} is revoked: it cannot be {'enabled' if enabled else 'disabled'}")
    return bool(done)


def update(key: ApiKey, *, grant_texts: Sequence[str], expires_at: int | None, actor: str, via: str) -> None:
    """New grants and expiry (the admin's change form)."""
    try:
        stored = grants.dumps(grants.parse_all(list(grant_texts)))
    except grants.GrantError as exc:
        raise KeyError_(str(exc)) from None
    with _atomic():
        ApiKey.objects.filter(pk=key.pk).update(grants=stored, expires_at=expires_at)
        _event(key, "edited", actor, via, "; ".join(stored) + _expiry(expires_at))
    cache.forget(key.access_key_id)
    key.refresh_from_db()


def _expiry(expires_at: int | None) -> str:
    """An event's words for the key's expiry: "; expires 2026-12-01 14:00:00 UTC" ("" for none)."""
    when = ms_to_datetime(expires_at)
    return "" if when is None else f"; expires {when:%Y-%m-%d %H:%M:%S} UTC"


def state(key: ApiKey, now: int | None = None) -> str:
    """active, disabled, revoked or expired."""
    now = now_ms() if now is None else now
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return "active" if key.enabled else "disabled"
