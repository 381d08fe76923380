"""Celery on ``forq://``: a real ``celery worker`` (prefork, 2 processes; threads too) in a subprocess on the test
database, running the tasks of ``tests.celeryapp``; each run is a line in a file the tests read."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from kombu import Connection, Exchange
from kombu.transport import TRANSPORT_ALIASES

import forqapp.celery
from forqapp import services
from forqapp.celery import transport
from forqapp.errors import ForqError
from tests.celeryapp import record, retry_once, sees_user, stuck_once

from .conftest import ROOT, subprocess_env

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "celery"
OTHER = "celery-other"  # the workers consume it too (-Q)
LEASE_S = 4  # the workers' visibility_timeout in the kill test


def until(predicate, timeout: float, what: str, log: Worker | None = None, state=None):
    """Wait for ``predicate()`` to be true (returns it), failing after ``timeout`` seconds (with
    the end of ``log``'s output)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}" + (f" ({state()})" if state else "")
                        + (f"\n{log.output()[-4000:]}" if log else ""))
        time.sleep(0.05)


class Worker:
    """``celery -A tests.celeryapp worker`` in a session of its own (a kill reaches its children)."""

    def __init__(self, tmp_path: Path, visibility: float = 30, pool: str = "prefork"):
        self.pool = pool
        self.runs = tmp_path / "runs.txt"
        self.log = tmp_path / "worker.log"
        self.env = subprocess_env(FORQ_CELERY_RUNS=str(self.runs), FORQ_CELERY_VISIBILITY=str(visibility))
        self.proc: subprocess.Popen | None = None

    def start(self) -> Worker:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "tests.celeryapp", "worker", f"--pool={self.pool}",
                 "--concurrency=2", f"--queues={QUEUE},{OTHER}", "--loglevel=INFO", "--without-heartbeat", "--without-gossip",
                 "--without-mingle"],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def kill(self) -> None:
        """kill -9 of the worker and its pool processes."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """A warm shutdown, as Celery asks: SIGTERM to the main process only (its pool processes
        killed with it could die holding the pool's queue lock, and the main one wait for ever)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)

    def lines(self) -> list[list[str]]:
        if not self.runs.exists():
            return []
        return [line.split() for line in self.runs.read_text(encoding="utf-8").splitlines()]

    def counts(self) -> Counter:
        return Counter(parts[1] for parts in self.lines())

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@pytest.fixture
def worker(tmp_path):
    services.purge(QUEUE)
    services.purge(OTHER)
    made: list[Worker] = []

    def make(**kwargs) -> Worker:
        made.append(Worker(tmp_path, **kwargs))
        return made[-1]

    yield make
    for w in made:
        w.stop()


def counts(queue: str = QUEUE) -> dict[str, int]:
    try:
        return services.queue_info(queue).counts
    except ForqError:  # no such queue (yet)
        return {}


def settled() -> bool:
    return not any(c.get("ready") or c.get("delayed") or c.get("in_flight") for c in (counts(), counts(OTHER)))


# --- the transport, in this process ---------------------------------------------------------------


def test_forq_is_registered_with_kombu_and_registering_needs_kombu(monkeypatch):
    assert TRANSPORT_ALIASES["forq"] == "forqapp.celery.transport:Transport"
    monkeypatch.setitem(sys.modules, "kombu.transport", None)  # as where kombu is not installed
    assert forqapp.celery.register() is False


def test_a_published_message_is_a_forqapp_message_with_its_priority():
    record.apply_async(("a",), priority=7)
    message = services.peek(QUEUE)
    assert message is not None and message.priority == 7
    assert services.queue_info(QUEUE).counts["ready"] == 1


def test_a_task_routed_to_a_queue_is_a_message_of_the_forqapp_queue_of_that_name():
    services.purge(OTHER)
    record.apply_async(("a",), queue=OTHER)
    assert services.peek(QUEUE) is None
    assert services.peek(OTHER) is not None


def test_a_queue_forqapp_cannot_have_is_refused_by_name():
    with Connection("forq://") as conn, pytest.raises(ValueError, match="not a valid|cannot use the queue"):
        conn.default_channel.queue_declare("tasks@host")
    with pytest.raises(ValueError, match="no database alias"), Connection("forq://nowhere") as conn:
        conn.default_channel  # noqa: B018


def test_a_direct_message_nobody_bound_goes_to_its_routing_key_a_topic_one_nowhere():
    events = Exchange("events", type="topic")
    with Connection("forq://") as conn:
        producer = conn.Producer()
        producer.publish({"n": 1}, exchange=events, routing_key="task.received", declare=[events])
        producer.publish({"n": 2}, exchange=Exchange("unbound", type="direct"), routing_key=QUEUE)
    assert services.queue_info(QUEUE).counts["ready"] == 1
    assert "task.received" not in [q.name for q in services.list_queues()]


def test_ack_reject_and_requeue_settle_the_forqapp_delivery():
    with Connection("forq://") as conn:
        queue = conn.SimpleQueue(QUEUE, no_ack=False)
        for name in ("ack", "fail", "nack"):
            queue.put({"n": name})
        got = [queue.get(timeout=5) for _ in range(3)]
        by_name = {m.payload["n"]: m for m in got}
        queue_name, message_id, receipt = transport.parse_tag(by_name["fail"].delivery_tag)
        assert queue_name == QUEUE and receipt > 0
        assert services.queue_info(QUEUE).counts["in_flight"] == 3
        by_name["ack"].ack()
        by_name["fail"].reject(requeue=False)
        by_name["nack"].requeue()
        info = services.queue_info(QUEUE).counts
        assert info["in_flight"] == 0 and info["failed"] + info["dlq"] == 1
        assert info["ready"] + info["delayed"] == 1  # the nacked one, back after the queue's backoff
        queue.close()


def test_a_message_that_is_not_kombus_goes_to_the_dlq_and_the_next_one_is_delivered():
    services.send(QUEUE, "plain text from another client")
    with Connection("forq://") as conn:
        queue = conn.SimpleQueue(QUEUE)
        queue.put({"n": 1})
        message = queue.get(timeout=5)
        assert message.payload == {"n": 1}
        message.ack()
        queue.close()
    info = services.queue_info(QUEUE).counts
    assert info["failed"] + info["dlq"] == 1 and info["ready"] == 0


def test_delay_in_a_rolled_back_atomic_leaves_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        User.objects.create(username="rolled")
        sees_user.delay("rolled")
        assert services.queue_info(QUEUE).counts["ready"] == 1  # in the transaction, as its row
        raise RuntimeError("rollback")
    assert services.peek(QUEUE) is None


def test_celery_purge_empties_the_queue_where_the_app_registers_forq_itself():
    for name in "abcd":
        record.delay(name)
    held = services.claim(QUEUE, visibility_timeout=300)  # a task a worker runs: kept, as on RabbitMQ
    services.claim(QUEUE, visibility_timeout=0)  # a dead worker's, its lease over: purged
    done = subprocess.run([sys.executable, "-m", "celery", "-A", "tests.celerybare", "purge", "-f"], cwd=ROOT,
                          env=subprocess_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "Purged 3 messages" in done.stdout
    assert services.peek(QUEUE) is None
    assert services.queue_info(QUEUE).counts["in_flight"] == 1
    services.ack(held)  # the worker's ack of the task it ran
    assert "Warning" not in done.stderr, done.stderr


def test_celery_inspect_sets_django_up_before_its_first_query():
    """``celery inspect`` with the how-to's ``proj/celery.py`` (Django not set up by it): the
    transport sets Django up before it declares its reply queue, so no "Accessing the database
    during app initialization" warning, and forqapp's ready() (its connections' settings) has run."""
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "celery", "-A", "tests.celerybare",
                           "inspect", "ping", "--timeout", "1"],
                          cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120, check=False)
    assert "No nodes replied" in done.stdout + done.stderr, done.stdout + done.stderr  # asked: no worker runs
    assert "Warning" not in done.stderr and "app initialization" not in done.stdout + done.stderr, done.stderr


# --- a real worker --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_every_task_runs_as_often_as_intended_and_no_countdown_early(worker, pool):
    n = int(os.environ.get("FORQ_CELERY_TASKS", "1000"))
    w = worker(pool=pool).start()
    expected: dict[str, int] = {}
    not_before: dict[str, float] = {}
    for i in range(n):
        key = f"t{i}"
        if i % 10 == 1:  # a tenth retry once, a second later
            retry_once.delay(key)
            expected[key] = 2
        elif i % 10 == 3:  # a tenth routed to another queue
            record.apply_async((key,), queue=OTHER)
            expected[key] = 1
        elif i % 20 == 2:  # a twentieth run two seconds after they are sent
            not_before[key] = time.time() + 2
            record.apply_async((key,), countdown=2)
            expected[key] = 1
        else:
            record.delay(key)
            expected[key] = 1
    until(lambda: all(w.counts()[k] >= v for k, v in expected.items()), 90, f"{n} tasks to run", w)
    until(settled, 30, "the queues to settle")
    assert w.counts() == Counter(expected)
    for parts in w.lines():
        if parts[1] in not_before:
            assert float(parts[2]) >= not_before[parts[1]], parts


@pytest.mark.slow
def test_delay_in_a_committed_atomic_runs_after_the_commit_and_sees_its_row(worker):
    w = worker().start()
    with pytest.raises(RuntimeError), transaction.atomic():
        User.objects.create(username="rolled")
        sees_user.delay("rolled")
        raise RuntimeError("rollback")
    with transaction.atomic():
        User.objects.create(username="kept")
        sees_user.delay("kept")
    until(lambda: w.counts()["kept"], 60, "the committed task to run", w)
    assert [(parts[1], parts[3]) for parts in w.lines()] == [("kept", "True")]  # the row committed first
    until(settled, 30, "the queue to settle")
    assert w.counts()["rolled"] == 0


@pytest.mark.slow
def test_a_task_whose_worker_is_killed_runs_again_after_its_lease(worker):
    w = worker(visibility=LEASE_S).start()
    stuck_once.delay("stuck")
    record.delay("after")
    until(lambda: w.counts()["stuck"] == 1 and w.counts()["after"] == 1, 60, "the task to start", w)
    # Two leases later the task still runs once: the worker renews the lease of what it holds.
    started = float(w.lines()[0][2])
    until(lambda: time.time() > started + 2 * LEASE_S, 3 * LEASE_S, "two leases to pass")
    assert w.counts()["stuck"] == 1 and counts()["in_flight"] == 1
    killed_at = time.time()
    w.kill()
    again = worker(visibility=LEASE_S).start()
    until(lambda: again.counts()["stuck"] == 2, 60, "the task to run again", again, counts)
    until(settled, 30, "the queue to settle")
    assert again.counts() == Counter({"stuck": 2, "after": 1})
    assert float(again.lines()[-1][2]) > killed_at


# --- remote control: celery inspect / control -----------------------------------------------------


def test_a_mailbox_queue_is_escaped_into_a_forqapp_queue_name():
    assert transport.queue_name("celery@web-1.example.com.celery.pidbox") == "celery_40web-1.example.com.celery.pidbox"
    assert transport.queue_name("reply.celery.pidbox") == "reply.celery.pidbox"
    long = transport.queue_name("celery@" + "h" * 120 + ".celery.pidbox")
    assert len(long) <= 80 and long.endswith(".celery.pidbox")
    assert long != transport.queue_name("celery@" + "h" * 121 + ".celery.pidbox")
    with pytest.raises(ValueError, match="cannot use the queue"):  # a task queue is not escaped: refused
        transport.queue_name("tasks@host")


def test_a_fanout_of_another_exchange_than_the_mailbox_is_refused():
    with Connection("forq://") as conn:
        channel = conn.channel()
        with pytest.raises(NotImplementedError, match="mailbox"):
            channel._put_fanout("broadcast", {"body": "x"}, "")


def celery_command(*args: str) -> subprocess.CompletedProcess:
    """``celery -A tests.celerybare ARGS`` for the test's worker (named: the command returns
    as soon as it replied, rather than wait out its timeout for others)."""
    node = f"celery@{socket.gethostname()}"
    return subprocess.run([sys.executable, "-m", "celery", "-A", "tests.celerybare", *args, "--destination", node,
                           "--timeout", "30"],
                          cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
def test_celery_inspect_and_control_reach_the_worker_and_leave_no_reply_queue(worker):
    w = worker().start()
    record.delay("up")
    until(lambda: w.counts()["up"] == 1, 60, "the worker to run a task", w)
    mailbox = until(lambda: [q.name for q in services.list_queues() if q.name.endswith(".celery.pidbox")],
                    30, "the worker's mailbox queue", w)
    assert len(mailbox) == 1 and mailbox[0].startswith("celery_40"), mailbox

    ping = celery_command("inspect", "ping")
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert "pong" in ping.stdout and "1 node online" in ping.stdout, ping.stdout

    queues = celery_command("inspect", "active_queues", "--json")
    assert queues.returncode == 0, queues.stdout + queues.stderr
    assert f"'{OTHER}'" in queues.stdout or f'"{OTHER}"' in queues.stdout, queues.stdout

    # control: stop consuming OTHER; a task sent there waits, the worker's other queue goes on
    cancel = celery_command("control", "cancel_consumer", OTHER)
    assert cancel.returncode == 0 and "no longer consuming" in cancel.stdout, cancel.stdout + cancel.stderr
    record.apply_async(("parked",), queue=OTHER)
    record.delay("after")
    until(lambda: w.counts()["after"] == 1, 60, "the worker to run a task after the cancel", w)
    assert w.counts()["parked"] == 0 and counts(OTHER).get("ready") == 1

    # each command's reply queue is deleted when it ends; only the worker's mailbox remains
    assert [q.name for q in services.list_queues() if q.name.endswith(".pidbox")] == mailbox
    w.stop()  # and the worker's mailbox when it stops
    assert [q.name for q in services.list_queues() if q.name.endswith(".pidbox")] == []
