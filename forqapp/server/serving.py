"""``forq_serve``'s server: the listeners' granian process trees, computed with Django and then
supervised by a Django-free process (:class:`Server`); and what the UI listener serves, decided
once for the supervisor and the UI processes: where the static files come from, and the URLs that
work.

Both listeners run on granian (Rust HTTP server): the API through forqapp's own application over
granian's RSGI (:mod:`forqapp.server.rsgi`; long polls are coroutines, so hundreds of idle consumers
cost no threads), the UI through Django's ASGI handler. Each is a granian process tree of its own — except the UI when
the API and the UI have one worker each (SQLite's defaults): the API worker serves it too
(:mod:`forqapp.server.embedded`; one copy of Django, ~60 MB less). Once the checks have
passed, ``forq_serve`` replaces itself (``os.execve``, same pid) with :mod:`forqapp.server.supervise`,
which starts them, passes SIGTERM/SIGINT on (granian stops accepting, lets in-flight requests
finish, and waiting long polls answer 204 at once), and exits when they have: the supervisor holds
no Django. The jobs run in the API workers, a scheduler thread each (:mod:`forqapp.api.asgi`,
started at lifespan startup, its lease given up at shutdown; metrics in the same multiprocess
directory as the API's): only the worker holding the database's jobs lease runs them, so there is
no jobs process.

Static files: when ``collectstatic`` has filled ``STATIC_ROOT``, granian serves them from disk. In
a project that never collected them (a fresh ``startproject`` has no ``STATIC_ROOT``), the UI
application serves them itself through Django's staticfiles finders
(``ASGIStaticFilesHandler``, the same lookup ``runserver`` does): forqapp's CSS, htmx from
django-htmx and the admin's files, without a collect step or another dependency. A few small files
for staff on the UI listener, answered with ``Last-Modified`` (browsers revalidate with 304).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlparse

from django.apps import apps
from django.conf import settings
from django.db import connections
from django.urls import NoReverseMatch, reverse

from .. import services
from ..conf import forq_settings, parse_addr
from ..metrics import compaction
from ..metrics import top as top_queues
from ..worker.jobs import enabled_jobs
from . import embedded, process, supervise


def collected_static_root() -> Path | None:
    """``STATIC_ROOT`` if ``collectstatic`` put forqapp's files there, else None."""
    root = getattr(settings, "STATIC_ROOT", None)
    if root and (Path(root) / "forqapp" / "forq.css").is_file():
        return Path(root)
    return None


def static_from_finders() -> bool:
    """Whether the UI application serves the static files itself (not collected, staticfiles
    installed, and ``STATIC_URL`` a path of this server rather than another host's URL)."""
    return (
        collected_static_root() is None
        and apps.is_installed("django.contrib.staticfiles")
        and bool(settings.STATIC_URL)
        and not urlparse(str(settings.STATIC_URL)).netloc
    )


def ui_urlconf() -> str:
    """The urlconf the UI listener serves: ``FORQ_UI_URLCONF`` (the demo project's
    ``project.urls_ui``: pages at ``/``), else the project's own (``forqapp.urls``: pages under ``/ui/``)."""
    return forq_settings.FORQ_UI_URLCONF or settings.ROOT_URLCONF


def ui_paths() -> tuple[str, str | None]:
    """(the dashboard's path, the Django admin's path or None) on the UI listener."""
    urlconf = ui_urlconf()
    try:
        pages = reverse("forqapp-ui:dashboard", urlconf=urlconf)
    except NoReverseMatch:  # forqapp's pages are not in the urlconf: nothing better to point at
        pages = "/"
    try:
        admin = reverse("admin:index", urlconf=urlconf)
    except NoReverseMatch:
        admin = None
    return pages, admin


# --- the server ------------------------------------------------------------------------------------


def unbindable(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (in use, no such address, not allowed), or None."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as granian binds
            sock.bind((host, port))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def listeners(*, ui: bool = True) -> dict[str, tuple[str, tuple[str, int]]]:
    """{"API": (setting name, (host, port)), "UI": …} (the UI unless disabled). The addresses must
    have passed their checks (:func:`forqapp.checks.serve_problems`)."""
    found = {"API": ("FORQ_API_ADDR", parse_addr(forq_settings.FORQ_API_ADDR))}
    if forq_settings.FORQ_UI_ENABLED and ui:
        found["UI"] = ("FORQ_UI_ADDR", parse_addr(forq_settings.FORQ_UI_ADDR))
    if forq_settings.FORQ_SQS_ADDR:
        found["SQS"] = ("FORQ_SQS_ADDR", parse_addr(forq_settings.FORQ_SQS_ADDR))
    return found


def granian_command(target: str, host: str, port: int, workers: int, *, static: bool = False,
                    lifespan: bool = True, rsgi: bool = False) -> list[str]:
    """The command of a listener's granian process tree: ``target``'s application factory over ASGI
    (with ``lifespan`` or without), or over RSGI (``rsgi``: the API's; no websockets)."""
    interface = ["--interface", "rsgi", "--no-ws"] if rsgi else ["--interface", "asgi" if lifespan else "asginl"]
    command = [
        sys.executable, "-m", "forqapp.server.granian_main",  # granian, one race mended (see there)
        *interface,
        "--factory",
        "--host", host,
        "--port", str(port),
        "--workers", str(workers),
        "--loop", "uvloop" if sys.platform != "win32" else "auto",
        "--backlog", "4096",
        "--log-level", "warning",
        # A worker still starting when granian is told to stop misses it, and granian kills it after
        # this long: as long as the supervisor's own grace (which also bounds a supervisor killed -9).
        "--workers-kill-timeout", str(int(supervise.STOP_GRACE_S)),
        # A worker that dies (kill -9, out of memory) is replaced; the server lives on. (If granian's
        # main process dies, the supervisor stops the other servers: forq_serve exits 1.)
        "--respawn-failed-workers", "--respawn-interval", "1",
    ]
    # Collected static files are served by granian from disk; otherwise the UI application serves
    # them through Django's finders (forqapp.ui.asgi.ui_application).
    static_root = collected_static_root()
    if static and static_root:
        command += ["--static-path-route", "/" + settings.STATIC_URL.strip("/"),
                    "--static-path-mount", str(static_root)]
    return command + [target]


def server_environment() -> dict[str, str]:
    """The children's environment (and the supervisor's): ``MALLOC_ARENA_MAX=2`` unless given; with
    metrics on, ``var/prometheus`` as ``PROMETHEUS_MULTIPROC_DIR`` unless one is given (several
    processes serve: prometheus_client adds their values up from it)."""
    env = process.child_environment()
    env.pop(process.SERVE_JOBS_ENV, None)  # only this server's API workers get it, and only with jobs
    env.pop(embedded.EMBEDDED_ENV, None)  # (the same: set below for this server's API worker alone)
    # glibc gives each thread that allocates an arena of its own, up to 8 per core, and keeps what
    # each one grew: the API worker's threads (database, jobs, the UI's requests) held megabytes
    # apart. Two arenas are plenty for one event loop and a few threads; a value given wins.
    env.setdefault("MALLOC_ARENA_MAX", "2")
    if forq_settings.FORQ_METRICS_ENABLED and not env.get("PROMETHEUS_MULTIPROC_DIR"):
        env["PROMETHEUS_MULTIPROC_DIR"] = str(_metrics_directory(Path(getattr(settings, "BASE_DIR", ".")) / "var"))
    return env


_metrics_lock: int | None = None  # held (shared) while this process, or the supervisor it becomes, runs


def _metrics_directory(parent: Path) -> Path:
    """``parent/prometheus``, emptied when no other ``forq_serve`` uses it (a fresh start's counts),
    kept when one does (a second server of the same checkout, or one restarted beside another, wiped
    the running one's files: its counts vanished from ``/metrics``). Each server holds a shared
    ``flock`` on ``prometheus.lock`` for its life (the fd survives the ``execve`` into the
    supervisor); the one that can take it exclusively is alone."""
    import fcntl  # (POSIX: here, so that importing this module needs none)

    global _metrics_lock
    directory = parent / "prometheus"
    parent.mkdir(parents=True, exist_ok=True)
    if _metrics_lock is None:
        fd = os.open(parent / "prometheus.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another server runs on it: nothing is removed
        else:  # alone: the files of processes gone go (a fresh start's counts) — unless a running
            # forq_worker or forq_jobs given this directory writes there still: then their counters
            # stay, or the totals would fall by what the others had counted, and Prometheus would
            # read the fall as a reset and count the running one's history again
            others = process.metrics_writers_alive(str(directory), besides=os.getpid())
            if not others:  # (and what /metrics's scrapes remembered of those counts)
                with contextlib.suppress(OSError):
                    os.unlink(directory / top_queues.STATE_FILE)
            # the archives /metrics merged the files of processes gone into go with those files
            # (the counters' only alone), and a compaction left unfinished with them
            compaction.forget(str(directory), gauges_only=bool(others))
            for files in process.metrics_files_of_the_dead(str(directory)).values():
                for path in files:  # (their gauges go either way: the jobs set them again)
                    if not others or os.path.basename(path).startswith("gauge_"):
                        with contextlib.suppress(OSError):
                            os.unlink(path)
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.set_inheritable(fd, True)
        _metrics_lock = fd
    directory.mkdir(exist_ok=True)
    return directory


class Server:
    """``forq_serve``: the API (and UI, SQS) listeners, their workers running the jobs unless
    ``jobs`` is false, until SIGTERM/SIGINT (a second one kills them) or until one of them exits.

    :meth:`run` computes everything with Django (:meth:`spec`), then replaces this process by the
    Django-free supervisor :mod:`forqapp.server.supervise` (same pid)."""

    def __init__(self, listeners: dict[str, tuple[str, tuple[str, int]]], *, api_workers: int | None = None,
                 ui_workers: int | None = None, jobs: bool = True, verbosity: int = 1,
                 stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr):
        self.listeners = listeners
        self.api_workers = api_workers or forq_settings.FORQ_API_WORKERS or services.default_api_workers()
        self.ui_workers = ui_workers or forq_settings.FORQ_UI_WORKERS
        self.jobs = jobs
        self.verbosity = verbosity
        self.stdout, self.stderr = stdout, stderr

    def spec(self, drain_file: Path) -> tuple[dict[str, Any], dict[str, str]]:
        """(:func:`forqapp.server.supervise.run`'s spec, the supervisor's environment: the children's)."""
        env = server_environment()
        # The API processes watch this file: once it exists, waiting long polls answer 204 at once
        # (forqapp.services.waiting.watch_drain_file), so the server's drain never waits for them.
        env["FORQ_DRAIN_FILE"] = str(drain_file)
        children = []
        host, port = self.listeners["API"][1]
        # Each API worker runs a jobs scheduler (forqapp.api.asgi; the lease picks the one that
        # runs them), told so by this variable: never when served otherwise.
        api_env = {process.SERVE_JOBS_ENV: str(self.verbosity)} if self.jobs else {}
        children.append({
            "name": "API",
            "argv": granian_command("forqapp.api.asgi:api_application", host, port, self.api_workers,
                                    rsgi=True),
            "env": api_env,
        })
        served_by = {name: name for name in self.listeners}
        if "UI" in self.listeners and self.embeds_ui():
            # One API worker, one UI worker (SQLite's defaults): the API worker serves the UI too,
            # one copy of Django for both (forqapp.server.embedded).
            host, port = self.listeners["UI"][1]
            static_root = collected_static_root()
            api_env[embedded.EMBEDDED_ENV] = json.dumps([{
                "name": "UI", "target": "forqapp.ui.asgi:embedded_ui_application", "host": host, "port": port,
                "backlog": 4096, "static": ["/" + settings.STATIC_URL.strip("/"), str(static_root)] if static_root else None,
            }])
            served_by["UI"] = "API"
        elif "UI" in self.listeners:
            host, port = self.listeners["UI"][1]
            children.append({"name": "UI", "argv": granian_command(
                "forqapp.ui.asgi:ui_application", host, port, self.ui_workers, static=True, lifespan=False)})
        if "SQS" in self.listeners:
            host, port = self.listeners["SQS"][1]
            children.append({"name": "SQS", "argv": granian_command(
                "forqapp.sqs.asgi:sqs_application", host, port, self.api_workers)})
        announced = [{"name": name, "child": served_by[name], "host": host, "port": port,
                      "line": listening(name, f"http://{host}:{port}")}
                     for name, (_, (host, port)) in self.listeners.items()]
        spec = {"children": children, "listeners": announced, "drain_file": str(drain_file),
                "cleanup": str(drain_file.parent)}
        return spec, env

    def embeds_ui(self) -> bool:
        """Whether the API worker serves the UI listener too: one worker each (:mod:`forqapp.server.embedded`)."""
        return self.api_workers == 1 and self.ui_workers == 1

    def run(self) -> int:
        """Serve until stopped. On POSIX this process becomes the supervisor and never returns;
        elsewhere it supervises in-process and returns the exit code (0 after a signal, 1 when a
        child exited by itself)."""
        _remove_stale_work_dirs()
        drain_file = Path(tempfile.mkdtemp(prefix=f"forq-serve-{os.getpid()}-")) / "draining"
        try:
            spec, env = self.spec(drain_file)
            if self.jobs and self.verbosity >= 1:
                self.stdout.write("forq_jobs: " + ", ".join(f"{j.name} every {j.every():g}s" for j in enabled_jobs()) + "\n")
            self.stdout.flush()
            self.stderr.flush()
            if os.name != "posix":
                os.environ.update(env)
                return supervise.run(spec, stdout=self.stdout, stderr=self.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
            connections.close_all()
            os.execve(sys.executable, supervise.command(spec), env)  # noqa: S606 - our own interpreter; does not return
        except BaseException:
            shutil.rmtree(drain_file.parent, ignore_errors=True)
            raise


def listening(name: str, origin: str) -> str:
    if name == "API":
        return f"forqapp API listening on {origin}"
    if name == "SQS":
        return f"forqapp SQS-compatible endpoint on {origin}"
    # The paths under the UI's own urlconf: "/" in the demo project, "/ui/" where a project
    # includes forqapp.urls.
    pages, admin = ui_paths()
    return f"forqapp admin UI on {origin}{pages}" + (f" (Django admin: {origin}{admin})" if admin else "")


def _remove_stale_work_dirs() -> None:
    """The work directories (``forq-serve-<pid>-…``, the drain file's) of supervisors that were
    killed (``kill -9``: no clean-up ran), whose process is gone; each supervisor removes its own."""
    for path in Path(tempfile.gettempdir()).glob("forq-serve-*-*"):
        pid = path.name.split("-")[2]
        if pid.isdigit() and path.is_dir() and not process.alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
