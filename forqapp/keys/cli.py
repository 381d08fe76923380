"""What ``manage.py forq_keys`` does (the command itself is a thin argparse shell)."""

from __future__ import annotations

import getpass
import json
import re
from datetime import UTC, datetime

from ..utils import ms_to_datetime, now_ms
from . import service
from .models import ApiKey

_DURATION = re.compile(r"(\d+)([smhdw])")
_UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}


def parse_expires(value: str, now: int | None = None) -> int:
    """``--expires``: a duration from now (``90d``, ``12h``, ``30m``) or an ISO date/time (UTC unless
    it says) → Unix ms. ``ValueError`` otherwise (argparse reports it)."""
    value = value.strip()
    if m := _DURATION.fullmatch(value):
        duration = int(m.group(1)) * _UNIT_MS[m.group(2)]
        if not 0 < duration <= 100 * 365 * _UNIT_MS["d"]:
            raise ValueError(f"{value!r}: give a duration from 1s to 100 years (36500d)")
        return (now_ms() if now is None else now) + duration
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{value!r} is neither a duration (90d, 12h, 30m) nor an ISO date/time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # noqa: BLE001 - no user name in some containers
        return "cli"


def _when(ms: int | None) -> str:
    when = ms_to_datetime(ms)
    return "-" if when is None else when.strftime("%Y-%m-%d %H:%M:%S UTC")


def issued_lines(issued: service.Issued) -> list[str]:
    """``create`` and ``rotate`` print these; the token is the last line (what ``X-API-Key`` takes)."""
    return [
        f"name:          {issued.key.name}",
        f"access key id: {issued.key.access_key_id}",
        f"secret:        {issued.secret}",
        "The secret is shown once; it cannot be shown again (rotate to get a new one).",
        "X-API-Key token:",
        issued.token,
    ]


def listing(as_json: bool) -> list[str]:
    now = now_ms()
    keys = list(ApiKey.objects.all())
    if as_json:
        return [json.dumps([{
            "name": k.name, "access_key_id": k.access_key_id, "grants": k.grants, "state": service.state(k, now),
            "created_at": k.created_at, "expires_at": k.expires_at, "last_used_at": k.last_used_at,
        } for k in keys], indent=2)]
    if not keys:
        return ["no API keys (FORQ_AUTH_SECRET is the root key)"]
    return [f"{k.name}  {k.access_key_id}  {service.state(k, now)}  grants={' '.join(k.grants)}  "
            f"expires={_when(k.expires_at)}  last used={_when(k.last_used_at)}" for k in keys]
