"""``forq_serve``'s server: the listeners' granian process trees and the jobs child, started,
announced and supervised (:class:`Server`); and what the UI listener serves, decided once for the
supervisor and the UI processes: where the static files come from, and the URLs that work.

Both listeners run on granian (Rust HTTP server, ASGI): the API through forqapp's own ASGI
application (long polls are coroutines, so hundreds of idle consumers cost no threads), the UI
through Django's ASGI handler. Each is a granian process tree of its own; the server passes
SIGTERM/SIGINT on (granian stops accepting, lets in-flight requests finish, and waiting long polls
answer 204 at once), and exits when they have. The jobs run as a ``forq_jobs`` child process (its
own metrics, in the same multiprocess directory as the API's; a slow job never holds up the
supervisor); it runs them only while it holds the database's jobs lease.

Static files: when ``collectstatic`` has filled ``STATIC_ROOT``, granian serves them from disk. In
a project that never collected them (a fresh ``startproject`` has no ``STATIC_ROOT``), the UI
application serves them itself through Django's staticfiles finders
(``ASGIStaticFilesHandler``, the same lookup ``runserver`` does): forqapp's CSS, htmx from
django-htmx and the admin's files, without a collect step or another dependency. A few small files
for staff on the UI listener, answered with ``Last-Modified`` (browsers revalidate with 304).
"""

from __future__ import annotations

import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO
from urllib.parse import urlparse

from django.apps import apps
from django.conf import settings
from django.urls import NoReverseMatch, reverse

from . import process, services
from .conf import forq_settings, parse_addr


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


def _accepts(host: str, port: int) -> bool:
    target = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host  # noqa: S104
    try:
        socket.create_connection((target, port), timeout=0.5).close()
    except OSError:
        return False
    return True


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
                    lifespan: bool = True) -> list[str]:
    command = [
        sys.executable, "-m", "granian",
        "--interface", "asgi" if lifespan else "asginl",
        "--factory",
        "--host", host,
        "--port", str(port),
        "--workers", str(workers),
        "--loop", "uvloop" if sys.platform != "win32" else "auto",
        "--backlog", "4096",
        "--log-level", "warning",
        "--workers-kill-timeout", "35",
    ]
    # Collected static files are served by granian from disk; otherwise the UI application serves
    # them through Django's finders (forqapp.ui.asgi.ui_application).
    static_root = collected_static_root()
    if static and static_root:
        command += ["--static-path-route", "/" + settings.STATIC_URL.strip("/"),
                    "--static-path-mount", str(static_root)]
    return command + [target]


def server_environment() -> dict[str, str]:
    """The children's environment; with metrics on, a fresh ``PROMETHEUS_MULTIPROC_DIR`` unless
    one is given (several processes serve: prometheus_client adds their values up from it)."""
    env = process.child_environment()
    if forq_settings.FORQ_METRICS_ENABLED and not env.get("PROMETHEUS_MULTIPROC_DIR"):
        directory = Path(getattr(settings, "BASE_DIR", ".")) / "var" / "prometheus"
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    return env


class Server:
    """``forq_serve``: the API (and UI) listeners and, with ``jobs``, a ``forq_jobs`` child,
    until SIGTERM/SIGINT (a second one kills them) or until one of them exits."""

    def __init__(self, listeners: dict[str, tuple[str, tuple[str, int]]], *, api_workers: int | None = None,
                 ui_workers: int | None = None, jobs: bool = True, verbosity: int = 1,
                 stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr):
        self.listeners = listeners
        self.api_workers = api_workers or forq_settings.FORQ_API_WORKERS or services.default_api_workers()
        self.ui_workers = ui_workers or forq_settings.FORQ_UI_WORKERS
        self.jobs = jobs
        self.verbosity = verbosity
        self.stdout, self.stderr = stdout, stderr
        self.supervisor = process.Supervisor()

    def run(self) -> int:
        """Serve until stopped; the exit code (0 after a signal, 1 when a child exited by itself)."""
        drain_file = Path(tempfile.mkdtemp(prefix="forq-serve-")) / "draining"
        try:
            self._start(drain_file)
            return self._supervise(drain_file)
        finally:
            shutil.rmtree(drain_file.parent, ignore_errors=True)

    def _start(self, drain_file: Path) -> None:
        env = server_environment()
        # The API processes watch this file: once it exists, waiting long polls answer 204 at once
        # (forqapp.waiting.watch_drain_file), so the server's drain never waits for them.
        env["FORQ_DRAIN_FILE"] = str(drain_file)
        host, port = self.listeners["API"][1]
        self.supervisor.start("API", granian_command("forqapp.api.asgi:api_application", host, port,
                                                     self.api_workers), env)
        if "UI" in self.listeners:
            host, port = self.listeners["UI"][1]
            self.supervisor.start("UI", granian_command("forqapp.ui.asgi:ui_application", host, port,
                                                        self.ui_workers, static=True, lifespan=False), env)
        if "SQS" in self.listeners:
            host, port = self.listeners["SQS"][1]
            self.supervisor.start("SQS", granian_command("forqapp.sqs.asgi:sqs_application", host, port,
                                                         self.api_workers), env)
        if self.jobs:
            # SIGINT ignored: a Ctrl-C reaches the whole process group, and the child must stop on
            # the one SIGTERM the supervisor sends it (it then gives the lease up at once).
            self.supervisor.start("jobs", process.command_argv("forq_jobs", {"verbosity": self.verbosity}),
                                  env, ignore_sigint=True)

    def _supervise(self, drain_file: Path) -> int:
        supervisor = self.supervisor
        supervisor.on_first_signal(drain_file.touch)
        supervisor.install_signal_handlers()
        self._announce(lambda: supervisor.signals > 0)  # after the handlers: a stop is never lost
        while not supervisor.any_exited():
            time.sleep(0.2)
        if not supervisor.signals:
            for name, proc in supervisor.children.items():
                if proc.returncode is not None:
                    what = "jobs process" if name == "jobs" else "server"
                    self.stderr.write(f"forqapp {name} {what} exited ({proc.returncode}); stopping\n")
            drain_file.touch()
            supervisor.stop()
            supervisor.wait()
            return 1
        supervisor.wait()
        self.stdout.write("forqapp stopped\n")
        return 0

    def _announce(self, stopping: Callable[[], bool]) -> None:
        """Say where each listener serves once it accepts connections (not before: a server that
        fails to start must not have been announced). Gives up when a stop is asked for."""
        pending = dict(self.listeners)
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline and not stopping():
            for name, (_, (host, port)) in list(pending.items()):
                if self.supervisor.children[name].poll() is not None:
                    return  # the supervisor reports it and stops the rest
                if _accepts(host, port):
                    self.stdout.write(listening(name, f"http://{host}:{port}") + "\n")
                    self.stdout.flush()
                    del pending[name]
            time.sleep(0.05)


def listening(name: str, origin: str) -> str:
    if name == "API":
        return f"forqapp API listening on {origin}"
    if name == "SQS":
        return f"forqapp SQS-compatible endpoint on {origin}"
    # The paths under the UI's own urlconf: "/" in the demo project, "/ui/" where a project
    # includes forqapp.urls.
    pages, admin = ui_paths()
    return f"forqapp admin UI on {origin}{pages}" + (f" (Django admin: {origin}{admin})" if admin else "")
