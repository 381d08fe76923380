"""A server killed mid-load (``kill -9`` of forq_serve and every granian process) loses no message
it acknowledged, stores none twice, and serves again after a restart on the same database."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest

from forqapp.models import Message

from .conftest import SECRET, start_server, stop_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_kill_9_during_produce_loses_no_acknowledged_message():
    api = start_server()
    acknowledged: set[str] = set()
    stop = threading.Event()

    def produce(worker: int) -> None:
        with httpx.Client(base_url=api.url, headers={"X-API-Key": SECRET}, timeout=5) as client:
            i = 0
            while not stop.is_set():
                content = f"w{worker}-{i}"
                i += 1
                try:
                    response = client.post("/api/v1/queues/crash/messages", json={"content": content})
                except httpx.HTTPError:
                    time.sleep(0.01)  # the server is gone: nothing was acknowledged
                    continue
                if response.status_code == 204:
                    acknowledged.add(content)

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while len(acknowledged) < 2_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(api.proc.pid, signal.SIGKILL)  # mid-write, every process of the server at once
    api.proc.wait(10)
    stop_server(api)  # (already dead: closes its client and output pipe)
    time.sleep(0.3)
    stop.set()
    for thread in threads:
        thread.join(10)
    assert len(acknowledged) >= 2_000

    stored = list(Message.objects.filter(queue="crash").values_list("content", flat=True))
    assert len(stored) == len(set(stored))  # nothing stored twice
    assert acknowledged <= set(stored)  # every 204 is on disk
    # (a few more may be stored: their 204 was lost with the server)

    again = start_server()
    try:
        message = again.consume("crash").json()
        assert message["content"] in set(stored)
        assert again.settle("ack", "crash", message["id"], message["receipt"]).status_code == 204
    finally:
        stop_server(again)
