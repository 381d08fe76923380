"""Property test of the store: under any sequence of operations hypothesis can express — sends
with priorities, delays and dedup ids; claims (FIFO and LIFO) that take leases; time passing so
leases end and their messages are claimed again with no job running; changes of visibility;
acks, nacks, redrives of used-up messages at claim time, the stale and failed jobs — the store
matches a plain model of the queue: no message is lost or delivered twice at once, receipts fence
settles, claims follow priority then sequence, sequences strictly increase, and a dedup id answers
its original message until its window ends.

Time is a fake clock the machine moves itself: deterministic (hypothesis is derandomized too) and
fast. A second machine (:class:`GroupedQueueMachine`) sends messages in groups too, under a
``group_concurrency`` drawn per example. ``FORQ_HYPOTHESIS_EXAMPLES=2000`` runs that many random examples instead of the 35 fixed ones
(about 30 s on SQLite), for a longer search after a change to the store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
from django.db import connection
from hypothesis import HealthCheck, settings, strategies
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from forqapp import ids, store
from forqapp.models import DedupEntry, Message, Queue
from forqapp.store import NewMessage, QueueCounts

QUEUE = "prop"
DLQ = QUEUE + "-dlq"
MAX_ATTEMPTS = 2  # the stale job's (each claim and nack draws its own: a queue's policy may change)
ATTEMPTS = [1, 2, 3, 0]  # 0: unlimited
BACKOFF = (200, 1_000)
WINDOW = 5_000  # dedup window (ms)
HOUR = 3_600_000
READY, PROCESSING, FAILED = 0, 1, 2


@dataclass
class Msg:
    id: str
    priority: int
    sequence: int
    status: int = READY
    due: int = 0  # ready: when it is due; processing: when its lease ends
    attempts: int = 0
    receipt: int | None = None
    dead: bool = False  # moved to the DLQ
    acked: bool = False
    group: str | None = None

    def used_up(self, max_attempts: int) -> bool:
        return 0 < max_attempts <= self.attempts


class QueueMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        Message.objects.all().delete()
        Queue.objects.all().delete()
        DedupEntry.objects.all().delete()
        self.clock = 1_800_000_000_000
        self.messages: dict[str, Msg] = {}
        self.last_sequence = 0
        self.dedup: dict[str, tuple[str, int]] = {}  # dedup id -> (message id, window end)
        self.stale: list[tuple[str, int]] = []  # receipts that must no longer work

    @property
    def st(self):
        return store.for_alias(connection.alias)

    # -- the model's reading of the queue ----------------------------------------------------

    def live(self) -> list[Msg]:
        return [m for m in self.messages.values() if not m.acked and not m.dead]

    def due(self) -> list[Msg]:
        return [m for m in self.live() if m.status in (READY, PROCESSING) and m.due <= self.clock]

    def held(self) -> list[Msg]:
        """Deliveries whose receipt still works: in processing, not claimed again since."""
        return [m for m in self.live() if m.status == PROCESSING]

    def expected_claim(self, limit: int, order: str, max_attempts: int) -> tuple[list[Msg], list[Msg]]:
        """(delivered, redriven) as the contract says: by priority, then sequence (LIFO: newest
        first within a priority, a priority at a time); used-up messages go to the DLQ, and the
        claim takes again for what it is short of."""
        remaining = sorted(self.due(), key=lambda m: (-m.priority, m.sequence))
        delivered: list[Msg] = []
        redriven: list[Msg] = []
        need = limit
        while remaining:
            if order == "lifo":
                top = remaining[0].priority
                group = sorted((m for m in remaining if m.priority == top), key=lambda m: -m.sequence)[:need]
            else:
                group = remaining[:need]
            remaining = [m for m in remaining if m not in group]
            used = [m for m in group if m.used_up(max_attempts)]
            delivered += [m for m in group if not m.used_up(max_attempts)]
            redriven += used
            if len(delivered) >= limit or (not used and order != "lifo"):  # LIFO: on to the next priority
                break
            need = limit - len(delivered)
        return delivered, redriven

    # -- rules -------------------------------------------------------------------------------

    @initialize(priorities=strategies.lists(strategies.sampled_from([-1, 0, 5]), min_size=1, max_size=4))
    def some_messages(self, priorities):
        for priority in priorities:
            self.send(priority, 0, None)

    @rule(priority=strategies.sampled_from([-1, 0, 0, 5]), delay=strategies.sampled_from([0, 0, 500, 3_000]),
          dedup_id=strategies.sampled_from([None, None, "a", "b"]))
    def send(self, priority, delay, dedup_id, group=None):
        message_id = ids.new_id()
        if dedup_id is not None:
            original = self.st.dedup(QUEUE, dedup_id, message_id, self.clock, WINDOW)
            known = self.dedup.get(dedup_id)
            if known is not None and known[1] > self.clock:
                assert original == known[0], "a live dedup id must answer its original message"
                return
            assert original is None
            self.dedup[dedup_id] = (message_id, self.clock + WINDOW)
            self.check_dedup_records()
        due = self.clock + delay
        (sequence,) = self.st.insert([NewMessage(message_id, QUEUE, "x", due, self.clock, due + HOUR, priority,
                                                 None, dedup_id, group)])
        assert sequence > self.last_sequence, "sequences strictly increase"
        self.last_sequence = sequence
        self.messages[message_id] = Msg(message_id, priority, sequence, due=due, group=group)

    @rule(ms=strategies.sampled_from([1, 200, 1_000, 2_500, None]))
    def time_passes(self, ms):
        if ms is None:  # until every lease has ended: their consumers died
            ms = max([m.due - self.clock for m in self.held()] + [1])
        self.clock += ms

    # (A 0 s lease, with redrives, is tests/test_store_contract.py's
    # test_a_redriving_claim_never_delivers_a_message_twice.)
    @rule(limit=strategies.sampled_from([1, 1, 2, 4]), visibility=strategies.sampled_from([1, 1_000, 3_000]),
          order=strategies.sampled_from(["fifo", "fifo", "lifo"]), max_attempts=strategies.sampled_from(ATTEMPTS))
    def claim(self, limit, visibility, order, max_attempts):
        self.peek(order)  # what a claim would take, changing nothing
        delivered, redriven = self.expected_claim(limit, order, max_attempts)
        got = self.st.claim(QUEUE, self.clock, limit, visibility_ms=visibility, max_attempts=max_attempts,
                            dlq_ttl_ms=HOUR, order=order)
        key = (lambda m: (-m.priority, -m.sequence)) if order == "lifo" else (lambda m: (-m.priority, m.sequence))
        assert [d.id for d in got.deliveries] == [m.id for m in sorted(delivered, key=key)], order
        assert got.redriven == len(redriven)
        assert sorted(d.id for d in got.redriven_messages) == sorted(m.id for m in redriven)
        assert all(d.queue == QUEUE + "-dlq" and d.receipt is None for d in got.redriven_messages)
        for d in got.deliveries:
            m = self.messages[d.id]
            if m.receipt is not None:
                assert d.receipt > m.receipt, "receipts grow"
                self.stale.append((m.id, m.receipt))  # an ended lease, claimed again
            assert (d.attempts, d.sequence, d.priority, d.lease_expires_at) == (
                m.attempts + 1, m.sequence, m.priority, self.clock + visibility)
            m.status, m.attempts, m.receipt, m.due = PROCESSING, m.attempts + 1, d.receipt, self.clock + visibility
        for m in redriven:
            if m.receipt is not None:
                self.stale.append((m.id, m.receipt))
            m.dead, m.status, m.receipt = True, READY, None

    @precondition(lambda self: self.held())
    @rule(data=strategies.data(), action=strategies.sampled_from(["ack", "nack", "change_visibility"]),
          visibility=strategies.sampled_from([0, 1_000, 4_000]), max_attempts=strategies.sampled_from([0, 2, 3]))
    def settle(self, data, action, visibility, max_attempts):
        m = data.draw(strategies.sampled_from(sorted(self.held(), key=lambda m: m.sequence)))
        if action == "ack":
            assert self.st.ack(QUEUE, m.id, m.receipt)
            self.stale.append((m.id, m.receipt))
            m.acked = True
        elif action == "nack":
            assert self.st.nack(QUEUE, m.id, m.receipt, self.clock, max_attempts, BACKOFF)
            self.stale.append((m.id, m.receipt))
            m.receipt = None
            if m.used_up(max_attempts):
                m.status = FAILED
            else:
                m.status, m.due = READY, self.clock + BACKOFF[min(m.attempts, len(BACKOFF)) - 1]
        else:
            assert self.st.change_visibility(QUEUE, [(m.id, m.receipt)], self.clock, visibility) == [True]
            m.due = self.clock + visibility  # the receipt stays the same

    @precondition(lambda self: self.stale)
    @rule(data=strategies.data())
    def old_receipts_are_refused(self, data):
        message_id, receipt = data.draw(strategies.sampled_from(self.stale))
        assert not self.st.ack(QUEUE, message_id, receipt)
        assert not self.st.nack(QUEUE, message_id, receipt, self.clock, MAX_ATTEMPTS, BACKOFF)
        assert self.st.change_visibility(QUEUE, [(message_id, receipt)], self.clock, 0) == [False]

    @rule(job=strategies.sampled_from(["stale", "failed", "dedup"]))
    def run_job(self, job):
        getattr(self, job + "_job")()

    def stale_job(self):
        """The safety net: ended leases → ready (or failed when used up); their receipts stop working."""
        ended = [m for m in self.held() if m.due < self.clock]
        assert self.st.recover_stale(self.clock, MAX_ATTEMPTS) == len(ended)
        for m in ended:
            self.stale.append((m.id, m.receipt))
            m.receipt = None
            m.status, m.due = (FAILED, m.due) if m.used_up(MAX_ATTEMPTS) else (READY, self.clock)

    def failed_job(self):
        failed = [m for m in self.live() if m.status == FAILED]
        assert self.st.move_failed_to_dlq(self.clock, HOUR, HOUR) == len(failed)
        for m in failed:
            m.dead, m.status = True, READY

    def dedup_job(self):
        ended = [k for k, (_, end) in self.dedup.items() if end <= self.clock]
        assert self.st.delete_expired_dedup(self.clock) == len(ended)
        for k in ended:
            del self.dedup[k]
        self.check_dedup_records()

    def check_dedup_records(self):
        """(Checked where they change, not after every step: a query less per step.)"""
        rows = {(q, d): (m, e) for q, d, m, e in DedupEntry.objects.values_list(
            "queue", "dedup_id", "message_id", "expires_at")}
        assert rows == {(QUEUE, k): v for k, v in self.dedup.items()}

    def peek(self, order):
        seen = self.st.peek(QUEUE, self.clock, order=order)
        due = sorted(self.due(), key=lambda m: (-m.priority, m.sequence))
        if not due:
            assert seen is None
            return
        if order == "lifo":
            due = sorted((m for m in due if m.priority == due[0].priority), key=lambda m: -m.sequence)
        assert seen is not None and seen.id == due[0].id and seen.receipt is None

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def the_database_is_the_model(self):
        rows = {r["id"]: r for r in Message.objects.filter(queue__in=[QUEUE, DLQ]).values(
            "id", "queue", "is_dlq", "status", "attempts", "process_after", "processing_started_at", "sequence",
            "priority")}
        assert set(rows) == {m.id for m in self.live() if not m.dead} | {m.id for m in self.messages.values()
                                                                         if m.dead}, "a message lost or found"
        for m in self.messages.values():
            if m.acked:
                continue
            r = rows[m.id]
            assert (r["sequence"], r["priority"]) == (m.sequence, m.priority)
            if m.dead:
                assert (r["queue"], r["is_dlq"], r["attempts"]) == (DLQ, True, 0)
                continue
            assert (r["queue"], r["is_dlq"], r["status"], r["attempts"]) == (QUEUE, False, m.status, m.attempts)
            if m.status != FAILED:
                assert r["process_after"] == m.due
            assert r["processing_started_at"] == (m.receipt if m.status == PROCESSING else None)

    @invariant()
    def counts_agree(self):
        live = self.live()
        expected = QueueCounts(
            ready=len(self.due()),
            delayed=sum(m.status == READY and m.due > self.clock for m in live),
            in_flight=sum(m.status == PROCESSING and m.due > self.clock for m in live),
            failed=sum(m.status == FAILED for m in live),
            dlq=sum(m.dead for m in self.messages.values() if not m.acked),
        )
        assert self.st.queue_counts(QUEUE, self.clock) == expected


@pytest.mark.django_db  # one transaction (rolled back): no commit per step
def test_store_state_machine():
    QueueMachine.TestCase.settings = settings(
        max_examples=int(os.environ.get("FORQ_HYPOTHESIS_EXAMPLES", 35)), stateful_step_count=40, deadline=None, derandomize=not os.environ.get("FORQ_HYPOTHESIS_EXAMPLES"), database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    QueueMachine.TestCase().runTest()


# --- message groups -------------------------------------------------------------------------------

GROUPS = [None, "a", "a", "b", "c"]


class GroupedQueueMachine(QueueMachine):
    """The same queue with messages in groups (and some without), under a ``group_concurrency`` drawn
    per example. The messages without a group are claimed first, exactly as the plain model says.
    Which group a claim serves first is the fair turn's business (tests/test_groups.py); what holds
    whatever the turn: each group gives its messages in its own order — of the ones that hold a slot
    and are due again, and while it holds fewer than ``group_concurrency`` slots its ready ones never
    delivered, by priority then sequence — and a claim short of its limit takes every message some
    group may give (no group is left waiting past its time: its next turn is never late)."""

    def __init__(self):
        super().__init__()
        with connection.cursor() as cur:
            cur.execute("DELETE FROM forq_groups")
        self.concurrency: int | None = None

    @initialize(concurrency=strategies.sampled_from([None, 1, 2]))
    def group_limit(self, concurrency):
        self.concurrency = concurrency

    @initialize(groups=strategies.lists(strategies.sampled_from(GROUPS), min_size=1, max_size=4))
    def some_messages(self, groups):
        for group in groups:
            self.send(0, 0, None, group)

    @rule(priority=strategies.sampled_from([-1, 0, 0, 5]), delay=strategies.sampled_from([0, 0, 500, 3_000]),
          dedup_id=strategies.sampled_from([None, None, None, "a"]), group=strategies.sampled_from(GROUPS))
    def send(self, priority, delay, dedup_id, group=None):
        super().send(priority, delay, dedup_id, group)

    def group_sequence(self, group: str, max_attempts: int) -> list[tuple[Msg, bool]]:
        """(message, used up) in the order group ``group`` gives them to one claim, as long as asked."""
        def by_order(m: Msg) -> tuple[int, int]:
            return -m.priority, m.sequence

        mine = [m for m in self.live() if m.group == group and m.status in (READY, PROCESSING)]
        held = [m for m in mine if m.status == PROCESSING or m.attempts > 0]
        slots = len(held)
        held_due = sorted((m for m in held if m.due <= self.clock), key=by_order)
        fresh_due = sorted((m for m in mine if m.status == READY and m.attempts == 0 and m.due <= self.clock),
                           key=by_order)
        out: list[tuple[Msg, bool]] = []
        while True:
            candidates = held_due[:1] + (fresh_due[:1] if self.concurrency is None or slots < self.concurrency else [])
            if not candidates:
                return out
            best = min(candidates, key=by_order)
            used = best.used_up(max_attempts)
            if best in held_due:
                held_due.remove(best)
                slots -= used  # a used-up one goes to the DLQ: its slot is free
            else:
                fresh_due.remove(best)
                slots += 1
            out.append((best, used))

    @rule(limit=strategies.sampled_from([1, 1, 2, 4]), visibility=strategies.sampled_from([1, 1_000, 3_000]),
          order=strategies.sampled_from(["fifo", "fifo", "lifo"]), max_attempts=strategies.sampled_from(ATTEMPTS))
    def claim(self, limit, visibility, order, max_attempts):
        everything = self.messages
        self.messages = {k: m for k, m in everything.items() if m.group is None}
        plain, plain_redriven = self.expected_claim(limit, order, max_attempts)
        self.messages = everything
        sequences = {g: self.group_sequence(g, max_attempts) for g in GROUPS if g is not None}
        got = self.st.claim(QUEUE, self.clock, limit, visibility_ms=visibility, max_attempts=max_attempts,
                            dlq_ttl_ms=HOUR, order=order, group_concurrency=self.concurrency)
        key = (lambda m: (-m.priority, -m.sequence)) if order == "lifo" else (lambda m: (-m.priority, m.sequence))
        delivered = [self.messages[d.id] for d in got.deliveries]
        redriven = [self.messages[d.id] for d in got.redriven_messages]
        assert [m.id for m in delivered if m.group is None] == [m.id for m in sorted(plain, key=key)], order
        assert sorted(m.id for m in redriven if m.group is None) == sorted(m.id for m in plain_redriven)
        assert all(m.group is None for m in delivered[:len(plain)]), "the messages without a group first"
        assert [d.group for d in got.deliveries] == [m.group for m in delivered]
        assert all(d.group == self.messages[d.id].group for d in got.redriven_messages)
        grouped = [m for m in delivered if m.group is not None]
        deliverable = 0
        for group, sequence in sequences.items():
            taken = {m.id for m in delivered + redriven if m.group == group}
            given = sequence[:len(taken)]
            assert taken == {m.id for m, _ in given}, (group, "a group gives its messages in its order")
            assert all((m in redriven) == used for m, used in given)
            deliverable += sum(not used for _, used in sequence)
        assert len(grouped) == (min(limit - len(plain), deliverable) if len(plain) < limit else 0), \
            "a claim short of its limit takes what the groups may give"
        for d in got.deliveries:
            m = self.messages[d.id]
            if m.receipt is not None:
                assert d.receipt > m.receipt, "receipts grow"
                self.stale.append((m.id, m.receipt))
            assert (d.attempts, d.sequence, d.priority, d.lease_expires_at) == (
                m.attempts + 1, m.sequence, m.priority, self.clock + visibility)
            m.status, m.attempts, m.receipt, m.due = PROCESSING, m.attempts + 1, d.receipt, self.clock + visibility
        for m in redriven:
            if m.receipt is not None:
                self.stale.append((m.id, m.receipt))
            m.dead, m.status, m.receipt = True, READY, None

    @invariant()
    def each_group_is_counted(self):
        for group in ("a", "b", "c"):
            mine = [m for m in self.live() if m.group == group]
            state = self.st.group_state(QUEUE, group, self.clock)
            assert (state.ready, state.in_flight) == (
                sum(m.status == READY for m in mine),
                sum(m.status == PROCESSING and m.due > self.clock for m in mine))
            if self.concurrency is not None:
                assert sum(m.status == PROCESSING or (m.status == READY and m.attempts > 0) for m in mine) \
                    <= self.concurrency
        groups = dict(Message.objects.filter(queue__in=[QUEUE, DLQ]).values_list("id", "message_group"))
        assert groups == {m.id: m.group or "" for m in self.messages.values() if not m.acked}, "the DLQ keeps the group"


@pytest.mark.django_db
def test_store_state_machine_with_groups():
    GroupedQueueMachine.TestCase.settings = settings(
        max_examples=int(os.environ.get("FORQ_HYPOTHESIS_EXAMPLES", 35)), stateful_step_count=40, deadline=None,
        derandomize=not os.environ.get("FORQ_HYPOTHESIS_EXAMPLES"), database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    GroupedQueueMachine.TestCase().runTest()
