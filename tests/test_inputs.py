"""The typed inputs of forqapp.validation and the table of limits they read (forqapp.vocab): each
limit at its edges (in, just out, the wrong type), with the words each face answers."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from forqapp import errors, validation, vocab
from forqapp.errors import ForqError
from forqapp.sqs import actions as sqs_actions
from forqapp.sqs import queues as sqs_queues
from forqapp.sqs.protocol import SqsError
from forqapp.validation import Delivery, PolicyChange, ReceiveOptions, ScheduleInput, SendEntry

NOW = 1_800_000_000_000
LIMITS = validation.SendLimits(content_bytes=262_144, past_ms=10_000, ahead_ms=366 * 86_400_000)  # the settings' defaults
MID = "0190a0b0-c0d0-7e0f-8a0b-0c0d0e0f1a2b"
YEAR = vocab.YEAR_S


def refused(call, code=errors.BODY_INVALID, text=None):
    with pytest.raises(ForqError) as exc:
        call()
    assert exc.value.code == code
    if text is not None:
        assert str(exc.value) == text
    return str(exc.value)


# --- the table ------------------------------------------------------------------------------------


def test_bounds_hold_both_ends():
    assert 0 in vocab.SQS_DELAY_S and 900 in vocab.SQS_DELAY_S
    assert -1 not in vocab.SQS_DELAY_S and 901 not in vocab.SQS_DELAY_S
    assert tuple(vocab.DEDUP_WINDOW_S) == (0.001, 43_200)


def test_the_twelve_hours_are_one_number():
    """A receive's lease, a dedup window and SQS's VisibilityTimeout: 12 hours, written once each."""
    assert vocab.VISIBILITY_S.hi == vocab.VISIBILITY_MAX_S == vocab.DEDUP_WINDOW_MAX_S == 12 * 3600
    assert vocab.SQS_VISIBILITY_S == (0, 43_200)
    assert sqs_actions.MAX_VISIBILITY_S == 43_200
    assert sqs_queues.RANGES["VisibilityTimeout"] is vocab.SQS_VISIBILITY_S


def test_sqs_limits_are_no_wider_than_forqapp_s():
    assert vocab.SQS_VISIBILITY_S.hi <= vocab.VISIBILITY_S.hi
    assert vocab.SQS_DELAY_S.hi <= vocab.YEAR_S
    assert vocab.RETENTION_S.lo <= vocab.SQS_RETENTION_S.lo and vocab.SQS_RETENTION_S.hi <= vocab.RETENTION_S.hi
    assert vocab.SQS_MAX_RECEIVE_COUNT.hi <= vocab.MAX_ATTEMPTS.hi


# --- one value ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-1000, 0, 1000])
def test_integer_in(value):
    assert validation.integer(value, "priority", vocab.PRIORITY) == value


@pytest.mark.parametrize("value", [-1001, 1001, True, 1.0, "1", None])
def test_integer_out_or_wrong_type(value):
    refused(lambda: validation.integer(value, "priority", vocab.PRIORITY),
            text="priority must be an integer from -1000 to 1000")


def test_integer_words_show_large_bounds_whole():
    refused(lambda: validation.max_in_flight(0), text="max_in_flight must be an integer from 1 to 1000000")
    refused(lambda: validation.max_length(10**12 + 1), text="max_length must be an integer from 1 to 10**12")
    refused(lambda: validation.max_attempts(1_000_001),
            text='max_attempts must be an integer from 1 to 1000000, or "unlimited"')


@pytest.mark.parametrize(("value", "ok"), [
    (0.001, True), (43_200, True), (1, True), (0.0009, False), (43_200.001, False), (0, False),
])
def test_seconds_edges(value, ok):
    if ok:
        assert validation.seconds(value, "dedup_window", vocab.DEDUP_WINDOW_S) == value
    else:
        refused(lambda: validation.seconds(value, "dedup_window", vocab.DEDUP_WINDOW_S),
                text="dedup_window must be a number of seconds from 0.001 to 43200")


@pytest.mark.parametrize("value", [math.inf, math.nan, True, "5", None, [], 10**400])
def test_seconds_wrong_type(value):
    refused(lambda: validation.seconds(value, "wait", (0, 30)), text="wait must be a number of seconds from 0 to 30")


@pytest.mark.parametrize(("value", "name", "expected"), [
    (None, None, (errors.RECEIPT_MISSING, "X-Forq-Receipt header is missing")),
    ("", None, (errors.RECEIPT_MISSING, "X-Forq-Receipt header is missing")),
    ("x", None, (errors.RECEIPT_INVALID, "X-Forq-Receipt is not an integer")),
    (2**63, None, (errors.RECEIPT_INVALID, "X-Forq-Receipt is out of range")),
    (None, "receipt", (errors.RECEIPT_MISSING, "receipt is missing")),
    ("", "receipt", (errors.RECEIPT_MISSING, "receipt must be a receive's receipt: a 64-bit integer (or its digits)")),
    (True, "receipt", (errors.RECEIPT_INVALID, "receipt must be a receive's receipt: a 64-bit integer (or its digits)")),
    (-(2**63) - 1, "receipt", (errors.RECEIPT_INVALID,
                               "receipt must be a receive's receipt: a 64-bit integer (or its digits)")),
])
def test_receipt_refusals_name_where_it_came_from(value, name, expected):
    refused(lambda: validation.receipt(value, name), *expected)


@pytest.mark.parametrize("value", [2**63 - 1, -(2**63), "9223372036854775807", " 7 ", 0])
def test_receipt_in(value):
    assert validation.receipt(value, "receipt") == int(value)


def test_process_after_names_its_field_at_the_source():
    refused(lambda: validation.process_after(1, NOW, LIMITS), errors.PROCESS_AFTER_IN_PAST, "processAfter is in the past")
    refused(lambda: validation.process_after(1, NOW, LIMITS, "process_after"), errors.PROCESS_AFTER_IN_PAST,
            "process_after is in the past")
    refused(lambda: validation.process_after(NOW + YEAR * 1000 + 1, NOW, LIMITS, "process_after"),
            errors.PROCESS_AFTER_TOO_FAR, "process_after is more than 366 days ahead")
    refused(lambda: validation.process_after("1", NOW, LIMITS, "process_after"), text="process_after must be an integer (Unix ms)")
    assert validation.process_after(NOW + YEAR * 1000, NOW, LIMITS, "process_after") == NOW + YEAR * 1000


# --- a send entry ---------------------------------------------------------------------------------


def test_send_entry_keeps_what_was_given():
    entry = SendEntry.parse({"content": "x", "priority": 5, "delay": 2.5, "attributes": {"a": "b"},
                             "dedup_id": "d", "dedup_window": 60, "retention": 120, "process_after": None}, now=NOW, limits=LIMITS)
    assert entry == SendEntry("x", delay=2.5, priority=5, attributes={"a": "b"}, dedup_id="d", dedup_window=60,
                              retention=120)
    assert entry.item() == {"content": "x", "delay": 2.5, "priority": 5, "attributes": {"a": "b"}, "dedup_id": "d",
                            "dedup_window": 60, "retention": 120}
    assert SendEntry.parse({"content": ""}, now=NOW, limits=LIMITS).item() == {"content": ""}


@pytest.mark.parametrize(("field", "inside", "outside", "wrong", "text"), [
    ("delay", [0, YEAR], [-1, YEAR + 1], "1", "delay must be a number of seconds from 0 to 31622400"),
    ("dedup_window", [0.001, 43_200], [0.0005, 43_201], True,
     "dedup_window must be a number of seconds from 0.001 to 43200"),
    ("retention", [1, YEAR], [0.5, YEAR + 1], "1", "retention must be a number of seconds from 1 to 31622400"),
    ("priority", [-1000, 1000], [-1001, 1001], 1.5, "priority must be an integer from -1000 to 1000"),
])
def test_send_entry_edges(field, inside, outside, wrong, text):
    for value in inside:
        assert getattr(SendEntry.parse({"content": "x", field: value}, now=NOW, limits=LIMITS), field) == value
    for value in [*outside, wrong]:
        refused(lambda v=value: SendEntry.parse({"content": "x", field: v}, now=NOW, limits=LIMITS), text=text)


def test_send_entry_attributes_and_dedup_id_edges():
    def parse(**options):
        return SendEntry.parse({"content": "x", **options}, now=NOW, limits=LIMITS)

    ten = {f"k{i}": "v" for i in range(vocab.MAX_ATTRIBUTES)}
    assert parse(attributes=ten).attributes == ten
    refused(lambda: parse(attributes={**ten, "k10": "v"}), text="attributes holds more than 10 keys")
    assert parse(attributes={"k" * 64: "v" * 1024}).attributes
    refused(lambda: parse(attributes={"k" * 65: "v"}), text="an attribute key must be a string of 1 to 64 characters")
    refused(lambda: parse(attributes={"k": "v" * 1025}), text="attribute 'k' must be a string of at most 1024 characters")
    refused(lambda: parse(attributes=["k"]), text="attributes must be an object of strings")
    assert parse(dedup_id="d" * 128).dedup_id == "d" * 128
    for wrong in ("d" * 129, "a b", 5):
        refused(lambda w=wrong: parse(dedup_id=w),
                text="dedup_id must be 1 to 128 printable ASCII characters, no spaces")


def test_send_entry_refusals_in_the_documented_order():
    refused(lambda: SendEntry.parse([], now=NOW, limits=LIMITS), text="a message must be a JSON object")
    refused(lambda: SendEntry.parse({"content": "x", "prority": 1}, now=NOW, limits=LIMITS), text="unknown field 'prority' in a message")
    refused(lambda: SendEntry.parse({"priority": 2000}, now=NOW, limits=LIMITS), text="content must be a string")
    refused(lambda: SendEntry.parse({"content": "x", "delay": 1, "process_after": NOW}, now=NOW, limits=LIMITS),
            text="give delay or process_after, not both")
    refused(lambda: SendEntry.parse({"content": "x", "process_after": 1}, now=NOW, limits=LIMITS), errors.PROCESS_AFTER_IN_PAST,
            "process_after is in the past")
    refused(lambda: SendEntry.parse({"content": "a\x00", "delay": -1}, now=NOW, limits=LIMITS, storable=lambda text: False),
            text="content with NUL characters cannot be stored on this database")
    assert SendEntry.parse({"content": "a\x00"}, now=NOW, limits=LIMITS, storable=lambda text: True).content == "a\x00"


# --- a delivery, a receive ------------------------------------------------------------------------


def test_delivery():
    assert Delivery.parse("q", MID.upper(), "7") == Delivery("q", MID, 7)
    assert Delivery.entry("q", {"id": MID, "receipt": 2**63 - 1}) == Delivery("q", MID, 2**63 - 1)
    refused(lambda: Delivery.entry("q", {"id": MID, "receipt": 2**63}), errors.RECEIPT_INVALID,
            "receipt must be a receive's receipt: a 64-bit integer (or its digits)")
    refused(lambda: Delivery.entry("q", {"id": MID}), errors.RECEIPT_MISSING, "receipt is missing")
    refused(lambda: Delivery.entry("q", {"id": "nope", "receipt": 1}), errors.MESSAGE_ID_INVALID)
    refused(lambda: Delivery.entry("q", {"id": MID, "receipt": 1, "extra": 1}), text="unknown field 'extra' in an entry")
    refused(lambda: Delivery.parse("q", MID, None), errors.RECEIPT_MISSING, "X-Forq-Receipt header is missing")


def test_receive_options_defaults_and_edges():
    assert ReceiveOptions.parse({}, longest_wait=30) == ReceiveOptions(1, 0, None, False)
    assert ReceiveOptions.parse({"max_messages": 10, "wait": 30, "visibility_timeout": 43_200, "random": True},
                                longest_wait=30) == ReceiveOptions(10, 30, 43_200, True)
    assert ReceiveOptions.parse({"visibility_timeout": 0}, longest_wait=30).visibility_timeout == 0
    for body, text in [
        ({"max_messages": 0}, "max_messages must be an integer from 1 to 10"),
        ({"max_messages": 11}, "max_messages must be an integer from 1 to 10"),
        ({"max_messages": "1"}, "max_messages must be an integer from 1 to 10"),
        ({"wait": 30.5}, "wait must be a number of seconds from 0 to 30"),
        ({"wait": -1}, "wait must be a number of seconds from 0 to 30"),
        ({"visibility_timeout": 43_201}, "visibility_timeout must be a number of seconds from 0 to 43200"),
        ({"visibility_timeout": "1"}, "visibility_timeout must be a number of seconds from 0 to 43200"),
        ({"random": 1}, "random must be true or false"),
    ]:
        refused(lambda b=body: ReceiveOptions.parse(b, longest_wait=30), text=text)


# --- a policy change, a schedule ------------------------------------------------------------------


def test_policy_change_put_resets_what_it_does_not_give():
    change = PolicyChange.parse({"max_length": 5}, replace=True)
    assert change.fields == {**dict.fromkeys(validation.POLICY_FIELDS), "max_length": 5}
    assert change.columns["max_length"] == 5 and change.columns["visibility_timeout_ms"] is None
    assert change.columns["paused"] is False
    patch = PolicyChange.parse({"visibility_timeout": timedelta(hours=12), "dedup_window": 0.001})
    assert patch.columns == {"visibility_timeout_ms": 43_200_000, "dedup_window_ms": 1}


@pytest.mark.parametrize(("field", "inside", "outside", "text"), [
    ("visibility_timeout", [0, 43_200], [-1, 43_201, "1"], "visibility_timeout must be from 0 to 43200 seconds"),
    ("dedup_window", [0.001, 43_200], [0.0004, 43_201], "dedup_window must be from 0.001 to 43200 seconds"),
    ("retention", [1, YEAR], [0.5, YEAR + 1], "retention must be from 1 to 31622400 seconds"),
    ("dlq_retention", [1, YEAR], [0.5, YEAR + 1], "dlq_retention must be from 1 to 31622400 seconds"),
    ("max_in_flight", [1, 1_000_000], [0, 1_000_001, 2.0], "max_in_flight must be an integer from 1 to 1000000"),
    ("max_length", [1, 10**12], [0, 10**12 + 1, True], "max_length must be an integer from 1 to 10**12"),
    ("max_attempts", [1, 1_000_000, "unlimited", 0], [1_000_001, -1, "5"],
     'max_attempts must be an integer from 1 to 1000000, or "unlimited"'),
    ("rate", ["10/s", 0.001, 86_400], [0.0001, 86_401], None),
])
def test_policy_change_edges(field, inside, outside, text):
    for value in inside:
        PolicyChange.parse({field: value})
    for value in outside:
        message = refused(lambda v=value: PolicyChange.parse({field: v}))
        if text is not None and not isinstance(value, str):
            assert message == text
        assert message.startswith(field)


def test_policy_change_backoff_edges():
    PolicyChange.parse({"backoff": [0] * 100})
    PolicyChange.parse({"backoff": [YEAR * 1000]})
    PolicyChange.parse({"backoff": {"base_ms": 1, "max_ms": YEAR * 1000, "jitter": 1}})
    for wrong in ([0] * 101, [], [-1], [YEAR * 1000 + 1], [True]):
        refused(lambda w=wrong: PolicyChange.parse({"backoff": w}),
                text="backoff must be 1 to 100 delays in ms (integers from 0 to a year)")
    refused(lambda: PolicyChange.parse({"backoff": {"base_ms": 0}}),
            text="backoff base_ms must be an integer from 1 to a year in ms")


def test_policy_change_refuses_unknown_fields_and_huge_integers():
    refused(lambda: PolicyChange.parse({"retries": 3}), text="unknown field 'retries' in the body")
    refused(lambda: PolicyChange.parse({"retention": 2**53 + 1}), text="retention is out of range")
    refused(lambda: PolicyChange.parse([]), text="the body must be a JSON object")


def test_schedule_input_edges():
    base = {"queue": "q", "content": "x"}
    assert ScheduleInput.parse({**base, "every": 1, "cron": None}).fields == {**base, "every": 1}
    assert ScheduleInput.parse({**base, "every": YEAR}).fields["every"] == YEAR
    for wrong in (0.5, YEAR + 1, "60", True):
        refused(lambda w=wrong: ScheduleInput.parse({**base, "every": w}),
                text="every must be a number of seconds from 1 to 31622400")
    refused(lambda: ScheduleInput.parse({"content": "x"}), text="queue is missing")
    refused(lambda: ScheduleInput.parse({"queue": "q"}), text="content is missing")
    refused(lambda: ScheduleInput.parse({**base, "content": "\x00"}, storable=lambda text: False),
            text="content with NUL characters cannot be stored on this database")
    refused(lambda: ScheduleInput.parse({**base, "when": 1}), text="unknown field 'when' in the body")


# --- the bulk endpoints' and SQS's limits -----------------------------------------------------------


def test_bulk_limits_edges():
    assert validation.claim_limit({}) == 100
    assert validation.claim_limit({"max": 10_000}) == 10_000
    for wrong in (0, 10_001, "5", True):
        refused(lambda w=wrong: validation.claim_limit({"max": w}), text="max must be an integer from 1 to 10000")
    assert validation.claim_wait({"wait": 30}) == 30
    refused(lambda: validation.claim_wait({"wait": 30.5}), text="wait must be a number of seconds from 0 to 30")
    assert validation.page_limit("10000") == 10_000
    refused(lambda: validation.page_limit("10001"), text="limit must be an integer from 1 to 10000")
    refused(lambda: validation.page_limit("0"), text="limit must be an integer from 1 to 10000")


@pytest.mark.parametrize(("name", "bounds"), [
    ("DelaySeconds", vocab.SQS_DELAY_S), ("VisibilityTimeout", vocab.SQS_VISIBILITY_S),
    ("WaitTimeSeconds", vocab.SQS_WAIT_S), ("MaxNumberOfMessages", vocab.SQS_MAX_MESSAGES),
])
def test_sqs_parameters_edges(name, bounds):
    lo, hi = bounds
    for value in (lo, hi):
        assert sqs_actions._integer({name: value}, name, bounds) == value
    for value in (lo - 1, hi + 1):
        with pytest.raises(SqsError) as exc:
            sqs_actions._integer({name: value}, name, bounds)
        assert exc.value.message == f"Value {value} for parameter {name} is invalid. Reason: Must be between {lo} and {hi}."
    with pytest.raises(SqsError) as exc:
        sqs_actions._integer({name: "5"}, name, bounds)
    assert exc.value.message == f'Value "5" for parameter {name} is invalid. Reason: Must be an integer.'


@pytest.mark.parametrize(("name", "bounds"), [
    ("MessageRetentionPeriod", vocab.SQS_RETENTION_S), ("DelaySeconds", vocab.SQS_DELAY_S),
    ("VisibilityTimeout", vocab.SQS_VISIBILITY_S), ("ReceiveMessageWaitTimeSeconds", vocab.SQS_WAIT_S),
])
def test_sqs_attributes_edges(name, bounds):
    lo, hi = bounds
    assert sqs_queues._integer(name, str(lo)) == lo and sqs_queues._integer(name, str(hi)) == hi
    for wrong in (str(hi + 1), str(lo - 1) if lo else "-1", 5, "1.5"):
        with pytest.raises(SqsError) as exc:
            sqs_queues._integer(name, wrong)
        assert exc.value.message == f"Invalid value for the parameter {name}: must be an integer from {lo} to {hi}"


def test_a_schedule_s_fields_are_the_schedules_module_s():
    from forqapp.services import schedules

    assert validation.SCHEDULE_FIELDS == schedules.FIELDS


def test_an_unbounded_wait_is_said_so():
    refused(lambda: ReceiveOptions.parse({"wait": -1}, longest_wait=math.inf),
            text="wait must be a number of seconds from 0 to inf")


@pytest.mark.django_db
def test_the_services_trust_a_parsed_send_entry_and_store_what_the_plain_send_stores(monkeypatch):
    from forqapp import services

    given = {"content": "x", "delay": 2.5, "priority": 5, "attributes": {"a": "b", "é": "ü"},
             "dedup_id": "d-1", "dedup_window": 60, "retention": 3600, "group": "tenant-1"}
    entry = SendEntry.parse(given, now=services.now_ms(), limits=LIMITS)
    (plain,) = services.send_entries("plain", [dict(given)])

    def checked_again(*args, **kwargs):
        raise AssertionError("a parsed SendEntry was checked again")

    for name in ("content", "priority", "attributes", "dedup_id", "group", "duration_ms", "process_after"):
        monkeypatch.setattr(validation, name, checked_again)
    (trusted,) = services.send_entries("trusted", [entry])
    monkeypatch.undo()

    a, b = services.peek("plain", plain.id), services.peek("trusted", trusted.id)
    assert (b.content, b.priority, b.attributes, b.dedup_id, b.group) == \
        (a.content, a.priority, a.attributes, a.dedup_id, a.group) == ("x", 5, {"a": "b", "é": "ü"}, "d-1", "tenant-1")
    from forqapp.models import Message

    for row in Message.objects.filter(id__in=[plain.id, trusted.id]):  # due 2.5 s on, kept an hour from then
        assert (row.process_after - row.received_at, row.expires_after - row.process_after) == (2500, 3_600_000)
    assert services.send_entries("trusted", [entry])[0].deduplicated  # its dedup_window applies
