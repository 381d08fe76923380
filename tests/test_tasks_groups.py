"""Django Tasks in message groups (forqapp.tasks.group_by): each call of a task goes into the group
its arguments name, and the queue's group policy applies per group. Runs on Django 5.2
(django-tasks) and on Django 6.0 (django.tasks: scripts/test-django6.sh)."""

from __future__ import annotations

import pytest

from forqapp import services
from forqapp.models import Message
from forqapp.tasks import group_by
from forqapp.tasks.compat import InvalidTaskError
from forqapp.tasks.discovery import with_consumers
from forqapp.worker.runner import Worker
from tests.tasksapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_calls():
    tasks.CALLS.clear()
    yield


def group_of(result) -> str | None:
    return Message.objects.get(id=result.id).group


def test_the_group_comes_from_the_named_argument_positional_or_keyword():
    assert group_of(tasks.bill.enqueue(42, "inv-1")) == "42"
    assert group_of(tasks.bill.enqueue(customer_id="acme", invoice="inv-2")) == "acme"
    assert group_of(tasks.bill.enqueue(None, "inv-3")) is None  # None: no group
    assert group_of(tasks.bill.using(priority=3).enqueue(7, "inv-4")) == "7"  # using() keeps the rule


def test_a_function_names_the_group_and_forq_task_takes_group_by():
    assert group_of(tasks.mail_tenant.enqueue("t1", subject="hi")) == "tenant:t1"
    assert group_of(tasks.send_invoice.enqueue(5, invoice_id=9)) == "customer-5"
    assert group_of(tasks.send_invoice.enqueue(6, 10)) == "customer-6"


def test_a_group_function_that_does_not_take_the_call_is_refused_at_enqueue_and_nothing_is_sent():
    # mail_tenant's function takes (tenant, **kwargs): the subject given by position does not fit it
    with pytest.raises(InvalidTaskError, match="does not take the task's arguments"):
        tasks.mail_tenant.enqueue("t1", "hi")
    assert not Message.objects.exists()


def test_a_task_taking_its_context_is_grouped_by_its_own_arguments():
    assert group_of(tasks.with_context_grouped.enqueue(account="a-1")) == "a-1"
    assert group_of(tasks.with_context_grouped.enqueue()) is None  # the default (None): no group


def test_a_group_that_is_not_one_is_refused_at_enqueue_and_nothing_is_sent():
    with pytest.raises(InvalidTaskError, match="group"):
        tasks.bill.enqueue("no spaces allowed", "inv")
    with pytest.raises(InvalidTaskError, match="a group is a string or an integer"):
        tasks.bill.enqueue(["a list"], "inv")
    with pytest.raises(InvalidTaskError, match="do not fit"):
        tasks.bill.enqueue()
    assert not Message.objects.exists()


def test_group_by_a_parameter_the_function_lacks_is_refused_where_it_is_defined():
    def send(user_id): ...

    with pytest.raises(TypeError, match="no parameter 'customer_id'"):
        group_by("customer_id")(send)
    with pytest.raises(TypeError, match="a parameter's name or a function"):
        group_by(3)  # type: ignore[arg-type]


def test_one_task_per_customer_at_a_time():
    services.configure_queue("tasks-other", group_concurrency=1)
    for invoice in range(3):
        tasks.bill.enqueue(1, f"a{invoice}")
        tasks.bill.enqueue(2, f"b{invoice}")
    first = services.receive_many("tasks-other", 10)
    assert sorted(m.group for m in first) == ["1", "2"]  # one of each customer, not six
    assert services.receive_many("tasks-other", 10) == []
    services.ack(first[0])
    again = services.receive_many("tasks-other", 10)
    assert [m.group for m in again] == [first[0].group]


def test_the_worker_runs_every_grouped_task_in_order_per_customer():
    services.configure_queue("tasks-other", group_concurrency=1)
    for invoice in range(4):
        for customer in (1, 2, 3):
            tasks.bill.enqueue(customer, f"{customer}-{invoice}")
    Worker(with_consumers({}), concurrency=4, prefetch=10, burst=True).run()
    runs = [fields for event, fields in tasks.CALLS if event == "bill"]
    assert len(runs) == 12
    for customer in (1, 2, 3):
        assert [r["invoice"] for r in runs if r["customer_id"] == customer] == [f"{customer}-{i}" for i in range(4)]
