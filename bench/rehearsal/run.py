"""A network rehearsal of forqapp on PostgreSQL: several hosts on one Linux machine (network
namespaces joined by veth links), faults while load runs, and how throughput scales with hosts.

    sudo .venv/bin/python -m bench.rehearsal.run [--faults 1,2,3,4,5,6] [--seconds 30] [--scaling]
    scripts/rehearsal.sh …                                 # the same

Hosts (each a network namespace ``fqr-…``, nothing in the machine's own namespace):

* ``fqr-db``: a PostgreSQL cluster of its own (``initdb`` into a temporary folder), listening on the
  namespace's addresses, one point-to-point link to each API and worker host (10.88.K.0/24);
* ``fqr-api1``…: ``manage.py forq_serve --no-ui`` (API on :8080, SQS on :9324), one link to the
  database and one to the client (10.89.K.0/24);
* ``fqr-wrk1``…: ``manage.py forq_worker`` running the ``rh-work`` consumer and the Django task it
  enqueues (:mod:`bench.rehearsal.app`);
* ``fqr-cli``: producers and consumers over HTTP v1, v2 and SQS (:mod:`bench.rehearsal.client`).

Every fault row says: acknowledged produces, delivered (distinct), lost (acknowledged, never
delivered), duplicated deliveries, deliveries after a successful ack, client errors, the longest
time without an acknowledged produce, and the health checks' answers during the fault. Everything
is torn down at the end, on failure and on Ctrl-C: processes, namespaces (and their links), the
temporary cluster. Needs root and ``ip netns``; PostgreSQL's binaries (``--pg-bin``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "fqr-"
SECRET = "rehearsal-secret-0123456789abcdef-0123"  # noqa: S105 - a throwaway cluster's key
PG_BIN = "/usr/lib/postgresql/15/bin"
DB_NAME = "forq"
FAULTS = {
    0: "none (the load alone)",
    1: "API host 1 ↔ database link cut for 10 s",
    2: "PostgreSQL restarted (fast, then immediate shutdown)",
    3: "worker host 1 killed (kill -9) and started again",
    4: "API host 2 killed mid-request, started again 5 s later",
    5: "200 ms latency + 1% loss on API host 1's database link (tc netem, or a delay proxy and nftables)",
    6: "API host 2 and worker host 2 with clocks 2 s ahead (FORQ_CLOCK_OFFSET_MS)",
}


def sh(*args: str, check: bool = True, ns: str | None = None, **kw: Any) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, **kw)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stdout[-1000:]}{done.stderr[-1000:]}")
    return done


def can_run() -> str | None:
    """None when this machine can run the rehearsal, else why not (for a skip)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip`"
    if not Path(PG_BIN, "initdb").exists():
        return f"needs PostgreSQL's binaries in {PG_BIN}"
    probe = PREFIX + "probe"
    made = sh("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    sh("ip", "netns", "del", probe, check=False)
    return None


def netem_missing() -> str | None:
    """None when ``tc … netem`` works in a namespace, else the reason (the kernel's sch_netem)."""
    probe = PREFIX + "netem"
    sh("ip", "netns", "add", probe, check=False)
    try:
        sh("ip", "link", "set", "lo", "up", ns=probe, check=False)
        done = sh("tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms", ns=probe, check=False)
        return None if done.returncode == 0 else f"tc netem unavailable here: {done.stderr.strip()}"
    finally:
        sh("ip", "netns", "del", probe, check=False)


def nft_missing() -> str | None:
    """None when nftables can drop packets in a namespace (its ``numgen``), else why not."""
    if shutil.which("nft") is None:
        return "needs nftables' `nft` (apt-get install nftables)"
    probe = PREFIX + "nft"
    sh("ip", "netns", "add", probe, check=False)
    try:
        done = sh("nft", "add", "table", "inet", "probe", ns=probe, check=False)
        return None if done.returncode == 0 else f"nft unavailable here: {done.stderr.strip()}"
    finally:
        sh("ip", "netns", "del", probe, check=False)


class Rehearsal:
    def __init__(self, apis: int, workers: int, api_workers: int = 1, log=print, pgbouncer: bool = False):
        self.n_apis, self.n_workers, self.api_workers, self.log = apis, workers, api_workers, log
        self.pgbouncer = pgbouncer  # the hosts connect through PgBouncer (transaction mode) on the DB host
        self.tmp = Path(tempfile.mkdtemp(prefix="forq-rehearsal-"))
        self.tmp.chmod(0o755)
        self.pgdata = self.tmp / "pgdata"
        self.runs = self.tmp / "runs"
        self.runs.mkdir()
        self.procs: dict[str, list[subprocess.Popen]] = {}
        self.namespaces: list[str] = []
        self.delay_proxy: subprocess.Popen | None = None  # fault 5 without sch_netem (see start_delay_proxy)

    # -- the network --------------------------------------------------------------------------

    def api_addr(self, k: int) -> str:  # as the client reaches it
        return f"10.89.{k}.1"

    def db_addr(self, host: str) -> str:  # as ``host`` reaches the database
        return f"10.88.{self._link(host)}.1"

    @staticmethod
    def _link(host: str) -> int:
        kind, k = host[len(PREFIX):-1], int(host[-1])
        return k if kind == "api" else 10 + k

    def build(self) -> None:
        cleanup_leftovers()
        hosts = ["db", "cli"] + [f"api{k}" for k in range(1, self.n_apis + 1)] + \
            [f"wrk{k}" for k in range(1, self.n_workers + 1)]
        for h in hosts:
            ns = PREFIX + h
            sh("ip", "netns", "add", ns)
            self.namespaces.append(ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        for h in hosts[2:]:
            ns, link = PREFIX + h, self._link(PREFIX + h)
            # Created inside the namespaces: no interface ever appears in the machine's own.
            sh("ip", "link", "add", "todb", "netns", ns, "type", "veth", "peer", "name", f"x-{h}",
               "netns", PREFIX + "db")
            sh("ip", "addr", "add", f"10.88.{link}.2/24", "dev", "todb", ns=ns)
            sh("ip", "link", "set", "todb", "up", ns=ns)
            sh("ip", "addr", "add", f"10.88.{link}.1/24", "dev", f"x-{h}", ns=PREFIX + "db")
            sh("ip", "link", "set", f"x-{h}", "up", ns=PREFIX + "db")
            if h.startswith("api"):
                k = int(h[-1])
                sh("ip", "link", "add", "tocli", "netns", ns, "type", "veth", "peer", "name", f"x-{h}",
                   "netns", PREFIX + "cli")
                sh("ip", "addr", "add", f"10.89.{k}.1/24", "dev", "tocli", ns=ns)
                sh("ip", "link", "set", "tocli", "up", ns=ns)
                sh("ip", "addr", "add", f"10.89.{k}.2/24", "dev", f"x-{h}", ns=PREFIX + "cli")
                sh("ip", "link", "set", f"x-{h}", "up", ns=PREFIX + "cli")

    def cut(self, host: str, down: bool) -> None:
        """The database's end of ``host``'s link down (packets dropped silently both ways, as on a
        cut cable: no reset, no refusal) or up again."""
        sh("ip", "link", "set", f"x-{host[len(PREFIX):]}", "down" if down else "up", ns=PREFIX + "db")

    # -- the database host --------------------------------------------------------------------

    def pg(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_ctl", "-D", str(self.pgdata), *args,
                  ns=PREFIX + "db", check=check)

    def start_db(self) -> None:
        self.pgdata.mkdir()
        shutil.chown(self.pgdata, "postgres", "postgres")
        subprocess.run(["runuser", "-u", "postgres", "--", f"{PG_BIN}/initdb", "-D", str(self.pgdata), "-U",
                        "postgres", "--auth=trust", "-E", "UTF8", "--no-instructions"], check=True,
                       capture_output=True)
        with open(self.pgdata / "postgresql.conf", "a") as f:
            f.write(f"listen_addresses = '*'\nport = 5432\nunix_socket_directories = '{self.pgdata}'\n"
                    "max_connections = 300\nshared_buffers = 128MB\n")
        with open(self.pgdata / "pg_hba.conf", "a") as f:
            f.write("host all all 10.88.0.0/16 trust\n")
        self.pg_start()
        sh("psql", "-h", str(self.pgdata), "-U", "postgres", "-c", f"CREATE DATABASE {DB_NAME}", ns=PREFIX + "db")

    def sql(self, statement: str) -> str:
        return sh("psql", "-h", str(self.pgdata), "-U", "postgres", "-d", DB_NAME, "-At", "-c", statement,
                  ns=PREFIX + "db").stdout.strip()

    def start_pgbouncer(self) -> None:
        """PgBouncer in transaction mode on the database host (:6432), in front of its PostgreSQL."""
        folder = self.tmp / "pgbouncer"
        folder.mkdir()
        (folder / "userlist.txt").write_text('"postgres" ""\n')
        (folder / "pgbouncer.ini").write_text(
            f"[databases]\n{DB_NAME} = host={self.pgdata} port=5432 dbname={DB_NAME}\n[pgbouncer]\n"
            "listen_addr = *\nlisten_port = 6432\nauth_type = trust\n"
            f"auth_file = {folder}/userlist.txt\npool_mode = transaction\nmax_client_conn = 1000\n"
            f"default_pool_size = 40\nunix_socket_dir =\nlogfile = {folder}/pgbouncer.log\n"
            f"pidfile = {folder}/pgbouncer.pid\n"
            "ignore_startup_parameters = extra_float_digits,options\n")
        shutil.chown(folder, "postgres", "postgres")
        for p in folder.iterdir():
            shutil.chown(p, "postgres", "postgres")
        sh("runuser", "-u", "postgres", "--", "pgbouncer", "-d", str(folder / "pgbouncer.ini"), ns=PREFIX + "db")

    def pg_start(self) -> None:
        self.pg("-l", str(self.pgdata / "postgresql.log"), "-w", "start")

    def pg_stop(self, mode: str) -> None:
        self.pg("-m", mode, "-w", "stop", check=False)

    def start_delay_proxy(self, host: str, delay_ms: int) -> dict[str, str]:
        """Fault 5 on a kernel without ``sch_netem``: a TCP proxy on the database host
        (:mod:`bench.rehearsal.delay_proxy`) between ``host`` and PostgreSQL, which adds ``delay_ms`` to
        what ``host`` sends while on (SIGUSR1; SIGUSR2 off). The environment that sends ``host``'s
        connections through it."""
        addr, port = self.db_addr(host), 6432 if self.pgbouncer else 5432
        with open(self.tmp / "delay-proxy.log", "a") as out:
            self.delay_proxy = subprocess.Popen(
                ["ip", "netns", "exec", PREFIX + "db", sys.executable, "-m", "bench.rehearsal.delay_proxy",
                 f"{addr}:15432", f"{addr}:{port}", str(delay_ms)], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while "delay proxy" not in (self.tmp / "delay-proxy.log").read_text():
            if self.delay_proxy.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the delay proxy did not start: {(self.tmp / 'delay-proxy.log').read_text()}")
            time.sleep(0.1)
        return {"DATABASE_URL": f"postgres://postgres@{addr}:15432/{DB_NAME}"}

    def delayed_chunks(self) -> int | None:
        """What the delay proxy says it delayed, once it has said the delay is off."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            said = re.findall(r"delay off \((\d+) chunks", (self.tmp / "delay-proxy.log").read_text())
            if said:
                return int(said[-1])
            time.sleep(0.1)
        return None

    def stop_delay_proxy(self) -> None:
        if self.delay_proxy is not None:
            self.delay_proxy.kill()
            self.delay_proxy.wait(10)
            self.delay_proxy = None

    def loss(self, host: str, percent: int | None) -> int | None:
        """``percent`` % of the packets ``host`` sends to the database dropped (nftables' random
        ``numgen`` on its link), or none again (None: then the number of packets it dropped)."""
        if percent is None:
            listed = sh("nft", "list", "table", "inet", "rehearsal", ns=host, check=False).stdout
            sh("nft", "delete", "table", "inet", "rehearsal", ns=host, check=False)
            dropped = re.search(r"counter packets (\d+)", listed)
            return int(dropped.group(1)) if dropped else None
        sh("nft", "add", "table", "inet", "rehearsal", ns=host)
        sh("nft", "add chain inet rehearsal out { type filter hook output priority 0 ; }", ns=host)
        sh("nft", f'add rule inet rehearsal out oifname "todb" numgen random mod 100 < {percent} counter drop', ns=host)
        return None

    # -- forqapp hosts ------------------------------------------------------------------------

    def env(self, host: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.tmp),
                "DJANGO_SETTINGS_MODULE": "bench.rehearsal.settings",
                "DATABASE_URL": f"postgres://postgres@{self.db_addr(host)}:{6432 if self.pgbouncer else 5432}/{DB_NAME}",
                **({"FORQ_DB_PREPARE_THRESHOLD": "none"} if self.pgbouncer else {}),
                "FORQ_AUTH_SECRET": SECRET, "FORQ_API_ADDR": "0.0.0.0:8080", "FORQ_SQS_ADDR": "0.0.0.0:9324",
                "FORQ_UI_ENABLED": "false", "FORQ_LONG_POLL_SECONDS": "2",
                "FORQ_API_WORKERS": str(self.api_workers), "RH_LOG_DIR": str(self.runs), "RH_HOST": host,
                "PYTHONUNBUFFERED": "1", **(extra or {})}

    def spawn(self, host: str, args: list[str], extra: dict[str, str] | None = None) -> subprocess.Popen:
        with open(self.tmp / f"{host}.log", "a") as out:  # the child keeps its own descriptor
            proc = subprocess.Popen(["ip", "netns", "exec", host, sys.executable, "manage.py", *args], cwd=ROOT,
                                    env=self.env(host, extra), stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.procs.setdefault(host, []).append(proc)
        return proc

    def migrate(self) -> None:
        done = sh(sys.executable, "manage.py", "migrate", "-v", "0", ns=PREFIX + "api1", cwd=ROOT,
                  env=self.env(PREFIX + "api1"), check=False)
        if done.returncode:
            raise RuntimeError(f"migrate failed: {done.stdout}{done.stderr}")

    def start_api(self, k: int, extra: dict[str, str] | None = None) -> None:
        self.spawn(f"{PREFIX}api{k}", ["forq_serve", "--no-ui"], extra)

    def start_worker(self, k: int, extra: dict[str, str] | None = None, concurrency: int = 4) -> None:
        self.spawn(f"{PREFIX}wrk{k}", ["forq_worker", "-c", str(concurrency)], extra)

    def wait_api(self, k: int, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            done = sh("python3", "-c", "import http.client,sys; c=http.client.HTTPConnection("
                      f"'{self.api_addr(k)}',8080,timeout=2); c.request('GET','/healthcheck');"
                      "sys.exit(c.getresponse().status!=204)", ns=PREFIX + "cli", check=False)
            if done.returncode == 0:
                return
            time.sleep(0.3)
        raise RuntimeError(f"API host {k} did not answer /healthcheck within {timeout_s} s")

    def kill_host(self, host: str) -> None:
        """``kill -9`` of every process in the host's namespace (forqapp's only: the database runs
        in a namespace of its own)."""
        pids = sh("ip", "netns", "pids", host, check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        for proc in self.procs.pop(host, []):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)

    def db_cpu_s(self) -> float:
        """User + system CPU seconds of the database host's processes (PostgreSQL's) so far."""
        total = 0
        tick = os.sysconf("SC_CLK_TCK")
        for pid in sh("ip", "netns", "pids", PREFIX + "db", check=False).stdout.split():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                # utime, stime, and the children's the postmaster has reaped (ended sessions)
                total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        return total / tick

    def tracebacks(self) -> dict[str, int]:
        return {p.stem: p.read_text(errors="replace").count("Traceback") for p in self.tmp.glob(f"{PREFIX}*.log")}

    def log_lines(self, host: str, needle: str) -> list[str]:
        path = self.tmp / f"{host}.log"
        return [ln for ln in path.read_text(errors="replace").splitlines() if needle in ln] if path.exists() else []

    def runs_seen(self) -> dict[str, list[tuple[str, float]]]:
        seen: dict[str, list[tuple[str, float]]] = {"work": [], "task": []}
        for path in self.runs.glob("runs-*.log"):
            for line in path.read_text().splitlines():
                kind, content, at = line.split(" ")
                seen[kind].append((content, float(at)))
        return seen

    # -- teardown -----------------------------------------------------------------------------

    def teardown(self) -> None:
        self.stop_delay_proxy()
        for ns in self.namespaces:
            if ns != PREFIX + "db":
                self.kill_host(ns)
        if self.pgdata.exists():
            self.pg_stop("immediate")
        for ns in self.namespaces:
            self.kill_host(ns)
            sh("ip", "netns", "del", ns, check=False)
        self.namespaces.clear()
        if os.environ.get("RH_KEEP"):
            self.log(f"kept {self.tmp} (RH_KEEP)")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def cleanup_leftovers() -> None:
    """Namespaces of an earlier rehearsal killed before its teardown (``fqr-*`` only)."""
    for line in sh("ip", "netns", "list", check=False).stdout.splitlines():
        ns = line.split()[0] if line.split() else ""
        if ns.startswith(PREFIX):
            for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            sh("ip", "netns", "del", ns, check=False)


# --- one fault under load --------------------------------------------------------------------------


AFTER_FAULT_S = 8


def run_client(r: Rehearsal, seconds: float, fault, *, producers: int = 2, consumers: int = 2,
               drain_s: float = 40) -> dict[str, Any]:
    """Load for ``seconds``; ``fault(r)`` runs in this process while it does (returns the fault's
    own record: when it began and ended). The client's result, the worker hosts' runs and the fault's
    record together."""
    # The load runs for ``seconds`` and at least ``AFTER_FAULT_S`` after the fault's end (a slow
    # restart must not leave the recovery unseen): the client stops when the stop file appears.
    config = {"apis": [r.api_addr(k) for k in range(1, r.n_apis + 1)], "secret": SECRET,
              "seconds": seconds + 600, "producers": producers, "consumers": consumers, "drain_s": drain_s,
              "ready_file": str(r.tmp / "client.ready"), "stop_file": str(r.tmp / "client.stop")}
    for path in (config["ready_file"], config["stop_file"]):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    (r.tmp / "client.json").write_text(json.dumps(config))
    out = r.tmp / "client-result.json"
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    for p in r.runs.glob("*"):
        p.unlink()
    client = subprocess.Popen(["ip", "netns", "exec", PREFIX + "cli", sys.executable, "-m", "bench.rehearsal.client",
                               str(r.tmp / "client.json"), str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 90
    while not Path(config["ready_file"]).exists():
        if client.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the client did not start: {client.communicate()[0][-2000:]}")
        time.sleep(0.1)
    began = time.monotonic()
    record = fault(r) if fault else {}
    time.sleep(max(seconds - (time.monotonic() - began), AFTER_FAULT_S if record else 0))
    Path(config["stop_file"]).touch()
    output, _ = client.communicate(timeout=drain_s + 120)
    if client.returncode:
        raise RuntimeError(f"the client failed: {output[-3000:]}")
    result = json.loads(out.read_text())
    # The worker hosts' runs (the consumer's and the task's), waited for like the client's drain.
    expected = set(result["acked"].get("work", {}))
    until = time.monotonic() + drain_s
    while time.monotonic() < until and not expected <= {c for c, _ in r.runs_seen()["task"]}:
        time.sleep(0.5)
    result["runs"] = r.runs_seen()
    result["fault"] = record
    return result


def summarize(name: str, result: dict[str, Any], tracebacks_before: dict[str, int],
              tracebacks_after: dict[str, int]) -> dict[str, Any]:
    rows: dict[str, Any] = {"fault": name, "protocols": {}}
    for protocol in ("v1", "v2", "sqs", "work"):
        acked = set(result["acked"].get(protocol, {}))
        deliveries = result["delivered"].get(protocol, []) if protocol != "work" else result["runs"]["work"]
        counts = Counter(c for c, _ in deliveries)
        row = {"acknowledged": len(acked), "delivered": len(set(counts) & acked),
               "lost": len(acked - set(counts)), "duplicated": sum(n - 1 for n in counts.values() if n > 1),
               "after_ack": len(result["after_ack"].get(protocol, [])),
               "client_errors": len(result["errors"].get(protocol, []))}
        if protocol == "work":
            tasks = Counter(c for c, _ in result["runs"]["task"])
            row["tasks_lost"] = len(acked - set(tasks))
        rows["protocols"][protocol] = row
    # delayed messages (v2, 2 s): the earliest delivery against when each was meant to be due
    first = {}
    for content, at in result["delivered"].get("v2", []):
        first.setdefault(content, at)
    early = [first[c] - due for c, due in result.get("due", {}).items() if c in first]
    rows["delayed"] = len(early)
    rows["delay_min_s"] = round(min(early), 2) if early else None  # < 0: delivered before its time
    times = sorted(t for p in result["acked"].values() for t in p.values())
    edges = [result["started"], *times, result["produced_until"]]
    rows["longest_stall_s"] = round(max(b - a for a, b in zip(edges, edges[1:], strict=False)), 1)
    fault = result.get("fault") or {}
    if fault.get("from"):
        during = [h for h in result["health"] if fault["from"] <= h[0] <= fault["to"]]
        after = [h for h in result["health"] if h[0] > fault["to"]]
        rows["health_during"] = dict(Counter(f"{h[1]}:{h[2]}" for h in during))
        rows["health_slowest_s"] = max((h[3] for h in during), default=None)
        bad = {h[1] for h in during if h[2] != 204}
        recovered = [h[0] for h in after if h[1] in bad and h[2] == 204]
        rows["healthy_again_s"] = round(min(recovered) - fault["to"], 1) if bad and recovered else None
        # the first acknowledged produce after the fault's end, counted from it
        later = [t for t in times if t >= fault["to"]]
        rows["first_ack_after_s"] = round(later[0] - fault["to"], 1) if later else None
    rows["new_tracebacks"] = {h: tracebacks_after.get(h, 0) - tracebacks_before.get(h, 0)
                              for h in tracebacks_after if tracebacks_after.get(h, 0) != tracebacks_before.get(h, 0)}
    rows.update({k: v for k, v in fault.items() if k not in ("from", "to")})
    return rows


def fault_link_cut(r: Rehearsal, seconds: float = 10) -> dict[str, Any]:
    time.sleep(5)
    began = time.time()
    r.cut(PREFIX + "api1", True)
    time.sleep(seconds)
    r.cut(PREFIX + "api1", False)
    return {"from": began, "to": time.time()}


def fault_pg_restart(r: Rehearsal) -> dict[str, Any]:
    time.sleep(5)
    began = time.time()
    r.pg_stop("fast")
    r.pg_start()
    time.sleep(8)
    r.pg_stop("immediate")
    r.pg_start()
    return {"from": began, "to": time.time()}


def fault_worker_killed(r: Rehearsal) -> dict[str, Any]:
    time.sleep(5)
    began = time.time()
    r.kill_host(PREFIX + "wrk1")
    time.sleep(3)
    r.start_worker(1)
    return {"from": began, "to": time.time()}


def fault_api_killed(r: Rehearsal) -> dict[str, Any]:
    time.sleep(5)
    began = time.time()
    r.kill_host(PREFIX + "api2")
    time.sleep(5)
    r.start_api(2)  # "healthy again": from here until it answers 204
    restarted = time.time()
    r.wait_api(2, timeout_s=120)  # the load runs on until it is back, and AFTER_FAULT_S more
    return {"from": began, "to": restarted}


def fault_netem(r: Rehearsal) -> dict[str, Any]:
    """200 ms more on each of API host 1's round trips to the database, and 1 % of the packets it
    sends there lost, for 15 s: ``tc … netem`` where the kernel has it; otherwise the delay proxy
    API host 1 was started behind, and nftables dropping its packets (left out, and said, without
    ``nft``)."""
    time.sleep(5)
    began = time.time()
    ns = PREFIX + "api1"
    if r.delay_proxy is None:
        sh("tc", "qdisc", "add", "dev", "todb", "root", "netem", "delay", "200ms", "loss", "1%", ns=ns)
        how = "tc netem"
    else:
        r.delay_proxy.send_signal(signal.SIGUSR1)
        lossless = nft_missing()
        if not lossless:
            r.loss(ns, 1)
        how = "delay proxy" + (f"; no loss: {lossless}" if lossless else " + nftables loss")
    time.sleep(15)
    if r.delay_proxy is None:
        sh("tc", "qdisc", "del", "dev", "todb", "root", ns=ns, check=False)
    else:
        r.delay_proxy.send_signal(signal.SIGUSR2)
        dropped = r.loss(ns, None)
        how += f", {r.delayed_chunks()} chunks delayed"
        if dropped is not None:
            how += f", {dropped} packets dropped"
    return {"from": began, "to": time.time(), "how": how}


# libfaketime (``faketime``) cannot serve here: under it Python's time.sleep fails with EINVAL
# (DONT_FAKE_MONOTONIC) or a threading.Event().wait(0.1) never returns; forqapp's own clock offset
# shifts every queue time the host computes (ids, due times, leases, schedules), as a clock ahead.
CLOCK_AHEAD = {"FORQ_CLOCK_OFFSET_MS": "2000"}


def fault_clock(r: Rehearsal) -> dict[str, Any]:
    """The clock-ahead hosts were started so before the load (see :func:`main`)."""
    return {}


FAULT_RUNS = {0: None, 1: fault_link_cut, 2: fault_pg_restart, 3: fault_worker_killed, 4: fault_api_killed,
              5: fault_netem, 6: fault_clock}


def faults(args, log=print) -> list[dict[str, Any]]:
    rows = []
    r = Rehearsal(apis=2, workers=2, api_workers=args.api_workers, log=log,
                  pgbouncer=getattr(args, "pgbouncer", False))
    try:
        r.build()
        r.start_db()
        if r.pgbouncer:
            r.start_pgbouncer()
        r.migrate()
        for n in args.faults:
            clock = CLOCK_AHEAD if n == 6 else None
            # Without sch_netem, API host 1 reaches the database through the delay proxy for fault 5.
            behind_proxy = r.start_delay_proxy(PREFIX + "api1", 200) if n == 5 and netem_missing() else None
            for k in (1, 2):
                r.start_api(k, clock if k == 2 else behind_proxy)
                r.start_worker(k, clock if k == 2 else None)
            for k in (1, 2):
                r.wait_api(k)
            before = r.tracebacks()
            log(f"fault {n}: {FAULTS[n]} …")
            r.sql("DELETE FROM messages WHERE queue = 'rh-sched'")
            ticking = time.time()
            result = run_client(r, args.seconds, FAULT_RUNS[n])
            row = summarize(f"{n}. {FAULTS[n]}", result, before, r.tracebacks())
            # the schedule's ticks (one a second, exactly once): sent, against the seconds it ran
            ticks = r.sql("SELECT count(*) FROM messages WHERE queue = 'rh-sched'")
            row["schedule_ticks"] = f"{ticks} in {time.time() - ticking:.0f} s"
            row["db_away_lines"] = {h: len(r.log_lines(f"{PREFIX}{h}", "(this line at most once a second)"))
                                    for h in ("api1", "api2", "wrk1", "wrk2")}
            rows.append(row)
            log(json.dumps(row))
            for k in (1, 2):  # the next fault starts from fresh hosts (6 needs them restarted anyway)
                r.kill_host(f"{PREFIX}api{k}")
                r.kill_host(f"{PREFIX}wrk{k}")
            r.stop_delay_proxy()
    finally:
        if args.keep_logs:
            for p in r.tmp.glob("*.log"):
                shutil.copy(p, Path(args.keep_logs) / p.name)
        r.teardown()
    return rows


# --- scaling ---------------------------------------------------------------------------------------


class WaitSampler:
    """What the database's active sessions wait on, sampled every 50 ms through its Unix socket
    (``pg_stat_activity``: "CPU" where a session waits on nothing), and the statements they run."""

    def __init__(self, r: Rehearsal):
        import threading

        self.r, self.waits, self.statements = r, Counter(), Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(host=str(self.r.pgdata), user="postgres", dbname=DB_NAME, autocommit=True) as conn:
            while not self.stop.wait(0.05):
                for wait, query in conn.execute(
                        "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), left(query, 60) "
                        "FROM pg_stat_activity WHERE state = 'active' AND backend_type = 'client backend' "
                        "AND pid <> pg_backend_pid()").fetchall():
                    self.waits[wait] += 1
                    self.statements[" ".join(query.split())[:50]] += 1

    def top(self) -> str:
        self.stop.set()
        self.thread.join(5)
        total = sum(self.waits.values()) or 1
        return ", ".join(f"{w} {100 * n // total}%" for w, n in self.waits.most_common(3))


def scaling(args, log=print) -> list[dict[str, Any]]:
    """Produce throughput with 1, 2, 4 API hosts (v2 sends from the client, 4 connections per host);
    consume throughput with 1, 2, 4 worker hosts draining the same pre-sent messages; the database
    host's CPU seconds per message for each."""
    rows = []
    counts = [int(c) for c in args.hosts.split(",")]
    r = Rehearsal(apis=max(counts), workers=max(counts), api_workers=args.api_workers, log=log)
    try:
        r.build()
        r.start_db()
        r.migrate()
        for n in counts:
            for k in range(1, n + 1):
                r.start_api(k)
            for k in range(1, n + 1):
                r.wait_api(k)
            cpu = r.db_cpu_s()
            sampler = WaitSampler(r)
            out = sh(sys.executable, "-m", "bench.rehearsal.blast", json.dumps({
                "apis": [r.api_addr(k) for k in range(1, n + 1)], "secret": SECRET, "seconds": args.scale_seconds,
                "connections": 4}), ns=PREFIX + "cli", cwd=ROOT)
            sent = json.loads(out.stdout)
            cpu = r.db_cpu_s() - cpu
            rows.append({"what": "produce", "hosts": n, "messages": sent["sent"],
                         "per_s": round(sent["sent"] / sent["seconds"]), "db_cpu_ms_per_msg":
                         round(1000 * cpu / max(1, sent["sent"]), 3), "errors": sent["errors"],
                         "waits": sampler.top()})
            log(json.dumps(rows[-1]))
            for k in range(1, n + 1):
                r.kill_host(f"{PREFIX}api{k}")
            # consume: the messages just sent to rh-work, drained by n worker hosts
            cpu = r.db_cpu_s()
            sampler = WaitSampler(r)
            started = time.time()
            for k in range(1, n + 1):
                r.spawn(f"{PREFIX}wrk{k}", ["forq_worker", "bench-sink", "-c", "4", "--prefetch", "100", "--burst"])
            for proc in [p for k in range(1, n + 1) for p in r.procs.get(f"{PREFIX}wrk{k}", [])]:
                proc.wait(600)
            took = time.time() - started
            cpu = r.db_cpu_s() - cpu
            drained = sent["sent"]
            rows.append({"what": "consume", "hosts": n, "messages": drained, "per_s": round(drained / took),
                         "db_cpu_ms_per_msg": round(1000 * cpu / max(1, drained), 3), "errors": 0,
                         "waits": sampler.top()})
            log(json.dumps(rows[-1]))
            for k in range(1, n + 1):
                r.procs.pop(f"{PREFIX}wrk{k}", None)
    finally:
        r.teardown()
    return rows


# --- tables ----------------------------------------------------------------------------------------


def fault_table(rows: list[dict[str, Any]]) -> str:
    """One row per fault and face; the fault's own columns on its first row."""
    lines = ["| fault | face | acknowledged | delivered | lost | duplicated | after ack | client errors | "
             "longest stall (s) | health checks during the fault | healthy again (s) | delayed: earliest vs due (s) | "
             "schedule ticks | new tracebacks |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | --- |"]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['fault']} | skipped: {row['skipped']} |" + " |" * 12)
            continue
        for i, (protocol, p) in enumerate(row["protocols"].items()):
            lost = p["lost"] if protocol != "work" else f"{p['lost']} (tasks {p['tasks_lost']})"
            head = [row["fault"] + (f" ({row['how']})" if row.get("how") else ""), str(row["longest_stall_s"]),
                    ", ".join(f"{k} {v}" for k, v in sorted(row.get("health_during", {}).items())),
                    "" if row.get("healthy_again_s") is None else str(row["healthy_again_s"]),
                    f"{row['delay_min_s']} ({row['delayed']})" if row.get("delayed") else "",
                    row.get("schedule_ticks", ""),
                    ", ".join(f"{k} {v}" for k, v in row["new_tracebacks"].items()) or "0"]
            if i:
                head = [""] * len(head)
            lines.append(f"| {head[0]} | {protocol} | {p['acknowledged']} | {p['delivered']} | {lost} | "
                         f"{p['duplicated']} | {p['after_ack']} | {p['client_errors']} | {head[1]} | {head[2]} | "
                         f"{head[3]} | {head[4]} | {head[5]} | {head[6]} |")
    return "\n".join(lines)


def scaling_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{os.cpu_count()} cores", "",
             "| what | hosts | messages | messages/s | DB CPU ms/message | errors | the database's sessions waited on |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    lines += [f"| {r['what']} | {r['hosts']} | {r['messages']} | {r['per_s']} | {r['db_cpu_ms_per_msg']} | "
              f"{r['errors']} | {r['waits']} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", default="1,2,3,4,5,6",
                        help="which faults, comma-separated (0: none, the load alone; 1-6; '' for no fault run)")
    parser.add_argument("--seconds", type=float, default=30, help="load per fault (s)")
    parser.add_argument("--scaling", action="store_true", help="also measure produce/consume with 1, 2, 4 hosts")
    parser.add_argument("--hosts", default="1,2,4", help="host counts for --scaling")
    parser.add_argument("--scale-seconds", type=float, default=10, help="produce time per scaling step (s)")
    parser.add_argument("--api-workers", type=int, default=1, help="forq_serve processes per API host")
    parser.add_argument("--pgbouncer", action="store_true",
                        help="the hosts connect through PgBouncer in transaction mode (on the database host)")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--keep-logs", help="copy every host's log to this folder")
    args = parser.parse_args(argv)
    args.faults = [int(f) for f in args.faults.split(",") if f.strip()]
    reason = can_run()
    if reason:
        print(f"rehearsal skipped: {reason}", file=sys.stderr)
        return 75
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    out: dict[str, Any] = {}
    if args.faults:
        out["faults"] = faults(args)
        print(fault_table(out["faults"]))
    if args.scaling:
        out["scaling"] = scaling(args)
        print(scaling_table(out["scaling"]))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    failed = [r["fault"] for r in out.get("faults", []) if "protocols" in r and any(
        p["lost"] or p["after_ack"] or p.get("tasks_lost") for p in r["protocols"].values())]
    if failed:
        print("FAILED (lost or delivered after ack): " + "; ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
