"""The database going away (a PostgreSQL crash and its recovery, a restart, a server out of reach):
every face answers 503 ``forq.unhealthy`` with ``Retry-After`` (the SQS endpoint its
``ServiceUnavailable``), never a 500 with a traceback, and every background component (the jobs,
the schedules, task settling) says it in one line a second (``errors.log_failure``)."""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading

import psycopg
import pytest

import forqapp
from forqapp import errors, services, store
from forqapp.worker import jobs
from tests.conftest import free_port
from tests.test_fastpath import KEY, _run, _scope, apps, sqs  # noqa: F401 - apps: a fixture

pytestmark = pytest.mark.django_db(transaction=True)

# What PostgreSQL answers while it recovers from a crash, and in the states around it (psycopg's
# wording of a failed connect, with the server's FATAL message).
RECOVERING = ('connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  the database '
              'system is not yet accepting connections\nDETAIL:  Consistent recovery state has not been yet reached.')
AWAY = [
    RECOVERING,
    'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  the database system is '
    'starting up',
    'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  the database system is '
    'shutting down',
    'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  the database system is '
    'not accepting connections\nDETAIL:  Hot standby mode is disabled.',
    'connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused\n\tIs the '
    'server running on that host and accepting TCP/IP connections?',
    "terminating connection due to administrator command",
    "terminating connection because of crash of another server process",
]


def _away(monkeypatch, message: str) -> None:
    """Every raw statement of the store fails as ``message`` says (the connection cannot be made)."""

    def refuse(self):
        raise psycopg.OperationalError(message)

    monkeypatch.setattr(type(store.for_alias("default")), "_conn", refuse)
    services.forget_policies()
    errors._said.clear()


def _no_traceback(caplog) -> None:
    assert [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


@pytest.mark.parametrize("message", AWAY)
def test_the_api_answers_503_with_retry_after_while_the_database_is_away(apps, monkeypatch, caplog, message):  # noqa: F811
    forqapp.send("away", "kept")  # a queue that exists, and one that does not
    _away(monkeypatch, message)
    json_body = [(b"x-api-key", KEY), (b"content-type", b"application/json")]
    requests = [("POST", "/api/v1/queues/away/messages", b'{"content": "x"}'),
                ("POST", "/api/v1/queues/away-new/messages", b'{"content": "x"}'),
                ("GET", "/api/v1/queues/away/messages", b""),
                ("POST", "/api/v2/queues/away/messages", b'{"content": "x"}'),
                ("POST", "/api/v2/queues/away/receive", b'{"max_messages": 1}'),
                ("GET", "/api/v2/queues/away", b"")]
    for app in apps:  # v1's fast path, and the general one (v1 and v2)
        for method, path, body in requests:
            status, headers, answer = _run(app, _scope(method, path, json_body), body)
            assert (status, json.loads(answer)["code"]) == (503, errors.UNHEALTHY), (message, method, path, answer)
            assert (b"retry-after", b"5") in [(k.lower(), v) for k, v in headers], headers
    _no_traceback(caplog)
    assert len([r for r in caplog.records if "answered 503" in r.getMessage()]) == 1  # one line a second


@pytest.mark.parametrize("message", [RECOVERING, "terminating connection due to administrator command"])
def test_the_sqs_endpoint_answers_service_unavailable_while_the_database_is_away(monkeypatch, caplog, message):
    forqapp.configure_queue("sqs-away")
    _away(monkeypatch, message)
    response = sqs("SendMessage", {"QueueUrl": "http://testserver/000000000000/sqs-away", "MessageBody": "x"})
    assert response.status_code == 503, response.text
    assert response.json()["__type"].endswith("#ServiceUnavailable"), response.text
    _no_traceback(caplog)


def test_postgresqls_states_are_unavailable_by_their_sqlstate_too():
    """An error that carries PostgreSQL's SQLSTATE (psycopg's ``sqlstate``) is classified by it,
    whatever its wording (a translated server message, a pooler's)."""
    assert errors.unavailable(psycopg.errors.CannotConnectNow("le système n'accepte pas")) is not None
    assert errors.unavailable(psycopg.errors.AdminShutdown("…")) is not None
    assert errors.unavailable(psycopg.errors.TooManyConnections("…")) is not None
    assert errors.unavailable(psycopg.errors.UndefinedTable("relation does not exist")) is None  # a bug: 500


class _RecoveringServer:
    """A socket that answers a PostgreSQL connection as a server recovering from a crash does:
    (no SSL) then ``FATAL 57P03 the database system is not yet accepting connections``."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                while True:
                    head = conn.recv(8)
                    if len(head) < 8:
                        break
                    length, code = struct.unpack("!ii", head)
                    if length > 8:
                        conn.recv(length - 8)
                    if code in (80877103, 80877104):  # SSLRequest, GSSENCRequest: no
                        conn.sendall(b"N")
                        continue
                    fields = (b"SFATAL\0VFATAL\0C57P03\0Mthe database system is not yet accepting connections\0"
                              b"DConsistent recovery state has not been yet reached.\0\0")
                    conn.sendall(b"E" + struct.pack("!i", len(fields) + 4) + fields)
                    break

    def close(self):
        self.sock.close()


def test_a_real_connection_to_a_recovering_or_absent_server_is_unavailable():
    """What psycopg and Django's PostgreSQL backend really raise, against a server that answers as a
    recovering one does and against a port nothing listens on."""
    from django.db.utils import ConnectionHandler, OperationalError

    recovering = _RecoveringServer()
    try:
        for port, expected in ((recovering.port, "the database server is recovering"),
                               (free_port(), "the database server cannot be reached")):
            with pytest.raises(psycopg.OperationalError) as raw:
                psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="forq", connect_timeout=5)
            assert errors.unavailable(raw.value) == expected, raw.value
            handler = ConnectionHandler({"default": {"ENGINE": "django.db.backends.dummy"}, "dead": {
                "ENGINE": "django.db.backends.postgresql", "HOST": "127.0.0.1", "PORT": port, "NAME": "forq",
                "USER": "postgres", "OPTIONS": {"connect_timeout": 5}}})
            with pytest.raises(OperationalError) as wrapped:  # Django's, from psycopg's
                handler["dead"].ensure_connection()
            assert errors.unavailable(wrapped.value) == expected, wrapped.value
    finally:
        recovering.close()


# --- background components: one line a second, no traceback ----------------------------------


@pytest.fixture
def frozen_clock(monkeypatch):
    """errors.say_unavailable's clock stopped: the lines it lets through are counted exactly."""
    monkeypatch.setattr(errors, "_clock", lambda: 1000.0)
    errors._said.clear()


def test_a_job_over_a_database_away_logs_one_line_a_second_without_traceback(monkeypatch, caplog, frozen_clock):
    def away(job, using=None):
        raise psycopg.OperationalError(RECOVERING)

    monkeypatch.setattr(jobs, "_run", away)
    scheduler = jobs.Scheduler()
    caplog.set_level(logging.INFO, logger="forqapp")
    for _ in range(20):  # twenty turns within the same second
        for job in jobs.JOBS.values():
            scheduler._run_one(job)
    lines = [r for r in caplog.records if r.name.startswith("forqapp")]
    assert [r.getMessage() for r in lines] == [
        f"forqapp job {next(iter(jobs.JOBS))}: the database server is recovering; retrying at its next turn "
        "(this line at most once a second)"]
    assert lines[0].exc_info is None
    errors._said.clear()  # a second later: one line again
    scheduler._run_one(next(iter(jobs.JOBS.values())))
    assert len([r for r in caplog.records if r.name.startswith("forqapp")]) == 2


def test_a_job_that_fails_for_another_reason_keeps_its_traceback(monkeypatch, caplog):
    def bug(job, using=None):
        raise KeyError("a bug")

    monkeypatch.setattr(jobs, "_run", bug)
    jobs.Scheduler()._run_one(next(iter(jobs.JOBS.values())))
    assert [r.exc_info is not None for r in caplog.records if r.name.startswith("forqapp")] == [True]


def test_task_settling_over_a_database_away_logs_one_line_a_second(monkeypatch, caplog, frozen_clock):
    from forqapp.tasks.compat import task_backends
    from forqapp.tasks.running import TaskRunner
    from tests.tasksapp import tasks

    for n in range(3):
        tasks.add.enqueue(n, 1)
    claimed = services.claim_many("tasks-default", 3)
    assert len(claimed) == 3
    runner = TaskRunner(task_backends["default"], "tasks-default")
    for message in claimed:
        runner(message)

    def away(*args, **kwargs):
        raise psycopg.OperationalError(RECOVERING)

    monkeypatch.setattr(TaskRunner, "_settle_successes", away)
    monkeypatch.setattr(TaskRunner, "_settle_failure", away)
    items = [(claimed[0], "ack", None), (claimed[1], "nack", RuntimeError("x")), (claimed[2], "nack", None)]
    assert runner.settle(items, using=services.alias()) == {"ack": 0, "lost": 3}
    lines = [r for r in caplog.records if r.name.startswith("forqapp")]
    assert len(lines) == 1 and lines[0].exc_info is None, [r.getMessage() for r in lines]
    assert "the database server is recovering" in lines[0].getMessage()


# --- /healthcheck: the truth at once -----------------------------------------------------------


def test_the_healthcheck_answers_503_at_once_while_the_database_does_not_answer(apps, monkeypatch, caplog,  # noqa: F811
                                                                               frozen_clock):  # noqa: F811
    """A database out of reach (a cut link: the ping neither answers nor fails) is 503 within the
    health check's own bound, not at the client's timeout, with one line that says so; the health
    checks that come meanwhile wait on that same ping (no thread nor connection each); once the
    database answers again, 204."""
    from forqapp.services import maintenance

    released = threading.Event()
    pings = []

    def hang(self):
        pings.append(threading.current_thread().name)
        released.wait(60)

    monkeypatch.setattr(maintenance, "HEALTH_TIMEOUT_S", 0.3)
    monkeypatch.setattr(type(store.for_alias("default")), "ping", hang)
    caplog.set_level(logging.INFO, logger="forqapp")
    try:
        for app in apps:
            status, headers, answer = _run(app, _scope("GET", "/healthcheck", []))
            assert (status, json.loads(answer)["code"]) == (503, errors.UNHEALTHY)
            assert not released.is_set()  # answered while the ping still hangs
    finally:
        released.set()
    assert len(pings) == 1 and pings[0].startswith("forq-health"), pings  # one ping, on its own thread
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("forqapp")]
    assert lines == ["forqapp healthcheck: the database did not answer a ping within 0.3 s; answered 503 "
                     "(this line at most once a second)"]
    _no_traceback(caplog)
    monkeypatch.undo()
    for app in apps:
        assert _run(app, _scope("GET", "/healthcheck", []))[0] == 204


@pytest.mark.parametrize("message", [RECOVERING, "terminating connection due to administrator command"])
def test_the_healthcheck_says_why_the_database_is_away(apps, monkeypatch, caplog, message):  # noqa: F811
    _away(monkeypatch, message)
    status, _, answer = _run(apps[0], _scope("GET", "/healthcheck", []))
    assert (status, json.loads(answer)["code"]) == (503, errors.UNHEALTHY)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("forqapp")]
    assert lines == [f"forqapp healthcheck: {errors.unavailable(psycopg.OperationalError(message))}; answered 503 "
                     "(this line at most once a second)"], lines
    _no_traceback(caplog)


def test_a_handler_whose_own_query_meets_the_database_away_nacks_in_one_line(caplog, frozen_clock):
    """A consumer that queries the database itself (enqueues a task, reads a model) while the server
    restarts: its message is nacked, said in one line a second without a traceback each (a bug in a
    handler keeps its traceback)."""
    from forqapp.worker.consumers import Consumer
    from forqapp.worker.runner import NACK, Worker, _Held

    def away(message):
        raise psycopg.errors.AdminShutdown("terminating connection due to administrator command")

    def bug(message):
        raise KeyError("a bug")

    forqapp.send_many("h-away", ["a", "b", "c"])
    consumer = Consumer("h-away", away)
    w = Worker({"h-away": consumer}, concurrency=1)
    try:
        claimed = services.claim_many("h-away", 3)
        outcomes = [w._handle(_Held(m, consumer)) for m in claimed[:2]]
        assert [o for o, _ in outcomes] == [NACK, NACK]
        lines = [r for r in caplog.records if r.name.startswith("forqapp")]
        assert [(r.getMessage(), r.exc_info) for r in lines] == [(
            "forq_worker: a handler on h-away: the database server closed the connection; nacking its message "
            "(this line at most once a second)", None)]
        assert w._handle(_Held(claimed[2], Consumer("h-away", bug)))[0] == NACK
        assert [r.exc_info is not None for r in caplog.records if r.name.startswith("forqapp")] == [False, True]
    finally:
        w._shutdown()


@pytest.mark.parametrize("where", ["schedules_due", "send_entries"])
def test_the_schedules_job_over_a_restart_says_one_line_without_traceback(monkeypatch, caplog, frozen_clock, where):
    """A PostgreSQL restart (``AdminShutdown``, SQLSTATE 57P01) met by the ``schedules`` job, while it
    lists the due schedules or while it sends a tick: one line, no traceback; the tick is sent at the
    next run."""
    from forqapp.services import schedules as schedules_module

    schedules_module.schedule("away-tick", queue="away-ticks", content="t", every=1)
    monkeypatch.setattr(schedules_module.base, "now_ms", lambda: services.now_ms() + 5000)  # the tick is due

    def restart(*args, **kwargs):
        raise psycopg.errors.AdminShutdown("terminating connection due to administrator command")

    if where == "send_entries":
        monkeypatch.setattr(schedules_module, "send_entries", restart)
    else:
        monkeypatch.setattr(type(store.for_alias("default")), "schedules_due", restart)
    caplog.set_level(logging.INFO, logger="forqapp")
    jobs.Scheduler()._run_one(jobs.JOBS["schedules"])
    lines = [r for r in caplog.records if r.name.startswith("forqapp")]
    assert len(lines) == 1 and lines[0].exc_info is None, [r.getMessage() for r in lines]
    assert "the database server closed the connection" in lines[0].getMessage()
    monkeypatch.undo()
    monkeypatch.setattr(schedules_module.base, "now_ms", lambda: services.now_ms() + 5000)
    jobs.Scheduler()._run_one(jobs.JOBS["schedules"])
    assert services.peek("away-ticks") is not None


def test_a_wrong_key_is_refused_401_while_the_disk_is_full(apps, monkeypatch, caplog):  # noqa: F811
    """A full disk fails the throttle's count of a wrong key (a write): the key is refused all the
    same (401, SQS's InvalidClientTokenId / SignatureDoesNotMatch), not answered 503, and the log
    says once that it was not counted."""
    import sqlite3

    import httpx
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from forqapp.sqs.asgi import SQSApplication

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    forqapp.configure_queue("full")
    monkeypatch.setattr(type(store.for_alias("default")), "auth_failed", full)
    errors._said.clear()
    wrong = [(b"x-api-key", b"wrong-" + KEY), (b"content-type", b"application/json")]
    for app in apps:
        for method, path, body in [("POST", "/api/v1/queues/full/messages", b'{"content": "x"}'),
                                   ("GET", "/api/v1/queues/full/messages", b""),
                                   ("GET", "/api/v2/queues/full", b"")]:
            status, _, answer = _run(app, _scope(method, path, wrong), body)
            assert (status, json.loads(answer)["code"]) == (401, errors.UNAUTHORIZED), (method, path, answer)

    body = json.dumps({"QueueUrl": "http://testserver/000000000000/full", "MessageBody": "x"}).encode()
    request = AWSRequest("POST", "http://testserver/", data=body, headers={
        "X-Amz-Target": "AmazonSQS.SendMessage", "Content-Type": "application/x-amz-json-1.0"})
    SigV4Auth(Credentials("forq-root", "wrong-" + KEY.decode()), "sqs", "eu-west-3").add_auth(request)

    async def send():
        transport = httpx.ASGITransport(app=SQSApplication(), client=("127.0.0.1", 40001))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await client.post("/", content=body, headers=dict(request.headers.items()))

    import asyncio

    response = asyncio.run(send())
    assert response.status_code in (400, 403) and "ServiceUnavailable" not in response.text, response.text
    _no_traceback(caplog)
    assert [r.getMessage() for r in caplog.records if "without counting" in r.getMessage()] == [
        "counting a wrong API key: the database's disk is full; refused without counting it "
        "(this line at most once a second)"]
    assert not forqapp.peek("full")
