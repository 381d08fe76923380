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


def _watch_drain_file(path, settle_s, then=None, grace_s=5.0):
    """Run watch_drain_file(path) for ``settle_s`` seconds counting its looks at the file, then
    ``then()`` (if any) and up to ``grace_s`` more: (whether it drained, the looks during the first wait)."""
    looks = []
    real_exists = waiting.os.path.exists

    def exists(p):
        looks.append(p)
        return real_exists(p)

    async def run():
        task = asyncio.ensure_future(waiting.watch_drain_file(str(path)))
        await asyncio.sleep(settle_s)
        idle_looks = len(looks)
        if then is not None:
            then()
        try:
            await asyncio.wait_for(task, grace_s)
        except TimeoutError:
            return False, idle_looks
        return True, idle_looks

    waiting.os.path.exists = exists
    try:
        return asyncio.run(run())
    finally:
        waiting.os.path.exists = real_exists
        waiting._undrain()


def test_the_drain_file_drains_when_it_comes_and_an_idle_watch_does_not_poll(tmp_path):
    """forq_serve's drain file: the watch drains the process once the file is there, and while it is
    not (an idle server) it wakes for nothing: one look at the start, none again until something
    arrives in the file's folder (where inotify is missing it looks every DRAIN_FILE_POLL_S)."""
    from forqapp.store import inotify

    path = tmp_path / "draining"
    drained, idle_looks = _watch_drain_file(path, 1.0, then=path.touch)
    assert drained
    if inotify.arrivals(str(tmp_path)) is not None:  # (Linux)
        assert idle_looks == 1
    else:
        assert idle_looks >= 1.0 / waiting.DRAIN_FILE_POLL_S - 1


def test_the_drain_file_there_already_drains_at_once_and_other_files_do_not(tmp_path):
    (tmp_path / "draining").touch()
    assert _watch_drain_file(tmp_path / "draining", 0.1)[0]
    drained, _ = _watch_drain_file(tmp_path / "other-draining", 0.2, then=(tmp_path / "unrelated").touch,
                                   grace_s=0.5)
    assert not drained
