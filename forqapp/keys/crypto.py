"""The secret of a key, encrypted at rest.

AWS-style request signing (SigV4, used by the SQS face) computes an HMAC with the secret itself, so
the server must be able to recover it: a one-way hash is not enough. Each secret is sealed with
AES-256-GCM (``cryptography``'s AEAD): authenticated, so a row edited in the database fails to open
instead of yielding a different secret, and bound to its access key id (the associated data), so a
sealed secret copied onto another key's row does not open either. A random 96-bit nonce per seal.

The 256-bit server key comes from ``FORQ_KEYS_SECRET`` (any text, >= 32 characters recommended),
or, when that is empty, from Django's ``SECRET_KEY``; HKDF-SHA256 derives it, with a label of its
own, so the AES key is never equal to a key used elsewhere. Neither lives in the database: a copy of
the database alone gives no secret away. Changing the server key makes every stored secret
unreadable (those keys then fail closed, as unknown, and the server logs it): rotate the keys.

``cryptography`` is imported on the first seal or unseal, not with this module: a server with no
scoped key never loads it (~6 MB of memory per process).
"""

from __future__ import annotations

import base64
import functools
import os
from typing import TYPE_CHECKING

from django.conf import settings

from ..conf import forq_settings

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

VERSION = "v1"  # the sealed form's prefix: v1:base64(nonce | ciphertext | tag)
_LABEL = b"forqapp api key secrets v1"


class SealError(ValueError):
    """A sealed secret that does not open with this server key (wrong key, or the row was changed)."""


def server_key_material() -> str:
    return forq_settings.FORQ_KEYS_SECRET or settings.SECRET_KEY


@functools.lru_cache(maxsize=4)
def _aead(material: str) -> AESGCM:
    # (imported here: only a server with scoped keys needs it; see the module's docstring)
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_LABEL).derive(material.encode("utf-8"))
    return AESGCM(key)


def seal(secret: str, access_key_id: str) -> str:
    nonce = os.urandom(12)
    sealed = _aead(server_key_material()).encrypt(nonce, secret.encode("utf-8"), access_key_id.encode("ascii"))
    return f"{VERSION}:{base64.b64encode(nonce + sealed).decode('ascii')}"


def unseal(stored: str, access_key_id: str) -> str:
    version, sep, body = stored.partition(":")
    if version != VERSION or not sep:
        raise SealError("unknown sealed form")
    from cryptography.exceptions import InvalidTag  # (imported here: see the module's docstring)

    try:
        raw = base64.b64decode(body, validate=True)
        plain = _aead(server_key_material()).decrypt(raw[:12], raw[12:], access_key_id.encode("ascii"))
    except (InvalidTag, ValueError) as exc:
        raise SealError("the secret does not open with this server key") from exc
    return plain.decode("utf-8")
