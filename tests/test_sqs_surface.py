"""The rest of SQS's surface on forqapp's SQS face, driven by boto3 (and the AWS CLI) against a live
``forq_serve`` whose account id is a setting (``FORQ_SQS_ACCOUNT_ID``): queue tags, AddPermission /
RemovePermission and the ``Policy`` attribute, the KMS/SSE attributes, ``SenderId`` and
``AWSTraceHeader``, 1 MiB messages, stale receipt handles, ``MessageAttributeNames`` patterns, and
SQS's errors for bad message attributes."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import time

import boto3
import botocore
import pytest
from botocore.config import Config

import forqapp
from forqapp import services
from forqapp.conf import ForqSettings, forq_settings
from forqapp.models import Message, Queue
from forqapp.services import queues as queue_services
from forqapp.sqs import queues

from .conftest import ROOT, SECRET, sqs_listener
from .test_sqs import KEYS_SECRET, REGION, client, code_of

pytestmark = pytest.mark.django_db(transaction=True)
ACCOUNT = "123456789012"  # this module's server's FORQ_SQS_ACCOUNT_ID


@pytest.fixture(scope="module")
def server(django_db_blocker):
    with sqs_listener(django_db_blocker, {"FORQ_KEYS_SECRET": KEYS_SECRET, "FORQ_SQS_ACCOUNT_ID": ACCOUNT}) as (url, api):
        yield url


@pytest.fixture
def sqs(server):
    services.forget_policies()
    return client(server)


def error_of(call, **kwargs) -> tuple[str, str]:
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        call(**kwargs)
    return code_of(exc)[0], exc.value.response["Error"]["Message"]


def stored_tags(name: str) -> dict:
    return Queue.objects.get(name=name).sqs_tags or {}


# --- the account id -------------------------------------------------------------------------------


def test_the_account_id_is_a_setting_in_urls_and_arns(sqs, server):
    url = sqs.create_queue(QueueName="acct")["QueueUrl"]
    assert url == f"{server}/{ACCOUNT}/acct"
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    assert arn == f"arn:aws:sqs:{REGION}:{ACCOUNT}:acct"
    assert sqs.get_queue_url(QueueName="acct", QueueOwnerAWSAccountId=ACCOUNT)["QueueUrl"] == url
    # Another account's URL (the default one's too) names no queue here.
    assert error_of(sqs.send_message, QueueUrl=f"{server}/000000000000/acct", MessageBody="x")[0] == \
        "AWS.SimpleQueueService.NonExistentQueue"
    assert error_of(sqs.get_queue_url, QueueName="acct", QueueOwnerAWSAccountId="000000000000")[0] == \
        "AWS.SimpleQueueService.NonExistentQueue"
    # Every region names the same queues (the ARN says the region the client signed for).
    elsewhere = boto3.client("sqs", endpoint_url=server, region_name="ap-south-1", aws_access_key_id="forq-root",
                             aws_secret_access_key=SECRET, config=Config(retries={"max_attempts": 1}))
    assert elsewhere.get_queue_url(QueueName="acct")["QueueUrl"] == url
    assert elsewhere.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"] == \
        f"arn:aws:sqs:ap-south-1:{ACCOUNT}:acct"


def test_the_account_id_setting_is_checked(settings):
    settings.FORQ_SQS_ACCOUNT_ID = "12345"
    assert "12 digits" in ForqSettings.FORQ_SQS_ACCOUNT_ID.problem()
    settings.FORQ_SQS_ACCOUNT_ID = "210987654321"
    assert queues.Origin("http", "h", "r").url("q") == "http://h/210987654321/q"
    assert queues.name_from_url("http://h/210987654321/q") == "q"
    assert ForqSettings.FORQ_SQS_MAX_MESSAGE_BYTES.default == 1_048_576


# --- tags -----------------------------------------------------------------------------------------


def test_tags_are_kept_listed_and_removed(sqs):
    url = sqs.create_queue(QueueName="tagged", tags={"team": "billing", "env": "prod"})["QueueUrl"]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "billing", "env": "prod"}
    sqs.tag_queue(QueueUrl=url, Tags={"env": "staging", "cost": ""})  # a key again: its new value
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "billing", "env": "staging", "cost": ""}
    assert stored_tags("tagged") == {"queue": {"team": "billing", "env": "staging", "cost": ""}}  # durably
    sqs.untag_queue(QueueUrl=url, TagKeys=["team", "never-there"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "staging", "cost": ""}
    sqs.untag_queue(QueueUrl=url, TagKeys=["env", "cost"])
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)
    assert Queue.objects.get(name="tagged").sqs_tags is None
    # CreateQueue of a queue that exists keeps its tags (as SQS).
    sqs.tag_queue(QueueUrl=url, Tags={"a": "1"})
    assert sqs.create_queue(QueueName="tagged", tags={"b": "2"})["QueueUrl"] == url
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"a": "1"}
    # A dead-letter queue has tags of its own; a queue's tags go with it.
    dlq = sqs.create_queue(QueueName="tagged-dlq", tags={"role": "dlq"})["QueueUrl"]
    assert sqs.list_queue_tags(QueueUrl=dlq)["Tags"] == {"role": "dlq"}
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"a": "1"}
    sqs.delete_queue(QueueUrl=dlq)
    assert stored_tags("tagged") == {"queue": {"a": "1"}}
    sqs.delete_queue(QueueUrl=url)
    url = sqs.create_queue(QueueName="tagged")["QueueUrl"]
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)


def test_tag_limits_as_sqs(sqs):
    url = sqs.create_queue(QueueName="limits")["QueueUrl"]
    sqs.tag_queue(QueueUrl=url, Tags={f"k{i}": "v" for i in range(50)})
    code, message = error_of(sqs.tag_queue, QueueUrl=url, Tags={"one-more": "v"})
    assert (code, message) == ("InvalidParameterValue", "Too many tags added for queue limits.")
    sqs.tag_queue(QueueUrl=url, Tags={"k0": "changed"})  # (50 still)
    assert len(sqs.list_queue_tags(QueueUrl=url)["Tags"]) == 50
    code, message = error_of(sqs.tag_queue, QueueUrl=url, Tags={"k" * 129: "v"})
    assert code == "InvalidParameterValue" and "between 1 and 128" in message
    code, message = error_of(sqs.tag_queue, QueueUrl=url, Tags={"x": "v" * 257})
    assert code == "InvalidParameterValue" and "between 0 and 256" in message
    sqs.untag_queue(QueueUrl=url, TagKeys=[f"k{i}" for i in range(50)])
    sqs.tag_queue(QueueUrl=url, Tags={"k" * 128: "v" * 256})
    assert error_of(sqs.tag_queue, QueueUrl=url, Tags={})[0] == "MissingParameter"
    assert error_of(sqs.untag_queue, QueueUrl=url, TagKeys=[])[0] == "MissingParameter"
    code, _ = error_of(sqs.create_queue, QueueName="limits-new", tags={f"k{i}": "v" for i in range(51)})
    assert code == "InvalidParameterValue" and not Queue.objects.filter(name="limits-new").exists()
    assert error_of(sqs.list_queue_tags, QueueUrl=url + "-nope")[0] == "AWS.SimpleQueueService.NonExistentQueue"


def test_tag_characters_as_sqs(sqs):
    """Keys and values of Unicode letters, digits, white space and ``_ . : / = + - @``; no key
    starting ``aws:`` (any case); the queue's tags unchanged by a refused call."""
    url = sqs.create_queue(QueueName="chars")["QueueUrl"]
    kept = {"équipe / ünit": "Zürich = 東京 + 1", "a_b.c:d/e=f+g-h@i": "", "x": "tab\u3000space"}
    sqs.tag_queue(QueueUrl=url, Tags=kept)
    for tags, why in [
        ({"aws:owner": "me"}, "Tag key aws:owner is invalid. Tag keys cannot start with the reserved prefix aws:"),
        ({"AWS:owner": "me"}, "Tag key AWS:owner is invalid. Tag keys cannot start with the reserved prefix aws:"),
        ({"cost#center": "1"}, "Tag key cost#center is invalid. Tag keys can only contain Unicode letters, digits, "
                               "white space, and the characters _ . : / = + - @."),
        ({"k": "a,b"}, "Tag value a,b is invalid. Tag values can only contain Unicode letters, digits, "
                       "white space, and the characters _ . : / = + - @."),
        ({"k": "tab\there"}, None), ({"k": "emoji \U0001F600"}, None), ({"k": "<b>"}, None),
    ]:
        code, message = error_of(sqs.tag_queue, QueueUrl=url, Tags=tags)
        assert code == "InvalidParameterValue", tags
        assert why is None or message == why, (tags, message)
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == kept
    sqs.tag_queue(QueueUrl=url, Tags={"owner": "aws:me"})  # (a value may start so)
    code, _ = error_of(sqs.create_queue, QueueName="chars-new", tags={"aws:x": "1"})
    assert code == "InvalidParameterValue" and not Queue.objects.filter(name="chars-new").exists()


def test_concurrent_tag_and_permission_changes_are_each_kept(sqs, server):
    url = sqs.create_queue(QueueName="busy")["QueueUrl"]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            own = client(server)
            own.tag_queue(QueueUrl=url, Tags={f"t{i}": str(i)})
            own.add_permission(QueueUrl=url, Label=f"l{i}", AWSAccountIds=["111122223333"], Actions=["SendMessage"])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {f"t{i}": str(i) for i in range(8)}
    policy = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"])
    assert sorted(s["Sid"] for s in policy["Statement"]) == [f"l{i}" for i in range(8)]


def test_tags_need_manage_and_listing_them_read(server, settings):
    from forqapp.keys import service as key_service

    settings.FORQ_KEYS_SECRET = KEYS_SECRET
    url = client(server).create_queue(QueueName="guarded", tags={"a": "b"})["QueueUrl"]
    issued = key_service.create("sqs-reader", ["guarded:read"], actor="test", via="test")
    reader = client(server, issued.key.access_key_id, issued.secret)
    assert reader.list_queue_tags(QueueUrl=url)["Tags"] == {"a": "b"}
    for call, kwargs in ((reader.tag_queue, {"Tags": {"c": "d"}}), (reader.untag_queue, {"TagKeys": ["a"]}),
                         (reader.add_permission, {"Label": "x", "AWSAccountIds": ["111122223333"],
                                                  "Actions": ["SendMessage"]})):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            call(QueueUrl=url, **kwargs)
        assert code_of(exc)[::2] == ("AccessDenied", 403)
    assert stored_tags("guarded") == {"queue": {"a": "b"}}


def test_the_admin_queue_page_shows_the_tags(sqs):
    from django.contrib.admin.sites import site

    url = sqs.create_queue(QueueName="shown")["QueueUrl"]
    queue_services.set_sqs_tags("shown", {"queue": {"team": "<b>ops</b>"}})  # (SQS refuses "<": stored otherwise)
    sqs.create_queue(QueueName="shown-dlq", tags={"kind": "dead"})
    admin = site._registry[Queue]
    html = str(admin.sqs_queue_tags(Queue.objects.get(name="shown")))
    assert "<code>team</code> = <code>&lt;b&gt;ops&lt;/b&gt;</code>" in html  # escaped
    assert "dead-letter queue: <code>kind</code> = <code>dead</code>" in html
    assert "sqs_queue_tags" in admin.info_fields
    sqs.untag_queue(QueueUrl=url, TagKeys=["team"])


# --- permissions: the Policy attribute ------------------------------------------------------------


def test_add_and_remove_permission_build_the_policy_as_sqs(sqs):
    url = sqs.create_queue(QueueName="shared-q")["QueueUrl"]
    arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:shared-q"
    assert "Policy" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    sqs.add_permission(QueueUrl=url, Label="send", AWSAccountIds=["111122223333"], Actions=["SendMessage"])
    sqs.add_permission(QueueUrl=url, Label="both", AWSAccountIds=["111122223333", "444455556666"],
                       Actions=["ReceiveMessage", "DeleteMessage"])
    policy = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]["Policy"])
    assert policy == {"Version": "2012-10-17", "Id": f"{arn}/SQSDefaultPolicy", "Statement": [
        {"Sid": "send", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::111122223333:root"},
         "Action": "SQS:SendMessage", "Resource": arn},
        {"Sid": "both", "Effect": "Allow", "Principal": {"AWS": ["arn:aws:iam::111122223333:root",
                                                                 "arn:aws:iam::444455556666:root"]},
         "Action": ["SQS:ReceiveMessage", "SQS:DeleteMessage"], "Resource": arn}]}
    code, message = error_of(sqs.add_permission, QueueUrl=url, Label="send", AWSAccountIds=["111122223333"],
                             Actions=["SendMessage"])
    assert (code, message) == ("InvalidParameterValue",
                               "Value send for parameter Label is invalid. Reason: Already exists.")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sqs.add_permission(QueueUrl=url, Label="many", AWSAccountIds=["111122223333"], Actions=["SendMessage"] * 8)
    assert code_of(exc) == ("OverLimit", "OverLimit", 403)  # SQS's OverLimit is a 403
    assert exc.value.response["Error"]["Message"] == "8 Actions were found, maximum allowed is 7."
    code, message = error_of(sqs.add_permission, QueueUrl=url, Label="own", AWSAccountIds=["111122223333"],
                             Actions=["CreateQueue"])
    assert code == "InvalidParameterValue" and "Only the queue owner is allowed to invoke this action" in message
    assert error_of(sqs.add_permission, QueueUrl=url, Label="bad label!", AWSAccountIds=["111122223333"],
                    Actions=["SendMessage"])[0] == "InvalidParameterValue"
    # No account (an empty list, as boto3 sends it): SQS's "Unable to verify"; no action: missing.
    assert error_of(sqs.add_permission, QueueUrl=url, Label="nobody", AWSAccountIds=[], Actions=["SendMessage"]) == (
        "InvalidParameterValue", "Value [] for parameter PrincipalId is invalid. Reason: Unable to verify.")
    assert error_of(sqs.add_permission, QueueUrl=url, Label="nothing", AWSAccountIds=["111122223333"], Actions=[]) \
        == ("MissingParameter", "The request must contain the parameter Actions.")
    sqs.remove_permission(QueueUrl=url, Label="send")
    policy = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"])
    assert [s["Sid"] for s in policy["Statement"]] == ["both"]
    code, message = error_of(sqs.remove_permission, QueueUrl=url, Label="send")
    assert (code, message) == ("InvalidParameterValue", "Value send for parameter Label is invalid. Reason: "
                                                        "can't find label on existing policy.")
    sqs.remove_permission(QueueUrl=url, Label="both")  # the last one: no policy
    assert "Policy" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    # The policy grants nothing here: forqapp's scoped keys decide (the root key sends as before).
    sqs.send_message(QueueUrl=url, MessageBody="still mine")


def test_the_policy_attribute_is_kept_as_given(sqs):
    policy = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Deny", "Principal": "*",
                                                                  "Action": "sqs:*", "Resource": "*"}]})
    url = sqs.create_queue(QueueName="pol", Attributes={"Policy": policy})["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"] == {"Policy": policy}
    assert sqs.create_queue(QueueName="pol", Attributes={"Policy": policy})["QueueUrl"] == url  # the same: fine
    assert error_of(sqs.create_queue, QueueName="pol", Attributes={"Policy": "{}"})[0] == "QueueAlreadyExists"
    sqs.send_message(QueueUrl=url, MessageBody="a Deny policy is not enforced")  # documented
    for bad in ("{not json", "[1]", json.dumps({"x": "y" * 20_480})):
        code, message = error_of(sqs.set_queue_attributes, QueueUrl=url, Attributes={"Policy": bad})
        assert (code, message) == ("InvalidAttributeValue", "Invalid value for the parameter Policy.")
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": ""})
    assert "Policy" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]


@pytest.mark.parametrize("bad", ['{"a": NaN}', '{"a": Infinity}', '{"a": [-Infinity]}', '{"b": 1e999}',
                                 '{"a":NaN, "b":1e999}'])
def test_a_policy_of_json_no_parser_takes_is_refused(sqs, bad):
    """Outside testers: ``Policy`` ``{"a":NaN, "b":1e999}`` was kept, and after AddPermission
    GetQueueAttributes answered NaN and Infinity, which JSON has not."""
    url = sqs.create_queue(QueueName="polnan")["QueueUrl"]
    for call, kwargs in [(sqs.set_queue_attributes, {"QueueUrl": url, "Attributes": {"Policy": bad}}),
                         (sqs.create_queue, {"QueueName": "polnan2", "Attributes": {"Policy": bad}})]:
        code, message = error_of(call, **kwargs)
        assert (code, message) == ("InvalidAttributeValue", "Invalid value for the parameter Policy.")
    sqs.add_permission(QueueUrl=url, Label="l1", AWSAccountIds=["123456789012"], Actions=["SendMessage"])
    shown = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"]
    json.loads(shown, parse_constant=lambda c: pytest.fail(f"{c} in {shown}"))
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName="polnan2")


# --- server-side encryption: kept, answered ------------------------------------------------------


def test_kms_and_sse_attributes_are_kept_with_sqs_validation(sqs):
    url = sqs.create_queue(QueueName="sse")["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["SqsManagedSseEnabled"] == "false" and "KmsMasterKeyId" not in attrs
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"KmsMasterKeyId": "alias/aws/sqs"})
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attrs["KmsMasterKeyId"], attrs["KmsDataKeyReusePeriodSeconds"]) == ("alias/aws/sqs", "300")
    for seconds in ("60", "86400"):
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"KmsDataKeyReusePeriodSeconds": seconds})
        assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["KmsDataKeyReusePeriodSeconds"])[
            "Attributes"] == {"KmsDataKeyReusePeriodSeconds": seconds}
    for seconds in ("59", "86401", "5m"):
        code, message = error_of(sqs.set_queue_attributes, QueueUrl=url,
                                 Attributes={"KmsDataKeyReusePeriodSeconds": seconds})
        assert code == "InvalidAttributeValue" and "KmsDataKeyReusePeriodSeconds" in message
    # One kind of SSE at a time: SSE-SQS turns SSE-KMS off, and the other way round.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"SqsManagedSseEnabled": "true"})
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["SqsManagedSseEnabled"] == "true" and "KmsMasterKeyId" not in attrs
    code, message = error_of(sqs.set_queue_attributes, QueueUrl=url,
                             Attributes={"SqsManagedSseEnabled": "true", "KmsMasterKeyId": "k"})
    assert code == "InvalidAttributeValue" and "one type of server-side encryption" in message
    assert error_of(sqs.set_queue_attributes, QueueUrl=url,
                    Attributes={"SqsManagedSseEnabled": "maybe"})[0] == "InvalidAttributeValue"
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"KmsMasterKeyId": "arn:aws:kms:eu-west-3:1:key/abc"})
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["SqsManagedSseEnabled"] == "false" and attrs["KmsMasterKeyId"].endswith("key/abc")
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"KmsMasterKeyId": ""})
    assert "KmsMasterKeyId" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    # CreateQueue with what the queue has is no conflict.
    assert sqs.create_queue(QueueName="sse", Attributes={"SqsManagedSseEnabled": "false"})["QueueUrl"] == url


# --- SenderId and AWSTraceHeader ------------------------------------------------------------------


TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


def test_sender_id_and_trace_header_are_kept_and_answered_when_asked(sqs, server, settings):
    from forqapp.keys import service as key_service

    settings.FORQ_KEYS_SECRET = KEYS_SECRET
    url = sqs.create_queue(QueueName="traced")["QueueUrl"]
    system = {"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}}
    sent = sqs.send_message(QueueUrl=url, MessageBody="one", MessageSystemAttributes=system)
    assert "MD5OfMessageSystemAttributes" in sent
    issued = key_service.create("sqs-sender", ["traced:produce"], actor="test", via="test")
    producer = client(server, issued.key.access_key_id, issued.secret)
    batch = producer.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "a", "MessageBody": "two", "MessageSystemAttributes": system},
        {"Id": "b", "MessageBody": "three"}])
    assert [e["Id"] for e in batch["Successful"]] == ["a", "b"]
    forqapp.send("traced", "four")  # another face: no SenderId, no trace header
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"],
                              MessageAttributeNames=["All"], VisibilityTimeout=0)["Messages"]
    seen = {m["Body"]: m for m in got}
    assert set(seen) == {"one", "two", "three", "four"}
    assert seen["one"]["Attributes"]["SenderId"] == "forq-root" and seen["one"]["Attributes"]["AWSTraceHeader"] == TRACE
    assert seen["two"]["Attributes"]["SenderId"] == issued.key.access_key_id
    assert seen["two"]["Attributes"]["AWSTraceHeader"] == TRACE
    assert "AWSTraceHeader" not in seen["three"]["Attributes"]
    assert "SenderId" not in seen["four"]["Attributes"] and "AWSTraceHeader" not in seen["four"]["Attributes"]
    assert all("MessageAttributes" not in m for m in got)  # kept under names no message attribute has
    # By name (MessageSystemAttributeNames, or the deprecated AttributeNames), or not at all.
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0,
                              MessageSystemAttributeNames=["SenderId"])["Messages"]
    assert {m["Body"]: m.get("Attributes") for m in got}["one"] == {"SenderId": "forq-root"}
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0,
                              AttributeNames=["AWSTraceHeader"])["Messages"]
    assert {m["Body"]: m.get("Attributes") for m in got}["two"] == {"AWSTraceHeader": TRACE}
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)["Messages"]
    assert all("Attributes" not in m for m in got)
    stored = json.loads(Message.objects.get(id=sent["MessageId"]).attributes)
    assert stored == {"AWS.SenderId": "forq-root", "AWS.AWSTraceHeader": TRACE}


# --- message size ---------------------------------------------------------------------------------


def test_one_mib_messages_and_batches(sqs):
    assert forq_settings.FORQ_MAX_CONTENT_BYTES == 262_144  # the other faces' cap: not the SQS listener's
    url = sqs.create_queue(QueueName="huge")["QueueUrl"]
    body = "x" * 1_048_576
    sqs.send_message(QueueUrl=url, MessageBody=body)
    attributes = {"a": {"DataType": "String", "StringValue": "v" * 2000}}  # (over the other faces' 1,024)
    code, message = error_of(sqs.send_message, QueueUrl=url, MessageBody=body[:-100], MessageAttributes=attributes)
    assert code == "InvalidParameterValue" and "shorter than 1048576 bytes" in message  # the attributes count
    sqs.send_message(QueueUrl=url, MessageBody=body[:-3000], MessageAttributes=attributes)
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])["Messages"]
    assert sorted(len(m["Body"]) for m in got) == [1_048_576 - 3000, 1_048_576]
    assert [m["MessageAttributes"] for m in got if "MessageAttributes" in m] == [attributes]
    # A batch: ten entries of 1 MiB in all (a request body of about 1 MiB, JSON-escaped up to 3x).
    entries = [{"Id": str(i), "MessageBody": "é" * (104_857 // 2)} for i in range(10)]
    assert len(sqs.send_message_batch(QueueUrl=url, Entries=entries)["Successful"]) == 10
    entries[0]["MessageBody"] += "y" * 100
    code, message = error_of(sqs.send_message_batch, QueueUrl=url, Entries=entries)
    assert code == "AWS.SimpleQueueService.BatchRequestTooLong" and "cannot be longer than 1048576 bytes" in message
    # The attributes count toward the batch's total too, as each message's size.
    entries[0]["MessageBody"] = entries[0]["MessageBody"][:-100]
    entries[1]["MessageAttributes"] = {"a": {"DataType": "String", "StringValue": "v" * 200}}
    code, message = error_of(sqs.send_message_batch, QueueUrl=url, Entries=entries)
    assert code == "AWS.SimpleQueueService.BatchRequestTooLong" and "cannot be longer than 1048576 bytes" in message
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "1048576"})
    assert error_of(sqs.set_queue_attributes, QueueUrl=url,
                    Attributes={"MaximumMessageSize": "1048577"})[0] == "InvalidAttributeValue"
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "1024"})
    assert error_of(sqs.send_message, QueueUrl=url, MessageBody="x" * 1025)[0] == "InvalidParameterValue"


def test_the_sqs_message_cap_is_a_setting(settings):
    settings.FORQ_SQS_MAX_MESSAGE_BYTES = 4096
    assert queues.content_cap() == 4096 and queues.max_message_size({}) == 4096
    settings.FORQ_SQS_MAX_MESSAGE_BYTES = 100
    assert ForqSettings.FORQ_SQS_MAX_MESSAGE_BYTES.problem() is not None  # at least SQS's smallest, 1,024


# --- stale receipt handles ------------------------------------------------------------------------


def test_stale_receipt_handles_as_sqs_answers_them(sqs):
    url = sqs.create_queue(QueueName="stale", Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    first = sqs.receive_message(QueueUrl=url)["Messages"][0]
    time.sleep(1.2)
    # The lease is over but nobody received it since: the handle is still its last delivery's, and
    # forqapp changes its visibility (here: visible at once) as it would have just before.
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0)
    second = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"][0]
    assert second["MessageId"] == first["MessageId"]
    # Received again: the old handle's delete succeeds and deletes nothing (attempt fencing) …
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    assert Message.objects.filter(id=first["MessageId"]).exists()
    # … and its visibility change is refused as SQS refuses it.
    code, message = error_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=first["ReceiptHandle"],
                             VisibilityTimeout=5)
    assert code == "InvalidParameterValue"
    assert message == (f"Value {first['ReceiptHandle']} for parameter ReceiptHandle is invalid. Reason: Message does "
                       "not exist or is not available for visibility timeout change.")
    answer = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": "old", "ReceiptHandle": first["ReceiptHandle"], "VisibilityTimeout": 5},
        {"Id": "new", "ReceiptHandle": second["ReceiptHandle"], "VisibilityTimeout": 5}])
    assert [e["Id"] for e in answer["Successful"]] == ["new"]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in answer["Failed"]] == \
        [("old", "InvalidParameterValue", True)]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"])
    assert not Message.objects.filter(id=first["MessageId"]).exists()
    # Deleted: the same answer.
    code, _ = error_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=second["ReceiptHandle"],
                       VisibilityTimeout=5)
    assert code == "InvalidParameterValue"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"])  # twice: fine
    # Given back (another face's release: ready again, not received since): not in flight.
    sqs.send_message(QueueUrl=url, MessageBody="n")
    third = sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"][0]
    raw = base64.urlsafe_b64decode(third["ReceiptHandle"] + "=" * (-len(third["ReceiptHandle"]) % 4))[:-12]
    _, message_id, receipt = raw.decode().split("\x00")  # (the server's MAC key is its own)
    assert services.release_many("stale", [(message_id, int(receipt))]) == 1
    code, _ = error_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=third["ReceiptHandle"],
                       VisibilityTimeout=5)
    assert code == "AWS.SimpleQueueService.MessageNotInflight"


# --- message attributes ---------------------------------------------------------------------------


def test_message_attribute_names_patterns(sqs):
    url = sqs.create_queue(QueueName="patterns")["QueueUrl"]
    given = {name: {"DataType": "String", "StringValue": name} for name in ("bar.x", "bar.y", "barx", "foo", "baz")}
    sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=given)

    def names(*wanted: str) -> list[str]:
        (m,) = sqs.receive_message(QueueUrl=url, MessageAttributeNames=list(wanted), VisibilityTimeout=0)["Messages"]
        return sorted(m.get("MessageAttributes", {}))

    assert names("bar.*") == ["bar.x", "bar.y"]
    assert names("bar.*", "foo") == ["bar.x", "bar.y", "foo"]
    assert names("All") == names(".*") == sorted(given)
    assert names("nothing") == []
    assert names("foo", "baz") == ["baz", "foo"]


@pytest.mark.parametrize(("name", "why"), [
    ("AWS.thing", "must not start with AWS-reserved prefixes"),
    ("amazon.Thing", "must not start with AWS-reserved prefixes"),
    ("bad name", "can contain A-Z, a-z, 0-9, underscore (_), hyphen (-), and period (.)"),
    ("é", "can contain A-Z"),
    ("a..b", "must not have periods in succession (..)"),
    (".a", "must not start or end with a period (.)"),
    ("a.", "must not start or end with a period (.)"),
    ("a" * 257, "can be up to 256 characters long"),
])
def test_invalid_attribute_names_are_refused_in_sqs_words(sqs, name, why):
    url = sqs.create_queue(QueueName="names")["QueueUrl"]
    code, message = error_of(sqs.send_message, QueueUrl=url, MessageBody="m",
                             MessageAttributes={name: {"DataType": "String", "StringValue": "v"}})
    assert code == "InvalidParameterValue" and why in message and message.startswith(
        f"The message attribute name '{name}' is invalid.")
    sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes={
        "a" * 256: {"DataType": "String", "StringValue": "v"}, "a.b-c_d": {"DataType": "String", "StringValue": "v"}})


def test_attribute_values_and_batch_errors(sqs):
    url = sqs.create_queue(QueueName="values")["QueueUrl"]
    good = {"n": {"DataType": "Number.int", "StringValue": "-12.5e3"},
            "s": {"DataType": "String.custom", "StringValue": "text"},
            "b": {"DataType": "Binary.jpeg", "BinaryValue": b"\x00\xff"}}
    sqs.send_message(QueueUrl=url, MessageBody="ok", MessageAttributes=good)
    (m,) = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
    assert m["MessageAttributes"]["n"] == {"DataType": "Number.int", "StringValue": "-12.5e3"}
    assert m["MessageAttributes"]["b"]["BinaryValue"] == b"\x00\xff"
    cases = [
        ({"DataType": "Integer", "StringValue": "1"}, "invalid message attribute type"),
        ({"DataType": "Number", "StringValue": "abc"}, "Can't cast the value of message attribute 'x' to a number"),
        ({"DataType": "Number", "StringValue": "1e200"}, "out of the range of a Number"),
        ({"DataType": "Number", "StringValue": "1" * 39}, "more than 38 significant digits"),
        ({"DataType": "String", "StringValue": ""}, "must contain non-empty message attribute value"),
    ]
    for value, why in cases:
        code, message = error_of(sqs.send_message, QueueUrl=url, MessageBody="m", MessageAttributes={"x": value})
        assert code == "InvalidParameterValue" and why in message, (value, message)
    answer = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "fine", "MessageBody": "m"},
        {"Id": "reserved", "MessageBody": "m", "MessageAttributes": {"AWS.x": {"DataType": "String",
                                                                               "StringValue": "v"}}},
        {"Id": "number", "MessageBody": "m", "MessageAttributes": {"x": cases[1][0]}},
    ])
    assert [e["Id"] for e in answer["Successful"]] == ["fine"]
    failed = {f["Id"]: f for f in answer["Failed"]}
    assert {k: (f["Code"], f["SenderFault"]) for k, f in failed.items()} == {
        "reserved": ("InvalidParameterValue", True), "number": ("InvalidParameterValue", True)}
    assert "AWS-reserved prefixes" in failed["reserved"]["Message"]


# --- the AWS CLI ----------------------------------------------------------------------------------


def test_aws_cli_tags_and_permissions(server):
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "forq-root", "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": REGION, "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"}
    aws = [str(ROOT / ".venv" / "bin" / "aws"), "--endpoint-url", server, "--output", "json", "sqs"]

    def run(*args):
        result = subprocess.run([*aws, *args], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout) if result.stdout.strip() else None

    url = run("create-queue", "--queue-name", "cli-tags", "--tags", "team=ops,env=test")["QueueUrl"]
    assert url.endswith(f"/{ACCOUNT}/cli-tags")
    run("tag-queue", "--queue-url", url, "--tags", "env=prod")
    assert run("list-queue-tags", "--queue-url", url)["Tags"] == {"team": "ops", "env": "prod"}
    run("untag-queue", "--queue-url", url, "--tag-keys", "team")
    assert run("list-queue-tags", "--queue-url", url)["Tags"] == {"env": "prod"}
    run("add-permission", "--queue-url", url, "--label", "cli", "--aws-account-ids", "111122223333",
        "--actions", "SendMessage")
    attrs = run("get-queue-attributes", "--queue-url", url, "--attribute-names", "Policy")["Attributes"]
    assert json.loads(attrs["Policy"])["Statement"][0]["Sid"] == "cli"
    run("remove-permission", "--queue-url", url, "--label", "cli")
    sent = run("send-message", "--queue-url", url, "--message-body", "traced", "--message-system-attributes",
               json.dumps({"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}}))
    assert sent["MD5OfMessageSystemAttributes"]
    got = run("receive-message", "--queue-url", url, "--message-system-attribute-names", "All")
    assert got["Messages"][0]["Attributes"]["AWSTraceHeader"] == TRACE


def test_the_docs_queue_settings_example_runs_as_written(server, monkeypatch, capsys):
    """docs/how-to/sqs.md's tags, permissions and encryption block, its endpoint pointed here."""
    import re

    page = (ROOT / "docs" / "how-to" / "sqs.md").read_text()
    (block,) = [b for b in re.findall(r"^```python\n(.*?)^```", page, flags=re.S | re.M)
                if b.startswith("# queue_settings.py")]
    monkeypatch.setenv("FORQ_AUTH_SECRET", SECRET)
    exec(compile(block.replace("http://localhost:8082", server), "sqs.md", "exec"), {})  # noqa: S102 - the docs' code
    assert capsys.readouterr().out == "[('env', 'prod'), ('team', 'billing')]\ntrue SQS:SendMessage\n"
