"""A soak: the server under a steady mixed load for a long while, watched from outside for drift.

    .venv/bin/python bench/soak_bench.py [--minutes 20] [--sample-seconds 30] [--rate 200]

Starts ``forq_serve`` as ``make run`` does (the demo project, SQLite, API + admin UI + jobs; the
same start as ``bench/memory_bench.py``), then for ``--minutes``, with stdlib ``http.client`` on
keep-alive connections: producers send ``--rate`` messages a second in all (v1 and v2, a tenth of
them in message groups, some delayed), consumers receive them with long polls (v1 and v2) and ack,
nack one in twenty (each comes back after the queue's backoff) and leave one in fifty unacked
(each comes back when its 5 s lease ends), and a staff browser loads the dashboard and a queue's
page now and then. Every ``--sample-seconds`` it prints, for the server's process tree: PSS (MB),
open file descriptors, threads, and the SQLite file and its write-ahead log's sizes.

At the end it checks that nothing was lost or doubled: every message a producer had a 2xx for was
acked exactly once (redeliveries of nacked and abandoned messages are counted apart), and the
queues are empty. The reference, in the same run, is the first sample after the warm-up: the
drift (last ÷ first) of each figure is printed, and a figure that keeps growing is a leak.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_bench import HEADERS, ROOT, Server, snapshot, tree  # noqa: E402

QUEUES = ("soak-a", "soak-b")
LEASE_S = 5


class Ledger:
    """What the producers were told was stored, and what the consumers acked."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: set[str] = set()
        self.acked: Counter[str] = Counter()
        self.nacked = self.abandoned = self.errors = 0

    def add(self, field: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, field, getattr(self, field) + n)


def producer(server: Server, stop: threading.Event, per_second: float, ledger: Ledger, seed: int) -> None:
    rng = random.Random(seed)
    c = server.conn(server.api)
    n = 0
    next_at = time.monotonic()
    while not stop.is_set():
        n += 1
        tag = f"{seed}-{n}"
        queue = QUEUES[n % 2]
        if n % 2:
            body: dict = {"content": tag}
            if n % 10 == 1:
                body["group"] = f"g{rng.randrange(50)}"
            if n % 25 == 1:
                body["delay"] = 1
            c.request("POST", f"/api/v2/queues/{queue}/messages", json.dumps(body), HEADERS)
        else:
            c.request("POST", f"/api/v1/queues/{queue}/messages", json.dumps({"content": tag}), HEADERS)
        r = c.getresponse()
        r.read()
        if 200 <= r.status < 300:
            with ledger.lock:
                ledger.sent.add(tag)
        else:
            ledger.add("errors")
        next_at += 1 / per_second
        time.sleep(max(0.0, next_at - time.monotonic()))
    c.close()


def consumer(server: Server, stop: threading.Event, ledger: Ledger, seed: int, drain_until: list[float]) -> None:
    rng = random.Random(seed)
    c = server.conn(server.api, timeout=60)
    v2 = seed % 2 == 0
    queue = QUEUES[seed % 2]
    while not stop.is_set() or time.monotonic() < drain_until[0]:
        if v2:
            c.request("POST", f"/api/v2/queues/{queue}/receive",
                      json.dumps({"max_messages": 5, "wait": 2, "visibility_timeout": LEASE_S}), HEADERS)
            r = c.getresponse()
            data = r.read()
            got = json.loads(data)["messages"] if r.status == 200 else []
            items = [(m["id"], m["receipt"], m["content"]) for m in got]
        else:
            c.request("GET", f"/api/v1/queues/{queue}/messages", headers=HEADERS)
            r = c.getresponse()
            data = r.read()
            items = [(m["id"], m["receipt"], m["content"]) for m in [json.loads(data)]] if r.status == 200 else []
        if r.status not in (200, 204):
            ledger.add("errors")
            time.sleep(0.5)
        for mid, receipt, content in items:
            roll = rng.random() if not stop.is_set() else 1.0
            if roll < 0.02:
                ledger.add("abandoned")  # its lease ends: delivered again
                continue
            action = "nack" if roll < 0.07 else "ack"
            path = f"/api/v2/queues/{queue}/messages/{mid}/{action}" if v2 else \
                f"/api/v1/queues/{queue}/messages/{mid}/{action}"
            headers = {**HEADERS, "X-Forq-Receipt": str(receipt)}
            c.request("POST", path, json.dumps({"receipt": receipt}) if v2 else "", headers)
            r = c.getresponse()
            r.read()
            if r.status // 100 != 2:
                ledger.add("errors")
            elif action == "ack":
                with ledger.lock:
                    ledger.acked[content] += 1
            else:
                ledger.add("nacked")
    c.close()


def staff(server: Server, stop: threading.Event) -> None:
    from memory_bench import staff as browse  # a logged-in browser's loop, until the deadline

    while not stop.is_set():
        browse(server, time.monotonic() + 5, [0, 0, 0])
        stop.wait(10)


def sample(server: Server, db: Path) -> dict[str, float]:
    pids = [p for p, _ in tree(server.proc.pid)]
    fds = threads = 0
    for p in pids:
        try:
            fds += len(os.listdir(f"/proc/{p}/fd"))
            threads += len(os.listdir(f"/proc/{p}/task"))
        except OSError:
            pass
    size = lambda path: path.stat().st_size / 1e6 if path.exists() else 0.0  # noqa: E731
    return {"PSS MB": sum(snapshot(server.proc.pid).values()) / 1024, "fds": fds, "threads": threads,
            "db MB": size(db), "wal MB": size(db.with_name(db.name + "-wal"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--sample-seconds", type=float, default=30)
    parser.add_argument("--rate", type=float, default=200, help="messages a second, all producers together")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="forq-soak-")
    os.environ["FORQ_LONG_POLL_SECONDS"] = "2"
    server = Server(ROOT, tmp)
    db = Path(server.env["FORQ_DB_PATH"])
    ledger = Ledger()
    stop = threading.Event()
    drain_until = [float("inf")]
    for queue in QUEUES:  # a short lease and backoff, so abandoned and nacked messages come back within the run
        c = server.conn(server.api)
        c.request("PUT", f"/api/v2/queues/{queue}", json.dumps(
            {"visibility_timeout": LEASE_S, "backoff": [1000], "max_attempts": "unlimited"}), HEADERS)
        r = c.getresponse()
        assert r.status == 200, (r.status, r.read())
        c.close()
    threads = [threading.Thread(target=producer, args=(server, stop, args.rate / 4, ledger, i)) for i in range(4)]
    threads += [threading.Thread(target=consumer, args=(server, stop, ledger, i, drain_until)) for i in range(4)]
    threads.append(threading.Thread(target=staff, args=(server, stop)))
    for t in threads:
        t.start()
    started = time.monotonic()
    first = None
    print(f"{'min':>5} {'sent':>8} {'acked':>8} {'PSS MB':>7} {'fds':>5} {'threads':>7} {'db MB':>7} {'wal MB':>7}")
    try:
        while time.monotonic() - started < args.minutes * 60:
            time.sleep(args.sample_seconds)
            now = sample(server, db)
            if first is None and time.monotonic() - started >= 60:
                first = now  # after a minute's warm-up
            print(f"{(time.monotonic() - started) / 60:5.1f} {len(ledger.sent):8d} {sum(ledger.acked.values()):8d} "
                  f"{now['PSS MB']:7.1f} {now['fds']:5.0f} {now['threads']:7.0f} {now['db MB']:7.2f} {now['wal MB']:7.2f}",
                  flush=True)
    finally:
        drain_until[0] = time.monotonic() + LEASE_S * 4  # let the last leases end and be taken again
        stop.set()
        for t in threads:
            t.join(120)
        last = sample(server, db)
        server.stop()
    lost = ledger.sent - set(ledger.acked)
    doubled = [tag for tag, n in ledger.acked.items() if n > 1]
    print(f"\nsent {len(ledger.sent)}, acked {sum(ledger.acked.values())} ({len(ledger.acked)} distinct), "
          f"nacked {ledger.nacked}, abandoned {ledger.abandoned}, errors {ledger.errors}")
    print(f"lost: {len(lost)}; acked twice: {len(doubled)}")
    if first is not None:
        print("drift, last ÷ first after the warm-up: " + ", ".join(
            f"{k} ×{last[k] / first[k]:.2f} ({first[k]:.1f} → {last[k]:.1f})" for k in first if first[k]))
    sys.exit(1 if lost or doubled else 0)


if __name__ == "__main__":
    main()
