"""Access key ids, secrets and the ``X-API-Key`` token.

* access key id: ``FQK`` + 17 characters of base32 (``FQK4J2…``), 20 in all like AWS's ``AKIA…``;
  public, and the indexed column a request's key is looked up by;
* secret: 40 characters of URL-safe base64 (240 random bits), like an AWS secret access key;
* token: ``<access key id>.<secret>``, what a client puts in ``X-API-Key``; the id in front makes
  the lookup one indexed read (and usually none: :mod:`.cache`).
"""

from __future__ import annotations

import base64
import re
import secrets

ID_PREFIX = "FQK"
ID = re.compile(r"FQK[A-Z2-7]{17}")
SECRET_CHARS = 40
SEPARATOR = "."


def new_access_key_id() -> str:
    return ID_PREFIX + base64.b32encode(secrets.token_bytes(15)).decode("ascii")[:17]


def new_secret() -> str:
    return secrets.token_urlsafe(30)  # 30 bytes -> 40 characters


def token(access_key_id: str, secret: str) -> str:
    return f"{access_key_id}{SEPARATOR}{secret}"


def split(value: str) -> tuple[str, str] | None:
    """(access key id, secret) of a token, or None if ``value`` is not shaped like one."""
    access_key_id, sep, secret = value.partition(SEPARATOR)
    if not sep or not ID.fullmatch(access_key_id):
        return None
    return access_key_id, secret
