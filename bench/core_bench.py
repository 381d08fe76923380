"""Core benchmark (issue 2): HTTP on loopback against ``forq_serve``, and the in-process Python API.

    .venv/bin/python bench/core_bench.py [--messages 20000] [--preload 0] [--workers 1]

Starts ``manage.py forq_serve`` on a fresh SQLite file, then prints, with 100-byte messages:
produce/s with 1 and 10 concurrent producers, consume+ack/s with 1 and 10 consumers draining the
queue, p50/p99 latencies, and in-process ``send`` / ``send_many`` / ``receive``+``ack`` rates.
``--preload N`` first puts N messages in 20 other queues (the figures should hold at 1,000,000).

The HTTP client is a minimal keep-alive HTTP/1.1 client on asyncio, so that the client, which
shares the 2 cores with the server, costs as little CPU as possible.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SECRET = "bench-secret-0123456789abcdef-0123456789"
CONTENT = "x" * 100


class Conn:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port

    async def open(self):
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def request(self, method: str, path: str, body: bytes = b"", headers: dict | None = None):
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}", f"X-API-Key: {SECRET}",
                 f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        payload = await self.reader.readexactly(length) if length else b""
        return status, payload

    def close(self):
        self.writer.close()


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] * 1000


async def produce(host, port, queue, total, concurrency):
    body = json.dumps({"content": CONTENT}).encode()
    latencies: list[float] = []
    per = total // concurrency

    async def one():
        conn = await Conn(host, port).open()
        for _ in range(per):
            t = time.perf_counter()
            status, _ = await conn.request("POST", f"/api/v1/queues/{queue}/messages", body)
            latencies.append(time.perf_counter() - t)
            assert status == 204, status
        conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    return per * concurrency / elapsed, latencies


async def drain(host, port, queue, total, concurrency):
    latencies: list[float] = []
    done = 0

    async def one():
        nonlocal done
        conn = await Conn(host, port).open()
        while done < total:
            t = time.perf_counter()
            status, payload = await conn.request("GET", f"/api/v1/queues/{queue}/messages")
            if status == 204:
                break
            message = json.loads(payload)
            status, _ = await conn.request(
                "POST", f"/api/v1/queues/{queue}/messages/{message['id']}/ack",
                headers={"X-Forq-Receipt": message["receipt"]})
            assert status == 204, status
            latencies.append(time.perf_counter() - t)
            done += 1
        conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(concurrency)))
    return done / (time.perf_counter() - start), latencies


async def wake_latency(host, port, samples=50):
    """A consumer long-polls an empty queue; a message arrives. Time from the produce to the
    consumer holding it: produced over HTTP (same server process) and with the Python API from
    this process (another process: the server notices through the database alone)."""
    import forqapp  # Django is set up by main()

    out = {}
    for how in ("HTTP produce", "send() in another process"):
        waits = []
        for _ in range(samples):
            consumer = await Conn(host, port).open()
            producer = await Conn(host, port).open()
            poll = asyncio.ensure_future(consumer.request("GET", "/api/v1/queues/wake/messages"))
            await asyncio.sleep(0.02)
            t = time.perf_counter()
            if how == "HTTP produce":
                await producer.request("POST", "/api/v1/queues/wake/messages",
                                       json.dumps({"content": CONTENT}).encode())
            else:
                await asyncio.to_thread(forqapp.send, "wake", CONTENT)
            status, payload = await poll
            waits.append(time.perf_counter() - t)
            assert status == 200, status
            message = json.loads(payload)
            await consumer.request("POST", f"/api/v1/queues/wake/messages/{message['id']}/ack",
                                   headers={"X-Forq-Receipt": message["receipt"]})
            consumer.close()
            producer.close()
        out[how] = waits
    return out


WRK_SCRIPT = f"""
wrk.method = "POST"
wrk.body = '{json.dumps({"content": CONTENT})}'
wrk.headers["X-API-Key"] = "{SECRET}"
wrk.headers["Content-Type"] = "application/json"
"""


def run_wrk(port, connections=10, seconds=10):
    """HTTP produce measured by wrk (C, light on the shared CPU), when it is installed."""
    import re
    import shutil

    if not shutil.which("wrk"):
        return None
    script = Path(tempfile.mkdtemp()) / "produce.lua"
    script.write_text(WRK_SCRIPT)
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}", "--latency", "-s", str(script),
                          f"http://127.0.0.1:{port}/api/v1/queues/bench-wrk/messages"],
                         capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out:
        raise RuntimeError(out)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))

    def ms(label):
        value, unit = re.search(rf"{label}%\s+([\d.]+)(us|ms|s)", out).groups()
        return float(value) * {"us": 0.001, "ms": 1, "s": 1000}[unit]

    return (f"HTTP produce, {connections} connections (wrk)", rate, ms("50"), ms("99"))


def run_http(args, env, port):
    results = []

    async def main():
        for how, waits in (await wake_latency("127.0.0.1", port)).items():
            results.append((f"long-poll wake-up after {how}", len(waits) / sum(waits), pct(waits, 0.5),
                            pct(waits, 0.99)))
        for c in (1, 10):
            rate, lat = await produce("127.0.0.1", port, f"bench-{c}", args.messages, c)
            results.append((f"HTTP produce, {c} producer(s)", rate, pct(lat, 0.5), pct(lat, 0.99)))
            rate, lat = await drain("127.0.0.1", port, f"bench-{c}", args.messages, c)
            results.append((f"HTTP consume+ack, {c} consumer(s)", rate, pct(lat, 0.5), pct(lat, 0.99)))

    asyncio.run(main())
    return results


IN_PROCESS = r"""
import django, json, sys, time
django.setup()
import forqapp
from forqapp import services
n = int(sys.argv[1])
out = {}
t = time.perf_counter()
for _ in range(n // 4):
    forqapp.send("inproc-single", "x" * 100)
out["send"] = (n // 4) / (time.perf_counter() - t)
t = time.perf_counter()
for _ in range(10):
    forqapp.send_many("inproc-bulk", ["x" * 100] * (n // 2))
out["send_many"] = 10 * (n // 2) / (time.perf_counter() - t)
t = time.perf_counter(); k = 0
while (m := services.claim("inproc-bulk")) is not None and k < n:
    forqapp.ack(m); k += 1
out["receive+ack"] = k / (time.perf_counter() - t)
print(json.dumps(out))
"""

PRELOAD = r"""
import django, sys
django.setup()
import forqapp
total = int(sys.argv[1])
for q in range(20):
    left = total // 20
    while left:
        k = min(left, 50000)
        forqapp.send_many(f"other-{q}", ["y" * 100] * k)
        left -= k
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--preload", type=int, default=0, help="messages to put in 20 other queues first")
    parser.add_argument("--workers", type=int, default=1, help="API worker processes (forq_serve on SQLite: 1)")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="forq-bench-"))
    port = 18080
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", "FORQ_AUTH_SECRET": SECRET,
           "FORQ_DB_PATH": str(tmp / "bench.sqlite3"), "FORQ_API_ADDR": f"127.0.0.1:{port}",
           "FORQ_API_WORKERS": str(args.workers), "FORQ_LONG_POLL_SECONDS": "1", "PYTHONPATH": str(ROOT)}
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    if args.preload:
        t = time.perf_counter()
        subprocess.run([py, "-c", PRELOAD, str(args.preload)], cwd=ROOT, env=env, check=True)
        print(f"preloaded {args.preload:,} messages in 20 other queues in {time.perf_counter() - t:.0f} s")
    os.environ.update(env)
    import django

    django.setup()
    server = subprocess.Popen([py, "manage.py", "forq_serve", "--no-ui"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL)
    try:
        time.sleep(3)
        rows = run_http(args, env, port)
        wrk_row = run_wrk(port)
        if wrk_row:
            rows.append(wrk_row)
    finally:
        server.terminate()
        server.wait()
    inproc = json.loads(subprocess.run([py, "-c", IN_PROCESS, str(args.messages)], cwd=ROOT, env=env,
                                       check=True, capture_output=True, text=True).stdout)
    print(f"\nforqapp core benchmark — SQLite, 100-byte messages, {args.messages:,} per run, "
          f"{args.workers} API worker(s), preload {args.preload:,}")
    print(f"{'what':40} {'msg/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for name, rate, p50, p99 in rows:
        print(f"{name:40} {rate:10,.0f} {p50:8.2f} {p99:8.2f}")
    for name, rate in inproc.items():
        print(f"{'in-process ' + name:40} {rate:10,.0f}")
    print(f"{'(median of HTTP produce latencies)':40} {statistics.median([r[2] for r in rows]):>19.2f}")


if __name__ == "__main__":
    main()
