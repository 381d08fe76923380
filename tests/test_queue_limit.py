"""``FORQ_MAX_QUEUES``: how many queues may exist. Creating one more is refused on every face that
creates queues — a send to a new name on v1 and v2, v2's PUT, SQS ``CreateQueue`` and
``SendMessage``, the Python API, the tasks backend, the admin — with a clear error and nothing
written; two processes racing for the last place never both get it. A queue and its DLQ are one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from django.test import override_settings

import forqapp
from forqapp import errors, services
from forqapp.errors import ForqError
from forqapp.models import Message, Queue
from tests.conftest import ROOT, refused, subprocess_env
from tests.test_fastpath import KEY, _run, _scope, apps, sqs  # noqa: F401 - apps: a fixture

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 3


@pytest.fixture
def full():
    """LIMIT queues exist (one of them with dead letters), and FORQ_MAX_QUEUES is LIMIT."""
    with override_settings(FORQ_MAX_QUEUES=LIMIT):
        forqapp.send("q1", "a")
        forqapp.configure_queue("q2", max_attempts=1)
        forqapp.send("q3", "c")
        forqapp.send("q2", "b")
        message = forqapp.receive("q2")
        assert message is not None
        forqapp.nack(message)  # out of attempts: failed, then to q2-dlq
        assert services.move_failed_to_dlq() == 1
        assert Queue.objects.count() == LIMIT
        yield


def _count_unchanged() -> None:
    assert sorted(Queue.objects.values_list("name", flat=True)) == ["q1", "q2", "q3"]
    assert not Message.objects.exclude(queue__in=["q1", "q2", "q3", "q2-dlq"]).exists()


def test_the_python_api_refuses_a_new_queue_past_the_limit_and_keeps_serving_the_others(full):
    for call in (lambda: forqapp.send("q4", "x"), lambda: forqapp.send_many("q4", ["x", "y"]),
                 lambda: forqapp.send("q4", "x", dedup_id="d"), lambda: forqapp.configure_queue("q4", max_attempts=2)):
        caught = refused(errors.QUEUE_LIMIT, call)
        assert caught.status == 409 and "FORQ_MAX_QUEUES" in str(caught)
    services.stage("q4", "job-1", [{"content": "x"}])  # the Spark connector's write: staged, then
    refused(errors.QUEUE_LIMIT, services.publish_staged, [("job-1", "q4")])  # published (or not)
    _count_unchanged()
    forqapp.send("q1", "still")  # the queues that exist take messages, and can be configured
    forqapp.send_many("q3", ["still"])
    forqapp.configure_queue("q3", max_attempts=4)
    forqapp.delete_queue("q3")
    forqapp.send("q4", "now there is room")
    assert Queue.objects.filter(name="q4").exists()


def test_a_queue_and_its_dlq_count_as_one(full):
    assert Message.objects.filter(queue="q2-dlq", is_dlq=True).exists()
    assert Queue.objects.count() == LIMIT  # q2's dead letters made no queue of their own
    with override_settings(FORQ_MAX_QUEUES=LIMIT + 1):
        forqapp.send("q4", "x")  # the limit counts q1, q2 (with its DLQ), q3


def test_no_limit_with_none():
    with override_settings(FORQ_MAX_QUEUES=None):
        for n in range(5):
            forqapp.send(f"free-{n}", "x")
    assert Queue.objects.count() == 5


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/api/v1/queues/q4/messages", b'{"content": "x"}'),
    ("POST", "/api/v1/queues/q4/messages/batch", b'{"messages": [{"content": "x"}]}'),
    ("POST", "/api/v2/queues/q4/messages", b'{"content": "x"}'),
    ("POST", "/api/v2/queues/q4/messages/batch", b'{"entries": [{"content": "x"}]}'),
    ("PUT", "/api/v2/queues/q4", b'{"max_attempts": 2}'),
    ("PATCH", "/api/v2/queues/q4", b'{"max_attempts": 2}'),
])
def test_the_http_apis_answer_409_queue_limit_reached(full, apps, caplog, method, path, body):  # noqa: F811
    headers = [(b"x-api-key", KEY), (b"content-type", b"application/json")]
    with override_settings(FORQ_MAX_QUEUES=LIMIT):
        for app in apps:  # v1's fast path and the general one
            status, _, answer = _run(app, _scope(method, path, headers), body)
            assert (status, json.loads(answer)["code"]) == (409, errors.QUEUE_LIMIT), answer
            status, _, answer = _run(app, _scope("POST", "/api/v1/queues/q1/messages", headers), b'{"content": "x"}')
            assert status == 204, answer
    _count_unchanged()
    assert [r for r in caplog.records if r.exc_info or r.levelname == "ERROR"] == []  # a client's mistake


@pytest.mark.parametrize("name", ["q4", "q4-dlq"])
def test_sqs_create_queue_answers_over_limit(full, name):
    with override_settings(FORQ_MAX_QUEUES=LIMIT):
        response = sqs("CreateQueue", {"QueueName": name})
        assert response.status_code == 403, response.text
        assert response.json()["__type"] == "com.amazonaws.sqs#OverLimit", response.text
        assert "FORQ_MAX_QUEUES" in response.json()["message"]
        assert response.headers["x-amzn-query-error"] == "OverLimit;Sender"
        assert sqs("CreateQueue", {"QueueName": "q1"}).status_code == 200  # one that exists: as before
    _count_unchanged()


def test_the_tasks_backend_refuses_an_enqueue_to_a_new_queue(full):
    from tests.tasksapp import tasks

    with override_settings(FORQ_MAX_QUEUES=LIMIT), pytest.raises(ForqError) as caught:
        tasks.add.enqueue(1, 2)  # its queue (tasks-default) does not exist yet
    assert caught.value.code == errors.QUEUE_LIMIT
    _count_unchanged()


def test_the_admin_says_the_limit_on_its_add_form(full, admin_client):
    with override_settings(FORQ_MAX_QUEUES=LIMIT):
        page = admin_client.post("/admin/forqapp/queue/add/", {"name": "q4"})
    assert page.status_code == 200  # the form again, with the error
    assert b"FORQ_MAX_QUEUES" in page.content
    _count_unchanged()


def test_the_admin_says_a_limit_its_form_could_not_foresee(full, admin_client, monkeypatch):
    """Another process takes the last place between the form's check and the save: the refusal
    comes from configure_queue, and the admin says it (no 500, nothing written)."""
    from forqapp.services import limits

    monkeypatch.setattr(limits, "full", lambda using=None: None)  # the form's forecast: room left
    with override_settings(FORQ_MAX_QUEUES=LIMIT):
        page = admin_client.post("/admin/forqapp/queue/add/", {"name": "q4"}, follow=True)
    assert page.status_code == 200
    assert b"FORQ_MAX_QUEUES" in page.content
    _count_unchanged()


RACE = textwrap.dedent("""
    import sys
    import django
    django.setup()
    from django.conf import settings
    settings.FORQ_MAX_QUEUES = int(sys.argv[2])
    import forqapp
    from forqapp.errors import ForqError
    forqapp.send("already", "warm")  # connected, policies read: only the creation is left
    print("ready", flush=True)
    sys.stdin.readline()  # all together
    try:
        forqapp.send(sys.argv[1], "x")
    except ForqError as e:
        print(e.code)
    else:
        print("sent")
""")


def test_processes_racing_for_the_last_places_never_pass_the_limit():
    """Eight processes each create a queue at the same moment with room for three: three do."""
    forqapp.send("already", "x")
    env = subprocess_env()
    procs = [subprocess.Popen([sys.executable, "-c", RACE, f"race-{n}", "4"], env=env, cwd=ROOT, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for n in range(8)]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outcomes = []
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            outcomes.append(out.strip())
    finally:
        for proc in procs:
            proc.kill()
    assert sorted(outcomes) == ["queue.limit_reached"] * 5 + ["sent"] * 3, outcomes
    assert Queue.objects.count() == 4


# --- /metrics stays small whatever the number of queues ----------------------------------------


def _series_by_queue(text: str) -> dict[str, float]:
    """{queue_name: sum of forq_messages_produced_total} from an exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "forq_messages_produced_total":
                out[sample.labels["queue_name"]] = out.get(sample.labels["queue_name"], 0) + sample.value
    return out


def test_metrics_keep_per_queue_series_for_the_deepest_queues_and_sum_the_others():
    from forqapp import metrics
    from forqapp.metrics import top

    top.forget()  # (what other tests' scrapes folded)
    with override_settings(FORQ_METRICS_TOP_QUEUES=10):
        before = len(metrics.exposition()[0])  # what the other tests' views, keys and queues left
    names = [f"mt-{n:04d}" for n in range(2_000)]
    for name in names:
        metrics.produced(name, 1)
        metrics.acked(name, 1)
    depths = [(name, False, 10_000 + n) for n, name in enumerate(names)]  # the last ones the deepest
    depths.append(("mt-0000-dlq", True, 1_000_000))  # a DLQ ranks its queue
    labels = metrics.set_queue_depths(depths)
    try:
        with override_settings(FORQ_METRICS_TOP_QUEUES=10):
            body = metrics.exposition()[0].decode()
        produced = _series_by_queue(body)
        kept = {q for q in produced if q.startswith("mt-")}
        assert kept == {"mt-0000", *names[-9:]}  # the ten deepest (mt-0000 by its DLQ)
        assert produced["(other)"] >= len(names) - 10  # the rest, summed (other tests' queues too)
        assert 'forq_queue_depth{queue_name="mt-0000-dlq",queue_type="dlq"} 1e+06' in body
        assert 'forq_queue_depth{queue_name="(other)",queue_type="regular"}' in body
        assert "forq_metrics_queues_folded" in body
        # 2,000 more queues add ten queues' series at most (every one of them: ~600 KB more)
        assert len(body) - before < 30_000, (before, len(body))
        with override_settings(FORQ_METRICS_TOP_QUEUES=5_000):  # room for all: each its own series again
            everything = _series_by_queue(metrics.exposition()[0].decode())
        assert set(names) <= set(everything)
        # What they counted while folded stays in (other): a counter series never falls (else
        # Prometheus reads a reset); their own series start from what they counted since.
        assert everything["(other)"] == produced["(other)"] and everything["mt-0001"] == 0
        assert sum(everything.values()) == sum(produced.values())  # the same totals
        top.forget()  # a fresh start of the counts (forq_serve alone): nothing folded
        with override_settings(FORQ_METRICS_TOP_QUEUES=5_000):
            fresh = _series_by_queue(metrics.exposition()[0].decode())
        assert "(other)" not in fresh and fresh["mt-0001"] == 1
    finally:
        metrics.set_queue_depths([], labels)
        top.forget()


def test_declaring_more_queues_than_the_limit_is_a_configuration_error():
    from forqapp import conf

    declared = {f"d{n}": {} for n in range(4)}
    with override_settings(FORQ_QUEUES=declared, FORQ_MAX_QUEUES=3):
        assert ("forqapp.E050", "FORQ_QUEUES declares 4 queues, more than FORQ_MAX_QUEUES (3)") in conf.problems()
    with override_settings(FORQ_QUEUES=declared, FORQ_MAX_QUEUES=4):
        assert [p for p in conf.problems() if p[0] == "forqapp.E050"] == []
    with override_settings(FORQ_MAX_QUEUES=0):
        assert any("FORQ_MAX_QUEUES" in p[1] for p in conf.problems())


def test_declared_queues_are_applied_whatever_the_count(full):
    """FORQ_QUEUES is the project's own configuration: migrate must not fail because clients made
    the other queues."""
    from forqapp.management.commands.forq_queues import apply_declared_queues

    with override_settings(FORQ_MAX_QUEUES=LIMIT, FORQ_QUEUES={"declared": {"max_attempts": 2}}):
        assert apply_declared_queues() == ["declared"]
        refused(errors.QUEUE_LIMIT, forqapp.send, "q5", "x")  # it counts, for the others
    assert Queue.objects.get(name="declared").max_attempts == 2
