"""``FORQ_SQS_SEPARATE_REGIONS``: the region a request is signed for (a queue URL's) or an ARN names
separates SQS queues, forqapp's ``<region>.<name>``; off (the default, tests/test_sqs.py), every
region names the same queues. boto3 against a live ``forq_serve`` with the setting on."""

from __future__ import annotations

import json

import boto3
import botocore
import pytest
from botocore.config import Config

from forqapp import services
from forqapp.models import Message
from forqapp.sqs import queues

from .conftest import SECRET, sqs_listener
from .test_sqs import ACCOUNT, KEYS_SECRET, code_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def server(django_db_blocker):
    with sqs_listener(django_db_blocker, {"FORQ_KEYS_SECRET": KEYS_SECRET,
                                          "FORQ_SQS_SEPARATE_REGIONS": "true"}) as (url, api):
        yield url


def regional(server: str, region: str):
    return boto3.client("sqs", endpoint_url=server, region_name=region, aws_access_key_id="forq-root",
                        aws_secret_access_key=SECRET, config=Config(retries={"max_attempts": 1, "mode": "standard"}))


def test_the_same_name_in_two_regions_is_two_queues(server):
    services.forget_policies()
    paris, virginia = regional(server, "eu-west-3"), regional(server, "us-east-1")
    here = paris.create_queue(QueueName="orders")["QueueUrl"]
    there = virginia.create_queue(QueueName="orders", Attributes={"VisibilityTimeout": "7"})["QueueUrl"]
    assert here == there == f"{server}/{ACCOUNT}/orders"  # (the URL is the same; its region is the signer's)
    paris.send_message(QueueUrl=here, MessageBody="from paris")
    virginia.send_message(QueueUrl=there, MessageBody="from virginia")
    assert [m["Body"] for m in paris.receive_message(QueueUrl=here)["Messages"]] == ["from paris"]
    assert [m["Body"] for m in virginia.receive_message(QueueUrl=there)["Messages"]] == ["from virginia"]
    assert sorted(Message.objects.values_list("queue", flat=True)) == ["eu-west-3.orders", "us-east-1.orders"]
    assert services.queue_info("us-east-1.orders").policy["visibility_timeout"] == 7
    assert paris.get_queue_attributes(QueueUrl=here, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"] == \
        f"arn:aws:sqs:eu-west-3:{ACCOUNT}:orders"
    # Each region lists its own; a third has none.
    assert paris.list_queues()["QueueUrls"] == [here]
    assert "QueueUrls" not in regional(server, "ap-southeast-2").list_queues()
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        regional(server, "ap-southeast-2").get_queue_url(QueueName="orders")
    assert code_of(exc)[0] == "AWS.SimpleQueueService.NonExistentQueue"
    # Deleted in one region, kept in the other.
    paris.delete_queue(QueueUrl=here)
    assert virginia.get_queue_url(QueueName="orders")["QueueUrl"] == there


def test_a_name_with_its_region_takes_forqapp_s_80_characters(server):
    virginia = regional(server, "us-east-1")  # "us-east-1." : 10 characters, 70 left
    virginia.create_queue(QueueName="n" * 70)
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        virginia.create_queue(QueueName="n" * 71)
    assert code_of(exc)[0] == "InvalidParameterValue" and "1 to 70 in length in region us-east-1" in \
        exc.value.response["Error"]["Message"]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        virginia.get_queue_url(QueueName="n" * 71)
    assert code_of(exc)[0] == "InvalidParameterValue"


def test_fifo_queues_dead_letter_queues_and_redrive_per_region(server):
    services.forget_policies()
    paris = regional(server, "eu-west-3")
    dead = paris.create_queue(QueueName="jobs-dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    url = paris.create_queue(QueueName="jobs.fifo", Attributes={
        "FifoQueue": "true", "ContentBasedDeduplication": "true",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": f"arn:aws:sqs:eu-west-3:{ACCOUNT}:jobs-dlq.fifo",
                                     "maxReceiveCount": 1})})["QueueUrl"]
    assert services.queue_info("eu-west-3.jobs.fifo").policy["max_attempts"] == 1
    paris.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g")
    assert paris.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"][0]["Body"] == "x"
    assert "Messages" not in paris.receive_message(QueueUrl=url)  # redriven
    got = paris.receive_message(QueueUrl=dead, AttributeNames=["All"])["Messages"]
    assert got[0]["Attributes"]["DeadLetterQueueSourceArn"] == f"arn:aws:sqs:eu-west-3:{ACCOUNT}:jobs.fifo"
    assert Message.objects.get().queue == "eu-west-3.jobs.fifo-dlq"
    assert paris.list_dead_letter_source_queues(QueueUrl=dead)["queueUrls"] == [url]
    # The same queue's ARN names another queue in another region: none there.
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        paris.start_message_move_task(SourceArn=f"arn:aws:sqs:us-east-1:{ACCOUNT}:jobs-dlq.fifo")
    assert code_of(exc)[0] == "ResourceNotFoundException"


def test_the_names_map_one_way_only(settings):
    settings.FORQ_SQS_SEPARATE_REGIONS = True
    for sqs_name, forq_name in [("jobs", "eu-west-3.jobs"), ("jobs.fifo", "eu-west-3.jobs.fifo"),
                                ("jobs-dlq.fifo", "eu-west-3.jobs.fifo-dlq"), ("a-dlq", "eu-west-3.a-dlq")]:
        assert queues.to_forq(sqs_name, "eu-west-3") == forq_name
        assert queues.to_sqs(forq_name) == sqs_name
        assert queues.in_region(forq_name, "eu-west-3") and not queues.in_region(forq_name, "eu-west-1")
    assert not queues.in_region("jobs.fifo", "jobs")  # (another face's queue without a region: in none)
    assert queues.prefix_of("jobs.fifo-dlq") == "" and queues.prefix_of("plain") == ""
    settings.FORQ_SQS_SEPARATE_REGIONS = False
    assert queues.to_forq("jobs", "eu-west-3") == "jobs" and queues.in_region("jobs", "eu-west-3")


def test_a_request_signed_for_no_region_name_is_refused(server):
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        regional(server, "eu--west-3").list_queues()  # (a host label: botocore signs for it)
    assert code_of(exc)[0] == "InvalidParameterValue"
