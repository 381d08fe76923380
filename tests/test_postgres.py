"""PostgreSQL-only behaviour: SKIP LOCKED claims, LISTEN/NOTIFY wake-ups, the schema, and the
multi-host rehearsal (2 API servers + 2 workers on one database).

Runs when DATABASE_URL is a postgres:// URL (the test command's second run:
``scripts/ensure-postgres.sh && DATABASE_URL=$FORQ_TEST_DATABASE_URL pytest``); skipped otherwise.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection, connections, transaction

import forqapp
from forqapp import ids, services, store
from forqapp.models import Message, Status
from forqapp.store import NewMessage

ROOT = Path(__file__).resolve().parent.parent
SECRET = "rehearsal-secret-0123456789abcdef-0123456789"  # noqa: S105

ON_POSTGRES = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://", "pgsql://"))

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="needs PostgreSQL: set DATABASE_URL=postgres://… "
                                                 "(scripts/ensure-postgres.sh starts one)"),
]


# --- helpers ----------------------------------------------------------------------------------


def numbered(sql: str) -> tuple[str, list[str]]:
    """``sql``'s named parameters (``%(name)s``) as PREPARE's $1, $2, …, and their names in order."""
    names: list[str] = []

    def placeholder(match: re.Match) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", placeholder, sql), names


def dsn() -> str:
    """libpq URL of the test database (pytest-django's test_… database)."""
    db = settings.DATABASES["default"]
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgresql://{user}{password}@{host}:{port}/{db['NAME']}"


def other_session():
    """A second PostgreSQL session, as another host would have (autocommit)."""
    import psycopg

    return psycopg.connect(dsn(), autocommit=True)


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", FORQ_AUTH_SECRET=SECRET,
               PYTHONPATH=str(ROOT), DATABASE_URL=dsn().replace("postgresql://", "postgres://", 1),
               FORQ_LOG_LEVEL="WARNING")
    env.update(extra)
    return env


def insert_raw(conn, queue: str, n: int = 1, *, notify: bool = True, tag: str = "raw") -> list[str]:
    """Produce from another session, through the store (which NOTIFYs) or bare SQL (which doesn't)."""
    from forqapp import ids
    from forqapp.store.postgresql import PostgreSQLStore

    now = services.now_ms()
    rows = [store.NewMessage(i, queue, f"{tag}-{k}", now, now, now + 3_600_000)
            for k, i in enumerate(ids.new_ids(n))]
    if notify:
        PostgreSQLStore.on(conn).insert(rows)
    else:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO messages (id, queue, is_dlq, content, status, attempts, process_after,"
                " received_at, updated_at, expires_after) VALUES (%s, %s, FALSE, %s, 0, 0, %s, %s, %s, %s)",
                [(r[0], r[1], r[2], r[3], r[4], r[4], r[5]) for r in rows],
            )
    return [r[0] for r in rows]


# --- schema -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_migration_creates_table_and_partial_index():
    assert connection.vendor == "postgresql"
    assert type(store.for_alias(connection.alias)).__name__ == "PostgreSQLStore"
    with connection.cursor() as cur:
        cur.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'messages'")
        indexes = dict(cur.fetchall())
        cur.execute("""SELECT column_name, collation_name FROM information_schema.columns
                       WHERE table_name = 'messages' AND column_name IN ('id', 'queue')""")
        collations = dict(cur.fetchall())
    assert set(indexes) == {"messages_pkey", "idx_queue_claim", "idx_queue_timed", "idx_queue_past",
                            "idx_for_queue_depth", "idx_expired", "idx_leases", "idx_group_ready",
                            "idx_group_held"}  # no varchar_pattern_ops copies
    assert indexes["idx_queue_claim"].endswith("(queue, message_group, priority DESC, sequence, process_after, status) "
                                               "WHERE ((process_after <= received_at) AND (status = 0))")
    assert indexes["idx_queue_timed"].endswith("(queue, message_group, process_after, priority DESC, sequence) "
                                               "WHERE ((process_after > received_at) AND (status = 0))")
    assert indexes["idx_queue_past"].endswith("(queue, message_group, priority DESC, process_after, sequence) "
                                              "WHERE ((process_after < received_at) AND (status = 0))")
    assert indexes["idx_leases"].endswith("(queue, message_group, process_after, priority, sequence, status) "
                                          "WHERE (status = 1)")
    assert indexes["idx_expired"].endswith("(status, is_dlq, expires_after) WHERE ((status = 0) OR (status = 2))")
    assert collations == {"id": "C", "queue": "C"}


@pytest.mark.django_db
@pytest.mark.parametrize("order", ["fifo", "lifo"])
def test_claim_uses_the_partial_index_in_claim_order(order):
    """The claim's pick reads the ready rows from the claim index in its order (no sort of the
    queue), the delayed ones come due as one range of idx_queue_timed, and the ended leases as one
    range of idx_leases: no part walks another's rows."""
    from forqapp.store.postgresql import PICK

    with connection.cursor() as cur:  # on an empty table any plan costs nothing: forbid the others
        cur.execute("SET enable_seqscan = off")
        cur.execute("SET enable_sort = off")
        cur.execute("EXPLAIN " + PICK[order], {"queue": "q", "now": 1, "limit": 1, "ended_among": 1000})
        plan = "\n".join(r[0] for r in cur.fetchall())
        cur.execute("RESET enable_seqscan")
        cur.execute("RESET enable_sort")
    ready = plan[plan.index("CTE ready"):plan.index("CTE by_time")]
    by_time = plan[plan.index("CTE by_time"):]
    assert "using idx_queue_claim" in ready and "Sort" not in ready, plan
    assert "using idx_queue_timed" in by_time and "(process_after <= 1)" in by_time, plan
    leases = by_time[by_time.index("using idx_leases"):]
    assert "(queue)::text = 'q'::text) AND ((message_group)::text = ''::text) AND (process_after <= 1)" \
        in leases.split("->")[0], plan


@pytest.mark.django_db
def test_has_due_and_lifo_read_indexes_whatever_the_queue():
    """The wake-up count (HAS_DUE, one queue name at a time from unnest: no statistics for it) and
    the LIFO pick with thousands of ended leases read indexes, not the table: a bare LIMIT once let
    the planner hope to find a row early in a scan of the whole table."""
    from forqapp.store.postgresql import HAS_DUE, PICK

    forqapp.send_many("busy", ["x"] * 6_000)
    services.claim_many("busy", 3_000, visibility_timeout=0)  # 3,000 ended leases
    forqapp.send_many("busy", [{"content": "x", "delay": 3_600}] * 3_000)  # 3,000 not due for an hour
    with connection.cursor() as cur:
        cur.execute("ANALYZE messages")
        plans = {}
        for name, sql, params in (
                ("has_due", HAS_DUE, {"queues": ["busy", "idle"], "now": services.now_ms(), "limit": 1}),
                ("lifo", PICK["lifo"], {"queue": "busy", "now": services.now_ms(), "limit": 1, "ended_among": 100})):
            cur.execute("EXPLAIN " + sql, params)
            plans[name] = "\n".join(r[0] for r in cur.fetchall())
    assert "Seq Scan on messages" not in plans["has_due"], plans["has_due"]
    assert "Seq Scan on messages" not in plans["lifo"] and "Bitmap Heap Scan" not in plans["lifo"], plans["lifo"]


@pytest.mark.django_db
def test_the_stale_lease_job_reads_the_leases_not_the_table():
    """recover_stale (the safety net behind precise leases) finds the leases of every queue in
    idx_leases and their rows by primary key: after migration 0014 (no lease left in idx_expired)
    it read the whole table for them."""
    from forqapp.store.postgresql import COUNT_STALE, RECOVER_STALE

    for queue in ("stale-a", "stale-b"):
        forqapp.send_many(queue, ["x"] * 4_000)
        services.claim_many(queue, 600, visibility_timeout=3_600)  # live leases
        services.claim_many(queue, 600, visibility_timeout=0)  # leases ended
    now = services.now_ms()
    with connection.cursor() as cur:
        cur.execute("ANALYZE messages")
        cur.execute("EXPLAIN " + RECOVER_STALE, {"now": now, "max": 5, "cutoff": now, "batch": 1000})  # (not run)
        plan = "\n".join(r[0] for r in cur.fetchall())
        cur.execute(COUNT_STALE, [now + 1])
        assert cur.fetchone()[0] == 1_200
    assert "Seq Scan on messages" not in plan and "idx_leases" in plan, plan
    assert services.recover_stale() == 1_200  # the ended leases, and none of the live ones
    assert Message.objects.filter(status=Status.PROCESSING).count() == 1_200


@pytest.mark.django_db
@pytest.mark.parametrize("order", ["fifo", "lifo", "random", "due"])
def test_the_claims_generic_plan_reads_each_part_from_its_own_index(order):
    """The claim's generic plan (the one ``forq_claim`` keeps for the session, for any queue): each
    part reads the index of its rows. Before migration 0014 it read the ended leases through
    idx_expired, every lease of every queue, since idx_expired held them all."""
    from forqapp.store.postgresql import CLAIM

    sql, names = numbered(CLAIM[order])
    types = {"queue": "text", "delivered": "text[]"}
    values = {"queue": "'q'", "now": "1", "limit": "1", "ended_among": "100", "among": "1000", "visibility": "1000",
              "max": "5", "dlq_ttl": "1000"}
    with connection.cursor() as cur:  # (on an empty table a scan of it costs nothing: forbidden)
        cur.execute("SET plan_cache_mode = force_generic_plan")
        cur.execute("SET enable_seqscan = off")
        try:
            cur.execute(f"PREPARE generic_claim ({', '.join(types.get(n, 'bigint') for n in names)}) AS {sql}")
            cur.execute(f"EXPLAIN EXECUTE generic_claim ({', '.join(values[n] for n in names)})")
            plan = "\n".join(r[0] for r in cur.fetchall())
        finally:
            cur.execute("DEALLOCATE generic_claim")
            cur.execute("RESET plan_cache_mode")
            cur.execute("RESET enable_seqscan")
    assert "idx_expired" not in plan and "Seq Scan" not in plan, plan
    for index in ("idx_queue_claim", "idx_queue_timed", "idx_leases", *(("idx_queue_past",) if order == "due" else ())):
        assert f"using {index} on messages" in plan, plan


# --- SKIP LOCKED ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_locked_head_does_not_block_other_consumers():
    first, second = forqapp.send_many("head", ["first", "second"])
    with other_session() as other:
        other.execute("BEGIN")
        other.execute("SELECT 1 FROM messages WHERE id = %s FOR UPDATE", (first,))
        with connection.cursor() as cur:
            cur.execute("SET lock_timeout = '200ms'")  # a wait on the lock would fail the claim
        message = services.claim("head")  # (had it waited on the lock, lock_timeout would have failed it)
        assert message.id == second
        assert services.claim("head") is None  # the head is skipped, not waited for
        other.execute("ROLLBACK")
    assert services.claim("head").id == first


CLAIMER = r"""
import sys, django
django.setup()
from forqapp import services
got = []
while True:
    batch = services.claim_many("race", 7)
    if not batch:
        break
    services.ack_many("race", [(m.id, m.receipt) for m in batch])
    got += [m.id for m in batch]
print("\n".join(got))
"""


@pytest.mark.django_db(transaction=True)
def test_many_threads_and_processes_claim_each_message_exactly_once():
    sent = set(forqapp.send_many("race", [f"m{i}" for i in range(3000)]))
    procs = [
        subprocess.Popen([sys.executable, "-c", CLAIMER], env=child_env(), cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    got: list[str] = []
    lock = threading.Lock()

    def consume(single: bool) -> None:
        from django.db import connections

        try:
            while True:
                if single:
                    message = services.claim("race")
                    batch = [message] if message else []
                else:
                    batch = services.claim_many("race", 5)
                if not batch:
                    return
                for m in batch:
                    forqapp.ack(m)
                with lock:
                    got.extend(m.id for m in batch)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(consume, [i % 2 == 0 for i in range(8)]))
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        got.extend(line for line in out.splitlines() if line)
    assert len(got) == len(sent)  # nothing claimed twice
    assert set(got) == sent  # nothing lost


@pytest.mark.django_db(transaction=True)
def test_receipts_fence_settlement_across_sessions():
    forqapp.send("fence", "x")
    message = forqapp.receive("fence")
    with other_session() as other:
        from forqapp.store.postgresql import PostgreSQLStore

        elsewhere = PostgreSQLStore.on(other)
        # another host can't ack with a wrong receipt, nor twice
        assert not elsewhere.ack("fence", message.id, message.receipt + 1)
        # another host ends the lease and claims the message again: a new receipt
        assert elsewhere.change_visibility("fence", [(message.id, message.receipt)], services.now_ms(), 0) == [True]
        again = elsewhere.claim("fence", services.now_ms(), visibility_ms=60_000, max_attempts=0,
                                dlq_ttl_ms=60_000).deliveries
        assert [(d.id, d.attempts) for d in again] == [(message.id, 2)] and again[0].receipt > message.receipt
    with pytest.raises(forqapp.ForqError):
        forqapp.ack(message)  # its delivery was taken over elsewhere


# --- LISTEN/NOTIFY ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_produce_on_another_host_wakes_a_waiting_consumer_fast(settings):
    settings.FORQ_WAKE_FALLBACK_MS = 60_000  # only a notification can wake it in time
    latencies = []
    with other_session() as other:
        for round_ in range(8):
            result = {}

            def wait(result=result):
                try:
                    result["message"] = forqapp.receive("wake", wait=5)
                    result["at"] = time.monotonic()
                finally:
                    connections.close_all()  # this thread's session (psycopg warns about one left open)

            waiter = threading.Thread(target=wait)
            waiter.start()
            time.sleep(0.15)  # the consumer is waiting on an empty queue
            sent_at = time.monotonic()
            (message_id,) = insert_raw(other, "wake", tag=f"r{round_}")
            waiter.join(6)
            assert result["message"] is not None and result["message"].id == message_id
            latencies.append(result["at"] - sent_at)
            forqapp.ack(result["message"])
    # Every round woken by the notification: the 60 s fallback would let each 5 s wait end empty.
    # (How fast is for the benchmarks: a median of about 6 ms on a quiet machine.)
    assert max(latencies) < 2.5, latencies


@pytest.mark.django_db(transaction=True)
def test_a_lost_notification_costs_at_most_the_fallback(settings):
    settings.FORQ_WAKE_FALLBACK_MS = 250
    result = {}

    def wait():
        try:
            result["message"] = forqapp.receive("lost", wait=5)
            result["at"] = time.monotonic()
        finally:
            connections.close_all()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    with other_session() as other:
        sent_at = time.monotonic()
        insert_raw(other, "lost", notify=False)  # no NOTIFY at all
    waiter.join(6)
    assert result["message"] is not None
    assert result["at"] - sent_at < 1.0


@pytest.mark.django_db(transaction=True)
def test_a_send_notifies_on_commit_only():
    with other_session() as listener:
        listener.execute("LISTEN forq")

        def received(timeout: float) -> list[str]:
            return [n.payload for n in listener.notifies(timeout=timeout)]

        with transaction.atomic():
            forqapp.send("outbox", "kept")
            assert received(0.2) == []  # not before the commit
        assert received(0.5) == ["outbox"]
        with pytest.raises(RuntimeError):
            with transaction.atomic():
                forqapp.send("outbox", "rolled back")
                raise RuntimeError
        assert received(0.3) == []  # never for a rollback
    assert [m.content for m in services.claim_many("outbox", 10)] == ["kept"]


# --- multi-host rehearsal ---------------------------------------------------------------------

WORKER = r"""
import sys, threading, django
django.setup()
from forqapp.worker import consumers
out = open(sys.argv[1], "a", buffering=1)
lock = threading.Lock()

def handle(message):
    with lock:
        out.write(message.content + "\n")

consumers.register("rehearsal", handle)
try:
    from forqapp.management.commands import forq_worker  # noqa: F401
except ImportError:  # no worker command in this tree: the same loop by hand
    import signal
    from forqapp import services
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    while not stop.is_set():
        batch = services.claim_many("rehearsal", 50)
        for m in batch:
            handle(m)
        services.ack_many("rehearsal", [(m.id, m.receipt) for m in batch])
        if not batch:
            from forqapp.services.notify import notifier_for
            notifier_for("default").wait("rehearsal", 1.0)
else:
    from django.core.management import call_command
    call_command("forq_worker", "rehearsal", "--concurrency", "4", "--prefetch", "64", verbosity=0)
"""


def start_api_server(port: int, **extra: str) -> subprocess.Popen:
    env = child_env(FORQ_API_ADDR=f"127.0.0.1:{port}", FORQ_LONG_POLL_SECONDS="2", **extra)
    if (ROOT / "forqapp" / "management" / "commands" / "forq_serve.py").exists():
        cmd = [sys.executable, str(ROOT / "manage.py"), "forq_serve", "--no-ui"]
    else:
        cmd = [str(Path(sys.executable).parent / "granian"), "--interface", "asgi", "--factory",
               "--loop", "uvloop", "--host", "127.0.0.1", "--port", str(port),
               "forqapp.api.asgi:api_application"]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def free_port() -> int:
    from .conftest import free_port as worker_port  # (each xdist worker's own range)

    return worker_port()


def wait_healthy(url: str, proc: subprocess.Popen) -> None:
    import httpx

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"API server exited: {proc.stderr.read()}")
        try:
            if httpx.get(url + "/healthcheck", timeout=1).status_code == 204:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer /healthcheck within 30 s")


def stop(proc: subprocess.Popen) -> None:
    import signal

    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
        except ProcessLookupError:
            proc.wait(5)  # it ended meanwhile
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    proc.stderr.close()  # its error pipe (a ResourceWarning otherwise)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_rehearsal_two_servers_two_workers_exactly_once(tmp_path):
    """Two API hosts and two worker hosts on one PostgreSQL: 20,000 messages produced over HTTP to
    both servers, consumed by both workers while they arrive — each exactly once, none lost."""
    import httpx

    total, producers = 20_000, 16
    ports = [free_port(), free_port()]
    servers = [start_api_server(p) for p in ports]
    outputs = [tmp_path / "worker-0.txt", tmp_path / "worker-1.txt"]
    workers = []
    try:
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        for url, proc in zip(urls, servers, strict=True):
            wait_healthy(url, proc)
        workers = [
            subprocess.Popen([sys.executable, "-c", WORKER, str(out)], env=child_env(), cwd=ROOT,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
            for out in outputs
        ]

        def produce(k: int) -> int:
            ok = 0
            with httpx.Client(base_url=urls[k % 2], headers={"X-API-Key": SECRET}, timeout=30) as client:
                for i in range(k, total, producers):
                    r = client.post("/api/v1/queues/rehearsal/messages", json={"content": f"m{i}"})
                    assert r.status_code == 204, r.text
                    ok += 1
            return ok

        started = time.monotonic()
        with ThreadPoolExecutor(producers) as pool:
            assert sum(pool.map(produce, range(producers))) == total
        produced_s = time.monotonic() - started

        deadline = time.monotonic() + 180
        remaining = None
        while time.monotonic() < deadline:
            with connection.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM messages WHERE queue IN ('rehearsal', 'rehearsal-dlq')")
                (remaining,) = cur.fetchone()
            if remaining == 0:
                break
            for w in workers:
                assert w.poll() is None, w.stderr.read()
            time.sleep(0.2)
        drained_s = time.monotonic() - started
        assert remaining == 0, f"{remaining} messages left after 180 s"
    finally:
        for proc in workers + servers:
            stop(proc)
    lines = [out.read_text().splitlines() for out in outputs]
    seen = [x for part in lines for x in part]
    assert len(seen) == total, f"{len(seen) - len(set(seen))} duplicates"
    assert set(seen) == {f"m{i}" for i in range(total)}
    assert all(len(part) > total // 10 for part in lines), [len(p) for p in lines]  # both worked
    print(f"\nrehearsal: produced {total} over HTTP in {produced_s:.1f} s, all consumed after "
          f"{drained_s:.1f} s; worker split {[len(p) for p in lines]}")


# --- wake-ups from jobs ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_move_to_the_dlq_wakes_a_consumer_waiting_on_it(settings):
    from forqapp.store.postgresql import PostgreSQLStore

    settings.FORQ_WAKE_FALLBACK_MS = 60_000  # only the notification can wake it in time
    forqapp.send("doomed", "x")
    message = forqapp.receive("doomed")
    forqapp.fail(message)
    result = {}

    def wait():
        try:
            result["message"] = forqapp.receive("doomed-dlq", wait=5)
            result["at"] = time.monotonic()
        finally:
            connections.close_all()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.2)
    with other_session() as other:
        moved_at = time.monotonic()
        assert PostgreSQLStore.on(other).move_failed_to_dlq(services.now_ms(), 3_600_000, 3_600_000) == 1
    waiter.join(6)
    # The receive waits 5 s and the fallback is 60 s: a message at all is the notification's doing
    # (no wall-clock bound tighter than that: the machine may be loaded).
    assert result["message"] is not None and result["message"].id == message.id
    assert result["at"] - moved_at < 5


# --- a connection the server terminates ---------------------------------------------------------


TERMINATED_APP = "forq-terminated"  # the application_name of the sessions a test terminates


def terminate_children() -> int:
    """pg_terminate_backend of every session of the processes started with ``PGAPPNAME`` =
    :data:`TERMINATED_APP` (a restart, a failover, an idle-session killer, as they see it) — not
    this test process's own, which later tests use; how many."""
    with other_session() as s:
        return len(s.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s", (TERMINATED_APP,)).fetchall())


@pytest.mark.django_db(transaction=True)
def test_a_terminated_connection_is_replaced_at_the_next_call():
    """The stores' raw cursors raise psycopg's errors, which Django does not see: it handed the dead
    connection back for ever (every call failed until a restart)."""
    from forqapp import errors
    from forqapp.models import Message

    forqapp.send("lost", "a")
    pid = connection.connection.info.backend_pid
    with other_session() as s:
        s.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(Exception) as failed:  # noqa: PT011 - the driver's error, whichever it is
        forqapp.send("lost", "b")
    assert errors.unavailable(failed.value) is not None, failed.value  # a 503 on the API, not a 500
    forqapp.send("lost", "c")  # on a new connection
    assert connection.connection.info.backend_pid != pid
    assert sorted(Message.objects.filter(queue="lost").values_list("content", flat=True)) == ["a", "c"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_api_and_a_worker_recover_from_terminated_connections(tmp_path):
    """Every session terminated, twice: the API answers 204 or 503 (never 500) and recovers; the
    worker keeps working (it died) and handles every message once."""
    import httpx

    # A claim whose session is terminated after its commit, before its answer reached the worker,
    # leaves its messages leased to nobody until the lease ends (at least once): a lease of 5 s
    # brings them back within the test's wait, as the default 5 min would not.
    forqapp.configure_queue("rehearsal", visibility_timeout=5)
    port = free_port()
    server = start_api_server(port, PGAPPNAME=TERMINATED_APP, FORQ_SERVE_JOBS="false")
    out = tmp_path / "handled.txt"
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(out)], env=child_env(PGAPPNAME=TERMINATED_APP),
                              cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    client = httpx.Client(base_url=url, headers={"X-API-Key": SECRET}, timeout=10)
    try:
        wait_healthy(url, server)
        sent, answers = [], []

        def produce(k: int) -> None:
            response = client.post("/api/v1/queues/rehearsal/messages", json={"content": f"m-{k}"})
            answers.append(response.status_code)
            if response.status_code == 204:
                sent.append(f"m-{k}")
            else:
                assert response.status_code == 503 and response.headers["Retry-After"] == "5", response.text

        for k in range(20):
            produce(k)
        for _ in range(2):
            assert terminate_children() > 0
            for k in range(len(answers), len(answers) + 40):
                produce(k)
                time.sleep(0.02)
        deadline = time.monotonic() + 10
        while answers[-1] != 204 and time.monotonic() < deadline:
            produce(len(answers))
        assert answers[-1] == 204 and answers.count(204) >= len(answers) - 6, answers
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not out.exists() or len(out.read_text().split()) < len(sent)):
            time.sleep(0.2)
        assert worker.poll() is None, worker.stderr.read()
        handled = out.read_text().split()
        assert sorted(handled) == sorted(sent)  # each once
    finally:
        client.close()
        stop(worker)
        stop(server)


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_connection_was_terminated_runs_again_at_its_next_turn(caplog):
    """The jobs thread kept a dead connection (every run failed while its lease held standbys
    off); a job that fails on it gives it up, and the next turn runs on a new one."""
    from forqapp import errors
    from forqapp.models import Message
    from forqapp.worker import jobs

    scheduler = jobs.Scheduler([jobs.JOBS["failed"]], lease=False)
    failed = forqapp.send("jobs-lost", "x")
    Message.objects.filter(id=failed).update(status=2, attempts=5)
    pid = connection.connection.info.backend_pid
    with other_session() as s:
        s.execute("SELECT pg_terminate_backend(%s)", (pid,))
    errors._said.clear()  # (the same reason said by an earlier test less than a second ago)
    scheduler._run_one(jobs.JOBS["failed"])
    said = [r for r in caplog.records if r.name == "forqapp.jobs"]  # one line, no traceback (errors.log_failure)
    assert [r.getMessage() for r in said] == ["forqapp job failed: the database server closed the connection; "
                                              "retrying at its next turn (this line at most once a second)"]
    assert said[0].exc_info is None
    assert Message.objects.get(id=failed).queue == "jobs-lost"  # not moved yet
    scheduler._run_one(jobs.JOBS["failed"])  # the next turn
    assert Message.objects.get(id=failed).queue == "jobs-lost-dlq"
    assert connection.connection.info.backend_pid != pid


@pytest.mark.django_db
def test_the_installed_claim_function_is_the_stores():
    """A receive calls ``forq_claim`` (migration 0015), which holds the store's CLAIM: the function
    the migrations installed must be the one the store's text makes. A change to CLAIM without a
    migration that installs it fails here."""
    from forqapp.store.postgresql import CLAIM_FUNCTION

    with connection.cursor() as cur:
        cur.execute("SELECT prosrc, proconfig, pg_get_function_arguments(oid) FROM pg_proc"
                    " WHERE proname = 'forq_claim'")
        (body, config, arguments), = cur.fetchall()
    assert body == CLAIM_FUNCTION.split("$claim$")[1], "CLAIM changed: add a migration that installs it"
    assert f"forq_claim({arguments})" in CLAIM_FUNCTION and config == ["plan_cache_mode=force_generic_plan"]


@pytest.mark.django_db(transaction=True)
def test_a_claim_leaves_the_sessions_plan_cache_mode_as_it_was():
    """The claim's generic plan is the function's own setting: the caller's session keeps its own
    (which would otherwise govern the caller's prepared statements and functions too)."""
    with connection.cursor() as cur:
        cur.execute("SET plan_cache_mode = force_custom_plan")
    try:
        forqapp.send_many("plan", ["a", "b", "c"])
        taken = [forqapp.receive("plan") for _ in range(3)]
        assert [m.content for m in taken] == ["a", "b", "c"]
        with connection.cursor() as cur:
            cur.execute("SHOW plan_cache_mode")
            assert cur.fetchone()[0] == "force_custom_plan"
    finally:
        with connection.cursor() as cur:
            cur.execute("RESET plan_cache_mode")


@pytest.mark.django_db
@pytest.mark.parametrize("plan", ["force_custom_plan", "force_generic_plan"])
def test_a_claim_finds_the_ended_leases_without_reading_the_live_ones(plan):
    """With thousands of deliveries in flight, the claim's look for ended leases reads the first
    page of idx_leases, not every lease of the queue: PostgreSQL takes ``status = 1`` from the
    index's condition, so the index ranges over process_after right after the queue (migration
    0016; with 0014's (queue, status, process_after, …) it read all 5,000 leases here, 37 pages).
    Both plans: the one PostgreSQL makes for the values at hand, and the generic one ``forq_claim``
    keeps for the session."""
    import json

    from forqapp.store.postgresql import PICK

    forqapp.send_many("flying", ["x"] * 6_000)
    services.claim_many("flying", 5_000, visibility_timeout=3_600)  # in flight: not ended
    sql, names = numbered(PICK["fifo"])
    values = {"queue": "'flying'", "now": str(services.now_ms()), "limit": "1", "ended_among": "100"}
    with connection.cursor() as cur:
        cur.execute("ANALYZE messages")
        cur.execute(f"SET plan_cache_mode = {plan}")
        try:
            cur.execute(f"PREPARE pick ({', '.join('text' if n == 'queue' else 'bigint' for n in names)}) AS {sql}")
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                        f"EXECUTE pick ({', '.join(values[n] for n in names)})")
            found = cur.fetchone()[0]
        finally:
            cur.execute("DEALLOCATE ALL")
            cur.execute("RESET plan_cache_mode")
    found = json.loads(found) if isinstance(found, str) else found

    def nodes(node: dict):
        yield node
        for child in node.get("Plans", []):
            yield from nodes(child)

    leases = [n for n in nodes(found[0]["Plan"]) if n.get("Index Name") == "idx_leases"]
    assert leases, found
    for node in leases:
        assert node["Actual Rows"] == 0
        assert node["Shared Hit Blocks"] + node["Shared Read Blocks"] <= 3, node


@pytest.mark.django_db
@pytest.mark.parametrize("plan", ["force_custom_plan", "force_generic_plan"])
def test_a_due_ordered_claim_reads_a_few_index_pages_of_a_long_queue(plan):
    """The due order on 100,000 messages due, 2,000 of them sent long past due (a task's past
    ``run_after``): the pick reads the head of idx_queue_claim and of idx_queue_past in their order
    and sorts only what it read; no part reads the table or sorts the queue. Both plans: the one
    PostgreSQL makes for the values at hand, and the generic one ``forq_claim`` keeps."""
    import json

    from forqapp.store.postgresql import CLAIM

    now = services.now_ms()
    forqapp.send_many("long", ["x"] * 98_000)
    st = store.for_alias(connection.alias)
    past = ids.new_ids(2_000)
    st.insert([NewMessage(m, "long", "p", now - 3_600_000 + k, now, now + 3_600_000, k % 3, None, None)
               for k, m in enumerate(past)])
    sql, names = numbered(CLAIM["due"])
    types = {"queue": "text", "delivered": "text[]"}
    values = {"queue": "'long'", "now": str(now + 1), "limit": "10", "ended_among": "100", "among": "1000",
              "visibility": "30000", "max": "5", "dlq_ttl": "1000"}
    with connection.cursor() as cur:
        cur.execute("ANALYZE messages")
        cur.execute(f"SET plan_cache_mode = {plan}")
        try:
            cur.execute(f"PREPARE due_claim ({', '.join(types.get(n, 'bigint') for n in names)}) AS {sql}")
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                        f"EXECUTE due_claim ({', '.join(values[n] for n in names)})")
            found = cur.fetchone()[0]
        finally:
            cur.execute("DEALLOCATE ALL")
            cur.execute("RESET plan_cache_mode")
    found = json.loads(found) if isinstance(found, str) else found

    def nodes(node: dict):
        yield node
        for child in node.get("Plans", []):
            yield from nodes(child)

    every = list(nodes(found[0]["Plan"]))
    assert not [n for n in every if n["Node Type"] in ("Seq Scan", "Bitmap Heap Scan")], found
    reads = {n.get("Index Name") for n in every if n.get("Index Name")}
    assert {"idx_queue_claim", "idx_queue_past"} <= reads, found
    assert all(n.get("Actual Rows", 0) <= 100 for n in every if n["Node Type"] == "Sort"), found
    heads = [n for n in every if n.get("Index Name") in ("idx_queue_claim", "idx_queue_past")]
    # (10 rows, each locked through its heap page: dozens of pages, where the queue holds ~1,500)
    assert all(n["Shared Hit Blocks"] + n["Shared Read Blocks"] <= 100 for n in heads), heads
    top = [m for k, m in enumerate(past) if k % 3 == 2][:10]  # priority 2, the longest past due first
    assert set(Message.objects.filter(status=Status.PROCESSING).values_list("id", flat=True)) == set(top)
