"""SQS dead-letter queues on forqapp's SQS face, driven by boto3 against a live ``forq_serve`` (as
tests/test_sqs.py): ``RedrivePolicy`` naming any existing queue, ``RedriveAllowPolicy`` (its checks,
and its refusals of source queues), ``ListDeadLetterSourceQueues``, ``DeleteQueue`` keeping the
dead letters, and redrive by ``StartMessageMoveTask`` / ``ListMessageMoveTasks`` /
``CancelMessageMoveTask`` (the ``moves`` job, run in this process, does the moving)."""

from __future__ import annotations

import json
import time

import botocore
import pytest

import forqapp
from forqapp import services
from forqapp.errors import ForqError
from forqapp.models import Message, Queue
from forqapp.services import queues as queue_services
from forqapp.sqs import queues
from forqapp.worker import jobs

from .conftest import sqs_listener
from .test_sqs import ACCOUNT, KEYS_SECRET, REGION, client, code_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def server(django_db_blocker):
    with sqs_listener(django_db_blocker, {"FORQ_KEYS_SECRET": KEYS_SECRET}) as (url, api):
        yield url


@pytest.fixture
def sqs(server):
    services.forget_policies()
    return client(server)


def arn(name: str) -> str:
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def redrive(target: str, count: int = 1) -> str:
    return json.dumps({"deadLetterTargetArn": arn(target), "maxReceiveCount": count})


def error_of(call, **kwargs) -> tuple[str, str]:
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        call(**kwargs)
    return code_of(exc)[0], exc.value.response["Error"]["Message"]


def dead_letter(sqs, url: str, body: str) -> None:
    """Send ``body`` and receive it past maxReceiveCount 1: the next receive redrives it."""
    sqs.send_message(QueueUrl=url, MessageBody=body)
    assert sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"][0]["Body"] == body
    assert "Messages" not in sqs.receive_message(QueueUrl=url)


def bodies(sqs, url: str) -> list[str]:
    got = []
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        for m in messages:
            got.append(m["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return sorted(got)


def wait_for_task(sqs, source: str, status: str) -> dict:
    """The latest task of ``source`` once it has ``status``, the ``moves`` job run here (the test
    servers run no jobs: they would move other tests' rows); 60 s without it is a task that never ends."""
    deadline = time.monotonic() + 60
    while True:
        jobs.run("moves")
        (task,) = sqs.list_message_move_tasks(SourceArn=arn(source))["Results"]
        if task["Status"] == status or time.monotonic() > deadline:
            return task
        time.sleep(0.2)


def test_a_redrive_policy_may_name_any_existing_queue_whose_dead_letters_are_ordinary_there(sqs):
    parking = sqs.create_queue(QueueName="parking")["QueueUrl"]
    url = sqs.create_queue(QueueName="shop", Attributes={"RedrivePolicy": redrive("parking")})["QueueUrl"]
    policy = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"][
        "RedrivePolicy"])
    assert policy == {"deadLetterTargetArn": arn("parking"), "maxReceiveCount": 1}
    dead_letter(sqs, url, "order 1")
    (row,) = Message.objects.filter(queue="parking")
    assert (row.is_dlq, row.dead_letter_source) == (False, "shop")
    assert bodies(sqs, parking) == ["order 1"]
    code, message = error_of(sqs.set_queue_attributes, QueueUrl=url, Attributes={"RedrivePolicy": redrive("shop")})
    assert code == "InvalidParameterValue" and "own dead-letter queue" in message
    # Back to forqapp's own <name>-dlq, which needs no creating.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": redrive("shop-dlq")})
    dead_letter(sqs, url, "order 2")
    assert [m.content for m in Message.objects.filter(queue="shop-dlq")] == ["order 2"]


@pytest.mark.parametrize(("value", "reason"), [
    ('{"redrivePermission": "byQueue"}', "must also specify one or more sourceQueueArns"),
    (json.dumps({"redrivePermission": "byQueue", "sourceQueueArns": [arn(f"q{i}") for i in range(11)]}),
     "maximum number of source queue ARNs you can specify is 10"),
    (json.dumps({"redrivePermission": "allowAll", "sourceQueueArns": [arn("q")]}), "can't also specify sourceQueueArns"),
    ('{"redrivePermission": "some"}', "unsupported format"),
    ("not json", "unsupported format"),
])
def test_a_redrive_allow_policy_is_checked_as_sqs_checks_it(sqs, value, reason):
    url = sqs.create_queue(QueueName="allow")["QueueUrl"]
    code, message = error_of(sqs.set_queue_attributes, QueueUrl=url, Attributes={"RedriveAllowPolicy": value})
    assert code == "InvalidParameterValue" and reason in message
    assert "RedriveAllowPolicy" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]


def test_a_redrive_allow_policy_is_kept_and_refuses_the_sources_it_does_not_allow(sqs):
    allowed = {"redrivePermission": "byQueue", "sourceQueueArns": [arn("friend")]}
    dlq = sqs.create_queue(QueueName="strict", Attributes={"RedriveAllowPolicy": json.dumps(allowed)})["QueueUrl"]
    shown = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["RedriveAllowPolicy"])["Attributes"]
    assert json.loads(shown["RedriveAllowPolicy"]) == allowed
    sqs.create_queue(QueueName="friend", Attributes={"RedrivePolicy": redrive("strict")})
    code, message = error_of(sqs.create_queue, QueueName="stranger", Attributes={"RedrivePolicy": redrive("strict")})
    assert code == "InvalidParameterValue" and "does not allow 'stranger'" in message
    sqs.set_queue_attributes(QueueUrl=dlq, Attributes={"RedriveAllowPolicy": '{"redrivePermission": "denyAll"}'})
    friend = sqs.get_queue_url(QueueName="friend")["QueueUrl"]
    assert error_of(sqs.set_queue_attributes, QueueUrl=friend,
                    Attributes={"RedrivePolicy": redrive("strict", 2)})[0] == "InvalidParameterValue"
    sqs.set_queue_attributes(QueueUrl=dlq, Attributes={"RedriveAllowPolicy": ""})  # removed: all allowed
    sqs.create_queue(QueueName="stranger", Attributes={"RedrivePolicy": redrive("strict")})


def test_list_dead_letter_source_queues_with_pages(sqs):
    sqs.create_queue(QueueName="common")
    for name in ("src-a", "src-b", "src-c"):
        sqs.create_queue(QueueName=name, Attributes={"RedrivePolicy": redrive("common")})
    url = sqs.get_queue_url(QueueName="common")["QueueUrl"]
    names = [u.rsplit("/", 1)[1] for u in sqs.list_dead_letter_source_queues(QueueUrl=url)["queueUrls"]]
    assert names == ["src-a", "src-b", "src-c"]
    first = sqs.list_dead_letter_source_queues(QueueUrl=url, MaxResults=2)
    rest = sqs.list_dead_letter_source_queues(QueueUrl=url, MaxResults=2, NextToken=first["NextToken"])
    assert [u.rsplit("/", 1)[1] for u in first["queueUrls"] + rest["queueUrls"]] == names and "NextToken" not in rest
    assert error_of(sqs.list_dead_letter_source_queues, QueueUrl=url, MaxResults=2, NextToken="bogus")[0] == \
        "InvalidParameterValue"
    own = sqs.create_queue(QueueName="solo", Attributes={"RedrivePolicy": redrive("solo-dlq")})["QueueUrl"]
    assert sqs.list_dead_letter_source_queues(QueueUrl=own + "-dlq")["queueUrls"] == [own]
    assert sqs.list_dead_letter_source_queues(QueueUrl=own)["queueUrls"] == []
    # A DLQ created before its queue: the queue it is named for is no source until it exists and
    # sends there (it was listed, though ListQueues and GetQueueUrl did not know it).
    lone = sqs.create_queue(QueueName="lone-dlq")["QueueUrl"]
    assert sqs.list_dead_letter_source_queues(QueueUrl=lone)["queueUrls"] == []
    source = sqs.create_queue(QueueName="lone-src", Attributes={"RedrivePolicy": redrive("lone-dlq")})["QueueUrl"]
    assert sqs.list_dead_letter_source_queues(QueueUrl=lone)["queueUrls"] == [source]
    assert sqs.list_dead_letter_source_queues(QueueUrl=lone, MaxResults=1)["queueUrls"] == [source]


def test_delete_queue_keeps_the_dead_letters_in_its_dlq(sqs):
    url = sqs.create_queue(QueueName="gone", Attributes={"RedrivePolicy": redrive("gone-dlq")})["QueueUrl"]
    dead_letter(sqs, url, "kept")
    sqs.send_message(QueueUrl=url, MessageBody="deleted")
    sqs.delete_queue(QueueUrl=url)
    assert not Message.objects.filter(queue="gone").exists()
    assert bodies(sqs, url + "-dlq") == ["kept"]


def test_a_move_task_redrives_each_dead_letter_to_its_source_or_to_a_destination(sqs):
    dlq = sqs.create_queue(QueueName="mt-dead")["QueueUrl"]
    one = sqs.create_queue(QueueName="mt-one", Attributes={"RedrivePolicy": redrive("mt-dead")})["QueueUrl"]
    two = sqs.create_queue(QueueName="mt-two", Attributes={"RedrivePolicy": redrive("mt-dead")})["QueueUrl"]
    dead_letter(sqs, one, "a")
    dead_letter(sqs, two, "b")
    handle = sqs.start_message_move_task(SourceArn=arn("mt-dead"))["TaskHandle"]
    task = wait_for_task(sqs, "mt-dead", "COMPLETED")
    assert task["Status"] == "COMPLETED", task
    assert (task["ApproximateNumberOfMessagesMoved"], task["ApproximateNumberOfMessagesToMove"]) == (2, 2)
    assert task["SourceArn"] == arn("mt-dead") and "TaskHandle" not in task and isinstance(task["StartedTimestamp"], int)
    assert handle
    assert bodies(sqs, one) == ["a"] and bodies(sqs, two) == ["b"]
    # To a destination of its own, at a rate.
    dead_letter(sqs, one, "c")
    other = sqs.create_queue(QueueName="mt-other")["QueueUrl"]
    sqs.start_message_move_task(SourceArn=arn("mt-dead"), DestinationArn=arn("mt-other"),
                                MaxNumberOfMessagesPerSecond=50)
    task = wait_for_task(sqs, "mt-dead", "COMPLETED")
    assert task["DestinationArn"] == arn("mt-other") and task["MaxNumberOfMessagesPerSecond"] == 50
    assert bodies(sqs, other) == ["c"] and "Messages" not in sqs.receive_message(QueueUrl=dlq)
    assert len(sqs.list_message_move_tasks(SourceArn=arn("mt-dead"), MaxResults=10)["Results"]) == 2


def test_one_running_task_per_source_and_a_cancel(sqs):
    sqs.create_queue(QueueName="slow-dead")
    sqs.create_queue(QueueName="slow", Attributes={"RedrivePolicy": redrive("slow-dead")})
    services.send_many("slow", [f"m{n}" for n in range(20)])
    Message.objects.filter(queue="slow").update(queue="slow-dead", dead_letter_source="slow")
    # 20 messages at 1 a second: running for 19 s at least, far longer than the calls below take.
    handle = sqs.start_message_move_task(SourceArn=arn("slow-dead"), MaxNumberOfMessagesPerSecond=1)["TaskHandle"]
    code, message = error_of(sqs.start_message_move_task, SourceArn=arn("slow-dead"))
    assert code == "AWS.SimpleQueueService.UnsupportedOperation" and "Only one active task" in message
    running = sqs.list_message_move_tasks(SourceArn=arn("slow-dead"))["Results"][0]
    assert running["Status"] == "RUNNING" and running["TaskHandle"] == handle
    moved = sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"]
    assert 0 <= moved < 20
    task = sqs.list_message_move_tasks(SourceArn=arn("slow-dead"))["Results"][0]
    assert (task["Status"], task["ApproximateNumberOfMessagesMoved"]) == ("CANCELLED", moved)
    assert Message.objects.filter(queue="slow-dead").count() == 20 - moved
    assert error_of(sqs.cancel_message_move_task, TaskHandle=handle)[0] == "ResourceNotFoundException"
    assert error_of(sqs.cancel_message_move_task, TaskHandle="bogus")[0] == "ResourceNotFoundException"


def test_a_move_tasks_input_is_checked(sqs):
    sqs.create_queue(QueueName="plain")
    # A <name>-dlq nobody made is no queue, as on SQS: no source.
    assert error_of(sqs.start_message_move_task, SourceArn=arn("plain-dlq"))[0] == "ResourceNotFoundException"
    sqs.create_queue(QueueName="plain-dlq")
    for call, kwargs, expected in [
        (sqs.start_message_move_task, {"SourceArn": arn("plain")}, "InvalidParameterValue"),  # no queue's DLQ
        (sqs.start_message_move_task, {"SourceArn": arn("nothing")}, "ResourceNotFoundException"),
        (sqs.start_message_move_task, {"SourceArn": "not-an-arn"}, "InvalidParameterValue"),
        (sqs.start_message_move_task, {"SourceArn": arn("plain-dlq"), "MaxNumberOfMessagesPerSecond": 501},
         "InvalidParameterValue"),
        (sqs.start_message_move_task, {"SourceArn": arn("plain-dlq"), "DestinationArn": arn("nothing")},
         "ResourceNotFoundException"),
        (sqs.list_message_move_tasks, {"SourceArn": arn("plain-dlq"), "MaxResults": 11}, "InvalidParameterValue"),
    ]:
        assert error_of(call, **kwargs)[0] == expected, (call, kwargs)


def test_a_dlq_takes_sends_as_any_queue_and_its_fifo_rules_hold(sqs):
    """On SQS a dead-letter queue is a queue like any: SendMessage and SendMessageBatch to
    ``<name>-dlq`` (and ``<name>-dlq.fifo``) are received from it; on a FIFO one, its own
    deduplication (here ``ContentBasedDeduplication``, the DLQ's own attribute), groups in order and
    sequence numbers (with its queue's); the DLQ created alone stays alone (its queue is not listed)."""
    fifo = sqs.create_queue(QueueName="sendto-dlq.fifo",
                            Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
    first = sqs.send_message(QueueUrl=fifo, MessageBody="x", MessageGroupId="g")
    again = sqs.send_message(QueueUrl=fifo, MessageBody="x", MessageGroupId="g")  # the body's SHA-256: a duplicate
    assert again["MessageId"] == first["MessageId"] and again["SequenceNumber"] == first["SequenceNumber"]
    out = sqs.send_message_batch(QueueUrl=fifo, Entries=[{"Id": "a", "MessageBody": "y", "MessageGroupId": "g"},
                                                         {"Id": "b", "MessageBody": "z", "MessageGroupId": "h"}])
    assert [e["Id"] for e in out["Successful"]] == ["a", "b"] and not out["Failed"]
    assert int(first["SequenceNumber"]) < int(out["Successful"][0]["SequenceNumber"])
    assert Message.objects.filter(queue="sendto.fifo-dlq", is_dlq=True).count() == 3
    got = sqs.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10, VisibilityTimeout=30,
                              MessageSystemAttributeNames=["All"])["Messages"]
    assert ("x", "g") in [(m["Body"], m["Attributes"]["MessageGroupId"]) for m in got]
    received = {m["Body"]: m for m in got}
    assert received["x"]["Attributes"]["SequenceNumber"] == first["SequenceNumber"]
    assert received["x"]["Attributes"]["MessageDeduplicationId"] == \
        "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"  # sha256("x")
    for m in got:
        sqs.delete_message(QueueUrl=fifo, ReceiptHandle=m["ReceiptHandle"])
    assert bodies(sqs, fifo) == sorted({"x", "y", "z"} - set(received))
    plain = sqs.create_queue(QueueName="sendto-dlq")["QueueUrl"]
    sqs.send_message(QueueUrl=plain, MessageBody="p", DelaySeconds=0)
    assert bodies(sqs, plain) == ["p"]
    listed = [u.rsplit("/", 1)[1] for u in sqs.list_queues(QueueNamePrefix="sendto").get("QueueUrls", [])]
    assert sorted(listed) == ["sendto-dlq", "sendto-dlq.fifo"]


def test_what_was_sent_to_a_dlq_is_moved_by_a_move_task_and_expires_with_its_retention(sqs):
    dlq = sqs.create_queue(QueueName="byhand-dlq", Attributes={"MessageRetentionPeriod": "120"})["QueueUrl"]
    source = sqs.create_queue(QueueName="byhand", Attributes={"RedrivePolicy": redrive("byhand-dlq")})["QueueUrl"]
    sqs.send_message(QueueUrl=dlq, MessageBody="by hand")
    (row,) = Message.objects.filter(queue="byhand-dlq")
    assert row.is_dlq and 119_000 <= row.expires_after - row.received_at <= 121_000
    sqs.start_message_move_task(SourceArn=arn("byhand-dlq"))
    assert wait_for_task(sqs, "byhand-dlq", "COMPLETED")["ApproximateNumberOfMessagesMoved"] == 1
    assert bodies(sqs, source) == ["by hand"]


def test_a_move_task_may_move_into_a_dlq_whose_messages_are_then_its_dead_letters(sqs):
    """As on AWS, a move task's destination may be any queue but its source, a dead-letter queue
    included: what arrives there is stored as a SendMessage to it stores it (the DLQ's messages,
    expiring after its retention), receivable from it; the DLQ created alone stays alone."""
    sqs.create_queue(QueueName="into-dead")
    src = sqs.create_queue(QueueName="into-src", Attributes={"RedrivePolicy": redrive("into-dead")})["QueueUrl"]
    archive = sqs.create_queue(QueueName="into-archive-dlq", Attributes={"MessageRetentionPeriod": "120"})["QueueUrl"]
    dead_letter(sqs, src, "a")
    dead_letter(sqs, src, "b")
    code, message = error_of(sqs.start_message_move_task, SourceArn=arn("into-dead"), DestinationArn=arn("into-dead"))
    assert code == "InvalidParameterValue" and "another queue than the source" in message
    sqs.start_message_move_task(SourceArn=arn("into-dead"), DestinationArn=arn("into-archive-dlq"))
    task = wait_for_task(sqs, "into-dead", "COMPLETED")
    assert task["Status"] == "COMPLETED" and task["DestinationArn"] == arn("into-archive-dlq"), task
    assert task["ApproximateNumberOfMessagesMoved"] == 2
    rows = Message.objects.filter(queue="into-archive-dlq")
    assert sorted((m.content, m.is_dlq, m.dead_letter_source) for m in rows) == [("a", True, None), ("b", True, None)]
    assert all(m.expires_after - m.process_after == 120_000 for m in rows)
    listed = [u.rsplit("/", 1)[1] for u in sqs.list_queues(QueueNamePrefix="into-").get("QueueUrls", [])]
    assert sorted(listed) == ["into-archive-dlq", "into-dead", "into-src"]
    attributes = sqs.get_queue_attributes(QueueUrl=archive, AttributeNames=["ApproximateNumberOfMessages"])
    assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "2"
    assert bodies(sqs, archive) == ["a", "b"] and "Messages" not in sqs.receive_message(QueueUrl=src)


def test_the_other_faces_still_refuse_a_send_to_a_dlq(sqs):
    with pytest.raises(ForqError) as exc:
        services.send_entries("other-dlq", ["x"])
    assert exc.value.code == "bad_request.queue.produce_to_dlq"


# --- a created <name>-dlq is a queue of its own: DeleteQueue of <name> leaves it, and it exists only once made ---


@pytest.mark.parametrize(("queue", "dlq", "fifo"), [("orders", "orders-dlq", False), ("pay.fifo", "pay-dlq.fifo", True)])
def test_delete_queue_keeps_a_created_dlq_its_attributes_and_tags(sqs, queue, dlq, fifo):
    """Outside testers: DeleteQueue of ``orders`` deleted an empty ``orders-dlq`` created by
    CreateQueue, and reset a filled one's attributes and tags."""
    kind = {"FifoQueue": "true"} if fifo else {}
    extra = {"MessageGroupId": "g", "MessageDeduplicationId": "d"} if fifo else {}
    for filled in (False, True):
        dlq_url = sqs.create_queue(QueueName=dlq, tags={"team": "ops"}, Attributes={
            **kind, "VisibilityTimeout": "77", "MessageRetentionPeriod": "1209600"})["QueueUrl"]
        url = sqs.create_queue(QueueName=queue, Attributes={**kind, "RedrivePolicy": redrive(dlq)})["QueueUrl"]
        if filled:
            sqs.send_message(QueueUrl=dlq_url, MessageBody="dead", **extra)
        sqs.delete_queue(QueueUrl=url)
        assert sqs.get_queue_url(QueueName=dlq)["QueueUrl"] == dlq_url
        attrs = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["All"])["Attributes"]
        assert (attrs["VisibilityTimeout"], attrs["MessageRetentionPeriod"]) == ("77", "1209600"), filled
        assert sqs.list_queue_tags(QueueUrl=dlq_url)["Tags"] == {"team": "ops"}
        with pytest.raises(sqs.exceptions.QueueDoesNotExist):
            sqs.get_queue_url(QueueName=queue)
        listed = [u.rsplit("/", 1)[1] for u in sqs.list_queues(QueueNamePrefix=queue.split(".")[0]).get(
            "QueueUrls", [])]
        assert listed == [dlq]
        assert bodies(sqs, dlq_url) == (["dead"] if filled else [])
        sqs.delete_queue(QueueUrl=dlq_url)


def test_a_deleted_queue_stays_deleted_until_created_and_a_deleted_dlq_too(sqs):
    """Outside testers: after DeleteQueue of ``orders``, a send to ``orders-dlq`` (or its
    CreateQueue while it held messages) made ``orders`` a queue again; after DeleteQueue of
    ``orders-dlq``, GetQueueUrl still found it."""
    dlq_url = sqs.create_queue(QueueName="stay-dlq")["QueueUrl"]
    url = sqs.create_queue(QueueName="stay", Attributes={"RedrivePolicy": redrive("stay-dlq")})["QueueUrl"]
    dead_letter(sqs, url, "one")
    sqs.delete_queue(QueueUrl=url)
    sqs.send_message(QueueUrl=dlq_url, MessageBody="two")
    sqs.create_queue(QueueName="stay-dlq")
    sqs.tag_queue(QueueUrl=dlq_url, Tags={"k": "v"})
    for call in (lambda: sqs.get_queue_url(QueueName="stay"), lambda: sqs.get_queue_attributes(QueueUrl=url)):
        with pytest.raises(sqs.exceptions.QueueDoesNotExist):
            call()
    assert [u.rsplit("/", 1)[1] for u in sqs.list_queues(QueueNamePrefix="stay")["QueueUrls"]] == ["stay-dlq"]
    # A DLQ that holds messages but was never created (its queue deleted) takes sends too, alone.
    gone = sqs.create_queue(QueueName="stay2", Attributes={"RedrivePolicy": redrive("stay2-dlq")})["QueueUrl"]
    dead_letter(sqs, gone, "three")
    sqs.delete_queue(QueueUrl=gone)
    sqs.send_message(QueueUrl=gone + "-dlq", MessageBody="four")
    sqs.create_queue(QueueName="stay2-dlq")
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName="stay2")
    assert bodies(sqs, gone + "-dlq") == ["four", "three"]
    # Deleted by DeleteQueue, a DLQ is gone, though its queue remains.
    url = sqs.create_queue(QueueName="stay3", Attributes={"RedrivePolicy": redrive("stay3-dlq")})["QueueUrl"]
    sqs.get_queue_url(QueueName="stay3-dlq")
    sqs.delete_queue(QueueUrl=url + "-dlq")
    for call in (lambda: sqs.get_queue_url(QueueName="stay3-dlq"),
                 lambda: sqs.get_queue_attributes(QueueUrl=url + "-dlq")):
        with pytest.raises(sqs.exceptions.QueueDoesNotExist):
            call()
    assert sqs.get_queue_url(QueueName="stay3")["QueueUrl"] == url


def test_a_dlq_nobody_created_does_not_exist_until_it_holds_messages(sqs):
    """Outside testers: GetQueueUrl and GetQueueAttributes of ``base-dlq`` answered for a queue
    only ``base`` was created; on SQS a queue nobody created is NonExistentQueue."""
    url = sqs.create_queue(QueueName="never")["QueueUrl"]
    for call in (lambda: sqs.get_queue_url(QueueName="never-dlq"),
                 lambda: sqs.get_queue_attributes(QueueUrl=url + "-dlq", AttributeNames=["All"]),
                 lambda: sqs.send_message(QueueUrl=url + "-dlq", MessageBody="x")):
        with pytest.raises(sqs.exceptions.QueueDoesNotExist):
            call()
    assert [u.rsplit("/", 1)[1] for u in sqs.list_queues(QueueNamePrefix="never")["QueueUrls"]] == ["never"]
    # Its dead letters (here a message past its retention, Forq's rule) make it a queue SQS shows.
    sqs.send_message(QueueUrl=url, MessageBody="old")
    Message.objects.filter(queue="never").update(expires_after=0)
    services.move_expired_to_dlq()
    assert sqs.get_queue_url(QueueName="never-dlq")["QueueUrl"] == url + "-dlq"
    assert bodies(sqs, url + "-dlq") == ["old"]


def test_create_queue_with_a_redrive_allow_policy_is_idempotent(sqs):
    """Outside testers: the same CreateQueue with a RedriveAllowPolicy twice was QueueAlreadyExists."""
    allowed = {"redrivePermission": "byQueue", "sourceQueueArns": [arn("idem-src")]}
    url = sqs.create_queue(QueueName="idem", Attributes={"RedriveAllowPolicy": json.dumps(allowed)})["QueueUrl"]
    assert sqs.create_queue(QueueName="idem", Attributes={"RedriveAllowPolicy": json.dumps(allowed)})["QueueUrl"] == url
    spaced = json.dumps(allowed, indent=2, separators=(" , ", " : "))
    assert sqs.create_queue(QueueName="idem", Attributes={"RedriveAllowPolicy": spaced})["QueueUrl"] == url
    with pytest.raises(sqs.exceptions.QueueNameExists):
        sqs.create_queue(QueueName="idem", Attributes={"RedriveAllowPolicy": '{"redrivePermission": "allowAll"}'})
    policy = '{"Version": "2012-10-17", "Statement": []}'
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": policy})
    assert sqs.create_queue(QueueName="idem", Attributes={"Policy": policy})["QueueUrl"] == url
    assert sqs.create_queue(QueueName="idem", Attributes={"Policy": policy.replace(" ", "")})["QueueUrl"] == url


def test_an_arn_of_another_account_names_no_queue(sqs):
    """Outside testers: a RedrivePolicy naming ``arn:aws:sqs:…:111111111111:a1dl`` was stored as
    this server's account's queue, and StartMessageMoveTask of such an ARN started a task."""
    other = "arn:aws:sqs:us-east-1:111111111111:"
    sqs.create_queue(QueueName="a1dl")
    url = sqs.create_queue(QueueName="a1")["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": other + "a1dl", "maxReceiveCount": 1})
    code, message = error_of(sqs.set_queue_attributes, QueueUrl=url, Attributes={"RedrivePolicy": policy})
    assert code == "InvalidParameterValue" and "Dead-letter target owner should be same as the source." in message
    code, _ = error_of(sqs.create_queue, QueueName="a2", Attributes={"RedrivePolicy": policy})
    assert code == "InvalidParameterValue"
    assert "RedrivePolicy" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": redrive("a1dl")})
    for call, kwargs in [(sqs.start_message_move_task, {"SourceArn": other + "a1dl"}),
                         (sqs.start_message_move_task, {"SourceArn": arn("a1dl"), "DestinationArn": other + "a1"}),
                         (sqs.list_message_move_tasks, {"SourceArn": other + "a1dl"})]:
        assert error_of(call, **kwargs)[0] == "ResourceNotFoundException", kwargs
    assert sqs.list_message_move_tasks(SourceArn=arn("a1dl"))["Results"] == []
    # A RedriveAllowPolicy naming another account's queue of the same name does not allow this one.
    allowed = json.dumps({"redrivePermission": "byQueue", "sourceQueueArns": [other + "a3"]})
    sqs.create_queue(QueueName="a3dl", Attributes={"RedriveAllowPolicy": allowed})
    code, message = error_of(sqs.create_queue, QueueName="a3", Attributes={"RedrivePolicy": redrive("a3dl")})
    assert code == "InvalidParameterValue" and "does not allow 'a3'" in message


# --- the <name>-dlq of a queue whose redrive policy names it exists for SQS, empty or not ---


def test_the_dlq_of_a_queue_another_face_made_exists_for_sqs_while_empty(sqs):
    """A reviewer: the ``x-dlq`` of a queue made through the Python API (or the HTTP APIs, Django
    Tasks, ``FORQ_QUEUES``) existed for SQS only while it held messages: once its last dead letter
    was deleted, ReceiveMessage and GetQueueAttributes answered QueueDoesNotExist (drain loops and
    DLQ-depth monitors broke). Its redrive policy names ``x-dlq``: it exists as long as ``x`` does."""
    forqapp.configure_queue("pyface", max_attempts=2)
    forqapp.send("pyface", "a")
    url = sqs.get_queue_url(QueueName="pyface")["QueueUrl"]
    policy = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"][
        "RedrivePolicy"])
    assert policy == {"deadLetterTargetArn": arn("pyface-dlq"), "maxReceiveCount": 2}

    def visible_and_empty(dlq: str) -> None:
        assert sqs.get_queue_url(QueueName="pyface-dlq")["QueueUrl"] == dlq
        attributes = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["All"])["Attributes"]
        assert attributes["ApproximateNumberOfMessages"] == "0" and attributes["QueueArn"] == arn("pyface-dlq")
        assert "Messages" not in sqs.receive_message(QueueUrl=dlq)
        listed = [u.rsplit("/", 1)[1] for u in sqs.list_queues(QueueNamePrefix="pyface")["QueueUrls"]]
        assert listed == ["pyface", "pyface-dlq"]

    dlq = url + "-dlq"
    visible_and_empty(dlq)
    for _ in range(2):
        assert sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"][0]["Body"] == "a"
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # the third receive redrives it
    assert bodies(sqs, dlq) == ["a"]
    time.sleep(queues.CACHE_S + 0.2)  # (what a process read of a queue, the message actions trust that long)
    visible_and_empty(dlq)
    # DeleteQueue of it deletes it, as on SQS, though the policy of its queue still names it.
    sqs.delete_queue(QueueUrl=dlq)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName="pyface-dlq")
    assert sqs.get_queue_url(QueueName="pyface")["QueueUrl"] == url
    sqs.create_queue(QueueName="pyface-dlq")
    visible_and_empty(dlq)


def test_a_dlq_named_by_a_redrive_policy_stored_before_it_was_flagged_exists(sqs):
    """A ``RedrivePolicy`` naming ``<name>-dlq`` stored before the queue row kept ``meta["dlq"]``
    (an upgrade): its DLQ stays a queue for SQS, empty too, from the stored policy. A queue whose
    policy names another queue, or none, still has no ``<name>-dlq``, as on SQS."""
    url = sqs.create_queue(QueueName="upgraded", Attributes={"RedrivePolicy": redrive("upgraded-dlq")})["QueueUrl"]
    (meta,) = Queue.objects.filter(name="upgraded").values_list("sqs_attributes", flat=True)
    queue_services.set_sqs_attributes("upgraded", {k: v for k, v in (meta or {}).items() if k != "dlq"} or None)
    assert "dlq" not in (Queue.objects.get(name="upgraded").sqs_attributes or {})
    dlq = sqs.get_queue_url(QueueName="upgraded-dlq")["QueueUrl"]
    assert dlq == url + "-dlq"
    dead_letter(sqs, url, "x")
    assert bodies(sqs, dlq) == ["x"]
    time.sleep(queues.CACHE_S + 0.2)
    assert "Messages" not in sqs.receive_message(QueueUrl=dlq)
    assert sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"] == \
        {"ApproximateNumberOfMessages": "0"}
    sqs.create_queue(QueueName="elsewhere")
    other = sqs.create_queue(QueueName="elsewhere-src", Attributes={"RedrivePolicy": redrive("elsewhere")})["QueueUrl"]
    for call in (lambda: sqs.get_queue_url(QueueName="elsewhere-src-dlq"),
                 lambda: sqs.get_queue_attributes(QueueUrl=other + "-dlq", AttributeNames=["All"])):
        with pytest.raises(sqs.exceptions.QueueDoesNotExist):
            call()
