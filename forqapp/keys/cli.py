"""What ``manage.py forq_keys`` does (the command itself is a thin argparse shell)."""

from __future__ import annotations

import getpass
import json
import re
from datetime import UTC, datetime

from ..conf import forq_settings
from ..utils import ms_to_datetime, now_ms
from . import crypto, service
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


WHERE_SEALING_KEY = ("run it with the server's settings and environment: export the FORQ_AUTH_SECRET that "
                     "forq_serve runs with (and its FORQ_KEYS_SECRET, if it has one; the same SECRET_KEY "
                     "otherwise); for the demo server of `make run`, `set -a; . var/local.env; set +a` first")


def sealing_problem() -> str | None:
    """Why a key made by this process would never work on the server, or None. ``create`` and
    ``rotate`` seal the new secret with this process's key (``FORQ_KEYS_SECRET``, else
    ``SECRET_KEY``); the server opens it with its own. Two ways to tell they differ, from here:
    the newest stored key does not open with this process's key (it was sealed by the server's),
    or this process has none of a server's secrets (no ``FORQ_KEYS_SECRET``, no
    ``FORQ_AUTH_SECRET``: a shell without the server's settings)."""
    own = bool(forq_settings.FORQ_KEYS_SECRET)
    newest = ApiKey.objects.order_by("-created_at", "-pk").first()
    if newest is not None:
        try:
            crypto.unseal(newest.secret_sealed, newest.access_key_id)
        except crypto.SealError:
            which = ("FORQ_KEYS_SECRET differs from the server's" if own else
                     "FORQ_KEYS_SECRET is not set here, and SECRET_KEY is not the server's sealing key")
            return (f"this process cannot seal keys the server can open: the newest key ({newest.name}) does not "
                    f"open with its sealing key ({which}); {WHERE_SEALING_KEY}")
        return None
    if not own and not forq_settings.FORQ_AUTH_SECRET:
        return ("FORQ_KEYS_SECRET is not set (nor FORQ_AUTH_SECRET: this process does not have the server's "
                "settings), so the key's secret would be sealed with a key the server does not use and the "
                f"token would never work; {WHERE_SEALING_KEY}")
    return None


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
