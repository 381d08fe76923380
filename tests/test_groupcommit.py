"""forqapp.services.groupcommit: the API's hot writes of one process share transactions, and each caller
still gets its own outcome, only once its transaction committed."""

from __future__ import annotations

import asyncio

import pytest
from django.db import DatabaseError

import forqapp
from forqapp import errors, services
from forqapp.errors import ForqError
from forqapp.models import Message
from forqapp.services import groupcommit

pytestmark = pytest.mark.django_db(transaction=True)


def _contents(queue: str) -> list[str]:
    return list(Message.objects.filter(queue=queue).order_by("sequence").values_list("content", flat=True))


def test_a_group_runs_every_call_in_order_and_a_refused_call_is_only_its_own():
    delivered = forqapp.send("g", "first")
    forqapp.receive("g")
    outcomes = groupcommit.run_group([
        (services.send, ("g", "a"), {}),
        (services.ack_delivery, ("g", delivered, 12345), {}),  # a wrong receipt: not_found.message
        (services.send, ("g", "b"), {}),
        (services.claim, ("g",), {}),  # sees what the calls before it wrote
    ])
    assert [ok for ok, _ in outcomes] == [True, False, True, True]
    assert isinstance(outcomes[1][1], ForqError) and outcomes[1][1].code == errors.NOT_FOUND_MESSAGE
    assert outcomes[3][1].content == "a"
    assert _contents("g") == ["first", "a", "b"]


def test_a_refused_send_with_a_savepoint_leaves_the_others_committed():
    forqapp.configure_queue("full", max_length=1)
    forqapp.send("full", "kept")
    outcomes = groupcommit.run_group([
        (services.send, ("other", "x"), {}),
        (services.send, ("full", "refused"), {}),  # queue.full, inside the services' own atomic()
        (services.send, ("other", "y"), {}),
    ])
    assert [ok for ok, _ in outcomes] == [True, False, True]
    assert outcomes[1][1].code == errors.QUEUE_FULL
    assert _contents("other") == ["x", "y"] and _contents("full") == ["kept"]


def test_any_other_error_rolls_the_group_back_and_every_call_runs_again_alone():
    calls = []

    def broken(queue):
        calls.append(queue)
        raise DatabaseError("disk I/O error")

    outcomes = groupcommit.run_group([
        (services.send, ("r", "a"), {}),
        (broken, ("r",), {}),
        (services.send, ("r", "b"), {}),
    ])
    assert [ok for ok, _ in outcomes] == [True, False, True]
    assert isinstance(outcomes[1][1], DatabaseError)
    assert calls == ["r", "r"]  # in the group, then alone
    assert _contents("r") == ["a", "b"]  # each stored once: the group's writes were rolled back


def test_concurrent_calls_share_groups_and_keep_their_order():
    async def main():
        group = groupcommit.group()
        ids = await asyncio.gather(*(groupcommit.run(services.send, "many", f"m{i}") for i in range(60)))
        return ids, group.groups, group.sizes

    ids, groups, sizes = asyncio.run(main())
    assert sizes == 60 and groups < 60  # the calls of one turn of the loop went together
    assert len(set(ids)) == 60
    assert _contents("many") == [f"m{i}" for i in range(60)]


def test_a_callers_exception_is_raised_to_it_alone():
    async def main():
        return await asyncio.gather(
            groupcommit.run(services.send, "e", "ok"),
            groupcommit.run(services.send, "e-dlq", "to a dlq"),
            return_exceptions=True)

    first, second = asyncio.run(main())
    assert isinstance(first, str)
    assert isinstance(second, ForqError) and second.code == errors.PRODUCE_TO_DLQ
    assert _contents("e") == ["ok"]


def test_a_waiting_consumer_is_woken_by_a_grouped_send_after_its_commit():
    async def main():
        from forqapp.services import waiting

        consumer = asyncio.ensure_future(waiting.claim_async(services.claim, "woken", 5))
        await asyncio.sleep(0.2)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.gather(groupcommit.run(services.send, "woken", "x"),
                             groupcommit.run(services.send, "woken", "y"))
        message = await consumer
        return message, loop.time() - started

    message, waited = asyncio.run(main())
    assert message is not None and message.content == "x"
    assert waited < 4  # woken, not at the end of its 5 s wait


def test_a_group_holds_the_stores_writer_lock_which_another_process_waits_for():
    """Several API processes on one SQLite file take turns at a ``flock`` beside it (rather than
    sleeping in SQLite's busy handler); PostgreSQL's own lock queues them already: no lock file."""
    import contextlib
    import subprocess
    import sys

    from django.db import connection

    from forqapp.services.base import _store

    store = _store("default")
    if connection.vendor != "sqlite":
        assert isinstance(store.writer_lock(), contextlib.nullcontext)
        return
    path = str(connection.settings_dict["NAME"]) + "-writer.lock"
    probe = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n"
             "    sys.exit(3)\n")
    held_inside = []

    def during_the_group():
        held_inside.append(subprocess.run([sys.executable, "-c", probe, path]).returncode)
        return services.send("locked", "x")

    outcomes = groupcommit.run_group([(during_the_group, (), {}), (services.send, ("locked", "y"), {})])
    assert [ok for ok, _ in outcomes] == [True, True]
    assert held_inside == [3]  # another process could not take it while the group ran
    assert subprocess.run([sys.executable, "-c", probe, path]).returncode == 0  # given up after
    assert _contents("locked") == ["x", "y"]


def test_a_writer_lock_file_that_cannot_be_opened_leaves_the_writes_to_sqlites_own_lock(tmp_path, caplog):
    """A full disk or a directory it may not write: the group still runs, and says so once."""
    from forqapp.store.sqlite import _flocked

    blocked = tmp_path / "db.sqlite3-writer.lock"
    blocked.mkdir()  # (os.open cannot open a directory for writing)
    ran = []
    for _ in range(2):
        with _flocked(str(blocked)):
            ran.append(True)
    assert ran == [True, True]
    assert caplog.text.count("cannot open") == 1


def test_a_forked_child_does_not_share_its_parents_writer_lock(tmp_path):
    """A flock belongs to the open file, which a forked child would share: the child opens its own,
    and waits for the parent's lock (here: until its alarm ends it)."""
    import os
    import signal

    from forqapp.store.sqlite import _flocked

    path = str(tmp_path / "db.sqlite3-writer.lock")
    with _flocked(path):
        pid = os.fork()
        if pid == 0:  # the child: blocks on the parent's lock, and the alarm ends it
            try:
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.alarm(1)
                with _flocked(path):
                    os._exit(7)  # got the lock while the parent held it
            finally:
                os._exit(8)  # (never the test session's clean-up in the child)
        _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM
