"""Grant syntax and matching (issue 16): pattern edge cases, DLQ coverage, Key.allows. No database."""

from __future__ import annotations

import pytest

from forqapp.keys import CONSUME, MANAGE, PRODUCE, READ, Key, grants, tokens
from forqapp.keys.grants import GrantError, parse


@pytest.mark.parametrize(("grant", "queue", "matches"), [
    ("orders", "orders", True),
    ("orders", "orders2", False),
    ("orders", "order", False),
    ("orders", "orders-dlq", False),  # a grant on a queue covers its DLQ only when it says so
    ("orders+dlq", "orders-dlq", True),
    ("orders+dlq", "orders", True),
    ("orders+dlq", "orders2-dlq", False),
    ("orders-dlq", "orders-dlq", True),  # the DLQ by its own name, alone
    ("orders-dlq", "orders", False),
    ("orders.*", "orders.eu", True),
    ("orders.*", "orders.eu.west", True),
    ("orders.*", "orders", False),  # the prefix is "orders.": the bare name is another queue
    ("orders.*", "orders.", False),  # nothing after the prefix
    ("orders.*", "ordersarchive", False),  # a longer unrelated name
    ("orders.*", "orders-eu", False),
    ("orders.*", "orders.eu-dlq", False),
    ("orders.*+dlq", "orders.eu-dlq", True),
    ("orders-*", "orders-eu", True),
    ("orders-*", "orders-dlq", False),  # orders' DLQ is no "orders-" queue to a prefix grant
    ("orders_*", "orders_2026", True),
    ("*", "anything", True),
    ("*", "anything-dlq", False),
    ("*+dlq", "anything-dlq", True),
    ("L" * 80, "L" * 80, True),  # forqapp's longest name (SQS's 80)
    ("L" * 80 + "+dlq", "L" * 80 + "-dlq", True),  # and its DLQ, 84 characters
    ("L" * 80 + "-dlq", "L" * 80 + "-dlq", True),
    ("L" * 78 + ".*", "L" * 78 + ".x", True),  # the longest prefix: 79 characters, one more in the name
    ("*", "*", True),
    ("orders.*", "*", False),  # "every queue" is asked as "*": only a * grant gives it
])
def test_pattern_matching(grant, queue, matches):
    assert parse(f"{grant}:read").matches(queue) is matches


@pytest.mark.parametrize("bad", [
    "orders", "orders:", ":read", "orders:write", "orders:read,", "orders*:read", "ord ers:read", "a/b:read",
    "orders.**:read", "*.orders:read", "or*ders:read", "x" * 81 + ":read", "x" * 80 + ".*:read", "orders+dlq+dlq:read", "", "+dlq:read",
])
def test_bad_grants_are_refused(bad):
    if bad == "orders:read,":  # a trailing comma is tolerated: the actions are still valid
        assert parse(bad).actions == {READ}
        return
    with pytest.raises(GrantError):
        parse(bad)


def test_canonical_form_round_trips():
    g = parse(" orders.*+dlq:READ, consume ")
    assert str(g) == "orders.*+dlq:consume,read"
    assert parse(str(g)) == g
    assert grants.dumps(grants.parse_all(["a:produce", "*:manage"])) == ["a:produce", "*:manage"]
    with pytest.raises(GrantError):
        grants.parse_all([])


def test_key_allows_only_its_grants():
    key = Key("FQKAAAAAAAAAAAAAAAAA", "s" * 40, grants.parse_all(["orders:produce", "orders.*:consume,read"]))
    assert key.allows("orders", PRODUCE)
    assert not key.allows("orders", CONSUME)
    assert key.allows("orders.eu", CONSUME) and key.allows("orders.eu", READ)
    assert not key.allows("orders.eu", PRODUCE) and not key.allows("orders.eu", MANAGE)
    assert not key.allows("orders-dlq", PRODUCE)
    assert not key.allows("*", READ)
    assert key.allows("orders", PRODUCE)  # memoised answers are the same
    root = Key("forq-root", "r" * 40, root=True)
    assert all(root.allows(q, a) for q in ("x", "x-dlq", "*") for a in (PRODUCE, CONSUME, MANAGE, READ))
    assert "s" * 40 not in repr(key)  # the secret never shows in a repr (logs, tracebacks)


def test_tokens():
    access_key_id, secret = tokens.new_access_key_id(), tokens.new_secret()
    assert tokens.ID.fullmatch(access_key_id) and len(access_key_id) == 20
    assert len(secret) == 40 and "." not in secret
    assert tokens.split(tokens.token(access_key_id, secret)) == (access_key_id, secret)
    assert tokens.split("no-dot") is None
    assert tokens.split("fqk" + "A" * 17 + ".x") is None
