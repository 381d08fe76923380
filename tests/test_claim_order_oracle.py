"""The claim's order against an oracle computed from the rows themselves (written for the audit of
migration 0013): random operations on one queue — plain, delayed and slightly past sends; nack with
backoff, release, defer, change_visibility(0), lapsed leases, ack; settles stamped by hosts whose
clocks differ — and each claim compared with FIFO = priority DESC, sequence ASC, LIFO = newest
first within the top priority, then the next priority, or the due order = priority DESC, then the
time each came due (``process_after``: a past send's own time), then sequence. Fewer than ENDED_AMONG rows come due by time
at once here, so the result must be exact; at the end everything left comes out, each once."""

from __future__ import annotations

import random

import pytest

from forqapp import vocab
from forqapp.models import Message

from .test_store_contract import NOW, put, st, take  # noqa: F401

READY, PROCESSING, FAILED = vocab.Status


def expected(queue: str, now: int, limit: int, order: str) -> list[str]:
    rows = [r for r in Message.objects.filter(queue=queue).values("id", "status", "process_after", "priority",
                                                                  "sequence")
            if r["status"] in (READY, PROCESSING) and r["process_after"] <= now]
    if order == "fifo":
        rows.sort(key=lambda r: (-r["priority"], r["sequence"]))
        return [r["id"] for r in rows[:limit]]
    if order == "due":
        rows.sort(key=lambda r: (-r["priority"], r["process_after"], r["sequence"]))
        return [r["id"] for r in rows[:limit]]
    rows.sort(key=lambda r: (-r["priority"], -r["sequence"]))
    return [r["id"] for r in rows[:limit]]


@pytest.mark.parametrize("order", ["fifo", "lifo", "due"])
@pytest.mark.parametrize("seed", range(20))
def test_claims_match_the_oracle(st, order, seed):  # noqa: F811
    rng = random.Random(seed)
    q = "orc"
    t = NOW
    held = {}  # id -> Delivery
    for step in range(600):
        t += rng.choice([0, 1, 5, 20, 60])
        op = rng.random()
        if op < 0.30:
            kind = rng.random()
            if kind < 0.5:
                put(st, q, rng.randrange(1, 4), due=t, received=t, priority=rng.randrange(3))
            elif kind < 0.8:
                put(st, q, 1, due=t + rng.choice([1, 30, 200]), received=t, priority=rng.randrange(3))
            elif kind < 0.9:  # a little in the past at send (Forq v1 allows it)
                put(st, q, 1, due=t - rng.choice([1, 50]), received=t, priority=rng.randrange(3))
            else:  # long past (a Django task's past run_after)
                put(st, q, 1, due=t - rng.choice([3_600_000, 36_000_000]), received=t, priority=rng.randrange(3))
        elif op < 0.55:
            limit = rng.choice([1, 1, 2, 5])
            want = expected(q, t, limit, order)
            got = take(st, q, t, limit, vis=rng.choice([10, 100, 1000]), order=order)
            assert [d.id for d in got] == want, (step, t)
            for d in got:
                held[d.id] = d
        elif held:
            mid = rng.choice(sorted(held))
            d = held.pop(mid)
            skew = rng.choice([0, 0, 0, -500, 300])  # another host's clock
            now = t + skew
            act = rng.random()
            if act < 0.3:
                st.ack(q, d.id, d.receipt)
            elif act < 0.55:
                st.nack(q, d.id, d.receipt, now, 0, [rng.choice([0, 10, 100])])
            elif act < 0.7:
                st.release(q, d.id, d.receipt, now)
            elif act < 0.8:
                st.defer(q, d.id, d.receipt, now, rng.choice([0, 40]), None)
            elif act < 0.9:
                st.change_visibility(q, [(d.id, d.receipt)], now, 0)
            # else: lapse (lease ends by itself)
    # drain: everything left comes out, each once
    t += 10_000
    left = set(Message.objects.filter(queue=q).values_list("id", flat=True))
    seen = []
    while True:
        got = take(st, q, t, 7, vis=10**9, order=order)
        if not got:
            break
        seen += [d.id for d in got]
    assert sorted(seen) == sorted(left)
