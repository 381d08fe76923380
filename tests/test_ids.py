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


def test_single_ids_keep_order_with_bulk_ones_and_a_forked_child_draws_its_own():
    import os

    made = []
    for _ in range(1000):  # past the end of the random pool, twice
        made += [ids.new_id(), *ids.new_ids(2)]
    assert made == sorted(made) and len(set(made)) == len(made)
    assert all(uuid6.UUID(i).version == 7 for i in made)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids must not repeat the parent's random digits
        os.write(write, ",".join(ids.new_id() for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        child = pipe.read().split(",")
    parent = [ids.new_id() for _ in range(50)]
    assert not {i[19:] for i in child} & {i[19:] for i in parent}  # the random part (variant on)
