"""``manage.py forq_serve``: the API on FORQ_API_ADDR, the admin UI on FORQ_UI_ADDR, and the
background jobs.

Both run on granian (Rust HTTP server, ASGI): the API through forqapp's own ASGI application (long
polls are coroutines, so hundreds of idle consumers cost no threads), the UI through Django's ASGI
handler. Each listener is a granian process tree of its own; this command supervises them, passes
SIGTERM/SIGINT on (granian stops accepting, lets in-flight requests finish, and waiting long polls
answer 204 at once), and exits when they have.

The jobs run as a ``forq_jobs`` child process (its own metrics, in the same multiprocess directory
as the API's; a slow job never holds up the supervisor). It runs them only while it holds the
database's jobs lease, so any number of ``forq_serve`` (and ``forq_jobs``) on one database run them
once; ``--no-jobs`` or ``FORQ_SERVE_JOBS=false`` leaves them to ``forq_jobs`` or cron.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from ... import services
from ...checks import parse_addr, serve_problems
from ...conf import forq_settings
from ...envconfig import ERRORS, env_bool
from ...serving import collected_static_root, ui_paths


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def _unbindable(host: str, port: int) -> str | None:
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


def _jobs_enabled() -> bool:
    """``FORQ_SERVE_JOBS``: the setting if settings.py has it, else the environment variable (so
    it works in any project, not only the demo's), else on."""
    configured = getattr(settings, "FORQ_SERVE_JOBS", None)
    if configured is not None:
        return bool(configured)
    errors = len(ERRORS)
    enabled = env_bool("FORQ_SERVE_JOBS", True)
    if len(ERRORS) > errors:
        raise CommandError("cannot start: " + ERRORS.pop())
    return enabled


class Command(BaseCommand):
    help = (
        "Serve forqapp's HTTP API (FORQ_API_ADDR) and admin UI (FORQ_UI_ADDR) with granian, and run "
        "the background jobs (one scheduler per database, by a lease in the database)."
    )
    requires_system_checks: list = []  # checked below, with one-line messages

    def add_arguments(self, parser):
        parser.add_argument(
            "--api-workers",
            type=_positive,
            default=None,
            help="API worker processes (default FORQ_API_WORKERS, 2).",
        )
        parser.add_argument(
            "--ui-workers",
            type=_positive,
            default=None,
            help="UI worker processes (default FORQ_UI_WORKERS, 1).",
        )
        parser.add_argument("--no-ui", action="store_true", help="Serve the API only.")
        parser.add_argument("--no-jobs", action="store_true",
                            help="Run no background jobs (FORQ_SERVE_JOBS=false does the same): "
                                 "leave them to forq_jobs or cron.")

    def handle(self, *args, **options):
        problems = serve_problems()
        if problems:  # the listeners' addresses must parse before they can be tried
            raise CommandError("cannot start: " + "; ".join(problems))
        listeners = {"API": ("FORQ_API_ADDR", parse_addr(forq_settings.FORQ_API_ADDR))}
        if forq_settings.FORQ_UI_ENABLED and not options["no_ui"]:
            listeners["UI"] = ("FORQ_UI_ADDR", parse_addr(forq_settings.FORQ_UI_ADDR))
        problems = self._database_problems() + [
            f"{setting} {host}:{port} cannot be listened on ({reason})"
            for setting, (host, port) in listeners.values()
            if (reason := _unbindable(host, port))
        ]
        if problems:
            raise CommandError("cannot start: " + "; ".join(problems))
        jobs = not options["no_jobs"] and _jobs_enabled()
        env = self._environment()
        drain_file = Path(tempfile.mkdtemp(prefix="forq-serve-")) / "draining"
        env["FORQ_DRAIN_FILE"] = str(drain_file)
        api_host, api_port = listeners["API"][1]
        procs = {
            "API": self._granian(
                env,
                "forqapp.asgi:api_application",
                api_host,
                api_port,
                options["api_workers"] or forq_settings.FORQ_API_WORKERS,
            ),
        }
        if "UI" in listeners:
            ui_host, ui_port = listeners["UI"][1]
            procs["UI"] = self._granian(
                env,
                "forqapp.asgi:ui_application",
                ui_host,
                ui_port,
                options["ui_workers"] or forq_settings.FORQ_UI_WORKERS,
                static=True,
                lifespan=False,
            )
        if jobs:
            procs["jobs"] = self._jobs(env, options["verbosity"])
        try:
            self._supervise(procs, drain_file, listeners)
        finally:
            shutil.rmtree(drain_file.parent, ignore_errors=True)

    def _announce(self, procs: dict[str, subprocess.Popen], listeners: dict, stopping) -> None:
        """Say where each listener serves once it accepts connections (not before: a server that
        fails to start must not have been announced). Gives up when a stop is asked for."""
        pending = dict(listeners)
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline and not stopping():
            for name, (_, (host, port)) in list(pending.items()):
                if procs[name].poll() is not None:
                    return  # the supervisor reports it and stops the rest
                if _accepts(host, port):
                    self.stdout.write(self._listening(name, f"http://{host}:{port}"))
                    self.stdout.flush()
                    del pending[name]
            time.sleep(0.05)

    @staticmethod
    def _listening(name: str, origin: str) -> str:
        if name == "API":
            return f"forqapp API listening on {origin}"
        # The paths under the UI's own urlconf: "/" in the demo project, "/ui/" where a project
        # includes forqapp.urls.
        pages, admin = ui_paths()
        return f"forqapp admin UI on {origin}{pages}" + (f" (Django admin: {origin}{admin})" if admin else "")

    def _database_problems(self) -> list[str]:
        connection = connections[forq_settings.FORQ_DATABASE]
        problems = services.startup_problems()
        if problems:
            return problems
        try:
            executor = MigrationExecutor(connection)
            pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        except Exception as exc:  # noqa: BLE001 - reported in one line
            return [f"database {connection.settings_dict['NAME']!s} unusable ({exc})"]
        finally:
            connection.close()
        if pending:
            return ["the database has unapplied migrations: run `python manage.py migrate`"]
        return []

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("DJANGO_SETTINGS_MODULE", os.environ.get("DJANGO_SETTINGS_MODULE", "project.settings"))
        if forq_settings.FORQ_METRICS_ENABLED and not env.get("PROMETHEUS_MULTIPROC_DIR"):
            # Several processes serve: prometheus_client adds their values up from this directory.
            directory = (
                Path(settings.BASE_DIR if hasattr(settings, "BASE_DIR") else ".") / "var" / "prometheus"
            )
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            env["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
        return env

    def _granian(self, env, target, host, port, workers, static=False, lifespan=True) -> subprocess.Popen:
        command = [
            sys.executable,
            "-m",
            "granian",
            "--interface",
            "asgi" if lifespan else "asginl",
            "--factory",
            "--host",
            host,
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--loop",
            "uvloop" if sys.platform != "win32" else "auto",
            "--backlog",
            "4096",
            "--log-level",
            "warning",
            "--workers-kill-timeout",
            "35",
        ]
        # Collected static files are served by granian from disk; otherwise the UI application serves
        # them through Django's finders (forqapp.asgi.ui_application).
        static_root = collected_static_root()
        if static and static_root:
            command += [
                "--static-path-route",
                "/" + settings.STATIC_URL.strip("/"),
                "--static-path-mount",
                str(static_root),
            ]
        return subprocess.Popen(command + [target], env=env)

    def _jobs(self, env, verbosity: int) -> subprocess.Popen:
        """``forq_jobs`` as a child, started with SIGINT ignored: a Ctrl-C reaches the whole process
        group, and the child must stop on the one SIGTERM this supervisor sends it (it then gives
        the lease up at once)."""
        env = {**env, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        command = [sys.executable, "-m", "django", "forq_jobs", "--verbosity", str(verbosity),
                   "--settings", settings.SETTINGS_MODULE]
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited through exec
        try:
            return subprocess.Popen(command, env=env)
        finally:
            signal.signal(signal.SIGINT, previous)

    def _supervise(self, procs: dict[str, subprocess.Popen], drain_file: Path, listeners: dict) -> None:
        stopping = False

        def stop(signum, frame):
            nonlocal stopping
            drain_file.touch()
            for proc in procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL if stopping else signal.SIGTERM)
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self._announce(procs, listeners, lambda: stopping)  # after the handlers: a stop is never lost
        while all(proc.poll() is None for proc in procs.values()):
            time.sleep(0.2)
        if not stopping:
            for name, proc in procs.items():
                if proc.returncode is not None:
                    what = "jobs process" if name == "jobs" else "server"
                    self.stderr.write(f"forqapp {name} {what} exited ({proc.returncode}); stopping")
            stop(signal.SIGTERM, None)
            stopping = False
        for proc in procs.values():
            proc.wait()
        if stopping:
            self.stdout.write("forqapp stopped")
            return
        sys.exit(1)
