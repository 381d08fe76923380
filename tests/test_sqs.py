"""Issue 17: the SQS-compatible endpoint, driven by boto3 (and the AWS CLI) against a live
``forq_serve`` with ``FORQ_SQS_ADDR`` set. The MD5s are checked against an implementation of AWS's
algorithm written here from the SQS documentation, not against forqapp's.

The same module runs twice: with today's boto3 (SQS's JSON 1.0 protocol) and, in
scripts/sqs-query-venv.sh's venv, with the last boto3 from before SQS moved to JSON (its query
protocol: form-encoded requests, XML answers). :data:`PROTOCOL` says which this run's botocore
speaks, and every request a test's client sends is checked to be of that protocol."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3
import botocore
import botocore.session
import httpx
import pytest
from botocore.config import Config

import forqapp
from forqapp import services
from forqapp.models import Message, Queue

from .conftest import METRICS_SECRET, ROOT, SECRET, sqs_listener, subprocess_env

pytestmark = pytest.mark.django_db(transaction=True)

REGION = "eu-west-3"
ACCOUNT = "000000000000"
SENT_ATTRIBUTES = {"origin": "boto3", "AWS.SenderId": "forq-root"}  # what the other faces see (the SenderId too)
KEYS_SECRET = "sqs-test-keys-secret-0123456789abcdef"  # noqa: S105 - seals scoped keys, here and in the server


# --- the digests, from the SQS documentation ("Calculating the MD5 message digest for message attributes") ---


def aws_md5_of_attributes(attributes: dict) -> str:
    """Sort by name; for each: name, data type, transport type, value; every string and binary
    value preceded by its length as 4 bytes (big-endian); transport 1 for String/Number, 2 for Binary."""
    out = bytearray()
    for name in sorted(attributes):
        attr = attributes[name]
        for text in (name, attr["DataType"]):
            data = text.encode()
            out += len(data).to_bytes(4, "big") + data
        if "BinaryValue" in attr:
            value = attr["BinaryValue"]
            value = value if isinstance(value, bytes) else base64.b64decode(value)
            out += b"\x02" + len(value).to_bytes(4, "big") + value
        else:
            data = attr["StringValue"].encode()
            out += b"\x01" + len(data).to_bytes(4, "big") + data
    return hashlib.md5(bytes(out)).hexdigest()  # noqa: S324 - SQS's digest


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()  # noqa: S324 - SQS's digest


# --- the server -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(django_db_blocker):
    with sqs_listener(django_db_blocker, {"FORQ_KEYS_SECRET": KEYS_SECRET}) as (url, api):
        LIVE["api"] = api.url
        yield url


LIVE: dict[str, str] = {}
#: The protocol this botocore's SQS model speaks: "json" (botocore >= 1.31.81) or "query" (before).
PROTOCOL = botocore.session.get_session().get_service_model("sqs").metadata["protocol"]
BIN = Path(sys.executable).parent  # this venv's: its AWS CLI is of its botocore
CONTENT_TYPES = {"json": "application/x-amz-json-1.0", "query": "application/x-www-form-urlencoded"}
SENT: list[str] = []  # the content type of every request the test's clients sent


def _seen(request, **kwargs) -> None:
    SENT.append(request.headers.get("Content-Type", b"").decode().partition(";")[0])


def client(url: str, key_id: str = "forq-root", secret: str = SECRET, **config):
    sqs = boto3.client(
        "sqs", endpoint_url=url, region_name=REGION, aws_access_key_id=key_id, aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, **config))
    sqs.meta.events.register("before-send.sqs", _seen)
    return sqs


@pytest.fixture(autouse=True)
def _requests_of_this_protocol():
    """Every request boto3 sent in the test is of :data:`PROTOCOL` (the query-era boto3 really
    sends form-encoded requests)."""
    SENT.clear()
    yield
    assert set(SENT) <= {CONTENT_TYPES[PROTOCOL]}, (PROTOCOL, set(SENT))


def modeled(sqs, shape: str) -> type[Exception]:
    """The client's exception class of an SQS error shape. The query-era botocore has none for
    the shapes SQS added with JSON (``InvalidAttributeValue``): a ``ClientError`` there, whose
    ``Error.Code`` the tests check as well."""
    return getattr(sqs.exceptions, shape, botocore.exceptions.ClientError)


def system_attributes(sqs, names: list[str]) -> dict[str, list[str]]:
    """ReceiveMessage's system attribute names: ``MessageSystemAttributeNames``, or on the
    query-era botocore (which predates it) the deprecated ``AttributeNames``, which asks the same."""
    model = sqs.meta.service_model.operation_model("ReceiveMessage").input_shape
    key = "MessageSystemAttributeNames" if "MessageSystemAttributeNames" in model.members else "AttributeNames"
    return {key: names}


@pytest.fixture
def sqs(server):
    services.forget_policies()
    return client(server)


def code_of(exc_info) -> tuple[str, str, int]:
    err = exc_info.value.response
    return err["Error"]["Code"], type(exc_info.value).__name__, err["ResponseMetadata"]["HTTPStatusCode"]


def test_the_client_speaks_its_botocores_protocol(sqs):
    """What :func:`_requests_of_this_protocol` checks is seen: boto3's requests, of the protocol
    of this botocore's SQS model (scripts/sqs-query-venv.sh checks its botocore's is "query")."""
    sqs.list_queues()
    assert SENT == [CONTENT_TYPES[PROTOCOL]]


# --- queues -----------------------------------------------------------------------------------------


def test_create_get_list_delete_queue(sqs, server):
    url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    assert url == f"{server}/{ACCOUNT}/orders"  # no trailing slash (moto PR #9711)
    assert sqs.create_queue(QueueName="orders")["QueueUrl"] == url  # idempotent
    assert sqs.get_queue_url(QueueName="orders")["QueueUrl"] == url
    # A queue forqapp creates gets SQS's defaults, and nothing dead-letters without a redrive policy.
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["VisibilityTimeout"] == "30"
    assert attrs["MessageRetentionPeriod"] == "345600"
    assert attrs["QueueArn"] == f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders"
    assert "RedrivePolicy" not in attrs
    assert Queue.objects.get(name="orders").max_attempts == 0  # unlimited
    assert url in sqs.list_queues()["QueueUrls"]
    # A URL with a trailing slash names the same queue.
    sqs.send_message(QueueUrl=url + "/", MessageBody="x")
    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as exc:
        sqs.get_queue_url(QueueName="orders")
    assert code_of(exc) == ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", 400)
    # AWS's words, which differ by protocol (moto's aws_verified tests check them).
    assert exc.value.response["Error"]["Message"] == {
        "json": "The specified queue does not exist.",
        "query": "The specified queue does not exist for this wsdl version."}[PROTOCOL]


def test_get_queue_url_of_a_missing_queue_is_an_error_not_a_url(sqs):
    # ElasticMQ #825 answered a URL for a queue that does not exist.
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName="never-made")
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.send_message(QueueUrl=f"http://x/{ACCOUNT}/never-made", MessageBody="x")
    assert not Message.objects.filter(queue="never-made").exists()  # nothing created on the way
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_attributes(QueueUrl="http://x/999999999999/never-made")


def test_create_queue_with_different_attributes_is_queue_name_exists(sqs):
    sqs.create_queue(QueueName="exists", Attributes={"VisibilityTimeout": "40"})
    sqs.create_queue(QueueName="exists", Attributes={"VisibilityTimeout": "40"})
    with pytest.raises(sqs.exceptions.QueueNameExists) as exc:
        sqs.create_queue(QueueName="exists", Attributes={"VisibilityTimeout": "41"})
    assert code_of(exc) == ("QueueAlreadyExists", "QueueNameExists", 400)


@pytest.mark.parametrize(("name", "value"), [
    ("VisibilityTimeout", "43201"), ("VisibilityTimeout", "-1"), ("DelaySeconds", "901"),
    ("ReceiveMessageWaitTimeSeconds", "21"), ("MessageRetentionPeriod", "59"),
    ("MessageRetentionPeriod", "1209601"), ("MaximumMessageSize", "1023"), ("MaximumMessageSize", "1048577"),
    ("VisibilityTimeout", "abc"), ("RedrivePolicy", "{not json"), ("RedrivePolicy", "[" * 100_000),
    ("RedrivePolicy", '{"deadLetterTargetArn": "arn:aws:sqs:eu-west-3:000000000000:bad-dlq", "maxReceiveCount": 0}'),
])
def test_out_of_range_attributes_are_refused_and_not_stored(sqs, name, value):
    with pytest.raises(modeled(sqs, "InvalidAttributeValue")) as exc:
        sqs.create_queue(QueueName="bad", Attributes={name: value})
    assert code_of(exc)[0] == "InvalidAttributeValue"
    assert not Queue.objects.filter(name="bad").exists()
    url = sqs.create_queue(QueueName="bad")["QueueUrl"]
    with pytest.raises(modeled(sqs, "InvalidAttributeValue")) as exc:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "10", name: value})
    assert code_of(exc)[::2] == ("InvalidAttributeValue", 400)
    # moto stored out-of-range values: here nothing of the refused call is.
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"] == \
        {"VisibilityTimeout": "30"}


def test_unknown_and_read_only_attribute_names(sqs):
    url = sqs.create_queue(QueueName="names")["QueueUrl"]
    for attributes in ({"Colour": "blue"}, {"ApproximateNumberOfMessages": "3"}, {"QueueArn": "x"}):
        with pytest.raises(sqs.exceptions.InvalidAttributeName):
            sqs.set_queue_attributes(QueueUrl=url, Attributes=attributes)
    with pytest.raises(sqs.exceptions.InvalidAttributeName):
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Colour"])


def test_an_unknown_attribute_name_with_all_is_refused(sqs):
    """Audit finding 5f: GetQueueAttributes with ["All", "Bogus"] answered every attribute."""
    url = sqs.create_queue(QueueName="attr-all")["QueueUrl"]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All", "Bogus"])
    assert code_of(exc)[::2] == ("InvalidAttributeName", 400)
    assert "QueueArn" in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]


def test_set_and_get_every_attribute(sqs):
    url = sqs.create_queue(QueueName="attrs")["QueueUrl"]
    dlq_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:attrs-dlq"
    sqs.set_queue_attributes(QueueUrl=url, Attributes={
        "VisibilityTimeout": "45", "MessageRetentionPeriod": "86400", "DelaySeconds": "2",
        "ReceiveMessageWaitTimeSeconds": "3", "MaximumMessageSize": "2048",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 4}),
    })
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert {k: attrs[k] for k in ("VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds",
                                  "ReceiveMessageWaitTimeSeconds", "MaximumMessageSize")} == {
        "VisibilityTimeout": "45", "MessageRetentionPeriod": "86400", "DelaySeconds": "2",
        "ReceiveMessageWaitTimeSeconds": "3", "MaximumMessageSize": "2048"}
    assert json.loads(attrs["RedrivePolicy"]) == {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 4}
    assert int(attrs["CreatedTimestamp"]) <= int(attrs["LastModifiedTimestamp"]) <= time.time() + 1
    # The policy fields every face sees:
    info = forqapp.queue_info("attrs")
    assert info.policy["visibility_timeout"] == 45 and info.policy["retention"] == 86400
    assert info.policy["max_attempts"] == 4
    # A body over MaximumMessageSize is refused.
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sqs.send_message(QueueUrl=url, MessageBody="x" * 2049)
    assert code_of(exc)[0] == "InvalidParameterValue"
    # Removing the redrive policy: nothing dead-letters any more.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": ""})
    assert "RedrivePolicy" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert forqapp.queue_info("attrs").policy["max_attempts"] == "unlimited"


def test_a_redrive_target_must_exist(sqs):
    """Any existing queue may be the target (tests/test_sqs_dlq.py); one that does not exist is
    refused, as on SQS."""
    policy = json.dumps({"deadLetterTargetArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:elsewhere", "maxReceiveCount": 3})
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sqs.create_queue(QueueName="target", Attributes={"RedrivePolicy": policy})
    assert code_of(exc)[0] == "InvalidParameterValue"
    assert "Dead letter target does not exist" in exc.value.response["Error"]["Message"]
    assert not Queue.objects.filter(name="target").exists()
    sqs.create_queue(QueueName="elsewhere")
    url = sqs.create_queue(QueueName="target", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    assert json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"][
        "RedrivePolicy"])["deadLetterTargetArn"].endswith(":elsewhere")


def test_list_queues_prefix_and_pages(sqs):
    for i in range(5):
        sqs.create_queue(QueueName=f"page-{i}")
    sqs.create_queue(QueueName="other")
    assert [u.rsplit("/", 1)[1] for u in sqs.list_queues(QueueNamePrefix="page-")["QueueUrls"]] == \
        [f"page-{i}" for i in range(5)]
    first = sqs.list_queues(QueueNamePrefix="page-", MaxResults=2)
    assert [u.rsplit("/", 1)[1] for u in first["QueueUrls"]] == ["page-0", "page-1"]
    second = sqs.list_queues(QueueNamePrefix="page-", MaxResults=2, NextToken=first["NextToken"])
    third = sqs.list_queues(QueueNamePrefix="page-", MaxResults=2, NextToken=second["NextToken"])
    assert [u.rsplit("/", 1)[1] for u in second["QueueUrls"] + third["QueueUrls"]] == ["page-2", "page-3", "page-4"]
    assert "NextToken" not in third
    for bad in (0, 1001):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            sqs.list_queues(MaxResults=bad)
        assert code_of(exc)[0] == "InvalidParameterValue"
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix="nothing-")


def test_list_queues_refuses_a_garbage_next_token(sqs):
    """Audit finding 5c: NextToken "!!!" silently restarted at page 1."""
    for name in ("tok-a", "tok-b"):
        sqs.create_queue(QueueName=name)
    page = sqs.list_queues(QueueNamePrefix="tok-", MaxResults=1)
    assert sqs.list_queues(QueueNamePrefix="tok-", MaxResults=1, NextToken=page["NextToken"])["QueueUrls"][0] \
        .endswith("/tok-b")
    for token in ("!!!", "====", page["NextToken"] + "!", "AAAA"):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            sqs.list_queues(QueueNamePrefix="tok-", MaxResults=1, NextToken=token)
        assert code_of(exc)[::2] == ("InvalidParameterValue", 400), token


def test_dlq_suffix_alone_is_a_clear_invalid_parameter_value(sqs):
    """Audit finding 5b: CreateQueue "-dlq" answered "invalid queue name ''"."""
    for call in (lambda: sqs.create_queue(QueueName="-dlq"), lambda: sqs.get_queue_url(QueueName="-dlq")):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            call()
        assert code_of(exc)[::2] == ("InvalidParameterValue", 400)
        assert "empty name" in str(exc.value)


def test_queue_names(sqs):
    for bad in ("has space", "a" * 81, "dot.name", "/my/test", ""):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            sqs.create_queue(QueueName=bad)
        assert code_of(exc)[0] == "InvalidParameterValue", bad
        # An empty name is given, not missing: SQS's rule, as for any other bad name.
        assert exc.value.response["Error"]["Message"] == \
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length", bad
    assert sqs.create_queue(QueueName="A_b-9" * 16)["QueueUrl"].endswith("/" + "A_b-9" * 16)  # SQS's 80


def test_an_80_character_queue_and_its_84_character_dlq(sqs):
    """SQS's longest name is forqapp's too; its dead-letter queue ``<name>-dlq`` (84 characters, a
    name no SQS client makes) is redriven to, reached by its URL and requeued from."""
    name = "L" * 80
    policy = json.dumps({"deadLetterTargetArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}-dlq", "maxReceiveCount": 1})
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "0", "RedrivePolicy": policy})["QueueUrl"]
    assert url.endswith("/" + name) and sqs.get_queue_url(QueueName=name)["QueueUrl"] == url
    sent = sqs.send_message(QueueUrl=url, MessageBody="eighty")["MessageId"]
    assert sqs.receive_message(QueueUrl=url)["Messages"][0]["MessageId"] == sent
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # the second receive redrives it
    row = Message.objects.get(id=sent)
    assert (row.queue, row.is_dlq) == (name + "-dlq", True)
    dlq_url = url + "-dlq"
    assert sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"])[
        "Attributes"] == {"ApproximateNumberOfMessages": "1"}
    assert [u.rsplit("/", 1)[1] for u in sqs.list_queues(QueueNamePrefix="LLL")["QueueUrls"]] == [name, name + "-dlq"]
    assert services.requeue(name + "-dlq") == 1  # the admin's requeue
    back = sqs.receive_message(QueueUrl=url)["Messages"][0]
    assert (back["MessageId"], back["Body"]) == (sent, "eighty")
    sqs.delete_message(QueueUrl=url, ReceiptHandle=back["ReceiptHandle"])
    assert not Message.objects.filter(id=sent).exists()
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):  # 81 characters: no queue's URL
        sqs.get_queue_attributes(QueueUrl=url + "L", AttributeNames=["All"])


def test_purge_queue(sqs):
    url = sqs.create_queue(QueueName="purged")["QueueUrl"]
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=str(i))
    sqs.purge_queue(QueueUrl=url)
    assert "Messages" not in sqs.receive_message(QueueUrl=url)


# --- messages ---------------------------------------------------------------------------------------


ATTRIBUTES = {
    "city": {"DataType": "String", "StringValue": "Zürich"},
    "price": {"DataType": "Number", "StringValue": "9.50"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xffbinary"},
    "kind.sub": {"DataType": "String.custom", "StringValue": "x"},
}


def test_send_and_receive_with_md5s_checked_independently(sqs):
    url = sqs.create_queue(QueueName="md5")["QueueUrl"]
    body = "héllo wörld ✓"
    sent = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=ATTRIBUTES)
    assert sent["MD5OfMessageBody"] == md5(body)
    assert sent["MD5OfMessageAttributes"] == aws_md5_of_attributes(ATTRIBUTES)
    plain = sqs.send_message(QueueUrl=url, MessageBody="no attributes")
    assert "MD5OfMessageAttributes" not in plain  # omitted when there are none
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"],
                              **system_attributes(sqs, ["All"]))["Messages"]
    assert [m["Body"] for m in got] == [body, "no attributes"]
    first = got[0]
    assert first["MessageId"] == sent["MessageId"]
    assert first["MD5OfBody"] == md5(body)
    assert first["MessageAttributes"]["blob"]["BinaryValue"] == b"\x00\x01\xffbinary"
    assert first["MessageAttributes"]["price"] == {"DataType": "Number", "StringValue": "9.50"}
    assert first["MD5OfMessageAttributes"] == aws_md5_of_attributes(first["MessageAttributes"])
    assert "MD5OfMessageAttributes" not in got[1]
    assert first["Attributes"]["ApproximateReceiveCount"] == "1"
    assert abs(int(first["Attributes"]["SentTimestamp"]) - time.time() * 1000) < 60_000
    assert "ApproximateFirstReceiveTimestamp" in first["Attributes"]


def test_message_attribute_names_filter(sqs):
    url = sqs.create_queue(QueueName="filter")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="b", MessageAttributes=ATTRIBUTES)
    for names, expected in ((["All"], set(ATTRIBUTES)), ([".*"], set(ATTRIBUTES)), (["kind.*"], {"kind.sub"}),
                            (["city", "price"], {"city", "price"}), (None, set())):
        kwargs = {"MessageAttributeNames": names} if names else {}
        got = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0, **kwargs)["Messages"][0]
        assert set(got.get("MessageAttributes", {})) == expected, names
        if expected:  # the digest of what is returned
            assert got["MD5OfMessageAttributes"] == aws_md5_of_attributes(got["MessageAttributes"])
        else:
            assert "MD5OfMessageAttributes" not in got
    # The deprecated AttributeNames still asks for system attributes.
    got = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0, AttributeNames=["ApproximateReceiveCount"])
    assert got["Messages"][0]["Attributes"] == {"ApproximateReceiveCount": "6"}


def test_attributes_sqs_cannot_carry_do_not_poison_a_receive(sqs):
    """Audit finding 3: a message whose attributes (set through v2) are not what their SQS type
    says made every ReceiveMessage that took it a 500, after the claim: the batch stayed leased."""
    url = sqs.create_queue(QueueName="c1")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="good before")
    stored = {"k;Binary": "abcde", "j;Binary.raw": "!!", "n;Number": "twelve", "m;Number.int": "1e999",
              "sp ace": "x", "e": "", "ctl": "a\u0001b", "ok;Binary": "aGk=", "q;Number": "7", "q": "plain"}
    answer = api("POST", "/api/v2/queues/c1/messages", {"content": "poison", "attributes": stored})
    assert answer.status_code == 201, answer.text
    sqs.send_message(QueueUrl=url, MessageBody="good after")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])["Messages"]
    assert [m["Body"] for m in got] == ["good before", "poison", "good after"]
    poison = got[1]
    assert poison["MessageAttributes"] == {
        "k": {"DataType": "String", "StringValue": "abcde"},  # not base64: a String
        "j": {"DataType": "String", "StringValue": "!!"},
        "q": {"DataType": "String", "StringValue": "plain"},  # "q;Number" names it too: the first key wins
        "n": {"DataType": "String", "StringValue": "twelve"},  # not a number: a String
        "m": {"DataType": "String", "StringValue": "1e999"},  # out of SQS's range: a String
        "ok": {"DataType": "Binary", "BinaryValue": b"hi"},
    }  # "sp ace" (a name SQS refuses), "e" (empty), "ctl" (a character SQS refuses): left out
    assert poison["MD5OfMessageAttributes"] == aws_md5_of_attributes(poison["MessageAttributes"])
    # What came back passes botocore's validation and the server's: it can be sent on as it is.
    sqs.send_message(QueueUrl=url, MessageBody="forwarded", MessageAttributes=poison["MessageAttributes"])
    assert sqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(got)])["Successful"]
    assert Message.objects.filter(queue="c1").count() == 1  # the forwarded one


def test_a_receive_answer_that_cannot_be_made_gives_back_what_it_claimed(monkeypatch):
    """Audit finding 3: the claim commits before the answer is made; if making it fails, every
    message claimed is released (its receive not counted), none stays leased undelivered."""
    from forqapp.sqs import actions, messages, queues

    for body in ("a", "b"):
        services.send("gb", body)
    ctx = actions.Context(None, queues.Origin("http", "localhost", REGION))  # type: ignore[arg-type]
    plan = actions.ReceivePlan("gb", 10, 0, None, set(), lambda name: True)
    got = actions.take("gb", plan)
    assert len(got) == 2

    def broken(message, *args):
        if message.content == "b":
            raise RuntimeError("cannot answer")
        return {}

    monkeypatch.setattr(messages, "received", broken)
    with pytest.raises(RuntimeError):
        actions.receive_answer(ctx, plan, got)
    rows = Message.objects.filter(queue="gb")
    assert sorted(rows.values_list("content", "attempts")) == [("a", 0), ("b", 0)]
    assert len(actions.take("gb", plan)) == 2  # ready again at once


def test_an_attribute_with_both_string_and_binary_values_is_refused(sqs):
    """Audit finding 5e: a String attribute with a StringValue and a BinaryValue was accepted."""
    url = sqs.create_queue(QueueName="both-values")["QueueUrl"]
    for data_type in ("String", "Binary", "Number"):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            sqs.send_message(QueueUrl=url, MessageBody="x", MessageAttributes={
                "a": {"DataType": data_type, "StringValue": "1", "BinaryValue": b"1"}})
        assert code_of(exc)[::2] == ("InvalidParameterValue", 400)
    assert not Message.objects.filter(queue="both-values").exists()


def test_numbers_within_sqs_range_and_precision_are_kept(sqs):
    url = sqs.create_queue(QueueName="numbers")["QueueUrl"]
    for number in ("0", "-0.000", "1e126", "-9.9e126", "1e-128", "1" * 38, "1" * 38 + "000", "+.5", "5.",
                   "1e0000000001", "0e99999999"):
        sqs.send_message(QueueUrl=url, MessageBody="x",
                         MessageAttributes={"n": {"DataType": "Number", "StringValue": number}})
        got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"][0]
        assert got["MessageAttributes"]["n"]["StringValue"] == number
        sqs.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])


def test_bad_messages_are_refused(sqs):
    url = sqs.create_queue(QueueName="badmsg")["QueueUrl"]
    with pytest.raises(sqs.exceptions.InvalidMessageContents):
        sqs.send_message(QueueUrl=url, MessageBody="bell \x07")
    too_many = {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)}
    for kwargs in ({"MessageAttributes": too_many}, {"DelaySeconds": 901},
                   {"MessageAttributes": {"n": {"DataType": "Number", "StringValue": "abc"}}},
                   *({"MessageAttributes": {"n": {"DataType": "Number", "StringValue": number}}}
                     for number in ("1e127", "1e999", "1" * 39, "1e-129", "0.001e-126", "9" * 4400)),
                   {"MessageAttributes": {"n": {"DataType": "Float", "StringValue": "1"}}},
                   {"MessageDeduplicationId": "d"}):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            sqs.send_message(QueueUrl=url, MessageBody="x", **kwargs)
        assert code_of(exc)[0] == "InvalidParameterValue", kwargs
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11)
    assert code_of(exc)[0] == "InvalidParameterValue"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sqs.receive_message(QueueUrl=url, WaitTimeSeconds=21)
    assert code_of(exc)[0] == "InvalidParameterValue"
    assert not Message.objects.filter(queue="badmsg").exists()


def test_a_long_poll_whose_client_left_does_not_swallow_a_message(sqs, server):
    """A ReceiveMessage waiting when its client goes: the wait ends there, and a message sent
    afterwards is not claimed for nobody (it would stay invisible for its visibility timeout)."""
    url = sqs.create_queue(QueueName="left-early")["QueueUrl"]
    impatient = client(server, read_timeout=0.5)
    with pytest.raises(botocore.exceptions.ReadTimeoutError):
        impatient.receive_message(QueueUrl=url, WaitTimeSeconds=5)
    time.sleep(0.3)  # the server has seen the disconnect
    sqs.send_message(QueueUrl=url, MessageBody="for the next one")
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"]
    assert [m["Body"] for m in got] == ["for the next one"]
    row = Message.objects.get(queue="left-early")
    assert row.attempts == 1


def test_maximum_message_size_is_what_the_server_stores(sqs):
    # SQS allows 1 MiB, and so does the SQS listener (FORQ_SQS_MAX_MESSAGE_BYTES), whatever the
    # other faces' FORQ_MAX_CONTENT_BYTES (262,144 by default).
    url = sqs.create_queue(QueueName="big")["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])["Attributes"] == \
        {"MaximumMessageSize": "1048576"}
    body = "é" * (1_048_576 // 2)
    sqs.send_message(QueueUrl=url, MessageBody=body)
    assert sqs.receive_message(QueueUrl=url)["Messages"][0]["Body"] == body
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sqs.send_message(QueueUrl=url, MessageBody=body + "x")
    assert code_of(exc)[0] == "InvalidParameterValue"
    with pytest.raises(modeled(sqs, "InvalidAttributeValue")) as exc:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "1048577"})
    assert code_of(exc)[::2] == ("InvalidAttributeValue", 400)


def test_delay_seconds_of_the_message_and_of_the_queue(sqs):
    url = sqs.create_queue(QueueName="delayed", Attributes={"DelaySeconds": "1"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="queue delay")
    sqs.send_message(QueueUrl=url, MessageBody="no delay", DelaySeconds=0)
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == ["no delay"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    assert attrs["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "1"
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    assert [m["Body"] for m in got] == ["queue delay"]


def test_receive_empty_has_no_messages_key(sqs):
    url = sqs.create_queue(QueueName="empty")["QueueUrl"]
    answer = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
    assert "Messages" not in answer


def test_long_poll_returns_as_soon_as_a_message_is_sent(sqs, server):
    url = sqs.create_queue(QueueName="longpoll")["QueueUrl"]
    result = {}

    def poll():
        start = time.monotonic()
        result["answer"] = client(server, read_timeout=30).receive_message(QueueUrl=url, WaitTimeSeconds=20)
        result["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(1.0)
    forqapp.send("longpoll", "from the Python API")  # another face wakes the SQS long poll
    thread.join(25)
    assert result["answer"]["Messages"][0]["Body"] == "from the Python API"
    assert 0.9 < result["seconds"] < 5, result["seconds"]
    # A long poll with nothing to take waits its whole time.
    start = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
    assert 0.9 < time.monotonic() - start < 4


def test_queue_receive_wait_time_is_the_default_long_poll(sqs):
    url = sqs.create_queue(QueueName="waits", Attributes={"ReceiveMessageWaitTimeSeconds": "1"})["QueueUrl"]
    start = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    assert time.monotonic() - start > 0.9


def test_visibility_timeout_expiry_and_receipt_handles(sqs):
    url = sqs.create_queue(QueueName="vis", Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    first = sqs.receive_message(QueueUrl=url)["Messages"][0]
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # invisible while leased
    time.sleep(1.2)
    second = sqs.receive_message(QueueUrl=url, **system_attributes(sqs, ["ApproximateReceiveCount"]))["Messages"][0]
    assert second["MessageId"] == first["MessageId"]
    assert second["ReceiptHandle"] != first["ReceiptHandle"]  # new on every delivery
    assert second["Attributes"]["ApproximateReceiveCount"] == "2"
    # The stale handle: the delete succeeds and deletes nothing (as SQS).
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    assert Message.objects.filter(id=first["MessageId"]).exists()
    with pytest.raises(botocore.exceptions.ClientError) as exc:  # received again since: as SQS answers it
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=5)
    assert code_of(exc)[0] == "InvalidParameterValue"
    assert "Message does not exist or is not available for visibility timeout change" in str(exc.value)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=0)
    third = sqs.receive_message(QueueUrl=url)["Messages"][0]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=third["ReceiptHandle"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=third["ReceiptHandle"])  # twice: fine
    assert not Message.objects.filter(id=first["MessageId"]).exists()


def test_a_missing_receipt_handle_is_missing_parameter(sqs, server):
    """Audit finding 5d: DeleteMessage without ReceiptHandle answered ReceiptHandleIsInvalid ("None")."""
    url = sqs.create_queue(QueueName="no-handle")["QueueUrl"]
    for action in ("DeleteMessage", "ChangeMessageVisibility"):
        answer = signed_post(server, action, json.dumps({"QueueUrl": url, "VisibilityTimeout": 5}).encode())
        assert answer.status_code == 400 and answer.json()["__type"] == "com.amazonaws.sqs#MissingParameter"
        assert "ReceiptHandle" in answer.json()["message"]


def test_malformed_receipt_handles(sqs):
    url = sqs.create_queue(QueueName="handles")["QueueUrl"]
    other = sqs.create_queue(QueueName="handles-other")["QueueUrl"]
    sqs.send_message(QueueUrl=other, MessageBody="m")
    foreign = sqs.receive_message(QueueUrl=other)["Messages"][0]["ReceiptHandle"]
    tampered = foreign[:-3] + ("AAA" if not foreign.endswith("AAA") else "BBB")
    for handle in ("garbage", "", tampered, foreign):
        with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid) as exc:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=handle or "x")
        assert code_of(exc) == ("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 404)


def test_a_dead_letter_in_a_queue_named_by_the_redrive_policy_shows_its_source(sqs):
    parked_url = sqs.create_queue(QueueName="parked")["QueueUrl"]  # an ordinary queue as the DLQ
    parked_arn = sqs.get_queue_attributes(QueueUrl=parked_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(QueueName="work", Attributes={
        "VisibilityTimeout": "0",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": parked_arn, "maxReceiveCount": "1"}),
    })["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="poison")
    assert sqs.receive_message(QueueUrl=url)["Messages"][0]["MessageId"] == sent["MessageId"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # this receive moved it
    sqs.send_message(QueueUrl=parked_url, MessageBody="sent there")
    got = sqs.receive_message(QueueUrl=parked_url, MaxNumberOfMessages=10, VisibilityTimeout=30,
                              **system_attributes(sqs, ["All"]))["Messages"]
    sources = {m["Body"]: m["Attributes"].get("DeadLetterQueueSourceArn") for m in got}
    assert sources == {"poison": f"arn:aws:sqs:{REGION}:{ACCOUNT}:work", "sent there": None}


def test_redrive_after_max_receive_count_keeps_id_body_and_attributes(sqs):
    dlq_url = sqs.create_queue(QueueName="rd-dlq")["QueueUrl"]  # the DLQ first, as SQS users do
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(QueueName="rd", Attributes={
        "VisibilityTimeout": "0",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "2"}),
    })["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="poison", MessageAttributes=ATTRIBUTES)
    # maxReceiveCount 2: received twice, then moved at the third receive (goaws #263 was off by one).
    for n in (1, 2):
        got = sqs.receive_message(QueueUrl=url, **system_attributes(sqs, ["All"]))["Messages"][0]
        assert got["Attributes"]["ApproximateReceiveCount"] == str(n)
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    counts = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
              "ApproximateNumberOfMessagesDelayed"]

    def dlq_counts():
        got = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=counts)["Attributes"]
        return [int(got[name]) for name in counts]

    assert dlq_counts() == [1, 0, 0]
    dead = sqs.receive_message(QueueUrl=dlq_url, MessageAttributeNames=["All"], VisibilityTimeout=30,
                               **system_attributes(sqs, ["All"]))["Messages"][0]
    assert dlq_counts() == [0, 1, 0]  # in flight, as any queue's message (it said 1, 0)
    assert dead["MessageId"] == sent["MessageId"] and dead["Body"] == "poison"
    assert dead["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert dead["Attributes"]["DeadLetterQueueSourceArn"] == f"arn:aws:sqs:{REGION}:{ACCOUNT}:rd"
    sqs.delete_message(QueueUrl=dlq_url, ReceiptHandle=dead["ReceiptHandle"])
    assert not Message.objects.filter(id=sent["MessageId"]).exists()
    # Both are listed; deleting the DLQ leaves the queue.
    names = [u.rsplit("/", 1)[1] for u in sqs.list_queues(QueueNamePrefix="rd")["QueueUrls"]]
    assert names == ["rd", "rd-dlq"]
    sqs.delete_queue(QueueUrl=dlq_url)
    assert sqs.get_queue_url(QueueName="rd")["QueueUrl"] == url


def test_a_dlq_created_alone_does_not_make_its_queue_visible(sqs):
    sqs.create_queue(QueueName="alone-dlq", Attributes={"MessageRetentionPeriod": "1209600"})
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName="alone")
    assert sqs.get_queue_url(QueueName="alone-dlq")
    attrs = sqs.get_queue_attributes(QueueUrl=sqs.get_queue_url(QueueName="alone-dlq")["QueueUrl"],
                                     AttributeNames=["MessageRetentionPeriod"])["Attributes"]
    assert attrs == {"MessageRetentionPeriod": "1209600"}
    # Creating the queue later with its own attributes is no conflict.
    sqs.create_queue(QueueName="alone", Attributes={"VisibilityTimeout": "5"})
    assert sqs.get_queue_url(QueueName="alone")


def api(method: str, path: str, body: object = None) -> httpx.Response:
    """A request to the HTTP API (v1, v2) of the server under test, with the root key."""
    content = None if body is None else json.dumps(body).encode()
    return httpx.request(method, LIVE["api"] + path, content=content, timeout=10,
                         headers={"X-API-Key": SECRET, "Content-Type": "application/json"})


def test_deleting_a_dlq_created_first_keeps_its_queue_filled_by_another_face(sqs):
    """Audit finding 1: the placeholder row of ``hid2`` stayed hidden after v1 sends to ``hid2``,
    and DeleteQueue of ``hid2-dlq`` deleted ``hid2`` with its messages."""
    dlq = sqs.create_queue(QueueName="hid2-dlq")["QueueUrl"]
    for n in range(3):
        assert api("POST", "/api/v1/queues/hid2/messages", {"content": f"m{n}"}).status_code == 204
    assert sqs.get_queue_url(QueueName="hid2")  # a queue now, for SQS too
    sqs.delete_queue(QueueUrl=dlq)
    got = api("GET", "/api/v2/queues/hid2")
    assert got.status_code == 200 and got.json()["counts"]["ready"] == 3
    assert sqs.get_queue_url(QueueName="hid2")
    # Its messages got the server's defaults, not a policy SQS made up for the DLQ's placeholder.
    assert got.json()["overrides"] == {}
    assert got.json()["policy"]["max_attempts"] == 5  # FORQ_MAX_ATTEMPTS


def test_a_queue_another_face_makes_after_its_dlq_is_a_queue_for_sqs(sqs):
    """Audit finding 1: PUT, PATCH (configure_queue) of ``<name>`` after ``<name>-dlq`` was created
    through SQS make it a queue that SQS shows, and DeleteQueue of the DLQ keeps it."""
    for name, write in (("hid3", lambda: api("PUT", "/api/v2/queues/hid3", {"max_attempts": 4})),
                        ("hid4", lambda: api("PATCH", "/api/v2/queues/hid4", {"max_attempts": 4})),
                        ("hid5", lambda: forqapp.configure_queue("hid5", max_attempts=4))):
        dlq = sqs.create_queue(QueueName=f"{name}-dlq", Attributes={"DelaySeconds": "3"})["QueueUrl"]
        with pytest.raises(sqs.exceptions.QueueDoesNotExist):
            sqs.get_queue_url(QueueName=name)
        write()
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        assert url.endswith(f"/{name}") and url in sqs.list_queues(QueueNamePrefix=name)["QueueUrls"]
        policy = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])
                            ["Attributes"]["RedrivePolicy"])
        assert policy["maxReceiveCount"] == 4  # the other face's policy is kept
        # SetQueueAttributes on the DLQ does not hide the queue again.
        sqs.set_queue_attributes(QueueUrl=dlq, Attributes={"DelaySeconds": "4"})
        assert sqs.get_queue_url(QueueName=name)["QueueUrl"] == url
        sqs.delete_queue(QueueUrl=dlq)
        got = api("GET", f"/api/v2/queues/{name}")
        assert got.status_code == 200 and got.json()["overrides"]["max_attempts"] == 4
        assert sqs.get_queue_url(QueueName=name)["QueueUrl"] == url


def test_deleting_a_dlq_created_alone_removes_its_placeholder(sqs):
    dlq = sqs.create_queue(QueueName="alone2-dlq", Attributes={"MessageRetentionPeriod": "1209600"})["QueueUrl"]
    sqs.set_queue_attributes(QueueUrl=dlq, Attributes={"DelaySeconds": "2"})  # still a placeholder
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName="alone2")
    sqs.delete_queue(QueueUrl=dlq)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName="alone2-dlq")
    assert not Queue.objects.filter(name="alone2").exists()


# --- batches ----------------------------------------------------------------------------------------


def test_send_batch_with_partial_failure(sqs):
    url = sqs.create_queue(QueueName="batch")["QueueUrl"]
    answer = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "ok-1", "MessageBody": "one", "MessageAttributes": ATTRIBUTES},
        {"Id": "bad_2", "MessageBody": "two", "DelaySeconds": 1000},
        {"Id": "ok-3", "MessageBody": "three"},
        {"Id": "bad-4", "MessageBody": "bell \x07"},
    ])
    assert [s["Id"] for s in answer["Successful"]] == ["ok-1", "ok-3"]
    assert answer["Successful"][0]["MD5OfMessageAttributes"] == aws_md5_of_attributes(ATTRIBUTES)
    assert answer["Successful"][1]["MD5OfMessageBody"] == md5("three")
    failed = {f["Id"]: f for f in answer["Failed"]}
    assert failed["bad_2"]["Code"] == "InvalidParameterValue" and failed["bad_2"]["SenderFault"] is True
    assert failed["bad-4"]["Code"] == "InvalidMessageContents"
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == ["one", "three"]
    deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": "a", "ReceiptHandle": got[0]["ReceiptHandle"]},
        {"Id": "b", "ReceiptHandle": "not-a-handle"},
        {"Id": "c", "ReceiptHandle": got[1]["ReceiptHandle"]},
    ])
    assert [s["Id"] for s in deleted["Successful"]] == ["a", "c"]
    assert [(f["Id"], f["Code"]) for f in deleted["Failed"]] == [("b", "ReceiptHandleIsInvalid")]
    assert not Message.objects.filter(queue="batch").exists()


def test_batch_request_errors(sqs):
    url = sqs.create_queue(QueueName="batcherr")["QueueUrl"]
    with pytest.raises(sqs.exceptions.EmptyBatchRequest) as exc:
        sqs.send_message_batch(QueueUrl=url, Entries=[])
    assert code_of(exc)[0] == "AWS.SimpleQueueService.EmptyBatchRequest"
    with pytest.raises(sqs.exceptions.TooManyEntriesInBatchRequest):
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(11)])
    with pytest.raises(sqs.exceptions.BatchEntryIdsNotDistinct):
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "x"}] * 2)
    with pytest.raises(sqs.exceptions.InvalidBatchEntryId):
        sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "a b", "ReceiptHandle": "x"}])
    with pytest.raises(sqs.exceptions.BatchRequestTooLong):
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x" * 200_000}
                                                      for i in range(6)])
    assert not Message.objects.filter(queue="batcherr").exists()


def test_an_empty_batch_names_its_own_entry_type(sqs):
    """Audit: an empty DeleteMessageBatch asked for a SendMessageBatchRequestEntry."""
    url = sqs.create_queue(QueueName="emptybatch")["QueueUrl"]
    for call, entry_type in ((sqs.send_message_batch, "SendMessageBatchRequestEntry"),
                             (sqs.delete_message_batch, "DeleteMessageBatchRequestEntry"),
                             (sqs.change_message_visibility_batch, "ChangeMessageVisibilityBatchRequestEntry")):
        with pytest.raises(sqs.exceptions.EmptyBatchRequest) as exc:
            call(QueueUrl=url, Entries=[])
        assert f"at least one {entry_type} " in exc.value.response["Error"]["Message"]


def test_a_message_s_size_counts_its_attributes_as_sqs_does(sqs):
    """Audit: the queue's MaximumMessageSize was checked against the body alone (SQS counts each
    attribute's name, type and value too)."""
    url = sqs.create_queue(QueueName="sized", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]

    def attributes(value_bytes):  # "n" + "String" + the value
        return {"n": {"DataType": "String", "StringValue": "v" * value_bytes}}

    sqs.send_message(QueueUrl=url, MessageBody="x" * 1000, MessageAttributes=attributes(17))  # 1,024 bytes
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sqs.send_message(QueueUrl=url, MessageBody="x" * 1000, MessageAttributes=attributes(18))
    assert code_of(exc)[0] == "InvalidParameterValue" and "shorter than 1024 bytes" in str(exc.value)
    binary = {"b": {"DataType": "Binary", "BinaryValue": b"\x00" * 20}}  # 1 + 6 + 20 decoded bytes
    answer = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "fits", "MessageBody": "x" * 997, "MessageAttributes": binary},
        {"Id": "over", "MessageBody": "x" * 998, "MessageAttributes": binary}])
    assert [s["Id"] for s in answer["Successful"]] == ["fits"]
    assert [(f["Id"], f["Code"]) for f in answer["Failed"]] == [("over", "InvalidParameterValue")]
    assert Message.objects.filter(queue="sized").count() == 2


def test_a_message_body_of_another_type_says_so(sqs, server):
    url = sqs.create_queue(QueueName="typed")["QueueUrl"]
    answer = signed_post(server, "SendMessage", json.dumps({"QueueUrl": url, "MessageBody": 5}).encode())
    assert answer.status_code == 400 and "MessageBody is invalid. Reason: Must be a string" in answer.json()["message"]
    answer = signed_post(server, "SendMessage", json.dumps({"QueueUrl": url, "MessageBody": "x", "MessageAttributes": {
        "b": {"DataType": "Binary", "BinaryValue": "not base64!"}}}).encode())
    assert answer.status_code == 400 and "not base64" in answer.json()["message"]


def test_the_batch_total_is_the_services_not_the_queues_maximum_message_size(sqs):
    """SQS: each message within the queue's MaximumMessageSize; the batch's total within the
    service's limit (two 600-byte bodies were refused as a batch over 1,024 bytes)."""
    url = sqs.create_queue(QueueName="smallmsgs", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    answer = sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x" * 600} for i in range(2)])
    assert len(answer["Successful"]) == 2 and not answer.get("Failed")
    answer = sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "big", "MessageBody": "x" * 1025}])
    assert [f["Code"] for f in answer["Failed"]] == ["InvalidParameterValue"]  # each message: the queue's


def test_change_visibility_keeps_a_delivery_at_most_12_hours_in_all(sqs):
    """SQS: ChangeMessageVisibility can extend a delivery to at most 12 hours after its receive;
    past that it is refused (an audit found the lease renewable for ever)."""
    url = sqs.create_queue(QueueName="twelve")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(2)])
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2)["Messages"]
    time.sleep(1.1)
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"], VisibilityTimeout=43_200)
    assert code_of(exc)[0] == "InvalidParameterValue"
    assert "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]" in str(exc.value)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"], VisibilityTimeout=43_000)
    answer = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": "past", "ReceiptHandle": got[1]["ReceiptHandle"], "VisibilityTimeout": 43_200},
        {"Id": "within", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 43_100}])
    assert [s["Id"] for s in answer["Successful"]] == ["within"]
    assert [(f["Id"], f["Code"]) for f in answer["Failed"]] == [("past", "InvalidParameterValue")]


def test_change_visibility_batch(sqs):
    url = sqs.create_queue(QueueName="cvb")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(3)])
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=3)["Messages"]
    answer = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": "zero", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 0},
        {"Id": "long", "ReceiptHandle": got[1]["ReceiptHandle"], "VisibilityTimeout": 600},
        {"Id": "bad", "ReceiptHandle": got[2]["ReceiptHandle"], "VisibilityTimeout": 43_201},
    ])
    assert sorted(s["Id"] for s in answer["Successful"]) == ["long", "zero"]
    assert [(f["Id"], f["Code"]) for f in answer["Failed"]] == [("bad", "InvalidParameterValue")]
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=3)["Messages"]
    assert [m["MessageId"] for m in again] == [got[0]["MessageId"]]


# --- every face sees the same queues ----------------------------------------------------------------


def test_faces_share_queues(sqs):
    url = sqs.create_queue(QueueName="shared")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="from boto3",
                     MessageAttributes={"origin": {"DataType": "String", "StringValue": "sqs"}})
    message = forqapp.receive("shared")
    # (the SenderId is kept among the attributes, under a name SQS refuses to a message attribute)
    assert message.content == "from boto3" and message.attributes == {"origin": "sqs", "AWS.SenderId": "forq-root"}
    forqapp.ack(message)
    forqapp.send("shared", "from forqapp", attributes={"origin": "python"})
    got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"][0]
    assert got["Body"] == "from forqapp"
    assert got["MessageAttributes"] == {"origin": {"DataType": "String", "StringValue": "python"}}
    assert got["MD5OfMessageAttributes"] == aws_md5_of_attributes(got["MessageAttributes"])
    # A queue made by another face exists for SQS too, with its own policy.
    forqapp.configure_queue("made-elsewhere", max_attempts=3)
    other = sqs.get_queue_url(QueueName="made-elsewhere")["QueueUrl"]
    policy = json.loads(sqs.get_queue_attributes(QueueUrl=other, AttributeNames=["RedrivePolicy"])
                        ["Attributes"]["RedrivePolicy"])
    assert policy["maxReceiveCount"] == 3 and policy["deadLetterTargetArn"].endswith(":made-elsewhere-dlq")


# --- authentication and scopes ----------------------------------------------------------------------


def test_wrong_secret_and_unknown_key_are_refused(server):
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        client(server, secret="wrong-" + SECRET).list_queues()
    assert code_of(exc)[0] == "SignatureDoesNotMatch" and code_of(exc)[2] == 403
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        client(server, key_id="FQKNOSUCHKEY00000000").list_queues()
    assert code_of(exc)[0] == "InvalidClientTokenId" and code_of(exc)[2] == 403


def test_unsigned_and_skewed_requests_are_refused(server):
    unsigned = boto3.client("sqs", endpoint_url=server, region_name=REGION,
                            config=Config(signature_version=botocore.UNSIGNED, retries={"max_attempts": 1}))
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        unsigned.list_queues()
    assert code_of(exc)[2] == 403
    with pytest.raises(botocore.exceptions.ClientError) as exc:  # authentication before UnsupportedOperation
        unsigned.tag_queue(QueueUrl=f"{server}/{ACCOUNT}/any", Tags={"a": "b"})
    assert code_of(exc)[0] == "MissingAuthenticationToken" and code_of(exc)[2] == 403
    # A request signed 16 minutes ago.
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest("POST", server + "/", data=b"{}", headers={
        "X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0"})
    signer = SigV4Auth(Credentials("forq-root", SECRET), "sqs", REGION)
    import datetime as dt
    from unittest import mock

    past = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(minutes=16)
    with mock.patch("botocore.auth.datetime.datetime") as clock:
        clock.now.return_value = past
        clock.utcnow.return_value = past
        signer.add_auth(request)
    answer = httpx.post(server + "/", content=b"{}", headers=dict(request.headers.items()))
    assert answer.status_code == 403
    assert answer.json()["__type"] == "com.amazonaws.sqs#SignatureDoesNotMatch"
    assert "expired" in answer.json()["message"]
    # Signed now, it passes.
    request = AWSRequest("POST", server + "/", data=b"{}", headers={
        "X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0"})
    signer.add_auth(request)
    assert httpx.post(server + "/", content=b"{}", headers=dict(request.headers.items())).status_code == 200
    # A body changed after signing.
    assert httpx.post(server + "/", content=b'{"QueueNamePrefix":"x"}',
                      headers=dict(request.headers.items())).status_code == 403


def test_every_x_amz_header_must_be_signed(sqs, server):
    """Audit finding 4: a request signed over host and x-amz-date only could be replayed with
    another X-Amz-Target (GetQueueAttributes → DeleteQueue): every x-amz-* header sent must be signed."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = sqs.create_queue(QueueName="replayed")["QueueUrl"]
    body = json.dumps({"QueueUrl": url}).encode()
    request = AWSRequest("POST", server + "/", data=body, headers={})  # signs host and x-amz-date only
    SigV4Auth(Credentials("forq-root", SECRET), "sqs", REGION).add_auth(request)
    assert "SignedHeaders=host;x-amz-date," in request.headers["Authorization"]
    headers = {**dict(request.headers.items()), "X-Amz-Target": "AmazonSQS.DeleteQueue",
               "Content-Type": "application/x-amz-json-1.0"}
    answer = httpx.post(server + "/", content=body, headers=headers)
    assert answer.status_code == 403 and answer.json()["__type"] == "com.amazonaws.sqs#IncompleteSignature"
    assert "x-amz-target" in answer.json()["message"]
    assert sqs.get_queue_url(QueueName="replayed")["QueueUrl"] == url
    # Signed with it, the same request is fine (botocore signs every header but a few).
    request = AWSRequest("POST", server + "/", data=body, headers={"X-Amz-Target": "AmazonSQS.GetQueueAttributes",
                                                                    "Content-Type": "application/x-amz-json-1.0"})
    SigV4Auth(Credentials("forq-root", SECRET), "sqs", REGION).add_auth(request)
    assert httpx.post(server + "/", content=body, headers=dict(request.headers.items())).status_code == 200
    # An x-amz-* header added after signing is refused too.
    headers = {**dict(request.headers.items()), "X-Amz-Meta-Extra": "1"}
    assert httpx.post(server + "/", content=body, headers=headers).status_code == 403


def test_query_string_is_canonicalised_as_botocore_signs_it(server):
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    for query in ("a=b%20c&a=%41", "b=2&a=1&a=0", "x=%7E~&y"):
        request = AWSRequest("POST", f"{server}/?{query}", data=b"{}", headers={
            "X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0"})
        SigV4Auth(Credentials("forq-root", SECRET), "sqs", REGION).add_auth(request)
        answer = httpx.post(f"{server}/?{query}", content=b"{}", headers=dict(request.headers.items()))
        assert answer.status_code == 200, (query, answer.text)


def test_a_malformed_chunked_body_is_an_sqs_error(server):
    """Granian reports a malformed chunk size as a disconnect: a 400 SQS error, not a plain 500."""
    import socket

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest("POST", server + "/", data=b"{}", headers={
        "X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0"})
    SigV4Auth(Credentials("forq-root", SECRET), "sqs", REGION).add_auth(request)
    head = "".join(f"{k}: {v}\r\n" for k, v in request.headers.items() if k.lower() != "content-length")
    raw = (f"POST / HTTP/1.1\r\nHost: {server.removeprefix('http://')}\r\n{head}"
           "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n").encode()
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(raw)
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
    status = int(data.split(b" ", 2)[1])
    body = json.loads(data.partition(b"\r\n\r\n")[2])
    assert status == 400 and body["__type"] == "com.amazonaws.sqs#SerializationException"


def test_protocol_errors_are_sqs_errors(server):
    for method, headers in (("POST", {}), ("PUT", {"X-Amz-Target": "AmazonSQS.ListQueues"}),
                            ("POST", {"X-Amz-Target": "AmazonSQS.NoSuchThing"}),
                            ("POST", {"X-Amz-Target": "Other.ListQueues"})):
        answer = httpx.request(method, server + "/", headers=headers)
        assert 400 <= answer.status_code < 500
        assert answer.json()["__type"].startswith("com.amazonaws.sqs#")
        assert ";Sender" in answer.headers["x-amzn-query-error"]
    # A GET speaks the query protocol (tests/test_sqs_query.py): its errors are XML.
    answer = httpx.get(server + "/")
    assert answer.status_code == 403 and answer.headers["content-type"] == "text/xml"
    assert "<Code>MissingAuthenticationToken</Code>" in answer.text


def test_scoped_keys(server, settings):
    from forqapp.keys import cache as key_cache
    from forqapp.keys import service as key_service

    settings.FORQ_KEYS_SECRET = KEYS_SECRET  # this process seals as the server opens
    root = client(server)
    for name in ("scoped-in", "scoped-out"):
        root.create_queue(QueueName=name)
    issued = key_service.create("sqs-producer", ["scoped-in:produce,read"], actor="test", via="test")
    producer = client(server, issued.key.access_key_id, issued.secret)
    url_in = producer.get_queue_url(QueueName="scoped-in")["QueueUrl"]
    producer.send_message(QueueUrl=url_in, MessageBody="allowed")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        producer.receive_message(QueueUrl=url_in)
    assert code_of(exc)[0] == "AccessDenied" and code_of(exc)[2] == 403
    with pytest.raises(botocore.exceptions.ClientError):
        producer.send_message(QueueUrl=url_in.replace("scoped-in", "scoped-out"), MessageBody="no")
    with pytest.raises(botocore.exceptions.ClientError):
        producer.create_queue(QueueName="scoped-new")
    assert [u.rsplit("/", 1)[1] for u in producer.list_queues()["QueueUrls"]] == ["scoped-in"]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        client(server, issued.key.access_key_id, "wrong").list_queues()
    assert code_of(exc)[0] == "SignatureDoesNotMatch"
    # Rotated here (another process than the server, which has the key cached for 5 s): the new
    # secret works there within a quarter second of its cached answer's age, not after 5 s. Each
    # refusal counts towards the address's throttle (FORQ_AUTH_MAX_FAILURES, 5 with "wrong" above),
    # so the tries are RECHECK_SECONDS apart: the second one finds the cached answer old enough.
    rotated = key_service.rotate(issued.key, actor="test", via="test")
    started = time.monotonic()
    while True:
        try:
            client(server, issued.key.access_key_id, rotated.secret).list_queues()
            break
        except botocore.exceptions.ClientError as refused:
            assert refused.response["Error"]["Code"] == "SignatureDoesNotMatch"
            assert time.monotonic() - started < 4, "the new secret was refused for 4 s (the cache period is 5 s)"
            time.sleep(key_cache.RECHECK_SECONDS + 0.05)


def test_delete_queue_needs_manage_on_the_queue_alone_and_leaves_its_dlqs_messages(server, settings):
    """Audit finding 2: DeleteQueue of ``k1`` deleted ``k1-dlq``'s messages with only ``k1:manage``.
    A dead-letter queue is a queue of its own now (as on SQS): DeleteQueue of ``k1`` needs
    ``k1:manage`` and never touches ``k1-dlq``'s messages."""
    from forqapp.keys import service as key_service

    settings.FORQ_KEYS_SECRET = KEYS_SECRET
    root = client(server)
    url = root.create_queue(QueueName="k1", Attributes={"VisibilityTimeout": "0", "RedrivePolicy": json.dumps(
        {"deadLetterTargetArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:k1-dlq", "maxReceiveCount": "1"})})["QueueUrl"]
    root.send_message(QueueUrl=url, MessageBody="dead soon")
    root.receive_message(QueueUrl=url)
    root.receive_message(QueueUrl=url)  # the second receive moves it to k1-dlq
    assert Message.objects.filter(queue="k1-dlq").count() == 1
    issued = key_service.create("sqs-k1-manager", ["k1:manage,read"], actor="test", via="test")
    manager = client(server, issued.key.access_key_id, issued.secret)
    manager.delete_queue(QueueUrl=url)
    with pytest.raises(root.exceptions.QueueDoesNotExist):
        root.get_queue_url(QueueName="k1")  # (its row holds k1-dlq, which its RedrivePolicy made)
    assert Message.objects.filter(queue="k1-dlq").count() == 1  # the DLQ's, which the key may not touch
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        manager.delete_queue(QueueUrl=url + "-dlq")
    assert code_of(exc)[::2] == ("AccessDenied", 403) and "k1-dlq" in str(exc.value)
    assert Message.objects.filter(queue="k1-dlq").count() == 1
    root.delete_queue(QueueUrl=url + "-dlq")
    assert not Message.objects.filter(queue="k1-dlq").exists()
    assert not Queue.objects.filter(name="k1").exists()


# --- the AWS CLI --------------------------------------------------------------------------------------


def test_aws_cli(server):
    if not (BIN / "aws").exists():
        pytest.skip(f"no AWS CLI in {BIN}")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "forq-root", "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": REGION, "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"}
    aws = [str(BIN / "aws"), "--endpoint-url", server, "--output", "json", "sqs"]

    def run(*args):
        result = subprocess.run([*aws, *args], env=env, capture_output=True, text=True, timeout=60)
        return result.returncode, json.loads(result.stdout) if result.stdout.strip() else None, result.stderr

    code, out, _ = run("create-queue", "--queue-name", "cli")
    assert code == 0 and out["QueueUrl"].endswith(f"/{ACCOUNT}/cli")
    url = out["QueueUrl"]
    code, out, _ = run("send-message", "--queue-url", url, "--message-body", "from the cli")
    assert code == 0 and out["MD5OfMessageBody"] == md5("from the cli")
    code, out, _ = run("receive-message", "--queue-url", url, "--wait-time-seconds", "1")
    assert code == 0 and out["Messages"][0]["Body"] == "from the cli"
    code, _, _ = run("delete-message", "--queue-url", url, "--receipt-handle", out["Messages"][0]["ReceiptHandle"])
    assert code == 0
    code, _, err = run("get-queue-url", "--queue-name", "cli-missing")
    assert code != 0 and "NonExistentQueue" in err or "QueueDoesNotExist" in err


# --- serving --------------------------------------------------------------------------------------------


def test_requests_are_counted_in_the_metrics(sqs):
    sqs.list_queues()
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName="counted-missing")
    text = httpx.get(LIVE["api"] + "/metrics", headers={"X-API-Key": METRICS_SECRET}).text
    assert 'forq_sqs_requests_total{action="ListQueues",status="200"}' in text
    assert 'forq_sqs_requests_total{action="GetQueueUrl",status="400"}' in text


def test_a_long_poll_whose_client_leaves_takes_nothing(sqs, server):
    url = sqs.create_queue(QueueName="leaver")["QueueUrl"]
    impatient = client(server, read_timeout=1)
    with pytest.raises(botocore.exceptions.ReadTimeoutError):
        impatient.receive_message(QueueUrl=url, WaitTimeSeconds=10)
    time.sleep(0.3)
    sqs.send_message(QueueUrl=url, MessageBody="for whoever stays")
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2, **system_attributes(sqs, ["All"]))["Messages"]
    assert got[0]["Attributes"]["ApproximateReceiveCount"] == "1"


def test_a_bad_sqs_address_stops_forq_serve_in_one_line():
    result = subprocess.run([sys.executable, str(ROOT / "manage.py"), "forq_serve", "--no-ui"], cwd=ROOT,
                            timeout=60, env=subprocess_env(FORQ_SQS_ADDR="nowhere"), capture_output=True, text=True)
    assert result.returncode != 0
    assert "FORQ_SQS_ADDR: 'nowhere' is not host:port" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


# --- hostile input: an SQS error, never a 500 or a hang ----------------------------------------------


def signed_post(server: str, action: str, body: bytes, target: str | None = None) -> httpx.Response:
    """A request botocore would sign, with any body (botocore validates what it sends; others may not)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest("POST", server + "/", data=body, headers={
        "X-Amz-Target": target or f"AmazonSQS.{action}", "Content-Type": "application/x-amz-json-1.0"})
    SigV4Auth(Credentials("forq-root", SECRET), "sqs", REGION).add_auth(request)
    return httpx.post(server + "/", content=body, headers=dict(request.headers.items()), timeout=30)


def test_hostile_bodies_are_sqs_errors(sqs, server):
    url = sqs.create_queue(QueueName="hostile")["QueueUrl"]
    cases = [
        ("ListQueues", b"{not json", "SerializationException"),
        ("ListQueues", b"[1, 2]", "SerializationException"),
        ("ListQueues", b"\xff\xfe", "SerializationException"),
        ("ListQueues", b"[" * 300_000, "SerializationException"),  # deeper than the parser goes
        ("ListQueues", b'{"a":' * 100_000, "SerializationException"),
        ("ListQueues", json.dumps({"MaxResults": "5"}).encode(), "InvalidParameterValue"),
        # A prefix of another type is refused, not read as none (every queue listed).
        *(("ListQueues", json.dumps({"QueueNamePrefix": v}).encode(), "InvalidParameterValue")
          for v in ([], {}, 0, False)),
        # NaN, Infinity and a number past a double's range are no JSON a client sends.
        ("ListQueues", b'{"MaxResults": NaN}', "SerializationException"),
        ("ListQueues", b'{"MaxResults": Infinity}', "SerializationException"),
        ("ListQueues", b'{"MaxResults": 1e400}', "SerializationException"),
        ("CreateQueue", json.dumps({"QueueName": ["x"]}).encode(), "MissingParameter"),
        ("CreateQueue", json.dumps({"QueueName": "h2", "Attributes": {"VisibilityTimeout": 5}}).encode(),
         "InvalidAttributeValue"),
        ("SendMessage", json.dumps({"QueueUrl": 5, "MessageBody": "x"}).encode(), "MissingParameter"),
        ("SendMessage", json.dumps({"QueueUrl": url, "MessageBody": {"a": 1}}).encode(), "InvalidParameterValue"),
        ("SendMessage", json.dumps({"QueueUrl": url, "MessageBody": "x",
                                    "MessageAttributes": {"a": {"DataType": "Binary", "BinaryValue": 5}}}).encode(),
         "InvalidParameterValue"),
        ("SendMessage", json.dumps({"QueueUrl": url, "MessageBody": "x", "MessageSystemAttributes": {
            "Colour": {"DataType": "String", "StringValue": "x"}}}).encode(), "InvalidParameterValue"),
        ("SendMessage", json.dumps({"QueueUrl": url, "MessageBody": "x" * 5_000_000}).encode(),
         "RequestEntityTooLarge"),
        ("SendMessageBatch", json.dumps({"QueueUrl": url, "Entries": "abc"}).encode(), "InvalidParameterValue"),
        ("ReceiveMessage", json.dumps({"QueueUrl": url, "WaitTimeSeconds": 1.5}).encode(), "InvalidParameterValue"),
        ("ReceiveMessage", json.dumps({"QueueUrl": url, "MessageAttributeNames": "All"}).encode(),
         "InvalidParameterValue"),
        ("ChangeMessageVisibility", json.dumps({"QueueUrl": url, "ReceiptHandle": "abc",
                                                "VisibilityTimeout": "1"}).encode(), "ReceiptHandleIsInvalid"),
    ]
    for action, body, shape in cases:
        answer = signed_post(server, action, body)
        assert 400 <= answer.status_code < 500, (action, body[:40], answer.text)
        assert answer.json()["__type"] == f"com.amazonaws.sqs#{shape}", (action, body[:40], answer.text)
        assert answer.headers["x-amzn-requestid"]
    # Input echoed in a batch's Failed message, even a lone surrogate (no UTF-8 for it): 200, not 500.
    for action, entry in (("DeleteMessageBatch", {"Id": "a", "ReceiptHandle": "\ud800"}),
                          ("SendMessageBatch", {"Id": "a", "MessageBody": "x", "MessageAttributes": {
                              "\ud800": {"DataType": "String", "StringValue": "v"}}})):
        answer = signed_post(server, action, json.dumps({"QueueUrl": url, "Entries": [entry]}).encode())
        assert answer.status_code == 200, answer.text
        assert answer.json()["Failed"][0]["Id"] == "a" and answer.json()["Successful"] == []
    # An integer parameter of the wrong type says so (not "Must be between 1 and 1000").
    answer = signed_post(server, "ListQueues", json.dumps({"MaxResults": "5"}).encode())
    assert answer.status_code == 400 and answer.json()["__type"] == "com.amazonaws.sqs#InvalidParameterValue"
    assert "Must be an integer" in answer.json()["message"], answer.text
    for target in ("AmazonSQS", "AmazonSQS.", "amazonsqs.ListQueues", "AmazonSQS.ListQueues.x"):
        answer = signed_post(server, "", b"{}", target=target)
        assert answer.status_code == 400 and answer.json()["__type"] == "com.amazonaws.sqs#InvalidAction"
    assert not Message.objects.filter(queue="hostile").exists()


def test_message_system_attributes_digest(sqs):
    # SDKs that send AWSTraceHeader check MD5OfMessageSystemAttributes (same algorithm as the attributes').
    url = sqs.create_queue(QueueName="traced")["QueueUrl"]
    system = {"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"}}
    sent = sqs.send_message(QueueUrl=url, MessageBody="x", MessageSystemAttributes=system)
    assert sent["MD5OfMessageSystemAttributes"] == aws_md5_of_attributes(system)
    batch = sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "t", "MessageBody": "y",
                                                          "MessageSystemAttributes": system}])
    assert batch["Successful"][0]["MD5OfMessageSystemAttributes"] == aws_md5_of_attributes(system)
    assert "MD5OfMessageSystemAttributes" not in sqs.send_message(QueueUrl=url, MessageBody="z")


# --- every face sees a message sent with boto3 ----------------------------------------------------------


def test_a_boto3_message_is_received_by_every_face(sqs, server, settings):
    from django.contrib.auth.models import User
    from django.test import Client

    from forqapp.spark.client import ForqClient
    from forqapp.worker import consumers
    from forqapp.worker.runner import Worker

    url = sqs.create_queue(QueueName="faces")["QueueUrl"]
    attrs = {"origin": {"DataType": "String", "StringValue": "boto3"}}

    def send(body: str) -> str:
        return sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attrs)["MessageId"]

    # Forq's v1 HTTP API (what the Forq SDKs speak).
    sent = send("to the HTTP API")
    got = httpx.get(LIVE["api"] + "/api/v1/queues/faces/messages", headers={"X-API-Key": SECRET}, timeout=10)
    assert got.status_code == 200 and got.json()["id"] == sent and got.json()["content"] == "to the HTTP API"
    assert httpx.post(LIVE["api"] + f"/api/v1/queues/faces/messages/{sent}/ack",
                      headers={"X-API-Key": SECRET, "X-Forq-Receipt": str(got.json()["receipt"])}).status_code == 204
    # The Spark connector's client (its claim/ack endpoints; the JVM side is tests/test_spark_integration.py).
    sent = send("to Spark")
    with ForqClient(LIVE["api"], SECRET) as spark:
        (claimed,) = spark.claim("faces", 10)
        assert (claimed["id"], claimed["content"], claimed["attributes"]) == (sent, "to Spark", SENT_ATTRIBUTES)
        assert spark.ack("faces", [(claimed["id"], claimed["receipt"])]) == 1
    # A @forqapp.consumer, run by forq_worker's Worker.
    seen = []
    saved = dict(consumers._registry)
    try:
        consumers.register("faces", lambda m: seen.append((m.id, m.content, m.attributes)))
        sent = send("to a consumer")
        Worker({"faces": consumers.registry()["faces"]}, burst=True, start_jitter=0).run()
    finally:
        consumers._registry.clear()
        consumers._registry.update(saved)
    assert seen == [(sent, "to a consumer", SENT_ATTRIBUTES)]
    assert not Message.objects.filter(queue="faces").exists()  # the worker acked it
    # The admin shows it.
    sent = send("in the admin")
    admin = Client()
    admin.force_login(User.objects.create_user("sqs-admin", password="pw-sqs-123", is_staff=True, is_superuser=True))
    page = admin.get(f"/admin/forqapp/message/?q={sent}")
    assert page.status_code == 200 and sent in page.content.decode()
    assert "in the admin" in admin.get(f"/admin/forqapp/message/{sent}/change/").content.decode()


def test_a_django_task_queue_is_an_sqs_queue(sqs):
    from forqapp.tasks.discovery import with_consumers
    from forqapp.tasks.models import TaskRecord
    from forqapp.worker.runner import Worker
    from tests.tasksapp import tasks

    result = tasks.add.enqueue(2, 3)  # the backend's queue "tasks-default" (tests/settings.py)
    url = sqs.get_queue_url(QueueName="tasks-default")["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert attrs == {"ApproximateNumberOfMessages": "1"}
    peek = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"][0]  # seen, left for the worker
    assert peek["MessageId"] == result.id and "tests.tasksapp.tasks.add" in peek["Body"]
    Worker(with_consumers({}), burst=True, start_jitter=0).run()
    assert TaskRecord.objects.get(id=result.id).status == "SUCCESSFUL"
    assert "Messages" not in sqs.receive_message(QueueUrl=url)


def test_a_task_sent_with_boto3_is_run_by_the_worker(sqs):
    """The other way: a body in the task format, sent with boto3 to a task queue, is a task the
    worker runs; its result is the SQS message id's."""
    from forqapp.models import Message
    from forqapp.tasks.discovery import with_consumers
    from forqapp.tasks.models import TaskRecord
    from forqapp.worker.runner import Worker
    from tests.tasksapp import tasks

    template = tasks.add.enqueue(0, 0)  # the body the backend writes for add(…)
    body = json.loads(Message.objects.get(id=template.id).content)
    Message.objects.filter(id=template.id).delete()
    body["call"] = {"args": [20, 22], "kwargs": {}}
    url = sqs.get_queue_url(QueueName="tasks-default")["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody=json.dumps(body))
    Worker(with_consumers({}), burst=True, start_jitter=0).run()
    record = TaskRecord.objects.get(id=sent["MessageId"])
    assert record.status == "SUCCESSFUL" and json.loads(record.return_value) == 42
    assert tasks.add.get_result(sent["MessageId"]).return_value == 42


def test_the_docs_boto3_example_runs_as_written(server, monkeypatch, capsys):
    """docs/how-to/sqs.md's boto3 block, with only its endpoint URL pointed at this server: it makes
    the queue, sends with an attribute, receives and deletes."""
    page = (ROOT / "docs" / "how-to" / "sqs.md").read_text()
    (block,) = [b for b in re.findall(r"^```python\n(.*?)^```", page, flags=re.S | re.M)
                if b.startswith("# shipments.py")]
    monkeypatch.setenv("FORQ_AUTH_SECRET", SECRET)
    exec(compile(block.replace("http://localhost:8082", server), "sqs.md", "exec"), {})  # noqa: S102 - the docs' code
    assert capsys.readouterr().out == (
        """{"id": 1} {'tenant': {'StringValue': 'acme', 'DataType': 'String'}}\n""")
    assert forqapp.queue_info("shipments").counts["ready"] == 0  # deleted after it was handled


def test_the_docs_aws_cli_example_runs_as_written(server, tmp_path):
    """docs/how-to/sqs.md's AWS CLI block in bash, as it is but for the endpoint: it makes the queue,
    sends and receives."""
    if not (BIN / "aws").exists():
        pytest.skip(f"no AWS CLI in {BIN}")
    page = (ROOT / "docs" / "how-to" / "sqs.md").read_text()
    (block,) = [b for b in re.findall(r"^```sh\n(.*?)^```", page, flags=re.S | re.M) if "aws " in b]
    env = {"PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(tmp_path), "FORQ_AUTH_SECRET": SECRET,
           "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"}
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", block.replace("http://localhost:8082", server)],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    created, sent, received = json.loads("[" + re.sub(r"}\s*{", "},{", result.stdout) + "]")
    assert created == {"QueueUrl": f"{server}/{ACCOUNT}/orders"} and sent["MD5OfMessageBody"] == md5("hello")
    assert [(m["MessageId"], m["Body"]) for m in received["Messages"]] == [(sent["MessageId"], "hello")]
