"""Message groups: a message's ``group``, a queue's ``group_concurrency`` and ``group_rate``, the fair
turn across groups, on the test database's store (SQLite, and PostgreSQL in the second run) and
through the Python API. Store-level tests give every claim its own ``now`` (no sleeps)."""

from __future__ import annotations

import pytest
from django.db import connection

import forqapp
from forqapp import errors, ids, services, store, validation, vocab
from forqapp.errors import ForqError
from forqapp.models import DedupEntry, Message, Queue
from forqapp.store import Delivery, NewMessage, Store
from forqapp.utils import now_ms

NOW = 1_800_000_000_000
HOUR = 3_600_000
VIS = 30_000


@pytest.fixture
def st(db) -> Store:
    Message.objects.all().delete()
    Queue.objects.all().delete()
    DedupEntry.objects.all().delete()
    with connection.cursor() as cur:
        cur.execute("DELETE FROM forq_groups")
    return store.for_alias(connection.alias)


def put(st: Store, queue: str, groups: list[str | None], *, due: int = NOW, received: int = NOW,
        priority: int = 0) -> list[str]:
    """One message per entry of ``groups`` (None: no group), received one ms apart."""
    new = ids.new_ids(len(groups))
    st.insert([NewMessage(m, queue, f"{g}:{k}", due, received + k, due + HOUR, priority, None, None, g)
               for k, (m, g) in enumerate(zip(new, groups, strict=True))])
    return new


def take(st: Store, queue: str, now: int, limit: int = 1, *, vis: int = VIS, max_attempts: int = 0,
         concurrency: int | None = None, rate_us: int | None = None, **kw) -> list[Delivery]:
    return st.claim(queue, now, limit, visibility_ms=vis, max_attempts=max_attempts, dlq_ttl_ms=HOUR,
                    group_concurrency=concurrency, group_rate_us=rate_us, **kw).deliveries


def contents(deliveries: list[Delivery]) -> list[str]:
    return [d.content for d in deliveries]


# --- words -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "tenant-42", "x" * vocab.GROUP_MAX, "A.b:c/d=e+f@g_h-9"])
def test_a_group_name_is_1_to_128_of_the_table_s_characters(name):
    assert vocab.GROUP_NAME.fullmatch(name) and validation.group(name) == name


@pytest.mark.parametrize("name", ["", "x" * (vocab.GROUP_MAX + 1), "has space", "é", "a*b", 42])
def test_any_other_group_is_refused(name):
    with pytest.raises(ForqError) as caught:
        validation.group(name)
    assert caught.value.code == errors.BODY_INVALID


def test_the_group_policy_fields_parse_as_the_rate_does():
    change = validation.PolicyChange.parse({"group_concurrency": 1, "group_rate": "5/s"})
    assert change.columns == {"group_concurrency": 1, "group_rate": "5/s"}
    assert validation.policy({"group_rate": 0.2}) == {"group_rate": "1/0.2s"}
    for bad in ({"group_concurrency": 0}, {"group_concurrency": True}, {"group_rate": "fast"}):
        with pytest.raises(ForqError, match=next(iter(bad))):
            validation.policy(bad)


def test_a_send_entry_carries_its_group():
    entry = validation.SendEntry.parse({"content": "x", "group": "g-1"}, now=NOW,
                                       limits=validation.SendLimits(1024, 0, 3_600_000))
    assert entry.group == "g-1" and entry.item() == {"content": "x", "group": "g-1"}
    with pytest.raises(ForqError):
        validation.SendEntry.parse({"content": "x", "group": ""}, now=NOW, limits=validation.SendLimits(1024, 0, 3_600_000))


# --- the store ---------------------------------------------------------------------------------------


def test_messages_without_a_group_go_as_before_and_first(st):
    put(st, "q", ["a", None, "a", None])
    got = take(st, "q", NOW + 1, 10)
    assert contents(got) == ["None:1", "None:3", "a:0", "a:2"]  # no group first; then the group's, in order
    assert [d.group for d in got] == [None, None, "a", "a"]
    assert take(st, "q", NOW + 2, 10) == []


def test_order_within_a_group_is_priority_then_sequence(st):
    put(st, "q", ["a", "a"])
    put(st, "q", ["a"], priority=5, received=NOW + 10)
    got = [take(st, "q", NOW + 20 + k, concurrency=1) for k in range(3)]
    assert contents(got[0]) == ["a:0"] and got[1] == [] and got[2] == []  # 1 at a time
    got = take(st, "q", NOW + 30, concurrency=1)
    assert got == []
    # (settle the first: the next is the priority-5 one, then the rest by sequence)


def test_strict_order_holds_through_ack_nack_backoff_and_lease_end(st):
    a0, a1, a2 = put(st, "q", ["a", "a", "a"])
    (b0,) = put(st, "q", ["b"], received=NOW + 5)
    first = take(st, "q", NOW + 10, 10, concurrency=1)
    assert [d.id for d in first] == [a0, b0]  # one of each group
    assert st.ack("q", b0, first[1].receipt)
    # a0 nacked with a backoff: the group waits for it (SQS FIFO), a1 never overtakes it
    assert st.nack("q", a0, first[0].receipt, NOW + 20, 0, [1_000])
    assert take(st, "q", NOW + 30, 10, concurrency=1) == []
    assert take(st, "q", NOW + 1_019, 10, concurrency=1) == []
    again = take(st, "q", NOW + 1_020, 10, concurrency=1)
    assert [(d.id, d.attempts) for d in again] == [(a0, 2)]
    # its lease ends: a0 again (not a1), the slot never leaks
    assert take(st, "q", NOW + 1_020 + VIS - 1, 10, concurrency=1) == []
    third = take(st, "q", NOW + 1_020 + VIS, 10, concurrency=1)
    assert [(d.id, d.attempts) for d in third] == [(a0, 3)]
    assert st.ack("q", a0, third[0].receipt)
    later = NOW + 1_020 + VIS + 1
    assert [d.id for d in take(st, "q", later, 10, concurrency=1)] == [a1]
    assert take(st, "q", later + 1, 10, concurrency=1) == []
    assert st.group_state("q", "a", later + 1) == store.GroupState("a", 1, 1, later + VIS)
    del a2


def test_group_concurrency_3_is_never_exceeded(st):
    put(st, "q", ["a"] * 10 + ["b"] * 2)
    got = take(st, "q", NOW + 10, 10, concurrency=3)
    assert sorted(d.group for d in got) == ["a", "a", "a", "b", "b"]
    assert take(st, "q", NOW + 11, 10, concurrency=3) == []
    a = [d for d in got if d.group == "a"]
    assert st.ack("q", a[0].id, a[0].receipt)
    assert [d.group for d in take(st, "q", NOW + 12, 10, concurrency=3)] == ["a"]
    assert st.group_state("q", "a", NOW + 12).in_flight == 3
    # a failed message frees its slot too
    assert st.fail("q", a[1].id, a[1].receipt, NOW + 13)
    assert [d.group for d in take(st, "q", NOW + 14, 10, concurrency=3)] == ["a"]


def test_the_slots_ignore_the_messages_without_a_group_and_the_queue_limits_apply_on_top(st):
    put(st, "q", [None] * 3 + ["a"] * 3)
    got = take(st, "q", NOW + 10, 10, concurrency=1, max_in_flight=2)
    assert [d.group for d in got] == [None, None]
    assert take(st, "q", NOW + 11, 10, concurrency=1, max_in_flight=2) == []


def test_group_rate_spaces_one_group_s_claims_and_not_the_others(st):
    put(st, "q", ["a"] * 5 + ["b"] * 5)
    interval = 100_000  # µs: 10/s
    got = take(st, "q", NOW + 10, 10, rate_us=interval)
    assert sorted(d.group for d in got) == ["a", "b"]  # one of each: each group's next slot is 100 ms on
    claim = st.claim("q", NOW + 50, 10, visibility_ms=VIS, max_attempts=0, dlq_ttl_ms=HOUR, group_rate_us=interval)
    assert claim.deliveries == []
    assert st.group_state("q", "a", NOW + 50).next_eligible_at == NOW + 110
    assert sorted(d.group for d in take(st, "q", NOW + 110, 10, rate_us=interval)) == ["a", "b"]
    # over a longer run, claiming every ms: one claim per group per 100 ms
    times = {"a": [], "b": []}
    for t in range(NOW + 111, NOW + 400):
        for d in take(st, "q", t, 10, rate_us=interval):
            times[d.group].append(t)
    assert times == {"a": [NOW + 210, NOW + 310], "b": [NOW + 210, NOW + 310]}


def test_the_fair_turn_serves_every_small_group_before_a_busy_one_again(st):
    big = 100_000  # the size: one group with 100,000 ready messages
    st.insert([NewMessage(m, "q", "big", NOW, NOW, NOW + HOUR, 0, None, None, "busy") for m in ids.new_ids(big)])
    smalls = [f"small-{k}" for k in range(1_000)]
    st.insert([NewMessage(m, "q", g, NOW, NOW + 1, NOW + HOUR, 0, None, None, g)
               for m, g in zip(ids.new_ids(len(smalls)), smalls, strict=True)])
    served: list[str] = []
    for k in range(1_100):
        (d,) = take(st, "q", NOW + 10 + k)
        served.append(d.group or "")
    assert set(smalls) <= set(served[:1_001])
    assert served.count("busy") <= 100


def test_an_expired_lease_frees_its_group_s_slot(st):
    (a0, a1) = put(st, "q", ["a", "a"])
    (got,) = take(st, "q", NOW + 10, concurrency=1, vis=1_000)
    assert got.id == a0
    assert take(st, "q", NOW + 500, concurrency=1) == []
    (again,) = take(st, "q", NOW + 1_010, concurrency=1)
    assert (again.id, again.attempts) == (a0, 2)
    assert not st.ack("q", a0, got.receipt) and st.ack("q", a0, again.receipt)
    assert [d.id for d in take(st, "q", NOW + 1_011, concurrency=1)] == [a1]
    # the stale-lease job's way: the lease ends, the job makes it ready, its group goes on with it
    (b0, _) = put(st, "q", ["b", "b"], received=NOW + 2_000)
    (lease,) = take(st, "q", NOW + 2_010, concurrency=1, vis=100)
    assert lease.id == b0
    assert st.recover_stale(NOW + 2_200, 0) >= 1
    assert [(d.id, d.attempts) for d in take(st, "q", NOW + 2_201, concurrency=1)] == [(b0, 2)]


def test_the_dlq_keeps_the_group(st):
    (a0,) = put(st, "q", ["a"])
    (got,) = take(st, "q", NOW + 10, max_attempts=1, vis=100)
    claimed = st.claim("q", NOW + 200, 1, visibility_ms=VIS, max_attempts=1, dlq_ttl_ms=HOUR)
    assert claimed.deliveries == [] and [(d.id, d.group) for d in claimed.redriven_messages] == [(a0, "a")]
    found = st.peek_message("q-dlq", a0)
    assert found is not None and found[0].group == "a"
    assert [(d.id, d.group) for d in take(st, "q-dlq", NOW + 300)] == [(a0, "a")]
    # the failed job's way, and back from the DLQ with the requeue
    (b0,) = put(st, "q", ["b"], received=NOW + 400)
    (got,) = take(st, "q", NOW + 500)
    assert st.fail("q", b0, got.receipt, NOW + 501)
    assert st.move_failed_to_dlq(NOW + 502, HOUR, HOUR) == 1
    assert st.peek_message("q-dlq", b0)[0].group == "b"
    assert st.requeue("q-dlq", b0, NOW + 503, HOUR) == 1
    assert [(d.id, d.group) for d in take(st, "q", NOW + 504)] == [(b0, "b")]


def test_group_counts_and_the_busiest_groups(st):
    put(st, "q", ["a"] * 3 + ["b"] + [None])
    assert st.group_count("q") == 2
    take(st, "q", NOW + 10, 3)
    busiest = st.busiest_groups("q", NOW + 10, 20)
    assert [(g.group, g.ready, g.in_flight) for g in busiest] == [("a", 2, 1), ("b", 0, 1)]
    assert st.group_state("q", "nobody", NOW) == store.GroupState("nobody", 0, 0, None)
    st.purge("q")
    assert st.group_count("q") == 0


def test_a_raised_group_concurrency_takes_effect_at_once(st):
    put(st, "q", ["a"] * 3)
    assert len(take(st, "q", NOW + 10, 10, concurrency=1)) == 1
    st.queue_put("q", {"group_concurrency": 2}, NOW + 11)
    assert len(take(st, "q", NOW + 12, 10, concurrency=2)) == 1


def test_waiters_see_an_eligible_group(st):
    put(st, "q", ["a"])
    assert st.has_due(["q"], NOW + 1, 10) == {"q": 1}
    take(st, "q", NOW + 2, concurrency=1)
    assert st.has_due(["q"], NOW + 3, 10) == {}


def test_an_ack_wakes_its_group_only_when_a_message_waits_for_the_slot(st):
    """The ack of ``a``'s first message brings ``a``'s turn forward (its next message waits for the
    slot); the ack of ``b``'s only message leaves ``b``'s row as it was (nothing waits)."""
    a0, a1 = put(st, "q", ["a", "a"])
    (b0,) = put(st, "q", ["b"], received=NOW + 5)
    got = {d.id: d for d in take(st, "q", NOW + 10, 10, concurrency=1)}
    assert set(got) == {a0, b0}
    assert st.group_state("q", "a", NOW + 10).next_eligible_at == NOW + 10 + VIS  # its slot's lease end
    assert st.ack("q", a0, got[a0].receipt) and st.ack("q", b0, got[b0].receipt)
    assert st.group_state("q", "a", NOW + 11).next_eligible_at <= NOW + 11
    assert st.group_state("q", "b", NOW + 11) == store.GroupState("b", 0, 0, NOW + 10 + VIS)
    assert [d.id for d in take(st, "q", NOW + 11, 10, concurrency=1)] == [a1]


def test_the_stale_job_drops_the_rows_of_groups_left_without_messages_in_batches(st):
    """Rows of groups whose messages all went (acked, purged) go with the job, a batch of rows at a
    time; a group with a ready or a leased message keeps its row, and is claimed as before."""
    put(st, "q", [f"gone-{k:02}" for k in range(25)] + ["ready", "leased"])
    put(st, "other", ["kept"])
    got = take(st, "q", NOW + 10, 30, concurrency=1)
    assert len(got) == 27
    assert st.ack_many("q", [(d.id, d.receipt) for d in got if d.group != "leased"]) == 26
    put(st, "q", ["ready"], received=NOW + 20)
    with connection.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM forq_groups")
        assert cur.fetchone()[0] == 28  # (an ack leaves the row of a group with nothing waiting)
    assert st.drop_empty_groups(batch=10) == 25
    assert st.drop_empty_groups(batch=10) == 0
    with connection.cursor() as cur:
        cur.execute("SELECT queue, name FROM forq_groups ORDER BY queue, name")
        assert cur.fetchall() == [("other", "kept"), ("q", "leased"), ("q", "ready")]
    assert [d.group for d in take(st, "q", NOW + 30, 10, concurrency=1)] == ["ready"]
    assert [d.group for d in take(st, "other", NOW + 30, 10, concurrency=1)] == ["kept"]


class Counting:
    """A DB-API connection that counts the statements run on it."""

    def __init__(self, raw) -> None:
        self.raw, self.statements = raw, 0

    def execute(self, *args):
        self.statements += 1
        return self.raw.execute(*args)

    def __getattr__(self, name: str):
        return getattr(self.raw, name)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's statements (PostgreSQL's claim is one call)")
@pytest.mark.parametrize("groups", [10, 10_000])
def test_a_claim_of_a_queue_with_groups_is_two_statements_whatever_the_number_of_groups(st, groups):
    """The claim of the first group's message (checking that no message without a group is due) and
    its group's next turn: in strict order, fairly, whether the queue has 10 groups or 10,000."""
    put(st, "q", [f"g{k:05}" for k in range(groups)] * 2)
    connection.ensure_connection()
    counting = Counting(connection.connection)
    on = type(st).on(counting)
    assert [d.group for d in take(on, "q", NOW + 10_000, concurrency=1)] == ["g00000"]  # (now a queue with groups)
    for k in range(1, 6):
        before = counting.statements
        assert [d.group for d in take(on, "q", NOW + 10_000 + k, concurrency=1)] == [f"g{k:05}"]
        assert counting.statements - before == 2



@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's round trips")
@pytest.mark.parametrize("groups", [10, 10_000])
def test_a_claim_of_a_queue_with_groups_is_one_statement_on_postgresql(st, monkeypatch, groups):
    """``forq_claim`` and ``forq_claim_group`` in one statement: the messages without a group first,
    then the groups for what is left of the limit, whatever the number of groups."""
    put(st, "q", [f"g{k:05}" for k in range(groups)] * 2 + [None])
    statements: list[str] = []
    execute = st._execute
    monkeypatch.setattr(st, "_execute", lambda sql, params=None: statements.append(sql) or execute(sql, params))
    assert [d.group for d in take(st, "q", NOW + 10_000, 3, concurrency=1)] == [None, "g00000", "g00001"]
    for k in range(2, 6):
        assert [d.group for d in take(st, "q", NOW + 10_000 + k, concurrency=1)] == [f"g{k:05}"]
    assert len(statements) == 5


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's round trips")
def test_a_claim_that_redrives_claims_the_groups_after_the_redrive_on_postgresql(st):
    """A message without a group past its attempts goes to the dead-letter queue first (its own
    rounds), then the claim takes from the groups what is left of the limit, as it did in two calls."""
    (spent,) = put(st, "q", [None])
    put(st, "q", ["g1", "g2"])
    assert contents(take(st, "q", NOW + 1, max_attempts=1)) == ["None:0"]
    claimed = st.claim("q", NOW + 1 + 2 * VIS, 2, visibility_ms=VIS, max_attempts=1, dlq_ttl_ms=HOUR)
    assert [d.id for d in claimed.redriven_messages] == [spent]
    assert [d.group for d in claimed.deliveries] == ["g1", "g2"]


# --- the Python API ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_python_api_speaks_groups():
    forqapp.configure_queue("tenants", group_concurrency=1, group_rate="5/s")
    info = forqapp.queue_info("tenants")
    assert (info.policy["group_concurrency"], info.policy["group_rate"]) == (1, "5/s")
    assert info.overrides["group_concurrency"] == 1
    forqapp.configure_queue("tenants", group_rate=None)
    forqapp.send("tenants", "a1", group="t-1")
    forqapp.send_many("tenants", [{"content": "a2", "group": "t-1"}, {"content": "b1", "group": "t-2"}, "plain"])
    assert forqapp.queue_info("tenants").groups == 2
    got = forqapp.receive_many("tenants", 10)
    assert [(m.content, m.group) for m in got] == [("plain", None), ("a1", "t-1"), ("b1", "t-2")]
    g = forqapp.group_info("tenants", "t-1")
    assert (g.ready, g.in_flight) == (1, 1) and g.next_eligible_at is not None
    assert [b.group for b in services.busiest_groups("tenants")] == ["t-1", "t-2"]
    forqapp.ack(got[1])
    (nxt,) = forqapp.receive_many("tenants", 10)
    assert (nxt.content, nxt.group) == ("a2", "t-1")
    with pytest.raises(ForqError):
        forqapp.send("tenants", "x", group="no spaces")


# --- HTTP v2 -----------------------------------------------------------------------------------------

V2 = "/api/v2"


@pytest.mark.django_db(transaction=True)
def test_v2_speaks_groups(live_api):
    client = live_api.client
    put = client.put(f"{V2}/queues/v2-groups", json={"group_concurrency": 1, "group_rate": "50/s"})
    assert put.status_code == 200, put.text
    assert (put.json()["overrides"]["group_concurrency"], put.json()["overrides"]["group_rate"]) == (1, "50/s")
    assert client.patch(f"{V2}/queues/v2-groups", json={"group_rate": None}).status_code == 200
    one = client.post(f"{V2}/queues/v2-groups/messages", json={"content": "a1", "group": "t-1"})
    assert one.status_code == 201, one.text
    batch = client.post(f"{V2}/queues/v2-groups/messages/batch",
                        json={"entries": [{"content": "a2", "group": "t-1"}, {"content": "b1", "group": "t-2"},
                                          {"content": "plain"}]})
    assert batch.status_code == 200, batch.text
    assert client.get(f"{V2}/queues/v2-groups").json()["groups"] == 2
    got = client.post(f"{V2}/queues/v2-groups/receive", json={"max_messages": 10}).json()["messages"]
    assert [(m["content"], m["group"]) for m in got] == [("plain", None), ("a1", "t-1"), ("b1", "t-2")]
    for bad in ({"content": "x", "group": ""}, {"content": "x", "group": "a b"}, {"content": "x", "group": 7}):
        refused = client.post(f"{V2}/queues/v2-groups/messages", json=bad)
        assert refused.status_code == 400 and refused.json()["code"] == errors.BODY_INVALID, refused.text
    for bad in ({"group_concurrency": 0}, {"group_rate": "fast"}):
        refused = client.patch(f"{V2}/queues/v2-groups", json=bad)
        assert refused.status_code == 400, refused.text



@pytest.mark.django_db
def test_the_installed_group_claim_function_is_the_stores():
    """On PostgreSQL a grouped claim is one call of ``forq_claim_group`` (migration 0018): the function
    installed must be the store's text (a change to it needs a migration that installs it)."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's function")
    from forqapp.store.postgresql import GROUP_CLAIM_FUNCTION

    with connection.cursor() as cur:
        # (one overload: migration 0027's, with p_batch; 0028 dropped 0023's 9-argument one)
        cur.execute("SELECT pronargs, prosrc FROM pg_proc WHERE proname = 'forq_claim_group'")
        (arguments, body), = cur.fetchall()
    assert arguments == 10 and body == GROUP_CLAIM_FUNCTION.split("$claim_group$")[1]



@pytest.mark.django_db
def test_an_ack_finds_its_groups_row_by_key_whatever_the_number_of_groups():
    """On PostgreSQL the ack's trigger wakes the group through ``forq_groups``' primary key, not a read
    of every group's row (migration 0026: ``messages.queue`` is ``COLLATE "C"``, ``forq_groups.queue``
    the default, and the comparison took the message's collation, which the key cannot answer)."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's trigger")
    forqapp.send_many("many", [{"content": "x", "group": f"g{k}"} for k in range(3_000)]
                      + [{"content": "second", "group": "g0"}])  # g0 has a message waiting: the ack wakes it
    delivery = services.claim("many")
    assert delivery is not None and delivery.group == "g0"

    def seq_scans() -> int:  # of forq_groups, this transaction's so far
        with connection.cursor() as cur:
            cur.execute("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'forq_groups'")
            return int(cur.fetchone()[0])

    before = seq_scans()
    services.ack(delivery)
    assert seq_scans() == before
    with connection.cursor() as cur:
        cur.execute("SELECT eligible_at FROM forq_groups WHERE queue = 'many' AND name = 'g0'")
        (eligible_at,), = cur.fetchall()
    assert eligible_at is not None and eligible_at <= now_ms()  # woken: "second" may go at once


# --- peek ------------------------------------------------------------------------------------------


def test_peek_shows_the_message_a_claim_would_take_next_grouped_ones_too(st):
    """Messages without a group first (a claim takes them first), then the group whose turn comes
    first, within its slots: what peek shows is what the next claim gets, at each step."""
    put(st, "q", [None, "a", "a", "b"])

    def peek(now: int) -> Delivery | None:
        return st.peek(queue="q", now=now) or st.peek_grouped("q", now, 1, None)

    got: dict[str, Delivery] = {}
    for k in range(3):
        shown = peek(NOW + 10 + k)
        (claimed,) = take(st, "q", NOW + 10 + k, concurrency=1)
        assert (shown.content, shown.group, shown.receipt) == (claimed.content, claimed.group, None)
        got[claimed.content] = claimed
    assert list(got)[0] == "None:0" and sorted(got)[1:] == ["a:1", "b:3"]
    assert peek(NOW + 20) is None and take(st, "q", NOW + 20, concurrency=1) == []  # a:2 waits for a:1's slot
    assert st.ack("q", got["a:1"].id, got["a:1"].receipt)  # a:1 done: a's slot is free
    shown = peek(NOW + 30)
    assert (shown.content, shown.group) == ("a:2", "a")
    assert contents(take(st, "q", NOW + 30, concurrency=1)) == ["a:2"]


def test_services_peek_shows_a_grouped_message_and_its_group(db):
    forqapp.configure_queue("peeked", group_concurrency=1)
    forqapp.send("peeked", "first", group="tenant-1")
    forqapp.send("peeked", "second", group="tenant-1")
    shown = forqapp.peek("peeked")
    assert (shown.content, shown.group, shown.receipt) == ("first", "tenant-1", None)
    got = forqapp.receive("peeked")
    assert got.content == "first"
    assert forqapp.peek("peeked") is None  # the group's one slot is held
    forqapp.ack(got)
    assert forqapp.peek("peeked").content == "second"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's row versions")
def test_a_batch_into_one_group_writes_its_group_s_row_once_not_once_a_message(st):
    """Each write of the group's row in one transaction is a new version of it, found by walking
    the ones before: a batch of N messages of one group must not write it N times (quadratic)."""
    from django.db import transaction

    def writes() -> tuple[int, int]:
        cur.execute("SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'forq_groups'")
        return cur.fetchone()

    with transaction.atomic(), connection.cursor() as cur:
        inserted, updated = writes()  # (the transaction's so far: the fixture's clean-up)
        put(st, "q", ["one"] * 1_000)
        assert writes() == (inserted + 1, updated)  # the first message makes the row; the others leave it
        got = take(st, "q", NOW + 10, 500)  # (a claim sets the group's turn once a message it takes)
        before = writes()[1]
        assert st.ack_many("q", [(d.id, d.receipt) for d in got]) == 500
        assert writes()[1] - before <= 1  # the first ack brings the turn forward; the others leave it


# --- a batch of one group (group_batch: SQS's FIFO receive) -------------------------------------------


def test_a_batch_takes_a_group_s_next_messages_in_order_and_holds_the_group(st):
    a = put(st, "q", ["a", "a", "a", "a"])
    (b0,) = put(st, "q", ["b"], received=NOW + 10)
    got = take(st, "q", NOW + 20, 3, concurrency=1, group_batch=True)
    assert [d.id for d in got] == a[:3]  # as many of one group as asked, in order
    assert all(d.group == "a" and d.receipt for d in got)
    # a second receiver: nothing of "a" while any of them is in flight, "b" goes on
    assert [d.id for d in take(st, "q", NOW + 30, 10, concurrency=1, group_batch=True)] == [b0]
    assert take(st, "q", NOW + 40, 10, concurrency=1) == []
    assert st.ack("q", a[0], got[0].receipt) and st.ack("q", a[2], got[2].receipt)
    assert take(st, "q", NOW + 50, 10, concurrency=1, group_batch=True) == []  # a[1] still held
    assert st.ack("q", a[1], got[1].receipt)
    assert [d.id for d in take(st, "q", NOW + 60, 10, concurrency=1)] == [a[3]]
    # without group_batch a claim keeps to one message a group
    more = put(st, "q", ["c", "c"], received=NOW + 70)
    assert [d.id for d in take(st, "q", NOW + 80, 10, concurrency=1)] == [more[0]]


def test_a_batch_given_back_by_its_lease_end_is_taken_again_first_first(st):
    a = put(st, "q", ["a", "a", "a"])
    got = take(st, "q", NOW + 10, 10, concurrency=1, group_batch=True)
    assert [d.id for d in got] == a
    end = NOW + 10 + VIS
    # all three due again: one receiver (one at a time) takes a[0] alone, the group waits for it
    assert [d.id for d in take(st, "q", end, 1, concurrency=1, group_batch=True)] == [a[0]]
    assert take(st, "q", end + 1, 10, concurrency=1) == []
    assert take(st, "q", end + 2, 10, concurrency=1, group_batch=True) == []
    # its lease ends too: a batch takes all three again, in order
    again = take(st, "q", end + VIS, 10, concurrency=1, group_batch=True)
    assert [(d.id, d.attempts) for d in again] == [(a[0], 3), (a[1], 2), (a[2], 2)]


def test_a_nack_of_a_batch_s_first_message_keeps_the_group_in_order(st):
    a = put(st, "q", ["a", "a", "a"])
    got = take(st, "q", NOW + 10, 10, concurrency=1, group_batch=True)
    assert st.nack("q", a[0], got[0].receipt, NOW + 20, 0, [1_000])
    assert st.release("q", a[1], got[1].receipt, NOW + 20) and st.release("q", a[2], got[2].receipt, NOW + 20)
    # a[1] and a[2] are due again, a[0] waits out its backoff: nobody takes a[1] before it
    assert take(st, "q", NOW + 30, 10, concurrency=1) == []
    assert take(st, "q", NOW + 30, 10, concurrency=1, group_batch=True) == []
    again = take(st, "q", NOW + 1_020, 10, concurrency=1, group_batch=True)
    assert [d.id for d in again] == a


def test_a_batch_redrives_a_used_up_follower(st):
    a = put(st, "q", ["a", "a"])
    got = take(st, "q", NOW + 10, 10, concurrency=1, group_batch=True, max_attempts=1)
    assert [d.id for d in got] == a
    claim = st.claim("q", NOW + 10 + VIS, 10, visibility_ms=VIS, max_attempts=1, dlq_ttl_ms=HOUR,
                     group_concurrency=1, group_batch=True)
    assert claim.deliveries == [] and sorted(d.id for d in claim.redriven_messages) == sorted(a)
    assert set(Message.objects.filter(id__in=a).values_list("queue", flat=True)) == {"q-dlq"}


def test_receive_many_takes_a_batch_of_one_group_when_asked(st):
    forqapp.send_many("batched", [{"content": f"a{k}", "group": "a"} for k in range(3)])
    forqapp.configure_queue("batched", group_concurrency=1)
    assert [m.content for m in forqapp.receive_many("batched", 10)] == ["a0"]
    forqapp.send_many("batched", [{"content": f"b{k}", "group": "b"} for k in range(3)])
    # (a0 in flight holds its group: a1 and a2 wait)
    assert [m.content for m in forqapp.receive_many("batched", 10, group_batch=True)] == ["b0", "b1", "b2"]
