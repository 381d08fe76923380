"""SQS's redrive attributes on forqapp's dead-letter queues: ``RedrivePolicy``'s target (any
existing queue, as on SQS; forqapp's ``dead_letter_queue``) and ``RedriveAllowPolicy`` (which source
queues may name a queue as their target), checked in SQS's words.

Pure functions of names and attributes: :mod:`forqapp.sqs.queues` looks the queues up and stores
what these return.
"""

from __future__ import annotations

import json
from typing import Any

from .. import validation
from .protocol import invalid

PERMISSIONS = ("allowAll", "denyAll", "byQueue")
MAX_SOURCE_ARNS = 10


def arn_name(arn: object) -> str | None:
    """The SQS queue name an ARN (``arn:aws:sqs:<region>:<account>:<name>``) ends with; None if
    ``arn`` is no queue ARN."""
    parts = arn.split(":") if isinstance(arn, str) else []
    if len(parts) != 6 or parts[:3] != ["arn", "aws", "sqs"] or not parts[5]:
        return None
    return parts[5]


def _allow_error(value: str, reason: str) -> Exception:
    return invalid(f"Value {value} for parameter RedriveAllowPolicy is invalid. Reason: Amazon SQS can't create "
                   f"the redrive allow policy{reason}")


def parse_allow_policy(value: object) -> dict[str, Any] | None:
    """A checked ``RedriveAllowPolicy`` ("" removes it: None), as SQS checks it: a JSON object with
    ``redrivePermission`` ``allowAll``, ``denyAll`` or ``byQueue``; ``byQueue`` with 1 to 10
    ``sourceQueueArns``, the others with none."""
    if value == "" or value is None:
        return None
    try:
        policy = validation.json_loads(value) if isinstance(value, str) else None
    except (ValueError, RecursionError):
        policy = None
    shown = value if isinstance(value, str) else json.dumps(value)
    if (not isinstance(policy, dict) or set(policy) - {"redrivePermission", "sourceQueueArns"}
            or policy.get("redrivePermission") not in PERMISSIONS):
        raise _allow_error(shown, ", as it's in an unsupported format.")
    permission = policy["redrivePermission"]
    arns = policy.get("sourceQueueArns")
    if permission == "byQueue":
        if not arns:
            raise _allow_error(shown, ". When you specify the byQueue permission type, you must also specify one "
                                      "or more sourceQueueArns values.")
        if not isinstance(arns, list) or not all(arn_name(a) for a in arns):
            raise _allow_error(shown, ", as it's in an unsupported format.")
        if len(arns) > MAX_SOURCE_ARNS:
            raise _allow_error(shown, f". The maximum number of source queue ARNs you can specify is "
                                      f"{MAX_SOURCE_ARNS}.")
        return {"redrivePermission": permission, "sourceQueueArns": list(arns)}
    if arns:
        raise _allow_error(shown, ". When you specify the allowAll or denyAll permission type, you can't also "
                                  "specify sourceQueueArns values.")
    return {"redrivePermission": permission}


def allows(policy: dict[str, Any] | None, source_sqs_name: str, account: str) -> bool:
    """Whether a queue whose ``RedriveAllowPolicy`` is ``policy`` (None: none, all allowed) may be
    the dead-letter queue of the source queue SQS calls ``source_sqs_name`` in ``account`` (an ARN
    of another account's queue of that name allows not this one)."""
    if not policy or policy["redrivePermission"] == "allowAll":
        return True
    if policy["redrivePermission"] == "denyAll":
        return False
    return any(arn_name(a) == source_sqs_name and str(a).split(":")[4] == account
               for a in policy.get("sourceQueueArns", ()))


def shown(policy: dict[str, Any]) -> str:
    """A stored ``RedriveAllowPolicy`` as GetQueueAttributes gives it."""
    return json.dumps(policy, separators=(",", ":"))
