"""API-key checks (constant time) and the client address the throttle counts failures against.

``X-API-Key`` on the API (the root key ``FORQ_AUTH_SECRET`` or a scoped key's token) is checked by
:func:`forqapp.keys.for_token` (through :mod:`forqapp.api.plumbing`); :func:`key_matches` checks
the other fixed keys (``FORQ_METRICS_AUTH_SECRET``).

The throttle itself lives in the database (``services.auth_blocked`` / ``auth_failed``), so that
every server process and host enforce one limit per address."""

from __future__ import annotations

import hmac

from ..conf import forq_settings


def key_matches(given: str | None, secret: str) -> bool:
    if not given or not secret:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), secret.encode("utf-8"))


def client_address(request) -> str:
    """The client's address; with ``FORQ_TRUST_PROXY_HEADERS``, the rightmost X-Forwarded-For."""
    if forq_settings.FORQ_TRUST_PROXY_HEADERS:
        forwarded = request.headers.get("X-Forwarded-For", "")
        hops = [h.strip() for h in forwarded.split(",") if h.strip()]
        if hops:
            return hops[-1]
    return request.META.get("REMOTE_ADDR") or "unknown"
