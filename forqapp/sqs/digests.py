"""The digests SQS answers with, computed as AWS does (the Java, .NET, Go, PHP and Ruby SDKs check
them): the body's MD5, and the message attributes' MD5 over a binary encoding of each attribute,
by name: 4-byte big-endian length + UTF-8 bytes of the name and of the data type, one transport
byte (1: string, 2: binary), then the value's length + bytes (UTF-8 text, or the binary itself)."""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import Any


def md5_of_body(body: str) -> str:
    return hashlib.md5(body.encode("utf-8"), usedforsecurity=False).hexdigest()


def _field(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def md5_of_attributes(attributes: dict[str, dict[str, Any]]) -> str | None:
    """The digest of SQS ``MessageAttributes`` (``{name: {"DataType", "StringValue" |
    "BinaryValue" (base64)}}``); None when there are none (SQS then leaves the field out)."""
    if not attributes:
        return None
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        value = attributes[name]
        data_type = value["DataType"]
        digest.update(_field(name.encode("utf-8")))
        digest.update(_field(data_type.encode("utf-8")))
        if data_type.startswith("Binary"):
            digest.update(b"\x02")
            digest.update(_field(base64.b64decode(value["BinaryValue"])))
        else:
            digest.update(b"\x01")
            digest.update(_field(value["StringValue"].encode("utf-8")))
    return digest.hexdigest()
