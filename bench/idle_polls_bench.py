"""What idle long polls cost the producers, measured as an outside client does (issue 38, target 1).

    .venv/bin/python bench/idle_polls_bench.py [--base-ref REF] [--rounds N] [--polls 200,2000]
        [--seconds 5] [--idle-cpu-seconds 30] [--database-url postgres://postgres@127.0.0.1:5432/postgres]

One client process, stdlib ``http.client`` and threads, one HTTP/1.1 connection per thread, against a
``forq_serve`` started on a fresh SQLite file (migrated first) with the Forq v1 API:

* 4 producer threads ``POST /api/v1/queues/produce/messages`` (100 B) for ``--seconds``: the rate
  before any poll is open (the same-run reference);
* then N long polls ``GET /api/v1/queues/idle-{i}/messages`` (one empty queue each, as the outside
  client does; each poll asks again when its wait ends), and the producers' rate again, for each N of
  ``--polls`` (cumulative: 200, then 2,000);
* with the polls open: the wake-up of a poll waiting on an empty queue by a produce to that queue
  (produce sent → message received; p50/p99 of 30);
* the server's CPU seconds (utime + stime of its whole process tree, from /proc) over
  ``--idle-cpu-seconds`` with the polls open and nothing produced; and, before any poll is open,
  its floor: the same over ``--floor-seconds`` with nothing open (scaled to ``--idle-cpu-seconds``);
* the polls closed, the producers' rate once more: the reference again, on a database that has
  grown meanwhile (PostgreSQL's rate falls as it grows); the rates with polls open are given as a
  share of the two references' mean;
* granian's own floor, each round (``--granian-floor``, on by default): the same polls and CPU
  window against ``bench/idle_floor_app.py``, a bare RSGI application under the same granian
  (one worker, uvloop) that holds each request until its client leaves or the wait ends, then
  answers 204: what the same polls cost with no queue behind them.

``--database-url URL`` serves on PostgreSQL instead: each server gets a fresh database
``forq_idle_bench`` on the server of URL (dropped first, then migrated); granian's floor is the same.

``--base-ref REF`` also serves git revision REF (a temporary ``git worktree`` sharing this checkout's
``.venv``), first, then this checkout: the previous design in the same run; ``--rounds N``
alternates the two N times (the machine's drift falls on both).

Why forqload's figure (``bench/forqload/run.sh --idle 200``) was kinder: its 200 idle polls all wait
on ONE queue, so a produce's wake-up check looked at one queue; the outside client's polls wait on
200 queues, and the check looked at each of them, after every produce.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
SECRET = "forq-idle-bench-secret-at-least-32-characters"
BODY = json.dumps({"content": "x" * 100})
HEADERS = {"X-API-Key": SECRET, "Content-Type": "application/json"}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_database(admin_url: str, name: str = "forq_idle_bench") -> str:
    """An empty PostgreSQL database ``name`` on the server of ``admin_url`` (dropped first): its URL."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    parts = urlsplit(admin_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


class Server:
    def __init__(self, checkout: Path, tmp: str, floor: bool = False, database_url: str | None = None):
        self.port = free_port()
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", "FORQ_UI_ENABLED": "false",
               "FORQ_AUTH_SECRET": SECRET, "FORQ_DB_PATH": str(Path(tmp) / "idle.sqlite3"),
               "FORQ_API_ADDR": f"127.0.0.1:{self.port}", "FORQ_UI_ADDR": f"127.0.0.1:{free_port()}",
               "PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(dir=tmp)}
        env.pop("DATABASE_URL", None)
        if database_url and not floor:
            env["DATABASE_URL"] = fresh_database(database_url)
        py = str(ROOT / ".venv" / "bin" / "python")
        self.log = open(Path(tmp) / "serve.log", "w")
        if floor:  # granian alone, as forq_serve runs it for the API, with bench/idle_floor_app.py
            command = [py, "-m", "granian", "--interface", "rsgi", "--no-ws", "--loop", "uvloop",
                       "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning",
                       # as forq_serve's (granian's default, 1,024, would hold half of 2,000 polls)
                       "--backlog", "4096",
                       "bench.idle_floor_app:app"]
        else:
            subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=checkout, env=env, check=True)
            command = [py, "manage.py", "forq_serve"]
        self.proc = subprocess.Popen(command, cwd=checkout, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/healthcheck")
                if c.getresponse().status == 204:
                    c.close()
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the server did not start")

    def conn(self, timeout: float = 60) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def cpu_seconds(self) -> float:
        """utime + stime of the server's whole process tree."""
        children: dict[int, list[int]] = {}
        ticks: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
            ticks[int(entry)] = int(fields[11]) + int(fields[12])
        total, todo = 0, [self.proc.pid]
        while todo:
            pid = todo.pop()
            total += ticks.get(pid, 0)
            todo.extend(children.get(pid, []))
        return total / CLK_TCK

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def produce_rate(server: Server, seconds: float, threads: int = 4) -> float:
    counts = [0] * threads
    start = threading.Barrier(threads + 1)
    stop_at = [0.0]

    def run(i: int) -> None:
        c = server.conn()
        start.wait()
        while time.monotonic() < stop_at[0]:
            c.request("POST", "/api/v1/queues/produce/messages", BODY, HEADERS)
            r = c.getresponse()
            r.read()
            assert r.status == 204, r.status
            counts[i] += 1
        c.close()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    stop_at[0] = time.monotonic() + seconds
    t0 = time.monotonic()
    start.wait()
    for t in ts:
        t.join()
    return sum(counts) / (time.monotonic() - t0)


class Polls:
    """Idle long polls, one thread and one connection each, each on its own empty queue."""

    def __init__(self, server: Server):
        self.server = server
        self.stopping = False
        self.threads: list[threading.Thread] = []
        self.sent = 0
        self.lock = threading.Lock()
        self.got = 0
        self.conns: dict[str, http.client.HTTPConnection] = {}

    def close(self) -> None:
        """End every poll: each connection shut, each thread gone."""
        self.stopping = True
        for c in list(self.conns.values()):
            with contextlib.suppress(OSError):
                if c.sock is not None:
                    c.sock.shutdown(socket.SHUT_RDWR)
        for t in self.threads:
            t.join(10)

    def open(self, n: int) -> None:
        first = len(self.threads)
        for i in range(first, first + n):
            t = threading.Thread(target=self._poll, args=(f"idle-{i}",), daemon=True)
            t.start()
            self.threads.append(t)
        while self.sent < len(self.threads):  # every poll has sent its request
            time.sleep(0.05)
        time.sleep(1.0)  # and the server has read them

    def _poll(self, queue: str) -> None:
        c = self.conns[queue] = self.server.conn(timeout=120)
        while not self.stopping:
            try:
                c.request("GET", f"/api/v1/queues/{queue}/messages", headers=HEADERS)
                with self.lock:
                    self.sent += 1
                r = c.getresponse()
                r.read()
                if r.status == 200:
                    self.got += 1
            except OSError:
                if self.stopping:
                    return
                c.close()
                c = self.conns[queue] = self.server.conn(timeout=120)


def wake_latency(server: Server, rounds: int = 30) -> list[float]:
    """Produce → receipt by a poll already waiting on that queue (ms)."""
    out = []
    producer = server.conn()
    for k in range(rounds):
        got = threading.Event()
        started = threading.Event()
        arrived = [0.0]

        def poll(k: int = k, started: threading.Event = started, arrived: list = arrived,
                 got: threading.Event = got) -> None:
            c = server.conn()
            c.request("GET", f"/api/v1/queues/wake-{k}/messages", headers=HEADERS)
            started.set()
            r = c.getresponse()
            r.read()
            arrived[0] = time.perf_counter()
            assert r.status == 200, r.status
            c.close()
            got.set()

        t = threading.Thread(target=poll)
        t.start()
        started.wait()
        time.sleep(0.1)  # the poll is in the server and waiting (the bench's only sleep as a guess)
        t0 = time.perf_counter()
        producer.request("POST", f"/api/v1/queues/wake-{k}/messages", BODY, HEADERS)
        r = producer.getresponse()
        r.read()
        got.wait(35)
        t.join()
        out.append((arrived[0] - t0) * 1000)
    producer.close()
    return out


def measure(checkout: Path, label: str, args: argparse.Namespace) -> dict:
    threading.stack_size(256 * 1024)
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(checkout, tmp, database_url=args.database_url)
        polls = Polls(server)
        try:
            produce_rate(server, 1.0)  # warm up
            row: dict = {"label": label, "before": produce_rate(server, args.seconds)}
            if args.floor_seconds:  # the server alone: nothing open, nothing produced
                time.sleep(1)
                cpu0 = server.cpu_seconds()
                time.sleep(args.floor_seconds)
                row["floor_cpu"] = (server.cpu_seconds() - cpu0) * args.idle_cpu_seconds / args.floor_seconds
            for n in args.polls:
                polls.open(n - len(polls.threads))
                row[n] = produce_rate(server, args.seconds)
            waits = wake_latency(server)
            row["wake_p50"] = statistics.median(waits)
            row["wake_p99"] = sorted(waits)[int(len(waits) * 0.99) - 1 if len(waits) >= 100 else -1]
            time.sleep(1)
            cpu0, asked0 = server.cpu_seconds(), polls.sent
            time.sleep(args.idle_cpu_seconds)
            row["idle_cpu"] = server.cpu_seconds() - cpu0
            row["asked"] = polls.sent - asked0
            row["polls_open"] = len(polls.threads)
            polls.close()
            time.sleep(1)
            row["after"] = produce_rate(server, args.seconds)  # (the reference again: the database grew)
        finally:
            polls.stopping = True
            server.stop()
    return row


def measure_floor(args: argparse.Namespace) -> tuple[float, int]:
    """granian's own floor: the CPU of the same idle polls against bench/idle_floor_app.py, and how
    many of them asked again meanwhile."""
    threading.stack_size(256 * 1024)
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(ROOT, tmp, floor=True)
        polls = Polls(server)
        try:
            polls.open(max(args.polls))
            time.sleep(1)
            cpu0, asked0 = server.cpu_seconds(), polls.sent
            time.sleep(args.idle_cpu_seconds)
            return server.cpu_seconds() - cpu0, polls.sent - asked0
        finally:
            polls.stopping = True
            server.stop()


def per_ask(cpu: float, asked: int) -> str:
    """How many polls asked again in a CPU window, and its CPU per poll asking again: a window's CPU
    depends on how many of the polls' waits ended in it, which the moment it starts decides."""
    return f"{asked:,} polls asked again in it: {1e6 * cpu / asked:.0f} µs each" if asked else "no poll asked again"


def report(row: dict, polls: list[int], idle_s: float) -> None:
    print(f"== {row['label']}")
    reference = (row["before"] + row["after"]) / 2
    print(f"  producers alone (same-run reference): {row['before']:,.0f} produced/s before the polls, "
          f"{row['after']:,.0f} after them")
    for n in polls:
        print(f"  with {n:,} idle long polls open: {row[n]:,.0f} produced/s = {100 * row[n] / reference:.0f} % "
              f"(of the two references' mean)")
    print(f"  produce -> waiting poll wake-up: p50 {row['wake_p50']:.1f} ms, max {row['wake_p99']:.1f} ms")
    print(f"  server CPU over {idle_s:.0f} s with {row['polls_open']:,} idle polls, no produces: "
          f"{row['idle_cpu']:.2f} s ({per_ask(row['idle_cpu'], row['asked'])})")
    if "floor_cpu" in row:
        print(f"  server CPU over {idle_s:.0f} s with nothing open (its floor, measured before the polls): "
              f"{row['floor_cpu']:.2f} s")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-ref", default=None, help="also serve this git revision first (same run)")
    parser.add_argument("--polls", default="200,2000")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--idle-cpu-seconds", type=float, default=30.0)
    parser.add_argument("--floor-seconds", type=float, default=15.0,
                        help="also the server's CPU with nothing open, over this long (scaled to the idle window); 0: not")
    parser.add_argument("--database-url", default=None,
                        help="serve on PostgreSQL: a fresh database forq_idle_bench on this server (an admin URL)")
    parser.add_argument("--rounds", type=int, default=1, help="alternate the checkouts this many times")
    parser.add_argument("--granian-floor", action=argparse.BooleanOptionalAction, default=True,
                        help="each round, the same polls' CPU against a bare RSGI application (bench/idle_floor_app.py)")
    args = parser.parse_args()
    args.polls = [int(n) for n in args.polls.split(",")]
    if args.database_url:
        print(f"== on PostgreSQL ({urlsplit(args.database_url).netloc})")
    runs = [("this checkout", ROOT)]
    base = None
    if args.base_ref:
        base = Path(tempfile.mkdtemp(prefix="forq-idle-base-")) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base_ref], cwd=ROOT, check=True,
                       capture_output=True)
        (base / ".venv").symlink_to(ROOT / ".venv")
        runs.insert(0, (f"reference {args.base_ref}", base))
    try:
        for _ in range(args.rounds):
            for label, checkout in runs:
                report(measure(checkout, label, args), args.polls, args.idle_cpu_seconds)
            if args.granian_floor:
                cpu, asked = measure_floor(args)
                print(f"== granian's own floor (bench/idle_floor_app.py: holds each poll, answers 204)\n"
                      f"  its CPU over {args.idle_cpu_seconds:.0f} s with {max(args.polls):,} idle polls: "
                      f"{cpu:.2f} s ({per_ask(cpu, asked)})")
                sys.stdout.flush()
    finally:
        if base is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False,
                           capture_output=True)


if __name__ == "__main__":
    main()
