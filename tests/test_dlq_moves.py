"""Dead-letter queues as queues of their own, and message move tasks, through the Python API (on the
store the run uses: SQLite, or PostgreSQL with ``DATABASE_URL``).

A queue's ``dead_letter_queue`` names where its dead letters go (default ``<name>-dlq``); each dead
letter remembers the queue it came from; a move task (``forqapp.start_move``) sends a DLQ's
messages back, or to a destination, in batches run by the ``moves`` job.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connections
from prometheus_client import REGISTRY

import forqapp
from forqapp import errors, services
from forqapp.models import Message, MoveTask
from forqapp.worker import jobs

from .conftest import refused, row

pytestmark = pytest.mark.django_db


def sample(name: str, labels: dict | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def dead_letter(queue: str, content: str = "x") -> str:
    """Send ``content`` to ``queue`` and fail it there; the failed job moves it to its DLQ."""
    forqapp.send(queue, content)
    message = forqapp.receive(queue)
    assert message is not None and message.content == content
    forqapp.fail(message)
    assert jobs.run("failed") >= 1
    return message.id


def run_all() -> int:
    """The moves job until no task is due (each call runs batches for up to a second)."""
    total = 0
    while (n := jobs.run("moves")) or MoveTask.objects.filter(status="RUNNING", next_at__lte=services.now_ms()).exists():
        total += n
    return total


# --- the queue's dead_letter_queue -------------------------------------------------------------


def test_a_queues_dead_letter_queue_is_its_own_dlq_unless_set_to_an_existing_queue():
    forqapp.configure_queue("orders")
    assert forqapp.queue_info("orders").policy["dead_letter_queue"] == "orders-dlq"
    refused(errors.BODY_INVALID, forqapp.configure_queue, "orders", dead_letter_queue="nowhere")
    refused(errors.BODY_INVALID, forqapp.configure_queue, "orders", dead_letter_queue="orders")
    refused(errors.BODY_INVALID, forqapp.configure_queue, "orders", dead_letter_queue="no/slash")
    forqapp.configure_queue("parking")
    info = forqapp.configure_queue("orders", dead_letter_queue="parking")
    assert info.policy["dead_letter_queue"] == "parking" and info.overrides["dead_letter_queue"] == "parking"
    assert services.dead_letter_sources("parking") == ["orders"]
    assert services.dead_letter_sources("orders-dlq") == []
    # Its own <name>-dlq is the default: stored as none set.
    assert "dead_letter_queue" not in forqapp.configure_queue("orders", dead_letter_queue="orders-dlq").overrides
    assert services.dead_letter_sources("orders-dlq") == ["orders"]
    forqapp.configure_queue("orders", dead_letter_queue="parking")
    assert forqapp.configure_queue("orders", dead_letter_queue=None).policy["dead_letter_queue"] == "orders-dlq"


def test_dead_letters_go_to_the_configured_queue_as_ordinary_messages_and_remember_their_source(clock):
    forqapp.configure_queue("parking")
    forqapp.configure_queue("orders", dead_letter_queue="parking", max_attempts=1)
    failed = dead_letter("orders", "failed")  # the failed job's move
    forqapp.send("orders", "used up")  # the claim's redrive: delivered once, then moved by the next claim
    assert forqapp.receive("orders", visibility_timeout=0).content == "used up"
    assert forqapp.receive("orders") is None
    forqapp.send("orders", "expires", retention=1)  # the expired job's move
    clock.advance(2)
    assert jobs.run("expired") == 1
    rows = Message.objects.filter(queue="parking").order_by("sequence")
    assert [(m.content, m.is_dlq, m.dead_letter_source) for m in rows] == [
        ("failed", False, "orders"), ("used up", False, "orders"), ("expires", False, "orders")]
    assert row(failed).failure_reason == "fatal_error"
    assert not Message.objects.filter(queue="orders-dlq").exists()
    # Ordinary messages there: received, acked like any.
    got = forqapp.receive_many("parking", 10)
    assert sorted(m.content for m in got) == ["expires", "failed", "used up"]
    forqapp.ack_many(got)
    assert forqapp.queue_info("parking").counts["ready"] == 0


def test_a_chain_of_dead_letter_queues_and_a_dlq_shared_by_two_queues():
    forqapp.configure_queue("second")
    forqapp.configure_queue("first", dead_letter_queue="second")
    dead_letter("first", "m")
    moved = Message.objects.get(queue="second")
    assert not moved.is_dlq and moved.dead_letter_source == "first"
    forqapp.fail(forqapp.receive("second"))
    jobs.run("failed")
    last = Message.objects.get(queue="second-dlq")  # the second's own DLQ, its source the second
    assert last.is_dlq and last.dead_letter_source == "second"
    # Two queues, one DLQ of the <name>-dlq kind: dead letters there, and a requeue sends each home.
    forqapp.configure_queue("ops")
    forqapp.configure_queue("mail", dead_letter_queue="ops-dlq")
    forqapp.configure_queue("sms", dead_letter_queue="ops-dlq")
    dead_letter("mail", "m1")
    dead_letter("sms", "s1")
    assert sorted(services.dead_letter_sources("ops-dlq")) == ["mail", "ops", "sms"]
    assert sorted((m.content, m.is_dlq) for m in Message.objects.filter(queue="ops-dlq")) == [
        ("m1", True), ("s1", True)]
    assert forqapp.requeue("ops-dlq") == 2
    assert forqapp.receive("mail").content == "m1" and forqapp.receive("sms").content == "s1"


def test_deleting_a_queue_keeps_its_dlqs_messages_and_never_touches_another_queue():
    forqapp.configure_queue("parking")
    forqapp.configure_queue("orders", dead_letter_queue="parking")
    dead_letter("orders", "to parking")
    forqapp.configure_queue("orders", dead_letter_queue=None)
    dead_letter("orders", "to orders-dlq")
    forqapp.send("orders", "live")
    assert forqapp.delete_queue("orders")
    assert not Message.objects.filter(queue="orders").exists()
    assert [m.content for m in Message.objects.filter(queue="parking")] == ["to parking"]
    assert [m.content for m in Message.objects.filter(queue="orders-dlq")] == ["to orders-dlq"]
    assert forqapp.delete_queue("parking")  # the DLQ deleted: the queue that named it keeps working
    forqapp.send("orders", "again")
    assert forqapp.receive("orders").content == "again"


# --- message move tasks ----------------------------------------------------------------------


def test_a_move_without_destination_sends_each_dead_letter_back_to_its_source_queue():
    forqapp.configure_queue("ops")
    for queue in ("mail", "sms"):
        forqapp.configure_queue(queue, dead_letter_queue="ops-dlq")
    for n in range(3):
        dead_letter("mail", f"m{n}")
    dead_letter("sms", "s0")
    before = sample("forq_messages_moved_total")
    task = forqapp.start_move("ops-dlq")
    assert (task.status, task.moved, task.to_move, task.destination, task.source) == ("RUNNING", 0, 4, None, "ops-dlq")
    assert run_all() == 4
    done = forqapp.move_info(task.handle)
    assert (done.status, done.moved) == ("COMPLETED", 4)
    assert sample("forq_messages_moved_total") == before + 4
    assert sorted(m.content for m in forqapp.receive_many("mail", 10)) == ["m0", "m1", "m2"]
    got = forqapp.receive("sms")
    assert got.content == "s0" and got.attempts == 1 and row(got.id).dead_letter_source is None
    assert [t.handle for t in forqapp.list_moves("ops-dlq")] == [task.handle]


def test_a_move_with_a_destination_and_the_old_dlqs_messages_that_know_no_source():
    forqapp.configure_queue("orders")
    forqapp.configure_queue("elsewhere")
    dead_letter("orders", "a")
    Message.objects.filter(queue="orders-dlq").update(dead_letter_source=None)  # dead-lettered before forqapp kept it
    task = forqapp.start_move("orders-dlq")
    run_all()
    assert forqapp.move_info(task.handle).status == "COMPLETED"
    assert forqapp.receive("orders").content == "a"  # a <name>-dlq message goes back to <name>
    dead_letter("orders", "b")
    task = forqapp.start_move("orders-dlq", destination="elsewhere")
    run_all()
    assert forqapp.move_info(task.handle).status == "COMPLETED"
    forqapp.ack(got := forqapp.receive("elsewhere"))
    assert got.content == "b"
    # A queue's own messages (never dead-lettered) have nowhere to go back to: the task fails, saying so.
    forqapp.send("elsewhere", "own")
    failed = forqapp.start_move("elsewhere")
    run_all()
    info = forqapp.move_info(failed.handle)
    assert info.status == "FAILED" and "no source queue" in info.failure_reason
    assert Message.objects.get(queue="elsewhere").content == "own"


def test_a_move_to_a_dlq_with_to_dlq_makes_its_messages_that_dlqs_dead_letters():
    """``to_dlq=True`` (SQS's StartMessageMoveTask passes it): a destination ``<name>-dlq`` takes
    the messages as its own, as ``send_entries(to_dlq=True)`` stores them: ``is_dlq``, expiring
    after ``<name>``'s ``dlq_retention`` (not its ``retention``), no source to go back to."""
    forqapp.configure_queue("orders")
    forqapp.configure_queue("archive", retention=3600, dlq_retention=120)
    dead_letter("orders", "a")
    dead_letter("orders", "b")
    task = forqapp.start_move("orders-dlq", destination="archive-dlq", to_dlq=True)
    assert (task.destination, task.to_move) == ("archive-dlq", 2)
    assert run_all() == 2
    assert forqapp.move_info(task.handle).status == "COMPLETED"
    rows = list(Message.objects.filter(queue="archive-dlq").order_by("content"))
    assert [(m.content, m.is_dlq, m.dead_letter_source, m.attempts) for m in rows] == [
        ("a", True, None, 0), ("b", True, None, 0)]
    for m in rows:
        assert m.expires_after - m.process_after == 120_000  # (process_after: the move's now)
    assert not Message.objects.filter(queue__in=["orders-dlq", "archive"]).exists()
    assert forqapp.queue_info("archive").counts["dlq"] == 2
    # In the DLQ, the dead letters are consumable there and move on as any DLQ's: back to <name>.
    back = forqapp.start_move("archive-dlq")
    assert run_all() == 2 and forqapp.move_info(back.handle).status == "COMPLETED"
    assert sorted(m.content for m in Message.objects.filter(queue="archive", is_dlq=False)) == ["a", "b"]


def test_a_moves_input_is_checked():
    forqapp.configure_queue("q")
    refused(errors.NOT_FOUND_QUEUE, forqapp.start_move, "nothing-dlq")
    refused(errors.NOT_FOUND_QUEUE, forqapp.start_move, "q-dlq", destination="nothing")
    exc = refused(errors.PRODUCE_TO_DLQ, forqapp.start_move, "q", destination="q-dlq")
    assert "to_dlq=True" in str(exc)
    refused(errors.BODY_INVALID, forqapp.start_move, "q-dlq", destination="q-dlq", to_dlq=True)
    refused(errors.BODY_INVALID, forqapp.start_move, "q", destination="q")
    for rate in (0, 501, 1.5, "10", True):
        refused(errors.BODY_INVALID, forqapp.start_move, "q-dlq", rate=rate)
    refused(errors.NOT_FOUND_MOVE, forqapp.move_info, "no-such-task")
    refused(errors.NOT_FOUND_MOVE, forqapp.cancel_move, "no-such-task")
    refused(errors.BODY_INVALID, forqapp.list_moves, "q-dlq", limit=11)


def test_one_running_move_per_source_and_a_cancel_stops_it_between_batches(clock):
    forqapp.configure_queue("q")
    for n in range(5):
        dead_letter("q", f"m{n}")
    task = forqapp.start_move("q-dlq", rate=2)
    refused(errors.MOVE_RUNNING, forqapp.start_move, "q-dlq")
    assert jobs.run("moves") == 2  # the rate's worth; the next batch half a second per message later
    assert jobs.run("moves") == 0
    assert forqapp.move_info(task.handle).moved == 2
    clock.advance(1)
    assert jobs.run("moves") == 2
    cancelled = forqapp.cancel_move(task.handle)
    assert (cancelled.status, cancelled.moved) == ("CANCELLED", 4)
    refused(errors.NOT_FOUND_MOVE, forqapp.cancel_move, task.handle)
    clock.advance(10)
    assert jobs.run("moves") == 0
    assert Message.objects.filter(queue="q-dlq").count() == 1
    again = forqapp.start_move("q-dlq")  # a new task once none runs
    assert again.to_move == 1 and run_all() == 1
    assert [t.status for t in forqapp.list_moves("q-dlq")] == ["COMPLETED", "CANCELLED"]
    assert jobs.run("moves", dry_run=True) == 0


def test_a_message_in_processing_is_never_moved_and_one_whose_lease_ended_is(clock):
    forqapp.configure_queue("q")
    dead_letter("q", "held")
    dead_letter("q", "free")
    held = forqapp.receive("q-dlq", visibility_timeout=30)  # consumable in its DLQ: leased there
    task = forqapp.start_move("q-dlq")
    assert task.to_move == 1
    run_all()
    assert forqapp.move_info(task.handle).status == "COMPLETED"
    assert row(held.id).queue == "q-dlq"
    assert [m.content for m in Message.objects.filter(queue="q")] == ["free" if held.content == "held" else "held"]
    clock.advance(30)  # its lease over, with no stale job run: receivable, so movable
    again = forqapp.start_move("q-dlq")
    assert again.to_move == 1
    run_all()
    assert forqapp.move_info(again.handle).moved == 1 and row(held.id).queue == "q"


@pytest.mark.django_db(transaction=True)
def test_concurrent_runners_move_each_message_once_and_concurrent_starts_make_one_task():
    forqapp.configure_queue("busy")
    forqapp.send_many("busy", [f"m{n}" for n in range(300)])
    Message.objects.filter(queue="busy").update(queue="busy-dlq", is_dlq=True, dead_letter_source="busy")
    started: list = []
    refusals: list = []

    def start() -> None:
        try:
            started.append(forqapp.start_move("busy-dlq"))
        except forqapp.ForqError as exc:
            refusals.append(exc.code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(started) == 1 and refusals == [errors.MOVE_RUNNING] * 3
    moved: list[int] = []

    def runner() -> None:
        try:
            for _ in range(20):
                moved.append(services.run_moves(batch=25))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=runner) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    task = forqapp.move_info(started[0].handle)
    assert (task.status, task.moved, sum(moved)) == ("COMPLETED", 300, 300)
    assert Message.objects.filter(queue="busy").count() == 300 and not Message.objects.filter(queue="busy-dlq").exists()


# --- the UI's redrive: the same move tasks ----------------------------------------------------------


def test_the_dlq_pages_requeue_all_starts_shows_and_cancels_a_move(staff_client, clock):
    forqapp.configure_queue("emails")
    for n in range(3):
        dead_letter("emails", f"m{n}")
    page = staff_client.get("/ui/queues/emails-dlq/")
    assert b"Requeue all" in page.content and b"Message move tasks" not in page.content
    assert b'id="queue-moves"' in page.content  # the card's place, empty until a move starts
    asked = staff_client.post("/ui/queues/emails-dlq/moves/", {"rate": "5"})  # without htmx: a confirmation page
    assert b"Requeue every message of emails-dlq back" in asked.content and not MoveTask.objects.exists()
    assert b'<input type="hidden" name="rate" value="5">' in asked.content  # the rate goes with the confirmation
    done = staff_client.post("/ui/queues/emails-dlq/moves/", {"confirmed": "yes", "rate": "5"})
    assert done.status_code == 302
    (task,) = forqapp.list_moves("emails-dlq")
    assert (task.status, task.to_move, task.rate) == ("RUNNING", 3, 5)
    page = staff_client.get("/ui/queues/emails-dlq/")
    assert b"Message move tasks" in page.content and b"0 of 3" in page.content and b"5/s" in page.content
    assert f"/ui/queues/emails-dlq/moves/{task.handle}/cancel/".encode() in page.content
    again = staff_client.post("/ui/queues/emails-dlq/moves/", {"confirmed": "yes"}, follow=True)
    assert b"has a running move task already" in again.content
    cancel = f"/ui/queues/emails-dlq/moves/{task.handle}/cancel/"
    assert b"Cancel this move? What it moved stays moved." in staff_client.post(cancel).content  # asked first
    assert forqapp.move_info(task.handle).status == "RUNNING"
    cancelled = staff_client.post(cancel, {"confirmed": "yes"}, follow=True)
    assert b"Cancelled the move of emails-dlq: 0 message(s) moved." in cancelled.content
    assert forqapp.move_info(task.handle).status == "CANCELLED"
    gone = staff_client.post(cancel, HTTP_HX_REQUEST="true").content
    assert b"That move task is not running" in gone and b'data-status="CANCELLED"' in gone
    # Started again, the moves job runs it: every dead letter back in emails.
    staff_client.post("/ui/queues/emails-dlq/moves/", {"confirmed": "yes"})
    run_all()
    assert sorted(m.content for m in Message.objects.filter(queue="emails")) == ["m0", "m1", "m2"]
    assert b"3 of 3" in staff_client.get("/ui/queues/emails-dlq/").content
    # Not on a regular queue: no such button, and a post is refused.
    assert b"Requeue all" not in staff_client.get("/ui/queues/emails/").content
    refused_post = staff_client.post("/ui/queues/emails/moves/", {"confirmed": "yes"}, follow=True)
    assert b"for dead-letter queues only" in refused_post.content
    refused_hx = staff_client.post("/ui/queues/emails/moves/", HTTP_HX_REQUEST="true")
    assert b"for dead-letter queues only" in refused_hx.content and refused_hx["HX-Reswap"] == "none"
    # A task is cancelled through its own queue's URL only.
    services.purge("emails")
    dead_letter("emails", "m3")
    staff_client.post("/ui/queues/emails-dlq/moves/", {"confirmed": "yes"})
    (running,) = [t for t in forqapp.list_moves("emails-dlq") if t.running]
    elsewhere = staff_client.post(f"/ui/queues/emails/moves/{running.handle}/cancel/", {"confirmed": "yes"},
                                  follow=True)
    assert b"That move task is not running" in elsewhere.content
    assert forqapp.move_info(running.handle).running


def test_the_admins_policy_form_sets_and_resets_the_dead_letter_queue(staff_client):
    from .test_admin import policy_post

    forqapp.configure_queue("parking")
    forqapp.send("emails", "a")
    html = staff_client.get("/admin/forqapp/queue/emails/change/").content.decode()
    assert 'name="dead_letter_queue"' in html
    data = {**policy_post("emails", dead_letter_queue="parking"), "initial-dead_letter_queue": ""}
    done = staff_client.post("/admin/forqapp/queue/emails/change/", data, follow=True)
    assert b"was changed successfully" in done.content
    assert forqapp.queue_info("emails").policy["dead_letter_queue"] == "parking"
    refused_page = staff_client.post("/admin/forqapp/queue/emails/change/",
                                     {**data, "dead_letter_queue": "nowhere", "initial-dead_letter_queue": "parking"})
    assert b"no queue &#x27;nowhere&#x27;" in refused_page.content or b"no queue 'nowhere'" in refused_page.content
    assert forqapp.queue_info("emails").policy["dead_letter_queue"] == "parking"
    staff_client.post("/admin/forqapp/queue/emails/change/",
                      {**data, "dead_letter_queue": "", "initial-dead_letter_queue": "parking"})
    assert forqapp.queue_info("emails").policy["dead_letter_queue"] == "emails-dlq"
