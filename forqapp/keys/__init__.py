"""Scoped API keys (docs: how-to/keys.md): who may do what to which queue.

A key is an access key id (``FQK…``, public, indexed) and a secret, with grants: queue patterns and
the actions they allow (:data:`PRODUCE`, :data:`CONSUME`, :data:`MANAGE`, :data:`READ`). A client
sends ``X-API-Key: <access key id>.<secret>`` (the token :mod:`.tokens` makes); AWS-style signers use
the id and the secret themselves. ``FORQ_AUTH_SECRET`` stays the root key, with every grant.

This module is the contract the API, the SQS face and the Spark connector code against. It is
imported while apps load, so it imports no model: a key is looked up by :mod:`.cache`
(``cache.for_token``, ``cache.for_access_key``).

* :mod:`.grants` — grant syntax (``orders:produce``, ``orders.*:consume,read``, ``*+dlq:manage``)
  and matching;
* :mod:`.crypto` — the secret encrypted at rest (AES-256-GCM, server key ``FORQ_KEYS_SECRET``);
* :mod:`.tokens` — ids, secrets and the ``X-API-Key`` token;
* :mod:`.cache` — the per-process cache (``FORQ_KEYS_CACHE_SECONDS``) and last-use recording;
* :mod:`.models`, :mod:`.service` (create, revoke, rotate, enable: each with an audit event),
  :mod:`.admin`, and ``manage.py forq_keys``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .grants import Grant

PRODUCE, CONSUME, MANAGE, READ = "produce", "consume", "manage", "read"
ACTIONS = (PRODUCE, CONSUME, MANAGE, READ)
ROOT_ACCESS_KEY_ID = "forq-root"  # FORQ_AUTH_SECRET signs AWS SigV4 requests with this id

_MEMO_LIMIT = 1024  # (queue, action) answers remembered per key


@dataclass(frozen=True)
class Key:
    """A usable key: its id, its plaintext secret (needed to verify AWS SigV4 signatures) and what
    it may do. ``root``: ``FORQ_AUTH_SECRET``, every action on every queue."""

    access_key_id: str
    secret: str = field(repr=False)
    grants: tuple[Grant, ...] = ()
    root: bool = False
    name: str = ""
    expires_at: int | None = None  # Unix ms
    _memo: dict[tuple[str, str], bool] = field(default_factory=dict, repr=False, compare=False, hash=False)

    def allows(self, queue: str, action: str) -> bool:
        """Whether this key may do ``action`` on ``queue`` (a queue name; ``"*"`` asks for every
        queue, which only a ``*`` grant gives)."""
        if self.root:
            return True
        memo = self._memo
        answer = memo.get((queue, action))
        if answer is None:
            answer = any(action in g.actions and g.matches(queue) for g in self.grants)
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            memo[(queue, action)] = answer
        return answer

    def expired(self, now_ms: int) -> bool:
        return self.expires_at is not None and self.expires_at <= now_ms


__all__ = ["ACTIONS", "CONSUME", "MANAGE", "PRODUCE", "READ", "ROOT_ACCESS_KEY_ID", "Key"]
