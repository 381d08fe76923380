"""``python -m forqapp.server.granian_main``: granian's command line (what ``python -m granian`` runs),
with one race of its process workers mended.

granian (2.8) watches each worker process with a thread that ``join()``\\s it, and stops a worker
by ``terminate()``, ``join(kill_timeout)`` and ``is_alive()``. When the watcher thread reaps the
exited worker first, the server's own ``join`` finds no child (``ECHILD``) and multiprocessing
reports the worker alive: granian logs ``Killing worker-1 after it refused to gracefully stop``
at once, for a worker that had stopped (an outside audit saw it on a plain SIGTERM; a loop of
``terminate``/``join`` beside a joining thread shows it 1 to 2 times in 300, never with the fix).
The process's sentinel says whether it has ended, whoever reaped it: ``is_alive`` asks it too.
Nothing else of granian is changed."""

from __future__ import annotations

from multiprocessing.connection import wait

from granian.cli import entrypoint
from granian.server.mp import WorkerProcess


def _is_alive(self: WorkerProcess) -> bool:
    inner = self.inner
    return inner.is_alive() and not wait([inner.sentinel], 0)


WorkerProcess.is_alive = _is_alive  # type: ignore[method-assign,assignment]

if __name__ == "__main__":
    entrypoint()
