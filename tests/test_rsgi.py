"""forqapp.server.rsgi: the adapters that let the API's ASGI code run under granian's RSGI.

(A real granian serves RSGI to every ``live_api`` test; these are the adapters' own rules.)"""

from __future__ import annotations

import asyncio

import pytest

from forqapp.server import rsgi


def test_addresses():
    assert rsgi.address("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert rsgi.address("[::1]:443") == ("::1", 443)
    assert rsgi.address("::1:443") == ("::1", 443)


def test_the_paths_an_escaped_slash_may_have_been():
    assert list(rsgi.escaped_slash_paths("/api/v1/queues/a/b/messages")) == [
        "/api/v1/queues/a%2Fb/messages", "/api/v1/queues/a%2Fb%2Fmessages"]
    assert list(rsgi.escaped_slash_paths("/api/v1/queues/a")) == []
    assert list(rsgi.escaped_slash_paths("/healthcheck")) == []


class FakeProtocol:
    """Granian's RSGI protocol as it behaves: a body's chunks end with one empty chunk, and with
    two when the body broke off."""

    def __init__(self, chunks: list[bytes]):
        self.chunks = chunks
        self.gone = asyncio.Event()

    def __aiter__(self):
        async def chunks():
            for chunk in self.chunks:
                yield chunk
        return chunks()

    async def client_disconnect(self):
        await self.gone.wait()


async def _receive_all(protocol: FakeProtocol) -> list[dict]:
    receive = rsgi.BodyReceive(protocol)
    messages = []
    while True:
        messages.append(await receive())
        if not messages[-1].get("more_body"):
            return messages


def test_a_body_that_ends_with_one_empty_chunk_is_complete():
    messages = asyncio.run(_receive_all(FakeProtocol([b"ab", b"c", b""])))
    assert [m.get("body") for m in messages] == [b"ab", b"c", b""]
    assert messages[-1] == {"type": "http.request", "body": b"", "more_body": False}


def test_a_body_that_ends_with_two_empty_chunks_broke_off():
    messages = asyncio.run(_receive_all(FakeProtocol([b"ab", b"", b""])))
    assert messages[-1] == {"type": "http.disconnect"}


def test_after_the_body_comes_the_disconnect():
    async def main():
        protocol = FakeProtocol([b""])
        receive = rsgi.BodyReceive(protocol)
        assert (await receive())["more_body"] is False
        waiting = asyncio.ensure_future(receive())
        await asyncio.sleep(0.01)
        assert not waiting.done()  # the client is still there
        protocol.gone.set()
        return await waiting

    assert asyncio.run(main()) == {"type": "http.disconnect"}


def test_the_answer_goes_out_once_its_last_body_came():
    class Answering:
        def __init__(self):
            self.answers = []

        def response_bytes(self, status, headers, body):
            self.answers.append((status, headers, body))

    async def main(protocol):
        send = rsgi.ResponseSend(protocol)
        await send({"type": "http.response.start", "status": 201,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"7")]})
        await send({"type": "http.response.body", "body": b"{}", "more_body": True})
        assert protocol.answers == []
        await send({"type": "http.response.body", "body": b"12345"})

    protocol = Answering()
    asyncio.run(main(protocol))
    assert protocol.answers == [(201, [("content-type", "application/json")], b"{}12345")]


def _handler(log: list[str], fail: bool = False):
    async def lifespan(receive, send):
        while True:
            message = await receive()
            log.append(message["type"])
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.failed" if fail else "lifespan.startup.complete"})
                if fail:
                    return
            else:
                await asyncio.sleep(0.01)  # the shutdown's work runs on the loop
                log.append("stopped")
                await send({"type": "lifespan.shutdown.complete"})
                return
    return lifespan


def test_the_lifespan_starts_before_serving_and_stops_after():
    log: list[str] = []
    loop = asyncio.new_event_loop()
    try:
        lifespan = rsgi.Lifespan(_handler(log))
        lifespan.startup(loop)
        assert log == ["lifespan.startup"]
        lifespan.shutdown(loop)
        assert log == ["lifespan.startup", "lifespan.shutdown", "stopped"]
    finally:
        loop.close()


def test_a_failed_startup_raises():
    log: list[str] = []
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(RuntimeError, match="startup failed"):
            rsgi.Lifespan(_handler(log, fail=True)).startup(loop)
    finally:
        loop.close()


class DisconnectProtocol:
    """Granian's disconnect: each ``client_disconnect()`` an asyncio future, done when the client leaves."""

    def __init__(self):
        self.futures = []

    def client_disconnect(self):
        future = asyncio.get_running_loop().create_future()
        self.futures.append(future)
        return future

    def leave(self):
        for future in self.futures:
            if not future.done():
                future.set_result(None)


@pytest.mark.parametrize("left", [True, False])
def test_a_waiting_rsgi_request_watches_its_disconnect_with_a_callback_not_a_task(left):
    """The watch that cancels a waiting request when its client leaves: under RSGI it is a callback
    on granian's disconnect future (no task of its own); the request ends GONE when the client left,
    and otherwise its answer comes and the watch stops (the future is cancelled: granian stops
    watching)."""
    from forqapp.server import intake
    from forqapp.services import waiting

    protocol = DisconnectProtocol()
    tasks = []

    async def view():
        waiting._caller.get().arm()  # (what a wait does as it starts)
        tasks.append(len(asyncio.all_tasks()))
        if left:
            asyncio.get_running_loop().call_soon(protocol.leave)
            await asyncio.sleep(10)
        return "answer"

    async def main():
        return await intake.unless_disconnected(view(), rsgi.DisconnectReceive(protocol))

    result = asyncio.run(main())
    assert tasks == [1]  # the request's own, nothing more
    assert len(protocol.futures) == 1
    if left:
        assert result is intake.GONE
    else:
        assert result == "answer"
        assert protocol.futures[0].cancelled()


class KeptFuture:
    """Granian's disconnect future as it keeps things: the protocol holds it until the connection
    closes, and what it holds (its callbacks, even once it is cancelled) the garbage collector
    cannot see — here, a module-level table."""

    held: dict[int, list] = {}

    def __init__(self):
        self.held[id(self)] = []
        self.is_cancelled = False

    def add_done_callback(self, callback):
        self.held[id(self)].append(callback)

    def remove_done_callback(self, callback):
        callbacks = self.held[id(self)]
        kept = [c for c in callbacks if c != callback]
        self.held[id(self)] = kept
        return len(callbacks) - len(kept)

    def cancel(self):
        self.is_cancelled = True
        return True


def test_a_request_that_waited_leaves_nothing_behind_on_a_kept_alive_connection():
    """Granian keeps each disconnect future it gave until the connection closes, callbacks and
    all, where the garbage collector cannot see them: a watch that left its callback there (a
    cycle: future → callback → watch → future) kept the request's task, coroutine and protocol
    alive for as long as the client kept the connection — about 3 KB for every request that
    waited, without bound on a keep-alive connection (a soak measured 20 MB a minute)."""
    import gc
    import weakref

    from forqapp.server import intake
    from forqapp.services import waiting

    class Protocol:
        def __init__(self):
            self.futures = []  # the connection's, kept

        def client_disconnect(self):
            self.futures.append(KeptFuture())
            return self.futures[-1]

    protocol = Protocol()
    tasks = []

    async def view():
        tasks.append(weakref.ref(asyncio.current_task()))
        waiting._caller.get().arm()  # (what a wait does as it starts)
        await asyncio.sleep(0)
        return "answer"

    async def request():
        return await intake.unless_disconnected(view(), rsgi.DisconnectReceive(protocol))

    async def main():
        for _ in range(3):  # three requests on one connection
            assert await asyncio.get_running_loop().create_task(request()) == "answer"

    try:
        asyncio.run(main())
        gc.collect()
        assert len(protocol.futures) == 3 and all(f.is_cancelled for f in protocol.futures)
        assert [KeptFuture.held[id(f)] for f in protocol.futures] == [[], [], []]  # no callback left there
        assert [t() for t in tasks] == [None, None, None]  # each request's task is gone
    finally:
        KeptFuture.held.clear()
