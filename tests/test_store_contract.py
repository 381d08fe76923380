"""The store contract (:class:`forqapp.store.Store`): every store class implements every operation with
the declared signature, and the configured database's store behaves as the contract says.

The declaration tests run on every store class that imports here (the PostgreSQL one needs psycopg).
The behaviour tests run on the store of the test database: SQLite, and PostgreSQL in the test
command's second run (``DATABASE_URL=postgres://…``, as tests/test_postgres.py), so each store
passes the same assertions — that is their parity.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from importlib import import_module

import pytest
from django.core.checks import CheckMessage
from django.db import connection

from forqapp import ids, store, vocab
from forqapp.models import AuthThrottle, Lease, Message, StagedMessage
from forqapp.store import Delivery, LeaseHolder, NewMessage, QueueDepth, SnapshotBounds, SnapshotRow, Store

READY, PROCESSING, FAILED = vocab.Status
NOW = 1_800_000_000_000
HOUR = 3_600_000


def store_classes() -> list[type[Store]]:
    classes = []
    for dotted in store.CLASSES.values():
        module, _, name = dotted.rpartition(".")
        try:
            classes.append(getattr(import_module(module), name))
        except ImportError:  # its driver is not installed
            continue
    return classes


def public(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if not n.startswith("_") and callable(v)}


# --- the declaration ----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", store_classes(), ids=lambda c: c.__name__)
def test_every_store_implements_every_operation_with_the_declared_signature(cls):
    assert not inspect.isabstract(cls), cls.__abstractmethods__
    assert store.CLASSES[cls.vendor].endswith("." + cls.__name__)
    for name in Store.__abstractmethods__ | {"check", "startup_problems", "poll_interval"}:
        declared, implemented = getattr(Store, name), getattr(cls, name)
        assert str(inspect.signature(implemented)) == str(inspect.signature(declared)), name
    assert public(cls) <= public(Store), "an operation outside the contract: declare it in Store"


@pytest.mark.parametrize("cls", store_classes(), ids=lambda c: c.__name__)
def test_every_store_declares_its_capabilities(cls):
    assert isinstance(cls.text_holds_nul, bool)
    assert cls.wakeups in ("data_version", "listen")
    assert isinstance(cls.default_db_threads, int) and cls.default_db_threads >= 1
    checks = cls("default").check()
    assert isinstance(checks, Iterator)
    assert all(isinstance(c, CheckMessage) for c in checks)


def test_the_store_of_an_alias_is_made_once():
    assert store.for_alias("default") is store.for_alias("default")
    assert store.for_alias("default").vendor == connection.vendor


def test_an_unsupported_database_is_named():
    with pytest.raises(NotImplementedError, match="mysql"):
        store.store_class("mysql")


# --- behaviour, on the test database's store ------------------------------------------------------


@pytest.fixture
def st(db) -> Store:
    Message.objects.all().delete()
    return store.for_alias(connection.alias)


def put(st: Store, queue: str, n: int = 1, *, due: int = NOW, received: int = NOW, ttl: int = HOUR,
        is_dlq: bool = False, content: str = "m") -> list[str]:
    new = ids.new_ids(n)
    st.insert([NewMessage(m, queue, f"{content}{k}", due, received + k, due + ttl) for k, m in enumerate(new)],
              is_dlq=is_dlq)
    return new


def row(message_id: str) -> Message:
    return Message.objects.get(id=message_id)


def test_insert_every_batch_shape(st):
    one = put(st, "shapes")
    shared = put(st, "shapes", 3)
    mixed = ids.new_ids(2)
    st.insert([NewMessage(mixed[0], "shapes", "a", NOW, NOW + 10, NOW + HOUR),
               NewMessage(mixed[1], "other", "b", NOW + 5, NOW + 11, NOW + HOUR)])
    st.insert([])
    for m in one + shared + mixed:
        r = row(m)
        assert (r.status, r.attempts, r.is_dlq, r.processing_started_at) == (READY, 0, False, None)
    assert row(mixed[1]).queue == "other" and row(mixed[1]).process_after == NOW + 5
    assert row(mixed[0]).expires_after == NOW + HOUR
    if st.text_holds_nul:
        (nul,) = ids.new_ids(1)
        st.insert([NewMessage(nul, "shapes", "a\x00b", NOW, NOW, NOW + HOUR),
                   NewMessage(ids.new_id(), "shapes", "c", NOW, NOW, NOW + HOUR)])
        assert row(nul).content == "a\x00b"


def test_claim_takes_the_oldest_due_message_with_a_fresh_receipt(st):
    assert st.claim("fifo", NOW) is None
    later = put(st, "fifo", received=NOW + 5)
    first = put(st, "fifo", received=NOW)
    put(st, "fifo", due=NOW + 60_000)  # delayed: not due
    got = st.claim("fifo", NOW + 1)
    assert isinstance(got, Delivery)
    assert (got.id, got.queue, got.content, got.attempts) == (first[0], "fifo", "m0", 1)
    assert got.receipt > row(first[0]).received_at - 1 and row(got.id).status == PROCESSING
    assert st.claim("fifo", NOW + 1).id == later[0]
    assert st.claim("fifo", NOW + 1) is None


def test_claim_many_oldest_first_up_to_the_limit(st):
    sent = put(st, "many", 5)
    got = st.claim_many("many", NOW, 3)
    assert [d.id for d in got] == sent[:3] and all(isinstance(d, Delivery) for d in got)
    assert [d.id for d in st.claim_many("many", NOW, 10)] == sent[3:]
    assert st.claim_many("many", NOW, 10) == []


def test_receipts_fence_ack(st):
    put(st, "ack")
    d = st.claim("ack", NOW)
    assert not st.ack("ack", d.id, d.receipt + 1)
    assert not st.ack("other", d.id, d.receipt)
    assert st.ack("ack", d.id, d.receipt)
    assert not st.ack("ack", d.id, d.receipt)
    assert not Message.objects.filter(id=d.id).exists()


def test_ack_many_counts_only_current_deliveries(st):
    put(st, "acks", 3)
    a, b, c = st.claim_many("acks", NOW, 3)
    assert st.ack_many("acks", [(a.id, a.receipt), (b.id, b.receipt + 1), (c.id, c.receipt)]) == 2
    assert st.ack_many("acks", []) == 0
    assert list(Message.objects.values_list("id", flat=True)) == [b.id]


def test_release_many_counts_only_current_deliveries_and_uncounts_their_attempts(st):
    put(st, "releases", 3)
    a, b, c = st.claim_many("releases", NOW, 3)
    assert st.release_many("releases", [(a.id, a.receipt), (b.id, b.receipt + 1), (c.id, c.receipt),
                                        (a.id, a.receipt)], NOW + 1) == 2
    assert st.release_many("releases", [], NOW + 1) == 0
    assert st.release_many("other", [(b.id, b.receipt)], NOW + 1) == 0
    for m in (a, c):
        r = row(m.id)
        assert (r.status, r.attempts, r.processing_started_at) == (READY, 0, None)
    assert row(b.id).status == PROCESSING


def test_nack_backs_off_by_attempt_and_fails_when_out_of_attempts(st):
    (m,) = put(st, "nack")
    backoff = (100, 200, 300)
    for attempt, delay in [(1, 100), (2, 200), (3, 300), (4, 300)]:
        now = NOW + attempt * 10_000
        d = st.claim("nack", now)
        assert d.attempts == attempt
        assert not st.nack("nack", m, d.receipt + 1, now, 5, backoff)
        assert st.nack("nack", m, d.receipt, now, 5, backoff)
        r = row(m)
        assert (r.status, r.process_after, r.processing_started_at) == (READY, now + delay, None)
        assert st.claim("nack", now + delay - 1) is None
    d = st.claim("nack", NOW + 100_000)
    assert st.nack("nack", m, d.receipt, NOW + 100_000, 5, (7,))
    assert row(m).status == FAILED


def test_fail_release_and_extend(st):
    a, b, c = put(st, "settle", 3)
    da, db_, dc = st.claim_many("settle", NOW, 3)
    assert st.fail("settle", a, da.receipt, NOW) and row(a).status == FAILED
    assert not st.fail("settle", a, da.receipt, NOW)
    assert st.release("settle", b, db_.receipt, NOW) and (row(b).status, row(b).attempts) == (READY, 0)
    assert not st.release("settle", b, db_.receipt, NOW)
    renewed = st.extend("settle", c, dc.receipt, NOW)
    assert renewed is not None and renewed > dc.receipt
    assert st.extend("settle", c, dc.receipt, NOW) is None
    assert not st.ack("settle", c, dc.receipt) and st.ack("settle", c, renewed)


def test_has_due_data_version_and_ping(st):
    put(st, "due-a", 3)
    put(st, "due-b", due=NOW + 60_000)
    assert st.has_due(["due-a", "due-b", "none"], NOW, 2) == {"due-a": 2}
    assert st.has_due([], NOW, 2) == {}
    assert isinstance(st.data_version(), int)
    st.ping()


def test_requeue_and_delete_dead_letters(st):
    dead = put(st, "jobs-dlq", 3, is_dlq=True, received=NOW - 1000)
    busy = st.claim("jobs-dlq", NOW)  # a DLQ message in processing is left alone
    assert st.requeue("jobs-dlq", dead[1], NOW + 5, HOUR) == 1
    r = row(dead[1])
    assert (r.queue, r.is_dlq, r.status, r.attempts, r.process_after, r.expires_after, r.received_at) == (
        "jobs", False, READY, 0, NOW + 5, NOW + 5 + HOUR, NOW - 1000 + 1)
    assert st.requeue("jobs-dlq", None, NOW + 5, HOUR) == 1  # dead[2]; dead[0] is processing
    assert row(busy.id).queue == "jobs-dlq"
    assert st.requeue("jobs-dlq", None, NOW + 5, HOUR) == 0
    more = put(st, "jobs-dlq", 2, is_dlq=True)
    assert st.delete_dlq("jobs-dlq", more[0]) == 1
    assert st.delete_dlq("jobs-dlq", None) == 2  # more[1] and the processing one
    assert st.delete_dlq("jobs", None) == 0  # not a DLQ row


def test_jobs_move_recover_and_delete_in_batches(st):
    expired = put(st, "j", 3, ttl=10)
    d = st.claim("j", NOW)  # expired[0], processing: never moved
    assert st.count_expired(NOW + 100, False) == 2
    assert st.move_expired_to_dlq(NOW + 100, HOUR, batch=1) == 2
    r = row(expired[1])
    assert (r.queue, r.is_dlq, r.status, r.attempts, r.failure_reason, r.expires_after) == (
        "j-dlq", True, READY, 0, vocab.FailureReason.MESSAGE_EXPIRED, NOW + 100 + HOUR)
    assert st.count_stale(NOW + 1000, 500) == 1
    assert st.recover_stale(NOW + 1000, 500, 1, batch=1) == 1  # out of attempts: failed
    assert row(d.id).status == FAILED and row(d.id).processing_started_at is None
    assert st.count_failed(False) == 1
    assert st.move_failed_to_dlq(NOW + 2000, HOUR) == 1
    assert row(d.id).failure_reason == vocab.FailureReason.MAX_ATTEMPTS_REACHED
    (again,) = put(st, "k")
    dk = st.claim("k", NOW)
    assert st.recover_stale(NOW + 1000, 500, 5) == 1 and row(again).status == READY
    assert st.claim("k", NOW + 1000).receipt > dk.receipt
    Message.objects.filter(id=d.id).update(status=FAILED)
    assert st.count_failed(True) == 1 and st.delete_failed_dlq(batch=1) == 1
    assert st.count_expired(NOW + 2 * HOUR, True) == 2
    assert st.delete_expired_dlq(NOW + 2 * HOUR, batch=1) == 2
    st.optimize()


def test_queue_depths(st):
    put(st, "b", 2)
    put(st, "a")
    put(st, "a-dlq", 3, is_dlq=True)
    depths = st.queue_depths()
    assert all(isinstance(d, QueueDepth) for d in depths)
    assert depths == [("a", False, 1), ("a-dlq", True, 3), ("b", False, 2)]


def test_staged_rows_publish_once_discard_and_expire(st):
    from forqapp.store import StagedMessage as Staged

    rows = [Staged(m, f"s{k}", NOW - HOUR if k == 0 else NOW + k) for k, m in enumerate(ids.new_ids(3))]
    st.stage("t1", "pub", rows, NOW)
    st.stage("t2", "pub", [Staged(ids.new_id(), "gone", NOW)], NOW)
    st.stage("t3", "pub", [Staged(ids.new_id(), "old", NOW)], NOW - 10 * HOUR)
    assert st.claim("pub", NOW + HOUR) is None  # staged rows are invisible
    assert st.publish_staged([("t1", "pub")], NOW, HOUR, 10_000) == {"pub": 3}
    assert st.publish_staged([("t1", "pub")], NOW, HOUR, 10_000) == {"pub": 0}
    old = row(rows[0].id)
    assert (old.process_after, old.received_at, old.expires_after) == (NOW - 10_000, NOW, NOW + HOUR)
    assert row(rows[2].id).expires_after == NOW + 2 + HOUR
    assert st.discard_staged([("t2", "pub")]) == 1
    assert st.delete_abandoned_staged(NOW - HOUR, batch=1) == 1
    assert not StagedMessage.objects.exists()


def test_snapshot_pages_and_bounds(st):
    sent = sorted(put(st, "snap", 5))
    dead = put(st, "snap-dlq", 1, is_dlq=True)
    page = st.snapshot_page("snap", "", None, 2)
    assert [r.id for r in page] == sent[:2] and all(isinstance(r, SnapshotRow) for r in page)
    assert page[0]._asdict().keys() == set(vocab.SNAPSHOT_COLUMNS)
    assert (page[0].status, page[0].attempts, page[0].failure_reason) == (READY, 0, None)
    assert [r.id for r in st.snapshot_page("snap", sent[1], sent[3], 10)] == sent[2:4]
    assert [r.id for r in st.snapshot_page("snap-dlq", "", None, 10)] == dead
    bounds = st.snapshot_bounds("snap")
    assert isinstance(bounds, SnapshotBounds) and bounds == (5, sent[0], sent[-1])
    assert st.snapshot_bounds("empty") == (0, None, None)


def test_auth_throttle(st):
    assert st.auth_blocked_until("10.0.0.1") == 0
    assert st.auth_failed("10.0.0.1", NOW, 60_000, 3, 5_000) == 0
    assert st.auth_failed("10.0.0.1", NOW + 1, 60_000, 3, 5_000) == 0
    assert st.auth_failed("10.0.0.1", NOW + 2, 60_000, 3, 5_000) == NOW + 2 + 5_000
    assert st.auth_blocked_until("10.0.0.1") == NOW + 2 + 5_000
    assert st.auth_failed("10.0.0.2", NOW + 70_000, 60_000, 1, 5_000) == NOW + 75_000


def test_nack_and_fail_keep_the_consumers_error_and_fail_sets_its_reason(st):
    retried, failed, plain = put(st, "errs", 3)
    d1, d2, d3 = st.claim_many("errs", NOW, 3)
    assert st.nack("errs", retried, d1.receipt, NOW, 1, (10,), "ValueError: boom")
    assert (row(retried).status, row(retried).last_error) == (FAILED, "ValueError: boom")
    assert row(retried).failure_reason is None  # out of attempts: the failed job names the reason
    assert not st.fail("errs", failed, d2.receipt + 1, NOW, "nope")
    assert st.fail("errs", failed, d2.receipt, NOW, "forqapp.errors.FatalError: no way")
    assert (row(failed).status, row(failed).failure_reason, row(failed).last_error) == (
        FAILED, vocab.FailureReason.FATAL_ERROR, "forqapp.errors.FatalError: no way")
    assert st.fail("errs", plain, d3.receipt, NOW)
    assert (row(plain).failure_reason, row(plain).last_error) == (vocab.FailureReason.FATAL_ERROR, None)
    assert st.move_failed_to_dlq(NOW + 1, HOUR) == 3
    moved = {m: (row(m).queue, row(m).failure_reason, row(m).last_error) for m in (retried, failed, plain)}
    assert moved == {
        retried: ("errs-dlq", vocab.FailureReason.MAX_ATTEMPTS_REACHED, "ValueError: boom"),
        failed: ("errs-dlq", vocab.FailureReason.FATAL_ERROR, "forqapp.errors.FatalError: no way"),
        plain: ("errs-dlq", vocab.FailureReason.FATAL_ERROR, None),
    }
    (again,) = put(st, "errs")
    d = st.claim("errs", NOW)
    assert st.nack("errs", again, d.receipt, NOW, 5, (10,), "first")
    d = st.claim("errs", NOW + 10)
    assert st.nack("errs", again, d.receipt, NOW + 10, 5, (10,))  # no error given: the last one stays
    assert row(again).last_error == "first"


def test_login_throttle_shares_the_table_and_each_kind_prunes_only_its_own_rows(st):
    key = "login-user:abc"
    assert st.login_failed(key, NOW, 60_000, 2, 5_000) == 0
    assert st.login_failed(key, NOW + 1, 60_000, 2, 5_000) == NOW + 1 + 5_000
    assert st.auth_blocked_until(key) == NOW + 1 + 5_000
    st.auth_failed("10.0.0.9", NOW, 1_000, 5, 1_000)
    # An API-key failure long after: prunes the stale API-key row, never the login row.
    st.auth_failed("10.0.0.8", NOW + 10 * HOUR, 1_000, 5, 1_000)
    assert st.auth_blocked_until(key) == NOW + 1 + 5_000
    assert not AuthThrottle.objects.filter(address="10.0.0.9").exists()
    # A login failure long after prunes stale login rows, not API-key rows.
    st.login_failed("login-ip:10.0.0.1", NOW + 20 * HOUR, 60_000, 2, 5_000)
    assert not AuthThrottle.objects.filter(address=key).exists()
    assert AuthThrottle.objects.filter(address="10.0.0.8").exists()


def test_leases_one_holder_renewal_expiry_takeover_and_release(st):
    Lease.objects.all().delete()
    assert st.lease_holder("jobs") is None
    assert st.lease_acquire("jobs", "a", NOW, 1_000)
    assert st.lease_holder("jobs") == LeaseHolder("a", NOW + 1_000)
    assert isinstance(st.lease_holder("jobs"), LeaseHolder)
    assert not st.lease_acquire("jobs", "b", NOW + 500, 1_000)  # a holds it
    assert st.lease_acquire("jobs", "a", NOW + 500, 1_000)  # a renews
    assert st.lease_holder("jobs") == ("a", NOW + 1_500)
    assert st.lease_acquire("jobs", "b", NOW + 600, 1_000, replacing="a")  # a is known dead
    assert not st.lease_acquire("jobs", "a", NOW + 700, 1_000)
    assert st.lease_acquire("jobs", "c", NOW + 1_601, 1_000)  # b's lease expired
    assert not st.lease_release("jobs", "b")
    assert st.lease_release("jobs", "c")
    assert st.lease_holder("jobs") is None
    assert st.lease_acquire("jobs", "a", NOW, 1_000)
    Lease.objects.all().delete()
