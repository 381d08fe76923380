"""API-key checks (constant time) and the throttle on failed attempts, per client address."""

from __future__ import annotations

import hmac
import threading
import time
from collections import deque

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


class Throttle:
    """After ``FORQ_AUTH_MAX_FAILURES`` failures from one address within the window, that address
    is refused for ``FORQ_AUTH_BLOCK_S`` seconds (a valid key always passes: the caller checks the
    key first). Kept per process; entries expire by themselves."""

    def __init__(self):
        self._lock = threading.Lock()
        self._failures: dict[str, deque[float]] = {}
        self._blocked_until: dict[str, float] = {}

    def blocked(self, address: str) -> bool:
        with self._lock:
            until = self._blocked_until.get(address)
            if until is None:
                return False
            if time.monotonic() < until:
                return True
            del self._blocked_until[address]
            return False

    def fail(self, address: str) -> None:
        now = time.monotonic()
        window = forq_settings.FORQ_AUTH_FAILURE_WINDOW_S
        with self._lock:
            failures = self._failures.setdefault(address, deque())
            failures.append(now)
            while failures and failures[0] <= now - window:
                failures.popleft()
            if len(failures) >= forq_settings.FORQ_AUTH_MAX_FAILURES:
                self._blocked_until[address] = now + forq_settings.FORQ_AUTH_BLOCK_S
                del self._failures[address]
            if len(self._failures) > 10_000:  # bound memory under a spray of addresses
                self._failures = {a: f for a, f in self._failures.items() if f and f[-1] > now - window}

    def reset(self) -> None:
        with self._lock:
            self._failures.clear()
            self._blocked_until.clear()


throttle = Throttle()
