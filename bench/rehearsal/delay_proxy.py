"""A TCP proxy that adds latency on demand: the rehearsal's stand-in for ``tc qdisc … netem delay``
on a kernel without ``sch_netem``.

    python -m bench.rehearsal.delay_proxy LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS

Each connection accepted on LISTEN is relayed to TARGET. ``SIGUSR1`` turns the delay on: from then,
every chunk the client sends reaches the target ``DELAY_MS`` later, in order (the target's answers
are not delayed: as netem on the client's outgoing interface, which adds the delay once to each
round trip). ``SIGUSR2`` turns it off; chunks already waiting keep their due time, so nothing is
reordered. Packet loss is not the proxy's: the rehearsal drops packets on the link itself with
nftables, so that the client's TCP retransmits as it would on a lossy network.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys


class Relay:
    def __init__(self, target: tuple[str, int], delay_s: float):
        self.target, self.delay_s, self.on, self.delayed = target, delay_s, False, 0

    def switch(self, on: bool) -> None:
        self.on = on
        print(f"delay {'on' if on else 'off'} ({self.delayed} chunks delayed so far)", flush=True)

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(self._pump(client_r, server_w, delayed=True),
                             self._pump(server_r, client_w, delayed=False), return_exceptions=True)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, delayed: bool) -> None:
        loop = asyncio.get_running_loop()
        pending: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await pending.get()
                if not data:
                    return
                if due > loop.time():
                    await asyncio.sleep(due - loop.time())
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            while data := await reader.read(65536):
                later = delayed and self.on
                self.delayed += later
                pending.put_nowait((loop.time() + (self.delay_s if later else 0), data))
        except OSError:
            pass
        finally:
            pending.put_nowait((0.0, b""))  # after what is still waiting: its due time holds
            with contextlib.suppress(OSError):
                await sender
            writer.close()  # one side ended: end the other (PostgreSQL's sessions end whole)


def address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def main(listen: str, target: str, delay_ms: str) -> None:
    relay = Relay(address(target), int(delay_ms) / 1000)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, relay.switch, True)
    loop.add_signal_handler(signal.SIGUSR2, relay.switch, False)
    server = await asyncio.start_server(relay.handle, *address(listen), backlog=512)
    print(f"delay proxy {listen} -> {target}, {delay_ms} ms when on", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
