"""PostgreSQL benchmark (issue 5): forqapp's service layer and HTTP API on PostgreSQL, ``forq_worker``
throughput from 1 to 4 processes, and pgqueuer and procrastinate draining the same no-op jobs.

    .venv/bin/pip install -r bench/requirements.txt
    .venv/bin/python bench/pg_bench.py [--admin-url postgres://postgres@127.0.0.1:5432/postgres]
                                       [--messages 20000] [--processes 1 2 3 4] [--skip-others]

Each run makes a fresh database ``forq_bench`` on the server of ``--admin-url`` (dropped first),
migrates it and then measures, with 100-byte messages:

* service layer, in this process: ``send`` one at a time, ``send_many`` in batches of 100,
  ``claim`` + ``ack`` one at a time, ``claim_many(100)`` + ``ack_many``;
* HTTP (``manage.py forq_serve --no-ui``, keep-alive HTTP/1.1 on loopback): produce with 1 and 10
  connections, consume + ack with 1 and 10 consumers;
* ``manage.py forq_worker bench-noop --burst -c 4 --prefetch 100`` in 1…4 separate processes (as on
  separate hosts) draining the same pre-sent messages: wall time including start-up, and the drain
  itself (first message gone → queue empty, polled every 20 ms);
* pgqueuer and procrastinate (from PyPI) on the same server: bulk enqueue, then one worker process
  draining the same number of no-op jobs (pgqueuer in ``drain`` mode, procrastinate with ``wait=False``).

Every figure is printed as a Markdown table row. Machines are noisy: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
SECRET = "bench-secret-0123456789abcdef-0123456789"  # noqa: S105
PAYLOAD = "x" * 100
DB_NAME = "forq_bench"


def with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def fresh_database(admin_url: str) -> str:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")
    return with_db(admin_url, DB_NAME)


def vacuum(url: str, table: str | None = "messages") -> None:
    """What autovacuum would have done by now (this bench's server may run with it off); with
    ``table=None``, the whole database (the other queues' tables too)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)" + (f" {table}" if table else ""))


def child_env(url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ, DATABASE_URL=url, FORQ_AUTH_SECRET=SECRET, DJANGO_SETTINGS_MODULE="bench.settings",
               PYTHONPATH=str(ROOT), FORQ_LOG_LEVEL="WARNING")
    env.update(extra)
    return env


def row(*cells) -> None:
    print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}"


def pending(queue: str) -> int:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM messages WHERE queue = %s", [queue])
        return cur.fetchone()[0]


# --- service layer --------------------------------------------------------------------------------


def bench_services(n: int, vacuum) -> None:
    from forqapp import services

    single = min(n, 5_000)
    started = time.perf_counter()
    for _ in range(single):
        services.send("svc", PAYLOAD)
    row("service", "`send`, one at a time", single, rate(single, time.perf_counter() - started))
    vacuum()
    started = time.perf_counter()
    for _ in range(single):
        message = services.claim("svc")
        services.ack(message)
    row("service", "`claim` + `ack`, one at a time", single, rate(single, time.perf_counter() - started))
    vacuum()
    started = time.perf_counter()
    for i in range(0, n, 100):
        services.send_many("svc", [PAYLOAD] * min(100, n - i))
    row("service", "`send_many`, 100 per call", n, rate(n, time.perf_counter() - started))
    vacuum()
    started = time.perf_counter()
    got = 0
    while batch := services.claim_many("svc", 100):
        got += services.ack_many("svc", [(m.id, m.receipt) for m in batch])
    row("service", "`claim_many(100)` + `ack_many`", got, rate(got, time.perf_counter() - started))


# --- HTTP -----------------------------------------------------------------------------------------


def start_server(url: str, port: int, workers: int) -> subprocess.Popen:
    import httpx

    env = child_env(url, FORQ_API_ADDR=f"127.0.0.1:{port}", FORQ_LONG_POLL_SECONDS="1")
    proc = subprocess.Popen([sys.executable, "manage.py", "forq_serve", "--no-ui", "--api-workers", str(workers)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthcheck", timeout=1).status_code == 204:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("forq_serve did not start")


async def http_produce(port: int, n: int, clients: int) -> float:
    from core_bench import Conn

    conns = [await Conn("127.0.0.1", port).open() for _ in range(clients)]
    body = json.dumps({"content": PAYLOAD}).encode()

    async def run(conn, count):
        for _ in range(count):
            status, _ = await conn.request("POST", "/api/v1/queues/http/messages", body)
            assert status == 204, status

    started = time.perf_counter()
    await asyncio.gather(*(run(c, n // clients) for c in conns))
    elapsed = time.perf_counter() - started
    for c in conns:
        c.close()
    return elapsed


async def http_consume(port: int, n: int, clients: int) -> float:

    from core_bench import Conn

    conns = [await Conn("127.0.0.1", port).open() for _ in range(clients)]
    done = 0

    async def run(conn):
        nonlocal done
        while done < n:
            status, payload = await conn.request("GET", "/api/v1/queues/http/messages")
            if status == 204:
                return
            message = json.loads(payload)
            done += 1
            status, _ = await conn.request("POST", f"/api/v1/queues/http/messages/{message['id']}/ack",
                                           headers={"X-Forq-Receipt": message["receipt"]})
            assert status == 204, status

    started = time.perf_counter()
    await asyncio.gather(*(run(c) for c in conns))
    elapsed = time.perf_counter() - started
    for c in conns:
        c.close()
    return elapsed


def bench_http(url: str, n: int, workers: int, vacuum) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = start_server(url, port, workers)
    try:
        for clients in (1, 10):
            count = min(n, 5_000) if clients == 1 else n
            elapsed = asyncio.run(http_produce(port, count, clients))
            row("HTTP", f"produce, {clients} connection{'s' if clients > 1 else ''}", count, rate(count, elapsed))
            vacuum()
            elapsed = asyncio.run(http_consume(port, count, clients))
            row("HTTP", f"consume + ack, {clients} consumer{'s' if clients > 1 else ''}", count,
                rate(count, elapsed))
            vacuum()
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(20)


# --- forq_worker processes ------------------------------------------------------------------------


def bench_workers(url: str, n: int, processes: int) -> tuple[float, float, float]:
    from forqapp import services

    started = time.perf_counter()
    for i in range(0, n, 1000):
        services.send_many("bench-noop", [PAYLOAD] * min(1000, n - i))
    enqueue = n / (time.perf_counter() - started)
    started = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, "manage.py", "forq_worker", "bench-noop", "--burst", "-c", "4",
                          "--prefetch", "100", "-v0"], cwd=ROOT, env=child_env(url))
        for _ in range(processes)
    ]
    first = None
    while True:
        left = pending("bench-noop")
        now = time.perf_counter()
        if first is None and left < n:
            first = now
        if left == 0:
            break
        if all(p.poll() is not None for p in procs):
            raise RuntimeError(f"workers exited with {left} messages left")
        time.sleep(0.02)
    drained = time.perf_counter()
    for p in procs:
        p.wait(60)
    return n / (time.perf_counter() - started), n / (drained - (first or started)), enqueue


# --- pgqueuer and procrastinate -------------------------------------------------------------------


async def pgqueuer_drain(url: str, n: int) -> tuple[float, float]:
    import psycopg
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.queries import Queries

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    queries = Queries(PsycopgDriver(conn))
    await queries.install()
    payload = PAYLOAD.encode()
    started = time.perf_counter()
    for i in range(0, n, 1000):
        k = min(1000, n - i)
        await queries.enqueue(["noop"] * k, [payload] * k, [0] * k)
    enqueue = n / (time.perf_counter() - started)
    await conn.close()
    vacuum(url, None)

    code = f"""
import asyncio, time, psycopg
from pgqueuer import PgQueuer
from pgqueuer.types import QueueExecutionMode
async def main():
    conn = await psycopg.AsyncConnection.connect({url!r}, autocommit=True)
    pgq = PgQueuer.from_psycopg_connection(conn)
    @pgq.entrypoint("noop")
    async def noop(job):
        pass
    await pgq.run(mode=QueueExecutionMode.drain, batch_size=10)
asyncio.run(main())
"""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return enqueue, n / (time.perf_counter() - started)


def procrastinate_drain(url: str, n: int) -> tuple[float, float]:
    code = f"""
import asyncio, sys, time
from procrastinate import App, PsycopgConnector
app = App(connector=PsycopgConnector(conninfo={url!r}))

@app.task(queue="bench", name="noop")
def noop(p):
    pass

async def main(mode):
    async with app.open_async():
        if mode == "enqueue":
            await app.schema_manager.apply_schema_async()
            started = time.perf_counter()
            for i in range(0, {n}, 1000):
                await noop.batch_defer_async(*[{{"p": {PAYLOAD!r}}}] * min(1000, {n} - i))
            print({n} / (time.perf_counter() - started))
        else:
            await app.run_worker_async(queues=["bench"], wait=False, concurrency=1,
                                       install_signal_handlers=False)
asyncio.run(main(sys.argv[1]))
"""
    out = subprocess.run([sys.executable, "-c", code, "enqueue"], check=True, capture_output=True, text=True)
    enqueue = float(out.stdout.strip().splitlines()[-1])
    vacuum(url, None)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, "drain"], check=True, capture_output=True, text=True)
    return enqueue, n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", default=os.environ.get("FORQ_BENCH_PG_URL",
                                                              "postgres://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--api-workers", type=int, default=1)
    parser.add_argument("--skip-others", action="store_true", help="skip pgqueuer and procrastinate")
    parser.add_argument("--only-others", action="store_true", help="only the comparison table")
    args = parser.parse_args()
    n = args.messages

    url = fresh_database(args.admin_url)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=child_env(url), check=True)
    os.environ.update(child_env(url))
    import django

    django.setup()
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT version()")
        version = cur.fetchone()[0].split(" on ")[0]
        cur.execute("SHOW synchronous_commit")
        sync = cur.fetchone()[0]
        cur.execute("SHOW autovacuum")
        autovacuum = cur.fetchone()[0]
    print(f"\n{version}, synchronous_commit={sync}, autovacuum={autovacuum} (the bench runs VACUUM ANALYZE "
          f"between phases), {os.cpu_count()} CPUs, {n:,} messages of 100 bytes\n")
    if not args.only_others:
        bench_forq(url, n, args)
    if not args.skip_others:
        bench_others(url, n)
    print(f"\ncommand: .venv/bin/python bench/pg_bench.py --messages {n}")


def bench_forq(url: str, n: int, args) -> None:
    row("layer", "operation", "messages", "per second")
    row("---", "---", "---:", "---:")
    bench_services(n, lambda: vacuum(url))
    vacuum(url)
    bench_http(url, n, args.api_workers, lambda: vacuum(url))

    print("\nforq_worker bench-noop --burst -c 4 --prefetch 100, in N processes:\n")
    row("processes", "messages", "drain /s (wall, incl. start-up)", "drain /s (first claim → empty)")
    row("---:", "---:", "---:", "---:")
    for p in args.processes:
        vacuum(url)
        wall, drain, _ = bench_workers(url, n, p)
        row(p, n, f"{wall:,.0f}", f"{drain:,.0f}")


def bench_others(url: str, n: int) -> None:
    print("\nThe same no-op jobs with other PostgreSQL queues (1 worker process each):\n")
    row("system", "jobs", "enqueue /s (bulk)", "drain /s (wall, incl. start-up)")
    row("---", "---:", "---:", "---:")
    vacuum(url)
    wall, _, enqueue = bench_workers(url, n, 1)
    row("forqapp `forq_worker -c 4 --prefetch 100` (`send_many`, 1,000 per call)", n, f"{enqueue:,.0f}",
        f"{wall:,.0f}")
    enqueue, drain = asyncio.run(pgqueuer_drain(url, n))
    row("pgqueuer (drain mode, batch 10)", n, f"{enqueue:,.0f}", f"{drain:,.0f}")
    enqueue, drain = procrastinate_drain(url, n)
    row("procrastinate (`wait=False`, concurrency 1)", n, f"{enqueue:,.0f}", f"{drain:,.0f}")


if __name__ == "__main__":
    main()
