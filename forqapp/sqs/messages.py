"""SQS messages on forqapp's messages: bodies, message attributes, and what a receive answers.

Message attributes are kept in forqapp's string attributes, so that the other faces see them: a
``String`` attribute as ``{name: value}`` (and a forqapp attribute is a ``String`` one here); any
other type with its type after a ``;`` in the key (``{"price;Number": "9.5"}``; a ``Binary``
value in base64). SQS's limits apply (10 attributes, names of up to 256 characters, the message's
size counting them), not the other faces' (64-character keys, 1,024-character values).

Two system attributes are kept with the message the same way, under names SQS refuses for a
message attribute (so none is ever mistaken for one): :data:`SENDER_KEY` (``SenderId``: the
access key id of the key that sent it) and :data:`TRACE_KEY` (``AWSTraceHeader``, as sent in
``MessageSystemAttributes``). The other faces see them among the message's attributes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Any

from .. import vocab
from ..services import ReceivedMessage
from . import digests, receipts
from .protocol import SqsError, invalid

_ATTRIBUTE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_DATA_TYPE = re.compile(r"(String|Number|Binary)(\.[A-Za-z0-9_.-]{1,200})?")
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
# The characters SQS allows in a message: #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF
_INVALID_CHARS = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
SEPARATOR = ";"
#: MessageGroupId, MessageDeduplicationId, ReceiveRequestAttemptId: 1 to 128 alphanumeric or
#: punctuation characters (``!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~``): printable ASCII but the space.
_SQS_TOKEN = re.compile(r"[\x21-\x7e]{1,128}")
DEDUP_WINDOW_S = 300  # SQS's deduplication interval (and ReceiveRequestAttemptId's)
NUMBER_DIGITS, NUMBER_MIN_POWER, NUMBER_MAX_POWER = 38, -128, 126  # SQS's Number


def check_body(body: object, limit: int) -> str:
    if body is None:
        raise SqsError("MissingParameter", "The request must contain the parameter MessageBody.")
    if not isinstance(body, str):
        raise invalid("Value for parameter MessageBody is invalid. Reason: Must be a string.")
    if not body:
        raise invalid("The request must contain a non-empty MessageBody.")
    if _INVALID_CHARS.search(body):
        raise SqsError("InvalidMessageContents", "Invalid characters found. Valid characters are #x9 | #xA | #xD "
                       "| #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF")
    if len(body.encode("utf-8")) > limit:
        raise too_large(limit)
    return body


def token(value: object, parameter: str) -> str:
    """A MessageGroupId, MessageDeduplicationId or ReceiveRequestAttemptId, as SQS checks it."""
    if not isinstance(value, str) or not _SQS_TOKEN.fullmatch(value):
        raise invalid(f"Value {str(value)[:200]} for parameter {parameter} is invalid. Reason: {parameter} can only "
                      "include alphanumeric and punctuation characters. 1 to 128 in length.")
    return value


def content_dedup_id(body: str) -> str:
    """ContentBasedDeduplication's id: the SHA-256 of the body (not its attributes), in hex."""
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def dedup_key(dedup_id: str, group: str, scope: str) -> str:
    """forqapp's dedup id (unique per queue) for SQS's ``dedup_id`` under ``DeduplicationScope``
    ``scope``: the id itself (``queue``), or, per group (``messageGroup``), the group's length,
    the group and the id, ``<n>:<group>:<id>`` (one reading only), or ``#`` and their SHA-256 when
    that is over forqapp's 128 characters (then :func:`dedup_id_of` cannot give the id back)."""
    if scope != "messageGroup":
        return dedup_id
    key = f"{len(group)}:{group}:{dedup_id}"
    if len(key) <= vocab.DEDUP_ID_MAX:
        return key
    return "#" + hashlib.sha256(f"{group}\x00{dedup_id}".encode()).hexdigest()


def dedup_id_of(key: str, group: str | None) -> str:
    """The MessageDeduplicationId a message sent with forqapp's dedup id ``key`` was given (see
    :func:`dedup_key`), for the message's SQS ``group``."""
    if group is not None and key.startswith(f"{len(group)}:{group}:"):
        return key[len(f"{len(group)}:{group}:"):]
    return key


_GROUP_KEPT = re.compile(r"[A-Za-z0-9_.:/+@-]")  # forqapp's group characters (vocab.GROUP_NAME), but "=" (the escape)


def to_group(group: str) -> str:
    """forqapp's group for SQS's MessageGroupId ``group``: the same, each character forqapp's groups
    do not take (and ``=``) as ``=`` and its two hex digits (``order#7`` → ``order=237``); refused
    when that is over forqapp's 128 characters."""
    out = "".join(c if _GROUP_KEPT.fullmatch(c) else f"={ord(c):02X}" for c in group)
    if len(out) > vocab.GROUP_MAX:
        raise invalid(f"Value {group} for parameter MessageGroupId is invalid. Reason: forqapp keeps a group of at "
                      f"most {vocab.GROUP_MAX} characters, each character but A-Z a-z 0-9 _ . : / + @ - counting 3.")
    return out


def from_group(group: str) -> str:
    """SQS's MessageGroupId of forqapp's ``group`` (:func:`to_group`'s inverse; a group another face
    gave, with an ``=`` that is no escape, is shown as it is)."""
    return re.sub(r"=([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), group)


def sequence_number(sequence: int) -> str:
    """SQS's ``SequenceNumber`` of forqapp's message sequence: 20 digits, so that the text and the
    number sort alike (SQS's are 20-digit numbers too), increasing per queue."""
    return f"{sequence:020d}"


def check_attributes(attributes: object) -> dict[str, dict[str, Any]]:
    """SQS ``MessageAttributes``, checked: {name: {"DataType", "StringValue" | "BinaryValue"}}."""
    if attributes is None:
        return {}
    if not isinstance(attributes, dict):
        raise invalid("MessageAttributes must be a map")
    if len(attributes) > vocab.MAX_ATTRIBUTES:
        raise invalid(f"Number of message attributes [{len(attributes)}] exceeds the allowed maximum "
                      f"[{vocab.MAX_ATTRIBUTES}].")
    out = {}
    for name, value in attributes.items():
        why = name_problem(name)
        if why is not None:
            raise invalid(f"The message attribute name '{str(name)[:300]}' is invalid. {why}")
        if not isinstance(value, dict):
            raise invalid(f"Message attribute '{name}' must be a map")
        data_type = value.get("DataType")
        if not isinstance(data_type, str) or not _DATA_TYPE.fullmatch(data_type):
            raise invalid(f"The message attribute '{name}' has an invalid message attribute type, the set of "
                          "supported type prefixes is Binary, Number, and String.")
        if value.get("StringValue") is not None and value.get("BinaryValue") is not None:
            raise invalid(f"Message attribute '{name}' must contain only one of StringValue or BinaryValue.")
        if data_type.startswith("Binary"):
            raw = value.get("BinaryValue")
            try:
                data = base64.b64decode(raw, validate=True) if isinstance(raw, str) else None
            except (binascii.Error, ValueError):
                raise invalid(f"The message attribute '{name}' has a BinaryValue that is not base64.") from None
            if not data:
                raise invalid(f"The message attribute '{name}' with type 'Binary' must use field 'Binary'.")
            out[name] = {"DataType": data_type, "BinaryValue": base64.b64encode(data).decode("ascii")}
        else:
            text = value.get("StringValue")
            if not isinstance(text, str) or not text:
                raise invalid(f"The message attribute '{name}' must contain non-empty message attribute value "
                              f"for message attribute type '{data_type.split('.')[0]}'.")
            if _INVALID_CHARS.search(text):
                raise SqsError("InvalidMessageContents", f"Message attribute '{name}' holds invalid characters")
            if data_type.startswith("Number"):
                _check_number(name, text)
            out[name] = {"DataType": data_type, "StringValue": text}
    return out


def raw_size(entry: dict[str, Any]) -> int:
    """A batch entry's size as SQS counts it toward the batch's total (:func:`size`), from the entry
    as sent, before it is checked (what is malformed is refused with the entry later)."""
    def length(value: object) -> int:
        return len(str(value).encode("utf-8", "surrogatepass")) if value is not None else 0

    total = length(entry.get("MessageBody", ""))
    attributes = entry.get("MessageAttributes")
    for name, value in (attributes.items() if isinstance(attributes, dict) else ()):
        total += length(name)
        if isinstance(value, dict):
            total += length(value.get("DataType")) + length(value.get("StringValue"))
            binary = value.get("BinaryValue")
            if isinstance(binary, (str, bytes)):
                total += len(binary) * 3 // 4  # (base64: the bytes it carries)
    return total


def size(body: str, attributes: dict[str, dict[str, Any]]) -> int:
    """A message's size as SQS counts it against the queue's maximum: the body and each attribute's
    name, type and value, in bytes (UTF-8; a Binary value decoded)."""
    total = len(body.encode("utf-8"))
    for name, value in attributes.items():
        total += len(name.encode("utf-8")) + len(value["DataType"].encode("utf-8"))
        if "BinaryValue" in value:
            total += len(base64.b64decode(value["BinaryValue"]))
        else:
            total += len(value["StringValue"].encode("utf-8"))
    return total


def too_large(limit: int) -> SqsError:
    return invalid(f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes.")


def _check_number(name: str, text: str) -> None:
    """SQS's Number: up to 38 significant digits, of a magnitude from 10^-128 to 10^+126 (zero too)."""
    if not _NUMBER.fullmatch(text):
        raise invalid(f"Can't cast the value of message attribute '{name}' to a number.")
    mantissa, _, exponent = text.lower().partition("e")
    digits = mantissa.lstrip("+-").replace(".", "").strip("0")
    if not digits:
        return  # zero
    if len(digits) > NUMBER_DIGITS or len(exponent.lstrip("+-").lstrip("0")) > 6:
        raise invalid(f"The value of message attribute '{name}' has more than {NUMBER_DIGITS} significant digits "
                      "or is out of the range of a Number.")
    whole = mantissa.lstrip("+-").split(".")[0].lstrip("0")
    # The power of ten of the first significant digit.
    if whole:
        magnitude = len(whole) - 1
    else:
        fraction = mantissa.partition(".")[2]
        magnitude = -(len(fraction) - len(fraction.lstrip("0")) + 1)
    magnitude += int(exponent or 0)
    if not NUMBER_MIN_POWER <= magnitude <= NUMBER_MAX_POWER:
        raise invalid(f"The value of message attribute '{name}' is out of the range of a Number "
                      f"(10^{NUMBER_MIN_POWER} to 10^+{NUMBER_MAX_POWER}).")


SENDER_KEY = "AWS.SenderId"  # the forqapp attribute that keeps a message's SenderId
TRACE_KEY = "AWS.AWSTraceHeader"  # … and its AWSTraceHeader


def check_system_attributes(attributes: object) -> dict[str, dict[str, Any]]:
    """SendMessage's ``MessageSystemAttributes``: SQS takes only ``AWSTraceHeader`` (a String).
    Kept with the message (:data:`TRACE_KEY`); its digest is answered
    (``MD5OfMessageSystemAttributes``), which SDKs that send one check."""
    if attributes is None:
        return {}
    if not isinstance(attributes, dict):
        raise invalid("MessageSystemAttributes must be a map")
    out = {}
    for name, value in attributes.items():
        if name != "AWSTraceHeader":
            raise invalid(f"Message system attribute name '{str(name)[:256]}' is invalid.")
        if not isinstance(value, dict) or value.get("DataType") != "String" \
                or not isinstance(value.get("StringValue"), str) or not value["StringValue"] \
                or len(value["StringValue"]) > 1024:
            raise invalid("The message system attribute AWSTraceHeader must be a non-empty String "
                          "(at most 1,024 characters).")
        if _INVALID_CHARS.search(value["StringValue"]):
            raise SqsError("InvalidMessageContents", "Message system attribute AWSTraceHeader holds invalid characters")
        out[name] = {"DataType": "String", "StringValue": value["StringValue"]}
    return out


def to_forq(attributes: dict[str, dict[str, Any]], system: dict[str, dict[str, Any]] | None = None,
            sender: str | None = None) -> dict[str, str] | None:
    """SQS message attributes, and the system attributes kept (``system``: checked
    MessageSystemAttributes; ``sender``: the SenderId) → forqapp's string attributes (see the
    module's docstring)."""
    stored = {}
    for name, value in attributes.items():
        data_type = value["DataType"]
        key = name if data_type == "String" else f"{name}{SEPARATOR}{data_type}"
        stored[key] = str(value.get("StringValue", value.get("BinaryValue")))
    if sender:
        stored[SENDER_KEY] = sender
    if system and "AWSTraceHeader" in system:
        stored[TRACE_KEY] = system["AWSTraceHeader"]["StringValue"]
    return stored or None


def name_problem(name: object) -> str | None:
    """What is wrong with a message attribute's name, in the words of SQS's rules; None: nothing."""
    if not isinstance(name, str) or not name:
        return "Attribute name must not be empty."
    if len(name) > 256:
        return "Attribute name can be up to 256 characters long."
    if not _ATTRIBUTE_NAME.fullmatch(name):
        return "Attribute name can contain A-Z, a-z, 0-9, underscore (_), hyphen (-), and period (.) characters."
    if name.lower().startswith(("aws.", "amazon.")):
        return "Attribute name must not start with AWS-reserved prefixes such as AWS. or Amazon. (or any casing " \
               "variants)."
    if name.startswith(".") or name.endswith("."):
        return "Attribute name must not start or end with a period (.)."
    if ".." in name:
        return "Attribute name must not have periods in succession (..)."
    return None


def _valid_name(name: object) -> bool:
    return name_problem(name) is None


def _one(data_type: str, text: str) -> dict[str, Any] | None:
    """One stored value as SQS carries it under ``data_type``: a ``String`` when it is not what a
    Binary or Number type says; None when SQS cannot carry it at all (empty, or characters SQS
    refuses)."""
    if not isinstance(text, str) or not text or _INVALID_CHARS.search(text):
        return None
    if data_type.startswith("Binary"):
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            data = b""
        if data:
            return {"DataType": data_type, "BinaryValue": base64.b64encode(data).decode("ascii")}
        return {"DataType": "String", "StringValue": text}
    if data_type.startswith("Number"):
        try:
            _check_number("", text)
        except SqsError:
            return {"DataType": "String", "StringValue": text}
    return {"DataType": data_type, "StringValue": text}


def from_forq(attributes: dict[str, str]) -> dict[str, dict[str, Any]]:
    """forqapp's string attributes → SQS message attributes, each as SQS itself would accept it
    (another face may have stored anything): a value that is not what its Binary or Number type
    says is a ``String``; an attribute SQS cannot carry (a name SQS refuses, an empty value, a
    character SQS refuses) is left out; of keys that name the same attribute (``k`` and
    ``k;Number``), the first by key order."""
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(attributes):
        name, _, data_type = key.partition(SEPARATOR)
        if not data_type or not _DATA_TYPE.fullmatch(data_type):
            name, data_type = key, "String"
        if name in out or not _valid_name(name):
            continue
        value = _one(data_type, attributes[key])
        if value is not None:
            out[name] = value
    return out


def attribute_filter(names: object) -> Any:
    """A predicate for ``MessageAttributeNames`` (``All``, ``.*``, ``prefix.*``, or names)."""
    if names is None:
        return lambda name: False
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise invalid("MessageAttributeNames must be a list of names")
    if "All" in names or ".*" in names:
        return lambda name: True
    exact = {n for n in names if not n.endswith(".*")}
    prefixes = tuple(n[:-1] for n in names if n.endswith(".*"))
    return lambda name: name in exact or name.startswith(prefixes)


SYSTEM_ATTRIBUTES = ("SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp",
                     "SequenceNumber", "MessageDeduplicationId", "MessageGroupId", "AWSTraceHeader",
                     "DeadLetterQueueSourceArn", "SenderId")


def system_names(body: dict[str, Any]) -> set[str]:
    """The system attributes asked for (``MessageSystemAttributeNames``, or the deprecated
    ``AttributeNames``, which may also hold queue attribute names: those give nothing)."""
    wanted: set[str] = set()
    for key in ("MessageSystemAttributeNames", "AttributeNames"):
        names = body.get(key)
        if names is None:
            continue
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise invalid(f"{key} must be a list of names")
        wanted.update(SYSTEM_ATTRIBUTES if "All" in names else names)
    return wanted


def received(message: ReceivedMessage, queue: str, system: set[str], keep: Any,
             source_arn: str | None, fifo: bool = False) -> dict[str, Any]:
    """One ``Messages`` entry of ReceiveMessage; ``fifo``: of a FIFO queue (or its DLQ), whose
    messages carry their ``SequenceNumber``, ``MessageGroupId`` and ``MessageDeduplicationId``."""
    out: dict[str, Any] = {
        "MessageId": message.id,
        "ReceiptHandle": receipts.make(queue, message.id, message.receipt or 0),
        "MD5OfBody": digests.md5_of_body(message.content),
        "Body": message.content,
    }
    if system:
        values = {
            "SentTimestamp": str(message.received_at),
            "ApproximateReceiveCount": str(message.attempts),
            "ApproximateFirstReceiveTimestamp": str(message.first_received_at or message.received_at),
        }
        if source_arn is not None:
            values["DeadLetterQueueSourceArn"] = source_arn
        kept = message.attributes or {}
        for name, key in (("SenderId", SENDER_KEY), ("AWSTraceHeader", TRACE_KEY)):
            if isinstance(kept.get(key), str) and kept[key] and not _INVALID_CHARS.search(kept[key]):
                values[name] = kept[key]  # (a message another face sent has none)
        sqs_group = None if message.group is None else from_group(message.group)
        if sqs_group is not None:
            values["MessageGroupId"] = sqs_group
        if fifo:
            values["SequenceNumber"] = sequence_number(message.sequence)
            if message.dedup_id is not None:
                values["MessageDeduplicationId"] = dedup_id_of(message.dedup_id, sqs_group)
        attributes = {k: v for k, v in values.items() if k in system}
        if attributes:
            out["Attributes"] = attributes
    if message.attributes:
        chosen = {n: v for n, v in from_forq(message.attributes).items() if keep(n)}
        if chosen:
            out["MessageAttributes"] = chosen
            out["MD5OfMessageAttributes"] = digests.md5_of_attributes(chosen)
    return out
