"""The least an idle long poll can cost under granian (``bench/idle_polls_bench.py``'s floor): an RSGI
application that holds each request until its client leaves or 30 s pass, then answers 204; it
answers ``/healthcheck`` at once.

    granian --interface rsgi --no-ws --loop uvloop bench.idle_floor_app:app
"""

from __future__ import annotations

import asyncio
import os

WAIT_S = float(os.environ.get("FORQ_LONG_POLL_SECONDS", "30"))


class App:
    async def __rsgi__(self, scope, protocol) -> None:
        if scope.path == "/healthcheck":
            protocol.response_bytes(204, [], b"")
            return
        try:  # a long poll must notice its client leaving (a message must not go to nobody)
            await asyncio.wait_for(protocol.client_disconnect(), WAIT_S)
            return
        except TimeoutError:
            protocol.response_bytes(204, [], b"")


app = App()
