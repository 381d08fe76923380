"""The store contract (:class:`forqapp.store.Store`): every store class implements every operation with
the declared signature, and the configured database's store behaves as the contract says.

The declaration tests run on every store class that imports here (the PostgreSQL one needs psycopg).
The behaviour tests run on the store of the test database: SQLite, and PostgreSQL in the test
command's second run (``DATABASE_URL=postgres://…``, as tests/test_postgres.py), so each store
passes the same assertions — that is their parity.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from importlib import import_module

import pytest
from django.core.checks import CheckMessage
from django.db import connection

from forqapp import ids, store, vocab
from forqapp.models import AuthThrottle, DedupEntry, Lease, Message, Queue, StagedMessage
from forqapp.store import (
    POLICY_COLUMNS,
    Claim,
    Delivery,
    LeaseHolder,
    NewMessage,
    QueueCounts,
    QueueDepth,
    QueueRow,
    SnapshotBounds,
    SnapshotRow,
    StateCounts,
    Store,
)

READY, PROCESSING, FAILED = vocab.Status
NOW = 1_800_000_000_000
HOUR = 3_600_000
VIS = 30_000  # the lease of the claims below unless a test says otherwise


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
    assert isinstance(cls.default_api_workers, int) and cls.default_api_workers >= 1
    checks = cls("default").check()
    assert isinstance(checks, Iterator)
    assert all(isinstance(c, CheckMessage) for c in checks)


def test_the_store_of_an_alias_is_made_once():
    assert store.for_alias("default") is store.for_alias("default")
    assert store.for_alias("default").vendor == connection.vendor


def test_an_unsupported_database_is_named():
    with pytest.raises(NotImplementedError, match="mysql"):
        store.store_class("mysql")


def test_the_policy_columns_are_the_queue_rows_policy():
    assert POLICY_COLUMNS == QueueRow._fields[1:1 + len(POLICY_COLUMNS)]
    assert {"max_attempts", "backoff", "visibility_timeout_ms", "retention_ms", "dlq_retention_ms", "max_length",
            "ordering", "dedup_window_ms", "paused"} <= set(POLICY_COLUMNS)


# --- behaviour, on the test database's store ------------------------------------------------------


@pytest.fixture
def st(db) -> Store:
    Message.objects.all().delete()
    Queue.objects.all().delete()
    DedupEntry.objects.all().delete()
    return store.for_alias(connection.alias)


def put(st: Store, queue: str, n: int = 1, *, due: int = NOW, received: int = NOW, ttl: int = HOUR,
        is_dlq: bool = False, content: str = "m", priority: int = 0, attributes: str | None = None,
        dedup_id: str | None = None) -> list[str]:
    new = ids.new_ids(n)
    st.insert([NewMessage(m, queue, f"{content}{k}", due, received + k, due + ttl, priority, attributes, dedup_id)
               for k, m in enumerate(new)], is_dlq=is_dlq)
    return new


def claim(st: Store, queue: str, now: int, limit: int = 1, *, vis: int = VIS, max_attempts: int = 0,
          dlq_ttl: int = HOUR, order: str = "fifo") -> Claim:
    got = st.claim(queue, now, limit, visibility_ms=vis, max_attempts=max_attempts, dlq_ttl_ms=dlq_ttl, order=order)
    assert isinstance(got, Claim) and all(isinstance(d, Delivery) for d in got.deliveries)
    return got


def take(st: Store, queue: str, now: int, limit: int = 1, **kw) -> list[Delivery]:
    return claim(st, queue, now, limit, **kw).deliveries


def one(st: Store, queue: str, now: int, **kw) -> Delivery | None:
    got = take(st, queue, now, 1, **kw)
    return got[0] if got else None


def row(message_id: str) -> Message:
    return Message.objects.get(id=message_id)


def state(*message_ids: str) -> list[dict]:
    return [Message.objects.filter(id=m).values().get() for m in message_ids]


# -- produce --


def test_insert_every_batch_shape(st):
    one_ = put(st, "shapes")
    shared = put(st, "shapes", 3)
    mixed = ids.new_ids(2)
    st.insert([NewMessage(mixed[0], "shapes", "a", NOW, NOW + 10, NOW + HOUR),
               NewMessage(mixed[1], "other", "b", NOW + 5, NOW + 11, NOW + HOUR)])
    assert st.insert([]) == []
    for m in one_ + shared + mixed:
        r = row(m)
        assert (r.status, r.attempts, r.is_dlq, r.processing_started_at, r.first_received_at) == (
            READY, 0, False, None, None)
        assert (r.priority, r.attributes, r.dedup_id) == (0, None, None)
    assert row(mixed[1]).queue == "other" and row(mixed[1]).process_after == NOW + 5
    assert row(mixed[0]).expires_after == NOW + HOUR
    rich = ids.new_ids(2)
    st.insert([NewMessage(rich[0], "shapes", "r", NOW, NOW, NOW + HOUR, 7, '{"k":"v"}', "d-1"),
               NewMessage(rich[1], "shapes", "s", NOW + 1, NOW, NOW + HOUR, -1000, None, None)])
    assert (row(rich[0]).priority, row(rich[0]).attributes_dict, row(rich[0]).dedup_id) == (7, {"k": "v"}, "d-1")
    assert row(rich[1]).priority == -1000
    if st.text_holds_nul:
        (nul,) = ids.new_ids(1)
        st.insert([NewMessage(nul, "shapes", "a\x00b", NOW, NOW, NOW + HOUR),
                   NewMessage(ids.new_id(), "shapes", "c", NOW, NOW, NOW + HOUR)])
        assert row(nul).content == "a\x00b"


@pytest.mark.parametrize("shared", [False, True], ids=["rows-apart", "shared-times"])
@pytest.mark.parametrize("count", [1_300, 517])  # SQLite, rows a statement: 512 + 512 + 256 + 16 + 4 (shared: 1,024 + 256 + 16 + 4); 512 + 4 + 1
def test_a_large_batch_keeps_every_row_and_its_order(st, count, shared):
    """Rows apart (due times, expiries, dedup ids of their own), or sharing everything but id,
    content, priority and attributes (send_many's usual batch: SQLite binds the shared values once)."""
    rows = [NewMessage(mid, "big", f"m-{i}" + ("\x00" if st.text_holds_nul and i % 97 == 0 else ""),
                       NOW if shared else NOW + i, NOW, NOW + HOUR + (0 if shared else i), i % 21 - 10,
                       json.dumps({"i": str(i)}) if i % 3 else None, None if shared or i % 5 else f"d-{i}")
            for i, mid in enumerate(ids.new_ids(count))]
    sequences = st.insert(rows)
    assert sequences == list(range(sequences[0], sequences[0] + count))
    got = {m.id: m for m in Message.objects.filter(queue="big")}
    assert len(got) == count
    for r, seq in zip(rows, sequences, strict=True):
        m = got[r.id]
        assert (m.content, m.process_after, m.received_at, m.updated_at, m.expires_after, m.priority, m.attributes,
                m.dedup_id, m.sequence, m.status, m.attempts, m.is_dlq) == (
            r.content, r.process_after, r.received_at, r.received_at, r.expires_after, r.priority, r.attributes,
            r.dedup_id, seq, READY, 0, False)
    dead = [NewMessage(mid, "big-dlq", "x", NOW, NOW, NOW + HOUR) for mid in ids.new_ids(600)]
    assert st.insert(dead, is_dlq=True)[0] == sequences[-1] + 1
    assert Message.objects.filter(queue="big-dlq", is_dlq=True, status=READY, attempts=0).count() == 600


@pytest.mark.parametrize("count", [1, 1_300])  # SQLite: 1; 1,024 + 256 + 16 + 4 rows a statement
def test_insert_batch_stores_what_insert_stores(st, count):
    """A batch by columns (send_many's usual batch) becomes the rows :meth:`Store.insert` would
    store, numbered after what the queue holds, in the columns' order."""
    before = st.insert([NewMessage(ids.new_id(), "cols", "first", NOW, NOW, NOW + HOUR)])[0]
    message_ids = ids.new_ids(count)
    contents = [f"m-{i}" + ("\x00" if st.text_holds_nul and i % 97 == 0 else "") for i in range(count)]
    priorities = [i % 21 - 10 for i in range(count)]
    attributes = [json.dumps({"i": str(i)}) if i % 3 else None for i in range(count)]
    sequences = st.insert_batch("cols", message_ids, contents, priorities, attributes,
                                due=NOW + 5, received=NOW, expires=NOW + HOUR)
    assert sequences == list(range(before + 1, before + 1 + count))
    got = {m.id: m for m in Message.objects.filter(queue="cols").exclude(content="first")}
    assert len(got) == count
    for i, (mid, seq) in enumerate(zip(message_ids, sequences, strict=True)):
        m = got[mid]
        assert (m.content, m.process_after, m.received_at, m.updated_at, m.expires_after, m.priority, m.attributes,
                m.dedup_id, m.sequence, m.status, m.attempts, m.is_dlq) == (
            contents[i], NOW + 5, NOW, NOW, NOW + HOUR, priorities[i], attributes[i], None, seq, READY, 0, False)
    for columns in ((ids.new_ids(2), ["a"], [0, 0], [None, None]), ([], ["a"], [0], [None])):
        with pytest.raises(ValueError):
            st.insert_batch("cols", *columns, due=NOW, received=NOW, expires=NOW)
    assert st.insert_batch("cols", [], [], [], [], due=NOW, received=NOW, expires=NOW) == []


def test_insert_numbers_each_queue_strictly_increasing_and_a_dlq_with_its_queue(st):
    def new(queue: str, **kw) -> NewMessage:
        return NewMessage(ids.new_id(), queue, "x", NOW, NOW, NOW + HOUR, **kw)

    seqs: dict[str, list[int]] = {"a": [], "b": []}
    batches = [
        [new("a")], [new("a"), new("a"), new("a")], [new("a", priority=3), new("a", attributes='{"x":"y"}')],
        [new("b"), new("a"), new("b")], [new("a", dedup_id="z")],
    ]
    for batch in batches:
        got = st.insert(batch)
        assert len(got) == len(batch) and all(isinstance(s, int) for s in got)
        for r, s in zip(batch, got, strict=True):
            assert row(r.id).sequence == s
            seqs[r.queue].append(s)
    dead = [new("a-dlq"), new("a-dlq")]
    dead_seqs = st.insert(dead, is_dlq=True)
    seqs["a"] += dead_seqs  # a DLQ's messages number with their queue's
    for numbers in seqs.values():
        assert numbers == sorted(set(numbers)) and numbers[0] >= 1
    assert [r.is_dlq for r in Message.objects.filter(queue="a-dlq")] == [True, True]
    assert st.queue_get("a") is not None and st.queue_get("b") is not None  # created on the first produce
    assert st.queue_get("a-dlq") is None


def test_dedup_records_an_id_until_its_window_ends(st):
    first, second, third = ids.new_ids(3)
    assert st.dedup("d", "order-1", first, NOW, 1_000) is None  # recorded
    assert st.dedup("d", "order-1", second, NOW + 999, 1_000) == first  # live: the original's id
    assert st.dedup("other", "order-1", second, NOW + 1, 1_000) is None  # per queue
    assert st.dedup("d", "order-1", third, NOW + 1_000, 5_000) is None  # ended: taken over
    assert st.dedup("d", "order-1", second, NOW + 5_999, 1_000) == third
    entry = DedupEntry.objects.get(queue="d", dedup_id="order-1")
    assert (entry.message_id, entry.expires_at) == (third, NOW + 6_000)


def test_delete_expired_dedup_forgets_ended_windows_in_batches(st):
    for k in range(5):
        st.dedup("dd", f"id-{k}", ids.new_id(), NOW, 1_000 * (k + 1))  # windows end at NOW + 1000 … 5000
    assert st.delete_expired_dedup(NOW + 999) == 0
    assert st.delete_expired_dedup(NOW + 3_000, batch=1) == 3
    assert sorted(DedupEntry.objects.values_list("dedup_id", flat=True)) == ["id-3", "id-4"]
    assert st.dedup("dd", "id-0", "fresh", NOW + 3_000, 10) is None  # forgotten: recorded anew


def test_queue_length_counts_every_state_but_the_dlq_up_to_a_limit(st):
    assert st.queue_length("len", 10) == 0
    put(st, "len", 3)
    put(st, "len", due=NOW + HOUR)  # delayed
    put(st, "len-dlq", 2, is_dlq=True)
    put(st, "other", 4)
    a, b = take(st, "len", NOW, 2)
    assert st.nack("len", a.id, a.receipt, NOW, 1, (10,))  # failed
    assert st.queue_length("len", 10) == 4
    assert st.queue_length("len", 2) == 2


# -- consume --


def test_claim_takes_by_priority_then_sequence_with_a_fresh_receipt_and_lease(st):
    assert claim(st, "fifo", NOW) == Claim([])
    later = put(st, "fifo", received=NOW - 5)  # sequence, not received_at, orders a priority
    first = put(st, "fifo", received=NOW - 50)
    put(st, "fifo", due=NOW + 60_000, priority=9)  # delayed: not due, whatever its priority
    urgent = put(st, "fifo", priority=5, attributes='{"a":"b"}', dedup_id="u")
    low = put(st, "fifo", priority=-3)
    got = one(st, "fifo", NOW + 1, vis=7_000)
    assert (got.id, got.queue, got.content, got.attempts, got.priority, got.attributes, got.dedup_id) == (
        urgent[0], "fifo", "m0", 1, 5, '{"a":"b"}', "u")
    assert got.sequence == row(urgent[0]).sequence and got.received_at == NOW
    assert (got.first_received_at, got.lease_expires_at) == (NOW + 1, NOW + 1 + 7_000)
    r = row(got.id)
    assert r.status == PROCESSING and got.receipt == r.processing_started_at and got.receipt > r.received_at
    assert r.process_after == r.lease_expires_at == NOW + 1 + 7_000  # a processing row's process_after: its lease end
    assert [d.id for d in take(st, "fifo", NOW + 1, 3)] == [later[0], first[0], low[0]]
    assert one(st, "fifo", NOW + 1) is None


def test_claim_many_in_order_up_to_the_limit(st):
    sent = put(st, "many", 5)
    high = put(st, "many", 2, priority=1)
    got = take(st, "many", NOW, 4)
    assert [d.id for d in got] == high + sent[:2]
    assert [d.id for d in take(st, "many", NOW, 10)] == sent[2:]
    assert take(st, "many", NOW, 10) == []


def test_lifo_takes_the_newest_first_a_priority_at_a_time(st):
    old = put(st, "lifo", 3)
    high = put(st, "lifo", 2, priority=5)
    put(st, "lifo", priority=9, due=NOW + HOUR)  # delayed
    assert one(st, "lifo", NOW, order="lifo").id == high[1]
    # A LIFO claim of many: the highest due priority newest first, then the next priority's.
    assert [d.id for d in take(st, "lifo", NOW, 3, order="lifo")] == [high[0], old[2], old[1]]
    newer = put(st, "lifo")
    assert [d.id for d in take(st, "lifo", NOW, 5, order="lifo")] == [newer[0], old[0]]


def test_random_claims_take_every_due_message_not_always_the_head(st):
    sent = put(st, "rand", 20)
    put(st, "rand", 3, due=NOW + HOUR)  # delayed: never taken
    picks = []
    for _ in range(12):
        (d,) = take(st, "rand", NOW, 1, order="random")
        picks.append(d.id)
        assert st.release("rand", d.id, d.receipt, NOW)
    assert set(picks) <= set(sent) and set(picks) != {sent[0]}  # (1/20)^11 to fail by chance
    got = take(st, "rand", NOW, 50, order="random")
    assert sorted(d.id for d in got) == sorted(sent)
    assert take(st, "rand", NOW, 50, order="random") == []


def test_an_ended_lease_is_claimed_again_and_its_receipt_stops_working(st):
    (m,) = put(st, "lease")
    first = one(st, "lease", NOW, vis=1_000)
    assert one(st, "lease", NOW + 999) is None
    assert st.has_due(["lease"], NOW + 999, 5) == {}
    assert st.queue_counts("lease", NOW + 999).in_flight == 1
    assert st.has_due(["lease"], NOW + 1_000, 5) == {"lease": 1}  # due again, with no job run
    assert st.queue_counts("lease", NOW + 1_000) == QueueCounts(1, 0, 0, 0, 0)
    assert st.peek("lease", NOW + 1_000).id == m
    again = one(st, "lease", NOW + 1_000, vis=1_000)
    assert (again.id, again.attempts, again.first_received_at) == (m, 2, NOW)
    assert again.receipt > first.receipt
    assert not st.ack("lease", m, first.receipt)
    assert not st.nack("lease", m, first.receipt, NOW + 1_000, 0, (1,))
    assert st.change_visibility("lease", [(m, first.receipt)], NOW + 1_000, 0) == [False]
    assert st.ack("lease", m, again.receipt)


def test_ended_leases_and_ready_messages_are_claimed_together_by_priority_then_sequence(st):
    """Ready rows and ended leases sit in different indexes (migration 0012): the claim merges them
    in claim order, FIFO and LIFO, and passes over the leases still running."""
    oldest, middle, newest = put(st, "mix", 3)
    urgent = put(st, "mix", priority=5)[0]
    assert [d.id for d in take(st, "mix", NOW, 2, vis=1_000)] == [urgent, oldest]  # leases end at NOW + 1000
    running = one(st, "mix", NOW + 1, vis=HOUR).id  # middle: leased for an hour
    assert running == middle
    assert [d.id for d in take(st, "mix", NOW + 1_000, 10, vis=HOUR)] == [urgent, oldest, newest]
    late = put(st, "mix", priority=5)[0]  # ready, after the urgent one in sequence
    assert one(st, "mix", NOW + HOUR + 1).id == late  # only middle's lease has ended: priority first
    # Every lease ended: LIFO, the newest of the highest priority first, whichever index holds it.
    assert [d.id for d in take(st, "mix", NOW + 2 * HOUR, 10, order="lifo")] == [late, urgent, newest, middle, oldest]


def test_a_claim_chooses_among_the_first_leases_to_end(st, monkeypatch):
    """Beyond ENDED_AMONG leases ended at once, a claim chooses among the first to have ended
    (by priority there), and the others wait their turn: each is still delivered once."""
    monkeypatch.setattr(type(st).__module__ + ".ENDED_AMONG", 2)
    low_first, low_second = put(st, "ended", 2)
    (high,) = put(st, "ended", priority=5)
    leased = {d.id: d for d in take(st, "ended", NOW, 3, vis=HOUR)}
    for k, message_id in enumerate((low_first, low_second, high), start=1):  # leases end at NOW + 1, 2, 3
        assert st.change_visibility("ended", [(message_id, leased[message_id].receipt)], NOW, k) == [True]
    assert one(st, "ended", NOW + 10, vis=HOUR).id == low_first  # high ended last: not among the first 2
    assert [d.id for d in take(st, "ended", NOW + 10, 1, vis=HOUR)] == [high]  # now it is
    monkeypatch.setattr(type(st).__module__ + ".ENDED_AMONG", 1_000)
    assert [d.id for d in take(st, "ended", NOW + 10, 5)] == [low_second]


def test_delayed_backed_off_and_ready_messages_are_claimed_together_by_priority_then_sequence(st):
    """Ready rows written due and those written to come due later (delayed at send, backed off after
    a failure, released) sit in different indexes (migration 0013): the claim merges them with the
    ended leases in claim order, FIFO and LIFO, and passes over the ones not yet due."""
    first, second = put(st, "timed", 2)
    (delayed,) = put(st, "timed", due=NOW + 50)
    (third,) = put(st, "timed")
    (urgent_later,) = put(st, "timed", due=NOW + 5_000, priority=5)
    got = one(st, "timed", NOW, vis=HOUR)
    assert got.id == first
    assert st.nack("timed", got.id, got.receipt, NOW, 0, [20])  # backed off until NOW + 20
    assert [d.id for d in take(st, "timed", NOW + 10, 10, vis=HOUR)] == [second, third]  # neither due yet
    assert st.has_due(["timed"], NOW + 10, 10) == {}
    assert st.has_due(["timed"], NOW + 60, 10) == {"timed": 2}
    assert [d.id for d in take(st, "timed", NOW + 100, 10, vis=1)] == [first, delayed]  # by sequence
    # NOW + 5,000: the urgent one came due, and the leases taken at NOW + 100 ended.
    assert [d.id for d in take(st, "timed", NOW + 5_000, 10, order="lifo")] == [urgent_later, delayed, first]


def test_a_claim_chooses_among_the_first_delayed_messages_to_come_due(st, monkeypatch):
    """Beyond ENDED_AMONG delayed messages due at once, a claim chooses among the first to have come
    due (by priority there), and the others wait their turn: each is still delivered once."""
    monkeypatch.setattr(type(st).__module__ + ".ENDED_AMONG", 2)
    (low_first,) = put(st, "due", due=NOW + 1)
    (low_second,) = put(st, "due", due=NOW + 2)
    (high,) = put(st, "due", due=NOW + 3, priority=5)
    assert one(st, "due", NOW + 10, vis=HOUR).id == low_first  # high came due last: not among the first 2
    assert [d.id for d in take(st, "due", NOW + 10, 1, vis=HOUR)] == [high]  # now it is
    monkeypatch.setattr(type(st).__module__ + ".ENDED_AMONG", 1_000)
    assert [d.id for d in take(st, "due", NOW + 10, 5)] == [low_second]
    # Due at the same time (a requeue's, a batch delayed alike): among them, claim order.
    monkeypatch.setattr(type(st).__module__ + ".ENDED_AMONG", 2)
    first, second = put(st, "alike", 2, due=NOW + 5)
    (urgent,) = put(st, "alike", due=NOW + 5, priority=5)
    assert [one(st, "alike", NOW + 10).id for _ in range(3)] == [urgent, first, second]


def test_lifo_takes_the_newest_first_also_beyond_the_window_of_rows_come_due(st, monkeypatch):
    """LIFO chooses among the last ENDED_AMONG rows to come due (found by an audit: among the first,
    a batch delayed alike came out 100, 101, …, 300, 99, …, 1), newest first, its top priority
    first; delayed rows, and leases ended at once, alike."""
    monkeypatch.setattr(type(st).__module__ + ".ENDED_AMONG", 4)
    batch = put(st, "lifo-alike", 10, due=NOW + 5)  # delayed alike: due at the same time
    assert [one(st, "lifo-alike", NOW + 10, order="lifo", vis=HOUR).id for _ in range(10)] == batch[::-1]
    # The same with ten leases ended at once, and a plain send of a higher priority in between.
    for delivery in take(st, "lifo-alike", NOW + HOUR + 10, 10, order="lifo", vis=HOUR):
        st.change_visibility("lifo-alike", [(delivery.id, delivery.receipt)], NOW + HOUR + 10, 0)
    (urgent,) = put(st, "lifo-alike", priority=5, due=NOW + HOUR + 10, received=NOW + HOUR + 10)
    got = [one(st, "lifo-alike", NOW + HOUR + 20, order="lifo", vis=HOUR).id for _ in range(11)]
    assert got == [urgent, *batch[::-1]]


def test_lifo_finds_a_rare_top_priority_without_reading_past_the_windows(st, monkeypatch):
    """LIFO's top priority is kept among the rows of each window once taken, not searched for
    through every row come due (found by an audit: 35 ms a claim with 100,000 due on SQLite): a
    row of the top priority beyond the window waits its turn, as in FIFO."""
    monkeypatch.setattr(type(st).__module__ + ".ENDED_AMONG", 2)
    (early_urgent,) = put(st, "rare", priority=5, due=NOW + 1)  # came due first: beyond the last 2
    late = put(st, "rare", 2, due=NOW + 2)
    got = [one(st, "rare", NOW + 10, order="lifo", vis=HOUR).id for _ in range(3)]
    assert got == [late[1], early_urgent, late[0]]  # the urgent one once within the window


def test_an_ended_lease_keeps_its_receipt_until_claimed_again(st):
    (m,) = put(st, "late")
    d = one(st, "late", NOW, vis=1_000)
    assert st.nack("late", m, d.receipt, NOW + 5_000, 0, (10,))  # late, but nobody took it meanwhile
    assert row(m).status == READY


def test_a_used_up_message_is_moved_to_its_dlq_by_the_claim_that_finds_it(st):
    poison, fine = put(st, "redrive", 2)
    first = one(st, "redrive", NOW, vis=1_000, max_attempts=2)
    assert first.id == poison
    second = one(st, "redrive", NOW + 1_000, vis=1_000, max_attempts=2)  # the lease ended: attempt 2
    assert (second.id, second.attempts) == (poison, 2)
    sequence = row(poison).sequence
    got = claim(st, "redrive", NOW + 2_000, vis=1_000, max_attempts=2, dlq_ttl=5_000)
    assert got.redriven == 1 and [d.id for d in got.deliveries] == [fine]  # the next one instead
    (moved,) = got.redriven_messages  # the moved message, as it is now
    assert (moved.id, moved.queue, moved.attempts, moved.receipt, moved.lease_expires_at) == (
        poison, "redrive-dlq", 0, None, None)
    assert (moved.content, moved.sequence, moved.first_received_at) == ("m0", sequence, NOW)
    r = row(poison)
    assert (r.queue, r.is_dlq, r.status, r.attempts, r.failure_reason, r.processing_started_at) == (
        "redrive-dlq", True, READY, 0, vocab.FailureReason.MAX_ATTEMPTS_REACHED, None)
    assert (r.expires_after, r.sequence, r.first_received_at) == (NOW + 2_000 + 5_000, sequence, NOW)
    assert not st.ack("redrive", poison, second.receipt)
    assert claim(st, "redrive", NOW + 2_999, max_attempts=2) == Claim([])  # fine is leased


def test_redrive_counts_every_used_up_message_a_claim_passes(st):
    used = put(st, "many-up", 3)
    for m in used:
        Message.objects.filter(id=m).update(attempts=3)  # nacked three times
    live = put(st, "many-up", 2)
    got = claim(st, "many-up", NOW, 2, max_attempts=3)
    assert got.redriven == 3 and [d.id for d in got.deliveries] == live
    assert sorted(d.id for d in got.redriven_messages) == sorted(used)
    assert {d.queue for d in got.redriven_messages} == {"many-up-dlq"}
    assert Message.objects.filter(queue="many-up-dlq").count() == 3
    assert claim(st, "many-up", NOW, 2, max_attempts=3) == Claim([])
    only = put(st, "all-up", 2)
    Message.objects.filter(id__in=only).update(attempts=1)
    got = claim(st, "all-up", NOW, 5, max_attempts=1)
    assert (got.deliveries, got.redriven, sorted(d.id for d in got.redriven_messages)) == ([], 2, sorted(only))
    assert claim(st, "all-up", NOW, 5, max_attempts=1) == Claim([])  # nothing left to move


def test_unlimited_attempts_never_redrive(st):
    (m,) = put(st, "forever")
    Message.objects.filter(id=m).update(attempts=10_000)
    got = claim(st, "forever", NOW, max_attempts=0)
    assert got.redriven == 0 and got.deliveries[0].attempts == 10_001


def test_a_redriving_claim_never_delivers_a_message_twice(st):
    """A claim that redrives claims again for what it is still short of: with a 0 s lease, the
    messages it has just delivered are due again, and must not come back in the same claim."""
    used, a, b = put(st, "twice", 3)
    Message.objects.filter(id=used).update(attempts=1)
    for order in ("fifo", "lifo", "random"):
        got = claim(st, "twice", NOW, 3, vis=0, max_attempts=1, order=order)
        delivered = [d.id for d in got.deliveries]
        assert len(delivered) == len(set(delivered)), (order, delivered)
        for d in got.deliveries:  # every receipt handed out is current
            assert st.change_visibility("twice", [(d.id, d.receipt)], NOW, 0) == [True], order
        if order == "fifo":
            assert got.redriven == 1 and sorted(delivered) == sorted([a, b])


def test_a_claim_from_a_dlq_keeps_its_messages_dead_letters(st):
    """Consumers may read a DLQ: what they take stays in it (counted, moved and deleted as a DLQ
    message), and a used-up one is never moved on to a DLQ of the DLQ."""
    dead, used = put(st, "keep-dlq", 2, is_dlq=True)
    Message.objects.filter(id=used).update(attempts=3)
    d = one(st, "keep-dlq", NOW, max_attempts=5)
    assert d.id == dead
    assert (row(dead).queue, row(dead).is_dlq) == ("keep-dlq", True)
    assert st.queue_counts("keep", NOW).dlq == 2
    claim(st, "keep-dlq", NOW, max_attempts=3)
    assert (row(used).queue, row(used).is_dlq) == ("keep-dlq", True)
    assert not Message.objects.filter(queue="keep-dlq-dlq").exists()


def test_receipts_fence_ack(st):
    put(st, "ack")
    d = one(st, "ack", NOW)
    assert not st.ack("ack", d.id, d.receipt + 1)
    assert not st.ack("other", d.id, d.receipt)
    assert st.ack("ack", d.id, d.receipt)
    assert not st.ack("ack", d.id, d.receipt)
    assert not Message.objects.filter(id=d.id).exists()


def test_ack_many_counts_only_current_deliveries(st):
    put(st, "acks", 3)
    a, b, c = take(st, "acks", NOW, 3)
    assert st.ack_many("acks", [(a.id, a.receipt), (b.id, b.receipt + 1), (c.id, c.receipt)]) == 2
    assert st.ack_many("acks", []) == 0
    assert list(Message.objects.values_list("id", flat=True)) == [b.id]


def test_release_many_counts_only_current_deliveries_and_uncounts_their_attempts(st):
    put(st, "releases", 3)
    a, b, c = take(st, "releases", NOW, 3)
    assert st.release_many("releases", [(a.id, a.receipt), (b.id, b.receipt + 1), (c.id, c.receipt),
                                        (a.id, a.receipt)], NOW + 1) == 2
    assert st.release_many("releases", [], NOW + 1) == 0
    assert st.release_many("other", [(b.id, b.receipt)], NOW + 1) == 0
    for m in (a, c):
        r = row(m.id)
        assert (r.status, r.attempts, r.processing_started_at, r.process_after) == (READY, 0, None, NOW + 1)
    assert row(b.id).status == PROCESSING


def test_nack_backs_off_by_attempt_and_fails_when_out_of_attempts(st):
    (m,) = put(st, "nack")
    backoff = (100, 200, 300)
    for attempt, delay in [(1, 100), (2, 200), (3, 300), (4, 300)]:
        now = NOW + attempt * 10_000
        d = one(st, "nack", now)
        assert d.attempts == attempt
        assert not st.nack("nack", m, d.receipt + 1, now, 5, backoff)
        assert st.nack("nack", m, d.receipt, now, 5, backoff)
        r = row(m)
        assert (r.status, r.process_after, r.processing_started_at) == (READY, now + delay, None)
        assert one(st, "nack", now + delay - 1) is None
    d = one(st, "nack", NOW + 100_000)
    assert st.nack("nack", m, d.receipt, NOW + 100_000, 5, (7,))
    assert row(m).status == FAILED


def test_nack_with_unlimited_attempts_never_fails(st):
    (m,) = put(st, "nack-forever")
    for k in range(4):
        d = one(st, "nack-forever", NOW + k * 1_000)
        assert st.nack("nack-forever", m, d.receipt, NOW + k * 1_000, 0, (0,))
    assert (row(m).status, row(m).attempts) == (READY, 4)


def test_nack_jitter_takes_up_to_its_fraction_off_the_delay_at_random(st):
    sent = put(st, "jitter", 30)
    for d in take(st, "jitter", NOW, 30):
        assert st.nack("jitter", d.id, d.receipt, NOW, 0, (10_000,), jitter=0.5)
    dues = [row(m).process_after - NOW for m in sent]
    assert all(5_000 <= due <= 10_000 for due in dues), dues
    assert len(set(dues)) > 1
    for d in take(st, "jitter", NOW + 10_000, 30):
        assert st.nack("jitter", d.id, d.receipt, NOW + 10_000, 0, (10_000,), jitter=0.0)
    assert {row(m).process_after for m in sent} == {NOW + 20_000}


def test_fail_release_and_change_visibility(st):
    a, b, c = put(st, "settle", 3)
    da, db_, dc = take(st, "settle", NOW, 3)
    assert st.fail("settle", a, da.receipt, NOW) and row(a).status == FAILED
    assert not st.fail("settle", a, da.receipt, NOW)
    assert st.release("settle", b, db_.receipt, NOW) and (row(b).status, row(b).attempts) == (READY, 0)
    assert not st.release("settle", b, db_.receipt, NOW)
    assert st.change_visibility("settle", [(c, dc.receipt)], NOW + 10, 60_000) == [True]
    assert row(c).lease_expires_at == NOW + 10 + 60_000 and row(c).processing_started_at == dc.receipt
    assert st.ack("settle", c, dc.receipt)  # the receipt stays the same


def test_fail_says_fatal_unless_the_consumers_own_attempts_are_used_up(st):
    fatal, spent = put(st, "why", 2)
    d_fatal, d_spent = take(st, "why", NOW, 2)
    assert st.fail("why", fatal, d_fatal.receipt, NOW, "boom")
    assert st.fail("why", spent, d_spent.receipt, NOW, "boom 3", used_up=True)
    assert st.move_failed_to_dlq(NOW + 1, HOUR, HOUR) == 2
    assert (row(fatal).failure_reason, row(spent).failure_reason) == ("fatal_error", "max_attempts_reached")
    assert st.peek_message("why-dlq", fatal)[1:] == ("fatal_error", "boom")
    assert st.peek_message("why-dlq", spent)[1:] == ("max_attempts_reached", "boom 3")
    assert st.peek_message("why", spent) is None  # not in that queue


def test_change_visibility_extends_or_releases_keeping_the_receipt(st):
    a, b, c = put(st, "vis", 3)
    da, db_, dc = take(st, "vis", NOW, 3, vis=1_000)
    assert st.change_visibility("vis", [], NOW, 0) == []
    assert st.change_visibility("vis", [(a, da.receipt), (b, db_.receipt + 1), (c, dc.receipt)], NOW + 500,
                                10_000) == [True, False, True]
    assert one(st, "vis", NOW + 1_000).id == b  # b's lease ended; a's and c's were extended
    assert one(st, "vis", NOW + 10_499) is None
    assert st.change_visibility("vis", [(a, da.receipt)], NOW + 600, 0) == [True]  # released at once
    assert (row(a).status, row(a).attempts, row(a).process_after) == (PROCESSING, 1, NOW + 600)
    assert st.has_due(["vis"], NOW + 600, 5) == {"vis": 1}
    assert st.ack("vis", a, da.receipt)  # still current until claimed again
    assert st.change_visibility("vis", [(c, dc.receipt)], NOW + 700, 0) == [True]
    again = one(st, "vis", NOW + 700)
    assert (again.id, again.attempts) == (c, 2)  # the attempt stayed counted
    assert st.change_visibility("vis", [(c, dc.receipt)], NOW + 700, 5_000) == [False]
    assert st.change_visibility("other", [(c, again.receipt)], NOW + 700, 5_000) == [False]
    (ready,) = put(st, "vis")
    assert st.change_visibility("vis", [(ready, 0)], NOW, 5_000) == [False]  # not in processing


def test_peek_shows_what_a_claim_would_take_and_changes_nothing(st):
    assert st.peek("peek", NOW) is None
    a, b = put(st, "peek", 2)
    (high,) = put(st, "peek", priority=2)
    (delayed,) = put(st, "peek", due=NOW + HOUR, priority=9)
    before = state(a, b, high, delayed)
    seen = st.peek("peek", NOW)
    assert isinstance(seen, Delivery)
    assert (seen.id, seen.receipt, seen.attempts, seen.priority, seen.lease_expires_at) == (high, None, 0, 2, None)
    assert st.peek("peek", NOW, order="lifo").id == high
    assert st.peek("peek", NOW, order="random").id in (a, b, high)
    assert state(a, b, high, delayed) == before
    Message.objects.filter(id=high).update(priority=0)
    assert st.peek("peek", NOW, order="lifo").id == high  # the newest of priority 0 now
    assert st.peek("peek", NOW, order="fifo").id == a
    by_id, reason, error = st.peek_message("peek", delayed)  # by id: in any state, due or not
    assert (by_id.id, by_id.priority, by_id.receipt, reason, error) == (delayed, 9, None, None, None)
    d = one(st, "peek", NOW, vis=5_000)
    leased = st.peek_message("peek", d.id)[0]
    assert (leased.attempts, leased.receipt, leased.lease_expires_at, leased.first_received_at) == (
        1, None, NOW + 5_000, NOW)
    assert st.peek_message("other", a) is None  # another queue's message
    assert st.peek_message("peek", ids.new_id()) is None
    (dead,) = put(st, "peek-dlq", is_dlq=True)
    assert st.peek_message("peek-dlq", dead)[0].id == dead and st.peek_message("peek", dead) is None


def test_has_due_data_version_and_ping(st):
    put(st, "due-a", 3)
    put(st, "due-b", due=NOW + 60_000)
    assert st.has_due(["due-a", "due-b", "none"], NOW, 2) == {"due-a": 2}
    assert st.has_due([], NOW, 2) == {}
    assert isinstance(st.data_version(), int)
    st.ping()


# -- queues --


def test_queue_put_get_and_list(st):
    assert st.queue_get("pol") is None
    policy = {"max_attempts": 3, "backoff": "[10, 20]", "visibility_timeout_ms": 5_000, "retention_ms": 60_000,
              "dlq_retention_ms": 120_000, "max_length": 100, "ordering": "lifo", "dedup_window_ms": 1_000,
              "paused": True}
    st.queue_put("pol", policy, NOW)
    got = st.queue_get("pol")
    assert isinstance(got, QueueRow)
    assert {c: getattr(got, c) for c in POLICY_COLUMNS} == {**dict.fromkeys(POLICY_COLUMNS), **policy}
    assert (got.name, got.last_sequence, got.created_at, got.updated_at) == ("pol", got.last_sequence, NOW, NOW)
    st.queue_put("pol", {"max_attempts": 0}, NOW + 5)  # every field takes the given policy, None elsewhere
    got = st.queue_get("pol")
    assert {c: getattr(got, c) for c in POLICY_COLUMNS} == {**dict.fromkeys(POLICY_COLUMNS), "max_attempts": 0,
                                                            "paused": False}
    assert (got.created_at, got.updated_at) == (NOW, NOW + 5)
    put(st, "implicit")
    implicit = st.queue_get("implicit")
    assert {c: getattr(implicit, c) for c in POLICY_COLUMNS} == {**dict.fromkeys(POLICY_COLUMNS), "paused": False}
    assert [q.name for q in st.queue_list()] == ["implicit", "pol"]
    assert all(isinstance(q, QueueRow) for q in st.queue_list())


def test_queue_put_keeps_the_sequence_counter(st):
    first = st.insert([NewMessage(ids.new_id(), "counted", "x", NOW, NOW, NOW + HOUR)])[0]
    st.queue_put("counted", {"max_length": 5}, NOW)
    st.queue_put("counted", {}, NOW)
    second = st.insert([NewMessage(ids.new_id(), "counted", "x", NOW, NOW, NOW + HOUR)])[0]
    assert second > first


def test_queue_delete_takes_its_messages_and_dedup_ids_never_its_dlqs_and_never_reuses_a_number(st):
    numbers = st.insert([NewMessage(m, "gone", "x", NOW, NOW, NOW + HOUR) for m in ids.new_ids(3)])
    (dead,) = [ids.new_id()]
    st.insert([NewMessage(dead, "gone-dlq", "x", NOW, NOW, NOW + HOUR)], is_dlq=True)
    take(st, "gone", NOW)
    st.dedup("gone", "k", ids.new_id(), NOW, HOUR)
    (kept,) = put(st, "kept")
    st.dedup("kept", "k", kept, NOW, HOUR)
    assert st.queue_delete("gone", NOW)
    assert st.queue_get("gone") is None
    assert not Message.objects.filter(queue="gone").exists()
    assert row(dead).queue == "gone-dlq"  # a DLQ is a queue of its own: its messages stay
    assert not DedupEntry.objects.filter(queue="gone").exists()
    assert row(kept).queue == "kept" and DedupEntry.objects.filter(queue="kept").exists()
    assert not st.queue_delete("gone", NOW)
    assert not st.queue_delete("never", NOW)
    again = st.insert([NewMessage(ids.new_id(), "gone", "x", NOW, NOW, NOW + HOUR)])[0]
    assert again > max(numbers) + 1  # the DLQ's number too
    assert [q.name for q in st.queue_list()] == ["gone", "kept"]
    st.queue_put("gone", {}, NOW)  # the counter survives an explicit (re)creation as well
    st.queue_delete("gone", NOW)
    st.queue_put("gone", {"max_length": 3}, NOW)
    assert st.insert([NewMessage(ids.new_id(), "gone", "x", NOW, NOW, NOW + HOUR)])[0] > again
    st.queue_put("messageless", {}, NOW)
    assert st.queue_delete("messageless", NOW)  # a row alone is something to delete


def test_purge_deletes_every_message_of_the_queue_but_its_dlq(st):
    put(st, "purge", 3)
    put(st, "purge", due=NOW + HOUR)
    take(st, "purge", NOW)
    (dead,) = put(st, "purge-dlq", is_dlq=True)
    (other,) = put(st, "purge-other")
    assert st.purge("purge") == 4
    assert st.purge("purge") == 0
    assert list(Message.objects.values_list("id", flat=True).order_by("id")) == sorted([dead, other])
    assert st.queue_get("purge") is not None  # the queue stays


def test_purge_with_now_deletes_only_what_no_consumer_holds(st):
    put(st, "unheld", 5)
    put(st, "unheld", due=NOW + HOUR)  # delayed: nobody holds it
    held_a, held_b, failed = take(st, "unheld", NOW, 3, vis=1_000)
    st.fail("unheld", failed.id, failed.receipt, NOW)
    (dead,) = put(st, "unheld-dlq", is_dlq=True)
    assert st.purge("unheld", NOW + 500) == 3  # the two ready and the delayed one; the leases are live
    left = set(Message.objects.values_list("id", flat=True))
    assert left == {held_a.id, held_b.id, failed.id, dead}
    assert st.purge("unheld", NOW + 1_000) == 2  # their leases over: nobody holds them any more
    assert set(Message.objects.values_list("id", flat=True)) == {failed.id, dead}  # failed stays


def test_queue_counts_by_state(st):
    assert st.queue_counts("counts", NOW) == QueueCounts(0, 0, 0, 0, 0)
    put(st, "counts", 5)
    put(st, "counts", 2, due=NOW + 10_000)
    put(st, "counts-dlq", 3, is_dlq=True)
    put(st, "counts-other", 4)
    a, b, c = take(st, "counts", NOW, 3, vis=1_000)
    st.fail("counts", c.id, c.receipt, NOW)
    counts = st.queue_counts("counts", NOW + 500)
    assert isinstance(counts, QueueCounts)
    assert counts == QueueCounts(ready=2, delayed=2, in_flight=2, failed=1, dlq=3)
    assert st.queue_counts("counts", NOW + 1_000) == QueueCounts(4, 2, 0, 1, 3)  # ended leases are ready
    assert st.queue_counts("counts", NOW + 10_000) == QueueCounts(6, 0, 0, 1, 3)


# -- admin and jobs --


def test_requeue_and_delete_dead_letters(st):
    dead = put(st, "jobs-dlq", 3, is_dlq=True, received=NOW - 1000)
    sequence = row(dead[1]).sequence
    busy = one(st, "jobs-dlq", NOW)  # a DLQ message in processing is left alone
    assert st.requeue("jobs-dlq", dead[1], NOW + 5, HOUR) == 1
    r = row(dead[1])
    assert (r.queue, r.is_dlq, r.status, r.attempts, r.process_after, r.expires_after, r.received_at) == (
        "jobs", False, READY, 0, NOW + 5, NOW + 5 + HOUR, NOW - 1000 + 1)
    assert r.sequence == sequence  # its place in the queue
    assert st.requeue("jobs-dlq", None, NOW + 5, HOUR) == 1  # dead[2]; dead[0] is processing
    assert row(busy.id).queue == "jobs-dlq"
    assert st.requeue("jobs-dlq", None, NOW + 5, HOUR) == 0
    assert st.requeue("jobs-dlq", busy.id, NOW + VIS - 1, HOUR) == 0  # its lease not over yet
    assert st.requeue("jobs-dlq", busy.id, NOW + VIS, HOUR) == 1  # over: nobody holds it any more
    put(st, "jobs-dlq", is_dlq=True)
    one(st, "jobs-dlq", NOW)
    assert st.requeue("jobs-dlq", None, NOW + VIS, HOUR) == 1  # every one: the ended lease's too
    more = put(st, "jobs-dlq", 2, is_dlq=True)
    assert st.delete_dlq("jobs-dlq", more[0]) == 1
    assert st.delete_dlq("jobs-dlq", None) == 1  # more[1]
    assert st.delete_dlq("jobs", None) == 0  # not a DLQ row


def test_a_requeued_message_keeps_its_fifo_place(st):
    first, second = put(st, "place", 2)
    Message.objects.filter(id=first).update(attempts=1)
    got = claim(st, "place", NOW, max_attempts=1)  # first → place-dlq; second is delivered instead
    assert got.redriven == 1 and [d.id for d in got.deliveries] == [second]
    (third,) = put(st, "place")
    assert st.requeue("place-dlq", first, NOW + 1, HOUR) == 1
    assert [d.id for d in take(st, "place", NOW + VIS, 5)] == [first, second, third]  # second's lease ended


def test_jobs_move_recover_and_delete_in_batches(st):
    expired = put(st, "j", 3, ttl=10)
    d = one(st, "j", NOW, vis=500)  # expired[0], processing: never moved
    assert st.count_expired(NOW + 100, False) == 2
    assert st.move_expired_to_dlq(NOW + 100, HOUR, HOUR, batch=1) == 2
    r = row(expired[1])
    assert (r.queue, r.is_dlq, r.status, r.attempts, r.failure_reason, r.expires_after) == (
        "j-dlq", True, READY, 0, vocab.FailureReason.MESSAGE_EXPIRED, NOW + 100 + HOUR)
    assert st.count_stale(NOW + 500) == 0  # the lease ends at NOW + 500: stale after it
    assert st.count_stale(NOW + 1000) == 1
    assert st.recover_stale(NOW + 1000, 1, batch=1) == 1  # out of attempts: failed
    assert row(d.id).status == FAILED and row(d.id).processing_started_at is None
    assert st.count_failed(False) == 1
    assert st.move_failed_to_dlq(NOW + 2000, HOUR, HOUR) == 1
    assert row(d.id).failure_reason == vocab.FailureReason.MAX_ATTEMPTS_REACHED
    (again,) = put(st, "k")
    dk = one(st, "k", NOW, vis=500)
    assert st.recover_stale(NOW + 1000, 5) == 1 and row(again).status == READY
    assert not st.ack("k", again, dk.receipt)
    assert one(st, "k", NOW + 1000).receipt > dk.receipt
    Message.objects.filter(id=d.id).update(status=FAILED)
    assert st.count_failed(True) == 1 and st.delete_failed_dlq(batch=1) == 1
    assert st.count_expired(NOW + 2 * HOUR, True) == 2
    assert st.delete_expired_dlq(NOW + 2 * HOUR, batch=1) == 2
    st.optimize()


def test_leases_are_found_in_every_queue_and_dlq(st):
    """The stale-lease safety net and the in-flight counts find every leased row, whichever queue
    (a DLQ consumed from included) and however many ready rows lie between them."""
    for q, n in (("a", 1), ("b", 1), ("c", 2), ("z", 1)):
        put(st, q, n + 50)
    put(st, "d-dlq", 3, is_dlq=True)
    leased = {q: [d.id for d in take(st, q, NOW, n, vis=100)] for q, n in (("a", 1), ("c", 2), ("d-dlq", 1), ("z", 1))}
    assert st.in_flight_by_queue(NOW + 50) == {"a": 1, "c": 2, "d-dlq": 1, "z": 1}
    assert st.count_stale(NOW + 100) == 0 and st.count_stale(NOW + 101) == 5
    assert st.recover_stale(NOW + 101, 5, batch=2) == 5
    assert all(row(m).status == READY for ids_ in leased.values() for m in ids_)
    assert st.in_flight_by_queue(NOW + 50) == {} and st.count_stale(NOW + 101) == 0


def test_recover_stale_follows_the_queues_own_max_attempts(st):
    st.queue_put("own", {"max_attempts": 2}, NOW)
    st.queue_put("unlimited", {"max_attempts": 0}, NOW)
    (own,) = put(st, "own")
    (unl,) = put(st, "unlimited")
    (glob,) = put(st, "global")
    for q in ("own", "unlimited", "global"):
        one(st, q, NOW, vis=100)
        one(st, q, NOW + 100, vis=100)  # attempt 2
    assert st.count_stale(NOW + 201) == 3
    assert st.recover_stale(NOW + 201, 5) == 3
    assert (row(own).status, row(unl).status, row(glob).status) == (FAILED, READY, READY)
    for q in ("unlimited", "global"):
        one(st, q, NOW + 300, vis=100)
    assert st.recover_stale(NOW + 401, 3) == 2
    assert (row(unl).status, row(glob).status) == (READY, FAILED)  # 3 attempts: the global 3 is used up


def test_moves_to_the_dlq_follow_the_queues_own_dlq_retention(st):
    st.queue_put("short", {"dlq_retention_ms": 1_000}, NOW)
    (short,) = put(st, "short", ttl=10)
    (plain,) = put(st, "plain", ttl=10)
    assert st.move_expired_to_dlq(NOW + 100, HOUR, HOUR) == 2
    assert (row(short).expires_after, row(plain).expires_after) == (NOW + 100 + 1_000, NOW + 100 + HOUR)
    (failing,) = put(st, "short")
    d = one(st, "short", NOW)
    st.fail("short", failing, d.receipt, NOW)
    assert st.move_failed_to_dlq(NOW + 200, HOUR, HOUR) == 1
    assert row(failing).expires_after == NOW + 200 + 1_000


def test_moves_to_a_named_dead_letter_queue_follow_that_queues_retention(st):
    """A queue whose dead letters go to another queue (``dead_letter_queue``): the letter is kept
    there as a message sent there is — an ordinary queue's retention (else the global one), a DLQ's
    own queue's DLQ retention (else the global DLQ one) — not the source's DLQ retention."""
    st.queue_put("to-plain", {"dead_letter_queue": "plain-target", "dlq_retention_ms": 9_000}, NOW)
    st.queue_put("plain-target", {"retention_ms": 2_000}, NOW)
    st.queue_put("to-dlq", {"dead_letter_queue": "other-dlq"}, NOW)
    st.queue_put("other", {"dlq_retention_ms": 3_000}, NOW)
    st.queue_put("to-unset", {"dead_letter_queue": "unset-target"}, NOW)  # no row: the global retention
    (a,) = put(st, "to-plain", ttl=10)
    (b,) = put(st, "to-dlq", ttl=10)
    (c,) = put(st, "to-unset", ttl=10)
    assert st.move_expired_to_dlq(NOW + 100, HOUR, 2 * HOUR) == 3
    assert (row(a).queue, row(b).queue, row(c).queue) == ("plain-target", "other-dlq", "unset-target")
    assert (row(a).expires_after, row(b).expires_after, row(c).expires_after) == (
        NOW + 100 + 2_000, NOW + 100 + 3_000, NOW + 100 + 2 * HOUR)
    (failing,) = put(st, "to-plain")
    d = one(st, "to-plain", NOW)
    st.fail("to-plain", failing, d.receipt, NOW)
    assert st.move_failed_to_dlq(NOW + 200, HOUR, 2 * HOUR) == 1
    assert row(failing).expires_after == NOW + 200 + 2_000


def test_queue_depths(st):
    put(st, "b", 2)
    put(st, "a")
    put(st, "a-dlq", 3, is_dlq=True)
    depths = st.queue_depths()
    assert all(isinstance(d, QueueDepth) for d in depths)
    assert depths == [("a", False, 1), ("a-dlq", True, 3), ("b", False, 2)]


def test_state_counts_count_each_kind_of_row_per_queue(st):
    """The UI's counts: every row of a queue, and of them the failed, the delayed (not due yet) and
    the live leases; a lease ended is neither (ready again), a delayed row come due neither."""
    put(st, "a", 6)
    put(st, "a", 2, due=NOW + HOUR)  # delayed
    put(st, "a", 1, due=NOW + 5)  # delayed, due by NOW + 10
    put(st, "a-dlq", 3, is_dlq=True)
    put(st, "b")
    live = claim(st, "a", NOW, 2).deliveries
    ended = claim(st, "a", NOW, 1, vis=5).deliveries[0]
    failed = claim(st, "a", NOW, 1).deliveries[0]
    assert st.fail("a", failed.id, failed.receipt, NOW)
    assert st.nack("a", ended.id, ended.receipt, NOW, 0, [0])  # ready again, at once
    again = claim(st, "a", NOW + 1, 1, vis=5).deliveries  # (the nacked one: the first by sequence)
    assert len(live) == 2 and again[0].id == ended.id

    counts = st.state_counts(NOW + 10)
    assert all(isinstance(c, StateCounts) for c in counts.values())
    assert counts == {"a": (9, 1, 2, 2), "a-dlq": (3, 0, 0, 0), "b": (1, 0, 0, 0)}
    assert st.state_counts(NOW + 1) == {**counts, "a": (9, 1, 3, 3)}  # the third delayed, the lease live
    assert st.state_counts(NOW + 10, ["a-dlq", "b", "none"]) == {"a-dlq": (3, 0, 0, 0), "b": (1, 0, 0, 0)}
    assert st.state_counts(NOW + 10, []) == {}


def test_staged_rows_publish_once_discard_and_expire(st):
    from forqapp.store import StagedMessage as Staged

    rows = [Staged(m, f"s{k}", NOW - HOUR if k == 0 else NOW + k) for k, m in enumerate(ids.new_ids(3))]
    rows[1] = rows[1]._replace(priority=4, attributes='{"from":"spark"}')
    st.stage("t1", "pub", rows, NOW)
    st.stage("t2", "pub", [Staged(ids.new_id(), "gone", NOW)], NOW)
    st.stage("t3", "pub", [Staged(ids.new_id(), "old", NOW)], NOW - 10 * HOUR)
    assert one(st, "pub", NOW + HOUR) is None  # staged rows are invisible
    before = st.insert([NewMessage(ids.new_id(), "pub", "x", NOW, NOW, NOW + HOUR)])[0]
    assert st.publish_staged([("t1", "pub")], NOW, HOUR, 10_000) == {"pub": 3}
    assert st.publish_staged([("t1", "pub")], NOW, HOUR, 10_000) == {"pub": 0}
    old = row(rows[0].id)
    assert (old.process_after, old.received_at, old.expires_after) == (NOW - 10_000, NOW, NOW + HOUR)
    assert row(rows[2].id).expires_after == NOW + 2 + HOUR
    assert (row(rows[1].id).priority, row(rows[1].id).attributes_dict) == (4, {"from": "spark"})
    numbers = [row(r.id).sequence for r in rows]
    assert numbers == sorted(set(numbers)) and numbers[0] > before  # numbered in id order, after the queue's
    assert st.discard_staged([("t2", "pub")]) == 1
    assert st.delete_abandoned_staged(NOW - HOUR, batch=1) == 1
    assert not StagedMessage.objects.exists()


def test_snapshot_pages_and_bounds(st):
    sent = sorted(put(st, "snap", 5, priority=3, attributes='{"k":"v"}', dedup_id="dd"))
    dead = put(st, "snap-dlq", 1, is_dlq=True)
    page = st.snapshot_page("snap", "", None, 2)
    assert [r.id for r in page] == sent[:2] and all(isinstance(r, SnapshotRow) for r in page)
    assert page[0]._asdict().keys() == set(vocab.SNAPSHOT_COLUMNS)
    assert (page[0].status, page[0].attempts, page[0].failure_reason) == (READY, 0, None)
    assert (page[0].priority, json.loads(page[0].attributes), page[0].dedup_id) == (3, {"k": "v"}, "dd")
    assert page[0].sequence == row(sent[0]).sequence and page[0].first_received_at is None
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
    d1, d2, d3 = take(st, "errs", NOW, 3)
    assert st.nack("errs", retried, d1.receipt, NOW, 1, (10,), "ValueError: boom")
    assert (row(retried).status, row(retried).last_error) == (FAILED, "ValueError: boom")
    assert row(retried).failure_reason is None  # out of attempts: the failed job names the reason
    assert not st.fail("errs", failed, d2.receipt + 1, NOW, "nope")
    assert st.fail("errs", failed, d2.receipt, NOW, "forqapp.errors.FatalError: no way")
    assert (row(failed).status, row(failed).failure_reason, row(failed).last_error) == (
        FAILED, vocab.FailureReason.FATAL_ERROR, "forqapp.errors.FatalError: no way")
    assert st.fail("errs", plain, d3.receipt, NOW)
    assert (row(plain).failure_reason, row(plain).last_error) == (vocab.FailureReason.FATAL_ERROR, None)
    assert st.move_failed_to_dlq(NOW + 1, HOUR, HOUR) == 3
    moved = {m: (row(m).queue, row(m).failure_reason, row(m).last_error) for m in (retried, failed, plain)}
    assert moved == {
        retried: ("errs-dlq", vocab.FailureReason.MAX_ATTEMPTS_REACHED, "ValueError: boom"),
        failed: ("errs-dlq", vocab.FailureReason.FATAL_ERROR, "forqapp.errors.FatalError: no way"),
        plain: ("errs-dlq", vocab.FailureReason.FATAL_ERROR, None),
    }
    (again,) = put(st, "errs")
    d = one(st, "errs", NOW)
    assert st.nack("errs", again, d.receipt, NOW, 5, (10,), "first")
    d = one(st, "errs", NOW + 10)
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


SQLITE_JOB_STATEMENTS = ("MOVE_EXPIRED_TO_DLQ", "MOVE_FAILED_TO_DLQ", "RECOVER_STALE", "DELETE_EXPIRED_DLQ",
                         "DELETE_FAILED_DLQ", "COUNT_EXPIRED", "COUNT_FAILED", "COUNT_STALE", "IN_FLIGHT_BY_QUEUE")


@pytest.mark.parametrize("name", SQLITE_JOB_STATEMENTS)
def test_sqlite_jobs_read_an_index_not_the_table(name, db):
    """SQLite's idx_expired leaves leased rows out (migration 0011): each job's statement still
    finds its rows through an index — the partial one, or idx_leases, which holds the leased rows
    alone (migration 0014) — never by reading the whole table or an index of every row."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's statements (PostgreSQL's planner picks its own plans)")
    from forqapp.store import sqlite as sql

    statement = getattr(sql, name)
    params: dict | list = [1] * statement.count("?") or dict.fromkeys(("now", "batch", "ttl", "queue_ttl", "max", "cutoff"), 1)
    connection.ensure_connection()
    plan = [r[3] for r in connection.connection.execute("EXPLAIN QUERY PLAN " + statement, params).fetchall()]
    # (a table or an index, whole: only idx_leases', which is the leases)
    assert not [step for step in plan if step.startswith("SCAN messages") and not step.endswith("INDEX idx_leases")], plan
    assert any("idx_expired" in step or "INDEX idx_leases" in step for step in plan), plan


@pytest.mark.parametrize("named", [False, True])
def test_sqlite_state_counts_read_each_kind_from_its_index(named, db):
    """The UI's counts read an index per kind (the failed from idx_expired, the delayed from
    idx_queue_timed, the leases from idx_leases, from ``now`` on), never the table."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's statements (PostgreSQL's planner picks its own plans)")
    from forqapp.store import sqlite as sql

    connection.ensure_connection()
    plan = [r[3] for r in connection.connection.execute("EXPLAIN QUERY PLAN " + sql.STATE_COUNTS[named],
                                                       {"now": NOW, "queues": '["a"]'})]
    reads = [step for step in plan if " messages " in f"{step} "]
    indexes = [step.split(" INDEX ")[1].split(" (")[0] for step in reads]
    assert indexes == ["idx_for_queue_depth", "idx_expired", "idx_queue_timed", "idx_leases"] if not named else \
        ["idx_for_queue_depth", "idx_expired", "idx_queue_timed", "idx_queue_timed", "idx_leases", "idx_leases"], plan
    assert "status=?" in reads[1], plan
    if named:  # (every queue's: the delayed rows' whole index, or a skip-scan once ANALYZE has run)
        # the messages without a group as a range from now on; those of groups, each queue's groups
        assert "queue=? AND message_group=? AND process_after>?" in reads[2], plan
        assert "queue=? AND message_group=? AND process_after>?" in reads[4], plan
        assert "queue=? AND message_group>?" in reads[3] and "queue=? AND message_group>?" in reads[5], plan


@pytest.mark.parametrize("order", ["fifo", "lifo", "random", "due"])
def test_sqlite_the_claim_reads_each_part_from_its_own_index(order, db):
    """The pick reads the ready rows written due from idx_queue_claim in claim order, and the ones
    come due by time (delayed, backed off; ended leases) as a range of idx_queue_timed and of
    idx_leases up to ``now``: no part walks the rows not yet due (migrations 0012-0014)."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's statements (test_postgres.py checks PostgreSQL's plans)")
    from forqapp.store import sqlite as sql

    connection.ensure_connection()
    params = {"queue": "q", "now": NOW, "limit": 1, "ended_among": 100, "among": 1_000}
    plan = [r[3] for r in connection.connection.execute("EXPLAIN QUERY PLAN " + sql.PICK[order], params)]
    reads = [step for step in plan if " messages " in f"{step} "]
    assert reads and all(step.startswith("SEARCH messages") for step in reads), plan
    assert {step.split(" INDEX ")[1].split(" (")[0] for step in reads} == \
        {"idx_queue_claim", "idx_queue_timed", "idx_leases", *(("idx_queue_past",) if order == "due" else ())}, plan
    assert all("process_after<?" in step for step in reads if "idx_queue_claim" not in step
               and "idx_queue_past" not in step), plan


@pytest.mark.parametrize("status", [READY, FAILED])
def test_sqlite_a_status_filter_of_the_orm_still_uses_idx_expired(status, db):
    """The admin's status filter (``Message.objects.filter(status=…)``, a bound parameter) is still
    answered by idx_expired for ready and failed messages: SQLite proves ``status = ?`` implies the
    partial index's ``status = 0 OR status = 2`` (it would not prove ``status != 1``)."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's planner (PostgreSQL chooses its own plans)")
    sql, params = Message.objects.filter(status=status).order_by("-id").values_list("id").query.sql_with_params()
    connection.ensure_connection()
    plan = [r[3] for r in connection.connection.execute("EXPLAIN QUERY PLAN " + sql.replace("%s", "?"), params)]
    assert any("idx_expired (status=?)" in step for step in plan), plan


# --- the due order (ordering "due": the Django Tasks backend's queues) --------------------------


def _due_queue(st: Store, queue: str) -> dict[str, str]:
    """A queue of each kind of due row, sent in this order (their sequence): a delivery whose lease
    has ended, one sent due, two sent long past due (2 h, then 10 h: a task's past run_after), one
    sent to come due later, one of priority 5, and one not due yet."""
    names: dict[str, str] = {}
    (names["leased"],) = put(st, queue, due=NOW - 5 * HOUR, received=NOW - 5 * HOUR)
    (d,) = take(st, queue, NOW - 5 * HOUR + 1, vis=1, order="due")  # leased until -5 h + 2 ms
    assert d.id == names["leased"]
    (names["plain"],) = put(st, queue, due=NOW - 1_000, received=NOW - 1_000)
    (names["past_2h"],) = put(st, queue, due=NOW - 2 * HOUR, received=NOW - 900)
    (names["past_10h"],) = put(st, queue, due=NOW - 10 * HOUR, received=NOW - 800)
    (names["timed"],) = put(st, queue, due=NOW - 500, received=NOW - 700)  # (written due later: -700 < -500)
    (names["high"],) = put(st, queue, due=NOW - 600, received=NOW - 600, priority=5)
    (names["later"],) = put(st, queue, due=NOW + HOUR, received=NOW)
    return names


DUE_ORDER = ["high", "past_10h", "leased", "past_2h", "plain", "timed"]


def test_a_due_ordered_claim_takes_by_priority_then_due_time_then_sequence(st):
    names = _due_queue(st, "due-q")
    got = take(st, "due-q", NOW, 10, order="due")
    by_id = {v: k for k, v in names.items()}
    assert [by_id.get(d.id, d.id) for d in got] == DUE_ORDER


def test_due_ordered_claims_one_at_a_time_and_peeks_keep_the_same_order(st):
    names = _due_queue(st, "due-one")
    seen = []
    while True:
        peeked = st.peek("due-one", NOW, "due")
        got = take(st, "due-one", NOW, 1, order="due")
        if not got:
            assert peeked is None
            break
        assert peeked is not None and peeked.id == got[0].id
        seen.append(got[0].id)
    assert seen == [names[n] for n in DUE_ORDER]


@pytest.mark.parametrize("order", ["fifo", "lifo"])
def test_fifo_and_lifo_keep_their_order_beside_the_due_order(st, order):
    """A row sent long past due changes nothing for FIFO and LIFO: priority, then sequence."""
    names = _due_queue(st, f"plain-{order}")
    got = take(st, f"plain-{order}", NOW, 10, order=order)
    fifo = ["high", "leased", "plain", "past_2h", "past_10h", "timed"]
    want = fifo if order == "fifo" else ["high", "timed", "past_10h", "past_2h", "plain", "leased"]
    assert [d.id for d in got] == [names[n] for n in want]


def test_a_due_ordered_claim_goes_on_past_what_it_redrives(st):
    """The ended lease has had its one attempt: moved to the DLQ, and the claim takes the next ones."""
    names = _due_queue(st, "due-redrive")
    claimed = claim(st, "due-redrive", NOW, 3, order="due", max_attempts=1)
    assert [d.id for d in claimed.redriven_messages] == [names["leased"]]
    assert [d.id for d in claimed.deliveries] == [names[n] for n in ("high", "past_10h", "past_2h")]


def test_sqlite_a_due_ordered_claim_costs_the_same_on_a_long_queue(st):
    """The due order reads the heads of its indexes and sorts only what it read: its claims of 10
    on a queue of 100,000 messages due (2,000 sent long past due) run no more SQLite VM steps than
    on a queue of 200. Counted, not timed: a scan or sort of the queue would be ~500x more."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's statements (test_postgres.py checks PostgreSQL's plans)")

    def fill(queue: str, n: int) -> None:
        for start in range(0, n, 10_000):
            put(st, queue, min(10_000, n - start), due=NOW - HOUR, received=NOW - HOUR)
        for k in range(n // 50):
            put(st, queue, due=NOW - 10 * HOUR + k, received=NOW - HOUR // 2 + k, priority=k % 3)

    def steps(queue: str) -> tuple[int, list[Delivery]]:
        counted = [0]

        def count() -> int:
            counted[0] += 1
            return 0

        connection.connection.set_progress_handler(count, 100)
        try:
            got = take(st, queue, NOW, 10, order="due")
        finally:
            connection.connection.set_progress_handler(None, 100)
        return counted[0] * 100, got

    fill("short", 200)
    fill("long", 100_000)
    short, _ = steps("short")
    long, got = steps("long")
    assert long <= 2 * short + 5_000, (short, long)
    assert [(d.priority, d.received_at) for d in got] == [(2, NOW - HOUR // 2 + k) for k in range(2, 30, 3)]
