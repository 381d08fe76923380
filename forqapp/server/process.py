"""What every long-running forqapp process shares: stopping on signals, logging by verbosity,
supervising child processes, and Prometheus's bookkeeping for processes that exit.

* :func:`on_stop` and :func:`install_signal_handlers`: the first SIGTERM/SIGINT calls every
  registered stop (the :class:`~forqapp.worker.Worker` finishes its messages in flight, the
  :class:`~forqapp.worker.jobs.Scheduler` gives its lease up); a second exits at once (code 1). The
  long-running objects register themselves (``Worker.install_signal_handlers()``), the commands
  only parse arguments and call.
* :class:`Supervisor`: child processes, each a management command whose options go to it as data
  (JSON in argv, run by ``python -m forqapp.server.process``): a new option of a command reaches its
  children without anyone remembering to pass it on. The supervisor passes the first signal on as
  SIGTERM, a second as SIGKILL, and marks exited children dead for Prometheus. ``forq_serve``'s
  supervisor (:mod:`forqapp.server.supervise`) runs one without Django: keep this module's imports free of
  it (Django is imported inside the functions that need it).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("forqapp")

# Set by forq_serve, to its verbosity, in its API workers' environment when they run the jobs
# (forqapp.api.asgi): an API application served by anything else never runs them.
SERVE_JOBS_ENV = "FORQ_SERVE_JOBS_VERBOSITY"

VERBOSITY_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def configure_logging(verbosity: int, name: str = "forqapp") -> None:
    """``-v0`` warnings, ``-v1`` info, ``-v2`` and more debug, on the ``forqapp`` logger (or the
    one under it called ``name``).

    A project whose ``LOGGING`` gives these records no handler — a ``startproject`` one: Django's
    default configuration has handlers for its own loggers only — would see nothing below WARNING
    (Python's last-resort handler): the ``forqapp`` logger then gets a handler to stderr of its own.
    A project that configures a handler for them (on ``forqapp`` or the root) keeps its own."""
    logging.getLogger(name).setLevel(VERBOSITY_LEVELS.get(verbosity, logging.DEBUG))
    if not logger.hasHandlers():
        handler = logging.StreamHandler()  # stderr
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logger.addHandler(handler)


_METRICS_FILE_PID = re.compile(r"_(\d+)\.db$")  # prometheus_client's <type>[_<mode>]_<pid>.db


def alive(pid: int) -> bool:
    """Whether process ``pid`` may exist (on this host): False only when it surely does not."""
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists (another user's) or cannot tell
    return True


def metrics_files_of_the_dead(directory: str) -> dict[int, list[str]]:
    """{pid: [file, ...]} of the processes gone that left files in a multiprocess directory."""
    dead: dict[int, list[str]] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return dead
    for name in names:
        match = _METRICS_FILE_PID.search(name)
        if match and not alive(pid := int(match.group(1))):
            dead.setdefault(pid, []).append(os.path.join(directory, name))
    return dead


def metrics_writers_alive(directory: str, besides: int | None = None) -> bool:
    """Whether a process still running (other than ``besides``) has files in a multiprocess directory."""
    try:
        names = os.listdir(directory)
    except OSError:
        return False
    pids = {int(m.group(1)) for name in names if (m := _METRICS_FILE_PID.search(name))}
    return any(alive(pid) for pid in pids - {besides})


def unshared_metrics(command: str) -> str | None:
    """The line a ``command`` (``forq_worker``, ``forq_jobs``) says at start when metrics are on
    (``FORQ_METRICS_ENABLED``) but it has no ``PROMETHEUS_MULTIPROC_DIR``: its counts stay in its
    own memory, and ``/metrics`` (another process) never sees them. None when all is well."""
    from ..conf import forq_settings  # (here: the supervisor imports this module without Django)

    if not forq_settings.FORQ_METRICS_ENABLED or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    return (f"{command}: metrics are on (FORQ_METRICS_ENABLED) but PROMETHEUS_MULTIPROC_DIR is not set: "
            "this process's counts will not reach /metrics (give it the server's directory; forq_serve "
            "sets up var/prometheus under BASE_DIR when it is unset)")


def mark_dead(pid: int | None = None) -> None:
    """In Prometheus multiprocess mode, drop the live gauges of ``pid`` (default: this process),
    which has exited or is about to (django-prometheus #407, #429)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(os.getpid() if pid is None else pid)


def skip_final_collection() -> None:
    """The process is about to exit, its work done and closed: spare it the interpreter's last
    garbage collections, which walk every object once more to free memory the exit frees anyway
    (measured: over a second on a busy host, between a worker's "stopped" and its exit; 0.1 s
    without them). The objects go to the collector's permanent generation (``gc.freeze``); the
    ``atexit`` handlers and the flushing of stdout and stderr still run."""
    gc.freeze()


#: The collector's thresholds in a server process (CPython's are 700, 10, 10). Each long poll's
#: objects live through its wait, so they outlive the youngest generation and are walked again in
#: the middle one, every ten collections of the youngest: with 2,000 polls of 30 s, the collections
#: took 25 µs of the worker's CPU per poll asking again, 11 µs with these (``gc.callbacks``); the
#: middle generation then runs once per 250,000 allocations, the oldest at most once per 2.5 million.
SERVER_GC_THRESHOLDS = (5000, 50, 10)


def freeze_started() -> None:
    """A server process has started: what start-up made and keeps for the process's life (Django's
    settings, apps, URL patterns, the modules) goes to the collector's permanent generation
    (``gc.freeze``, after a collection of start-up's garbage), so that the collections that
    requests' allocations bring no longer walk it each time (measured: a third of an API worker's
    event loop CPU while 2,000 long polls ask again); the collector's thresholds become
    :data:`SERVER_GC_THRESHOLDS`."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVER_GC_THRESHOLDS)


# --- stopping on signals -------------------------------------------------------------------------

_stops: list[Callable[[], None]] = []
_installed: dict[str, Any] = {}
_received = 0


def on_stop(callback: Callable[[], None]) -> None:
    """Call ``callback`` on the first SIGTERM/SIGINT (see :func:`install_signal_handlers`)."""
    _stops.append(callback)


def install_signal_handlers(name: str, *, doing: str = "stopping", last_words: str | None = None) -> None:
    """First SIGTERM/SIGINT: log ``"<name>: SIGTERM received, <doing>"`` and call every
    :func:`on_stop` callback; a second exits at once with code 1 (writing ``last_words`` to stderr).

    Installed once per process (later calls only add nothing). A SIGINT ignored from the start
    stays ignored, as Unix expects of a process started so (``nohup``, a background job of a
    script): only SIGTERM stops it then.

    The callbacks run on a thread of their own, not in the signal handler: Python runs a handler in
    the main thread between two of its bytecodes, maybe while that thread holds a lock the callback
    needs. A worker's stop sets a ``threading.Event``, which takes the lock of the event's condition:
    a signal that came while the worker's main thread was inside that event's ``clear()`` or
    ``wait()`` deadlocked it with itself, and the worker never stopped.

    The signal reaches that thread through Python's wakeup fd (:func:`signal.set_wakeup_fd`), which
    the C-level handler writes in whatever thread the kernel gave the signal to. A handler written in
    Python runs only in the main thread, once that thread runs Python again: a worker idle in a long
    wait on an event, with the signal given to another of its threads, ran it only when the wait
    ended (up to its 30 s), and stopped no sooner."""
    if _installed:
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # as the wakeup fd must be
    _installed.update(name=name, doing=doing, last_words=last_words, pipe=write_end)
    try:
        _installed["previous_wakeup"] = signal.set_wakeup_fd(write_end)
    except ValueError:  # not the main thread: the Python handler writes to the pipe itself
        pass
    threading.Thread(target=_stop_when_signalled, args=(read_end,), name="forq-signals", daemon=True).start()
    signal.signal(signal.SIGTERM, _on_signal)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _on_signal)


def _on_signal(signum: int, frame: Any) -> None:
    """The Python handler (it keeps the default action away); without the wakeup fd, it tells
    :func:`_stop_when_signalled` itself (a write to a pipe takes no lock)."""
    if "previous_wakeup" not in _installed:
        os.write(_installed["pipe"], bytes([signum]))


def _stop_when_signalled(read_end: int) -> None:
    """The thread that waits for the signals: the first is logged and calls the stops, a second
    exits now (code 1, writing the last words)."""
    global _received
    stopping = (signal.SIGTERM, signal.SIGINT)
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        while got := pipe.read(1):
            if got[0] not in stopping:
                continue  # another signal Python handles in this process
            _received += 1
            if _received > 1:
                if _installed.get("last_words"):
                    sys.stderr.write(_installed["last_words"] + "\n")
                    sys.stderr.flush()
                os._exit(1)
            # A stop asked for is routine: INFO (shown at the default verbosity), not a warning.
            logger.info("%s: %s received, %s", _installed["name"], signal.Signals(got[0]).name, _installed["doing"])
            for stop in _stops:
                stop()


def reset_signal_handlers() -> None:
    """Forget the stops and restore the default handlers (for tests that run several in a process)."""
    global _received
    if "previous_wakeup" in _installed:
        signal.set_wakeup_fd(_installed["previous_wakeup"])
    if "pipe" in _installed:
        os.close(_installed["pipe"])
    _stops.clear()
    _installed.clear()
    _received = 0
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


# --- children ------------------------------------------------------------------------------------


def child_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child: its settings module and its import path."""
    from django.conf import settings

    env = dict(os.environ if env is None else env)
    env["DJANGO_SETTINGS_MODULE"] = settings.SETTINGS_MODULE or env.get("DJANGO_SETTINGS_MODULE", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def command_argv(command: str, options: dict[str, Any], args: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The command line of a child that runs ``manage.py <command> *args`` with ``options`` (by
    their ``dest`` names, as :func:`~django.core.management.call_command` takes them)."""
    return [sys.executable, "-c", "import sys; from forqapp.server.process import run_child; sys.exit(run_child(sys.argv[1]))",
            json.dumps({"command": command, "args": list(args), "options": options})]


class Supervisor:
    """Child processes: started, stopped on signals (first SIGTERM, then SIGKILL), waited for."""

    def __init__(self) -> None:
        self.children: dict[str, subprocess.Popen] = {}
        self.own_groups: set[str] = set()  # children started in a process group of their own
        self.signals = 0
        self._on_first: list[Callable[[], None]] = []
        self._bell: int | None = None  # read end of the signals' wakeup descriptor (see pause)

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None, *,
              own_group: bool = False, ignore_sigint: bool = False, die_with_parent: bool = False) -> subprocess.Popen:
        """Start a child (with ``own_group``, in a process group of its own: a terminal's Ctrl-C
        reaches only this supervisor, which passes it on). With ``ignore_sigint`` the child starts
        with SIGINT ignored (:func:`install_signal_handlers` keeps it so): a Ctrl-C, which a
        terminal sends to the whole group, stops it through the SIGTERM this supervisor passes on
        alone, as one signal, not two (a second signal means "exit now"). With ``die_with_parent``
        (Linux), the child gets SIGTERM if this supervisor dies (``kill -9``): a child in a group of
        its own would outlive it otherwise."""
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if ignore_sigint else None
        try:
            proc = subprocess.Popen(argv, env=env, process_group=0 if own_group else None,
                                    preexec_fn=_terminate_with(os.getpid()) if die_with_parent else None)
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        self.children[name] = proc
        if own_group:
            self.own_groups.add(name)
        return proc

    def start_command(self, name: str, command: str, options: dict[str, Any], args: list[str] | tuple[str, ...] = (),
                      **kwargs: Any) -> subprocess.Popen:
        """A child that runs ``manage.py <command> *args`` with ``options`` given as data."""
        return self.start(name, command_argv(command, options, args), child_environment(), **kwargs)

    def on_first_signal(self, callback: Callable[[], None]) -> None:
        self._on_first.append(callback)

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        if self._bell is None:
            self._bell = _signal_bell()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop(kill=self.signals > 0)

    def stop(self, *, kill: bool = False) -> None:
        """SIGTERM to every running child (SIGKILL with ``kill``: to a child's whole group when it
        has one of its own, so a server's workers go with it); the first time, the
        :meth:`on_first_signal` callbacks too."""
        first = self.signals == 0
        self.signals += 1
        for name, proc in self.children.items():
            if kill and name in self.own_groups:
                self._kill_group(proc)
            elif proc.poll() is None:
                proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        if first:
            for callback in self._on_first:
                callback()

    @staticmethod
    def _kill_group(proc: subprocess.Popen) -> None:
        """SIGKILL to the group a child leads (its pid): the child, and what it started that is
        still there — a granian server's workers outlive it otherwise, still serving its port."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    def any_exited(self) -> bool:
        return any(proc.poll() is not None for proc in self.children.values())

    def pause(self, timeout: float) -> None:
        """Sleep until a signal comes (a child exiting, a stop) or ``timeout`` seconds pass: an idle
        supervisor wakes for nothing (a poll of its children five times a second costs ~1 ms of CPU
        a second). :meth:`install_signal_handlers` sets up what it waits on: call that first, before the
        children start (a signal before it would not end the pause; the next check sees it)."""
        if self._bell is None:  # (no wakeup descriptor here: a short nap)
            time.sleep(min(timeout, 0.2))
            return
        select.select([self._bell], [], [], timeout)
        with contextlib.suppress(BlockingIOError):
            while os.read(self._bell, 512):
                pass

    def wait(self, grace: float | None = None) -> dict[str, int]:
        """Wait for every child; their exit codes, by name. With ``grace``, a child still running
        that many seconds later is killed (its group too). Then what is left of the children's own
        groups is killed: a server whose main process died leaves its workers serving otherwise.
        Exited children are marked dead for Prometheus (their live gauges no longer count)."""
        deadline = None if grace is None else time.monotonic() + grace
        codes = {}
        for name, proc in self.children.items():
            try:
                codes[name] = proc.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stop(kill=True)
                codes[name] = proc.wait()
        for name, proc in self.children.items():
            if name in self.own_groups:
                self._kill_group(proc)
            mark_dead(proc.pid)
        return codes


def _signal_bell() -> int | None:
    """A pipe's read end that every signal with a Python handler writes to (``signal.set_wakeup_fd``),
    SIGCHLD included (given a handler that does nothing): what :meth:`Supervisor.pause` waits on. None
    where a wakeup descriptor is taken already (someone else's) or cannot be set."""
    if not hasattr(signal, "SIGCHLD"):
        return None
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    try:
        previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        if previous != -1:
            signal.set_wakeup_fd(previous)  # (someone else's: leave it theirs)
            raise ValueError("a wakeup descriptor is set already")
        signal.signal(signal.SIGCHLD, _child_exited)
    except ValueError:  # not the main thread, or one set already
        os.close(read)
        os.close(write)
        return None
    return read


def _child_exited(signum: int, frame: Any) -> None:
    """SIGCHLD's handler: nothing to do here; its byte on the wakeup descriptor ends a pause."""


def _terminate_with(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to send the child SIGTERM when ``parent`` dies (prctl's
    PR_SET_PDEATHSIG); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the request was made
            os._exit(1)

    return preexec


def run_child(spec: str) -> int:
    """A child's ``'{"command": …, "args": […], "options": {…}}'`` (:func:`command_argv`): run it as
    ``manage.py`` would, in this process; its exit code."""
    import django
    from django.core.management import call_command
    from django.core.management.base import CommandError

    data = json.loads(spec)
    django.setup()
    try:
        call_command(data["command"], *data["args"], **data["options"])
    except CommandError as exc:
        sys.stderr.write(f"CommandError: {exc}\n")
        return exc.returncode
    finally:
        skip_final_collection()  # the child exits now
    return 0

