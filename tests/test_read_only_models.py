"""The persistence rule in code: forqapp's own modules never write the queue's tables through the
ORM (the store's SQL does, through the services); a write from forqapp's code raises at once. A
project's code — here, a test arranging rows — still may."""

from __future__ import annotations

import pytest

import forqapp
from forqapp.models import Message, Queue, ReadOnlyError, Schedule

pytestmark = pytest.mark.django_db

WRITES = {
    "update": "Message.objects.filter(queue='ro').update(attempts=7)",
    "delete": "Queue.objects.filter(name='ro').delete()",
    "create": "Schedule.objects.create(name='ro', queue='ro', content='x', every_ms=1000, catch_up='one', "
              "priority=0, paused=False, next_run_at=0, created_at=0, updated_at=0)",
    "save": "row = Queue.objects.get(name='ro'); row.paused = True; row.save()",
    "instance delete": "Message.objects.get(queue='ro').delete()",
}


def _run(code: str, module: str) -> None:
    exec(compile(code, f"<{module}>", "exec"), {"__name__": module, "Message": Message, "Queue": Queue,  # noqa: S102
                                               "Schedule": Schedule})


@pytest.mark.parametrize("write", WRITES)
def test_a_write_through_the_orm_from_forqapp_code_raises(write):
    forqapp.send("ro", "x")
    with pytest.raises(ReadOnlyError, match=r"forqapp\.ui\.fake wrote \w+ through the ORM"):
        _run(WRITES[write], "forqapp.ui.fake")
    assert Message.objects.get(queue="ro").attempts == 0  # nothing was written
    assert Queue.objects.filter(name="ro").exists()
    assert not Queue.objects.get(name="ro").paused


@pytest.mark.parametrize("write", WRITES)
def test_a_projects_own_code_may_write(write):
    forqapp.send("ro", "x")
    _run(WRITES[write], "myproject.maintenance")
