"""AddPermission and RemovePermission: the queue's ``Policy`` attribute, kept and answered.

forqapp does not enforce a queue's policy: who may do what is its scoped keys' grants (the key that
signs the request). The policy is kept as SQS keeps it, so that tools that write and read it back
(Terraform, CloudFormation-like scripts, the AWS CLI) find what they wrote: AddPermission adds a
statement as SQS builds it (``Sid`` the label, ``Principal`` each account's root, ``Action``
``SQS:<action>``, ``Resource`` the queue's ARN) to the queue's policy (a new one:
``{"Version": "2012-10-17", "Id": "<arn>/SQSDefaultPolicy", "Statement": []}``); RemovePermission
removes the label's statement, and the policy with its last one. Each is read, changed and written
in one transaction, the queue's row locked, so concurrent calls from several processes each keep
theirs.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.db import transaction

from .. import keys, services, validation
from ..vocab import base_of, is_dlq
from . import queues
from .protocol import SqsError, invalid, missing

#: The actions a statement may allow (SQS's: those a queue's owner may share), at most 7 a call.
ACTIONS = ("*", "ChangeMessageVisibility", "DeleteMessage", "GetQueueAttributes", "GetQueueUrl",
           "ListDeadLetterSourceQueues", "PurgeQueue", "ReceiveMessage", "SendMessage")
MAX_ACTIONS = 7
_LABEL = re.compile(r"[A-Za-z0-9_-]{1,80}")
_ACCOUNT = re.compile(r"[0-9]{12}")


def _queue(ctx: Any, body: dict[str, Any]) -> str:
    name = queues.name_from_url(body.get("QueueUrl"), ctx.origin.region)
    ctx.need(name, keys.MANAGE)
    queues.existing(name, fresh=True)
    return name


def _label(body: dict[str, Any]) -> str:
    label = body.get("Label")
    if label is None or label == "":
        raise missing("Label")
    if not isinstance(label, str) or not _LABEL.fullmatch(label):
        raise invalid(f"Value {str(label)[:200]} for parameter Label is invalid. Reason: Can only include "
                      "alphanumeric characters, hyphens, or underscores. 1 to 80 in length.")
    return label


def _names(body: dict[str, Any], parameter: str) -> list[str]:
    value = body.get(parameter)
    if value is None or value == []:
        raise missing(parameter)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(f"{parameter} must be a list of strings")
    return value


def _update(name: str, change: Any) -> None:
    """``change(policy or None) -> policy or None`` on queue ``name``'s ``Policy``: one
    transaction, the row locked (read again under the lock: a concurrent change is kept)."""
    base = base_of(name)
    alias = services.alias()
    with transaction.atomic(using=alias):
        row = queues.make_row(name)  # (a queue known by its messages only: its row now)
        meta = json.loads(json.dumps(row[0]))  # a copy
        own = meta.setdefault("dlq", {}) if is_dlq(name) else meta
        text = own.get("Policy")
        try:  # (kept before SetQueueAttributes refused NaN and Infinity: none is answered)
            have = validation.json_loads(text) if text else None
        except (ValueError, RecursionError):
            raise SqsError("InvalidAttributeValue", "Invalid value for the parameter Policy: the queue's policy is "
                           "not JSON (set it again with SetQueueAttributes)") from None
        policy = change(have)
        if policy:
            own["Policy"] = json.dumps(policy, separators=(",", ":"), allow_nan=False)
        else:
            own.pop("Policy", None)
        queues.save_meta(base, meta)


def add_permission(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    name = _queue(ctx, body)
    label = _label(body)
    if body.get("AWSAccountIds") == []:  # (a JSON request's; the query protocol sends no empty list)
        raise invalid("Value [] for parameter PrincipalId is invalid. Reason: Unable to verify.")
    accounts = _names(body, "AWSAccountIds")
    actions = _names(body, "Actions")
    for account in accounts:
        if not _ACCOUNT.fullmatch(account):
            raise invalid(f"Value {account[:200]} for parameter PrincipalId is invalid. Reason: Unable to verify.")
    if len(actions) > MAX_ACTIONS:
        raise SqsError("OverLimit", f"{len(actions)} Actions were found, maximum allowed is {MAX_ACTIONS}.",
                       403)  # (SQS's OverLimit is a 403)
    for action in actions:
        if action not in ACTIONS:
            raise invalid(f"Value SQS:{action[:200]} for parameter ActionName is invalid. Reason: Only the queue "
                          "owner is allowed to invoke this action.")
    arn = ctx.origin.arn(name)
    principals = [f"arn:aws:iam::{account}:root" for account in accounts]
    statement = {
        "Sid": label, "Effect": "Allow",
        "Principal": {"AWS": principals[0] if len(principals) == 1 else principals},
        "Action": f"SQS:{actions[0]}" if len(actions) == 1 else [f"SQS:{a}" for a in actions],
        "Resource": arn,
    }

    def add(policy: dict[str, Any] | None) -> dict[str, Any]:
        policy = policy or {"Version": "2012-10-17", "Id": f"{arn}/SQSDefaultPolicy", "Statement": []}
        statements = policy.get("Statement")
        if isinstance(statements, dict):
            statements = [statements]
        elif not isinstance(statements, list):
            statements = []
        if any(isinstance(s, dict) and s.get("Sid") == label for s in statements):
            raise invalid(f"Value {label} for parameter Label is invalid. Reason: Already exists.")
        return {**policy, "Statement": [*statements, statement]}

    _update(name, add)
    return {}


def remove_permission(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    name = _queue(ctx, body)
    label = _label(body)

    def remove(policy: dict[str, Any] | None) -> dict[str, Any] | None:
        statements = (policy or {}).get("Statement")
        if isinstance(statements, dict):
            statements = [statements]
        elif not isinstance(statements, list):
            statements = []
        kept = [s for s in statements if not (isinstance(s, dict) and s.get("Sid") == label)]
        if policy is None or len(kept) == len(statements):
            raise invalid(f"Value {label} for parameter Label is invalid. Reason: can't find label on existing "
                          "policy.")
        return {**policy, "Statement": kept} if kept else None

    _update(name, remove)
    return {}
