"""What a scoped API key costs the hot path (issue 16), against the root key (FORQ_AUTH_SECRET), in
alternating rounds of one run, in one process on a fresh SQLite file:

* the auth gate alone (authenticate the X-API-Key, then check the endpoint's grant), per request;
* a whole produce (POST /api/v1/queues/orders/messages) through forq_serve's ASGI app, per second;
* a whole long-poll-free consume+ack pair, per second.

    .venv/bin/python bench/keys_bench.py [--rounds 5] [--requests 2000]

Prints each round, the medians and the ratios scoped / root (1.00: no cost). The machine is shared
and noisy: compare the ratio, not the absolute figures, with another run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup(tmp: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["FORQ_DB_PATH"] = str(Path(tmp) / "keys.sqlite3")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def scope(method: str, path: str, key: str, extra: dict[str, str] | None = None) -> dict:
    headers = [(b"x-api-key", key.encode()), (b"content-type", b"application/json")]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    return {"type": "http", "http_version": "1.1", "method": method, "scheme": "http", "path": path,
            "raw_path": path.encode(), "query_string": b"", "root_path": "", "client": ("127.0.0.1", 40000),
            "server": ("testserver", 80), "headers": headers}


async def call(app, sc: dict, body: bytes = b"") -> tuple[int, bytes]:
    sent: list[dict] = []
    given = False

    async def receive():
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    await app(sc, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def gate(n: int, key: str) -> float:
    """µs per request of the auth gate: authenticate (cache) + the endpoint's grant."""
    from django.core.handlers.asgi import ASGIRequest
    from django.urls import resolve

    from forqapp.api import plumbing

    view = resolve("/api/v1/queues/orders/messages", urlconf="forqapp.api.urls").func
    spec = plumbing.spec(view)
    import io

    request = ASGIRequest(scope("POST", "/api/v1/queues/orders/messages", key), io.BytesIO())
    start = time.perf_counter()
    for _ in range(n):
        await plumbing._check_headers(request, spec)
        plumbing._check_scope(request, spec, {"queue": "orders"})
    return (time.perf_counter() - start) / n * 1e6


async def produce(app, n: int, key: str) -> float:
    sc = scope("POST", "/api/v1/queues/orders/messages", key)
    start = time.perf_counter()
    for _ in range(n):
        status, _ = await call(app, sc, b'{"content": "x"}')
        assert status == 204, status
    return n / (time.perf_counter() - start)


async def consume_ack(app, n: int, key: str) -> float:
    get = scope("GET", "/api/v1/queues/orders/messages", key)
    start = time.perf_counter()
    for _ in range(n):
        status, body = await call(app, get)
        assert status == 200, status
        m = json.loads(body)
        ack = scope("POST", f"/api/v1/queues/orders/messages/{m['id']}/ack", key, {"x-forq-receipt": m["receipt"]})
        status, _ = await call(app, ack)
        assert status == 204, status
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        setup(tmp)
        from forqapp.api.asgi import APIApplication
        from forqapp.conf import forq_settings
        from forqapp.keys import service

        root = forq_settings.FORQ_AUTH_SECRET
        scoped = service.create("bench", ["orders:produce,consume", "audit.*:read"], actor="bench", via="cli").token
        app = APIApplication()
        keys = {"root": root, "scoped": scoped}
        results: dict[tuple[str, str], list[float]] = {}
        loop = asyncio.new_event_loop()
        for r in range(args.rounds):
            order = list(keys.items()) if r % 2 == 0 else list(reversed(keys.items()))
            for name, key in order:
                g = loop.run_until_complete(gate(args.requests * 10, key))
                p = loop.run_until_complete(produce(app, args.requests, key))
                c = loop.run_until_complete(consume_ack(app, args.requests, key))
                for what, value in (("gate µs", g), ("produce/s", p), ("consume+ack/s", c)):
                    results.setdefault((what, name), []).append(value)
                print(f"round {r + 1} {name:6}: gate {g:6.2f} µs/request, produce {p:7.0f}/s, consume+ack {c:6.0f}/s")
        loop.close()
        print("\nmedians (same run)      root     scoped   scoped/root")
        for what in ("gate µs", "produce/s", "consume+ack/s"):
            a, b = statistics.median(results[(what, "root")]), statistics.median(results[(what, "scoped")])
            print(f"{what:18} {a:9.2f} {b:9.2f}   {b / a:6.3f}")


if __name__ == "__main__":
    main()
