"""The v2 HTTP API's part of issue 13, against a real server (``live_api``: forq_serve): defer with
saved state by receipt, the queue policy's flow control (``max_in_flight``, ``rate``), and
schedules (list, get, put, delete, run now). Runs on SQLite and on PostgreSQL
(``DATABASE_URL=postgres://…``).

Each test's queues are new to the server: a policy set through the API is in force at once in the
process that set it, and the others have not read (cached) it yet.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

import forqapp
from forqapp import errors, services
from forqapp.models import Message, Status
from forqapp.services import schedules

from .test_api_v2 import MID, call, near, receive, refused, send
from .test_hostile import APP_SECRET

pytestmark = pytest.mark.django_db(transaction=True)


def deliver(live_api, queue: str, **fields) -> dict:
    """The one message a receive gets."""
    (got,) = receive(live_api, queue, **fields)
    return got


def defer(live_api, queue: str, message: dict, **fields):
    return call(live_api, "POST", f"/queues/{queue}/messages/{message['id']}/defer",
                {"receipt": message["receipt"], **fields})


# --- defer with saved state -------------------------------------------------------------------------


def test_defer_keeps_id_and_attempts_and_hands_the_state_to_the_next_receive(live_api):
    q = "v2f-defer"
    sent = send(live_api, q, "import rows.csv").json()
    first = deliver(live_api, q)
    assert (first["attempts"], first["state"]) == (1, None)

    response = defer(live_api, q, first, state='{"rows": 1000}')
    assert response.status_code == 204 and response.content == b""
    row = Message.objects.get(id=sent["id"])
    assert (row.status, row.attempts, row.state) == (Status.READY, 1, '{"rows": 1000}')

    second = deliver(live_api, q)
    assert (second["id"], second["content"], second["attempts"]) == (sent["id"], "import rows.csv", 2)
    assert second["state"] == '{"rows": 1000}' and second["receipt"] != first["receipt"]
    assert second["first_received_at"] == first["first_received_at"]

    assert defer(live_api, q, second).status_code == 204  # no state: the saved one is kept
    third = deliver(live_api, q)
    assert (third["attempts"], third["state"]) == (3, '{"rows": 1000}')
    assert defer(live_api, q, third, state="").status_code == 204  # a new state replaces it, "" too
    fourth = deliver(live_api, q)
    assert fourth["state"] == ""
    ack = call(live_api, "POST", f"/queues/{q}/messages/{fourth['id']}/ack", {"receipt": fourth["receipt"]})
    assert ack.status_code == 204


def test_peek_and_get_show_the_state(live_api):
    q = "v2f-peek"
    send(live_api, q)
    got = deliver(live_api, q)
    assert call(live_api, "GET", f"/queues/{q}/peek").json() == {"message": None}  # leased
    defer(live_api, q, got, state="step 2")
    peeked = call(live_api, "GET", f"/queues/{q}/peek").json()["message"]
    assert (peeked["id"], peeked["state"], peeked["receipt"], peeked["lease_expires_at"]) == (
        got["id"], "step 2", None, None)
    assert call(live_api, "GET", f"/queues/{q}/messages/{got['id']}").json() == {
        **peeked, "failure_reason": None, "last_error": None}


def test_a_deferred_message_goes_behind_the_others_of_its_priority(live_api):
    q = "v2f-behind"
    send(live_api, q, "a")
    send(live_api, q, "b")
    a = deliver(live_api, q)
    assert a["content"] == "a"
    assert defer(live_api, q, a, state="half").status_code == 204
    assert [m["content"] for m in receive(live_api, q, max_messages=10)] == ["b", "a"]  # the others get a turn
    again = call(live_api, "GET", f"/queues/{q}/messages/{a['id']}").json()
    assert again["sequence"] > a["sequence"]  # a new place in the queue, the same message


def test_defer_with_a_delay(live_api):
    q = "v2f-delay"
    send(live_api, q)
    got = deliver(live_api, q)
    before = services.now_ms()
    assert defer(live_api, q, got, delay=1, state="later").status_code == 204
    assert near(Message.objects.get(id=got["id"]).process_after, before + 1000, 500)
    assert receive(live_api, q) == []
    start = time.monotonic()
    again = deliver(live_api, q, wait=2)  # the long poll wakes when it is due (before its 2 s end)
    assert (again["id"], again["state"], again["attempts"]) == (got["id"], "later", 2)
    assert 0.3 < time.monotonic() - start


def test_a_stale_receipt_defers_nothing(live_api):
    q = "v2f-stale"
    send(live_api, q)
    first = deliver(live_api, q, visibility_timeout=1)
    time.sleep(1.2)
    second = deliver(live_api, q, visibility_timeout=60)  # the lease ended: received again
    refused(defer(live_api, q, first, state="stale"), 404, errors.NOT_FOUND_MESSAGE)
    row = Message.objects.get(id=first["id"])
    assert (row.status, row.attempts, row.state) == (Status.PROCESSING, 2, None)

    assert defer(live_api, q, second, state="fresh").status_code == 204
    refused(defer(live_api, q, second, state="twice"), 404, errors.NOT_FOUND_MESSAGE)  # settled already
    refused(call(live_api, "POST", f"/queues/{q}/messages/{second['id']}/ack", {"receipt": second["receipt"]}),
            404, errors.NOT_FOUND_MESSAGE)
    assert Message.objects.get(id=first["id"]).state == "fresh"
    refused(call(live_api, "POST", f"/queues/other-{q}/messages/{second['id']}/defer",
                 {"receipt": second["receipt"]}), 404, errors.NOT_FOUND_MESSAGE)


def test_a_deferred_message_keeps_its_last_state_in_the_dlq(live_api):
    q = "v2f-dead"
    forqapp.configure_queue(q, max_attempts=2)
    send(live_api, q)
    first = deliver(live_api, q)
    defer(live_api, q, first, state="slice 1 done")
    second = deliver(live_api, q)
    nack = call(live_api, "POST", f"/queues/{q}/messages/{second['id']}/nack", {"receipt": second["receipt"],
                                                                                  "error": "gave up"})
    assert nack.status_code == 204  # out of attempts: failed, then moved by the DLQ job
    services.move_failed_to_dlq()
    dead = call(live_api, "GET", f"/queues/{q}-dlq/messages/{first['id']}").json()
    assert (dead["id"], dead["state"]) == (first["id"], "slice 1 done")
    assert Message.objects.get(id=first["id"]).last_error == "gave up"


@pytest.mark.parametrize(("fields", "status", "code"), [
    ({"delay": -1}, 400, errors.BODY_INVALID),
    ({"delay": "5"}, 400, errors.BODY_INVALID),
    ({"delay": True}, 400, errors.BODY_INVALID),
    ({"delay": 10**400}, 400, errors.BODY_INVALID),
    ({"delay": 31_622_401}, 400, errors.BODY_INVALID),  # over FORQ_PROCESS_AFTER_MAX_MS
    ({"state": 5}, 400, errors.BODY_INVALID),
    ({"state": {"rows": 1}}, 400, errors.BODY_INVALID),  # JSON-encode it
    ({"state": "x" * 262_145}, 400, errors.CONTENT_EXCEEDS_LIMIT),
    ({"status": "later"}, 400, errors.BODY_INVALID),
    ({"receipt": None}, 400, errors.RECEIPT_MISSING),
    ({"receipt": "abc"}, 400, errors.RECEIPT_INVALID),
])
def test_a_bad_defer_is_refused_and_changes_nothing(live_api, fields, status, code):
    q = "v2f-bad"
    send(live_api, q)
    got = deliver(live_api, q, visibility_timeout=60)
    refused(defer(live_api, q, got, **fields), status, code)
    row = Message.objects.get(id=got["id"])
    assert (row.status, row.attempts, row.state) == (Status.PROCESSING, 1, None)


def test_defer_refuses_raw_bodies_that_are_no_json_object(live_api):
    send(live_api, "v2f-raw")
    got = deliver(live_api, "v2f-raw")
    path = f"/queues/v2f-raw/messages/{got['id']}/defer"
    for raw in (b"", b"{", b"[]", b'{"receipt": "1", "delay": 1e999}', b'{"receipt": "1", "state": "\\ud800"}',
                b'{"receipt": "1", "delay": NaN}'):
        refused(call(live_api, "POST", path, raw), 400, errors.BODY_INVALID)
    refused(call(live_api, "POST", "/queues/v2f-raw/messages/nope/defer", {"receipt": "1"}),
            400, errors.MESSAGE_ID_INVALID)
    refused(call(live_api, "POST", f"/queues/bad%20name/messages/{MID}/defer", {"receipt": "1"}),
            400, errors.QUEUE_INVALID_NAME)
    wrong = call(live_api, "GET", path)  # refused from the headers alone: {"code"}, as documented
    assert (wrong.status_code, wrong.json()["code"], wrong.headers["allow"]) == (405, errors.METHOD_NOT_ALLOWED, "POST")


def test_a_nul_in_the_state_is_kept_where_the_database_can_store_it(live_api):
    q = "v2f-nul"
    send(live_api, q)
    got = deliver(live_api, q)
    response = defer(live_api, q, got, state="a\x00b")
    if connection.vendor == "postgresql":  # PostgreSQL's text holds no NUL
        refused(response, 400, errors.BODY_INVALID)
        assert Message.objects.get(id=got["id"]).status == Status.PROCESSING
    else:
        assert response.status_code == 204
        assert deliver(live_api, q)["state"] == "a\x00b"


# --- flow control: max_in_flight and rate in the queue's policy -----------------------------------------


def test_max_in_flight_set_by_put_holds_receives_until_an_ack(live_api):
    q = "v2f-cap"
    put = call(live_api, "PUT", f"/queues/{q}", {"max_in_flight": 1})
    assert put.status_code == 200, put.text
    assert put.json()["overrides"] == {"max_in_flight": 1} and put.json()["policy"]["max_in_flight"] == 1
    for i in range(3):
        send(live_api, q, f"m{i}")
    first = receive(live_api, q, max_messages=10)
    assert [m["content"] for m in first] == ["m0"]  # one slot: one message, however many were asked
    assert receive(live_api, q, max_messages=10) == []
    assert call(live_api, "GET", f"/queues/{q}").json()["counts"]["in_flight"] == 1

    got: list = []
    poller = threading.Thread(target=lambda: got.append(receive(live_api, q, wait=2)))
    poller.start()
    time.sleep(0.3)
    acked_at = time.monotonic()
    ack = call(live_api, "POST", f"/queues/{q}/messages/{first[0]['id']}/ack", {"receipt": first[0]["receipt"]})
    assert ack.status_code == 204
    poller.join(5)
    assert [m["content"] for m in got[0]] == ["m1"]  # the waiting receive was woken by the freed slot
    assert time.monotonic() - acked_at < 5  # (before its 2 s wait ended: the answer says so)

    assert defer(live_api, q, got[0][0], delay=600).status_code == 204  # a defer frees the slot too
    assert [m["content"] for m in receive(live_api, q)] == ["m2"]


def test_an_expired_lease_frees_its_slot(live_api):
    q = "v2f-expired"
    call(live_api, "PATCH", f"/queues/{q}", {"max_in_flight": 1})
    send(live_api, q, "a")
    send(live_api, q, "b")
    first = deliver(live_api, q, visibility_timeout=1)
    assert receive(live_api, q) == []
    time.sleep(1.2)
    again = deliver(live_api, q)  # the crashed consumer's slot is free: a receive takes the oldest
    assert (again["id"], again["attempts"]) == (first["id"], 2)


def test_a_rate_set_by_patch_spaces_receives(live_api):
    q = "v2f-rate"
    patched = call(live_api, "PATCH", f"/queues/{q}", {"rate": 1})  # a minimum interval of 1 s
    assert patched.status_code == 200, patched.text
    assert patched.json()["overrides"] == {"rate": "1/1s"} and patched.json()["policy"]["rate"] == "1/1s"
    for i in range(3):
        send(live_api, q, f"m{i}")
    assert [m["content"] for m in receive(live_api, q, max_messages=10)] == ["m0"]  # one per slot
    assert receive(live_api, q) == []
    start = time.monotonic()
    assert [m["content"] for m in receive(live_api, q, wait=2)] == ["m1"]  # woken at the next slot, before 2 s
    assert 0.5 < time.monotonic() - start

    assert call(live_api, "PATCH", f"/queues/{q}", {"rate": "600/m"}).json()["policy"]["rate"] == "600/m"
    reset = call(live_api, "PATCH", f"/queues/{q}", {"rate": None, "max_in_flight": None}).json()
    assert reset["overrides"] == {} and (reset["policy"]["rate"], reset["policy"]["max_in_flight"]) == (None, None)


def test_put_sets_both_limits_and_put_again_resets_them(live_api):
    q = "v2f-both"
    both = call(live_api, "PUT", f"/queues/{q}", {"max_in_flight": 4, "rate": "10/s", "max_attempts": 8}).json()
    assert both["overrides"] == {"max_in_flight": 4, "rate": "10/s", "max_attempts": 8}
    assert call(live_api, "GET", f"/queues/{q}").json() == both
    listed = {info["name"]: info for info in call(live_api, "GET", "/queues").json()["queues"]}
    assert (listed[q]["policy"]["max_in_flight"], listed[q]["policy"]["rate"]) == (4, "10/s")
    replaced = call(live_api, "PUT", f"/queues/{q}", {"max_attempts": 8}).json()  # PUT: the limits reset
    assert replaced["overrides"] == {"max_attempts": 8} and replaced["policy"]["rate"] is None


@pytest.mark.parametrize("body", [
    {"max_in_flight": 0}, {"max_in_flight": -1}, {"max_in_flight": 1.5}, {"max_in_flight": "2"},
    {"max_in_flight": True}, {"max_in_flight": 1_000_001}, {"max_in_flight": 10**400},
    {"rate": "0/s"}, {"rate": "10/x"}, {"rate": "10 per second"}, {"rate": 0}, {"rate": -1}, {"rate": True},
    {"rate": 86_401}, {"rate": "1000001/s"}, {"rate": []}, {"rate": ""},
])
def test_bad_limits_are_400_and_change_nothing(live_api, body):
    for method in ("PUT", "PATCH"):
        refused(call(live_api, method, "/queues/v2f-bad-limit", body), 400, errors.BODY_INVALID)
    refused(call(live_api, "GET", "/queues/v2f-bad-limit"), 404, errors.NOT_FOUND_QUEUE)


def test_a_non_finite_rate_is_400(live_api):
    for raw in (b'{"rate": 1e999}', b'{"rate": NaN}', b'{"rate": -Infinity}'):
        refused(call(live_api, "PATCH", "/queues/v2f-inf-rate", raw), 400, errors.BODY_INVALID)


# --- schedules ------------------------------------------------------------------------------------


SCHEDULE_KEYS = {"name", "queue", "content", "cron", "every", "catch_up", "priority", "attributes", "paused",
                 "next_run_at", "last_run_at"}


def test_schedules_put_get_list_delete(live_api):
    assert call(live_api, "GET", "/schedules").json() == {"schedules": []}

    nightly = call(live_api, "PUT", "/schedules/nightly-report", {"queue": "reports", "content": "{}",
                                                                  "cron": "0 3 * * *"})
    assert nightly.status_code == 200, nightly.text
    body = nightly.json()
    assert set(body) == SCHEDULE_KEYS
    assert body == {**body, "name": "nightly-report", "queue": "reports", "content": "{}", "cron": "0 3 * * *",
                    "every": None, "catch_up": "one", "priority": 0, "attributes": {}, "paused": False,
                    "last_run_at": None}
    assert services.now_ms() < body["next_run_at"] <= services.now_ms() + 86_400_000
    assert schedules.get("nightly-report").json() == body  # the Python API sees the same schedule

    before = services.now_ms()
    heartbeat = call(live_api, "PUT", "/schedules/heartbeat", {
        "queue": "pings", "content": "ping", "every": 300, "catch_up": "skip", "priority": 5,
        "attributes": {"source": "scheduler"}, "paused": True, "cron": None}).json()
    assert (heartbeat["every"], heartbeat["cron"], heartbeat["catch_up"], heartbeat["priority"]) == (300, None, "skip", 5)
    assert heartbeat["attributes"] == {"source": "scheduler"} and heartbeat["paused"] is True
    assert near(heartbeat["next_run_at"], before + 300_000)

    listed = call(live_api, "GET", "/schedules").json()["schedules"]
    assert [s["name"] for s in listed] == ["heartbeat", "nightly-report"]
    assert listed == [heartbeat, body]
    assert call(live_api, "GET", "/schedules/heartbeat").json() == heartbeat

    # PUT replaces the whole schedule; unchanged timing keeps the next tick, a new one moves it.
    kept = call(live_api, "PUT", "/schedules/heartbeat", {"queue": "pings", "content": "pong", "every": 300}).json()
    assert (kept["content"], kept["next_run_at"]) == ("pong", heartbeat["next_run_at"])
    assert (kept["priority"], kept["attributes"], kept["paused"], kept["catch_up"]) == (0, {}, False, "one")
    moved = call(live_api, "PUT", "/schedules/heartbeat", {"queue": "pings", "content": "pong", "every": 60}).json()
    assert moved["every"] == 60 and moved["next_run_at"] < kept["next_run_at"]

    deleted = call(live_api, "DELETE", "/schedules/heartbeat")
    assert deleted.status_code == 204 and deleted.content == b""
    refused(call(live_api, "GET", "/schedules/heartbeat"), 404, errors.NOT_FOUND_SCHEDULE)
    refused(call(live_api, "DELETE", "/schedules/heartbeat"), 404, errors.NOT_FOUND_SCHEDULE)
    assert [s["name"] for s in call(live_api, "GET", "/schedules").json()["schedules"]] == ["nightly-report"]


def test_run_now_sends_the_schedules_message(live_api):
    put = call(live_api, "PUT", "/schedules/report-now", {"queue": "v2f-reports", "content": '{"kind": "daily"}',
                                                          "cron": "0 3 * * *", "priority": 7,
                                                          "attributes": {"source": "api"}, "paused": True})
    refused(call(live_api, "POST", "/schedules/report-now/run", {"x": 1}), 400, errors.BODY_INVALID)  # no field
    ran = call(live_api, "POST", "/schedules/report-now/run")
    assert ran.status_code == 201, ran.text
    message_id = ran.json()["id"]
    assert set(ran.json()) == {"id"}
    assert ran.headers["location"] == f"/api/v2/queues/v2f-reports/messages/{message_id}"
    shown = live_api.client.get(ran.headers["location"]).json()
    assert (shown["content"], shown["priority"], shown["attributes"]) == ('{"kind": "daily"}', 7, {"source": "api"})
    got = deliver(live_api, "v2f-reports")
    assert got["id"] == message_id
    after = call(live_api, "GET", "/schedules/report-now").json()
    assert after["next_run_at"] == put.json()["next_run_at"]  # its ticks are unchanged
    assert call(live_api, "POST", "/schedules/report-now/run", {}).json()["id"] != message_id  # each run: a message
    refused(call(live_api, "POST", "/schedules/nothing-here/run"), 404, errors.NOT_FOUND_SCHEDULE)


def test_run_now_on_a_full_queue_is_503(live_api):
    forqapp.configure_queue("v2f-full", max_length=1)
    call(live_api, "PUT", "/schedules/filler", {"queue": "v2f-full", "content": "x", "every": 60})
    assert call(live_api, "POST", "/schedules/filler/run").status_code == 201
    refused(call(live_api, "POST", "/schedules/filler/run"), 503, errors.QUEUE_FULL)
    assert Message.objects.filter(queue="v2f-full").count() == 1


def test_a_schedule_put_over_http_ticks_once(live_api):
    call(live_api, "PUT", "/schedules/every-second", {"queue": "v2f-ticks", "content": "tick", "every": 1})
    time.sleep(1.1)
    assert schedules.run_due() == 1  # the jobs scheduler's run (live_api runs no jobs)
    assert schedules.run_due() == 0  # the tick moved on: nothing twice
    (got,) = receive(live_api, "v2f-ticks")
    assert got["content"] == "tick" and got["dedup_id"].startswith("schedule:every-second:")
    assert call(live_api, "GET", "/schedules/every-second").json()["last_run_at"] is not None


VALID = {"queue": "q", "content": "x", "every": 60}


@pytest.mark.parametrize(("body", "code"), [
    ({"content": "x", "every": 60}, errors.BODY_INVALID),  # no queue
    ({"queue": "q", "every": 60}, errors.BODY_INVALID),  # no content
    ({"queue": "q", "content": "x"}, errors.BODY_INVALID),  # neither cron nor every
    ({**VALID, "cron": "* * * * *"}, errors.BODY_INVALID),  # both
    ({**VALID, "name": "other"}, errors.BODY_INVALID),  # the name is the path's
    ({**VALID, "evry": 60}, errors.BODY_INVALID),
    ({**VALID, "every": 0}, errors.BODY_INVALID),
    ({**VALID, "every": 0.5}, errors.BODY_INVALID),
    ({**VALID, "every": "60"}, errors.BODY_INVALID),
    ({**VALID, "every": True}, errors.BODY_INVALID),
    ({**VALID, "every": 10**400}, errors.BODY_INVALID),
    ({**VALID, "every": 366 * 86_400 + 1}, errors.BODY_INVALID),
    ({"queue": "q", "content": "x", "cron": "every day"}, errors.BODY_INVALID),
    ({"queue": "q", "content": "x", "cron": "0 0 31 2 *"}, errors.BODY_INVALID),  # never ticks
    ({"queue": "q", "content": "x", "cron": "* * * * \x00"}, errors.BODY_INVALID),
    ({"queue": "q", "content": "x", "cron": "* " * 101}, errors.BODY_INVALID),
    ({"queue": "q", "content": "x", "cron": 5}, errors.BODY_INVALID),
    ({**VALID, "catch_up": "sometimes"}, errors.BODY_INVALID),
    ({**VALID, "catch_up": []}, errors.BODY_INVALID),
    ({**VALID, "priority": 10**30}, errors.BODY_INVALID),
    ({**VALID, "priority": 1.5}, errors.BODY_INVALID),
    ({**VALID, "attributes": ["k", "v"]}, errors.BODY_INVALID),
    ({**VALID, "attributes": {"k": 1}}, errors.BODY_INVALID),
    ({**VALID, "paused": "yes"}, errors.BODY_INVALID),
    ({**VALID, "queue": "q-dlq"}, errors.PRODUCE_TO_DLQ),
    ({**VALID, "queue": "bad name"}, errors.QUEUE_INVALID_NAME),
    ({**VALID, "queue": ["q"]}, errors.QUEUE_INVALID_NAME),
    ({**VALID, "content": 1}, errors.BODY_INVALID),
    ({**VALID, "content": "x" * 262_145}, errors.CONTENT_EXCEEDS_LIMIT),
    ([], errors.BODY_INVALID),
    ("x", errors.BODY_INVALID),
])
def test_a_bad_schedule_is_400_and_creates_nothing(live_api, body, code):
    refused(call(live_api, "PUT", "/schedules/bad", body), 400, code)
    refused(call(live_api, "GET", "/schedules/bad"), 404, errors.NOT_FOUND_SCHEDULE)


def test_a_bad_schedule_leaves_the_old_one_as_it_was(live_api):
    old = call(live_api, "PUT", "/schedules/keep", VALID).json()
    refused(call(live_api, "PUT", "/schedules/keep", {**VALID, "every": -1}), 400, errors.BODY_INVALID)
    assert call(live_api, "GET", "/schedules/keep").json() == old


@pytest.mark.parametrize("raw", [b"", b"{", b"[1]", b"\xff", b'{"queue": "q", "content": "x", "every": 1e999}',
                                 b'{"queue": "q", "content": "x", "every": NaN}',
                                 b'{"queue": "q", "content": "\\ud800", "every": 60}'])
def test_a_schedule_body_that_is_no_valid_json_object_is_400(live_api, raw):
    refused(call(live_api, "PUT", "/schedules/raw", raw), 400, errors.BODY_INVALID)


@pytest.mark.parametrize("name", ["a%20b", "x" * 101, "%00", "%C3%A9", "a%2A"])
def test_a_name_no_schedule_can_bear(live_api, name):
    refused(call(live_api, "PUT", f"/schedules/{name}", VALID), 400, errors.BODY_INVALID)
    refused(call(live_api, "GET", f"/schedules/{name}"), 404, errors.NOT_FOUND_SCHEDULE)
    refused(call(live_api, "DELETE", f"/schedules/{name}"), 404, errors.NOT_FOUND_SCHEDULE)
    refused(call(live_api, "POST", f"/schedules/{name}/run"), 404, errors.NOT_FOUND_SCHEDULE)
    assert call(live_api, "GET", "/schedules").json() == {"schedules": []}


def test_the_longest_name_and_every_allowed_character(live_api):
    for name in ("x" * 100, "Az09._:-"):
        assert call(live_api, "PUT", f"/schedules/{name}", VALID).json()["name"] == name
        assert call(live_api, "POST", f"/schedules/{name}/run").status_code == 201


def test_a_nul_in_a_schedules_content_is_kept_where_the_database_can_store_it(live_api):
    response = call(live_api, "PUT", "/schedules/nul", {"queue": "v2f-nul-s", "content": "a\x00b", "every": 60})
    if connection.vendor == "postgresql":
        refused(response, 400, errors.BODY_INVALID)
        refused(call(live_api, "GET", "/schedules/nul"), 404, errors.NOT_FOUND_SCHEDULE)
    else:
        assert response.status_code == 200 and response.json()["content"] == "a\x00b"


def test_schedule_routes_answer_405_with_allow_and_need_the_key(live_api):
    for method, path, allow in [("POST", "/schedules", "GET"), ("PATCH", "/schedules/s", "GET, PUT, DELETE"),
                                ("POST", "/schedules/s", "GET, PUT, DELETE"), ("GET", "/schedules/s/run", "POST"),
                                ("GET", f"/queues/q/messages/{MID}/defer", "POST")]:
        response = call(live_api, method, path)
        assert (response.status_code, response.json()["code"]) == (405, errors.METHOD_NOT_ALLOWED), (method, path)
        assert response.headers["allow"] == allow
    for method, path in [("GET", "/schedules"), ("PUT", "/schedules/s"), ("POST", "/schedules/s/run"),
                         ("POST", f"/queues/q/messages/{MID}/defer")]:
        response = call(live_api, method, path, VALID, headers={"X-API-Key": "wrong"})
        assert (response.status_code, response.json()["code"]) == (401, errors.UNAUTHORIZED)
    refused(call(live_api, "GET", "/schedules/s/x"), 404, errors.NOT_FOUND_ROUTE)
    assert call(live_api, "GET", "/schedules").json() == {"schedules": []}


def test_under_django_schedules_and_defer_answer_the_same(client):
    client.defaults["HTTP_X_API_KEY"] = APP_SECRET
    put = client.put("/api/v2/schedules/dj", {"queue": "dj-s", "content": "x", "every": 60},
                     content_type="application/json")
    assert put.status_code == 200 and put.json()["every"] == 60
    ran = client.post("/api/v2/schedules/dj/run")
    assert ran.status_code == 201 and ran["Location"] == f"/api/v2/queues/dj-s/messages/{ran.json()['id']}"
    got = client.post("/api/v2/queues/dj-s/receive", {}, content_type="application/json").json()["messages"][0]
    deferred = client.post(f"/api/v2/queues/dj-s/messages/{got['id']}/defer", {"receipt": got["receipt"], "state": "s"},
                           content_type="application/json")
    assert deferred.status_code == 204
    again = client.post("/api/v2/queues/dj-s/receive", {}, content_type="application/json").json()["messages"][0]
    assert (again["id"], again["state"], again["attempts"]) == (got["id"], "s", 2)
    assert client.delete("/api/v2/schedules/dj").status_code == 204
    gone = client.get("/api/v2/schedules/dj")
    assert (gone.status_code, gone.json()["code"]) == (404, errors.NOT_FOUND_SCHEDULE)
