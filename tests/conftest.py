"""Shared fixtures.

``live_api`` is a real API server (``manage.py forq_serve --no-ui``, granian) in a subprocess,
serving the test database, for black-box tests of the HTTP contract. Tests that use it must be
``django_db(transaction=True)`` so what they write is committed and visible to the server.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
SECRET = "test-api-secret-0123456789abcdef-0123"
METRICS_SECRET = "test-metrics-secret-0123456789abcdef"


#: Each pytest-xdist worker takes its servers' ports from a range of its own, below the kernel's
#: ephemeral ports (32768 on): a port the kernel handed one worker (``bind(0)``) and that worker
#: let go could be handed to another before either server bound it, and granian binds with
#: SO_REUSEPORT, so both servers then listened on it and the kernel split the connections between
#: them (a browser test's static files answered by another worker's API: 404 JSON).
PORTS_PER_WORKER = 1500
_next_port = [0]


def free_port() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    first = 20_000 + PORTS_PER_WORKER * (int(worker.removeprefix("gw") or 0) % 8)
    for _ in range(PORTS_PER_WORKER):
        port = first + _next_port[0] % PORTS_PER_WORKER
        _next_port[0] += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use (a server of this worker, or another program)
            return port
    raise RuntimeError(f"no free port in {first}-{first + PORTS_PER_WORKER - 1}")


def database_env() -> dict[str, str]:
    """Environment that points a subprocess (server, worker) at the test database."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return {"FORQ_DB_PATH": str(db["NAME"])}
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return {"DATABASE_URL": f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"}


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DATABASE_URL"))}
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        FORQ_AUTH_SECRET=SECRET,
        FORQ_METRICS_AUTH_SECRET=METRICS_SECRET,
        PYTHONPATH=str(ROOT),
        **database_env(),
    )
    env.update(extra)
    return env


class LiveAPI:
    def __init__(self, url: str, proc: subprocess.Popen):
        self.url = url
        self.proc = proc
        self.client = httpx.Client(base_url=url, timeout=40, headers={"X-API-Key": SECRET})

    def produce(self, queue: str, content: str = "hello", **fields) -> httpx.Response:
        return self.client.post(f"/api/v1/queues/{queue}/messages", json={"content": content, **fields})

    def consume(self, queue: str, **kw) -> httpx.Response:
        return self.client.get(f"/api/v1/queues/{queue}/messages", **kw)

    def settle(self, op: str, queue: str, message_id: str, receipt) -> httpx.Response:
        headers = {} if receipt is None else {"X-Forq-Receipt": str(receipt)}
        return self.client.post(f"/api/v1/queues/{queue}/messages/{message_id}/{op}", headers=headers)


def start_server(extra_env: dict[str, str] | None = None, args: tuple[str, ...] = ("--no-ui",)):
    """``forq_serve`` on a free port against the test database, in a process group of its own: a
    test (or :func:`stop_server`) can kill the whole tree, supervisor and granian processes, at once."""
    port = free_port()
    # Each server its own metrics directory: forq_serve empties the one it is given at start, and a
    # shared one (var/prometheus) would be wiped by any other server started from this checkout.
    metrics_dir = tempfile.mkdtemp(prefix=f"forq-metrics-{port}-")
    env = subprocess_env(**{
        "PROMETHEUS_MULTIPROC_DIR": metrics_dir,
        "FORQ_API_ADDR": f"127.0.0.1:{port}", "FORQ_LONG_POLL_SECONDS": "2",
        "FORQ_TRUST_PROXY_HEADERS": "true", "FORQ_METRICS_ENABLED": "true",
        "FORQ_SERVE_JOBS": "false",  # jobs would move other tests' crafted rows; tests that want them say so
        **(extra_env or {}),
    })
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "forq_serve", *args], env=env, cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with proc:  # closes its output pipe
                raise RuntimeError(f"forq_serve exited: {proc.stdout.read()}")
        try:
            if httpx.get(url + "/healthcheck", timeout=1).status_code == 204:
                return LiveAPI(url, proc)
        except httpx.HTTPError:
            time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    with proc:
        raise RuntimeError("forq_serve did not answer /healthcheck within 30 s")


@contextlib.contextmanager
def sqs_listener(django_db_blocker, extra_env: dict[str, str] | None = None) -> Iterator[tuple[str, LiveAPI]]:
    """A server with the SQS listener on a port of its own: (the listener's URL, the server), once
    the listener answers (it may after the API's /healthcheck); stopped at the end."""
    port = free_port()
    with django_db_blocker.unblock():
        api = start_server({"FORQ_SQS_ADDR": f"127.0.0.1:{port}", **(extra_env or {})})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.1)
    try:
        yield url, api
    finally:
        stop_server(api)


def stop_server(api: LiveAPI) -> None:
    api.client.close()
    api.proc.terminate()
    try:
        api.proc.wait(20)
    except subprocess.TimeoutExpired:
        # A SIGTERM that lands while granian is still starting a worker waits for granian's kill
        # timeout (35 s): don't wait, and leave no granian process behind.
        os.killpg(api.proc.pid, signal.SIGKILL)
        api.proc.wait(10)
    api.proc.stdout.close()  # its output pipe (a ResourceWarning otherwise)


def pytest_sessionfinish(session, exitstatus):
    """Remove this run's SQLite files (tests/settings.py lists them; none on PostgreSQL), and the test
    database's under the name pytest-django gave it: with ``-n`` (pytest-xdist), each worker's has its
    worker's suffix (``….test_gw0``). A worker also hands the controller what
    :func:`_sigint_left_as_found` saw."""
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["sigint_changed"] = "\n".join(_SIGINT_CHANGED)
    names = list(getattr(settings, "TEST_SQLITE_FILES", ()))
    test_name = settings.DATABASES["default"].get("TEST", {}).get("NAME")
    if names and test_name:
        names += [test_name + suffix for suffix in ("", "-wal", "-shm", "-writer.lock")]
    for name in names:
        Path(name).unlink(missing_ok=True)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: a plain run has no such plugin
def pytest_xdist_make_scheduler(config, log):
    """How a parallel run (``pytest -n``, as scripts/test.sh runs) shares the tests out: one at a
    time to whichever worker is free, except the tests of a module with a fixture that lasts the
    module or the session (a server, the SparkSession): those go to one worker together, which starts
    that fixture once rather than each worker its own, and such modules go out first, the biggest
    first. (pytest-xdist 3.8's ``xdist_group`` marks group nothing on pytest 9.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if _has_a_long_lived_fixture(path) else nodeid

    return ModuleFixtureScheduling(config, log)


@functools.cache
def _has_a_long_lived_fixture(path: str) -> bool:
    """Whether the test module at ``path`` (relative to the checkout) defines a fixture scoped to
    the module or the session."""
    try:
        source = (ROOT / path).read_text()
    except OSError:
        return False
    return re.search(r"""@pytest\.fixture\(scope=["'](module|session)["']""", source) is not None


@pytest.fixture(scope="session", autouse=True)
def _disconnect_other_sessions_before_teardown(django_db_setup, django_db_blocker):
    """Notifier and database threads keep their connections (as production wants); PostgreSQL
    refuses to drop a database in use, so end those sessions before pytest-django drops it."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()")
    connection.close()


@pytest.fixture(scope="session")
def live_api(django_db_setup, django_db_blocker):
    # No jobs: a session-long scheduler would hold (or, as standby, take over) the forq-jobs lease
    # that the forq_serve tests start and check servers of their own for, and would move messages
    # under the API tests' feet.
    api = start_server({"FORQ_SERVE_JOBS": "false"})
    yield api
    stop_server(api)


# --- shared by the queue, flow, defer and schedule tests --------------------------------------


class Clock:
    """A fake ``services.now_ms`` (Unix ms) that moves only when told."""

    def __init__(self, start: int | None = None) -> None:
        from forqapp import utils

        self.now = utils.now_ms() if start is None else start

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> int:
        self.now += round(seconds * 1000)
        return self.now

    def at(self, when) -> int:
        self.now = int(when.timestamp() * 1000)
        return self.now


@pytest.fixture(autouse=True)
def _content_type_ids_the_live_ui_cached(request):
    """A test on the live UI (``live_ui``: one server for its module) starts on a database flushed as
    ``manage.py flush`` flushes, sequences reset, so that Django recreates the content types with the
    same ids each time. The server caches those ids (the admin's LogEntry names one) and outlives each
    test's own flush, which keeps the sequences: a change saved in the admin then failed its foreign
    key (a 500) whenever another module's test had run on that worker first."""
    if "live_ui" not in request.fixturenames:
        return
    from django.core.management import call_command

    request.getfixturevalue("transactional_db")
    call_command("flush", verbosity=0, interactive=False)


# Tests after which this process's SIGINT was ignored or blocked, and how (put back each time).
_SIGINT_CHANGED: list[str] = []


def _sigint_state() -> tuple[bool, bool]:
    """(ignored, blocked in this thread) of SIGINT here."""
    return (signal.getsignal(signal.SIGINT) is signal.SIG_IGN,
            signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set()))


@pytest.fixture(autouse=True)
def _sigint_left_as_found(request):
    """A child process inherits SIGINT ignored or blocked from the process that starts it, and a
    shell started so cannot trap Ctrl-C (a test of the phases' Ctrl-C saw none, once, in a pytest-xdist
    worker). A test that leaves it so gets it put back, and is named at the end of the run."""
    before = _sigint_state()
    yield
    after = _sigint_state()
    if after == before:
        return
    _SIGINT_CHANGED.append(f"{request.node.nodeid}: (ignored, blocked) {before} -> {after}")
    if after[0] and not before[0]:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if after[1] and not before[1]:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's: a worker finished (see pytest_sessionfinish)
def pytest_testnodedown(node, error):
    changed = getattr(node, "workeroutput", {}).get("sigint_changed")
    if changed:
        _SIGINT_CHANGED.extend(changed.split("\n"))


def pytest_terminal_summary(terminalreporter):
    if _SIGINT_CHANGED:
        terminalreporter.section("tests that left SIGINT ignored or blocked (put back after each)")
        for line in _SIGINT_CHANGED:
            terminalreporter.line(line)


@pytest.fixture(autouse=True)
def _fresh_policies():
    """Policies are cached per process for a second; each test starts (and leaves) with none."""
    from forqapp import services

    services.forget_policies()
    yield
    services.forget_policies()


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    patch_clock(monkeypatch, c)
    return c


def patch_clock(monkeypatch, now_ms) -> None:
    """Replace forqapp's clock (Unix ms): the services' own (``services.base.now_ms``) and the one
    they export to the faces (``services.now_ms``)."""
    from forqapp import services
    from forqapp.services import base

    monkeypatch.setattr(services, "now_ms", now_ms)
    monkeypatch.setattr(base, "now_ms", now_ms)


def refused(code: str, fn, *args, **kwargs):
    """Call ``fn``; it must raise ``ForqError`` with ``code`` (returned)."""
    from forqapp.errors import ForqError

    with pytest.raises(ForqError) as caught:
        fn(*args, **kwargs)
    assert caught.value.code == code, caught.value
    return caught.value


def row(message_id: str):
    from forqapp.models import Message

    return Message.objects.get(id=message_id)


HX = {"HTTP_HX_REQUEST": "true"}  # a test client's request as htmx sends it


@pytest.fixture
def staff(db):
    """The superuser "staff" / "pw-staff-123"."""
    from django.contrib.auth.models import User

    return User.objects.create_user("staff", password="pw-staff-123", is_staff=True, is_superuser=True)


@pytest.fixture
def staff_client(staff):
    """A test client logged in as :func:`staff`."""
    from django.test import Client

    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture
def live_counts(settings):
    """The HTMX pages count live in this test (no counts kept from an earlier page)."""
    from forqapp.ui import freshness

    settings.FORQ_UI_LIVE_COUNTS_MS = 10**9
    freshness.clear()
    yield
    freshness.clear()


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer read from ``sock``: its status, headers (lower-case names) and
    Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)  # socket.timeout (an error) if the server waits for the body
        assert chunk, f"connection closed without an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return int(lines[0].split()[1]), headers, body


def send_raw(where: tuple[str, int], request: bytes, *, timeout: float) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as is (often headers announcing a body that never comes) and read one answer."""
    with socket.create_connection(where, timeout=timeout) as sock:
        sock.sendall(request)
        return read_answer(sock)
