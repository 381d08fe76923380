"""Named leases: one holder at a time (the jobs scheduler's lease)."""

from __future__ import annotations

from typing import TypeVar

from .. import store
from . import base
from .base import _store

T = TypeVar("T")

# --- leases -----------------------------------------------------------------------------------


def acquire_lease(name: str, holder: str, ttl_ms: int, *, replacing: str = "", using: str | None = None) -> bool:
    """Take or renew the named lease for ``holder`` (one atomic statement); False while another
    live holder has it. ``replacing`` names a holder the caller knows is dead: taken over at once."""
    return _store(using).lease_acquire(name, holder, base.now_ms(), int(ttl_ms), replacing)


def lease_holder(name: str, *, using: str | None = None) -> store.LeaseHolder | None:
    """(holder, expires_at in Unix ms) of the named lease, or None when nobody holds it."""
    return _store(using).lease_holder(name)


def release_lease(name: str, holder: str, *, using: str | None = None) -> bool:
    """Give the named lease up if ``holder`` has it."""
    return _store(using).lease_release(name, holder)
