"""Message ids are RFC 9562 UUIDv7, checked against the ``uuid6`` package as an independent parser."""

from __future__ import annotations

import time

import uuid6

from forqapp import ids


def test_ids_are_uuid7_with_the_current_millisecond_and_in_order():
    before = time.time_ns() // 1_000_000
    made = ids.new_ids(5000) + [ids.new_id() for _ in range(100)]
    after = time.time_ns() // 1_000_000
    parsed = [uuid6.UUID(i) for i in made]
    assert all(u.version == 7 and u.variant == "specified in RFC 4122" for u in parsed)
    assert all(str(u) == i for u, i in zip(parsed, made, strict=True))
    # The timestamp is the clock's (a full counter may borrow the next millisecond, so allow +1).
    assert all(before <= u.time <= after + 2 for u in parsed)
    assert made == sorted(made) and len(set(made)) == len(made)
