"""``forq_serve``'s supervisor, without Django: ``python -m forqapp.server.supervise '<json>'``.

``forq_serve`` checks the configuration, the database and the ports with Django, computes what the
supervision needs (:meth:`forqapp.server.serving.Server.spec`: each child's command line and environment,
the drain file, the line that announces each listener) and then replaces itself with this module
(``os.execve``: the same pid, so whoever started ``forq_serve`` still signals the right process).
A full Django process that only waits on its children would hold ~40 MB for nothing; this one
imports :mod:`forqapp` (its errors only) and :mod:`forqapp.server.process`, and prometheus_client when it
marks exited children dead.

It starts the children, says where each listener serves once it accepts connections, passes the
first SIGTERM/SIGINT on as SIGTERM (after creating the drain file: waiting long polls answer 204
at once) and a second as SIGKILL, and exits 0 once they have stopped ("forqapp stopped"); when a
child exits by itself, it says so, stops the others and exits 1.

Keep it free of Django: ``tests/test_serve.py`` checks that the running supervisor has none loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from . import process


def accepts(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host:port`` (a wildcard host: this machine)."""
    target = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host  # noqa: S104
    try:
        socket.create_connection((target, port), timeout=0.5).close()
    except OSError:
        return False
    return True


#: How long a stop waits for the servers before it kills them. Requests are short and waiting long
#: polls end at once (the drain file); a granian worker still starting when the stop came misses
#: it, and granian waits its kill timeout (set to this too: :func:`forqapp.server.serving.granian_command`),
#: serving meanwhile.
STOP_GRACE_S = 10.0


def command(spec: dict[str, Any]) -> list[str]:
    """The command line that runs this supervisor on ``spec`` (see :func:`run`)."""
    return [sys.executable, "-m", "forqapp.server.supervise", json.dumps(spec)]


def run(spec: dict[str, Any], *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Supervise until stopped; the exit code (0 after a signal, 1 when a child exited by itself).

    ``spec``: ``{"children": [{"name", "argv", "env"}], "listeners": [{"name", "child", "host", "port",
    "line"}], "drain_file": path, "cleanup": directory or null}`` (a listener's ``child``: the child
    that serves it, by name; its own name when absent). Each child's ``env`` is added to
    this process's environment; ``cleanup`` is removed at the end (it holds the drain file)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    supervisor = process.Supervisor()
    drain_file = Path(spec["drain_file"])
    try:
        supervisor.on_first_signal(drain_file.touch)
        supervisor.install_signal_handlers()  # before any child starts: a stop is never lost
        # A signal to the whole process group — Ctrl-C at a terminal, `kill -- -PGID`, a process
        # manager stopping a group — reached granian's workers too, which then exited under their
        # parent's feet ("Unexpected exit from worker-1"; now and then granian then hung, or waited
        # its kill timeout). Each granian gets a group of its own, so the stop comes from here
        # alone, in order; and SIGTERM if this supervisor dies, so none outlives it.
        for child in spec["children"]:
            if supervisor.signals:
                break
            supervisor.start(child["name"], child["argv"], {**os.environ, **child.get("env", {})}, own_group=True,
                             die_with_parent=True)
        _announce(supervisor, spec["listeners"], stdout)
        while not supervisor.any_exited() and not (supervisor.signals and not supervisor.children):
            supervisor.pause(5.0)
        if not supervisor.signals:
            for name, proc in supervisor.children.items():
                if proc.returncode is not None:
                    stderr.write(f"forqapp {name} server exited ({proc.returncode}); stopping\n")
                    stderr.flush()
            drain_file.touch()
            supervisor.stop()
            supervisor.wait(STOP_GRACE_S)
            return 1
        supervisor.wait(STOP_GRACE_S)
        stdout.write("forqapp stopped\n")
        stdout.flush()
        return 0
    finally:
        if spec.get("cleanup"):
            shutil.rmtree(spec["cleanup"], ignore_errors=True)


def _announce(supervisor: process.Supervisor, listeners: list[dict[str, Any]], stdout: TextIO) -> None:
    """Say where each listener serves once it accepts connections (not before: a server that
    fails to start must not have been announced). Gives up when a stop is asked for."""
    pending = list(listeners)
    deadline = time.monotonic() + 60
    while pending and time.monotonic() < deadline and not supervisor.signals:
        for listener in list(pending):
            if supervisor.children[listener.get("child", listener["name"])].poll() is not None:
                return  # the supervision reports it and stops the rest
            if accepts(listener["host"], listener["port"]):
                stdout.write(listener["line"] + "\n")
                stdout.flush()
                pending.remove(listener)
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return run(json.loads(args[0]))


if __name__ == "__main__":
    sys.exit(main())
