"""The server's memory, measured from outside: PSS of every process of ``forq_serve``'s tree.

    .venv/bin/python bench/memory_bench.py [--against REV] [--rounds N] [--load-seconds 10]

Starts ``manage.py forq_serve`` as ``make run`` does (the demo project, SQLite, API + admin UI +
jobs, ``collectstatic`` done, metrics as ``make run`` leaves them), on a fresh SQLite file and free
ports, and reads ``Pss`` from ``/proc/PID/smaps_rollup`` of each process of the tree (shared pages
divided among the processes that share them, so the sum is what the tree holds):

* idle, 3 s after both listeners answer;
* under load, the most seen (sampled every 0.5 s) while, for ``--load-seconds``, 4 producer threads
  ``POST`` 100-byte messages and 4 consumer threads receive and ack them (stdlib ``http.client``,
  one keep-alive connection each), and a staff user's browser (``--browsers``) loads the UI's
  dashboard, queue page and Django admin in a loop;
* idle again, 3 s after the load.

Each process is named by its role (supervisor, each listener's granian main process and its
workers). The same-run references: ``--against REV`` serves git revision REV too (a temporary
``git worktree`` sharing this checkout's ``.venv``), first, then this checkout, ``--rounds`` times;
and the floor: a bare ``python -c "import django; django.setup()"`` of the same settings, and a bare
interpreter.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
SECRET = "forq-memory-bench-secret-at-least-32-characters"
PASSWORD = "memory-bench-password"
BODY = json.dumps({"content": "x" * 100})
HEADERS = {"X-API-Key": SECRET, "Content-Type": "application/json"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(tmp: str) -> dict[str, str]:
    """``make run``'s environment (scripts/run.sh), on a temporary SQLite file and free ports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORQ_", "PROMETHEUS_", "MALLOC_"))}
    env.pop("DATABASE_URL", None)
    env.update({
        "DJANGO_SETTINGS_MODULE": "project.settings", "FORQ_AUTH_SECRET": SECRET,
        "FORQ_METRICS_AUTH_SECRET": SECRET + "-metrics", "DJANGO_SECRET_KEY": SECRET * 2,
        "FORQ_KEYS_SECRET": SECRET + "-keys", "FORQ_ADMIN_PASSWORD": PASSWORD,
        "FORQ_DB_PATH": str(Path(tmp) / "memory.sqlite3"),
        "FORQ_API_ADDR": f"127.0.0.1:{free_port()}", "FORQ_UI_ADDR": f"127.0.0.1:{free_port()}",
    })
    return env


# --- the process tree ------------------------------------------------------------------------------


def pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree(pid: int) -> list[tuple[int, int]]:
    """[(pid, parent pid)] of ``pid`` and its descendants, parents first."""
    found, todo = [], [(pid, 0)]
    while todo:
        p, parent = todo.pop(0)
        found.append((p, parent))
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [(int(c), p) for c in f.read().split()]
        except OSError:
            pass
    return found


def role(pid: int, parent_role: str) -> str:
    """What process ``pid`` is, from its command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "gone"
    line = " ".join(argv)
    if "forqapp.server.supervise" in line:
        return "supervisor (no Django)"
    target = next((a for a in argv if re.match(r"forqapp\.\w+\.asgi:", a)), None)
    if target is not None:
        face = {"api": "API", "ui": "UI", "sqs": "SQS"}.get(target.split(".")[1], target)
        return f"{face} granian main" if "supervisor" in parent_role else f"{face} worker"
    if "run_child" in line:
        match = re.search(r'"command": "(\w+)"', line)
        return match.group(1) if match else "child"
    if parent_role.endswith("granian main"):  # a worker granian started some other way
        return parent_role.replace("granian main", "worker")
    if parent_role.endswith("worker"):
        return parent_role + "'s child"
    return Path(argv[0]).name or "?"


def snapshot(pid: int) -> dict[str, int]:
    """{role: PSS KiB} of the tree (roles numbered when several processes share one)."""
    roles: dict[int, str] = {0: ""}
    out: dict[str, int] = {}
    for p, parent in tree(pid):
        name = roles[p] = role(p, roles.get(parent, ""))
        key, n = name, 1
        while key in out:
            n += 1
            key = f"{name} {n}"
        out[key] = pss_kib(p)
    return out


# --- the server and its load -----------------------------------------------------------------------


class Server:
    def __init__(self, checkout: Path, tmp: str):
        self.env = environment(tmp)
        self.api = self.env["FORQ_API_ADDR"]
        self.ui = self.env["FORQ_UI_ADDR"]
        run = {"cwd": checkout, "env": self.env, "check": True}
        subprocess.run([PY, "manage.py", "migrate", "--noinput", "-v0"], **run)
        subprocess.run([PY, "manage.py", "collectstatic", "--noinput", "-v0"], **run)
        subprocess.run([PY, "manage.py", "shell", "-v0", "-c",
                        "from django.contrib.auth import get_user_model; "
                        f"get_user_model().objects.create_superuser('admin', '', {PASSWORD!r})"], **run)
        self.log = open(Path(tmp) / "serve.log", "w")
        self.proc = subprocess.Popen([PY, "manage.py", "forq_serve"], cwd=checkout, env=self.env,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 90
        while not (self._answers(self.api, "/healthcheck") and self._answers(self.ui, "/admin/login/")):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("forq_serve did not start: " + (Path(tmp) / "serve.log").read_text())
            time.sleep(0.2)

    @staticmethod
    def _answers(addr: str, path: str) -> bool:
        host, port = addr.rsplit(":", 1)
        try:
            c = http.client.HTTPConnection(host, int(port), timeout=2)
            c.request("GET", path)
            ok = c.getresponse().status < 500
            c.close()
        except OSError:
            return False
        return ok

    def conn(self, addr: str, timeout: float = 30) -> http.client.HTTPConnection:
        host, port = addr.rsplit(":", 1)
        return http.client.HTTPConnection(host, int(port), timeout=timeout)

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def producer(server: Server, until: float, counts: list[int]) -> None:
    c = server.conn(server.api)
    while time.monotonic() < until:
        c.request("POST", "/api/v1/queues/memory/messages", BODY, HEADERS)
        r = c.getresponse()
        r.read()
        assert r.status == 204, r.status
        counts[0] += 1
    c.close()


def consumer(server: Server, until: float, counts: list[int]) -> None:
    """Receives and acks; stops a second before the producers, so it never waits on an empty queue."""
    c = server.conn(server.api)
    until -= 1
    while time.monotonic() < until:
        c.request("GET", "/api/v1/queues/memory/messages", headers=HEADERS)
        r = c.getresponse()
        body = r.read()
        if r.status == 200:
            m = json.loads(body)
            c.request("POST", f"/api/v1/queues/memory/messages/{m['id']}/ack",
                      headers={**HEADERS, "X-Forq-Receipt": m["receipt"]})
            a = c.getresponse()
            a.read()
            assert a.status == 204, a.status
            counts[1] += 1
    c.close()


def staff(server: Server, until: float, counts: list[int]) -> None:
    """A staff user's browser: logs in, then loads the dashboard, a queue's page and the admin."""
    c = server.conn(server.ui)
    cookies: dict[str, str] = {}

    def get(path: str, body: str | None = None) -> str:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}
        if body is not None:
            headers.update({"Content-Type": "application/x-www-form-urlencoded", "Referer": f"http://{server.ui}/"})
        c.request("GET" if body is None else "POST", path, body, headers)
        r = c.getresponse()
        text = r.read().decode(errors="replace")
        for value in r.headers.get_all("Set-Cookie") or ():
            name, _, rest = value.partition("=")
            cookies[name] = rest.split(";")[0]
        assert r.status < 500, (path, r.status)
        return text

    page = get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token, "no CSRF token on the login page"
    get("/admin/login/", urlencode({"csrfmiddlewaretoken": token.group(1), "username": "admin",
                                    "password": PASSWORD, "next": "/"}))
    while time.monotonic() < until:
        for path in ("/", "/queues/memory/", "/admin/"):
            get(path)
            counts[2] += 1
    c.close()


def load(server: Server, seconds: float, browsers: int) -> tuple[dict[str, int], list[int]]:
    """The most PSS each role and the whole tree showed while loaded; the requests made."""
    counts = [0, 0, 0]
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=f, args=(server, until, counts))
               for f in [producer] * 4 + [consumer] * 4 + [staff] * browsers]
    for t in threads:
        t.start()
    most: dict[str, int] = {}
    total = 0
    while any(t.is_alive() for t in threads):
        time.sleep(0.5)
        snap = snapshot(server.proc.pid)
        total = max(total, sum(snap.values()))
        for k, v in snap.items():
            most[k] = max(most.get(k, 0), v)
    for t in threads:
        t.join()
    most["total (most seen at once)"] = total
    return most, counts


def measure(checkout: Path, label: str, load_seconds: float, browsers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="forq-memory-") as tmp:
        server = Server(checkout, tmp)
        try:
            time.sleep(3)
            idle = snapshot(server.proc.pid)
            loaded, counts = load(server, load_seconds, browsers)
            time.sleep(3)
            after = snapshot(server.proc.pid)
        finally:
            server.stop()
    return {"label": label, "idle": idle, "load": loaded, "after": after, "counts": counts}


def floor(checkout: Path) -> dict[str, int]:
    """PSS of a bare interpreter and of ``django.setup()`` with the server's settings."""
    with tempfile.TemporaryDirectory(prefix="forq-memory-") as tmp:
        env = environment(tmp)
        read = "print(open('/proc/self/smaps_rollup').read().split('Pss:')[1].split()[0])"
        out = {}
        for name, code in (("bare python", read), ('python -c "import django; django.setup()"',
                                                   "import django; django.setup(); " + read)):
            out[name] = int(subprocess.run([PY, "-c", code], cwd=checkout, env=env, check=True,
                                           capture_output=True, text=True).stdout)
        return out


def mb(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def report(result: dict, reference: dict | None) -> None:
    idle, loaded, after = result["idle"], result["load"], result["after"]
    produced, consumed, pages = result["counts"]
    print(f"\n== {result['label']}: PSS in MB (load: {produced} produced, {consumed} received+acked, "
          f"{pages} UI pages)")
    print(f"  {'process':34} {'idle':>7} {'load':>7} {'after':>7}")
    names = list(dict.fromkeys([*idle, *loaded, *after]))
    names.remove("total (most seen at once)")
    for name in names:
        print(f"  {name:34} {mb(idle.get(name, 0)):>7} {mb(loaded.get(name, 0)):>7} {mb(after.get(name, 0)):>7}")
    totals = (sum(idle.values()), loaded["total (most seen at once)"], sum(after.values()))
    print(f"  {'total (' + str(len(idle)) + ' processes)':34} {mb(totals[0]):>7} {mb(totals[1]):>7} {mb(totals[2]):>7}")
    if reference is not None:
        ref = (sum(reference["idle"].values()), reference["load"]["total (most seen at once)"],
               sum(reference["after"].values()))
        ratios = "  ".join(f"×{a / b:.2f}" for a, b in zip(totals, ref, strict=True))
        print(f"  {'ratio to ' + reference['label']:34} {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default=None, help="also serve this git revision first (same run)")
    parser.add_argument("--rounds", type=int, default=1, help="alternate the checkouts this many times")
    parser.add_argument("--load-seconds", type=float, default=10.0)
    parser.add_argument("--browsers", type=int, default=1, help="staff browsers loading UI pages meanwhile")
    args = parser.parse_args()
    runs = [("this checkout", ROOT)]
    base = None
    if args.against:
        base = Path(tempfile.mkdtemp(prefix="forq-memory-base-")) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.against], cwd=ROOT, check=True,
                       capture_output=True)
        (base / ".venv").symlink_to(ROOT / ".venv")
        runs.insert(0, (f"reference {args.against}", base))
    try:
        for name, kib in floor(ROOT).items():
            print(f"floor: {name}: {mb(kib)} MB PSS")
        for _ in range(args.rounds):
            reference = None
            for label, checkout in runs:
                result = measure(checkout, label, args.load_seconds, args.browsers)
                report(result, reference)
                reference = result if reference is None else reference
    finally:
        if base is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False,
                           capture_output=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
