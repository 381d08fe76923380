"""forqapp.server.intake.lifespan: what a listener's process does at start-up and at shutdown."""

from __future__ import annotations

import asyncio
import gc

from forqapp.server import intake, process
from forqapp.services import waiting


def test_startup_freezes_what_it_made_and_shutdown_drains():
    """At start-up the objects made so far go to the collector's permanent generation (later
    collections no longer walk them) and the collector's thresholds become the server's; at
    shutdown waits end (the drain)."""
    gc.unfreeze()
    thresholds = gc.get_threshold()
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent = []
    frozen = []

    async def receive():
        if len(messages) == 1:
            frozen.append((gc.get_freeze_count(), gc.get_threshold()))  # after start-up, before shutdown
        return messages.pop(0)

    async def send(message):
        sent.append(message["type"])

    try:
        asyncio.run(intake.lifespan(receive, send))
        assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
        assert frozen and frozen[0][0] > 1000
        assert frozen[0][1] == process.SERVER_GC_THRESHOLDS != thresholds
        assert waiting.draining()
    finally:
        waiting._undrain()
        gc.unfreeze()
        gc.set_threshold(*thresholds)
