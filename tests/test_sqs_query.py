"""The SQS listener's query protocol, by direct requests: form-encoded ``POST``s (and ``GET``s)
signed with SigV4 (in the ``Authorization`` header or a presigned URL's query string), their XML
answers parsed here. tests/test_sqs.py runs boto3 on both protocols (the query-era boto3 in
scripts/sqs-query-venv.sh's venv); this module checks the wire itself: every action's parameters
and answer, the errors' ``<ErrorResponse>``, the MD5s, the signature's forms and the choice of
protocol by content type."""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
import xml.etree.ElementTree as ET
from unittest import mock
from urllib.parse import urlencode

import httpx
import pytest
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from forqapp import services
from forqapp.models import Message
from forqapp.sqs import actions

from .conftest import METRICS_SECRET, SECRET, send_raw, sqs_listener
from .test_sqs import ACCOUNT, KEYS_SECRET, REGION, aws_md5_of_attributes, md5

pytestmark = pytest.mark.django_db(transaction=True)

NS = "{http://queue.amazonaws.com/doc/2012-11-05/}"
FORM = "application/x-www-form-urlencoded; charset=utf-8"
LIVE: dict[str, str] = {}


@pytest.fixture(scope="module")
def server(django_db_blocker):
    with sqs_listener(django_db_blocker, {"FORQ_KEYS_SECRET": KEYS_SECRET}) as (url, api):
        LIVE["api"] = api.url
        yield url


@pytest.fixture(autouse=True)
def _fresh(request):
    if "server" in request.fixturenames:
        services.forget_policies()


def call(server: str, action: str | None, params: dict | list | None = None, *, path: str = "/",
         key_id: str = "forq-root", secret: str = SECRET, content_type: str = FORM,
         body: bytes | None = None) -> httpx.Response:
    """A form-encoded POST of ``Action=action`` and ``params``, signed as botocore signs it."""
    pairs = ([("Action", action)] if action else []) + [("Version", "2012-11-05")] + \
        list((params.items() if isinstance(params, dict) else params) or [])
    data = urlencode(pairs).encode() if body is None else body
    request = AWSRequest("POST", server + path, data=data, headers={"Content-Type": content_type})
    SigV4Auth(Credentials(key_id, secret), "sqs", REGION).add_auth(request)
    return httpx.post(server + path, content=data, headers=dict(request.headers.items()), timeout=30)


def presigned(server: str, action: str, params: dict | None = None, *, path: str = "/", expires: int = 60,
              signed_at: dt.datetime | None = None) -> str:
    """A presigned URL (SigV4 in the query string) of ``Action=action`` and ``params``."""
    query = urlencode({"Action": action, "Version": "2012-11-05", **(params or {})})
    request = AWSRequest("GET", f"{server}{path}?{query}")
    signer = SigV4QueryAuth(Credentials("forq-root", SECRET), "sqs", REGION, expires=expires)
    if signed_at is None:
        signer.add_auth(request)
    else:
        with mock.patch("botocore.auth.datetime.datetime") as clock:
            clock.now.return_value = clock.utcnow.return_value = signed_at.replace(tzinfo=None)
            signer.add_auth(request)
    return request.url


def xml(answer: httpx.Response, status: int = 200) -> ET.Element:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "text/xml", answer.headers
    return parse_xml(answer.content)


def parse_xml(data: bytes) -> ET.Element:
    return ET.fromstring(data)  # noqa: S314 - the answer of the server under test


def ok(answer: httpx.Response, action: str) -> ET.Element:
    """The ``<{action}Result>`` of a successful answer (its request id checked)."""
    root = xml(answer)
    assert root.tag == f"{NS}{action}Response"
    assert root.findtext(f"{NS}ResponseMetadata/{NS}RequestId") == answer.headers["x-amzn-requestid"]
    result = root.find(f"{NS}{action}Result")
    return result if result is not None else ET.Element("none")


def error(answer: httpx.Response, status: int = 400) -> tuple[str, str, str]:
    """(Type, Code, Message) of an ``<ErrorResponse>`` (its request id checked)."""
    root = xml(answer, status)
    assert root.tag == f"{NS}ErrorResponse"
    assert root.findtext(f"{NS}RequestId") == answer.headers["x-amzn-requestid"]
    assert root.find(f"{NS}Error/{NS}Detail") is not None
    return tuple(root.findtext(f"{NS}Error/{NS}{name}") for name in ("Type", "Code", "Message"))  # type: ignore[return-value]


def text(element: ET.Element, path: str) -> str | None:
    return element.findtext("/".join(NS + part for part in path.split("/")))


def all_of(element: ET.Element, path: str) -> list[ET.Element]:
    return element.findall("/".join(NS + part for part in path.split("/")))


def pairs(element: ET.Element, name: str) -> dict[str, str]:
    """A flattened map (``<Attribute><Name>…</Name><Value>…</Value></Attribute>``…)."""
    return {text(e, "Name"): text(e, "Value") for e in all_of(element, name)}  # type: ignore[misc]


def message_attributes(element: ET.Element) -> dict[str, dict]:
    out = {}
    for attr in all_of(element, "MessageAttribute"):
        value = {"DataType": text(attr, "Value/DataType")}
        if text(attr, "Value/BinaryValue") is not None:
            value["BinaryValue"] = base64.b64decode(text(attr, "Value/BinaryValue"))
        else:
            value["StringValue"] = text(attr, "Value/StringValue")
        out[text(attr, "Name")] = value
    return out


ATTRIBUTES = {
    "city": {"DataType": "String", "StringValue": "Zürich"},
    "price": {"DataType": "Number", "StringValue": "9.50"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xffbinary"},
}


def attribute_params(prefix: str, attributes: dict) -> dict[str, str]:
    out = {}
    for n, (name, value) in enumerate(attributes.items(), 1):
        out[f"{prefix}MessageAttribute.{n}.Name"] = name
        out[f"{prefix}MessageAttribute.{n}.Value.DataType"] = value["DataType"]
        if "BinaryValue" in value:
            out[f"{prefix}MessageAttribute.{n}.Value.BinaryValue"] = base64.b64encode(value["BinaryValue"]).decode()
        else:
            out[f"{prefix}MessageAttribute.{n}.Value.StringValue"] = value["StringValue"]
    return out


# --- every action -----------------------------------------------------------------------------------


def test_queue_actions(server):
    created = ok(call(server, "CreateQueue", {"QueueName": "q-orders", "Attribute.1.Name": "VisibilityTimeout",
                                              "Attribute.1.Value": "45", "Attribute.2.Name": "DelaySeconds",
                                              "Attribute.2.Value": "0"}), "CreateQueue")
    url = text(created, "QueueUrl")
    assert url == f"{server}/{ACCOUNT}/q-orders"
    # Idempotent; a different attribute is QueueAlreadyExists (the query protocol's code).
    assert text(ok(call(server, "CreateQueue", {"QueueName": "q-orders"}), "CreateQueue"), "QueueUrl") == url
    assert error(call(server, "CreateQueue", {"QueueName": "q-orders", "Attribute.1.Name": "VisibilityTimeout",
                                              "Attribute.1.Value": "46"}))[:2] == ("Sender", "QueueAlreadyExists")
    assert text(ok(call(server, "GetQueueUrl", {"QueueName": "q-orders"}), "GetQueueUrl"), "QueueUrl") == url
    got = ok(call(server, "GetQueueAttributes", {"QueueUrl": url, "AttributeName.1": "VisibilityTimeout",
                                                 "AttributeName.2": "QueueArn"}), "GetQueueAttributes")
    assert pairs(got, "Attribute") == {"VisibilityTimeout": "45", "QueueArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:q-orders"}
    ok(call(server, "SetQueueAttributes", {"QueueUrl": url, "Attribute.1.Name": "RedrivePolicy", "Attribute.1.Value":
                                           json.dumps({"deadLetterTargetArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:"
                                                       "q-orders-dlq", "maxReceiveCount": 3})}), "SetQueueAttributes")
    every = pairs(ok(call(server, "GetQueueAttributes", {"QueueUrl": url, "AttributeName.1": "All"}),
                     "GetQueueAttributes"), "Attribute")
    assert json.loads(every["RedrivePolicy"])["maxReceiveCount"] == 3 and every["VisibilityTimeout"] == "45"
    # ListQueues: its URLs, a prefix, pages.
    for name in ("q-page-a", "q-page-b", "q-page-c"):
        ok(call(server, "CreateQueue", {"QueueName": name}), "CreateQueue")
    listed = ok(call(server, "ListQueues", {"QueueNamePrefix": "q-page-"}), "ListQueues")
    assert [u.text for u in all_of(listed, "QueueUrl")] == [f"{server}/{ACCOUNT}/q-page-{c}" for c in "abc"]
    first = ok(call(server, "ListQueues", {"QueueNamePrefix": "q-page-", "MaxResults": "2"}), "ListQueues")
    assert len(all_of(first, "QueueUrl")) == 2
    second = ok(call(server, "ListQueues", {"QueueNamePrefix": "q-page-", "MaxResults": "2",
                                            "NextToken": text(first, "NextToken")}), "ListQueues")
    assert [u.text for u in all_of(second, "QueueUrl")] == [f"{server}/{ACCOUNT}/q-page-c"]
    assert text(second, "NextToken") is None
    # An answer without a result: PurgeQueue, DeleteQueue.
    ok(call(server, "SendMessage", {"QueueUrl": url, "MessageBody": "purged"}), "SendMessage")
    root = xml(call(server, "PurgeQueue", {"QueueUrl": url}))
    assert root.tag == f"{NS}PurgeQueueResponse" and root.find(f"{NS}PurgeQueueResult") is None
    assert not Message.objects.filter(queue="q-orders").exists()
    ok(call(server, "DeleteQueue", {"QueueUrl": url}), "DeleteQueue")
    assert error(call(server, "GetQueueUrl", {"QueueName": "q-orders"})) == (
        "Sender", "AWS.SimpleQueueService.NonExistentQueue",
        "The specified queue does not exist for this wsdl version.")  # AWS's query-protocol wording


def test_messages_with_attributes_and_md5s(server):
    url = text(ok(call(server, "CreateQueue", {"QueueName": "q-md5"}), "CreateQueue"), "QueueUrl")
    body = "héllo <wörld> & ✓ 𝄞\r\n\"'"
    sent = ok(call(server, "SendMessage", {"QueueUrl": url, "MessageBody": body, "DelaySeconds": "0",
                                           **attribute_params("", ATTRIBUTES)}), "SendMessage")
    assert text(sent, "MD5OfMessageBody") == md5(body)
    assert text(sent, "MD5OfMessageAttributes") == aws_md5_of_attributes(ATTRIBUTES)
    message_id = text(sent, "MessageId")
    assert Message.objects.get(id=message_id).content == body
    got = ok(call(server, "ReceiveMessage", {"QueueUrl": url, "MaxNumberOfMessages": "10", "AttributeName.1": "All",
                                             "MessageAttributeName.1": "All", "VisibilityTimeout": "0"}),
             "ReceiveMessage")
    (message,) = all_of(got, "Message")
    assert text(message, "MessageId") == message_id
    assert text(message, "Body") == body  # "\r" and the markup characters survive the XML
    assert text(message, "MD5OfBody") == md5(body)
    assert message_attributes(message) == ATTRIBUTES
    assert text(message, "MD5OfMessageAttributes") == aws_md5_of_attributes(ATTRIBUTES)
    system = pairs(message, "Attribute")
    assert system["ApproximateReceiveCount"] == "1" and abs(int(system["SentTimestamp"]) - time.time() * 1000) < 60_000
    # Only the attributes asked for; none: no digest.
    got = ok(call(server, "ReceiveMessage", {"QueueUrl": url, "MessageAttributeName.1": "city",
                                             "MessageAttributeName.2": "price", "VisibilityTimeout": "0"}),
             "ReceiveMessage")
    (message,) = all_of(got, "Message")
    assert set(message_attributes(message)) == {"city", "price"} and text(message, "Attribute") is None
    got = ok(call(server, "ReceiveMessage", {"QueueUrl": url}), "ReceiveMessage")
    (message,) = all_of(got, "Message")
    assert text(message, "MessageAttribute") is None and text(message, "MD5OfMessageAttributes") is None
    handle = text(message, "ReceiptHandle")
    ok(call(server, "ChangeMessageVisibility", {"QueueUrl": url, "ReceiptHandle": handle,
                                                "VisibilityTimeout": "600"}), "ChangeMessageVisibility")
    assert all_of(ok(call(server, "ReceiveMessage", {"QueueUrl": url}), "ReceiveMessage"), "Message") == []
    ok(call(server, "DeleteMessage", {"QueueUrl": url, "ReceiptHandle": handle}), "DeleteMessage")
    assert not Message.objects.filter(id=message_id).exists()


def test_batches(server):
    url = text(ok(call(server, "CreateQueue", {"QueueName": "q-batch"}), "CreateQueue"), "QueueUrl")
    sent = ok(call(server, "SendMessageBatch", {
        "QueueUrl": url,
        "SendMessageBatchRequestEntry.1.Id": "one", "SendMessageBatchRequestEntry.1.MessageBody": "first",
        **attribute_params("SendMessageBatchRequestEntry.1.", ATTRIBUTES),
        "SendMessageBatchRequestEntry.2.Id": "bad", "SendMessageBatchRequestEntry.2.MessageBody": "x",
        "SendMessageBatchRequestEntry.2.DelaySeconds": "1000",
        "SendMessageBatchRequestEntry.3.Id": "three", "SendMessageBatchRequestEntry.3.MessageBody": "third",
    }), "SendMessageBatch")
    successful = {text(e, "Id"): e for e in all_of(sent, "SendMessageBatchResultEntry")}
    assert set(successful) == {"one", "three"}
    assert text(successful["one"], "MD5OfMessageBody") == md5("first")
    assert text(successful["one"], "MD5OfMessageAttributes") == aws_md5_of_attributes(ATTRIBUTES)
    assert text(successful["three"], "MD5OfMessageAttributes") is None
    (failed,) = all_of(sent, "BatchResultErrorEntry")
    assert (text(failed, "Id"), text(failed, "SenderFault"), text(failed, "Code")) == (
        "bad", "true", "InvalidParameterValue")
    got = all_of(ok(call(server, "ReceiveMessage", {"QueueUrl": url, "MaxNumberOfMessages": "10",
                                                    "MessageAttributeName.1": "All"}), "ReceiveMessage"), "Message")
    assert sorted(text(m, "Body") for m in got) == ["first", "third"]
    handles = [text(m, "ReceiptHandle") for m in got]
    changed = ok(call(server, "ChangeMessageVisibilityBatch", {
        "QueueUrl": url,
        "ChangeMessageVisibilityBatchRequestEntry.1.Id": "a",
        "ChangeMessageVisibilityBatchRequestEntry.1.ReceiptHandle": handles[0],
        "ChangeMessageVisibilityBatchRequestEntry.1.VisibilityTimeout": "0",
        "ChangeMessageVisibilityBatchRequestEntry.2.Id": "b",
        "ChangeMessageVisibilityBatchRequestEntry.2.ReceiptHandle": handles[1],
        "ChangeMessageVisibilityBatchRequestEntry.2.VisibilityTimeout": "43201",
    }), "ChangeMessageVisibilityBatch")
    assert [text(e, "Id") for e in all_of(changed, "ChangeMessageVisibilityBatchResultEntry")] == ["a"]
    assert [(text(e, "Id"), text(e, "Code")) for e in all_of(changed, "BatchResultErrorEntry")] == [
        ("b", "InvalidParameterValue")]
    deleted = ok(call(server, "DeleteMessageBatch", {
        "QueueUrl": url,
        "DeleteMessageBatchRequestEntry.1.Id": "x", "DeleteMessageBatchRequestEntry.1.ReceiptHandle": handles[1],
        "DeleteMessageBatchRequestEntry.2.Id": "y", "DeleteMessageBatchRequestEntry.2.ReceiptHandle": "garbage",
    }), "DeleteMessageBatch")
    assert [text(e, "Id") for e in all_of(deleted, "DeleteMessageBatchResultEntry")] == ["x"]
    assert [(text(e, "Id"), text(e, "Code")) for e in all_of(deleted, "BatchResultErrorEntry")] == [
        ("y", "ReceiptHandleIsInvalid")]
    assert Message.objects.filter(queue="q-batch").count() == 1
    # The batch errors of the request as a whole, with their query codes.
    assert error(call(server, "SendMessageBatch", {"QueueUrl": url, "Entries": ""}))[1] == \
        "AWS.SimpleQueueService.EmptyBatchRequest"
    eleven = {f"SendMessageBatchRequestEntry.{n}.{k}": v for n in range(1, 12)
              for k, v in (("Id", f"e{n}"), ("MessageBody", "x"))}
    assert error(call(server, "SendMessageBatch", {"QueueUrl": url, **eleven}))[1] == \
        "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
    assert error(call(server, "DeleteMessageBatch", {
        "QueueUrl": url, "DeleteMessageBatchRequestEntry.1.Id": "s", "DeleteMessageBatchRequestEntry.1.ReceiptHandle":
        "h", "DeleteMessageBatchRequestEntry.2.Id": "s", "DeleteMessageBatchRequestEntry.2.ReceiptHandle": "h"}))[1] \
        == "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"


def test_the_queue_url_may_be_the_requests_path(server):
    """Older SDKs post a queue's actions to the queue's URL, without a QueueUrl parameter."""
    ok(call(server, "CreateQueue", {"QueueName": "q-path"}), "CreateQueue")
    path = f"/{ACCOUNT}/q-path"
    sent = ok(call(server, "SendMessage", {"MessageBody": "to the path"}, path=path), "SendMessage")
    got = ok(call(server, "ReceiveMessage", {"WaitTimeSeconds": "1"}, path=path), "ReceiveMessage")
    assert text(got, "Message/MessageId") == text(sent, "MessageId")
    assert text(got, "Message/Body") == "to the path"
    assert error(call(server, "SendMessage", {"MessageBody": "x"}, path=f"/{ACCOUNT}/q-nowhere"))[1] == \
        "AWS.SimpleQueueService.NonExistentQueue"
    # Without a path or parameter: the parameter is missing.
    assert error(call(server, "SendMessage", {"MessageBody": "x"}))[1] == "MissingParameter"


def test_a_long_poll_with_nothing_answers_an_empty_result(server):
    url = text(ok(call(server, "CreateQueue", {"QueueName": "q-empty"}), "CreateQueue"), "QueueUrl")
    started = time.monotonic()
    got = ok(call(server, "ReceiveMessage", {"QueueUrl": url, "WaitTimeSeconds": "1"}), "ReceiveMessage")
    assert all_of(got, "Message") == [] and time.monotonic() - started > 0.9


# --- errors ----------------------------------------------------------------------------------------


def test_errors_are_error_responses_with_query_codes(server):
    url = text(ok(call(server, "CreateQueue", {"QueueName": "q-errors"}), "CreateQueue"), "QueueUrl")
    cases = [
        (("NoSuchAction", {}), "InvalidAction", "NoSuchAction"),
        ((None, {}), "MissingAction", "Action"),
        (("ListQueues", {"MaxResults": "abc"}), "InvalidParameterValue", "Must be an integer"),
        (("ListQueues", {"MaxResults": "0"}), "InvalidParameterValue", "between 1 and 1000"),
        (("SendMessage", {"QueueUrl": url, "MessageBody": "bell \x07"}), "InvalidMessageContents", ""),
        (("SendMessage", {"QueueUrl": url, "MessageBody": "x", "MessageAttribute.1.Name": "n",
                          "MessageAttribute.1.Value.DataType": "Number",
                          "MessageAttribute.1.Value.StringValue": "abc"}), "InvalidParameterValue", ""),
        (("SendMessage", {"QueueUrl": url, "MessageBody": "x", "MessageAttribute.1.Value.DataType": "String"}),
         "MissingParameter", "MessageAttribute.1.Name"),
        (("GetQueueAttributes", {"QueueUrl": url, "AttributeName.1": "Colour"}), "InvalidAttributeName", ""),
        (("CreateQueue", {"QueueName": "q-bad", "Attribute.1.Name": "VisibilityTimeout",
                          "Attribute.1.Value": "43201"}), "InvalidAttributeValue", ""),
        (("DeleteMessage", {"QueueUrl": url, "ReceiptHandle": "garbage"}), "ReceiptHandleIsInvalid", ""),
        (("ReceiveMessage", {"QueueUrl": url, "WaitTimeSeconds": "21"}), "InvalidParameterValue", ""),
        (("ChangeMessageVisibility", {"QueueUrl": url, "VisibilityTimeout": "5"}), "MissingParameter",
         "ReceiptHandle"),
    ]
    for (action, params), code, words in cases:
        kind, got, message = error(call(server, action, params), 404 if code == "ReceiptHandleIsInvalid" else 400)
        assert (kind, got) == ("Sender", code), (action, params, message)
        assert words in message, (action, message)
    for action in actions.UNSUPPORTED[:1]:  # (an SQS action forqapp does not do, if any is left)
        assert error(call(server, action, {"QueueUrl": url}))[1] == "AWS.SimpleQueueService.UnsupportedOperation"
    # Parameters that are no form: a name twice, bytes that are not UTF-8.
    assert error(call(server, "ListQueues", [("QueueNamePrefix", "a"), ("QueueNamePrefix", "b")]))[1] == \
        "MalformedQueryString"
    # A member numbered otherwise than 1, 2, … is refused, not dropped (the attribute was lost).
    for number in ("0", "-1", "abc", "01", "١"):
        kind, code, message = error(call(server, "SendMessage", {
            "QueueUrl": url, "MessageBody": "x", f"MessageAttribute.{number}.Name": "a",
            f"MessageAttribute.{number}.Value.DataType": "String", f"MessageAttribute.{number}.Value.StringValue": "v"}))
        assert (code, message) == ("InvalidParameterValue", f"MessageAttribute.{number} is not a member of a list: "
                                   "members are numbered 1, 2, 3, …"), number
    assert error(call(server, "SendMessageBatch", {"QueueUrl": url, "SendMessageBatchRequestEntry.0.Id": "a",
                                                   "SendMessageBatchRequestEntry.0.MessageBody": "x"}))[1] == \
        "InvalidParameterValue"
    # Members with a gap in their numbers (outside testers: .1 and .3 without .2, .2 without .1 were taken).
    batch = {"QueueUrl": url, "SendMessageBatchRequestEntry.1.Id": "a", "SendMessageBatchRequestEntry.1.MessageBody": "x",
             "SendMessageBatchRequestEntry.3.Id": "c", "SendMessageBatchRequestEntry.3.MessageBody": "z"}
    attribute = {"QueueUrl": url, "MessageBody": "x", "MessageAttribute.2.Name": "a",
                 "MessageAttribute.2.Value.DataType": "String", "MessageAttribute.2.Value.StringValue": "v"}
    for action, params, missing in [("SendMessageBatch", batch, "SendMessageBatchRequestEntry.2"),
                                    ("SendMessage", attribute, "MessageAttribute.1"),
                                    ("GetQueueAttributes", {"QueueUrl": url, "AttributeName.2": "All"}, "AttributeName.1")]:
        kind, code, message = error(call(server, action, params))
        assert (code, message) == ("InvalidParameterValue", f"{missing} is missing: the members of a list are "
                                   "numbered 1, 2, 3, … without a gap"), action
    assert error(call(server, None, body=b"Action=ListQueues&QueueNamePrefix=%FF"))[1] == "MalformedQueryString"
    assert error(call(server, None, body=b"Action=ListQueues&QueueNamePrefix=\xff"))[1] == "MalformedQueryString"
    many = b"Action=ListQueues&" + b"&".join(b"p%d=1" % n for n in range(10_001))
    assert "more than 10000" in error(call(server, None, body=many))[2]
    assert not Message.objects.filter(queue="q-errors").exists()


def test_authentication_errors(server):
    kind, code, _ = error(call(server, "ListQueues", secret="wrong-" + SECRET), 403)
    assert (kind, code) == ("Sender", "SignatureDoesNotMatch")
    assert error(call(server, "ListQueues", key_id="FQKNOSUCHKEY00000000"), 403)[1] == "InvalidClientTokenId"
    unsigned = httpx.post(server + "/", content=b"Action=ListQueues&Version=2012-11-05", headers={"Content-Type": FORM})
    assert error(unsigned, 403)[1] == "MissingAuthenticationToken"
    # The body changed after signing.
    request = AWSRequest("POST", server + "/", data=b"Action=ListQueues", headers={"Content-Type": FORM})
    SigV4Auth(Credentials("forq-root", SECRET), "sqs", REGION).add_auth(request)
    changed = httpx.post(server + "/", content=b"Action=DeleteQueue", headers=dict(request.headers.items()))
    assert error(changed, 403)[1] == "SignatureDoesNotMatch"


def test_the_key_and_the_grant_named_in_the_url_are_checked_before_the_body(server, settings):
    """As on the JSON protocol, what the headers (and the query string) tell is refused before the
    body is received: here the body never comes, and the answer is not the body's timeout."""
    from forqapp.keys import service as key_service

    settings.FORQ_KEYS_SECRET = KEYS_SECRET
    host, port = server.removeprefix("http://").split(":")

    def headers_only(key_id: str, secret: str, query: str) -> tuple[int, bytes]:
        request = AWSRequest("POST", f"{server}/?{query}", data=b"", headers={"Content-Type": FORM})
        SigV4Auth(Credentials(key_id, secret), "sqs", REGION).add_auth(request)
        head = "".join(f"{k}: {v}\r\n" for k, v in request.headers.items() if k.lower() != "content-length")
        raw = f"POST /?{query} HTTP/1.1\r\nHost: {host}:{port}\r\n{head}Content-Length: 1000\r\n\r\n".encode()
        status, _, body = send_raw((host, int(port)), raw, timeout=20)  # the body timeout: 30 s
        return status, body

    status, body = headers_only("FQKNOSUCHKEY00000000", "x", "Action=ListQueues")
    assert status == 403 and b"<Code>InvalidClientTokenId</Code>" in body
    issued = key_service.create("sqs-query-producer", ["q-granted:produce"], actor="test", via="test")
    status, body = headers_only(issued.key.access_key_id, issued.secret, "Action=ReceiveMessage")
    assert status == 403 and b"<Code>AccessDenied</Code>" in body and b"consume" in body
    status, body = headers_only(issued.key.access_key_id, issued.secret, "Action=NoSuchAction")
    assert status == 400 and b"<Code>InvalidAction</Code>" in body
    # Its grant's action, in the body this time, is done; another is refused once the body is in.
    ok(call(server, "CreateQueue", {"QueueName": "q-granted"}), "CreateQueue")
    url = f"{server}/{ACCOUNT}/q-granted"
    ok(call(server, "SendMessage", {"QueueUrl": url, "MessageBody": "m"}, key_id=issued.key.access_key_id,
            secret=issued.secret), "SendMessage")
    assert error(call(server, "PurgeQueue", {"QueueUrl": url}, key_id=issued.key.access_key_id,
                      secret=issued.secret), 403)[1] == "AccessDenied"
    assert Message.objects.filter(queue="q-granted").count() == 1


# --- SigV4 in the query string ------------------------------------------------------------------------


def test_presigned_urls(server):
    ok(call(server, "CreateQueue", {"QueueName": "q-presigned"}), "CreateQueue")
    url = f"{server}/{ACCOUNT}/q-presigned"
    sent = ok(httpx.get(presigned(server, "SendMessage", {"QueueUrl": url, "MessageBody": "by a presigned URL",
                                                          **attribute_params("", ATTRIBUTES)})), "SendMessage")
    assert text(sent, "MD5OfMessageBody") == md5("by a presigned URL")
    assert text(sent, "MD5OfMessageAttributes") == aws_md5_of_attributes(ATTRIBUTES)
    # To the queue's URL (the path names the queue), and listed.
    got = ok(httpx.get(presigned(server, "ReceiveMessage", {"MessageAttributeName.1": "All"},
                                 path=f"/{ACCOUNT}/q-presigned")), "ReceiveMessage")
    assert text(got, "Message/Body") == "by a presigned URL" and message_attributes(all_of(got, "Message")[0]) == \
        ATTRIBUTES
    listed = ok(httpx.get(presigned(server, "ListQueues", {"QueueNamePrefix": "q-presigned"})), "ListQueues")
    assert [u.text for u in all_of(listed, "QueueUrl")] == [url]
    # A parameter changed after signing, or the signature's own.
    good = presigned(server, "ListQueues", {"QueueNamePrefix": "q-presigned"})
    assert error(httpx.get(good.replace("q-presigned", "q-other")), 403)[1] == "SignatureDoesNotMatch"
    assert error(httpx.get(good.replace("X-Amz-Expires=60", "X-Amz-Expires=600")), 403)[1] == \
        "SignatureDoesNotMatch"
    # Expired: signed 2 minutes ago for 60 s; signed 2 minutes ago for 300 s is still good.
    past = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=2)
    kind, code, message = error(httpx.get(presigned(server, "ListQueues", signed_at=past)), 403)
    assert code == "AccessDenied" and "expired" in message
    ok(httpx.get(presigned(server, "ListQueues", signed_at=past, expires=300)), "ListQueues")
    # Signed for the future (more than the allowed skew away) is refused; the form is checked.
    future = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=20)
    assert error(httpx.get(presigned(server, "ListQueues", signed_at=future, expires=3600)), 403)[1] == \
        "SignatureDoesNotMatch"
    assert error(httpx.get(good.replace("X-Amz-Algorithm=AWS4-HMAC-SHA256", "X-Amz-Algorithm=AWS4-HMAC-MD5")),
                 403)[1] == "IncompleteSignature"
    assert error(httpx.get(good.replace("X-Amz-Expires=60", "X-Amz-Expires=0")), 403)[1] == \
        "AuthorizationQueryParametersError"
    # A signature parameter given twice (the first one good): which would be checked? Refused.
    assert error(httpx.get(good + "&X-Amz-Signature=" + "0" * 64))[1] == "MalformedQueryString"
    assert error(httpx.get(good + "&X-Amz-Date=20200101T000000Z"))[1] == "MalformedQueryString"
    # On the JSON protocol too: a POST with X-Amz-Target (signed) to a presigned URL, no body.
    request = AWSRequest("POST", server + "/", data=b"", headers={
        "X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0"})
    SigV4QueryAuth(Credentials("forq-root", SECRET), "sqs", REGION, expires=60).add_auth(request)
    assert "X-Amz-Signature=" in request.url and "Authorization" not in request.headers
    answer = httpx.post(request.url, content=b"", headers=dict(request.headers.items()))
    assert answer.status_code == 200 and url in answer.json()["QueueUrls"], answer.text
    assert httpx.post(request.url, content=b"{}", headers=dict(request.headers.items())).status_code == 403


# --- the protocol, chosen by the content type --------------------------------------------------------------


def test_the_content_type_chooses_the_protocol(server):
    url = text(ok(call(server, "CreateQueue", {"QueueName": "q-both"}), "CreateQueue"), "QueueUrl")
    # The same action in JSON 1.0 (X-Amz-Target): a JSON answer, and a JSON error.
    body = json.dumps({"QueueName": "q-both"}).encode()
    request = AWSRequest("POST", server + "/", data=body, headers={
        "X-Amz-Target": "AmazonSQS.GetQueueUrl", "Content-Type": "application/x-amz-json-1.0"})
    SigV4Auth(Credentials("forq-root", SECRET), "sqs", REGION).add_auth(request)
    answer = httpx.post(server + "/", content=body, headers=dict(request.headers.items()))
    assert answer.headers["content-type"] == "application/x-amz-json-1.0" and answer.json() == {"QueueUrl": url}
    # A form, with or without its charset, or a GET: the query protocol.
    for content_type in (FORM, "application/x-www-form-urlencoded", "Application/X-WWW-Form-Urlencoded"):
        got = ok(call(server, "GetQueueUrl", {"QueueName": "q-both"}, content_type=content_type), "GetQueueUrl")
        assert text(got, "QueueUrl") == url
    assert text(ok(httpx.get(presigned(server, "GetQueueUrl", {"QueueName": "q-both"})), "GetQueueUrl"),
                "QueueUrl") == url
    # A POST of neither (no X-Amz-Target, no form) is refused as the JSON protocol words it.
    answer = httpx.post(server + "/", content=b"Action=ListQueues", headers={"Content-Type": "text/plain"})
    assert answer.status_code == 400 and answer.json()["__type"] == "com.amazonaws.sqs#InvalidAction"
    # Each protocol's requests are counted under their action.
    metrics = httpx.get(LIVE["api"] + "/metrics", headers={"X-API-Key": METRICS_SECRET}).text
    assert 'forq_sqs_requests_total{action="GetQueueUrl",status="200"}' in metrics
    assert 'forq_sqs_requests_total{action="CreateQueue",status="200"}' in metrics


def test_a_model_driven_parse_and_render():
    """Without a server: the model turns forms into the JSON protocol's shapes and back (lists,
    maps, nested structures, blobs as base64, integers and booleans)."""
    from forqapp.sqs import query

    params = {"QueueUrl": "u", "SendMessageBatchRequestEntry.2.Id": "b", "SendMessageBatchRequestEntry.1.Id": "a",
              "SendMessageBatchRequestEntry.1.MessageBody": "x", "SendMessageBatchRequestEntry.1.DelaySeconds": "5",
              "SendMessageBatchRequestEntry.1.MessageAttribute.1.Name": "k",
              "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType": "Binary",
              "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.BinaryValue": "AAE=",
              "SendMessageBatchRequestEntry.2.MessageBody": "y", "Unknown.1": "ignored"}
    assert query.parse("SendMessageBatch", params) == {"QueueUrl": "u", "Entries": [
        {"Id": "a", "MessageBody": "x", "DelaySeconds": 5,
         "MessageAttributes": {"k": {"DataType": "Binary", "BinaryValue": "AAE="}}},
        {"Id": "b", "MessageBody": "y"}]}
    assert query.parse("TagQueue", {"QueueUrl": "u", "Tag.1.Key": "team", "Tag.1.Value": "a"}) == \
        {"QueueUrl": "u", "Tags": {"team": "a"}}
    assert query.parse("UntagQueue", {"QueueUrl": "u", "TagKey.1": "team"}) == {"QueueUrl": "u", "TagKeys": ["team"]}
    assert query.parse("ReceiveMessage", {"QueueUrl": "u", "WaitTimeSeconds": "1.5"})["WaitTimeSeconds"] == "1.5"
    assert query.parse("SendMessageBatch", {"QueueUrl": "u", "Entries": ""}) == {"QueueUrl": "u", "Entries": []}
    rendered = query.render("SendMessageBatch", {"Successful": [{"Id": "a", "MessageId": "m", "MD5OfMessageBody": "d"}],
                                                 "Failed": [{"Id": "b", "SenderFault": True, "Code": "C",
                                                             "Message": "<\ud800>"}]}, "rid")
    root = parse_xml(rendered)
    result = root.find(f"{NS}SendMessageBatchResult")
    assert text(result, "SendMessageBatchResultEntry/MessageId") == "m"
    assert text(result, "BatchResultErrorEntry/SenderFault") == "true"
    assert text(result, "BatchResultErrorEntry/Message") == "<\ufffd>"  # XML has no lone surrogate
    root = parse_xml(query.render("ListQueueTags", {"Tags": {"team": "a"}}, "rid"))
    (tag,) = all_of(root.find(f"{NS}ListQueueTagsResult"), "Tag")
    assert (text(tag, "Key"), text(tag, "Value")) == ("team", "a")


def test_the_docs_presigned_url_example_runs_as_written(server, monkeypatch, capsys):
    """docs/how-to/sqs.md's presign block, with only its endpoint URL pointed at this server: the
    URL it prints lists the queues by a GET, with no other credentials."""
    import re

    from .conftest import ROOT

    ok(call(server, "CreateQueue", {"QueueName": "shipments"}), "CreateQueue")
    page = (ROOT / "docs" / "how-to" / "sqs.md").read_text()
    (block,) = [b for b in re.findall(r"^```python\n(.*?)^```", page, flags=re.S | re.M)
                if b.startswith("# presign.py")]
    monkeypatch.setenv("FORQ_AUTH_SECRET", SECRET)
    exec(compile(block.replace("http://localhost:8082", server), "sqs.md", "exec"), {})  # noqa: S102 - the docs' code
    url = capsys.readouterr().out.strip()
    assert "X-Amz-Signature=" in url
    listed = ok(httpx.get(url), "ListQueues")
    assert [u.text for u in all_of(listed, "QueueUrl")] == [f"{server}/{ACCOUNT}/shipments"]
