"""Scoped keys across two server processes (issue 16): a revocation, a rotation and an expiry made
elsewhere take effect on both within ``FORQ_KEYS_CACHE_SECONDS``; both write last use."""

from __future__ import annotations

import time

import httpx
import pytest

from forqapp.keys import service
from forqapp.keys.models import ApiKey

from .conftest import start_server, stop_server

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SERVER_KEY = "keys-server-secret-0123456789abcdef-0123"  # noqa: S105 - the test servers' FORQ_KEYS_SECRET
CACHE_S = 1.0


@pytest.fixture(scope="module")
def servers(django_db_setup, django_db_blocker):
    env = {"FORQ_KEYS_SECRET": SERVER_KEY, "FORQ_KEYS_CACHE_SECONDS": str(CACHE_S), "FORQ_API_WORKERS": "1"}
    started = []
    try:
        for _ in range(2):
            started.append(start_server(env))
        yield started
    finally:
        for s in started:
            stop_server(s)


@pytest.fixture(autouse=True)
def _server_key(settings):
    settings.FORQ_KEYS_SECRET = SERVER_KEY  # this process seals as the servers open


def status(server, token: str, queue: str = "multi") -> int:
    return httpx.get(f"{server.url}/api/v2/queues/{queue}/peek", headers={"X-API-Key": token}, timeout=10).status_code


def refused_within(servers, token: str, limit_s: float) -> float:
    """Seconds until every server refuses ``token`` (401); fails past ``limit_s``."""
    start = time.monotonic()
    pending = list(servers)
    while pending:
        pending = [s for s in pending if status(s, token) != 401]
        elapsed = time.monotonic() - start
        assert elapsed < limit_s, f"still accepted after {elapsed:.1f} s"
        time.sleep(0.05)
    return time.monotonic() - start


def test_revocation_and_rotation_reach_every_server_within_the_cache_period(servers):
    issued = service.create("multi-reader", ["multi:read"], actor="test", via="cli")
    assert [status(s, issued.token) for s in servers] == [200, 200]
    assert [status(s, issued.token, "other") for s in servers] == [403, 403]
    rotated = service.rotate(issued.key, actor="test", via="cli")
    took = refused_within(servers, issued.token, CACHE_S + 2)
    assert [status(s, rotated.token) for s in servers] == [200, 200]
    service.revoke(issued.key, actor="test", via="cli")
    took = max(took, refused_within(servers, rotated.token, CACHE_S + 2))
    print(f"\nrevocation/rotation effective on both servers after {took:.2f} s (FORQ_KEYS_CACHE_SECONDS={CACHE_S})")


def test_expiry_is_exact_on_every_server(servers):
    expires = int(time.time() * 1000) + 2500
    issued = service.create("multi-expiring", ["multi:read"], expires_at=expires, actor="test", via="cli")
    assert [status(s, issued.token) for s in servers] == [200, 200]
    time.sleep(max(0.0, expires / 1000 - time.time()) + 0.05)
    assert [status(s, issued.token) for s in servers] == [401, 401]  # checked on every use, cached or not


def test_servers_record_last_use(servers):
    issued = service.create("multi-used", ["multi:read"], actor="test", via="cli")
    assert ApiKey.objects.get(pk=issued.key.pk).last_used_at is None
    deadline = time.monotonic() + 4 * CACHE_S + 5
    while ApiKey.objects.get(pk=issued.key.pk).last_used_at is None:
        assert time.monotonic() < deadline, "no server wrote the key's last use"
        for s in servers:
            status(s, issued.token)
        time.sleep(0.2)
