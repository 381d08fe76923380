"""Hundreds of idle long-polling consumers must not stop producers from being served."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from .conftest import SECRET, start_server, stop_server

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def api_long_polls():
    # Polls that outlast the test's 350 sequential produces even on a loaded machine (on PostgreSQL,
    # each is a commit and wakes a poll whose claim is another: 250 of them once took over 30 s, and
    # the polls still waiting then ended empty, their messages produced after they had left).
    api = start_server({"FORQ_LONG_POLL_SECONDS": "120"})
    yield api
    stop_server(api)


def test_250_idle_long_polls_do_not_block_producers(api_long_polls):
    live_api = api_long_polls

    async def scenario():
        limits = httpx.Limits(max_connections=400, max_keepalive_connections=400)
        headers = {"X-API-Key": SECRET}
        async with httpx.AsyncClient(base_url=live_api.url, headers=headers, limits=limits, timeout=60) as client:
            polls = [asyncio.ensure_future(client.get("/api/v1/queues/idle-wait/messages")) for _ in range(250)]
            await asyncio.sleep(0.5)  # all of them are now waiting in the server
            start = time.monotonic()
            for i in range(100):
                response = await client.post("/api/v1/queues/busy/messages", json={"content": f"m{i}"})
                assert response.status_code == 204
            produce_time = time.monotonic() - start
            # Now wake the waiters: 250 messages for 250 long polls, each gets exactly one.
            for i in range(250):
                await client.post("/api/v1/queues/idle-wait/messages", json={"content": f"w{i}"})
            results = await asyncio.gather(*polls)
            return produce_time, results

    produce_time, results = asyncio.run(scenario())
    assert produce_time < 10  # served while 250 polls wait, not after they time out
    contents = sorted(r.json()["content"] for r in results if r.status_code == 200)
    assert contents == sorted(f"w{i}" for i in range(250))  # every waiter got one, none twice
