"""SQS FIFO queues on forqapp's SQS face, driven by boto3 against a live ``forq_serve`` (as
tests/test_sqs.py): names and ``FifoQueue``, the FIFO attributes, ``MessageGroupId``,
deduplication (given ids, content-based, per queue or per group, within SQS's 5 minutes and
after), ``SequenceNumber``, per-message delays refused, ``ReceiveRequestAttemptId``, and the DLQ's
type. The deduplication interval's end is tested in this process, the clock patched, by the same
action functions the listener runs."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import Counter

import botocore
import pytest

from forqapp import services, vocab
from forqapp.keys import Key
from forqapp.models import Message, Status
from forqapp.sqs import actions, messages, queues
from forqapp.sqs.protocol import SqsError

from .conftest import ROOT, SECRET, patch_clock, sqs_listener
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


def fifo_queue(sqs, name: str, **attributes: str) -> str:
    return sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true", **attributes})["QueueUrl"]


def error_of(call, **kwargs) -> tuple[str, str]:
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        call(**kwargs)
    return code_of(exc)[0], exc.value.response["Error"]["Message"]


def drain(sqs, url: str) -> list[str]:
    """Receive and delete until the queue answers nothing (a group gives one message at a time)."""
    bodies = []
    while got := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        for m in got:
            bodies.append(m["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return bodies


# --- names and attributes -------------------------------------------------------------------------


def test_fifo_name_and_fifo_queue_go_together(sqs, server):
    url = fifo_queue(sqs, "orders.fifo")
    assert url == f"{server}/{ACCOUNT}/orders.fifo"
    assert sqs.get_queue_url(QueueName="orders.fifo")["QueueUrl"] == url
    assert url in sqs.list_queues(QueueNamePrefix="orders")["QueueUrls"]
    rule = ("The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, "
            "must end with .fifo suffix and be 1 to 80 in length")
    for name, attributes in (("plain.fifo", {}), ("plain.fifo", {"FifoQueue": "false"}),
                             ("plain", {"FifoQueue": "true"}), ("a.b.fifo", {"FifoQueue": "true"}),
                             ("a" * 76 + ".fifo", {"FifoQueue": "true"})):
        assert error_of(sqs.create_queue, QueueName=name, Attributes=attributes) == ("InvalidParameterValue", rule)
    assert sqs.create_queue(QueueName="a" * 75 + ".fifo", Attributes={"FifoQueue": "true"})  # 80 with .fifo
    # FifoQueue=false is a standard queue, as without it.
    assert sqs.create_queue(QueueName="plain", Attributes={"FifoQueue": "false"})
    assert "FifoQueue" not in sqs.get_queue_attributes(QueueUrl=url.replace("orders.fifo", "plain"),
                                                       AttributeNames=["All"])["Attributes"]


def test_fifo_attributes_defaults_values_and_rules(sqs):
    url = fifo_queue(sqs, "attrs.fifo")
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert {k: attrs[k] for k in ("FifoQueue", "ContentBasedDeduplication", "DeduplicationScope",
                                  "FifoThroughputLimit")} == {
        "FifoQueue": "true", "ContentBasedDeduplication": "false", "DeduplicationScope": "queue",
        "FifoThroughputLimit": "perQueue"}
    sqs.set_queue_attributes(QueueUrl=url, Attributes={
        "ContentBasedDeduplication": "true", "DeduplicationScope": "messageGroup",
        "FifoThroughputLimit": "perMessageGroupId"})
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit"])["Attributes"]
    assert attrs == {"ContentBasedDeduplication": "true", "DeduplicationScope": "messageGroup",
                     "FifoThroughputLimit": "perMessageGroupId"}
    # perMessageGroupId needs the messageGroup scope: refused, and nothing changed.
    code, message = error_of(sqs.set_queue_attributes, QueueUrl=url, Attributes={"DeduplicationScope": "queue"})
    assert code == "InvalidAttributeValue" and "DeduplicationScope is messageGroup" in message
    url2 = fifo_queue(sqs, "attrs2.fifo")
    assert error_of(sqs.set_queue_attributes, QueueUrl=url2,
                    Attributes={"FifoThroughputLimit": "perMessageGroupId"})[0] == "InvalidAttributeValue"
    assert error_of(sqs.create_queue, QueueName="attrs3.fifo", Attributes={
        "FifoQueue": "true", "FifoThroughputLimit": "perMessageGroupId"})[0] == "InvalidAttributeValue"
    assert error_of(sqs.get_queue_url, QueueName="attrs3.fifo")[0] == "AWS.SimpleQueueService.NonExistentQueue"
    sqs.create_queue(QueueName="attrs3.fifo", Attributes={
        "FifoQueue": "true", "FifoThroughputLimit": "perMessageGroupId", "DeduplicationScope": "messageGroup"})
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["DeduplicationScope"])["Attributes"] == {
        "DeduplicationScope": "messageGroup"}
    for name, value in (("ContentBasedDeduplication", "yes"), ("DeduplicationScope", "group"),
                        ("FifoThroughputLimit", "perGroup")):
        assert error_of(sqs.set_queue_attributes, QueueUrl=url2, Attributes={name: value})[0] == \
            "InvalidAttributeValue"
    # The type is the queue's for good; the FIFO attributes are a FIFO queue's only.
    code, message = error_of(sqs.set_queue_attributes, QueueUrl=url2, Attributes={"FifoQueue": "false"})
    assert (code, message) == ("InvalidAttributeValue", "Invalid value for the parameter FifoQueue. Reason: "
                               "Modifying queue type is not supported.")
    plain = sqs.create_queue(QueueName="attrs-plain")["QueueUrl"]
    assert error_of(sqs.set_queue_attributes, QueueUrl=plain, Attributes={"FifoQueue": "true"})[0] == \
        "InvalidAttributeValue"
    assert error_of(sqs.set_queue_attributes, QueueUrl=plain, Attributes={"ContentBasedDeduplication": "true"}) \
        == ("InvalidAttributeName", "Unknown Attribute ContentBasedDeduplication.")
    # CreateQueue of an existing FIFO queue: the same attributes, its URL; others, QueueNameExists.
    assert fifo_queue(sqs, "attrs.fifo", ContentBasedDeduplication="true") == url
    assert error_of(sqs.create_queue, QueueName="attrs.fifo", Attributes={
        "FifoQueue": "true", "ContentBasedDeduplication": "false"})[0] == "QueueAlreadyExists"


# --- sends ----------------------------------------------------------------------------------------


def test_message_group_id_is_required_and_delay_seconds_refused(sqs):
    url = fifo_queue(sqs, "needs.fifo")
    assert error_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageDeduplicationId="d") == (
        "MissingParameter", "The request must contain the parameter MessageGroupId.")
    assert error_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageGroupId="g") == (
        "InvalidParameterValue", "The queue should either have ContentBasedDeduplication enabled or "
                                 "MessageDeduplicationId provided explicitly")
    assert error_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageGroupId="g",
                    MessageDeduplicationId="d", DelaySeconds=5) == (
        "InvalidParameterValue", "Value 5 for parameter DelaySeconds is invalid. Reason: The request include "
                                 "parameter that is not valid for this queue type.")
    code, _ = error_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageGroupId="has space",
                       MessageDeduplicationId="d")
    assert code == "InvalidParameterValue"
    code, _ = error_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageGroupId="g",
                       MessageDeduplicationId="d" * 129)
    assert code == "InvalidParameterValue"
    # DelaySeconds=0 is no delay of its own: accepted. Nothing refused above was stored.
    assert sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d",
                            DelaySeconds=0)["MessageId"]
    assert services.queue_info("needs.fifo").counts["ready"] == 1
    # A batch: each entry on its own, but for an entry without a group or a deduplication id, which
    # AWS refuses for the whole batch (InvalidParameterValue, the group's included); nothing is sent.
    out = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "ok", "MessageBody": "y", "MessageGroupId": "g", "MessageDeduplicationId": "e"},
        {"Id": "delayed", "MessageBody": "y", "MessageGroupId": "g", "MessageDeduplicationId": "h",
         "DelaySeconds": 3}])
    assert [e["Id"] for e in out["Successful"]] == ["ok"]
    assert {e["Id"]: e["Code"] for e in out["Failed"]} == {"delayed": "InvalidParameterValue"}
    ready = services.queue_info("needs.fifo").counts["ready"]
    assert error_of(sqs.send_message_batch, QueueUrl=url, Entries=[
        {"Id": "ok", "MessageBody": "y", "MessageGroupId": "g", "MessageDeduplicationId": "i"},
        {"Id": "nogroup", "MessageBody": "y", "MessageDeduplicationId": "f"}]) == (
        "InvalidParameterValue", "The request must contain the parameter MessageGroupId.")
    assert error_of(sqs.send_message_batch, QueueUrl=url, Entries=[
        {"Id": "ok", "MessageBody": "y", "MessageGroupId": "g", "MessageDeduplicationId": "j"},
        {"Id": "nodedup", "MessageBody": "y", "MessageGroupId": "g"}]) == (
        "InvalidParameterValue", "The queue should either have ContentBasedDeduplication enabled or "
                                 "MessageDeduplicationId provided explicitly")
    assert services.queue_info("needs.fifo").counts["ready"] == ready
    # With ContentBasedDeduplication, a batch needs no deduplication id.
    content = fifo_queue(sqs, "needs-content.fifo", ContentBasedDeduplication="true")
    out = sqs.send_message_batch(QueueUrl=content, Entries=[
        {"Id": "a", "MessageBody": "y", "MessageGroupId": "g"}, {"Id": "b", "MessageBody": "z", "MessageGroupId": "g"}])
    assert [e["Id"] for e in out["Successful"]] == ["a", "b"]


def test_queue_delay_seconds_applies_to_a_fifo_queue(sqs):
    url = fifo_queue(sqs, "slow.fifo", DelaySeconds="60")
    sqs.send_message(QueueUrl=url, MessageBody="later", MessageGroupId="g", MessageDeduplicationId="1")
    counts = services.queue_info("slow.fifo").counts
    assert (counts["delayed"], counts["ready"]) == (1, 0)


def test_sequence_numbers_increase_on_sends_and_receives(sqs):
    url = fifo_queue(sqs, "seq.fifo")
    first = sqs.send_message(QueueUrl=url, MessageBody="1", MessageGroupId="g", MessageDeduplicationId="1")
    batch = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": f"e{i}", "MessageBody": str(i), "MessageGroupId": f"g{i}", "MessageDeduplicationId": str(i)}
        for i in range(2, 6)])["Successful"]
    numbers = [first["SequenceNumber"]] + [e["SequenceNumber"] for e in batch]
    assert all(n.isdigit() for n in numbers)
    assert [int(n) for n in numbers] == sorted({int(n) for n in numbers})  # increasing, distinct
    assert numbers == sorted(numbers)  # as text too
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"])["Messages"]
    by_id = {m["MessageId"]: m["Attributes"] for m in got}
    assert by_id[first["MessageId"]]["SequenceNumber"] == first["SequenceNumber"]
    assert by_id[first["MessageId"]]["MessageDeduplicationId"] == "1"
    for entry in batch:
        if entry["MessageId"] in by_id:
            assert by_id[entry["MessageId"]]["SequenceNumber"] == entry["SequenceNumber"]
    # A standard queue's sends have no sequence number.
    plain = sqs.create_queue(QueueName="seq-plain")["QueueUrl"]
    assert "SequenceNumber" not in sqs.send_message(QueueUrl=plain, MessageBody="x")
    # A MessageGroupId is taken on a standard queue too (SQS's fair queues), checked as on a FIFO one.
    assert sqs.send_message(QueueUrl=plain, MessageBody="x", MessageGroupId="tenant-a")["MessageId"]
    assert error_of(sqs.send_message, QueueUrl=plain, MessageBody="x", MessageGroupId="")[0] == \
        "InvalidParameterValue"


def test_a_duplicate_inside_the_window_is_accepted_and_not_delivered_again(sqs):
    url = fifo_queue(sqs, "dedup.fifo")
    first = sqs.send_message(QueueUrl=url, MessageBody="pay 10", MessageGroupId="acct",
                             MessageDeduplicationId="payment-1")
    again = sqs.send_message(QueueUrl=url, MessageBody="pay 10", MessageGroupId="acct",
                             MessageDeduplicationId="payment-1")
    assert (again["MessageId"], again["SequenceNumber"]) == (first["MessageId"], first["SequenceNumber"])
    batch = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "dup", "MessageBody": "pay 10", "MessageGroupId": "acct", "MessageDeduplicationId": "payment-1"},
        {"Id": "new", "MessageBody": "pay 20", "MessageGroupId": "acct", "MessageDeduplicationId": "payment-2"},
        {"Id": "new-again", "MessageBody": "pay 20", "MessageGroupId": "acct", "MessageDeduplicationId": "payment-2"},
    ])["Successful"]
    ids = {e["Id"]: (e["MessageId"], e["SequenceNumber"]) for e in batch}
    assert ids["dup"] == (first["MessageId"], first["SequenceNumber"])
    assert ids["new-again"] == ids["new"] != ids["dup"]
    assert services.queue_info("dedup.fifo").counts["ready"] == 2
    # Received and deleted: a duplicate is still one within the window (SQS keeps tracking the id).
    bodies = drain(sqs, url)
    assert bodies == ["pay 10", "pay 20"]
    late = sqs.send_message(QueueUrl=url, MessageBody="pay 10", MessageGroupId="acct",
                            MessageDeduplicationId="payment-1")
    assert late["MessageId"] == first["MessageId"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)


def test_content_based_deduplication_is_the_body_s_sha256(sqs):
    url = fifo_queue(sqs, "content.fifo", ContentBasedDeduplication="true")
    first = sqs.send_message(QueueUrl=url, MessageBody="same body", MessageGroupId="g",
                             MessageAttributes={"a": {"DataType": "String", "StringValue": "1"}})
    again = sqs.send_message(QueueUrl=url, MessageBody="same body", MessageGroupId="g",
                             MessageAttributes={"a": {"DataType": "String", "StringValue": "2"}})
    assert again["MessageId"] == first["MessageId"]  # the attributes are not hashed
    other = sqs.send_message(QueueUrl=url, MessageBody="other body", MessageGroupId="g")
    assert other["MessageId"] != first["MessageId"]
    # An explicit id overrides the hash, and is the same id as the hash it equals (SQS's rule).
    sha = hashlib.sha256(b"same body").hexdigest()
    assert sqs.send_message(QueueUrl=url, MessageBody="anything", MessageGroupId="g",
                            MessageDeduplicationId=sha)["MessageId"] == first["MessageId"]
    explicit = sqs.send_message(QueueUrl=url, MessageBody="same body", MessageGroupId="g",
                                MessageDeduplicationId="mine")
    assert explicit["MessageId"] != first["MessageId"]
    dedup = []
    while got := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                     MessageSystemAttributeNames=["MessageDeduplicationId"]).get("Messages"):
        for m in got:
            dedup.append((m["Body"], m["Attributes"]["MessageDeduplicationId"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert sorted(dedup) == sorted([("same body", sha), ("other body", hashlib.sha256(b"other body").hexdigest()),
                                    ("same body", "mine")])


def test_deduplication_scope_message_group(sqs):
    url = fifo_queue(sqs, "scoped.fifo", DeduplicationScope="messageGroup")
    a = sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="a", MessageDeduplicationId="d")
    b = sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="b", MessageDeduplicationId="d")
    assert a["MessageId"] != b["MessageId"]  # the same id in two groups: two messages
    assert sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="a",
                            MessageDeduplicationId="d")["MessageId"] == a["MessageId"]
    # A group and an id that would read alike joined are not the same pair.
    c = sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="a:b", MessageDeduplicationId="c")
    d = sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="a", MessageDeduplicationId="b:c")
    assert c["MessageId"] != d["MessageId"]
    # In the queue scope, the id alone.
    url = fifo_queue(sqs, "unscoped.fifo")
    a = sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="a", MessageDeduplicationId="d")
    assert sqs.send_message(QueueUrl=url, MessageBody="y", MessageGroupId="b",
                            MessageDeduplicationId="d")["MessageId"] == a["MessageId"]


# --- message groups ------------------------------------------------------------------------------

def test_a_fifo_receive_takes_as_many_of_one_group_as_it_can_in_order(sqs):
    """As SQS: a receive returns a group's messages in order, as many as asked after its first, all
    to this receiver; the group gives nothing more to anyone while one of them is in flight."""
    url = fifo_queue(sqs, "ordered.fifo")
    assert services.queue_info("ordered.fifo").policy["group_concurrency"] == 1
    for body, group in (("a1", "tenant-a"), ("a2", "tenant-a"), ("b1", "order#7"), ("a3", "tenant-a")):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=body)

    def receive(n: int = 10):
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=n,
                                  MessageSystemAttributeNames=["MessageGroupId"]).get("Messages", [])
        return {m["Body"]: m for m in got}

    assert list(receive(2)) == ["a1", "a2"]  # one group's, in order
    got = receive()
    assert list(got) == ["b1"]  # tenant-a's a3 waits for a1 and a2
    assert got["b1"]["Attributes"]["MessageGroupId"] == "order#7"  # (kept escaped: order=237)
    assert services.peek("ordered.fifo", got["b1"]["MessageId"]).group == "order=237"
    sqs.purge_queue(QueueUrl=url)
    for body, group in (("a1", "tenant-a"), ("a2", "tenant-a"), ("b1", "order#7"), ("a3", "tenant-a")):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=body + "'")
    got = receive()
    assert list(got) == ["a1", "a2", "a3", "b1"]
    assert receive() == {}  # every group has its messages in flight
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got["a1"]["ReceiptHandle"])
    assert receive() == {}  # a2 and a3 still in flight
    # Given back (visibility 0), a2 waits while a3 is in flight; both given back, both come again in order.
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got["a2"]["ReceiptHandle"], VisibilityTimeout=0)
    assert receive() == {}
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got["a3"]["ReceiptHandle"], VisibilityTimeout=0)
    assert list(receive(1)) == ["a2"]
    assert receive() == {}  # a3 waits for a2, given to another receive


def test_a_message_group_scoped_deduplication_id_is_received_as_it_was_sent(sqs):
    url = fifo_queue(sqs, "scoped-ids.fifo", DeduplicationScope="messageGroup")
    sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="a:b", MessageDeduplicationId="c:d")
    (got,) = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["All"])["Messages"]
    assert (got["Attributes"]["MessageGroupId"], got["Attributes"]["MessageDeduplicationId"]) == ("a:b", "c:d")


def test_a_message_group_id_on_a_standard_queue_is_a_group_without_a_limit(sqs):
    url = sqs.create_queue(QueueName="fair")["QueueUrl"]
    for body in ("1", "2"):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="tenant-a")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                              MessageSystemAttributeNames=["All"])["Messages"]
    assert sorted(m["Body"] for m in got) == ["1", "2"]  # no concurrency limit per group
    assert {m["Attributes"]["MessageGroupId"] for m in got} == {"tenant-a"}
    assert "SequenceNumber" not in got[0]["Attributes"]


# --- ReceiveRequestAttemptId ---------------------------------------------------------------------


def test_a_retried_receive_attempt_answers_the_same_messages(sqs):
    url = fifo_queue(sqs, "attempts.fifo")
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=str(i), MessageGroupId=f"g{i}", MessageDeduplicationId=str(i))

    def receive(attempt):
        return sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, ReceiveRequestAttemptId=attempt,
                                   VisibilityTimeout=60).get("Messages", [])

    first = receive("try-1")
    assert len(first) == 2
    again = receive("try-1")
    assert [(m["MessageId"], m["ReceiptHandle"]) for m in again] == \
        [(m["MessageId"], m["ReceiptHandle"]) for m in first]
    assert services.queue_info("attempts.fifo").counts["in_flight"] == 2  # nothing more was taken
    # A retry renews the leases (SQS resets the visibility timeout): here to its own 120 s.
    leases = dict(Message.objects.filter(queue="attempts.fifo", status=Status.PROCESSING)
                  .values_list("id", "process_after"))
    renewed = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, ReceiveRequestAttemptId="try-1",
                                  VisibilityTimeout=120)["Messages"]
    assert [m["ReceiptHandle"] for m in renewed] == [m["ReceiptHandle"] for m in first]
    for message_id, lease_end in Message.objects.filter(id__in=list(leases)).values_list("id", "process_after"):
        assert lease_end >= leases[message_id] + 59_000
    other = receive("try-2")
    assert {m["MessageId"] for m in other}.isdisjoint({m["MessageId"] for m in first})
    # Once one of its messages is changed (here: made visible again), the attempt is a new receive.
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"], VisibilityTimeout=0)
    third = receive("try-1")
    assert [m["ReceiptHandle"] for m in third] != [m["ReceiptHandle"] for m in first]
    assert error_of(sqs.receive_message, QueueUrl=url, ReceiveRequestAttemptId="has space")[0] == \
        "InvalidParameterValue"


# --- the deduplication interval, the clock patched (the listener's action functions, in process) ----


def _ctx() -> actions.Context:
    return actions.Context(Key("root", "secret", root=True), queues.Origin("http", "testserver", REGION))


def test_the_deduplication_interval_is_five_minutes(monkeypatch):
    now = [services.now_ms()]
    patch_clock(monkeypatch, lambda: now[0])
    ctx = _ctx()
    url = actions.create_queue(ctx, {"QueueName": "window.fifo", "Attributes": {"FifoQueue": "true"}})["QueueUrl"]
    send = {"QueueUrl": url, "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "once"}
    first = actions.send_message(ctx, send)
    now[0] += 299_999  # inside: the same message
    assert actions.send_message(ctx, send)["MessageId"] == first["MessageId"]
    assert services.queue_info("window.fifo").counts["ready"] == 1
    now[0] += 1  # five minutes after the first send: a new message
    second = actions.send_message(ctx, send)
    assert second["MessageId"] != first["MessageId"]
    assert int(second["SequenceNumber"]) > int(first["SequenceNumber"])
    assert services.queue_info("window.fifo").counts["ready"] == 2


# --- dead-letter queues ---------------------------------------------------------------------------


def test_a_fifo_queue_s_dead_letter_queue_is_fifo(sqs):
    dlq_url = fifo_queue(sqs, "work-dlq.fifo")
    assert dlq_url.endswith("/work-dlq.fifo")
    url = fifo_queue(sqs, "work.fifo")
    arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:"
    same_type = "Reason: Dead-letter queue must be same type of queue as the source.."
    policy = json.dumps({"deadLetterTargetArn": arn + "work-dlq", "maxReceiveCount": 2})
    code, message = error_of(sqs.set_queue_attributes, QueueUrl=url, Attributes={"RedrivePolicy": policy})
    assert code == "InvalidParameterValue" and message.endswith(same_type)
    plain = sqs.create_queue(QueueName="work")["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": arn + "work-dlq.fifo", "maxReceiveCount": 2})
    code, message = error_of(sqs.set_queue_attributes, QueueUrl=plain, Attributes={"RedrivePolicy": policy})
    assert code == "InvalidParameterValue" and message.endswith(same_type)
    # The FIFO queue's own: its DLQ, FIFO too, named as SQS names a FIFO queue.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": json.dumps(
        {"deadLetterTargetArn": arn + "work-dlq.fifo", "maxReceiveCount": 1})})
    attrs = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["All"])["Attributes"]
    assert attrs["FifoQueue"] == "true" and attrs["QueueArn"] == arn + "work-dlq.fifo"
    assert dlq_url in sqs.list_queues(QueueNamePrefix="work-dlq")["QueueUrls"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="poison", MessageGroupId="g", MessageDeduplicationId="p")
    got = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]
    assert got[0]["MessageId"] == sent["MessageId"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # its one receive used: dead-lettered
    dead = sqs.receive_message(QueueUrl=dlq_url, MessageSystemAttributeNames=["All"])["Messages"]
    assert dead[0]["MessageId"] == sent["MessageId"]
    assert dead[0]["Attributes"]["DeadLetterQueueSourceArn"] == arn + "work.fifo"
    assert dead[0]["Attributes"]["SequenceNumber"] == sent["SequenceNumber"]


def test_sqs_error_shapes_in_process():
    with pytest.raises(SqsError) as exc:
        queues.check_name("x.fifo", False)
    assert exc.value.shape == "InvalidParameterValue"
    assert queues.to_forq("jobs-dlq.fifo") == "jobs.fifo-dlq" and queues.to_sqs("jobs.fifo-dlq") == "jobs-dlq.fifo"


def test_the_docs_fifo_example_runs_as_written(server, monkeypatch, capsys):
    """docs/how-to/sqs.md's FIFO block, with only its endpoint URL pointed at this server."""
    page = (ROOT / "docs" / "how-to" / "sqs.md").read_text()
    (block,) = [b for b in re.findall(r"^```python\n(.*?)^```", page, flags=re.S | re.M)
                if b.startswith("# payments.py")]
    monkeypatch.setenv("FORQ_AUTH_SECRET", SECRET)
    exec(compile(block.replace("http://localhost:8082", server), "sqs.md", "exec"), {})  # noqa: S102 - the docs' code
    assert capsys.readouterr().out == "True True\ncharge 42 True\n"


def test_every_message_group_id_character_maps_to_a_forqapp_group_and_back():
    every = "".join(chr(c) for c in range(0x21, 0x7F))  # SQS's: alphanumeric and punctuation
    for text in (*every, every[:42], "a=b", "=41", "order#7"):
        group = messages.to_group(text)
        assert vocab.GROUP_NAME.fullmatch(group), text
        assert messages.from_group(group) == text
    assert len({messages.to_group(c) for c in every}) == len(every)  # one group per id
    with pytest.raises(SqsError):
        messages.to_group("#" * 43)  # 129 characters escaped


def test_consumers_in_parallel_see_each_group_in_order_one_receive_at_a_time(sqs, server):
    """4 boto3 consumers on one FIFO queue, 20 groups × 5 messages sent interleaved; one delivery in
    five is given back once (visibility 0), with the rest of its group in that answer: per group, no
    two receives hold it at once, and what is deleted follows the send order."""
    url = fifo_queue(sqs, "parallel.fifo")
    groups, per_group = 20, 5
    entries = [{"Id": f"g{g}-{i}", "MessageBody": f"{g}:{i}", "MessageGroupId": f"tenant-{g}",
                "MessageDeduplicationId": f"{g}-{i}"} for i in range(per_group) for g in range(groups)]
    for start in range(0, len(entries), 10):
        assert not sqs.send_message_batch(QueueUrl=url, Entries=entries[start:start + 10])["Failed"]
    lock = threading.Lock()
    held: set[str] = set()
    done: dict[str, list[int]] = {f"tenant-{g}": [] for g in range(groups)}
    given_back: set[str] = set()
    problems: list[str] = []
    deadline = time.monotonic() + 60

    def consume() -> None:
        own = client(server)
        while time.monotonic() < deadline:
            with lock:
                if sum(map(len, done.values())) == groups * per_group or problems:
                    return
            got = own.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                      MessageSystemAttributeNames=["MessageGroupId"]).get("Messages", [])
            left = Counter(m["Attributes"]["MessageGroupId"] for m in got)  # a group's messages come together
            with lock:  # every group of the answer held from now until its last message is settled
                for group in left:
                    if group in held:
                        problems.append(f"{group}: delivered while another of its messages was held")
                    held.add(group)
            failed: set[str] = set()  # a group whose message this consumer gave back: the rest of it too
            for m in got:
                group, body = m["Attributes"]["MessageGroupId"], m["Body"]
                g, i = map(int, body.split(":"))
                with lock:
                    back = group in failed or ((g * per_group + i) % 5 == 0 and body not in given_back)
                    if back and group not in failed:
                        given_back.add(body)
                        failed.add(group)
                    elif not back:
                        done[group].append(i)
                    left[group] -= 1
                    if not left[group]:
                        held.discard(group)  # (before the settle: its group's next may come only after it)
                if back:
                    own.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
                else:
                    own.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

    threads = [threading.Thread(target=consume) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert problems == []
    assert done == {f"tenant-{g}": list(range(per_group)) for g in range(groups)}
    assert len(given_back) == groups * per_group // 5  # each came again, in its place
