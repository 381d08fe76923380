"""A listener served inside another's worker process: ``forq_serve``'s admin UI in its API worker.

On the defaults (one API worker, one UI worker: SQLite's), ``forq_serve`` used to run the UI as a
granian process tree of its own: a granian main process (~16 MB) and a worker holding a second copy
of Python, Django and forqapp (~45 MB, PSS), for a listener that serves a few pages to staff. Now
the API worker serves it too, on the same event loop, with granian's embedded server on the UI's
own address: one copy of Django for both. The UI's requests run their Django code in threads of
their own (Django's ASGI handler), so the API's event loop never waits for a page; its database
connections are closed after each request (:mod:`forqapp.ui.asgi`), those of the API's threads
stay open.

``forq_serve`` asks for it in the API worker's environment (:data:`EMBEDDED_ENV`, JSON, set by
:meth:`forqapp.server.serving.Server.spec`); the API's lifespan starts it before the worker takes
requests and stops it at shutdown, after the waiting long polls were drained. If it stops by
itself, the worker stops (SIGTERM to itself) and granian starts another: the UI is never silently
gone. With more workers (``--api-workers``, PostgreSQL's default of 2, ``--ui-workers``) the UI runs
in its own granian tree as before.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

from . import supervise

EMBEDDED_ENV = "FORQ_SERVE_EMBEDDED"

logger = logging.getLogger("forqapp.server")


def from_environment() -> list[EmbeddedListener]:
    """The listeners ``forq_serve`` asked this worker to serve (none when served otherwise)."""
    return [EmbeddedListener(spec) for spec in json.loads(os.environ.get(EMBEDDED_ENV) or "[]")]


def _experimental_notice(record: logging.LogRecord) -> bool:
    return "Embedded server is experimental" not in record.getMessage()


class EmbeddedListener:
    """``spec``: ``{"name", "target": "module:factory", "host", "port", "backlog", "static": [route,
    directory] or null}``, the same options ``forq_serve`` gives a granian process of its own."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.server: Any = None
        self.task: asyncio.Task | None = None
        self.stopping = False

    def _factory(self) -> Any:
        module, _, name = self.spec["target"].partition(":")
        return getattr(importlib.import_module(module), name)  # a face's factory, named as granian names it

    async def start(self) -> None:
        """Listen; returns once the socket is bound and the application made (raises if either fails)."""
        from granian.constants import Interfaces  # (the server's dependency, in the server's process only)
        from granian.log import LogLevels
        from granian.log import logger as granian_logger
        from granian.server.embed import Server

        static = self.spec.get("static")
        self.server = Server(
            self._factory(), address=self.spec["host"], port=int(self.spec["port"]), interface=Interfaces.ASGINL,
            factory=True, backlog=int(self.spec.get("backlog", 4096)), log_level=LogLevels.warning,
            static_path_route=[static[0]] if static else None, static_path_mount=[Path(static[1])] if static else None,
        )
        self.server.workers_kill_timeout = int(supervise.STOP_GRACE_S)  # as forq_serve's granian processes
        if _experimental_notice not in granian_logger.filters:
            granian_logger.addFilter(_experimental_notice)  # said at every start; what it serves is tested here
        self.task = asyncio.ensure_future(self.server.serve())
        while not self.server.wrks and not self.task.done():  # its worker is spawned once it listens
            await asyncio.sleep(0.01)
        if self.task.done():
            self.task.result()  # raises what stopped it
            raise RuntimeError(f"the {self.spec['name']} listener stopped as it started")
        self.task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task) -> None:
        if self.stopping:
            return
        error = None if task.cancelled() else task.exception()
        logger.error("forqapp %s listener stopped by itself (%s); stopping this worker for granian to replace it",
                     self.spec["name"], error or "no error")
        os.kill(os.getpid(), signal.SIGTERM)

    async def stop(self) -> None:
        """Stop accepting, let the requests in flight finish (at most the stop grace), and return."""
        if self.server is None or self.task is None:
            return
        self.stopping = True
        self.server.stop()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), supervise.STOP_GRACE_S + 1)
        except Exception:  # noqa: BLE001 - stopping: said, not raised
            logger.warning("forqapp %s listener did not stop cleanly", self.spec["name"], exc_info=True)
