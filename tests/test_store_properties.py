"""Property test of the store: under any sequence of operations hypothesis can express, no message
is lost or delivered twice at once, receipts fence settles, and FIFO holds among due messages."""

from __future__ import annotations

import pytest
from django.db import connection
from hypothesis import HealthCheck, settings, strategies
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from forqapp import services, store
from forqapp.models import Message

QUEUE = "prop"


class QueueMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        Message.objects.all().delete()
        self.clock = 1_800_000_000_000
        self.sent: list[str] = []          # ids in send order
        self.acked: set[str] = set()
        self.deliveries: dict[str, int] = {}  # id -> current receipt (in processing)
        self.stale: list[tuple[str, int]] = []  # receipts that must no longer work

    @property
    def st(self):
        return store.for_alias(connection.alias)

    @rule()
    def send(self):
        self.clock += 1000
        message_id = services.ids.new_id()
        self.st.insert([store.NewMessage(message_id, QUEUE, "x", self.clock, self.clock, self.clock + 10**9)])
        self.sent.append(message_id)

    @rule()
    def claim(self):
        self.clock += 1000
        row = self.st.claim(QUEUE, self.clock)
        ready = [m for m in self.sent if m not in self.acked and m not in self.deliveries and not self._failed(m)]
        if row is None:
            assert ready == []
            return
        assert row.id not in self.deliveries, "delivered twice at once"
        assert row.id == min(ready, key=self.sent.index), "not FIFO"
        self.deliveries[row.id] = row.receipt

    def _failed(self, message_id):
        return Message.objects.filter(id=message_id, status=2).exists()

    @precondition(lambda self: self.deliveries)
    @rule(data=strategies.data())
    def ack(self, data):
        message_id = data.draw(strategies.sampled_from(sorted(self.deliveries)))
        receipt = self.deliveries.pop(message_id)
        assert self.st.ack(QUEUE, message_id, receipt)
        self.acked.add(message_id)
        self.stale.append((message_id, receipt))

    @precondition(lambda self: self.deliveries)
    @rule(data=strategies.data())
    def nack(self, data):
        message_id = data.draw(strategies.sampled_from(sorted(self.deliveries)))
        receipt = self.deliveries.pop(message_id)
        assert self.st.nack(QUEUE, message_id, receipt, self.clock, 5, (1, 1, 1, 1, 1))
        self.clock += 1000  # past the backoff
        self.stale.append((message_id, receipt))

    @precondition(lambda self: self.deliveries)
    @rule()
    def everything_goes_stale(self):
        self.clock += 1000
        self.st.recover_stale(self.clock, 0, 5)
        self.stale.extend(self.deliveries.items())
        self.deliveries.clear()

    @precondition(lambda self: self.stale)
    @rule(data=strategies.data())
    def old_receipts_are_refused(self, data):
        message_id, receipt = data.draw(strategies.sampled_from(self.stale))
        assert not self.st.ack(QUEUE, message_id, receipt)
        assert not self.st.nack(QUEUE, message_id, receipt, self.clock, 5, (1,))

    @invariant()
    def nothing_lost(self):
        in_db = set(Message.objects.filter(queue=QUEUE).values_list("id", flat=True))
        assert in_db | self.acked == set(self.sent)
        assert not (in_db & self.acked)


@pytest.mark.django_db(transaction=True)
def test_store_state_machine():
    QueueMachine.TestCase.settings = settings(
        max_examples=40, stateful_step_count=30, deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    QueueMachine.TestCase().runTest()
