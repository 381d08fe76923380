"""SQS's query protocol: the one SQS spoke before JSON 1.0, which older SDKs and tools still send.

A request is ``Action=<Action>&Version=2012-11-05&…`` form-encoded in a ``POST`` body (or in a
``GET``'s query string), its lists and maps flattened into numbered names (``Attribute.1.Name``,
``MessageAttribute.1.Value.StringValue``, ``SendMessageBatchRequestEntry.1.Id``…); the answer is
XML: ``<XResponse><XResult>…</XResult><ResponseMetadata><RequestId>…`` and an error
``<ErrorResponse><Error><Type>Sender</Type><Code>…``.

Both directions are driven by SQS's own query-protocol model, ``model/sqs-2012-11-05.json``: a
trimmed copy of the ``sqs/2012-11-05/service-2.json`` of botocore 1.31.80, the last botocore whose
SQS model says ``"protocol": "query"`` (Apache-2.0; its notice is shipped beside it). Why a copy of
the model rather than code per action: the model says, for every action and shape, the very names
(``locationName``), flattening and result wrappers the SDKs serialise with, so :func:`parse`
turns any action's form into the JSON protocol's dict and :func:`render` any answer dict into its
XML, and an action added to :data:`forqapp.sqs.actions.ACTIONS` speaks this protocol with no code
here. It is read as data: botocore is no dependency of forqapp."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from .protocol import SqsError, given_twice, malformed, request_id

CONTENT_TYPE = "application/x-www-form-urlencoded"
XML_CONTENT_TYPE = "text/xml"
VERSION = "2012-11-05"
MAX_FIELDS = 10_000  # a batch of 10 entries with 10 attributes each is some 500
_MODEL = Path(__file__).parent / "model" / "sqs-2012-11-05.json"
# What XML 1.0 cannot carry (control characters, lone surrogates): U+FFFD in the answer.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
#: The query string's own SigV4 parameters (not the action's).
AUTH_PARAMETERS = frozenset(("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
                             "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token"))


@functools.cache
def model() -> dict[str, Any]:
    return json.loads(_MODEL.read_text())


def namespace() -> str:
    return model()["metadata"]["xmlNamespace"]


def operation(action: str) -> dict[str, Any] | None:
    return model()["operations"].get(action)


def takes_queue_url(action: str) -> bool:
    """Whether ``action``'s input has a ``QueueUrl`` (which the request's path may give)."""
    op = operation(action) or {}
    shape = op.get("input", {}).get("shape")
    return shape is not None and "QueueUrl" in _shape(shape).get("members", {})


def _shape(name: str) -> dict[str, Any]:
    return model()["shapes"][name]


def _resolve(ref: dict[str, Any]) -> dict[str, Any]:
    """A shape reference as botocore resolves it: the shape, with the reference's own
    serialisation traits (``locationName``, ``flattened``) over the shape's."""
    shape = dict(_shape(ref["shape"]))
    for trait in ("locationName", "flattened"):
        if trait in ref:
            shape[trait] = ref[trait]
    return shape


def _member_name(shape: dict[str, Any], member: str) -> str:
    """A structure member's name on the wire (botocore's ``_member_key_name``): a flattened list's
    elements are named by its member's ``locationName``."""
    if shape["type"] == "list" and shape.get("flattened"):
        name = shape["member"].get("locationName")
        if name:
            return name
    return shape.get("locationName") or member


# --- requests: form parameters -> the JSON protocol's dict --------------------------------------


def form(data: bytes | str) -> dict[str, str]:
    """The parameters of a form-encoded body or a query string (UTF-8, percent-encoded), but the
    signature's own (:data:`AUTH_PARAMETERS`); a name given twice, bytes that are not UTF-8 or
    more than :data:`MAX_FIELDS` parameters are refused (``MalformedQueryString``)."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        pairs = parse_qsl(text, keep_blank_values=True, encoding="utf-8", errors="strict",
                          max_num_fields=MAX_FIELDS)
    except UnicodeDecodeError:
        raise malformed("it is not UTF-8") from None
    except ValueError:
        raise malformed(f"more than {MAX_FIELDS} parameters") from None
    out: dict[str, str] = {}
    seen: set[str] = set()
    for name, value in pairs:
        if name in out or name in seen:
            raise given_twice(name)
        if name in AUTH_PARAMETERS:
            seen.add(name)
            continue
        out[name] = value
    return out


def merged(in_url: dict[str, str], in_body: dict[str, str]) -> dict[str, str]:
    """The parameters of the query string and of the body, together (a name in both is refused)."""
    both = in_url.keys() & in_body.keys()
    if both:
        raise given_twice(min(both))
    return {**in_url, **in_body}


def parse(action: str, params: dict[str, str]) -> dict[str, Any]:
    """The JSON protocol's input of ``action`` from its form ``params`` (``Action`` and the
    signature's own left out): what botocore's query serialiser writes, read back by the model.
    Parameters the model does not name are ignored; a scalar that is not of its type is passed
    as the string it is, for the action to refuse in its words. The names are read into a tree
    first (``A.1.B`` → ``A`` → ``1`` → ``B``), so the parse takes one look per parameter."""
    op = operation(action) or {}
    ref = op.get("input")
    if ref is None:
        return {}
    tree: dict[str | None, Any] = {}
    for name, value in params.items():
        node = tree
        for part in name.split("."):
            node = node.setdefault(part, {})
        node[None] = value  # (None: the value of the name that ends here)
    return _parse_structure(_shape(ref["shape"]), tree, "")


def _parse_structure(shape: dict[str, Any], node: dict[str | None, Any], path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for member, ref in shape.get("members", {}).items():
        member_shape = _resolve(ref)
        value = _parse(member_shape, node, member_shape.get("locationName") or member, path)
        if value is not None:
            out[member] = value
    return out


def _numbered(node: dict[str | None, Any] | None, path: str) -> list[tuple[str, dict[str | None, Any]]]:
    """The children ``1``, ``2``… of ``node`` (with their numbers), in the order of their numbers
    (``path``: the parameters' names before the number). Any other child (``.0.``, ``.01.``,
    ``.x.``), or a gap in the numbers (``.1.`` and ``.3.``), is refused, not dropped: a member a
    client numbered so would otherwise be lost."""
    if not node:
        return []
    numbers = []
    for k in node:
        if k is None:
            continue
        if not (k.isascii() and k.isdigit() and k[0] != "0"):
            raise SqsError("InvalidParameterValue", f"{path}{k} is not a member of a list: members are numbered "
                           "1, 2, 3, …")
        numbers.append(int(k))
    numbers.sort()
    for expected, n in enumerate(numbers, 1):
        if n != expected:  # a gap (.1 and .3, or .2 alone): the member it skips would be lost
            raise SqsError("InvalidParameterValue", f"{path}{expected} is missing: the members of a list are "
                           "numbered 1, 2, 3, … without a gap")
    return [(str(n), node[str(n)]) for n in numbers]


def _parse(shape: dict[str, Any], parent: dict[str | None, Any], name: str, path: str) -> Any:
    """The value of the member ``name`` of ``parent``, a node of the parameters' tree (at ``path``:
    the names above it, for the errors)."""
    kind = shape["type"]
    node = parent.get(name)
    if kind == "list":
        item_name = shape["member"].get("locationName")
        if shape.get("flattened"):
            # As botocore: the member's name replaces the flattened list's (Entries → …Entry.1).
            items_path = f"{path}{item_name or name}."
            items = _numbered(parent.get(item_name or name), items_path)
        else:
            items_path = f"{path}{name}.{item_name or 'member'}."
            items = _numbered((node or {}).get(item_name or "member"), items_path)
        if not items:
            return [] if node is not None and None in node else None  # (botocore sends an empty list as "Name=")
        member = _resolve(shape["member"])
        return [_parse(member, {n: item}, n, items_path) for n, item in items]
    if node is None:
        return None
    if kind == "structure":
        return _parse_structure(shape, node, f"{path}{name}.")
    if kind == "map":
        flattened = shape.get("flattened")
        entries_path = f"{path}{name}." if flattened else f"{path}{name}.entry."
        entries = _numbered(node if flattened else node.get("entry"), entries_path)
        key_name = shape["key"].get("locationName", "key")
        value_name = shape["value"].get("locationName", "value")
        value_shape = _resolve(shape["value"])
        out: dict[str, Any] = {}
        for n, entry in entries:
            key = entry.get(key_name, {}).get(None)
            if key is None:
                raise SqsError("MissingParameter", f"The request must contain the parameter "
                               f"{entries_path}{n}.{key_name}.")
            out[key] = _parse(value_shape, entry, value_name, f"{entries_path}{n}.")
        if out:
            return out
        return {} if None in node else None  # (an empty map, as an empty list)
    value = node.get(None)
    if value is None:
        return None
    if kind in ("integer", "long"):
        return int(value) if re.fullmatch(r"-?[0-9]{1,18}", value) else value
    if kind == "boolean":
        return {"true": True, "false": False}.get(value, value)
    return value  # strings, and blobs in base64 as the JSON protocol has them


# --- answers: the JSON protocol's dict -> XML ------------------------------------------------------


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = _NOT_XML.sub("\ufffd", str(value))
    # "\r" escaped: an XML parser reads a bare one as "\n".
    return escape(text).replace("\r", "&#13;")


def _render(shape: dict[str, Any] | None, value: Any, name: str, out: list[str]) -> None:
    kind = shape["type"] if shape is not None else None
    if kind == "structure" or (shape is None and isinstance(value, dict)):
        out.append(f"<{name}>")
        _render_members(shape, value, out)
        out.append(f"</{name}>")
    elif kind == "list" or (shape is None and isinstance(value, list)):
        member = _resolve(shape["member"]) if shape is not None else None
        if shape is not None and shape.get("flattened"):
            for item in value:
                _render(member, item, name, out)
        else:
            item_name = (shape or {}).get("member", {}).get("locationName", "member")
            out.append(f"<{name}>")
            for item in value:
                _render(member, item, item_name, out)
            out.append(f"</{name}>")
    elif kind == "map" and shape is not None:
        key_name = shape["key"].get("locationName", "key")
        value_name = shape["value"].get("locationName", "value")
        value_shape = _resolve(shape["value"])
        flattened = shape.get("flattened")
        if not flattened:
            out.append(f"<{name}>")
        for key, item in value.items():
            out.append(f"<{name}>" if flattened else "<entry>")
            out.append(f"<{key_name}>{_text(key)}</{key_name}>")
            _render(value_shape, item, value_name, out)
            out.append(f"</{name}>" if flattened else "</entry>")
        if not flattened:
            out.append(f"</{name}>")
    else:
        out.append(f"<{name}>{_text(value)}</{name}>")


def _render_members(shape: dict[str, Any] | None, value: dict[str, Any], out: list[str]) -> None:
    members = (shape or {}).get("members", {})
    for member, item in value.items():
        if item is None:
            continue
        if member in members:
            member_shape: dict[str, Any] | None = _resolve(members[member])
            assert member_shape is not None
            _render(member_shape, item, _member_name(member_shape, member), out)
        else:  # a member this model does not have (an action newer than it): as it is
            _render(None, item, member, out)


def render(action: str, payload: dict[str, Any], request: str) -> bytes:
    """``action``'s XML answer of its JSON-protocol answer ``payload``."""
    op = operation(action) or {}
    out = [f'<?xml version="1.0"?><{action}Response xmlns="{namespace()}">']
    ref = op.get("output")
    if ref is not None or payload:
        wrapper = (ref or {}).get("resultWrapper", f"{action}Result")
        out.append(f"<{wrapper}>")
        _render_members(_shape(ref["shape"]) if ref else None, payload, out)
        out.append(f"</{wrapper}>")
    out.append(f"<ResponseMetadata><RequestId>{request}</RequestId></ResponseMetadata></{action}Response>")
    return "".join(out).encode()


def answer(action: str, payload: dict[str, Any]) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    request = request_id()
    body = render(action, payload, request)
    return 200, _headers(body, request), body


#: Messages the query protocol words otherwise than the JSON protocol (AWS's, on each).
_QUERY_MESSAGES = {"The specified queue does not exist.": "The specified queue does not exist for this wsdl version."}


def error(exc: SqsError) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """An ``<ErrorResponse>`` with the error's query-protocol code (``Error.Code``) and message."""
    request = request_id()
    message = _QUERY_MESSAGES.get(exc.message, exc.message)
    body = (f'<?xml version="1.0"?><ErrorResponse xmlns="{namespace()}"><Error><Type>{exc.fault}</Type>'
            f"<Code>{_text(exc.code)}</Code><Message>{_text(message)}</Message><Detail/></Error>"
            f"<RequestId>{request}</RequestId></ErrorResponse>").encode()
    return exc.status, _headers(body, request), body


def _headers(body: bytes, request: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", XML_CONTENT_TYPE.encode()),
        (b"x-amzn-requestid", request.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"x-content-type-options", b"nosniff"),
    ]


def is_query(method: str, headers: dict[str, list[str]]) -> bool:
    """Whether a request speaks the query protocol: a form-encoded body, or a ``GET`` (its
    parameters in the query string); the JSON protocol's requests name their action in
    ``X-Amz-Target``."""
    if headers.get("x-amz-target"):
        return False
    if method == "GET":
        return True
    content_type = (headers.get("content-type") or [""])[0].partition(";")[0].strip().lower()
    return content_type == CONTENT_TYPE
