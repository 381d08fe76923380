"""Several OS processes on one database: 4 producers and 4 consumers, 5,000 messages, each consumed
exactly once, none lost, no error (no "database is locked" reaches a caller)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from forqapp.models import Message

from .conftest import ROOT, subprocess_env

PRODUCER = """
import django; django.setup()
import sys, forqapp
start, count = int(sys.argv[1]), int(sys.argv[2])
for i in range(start, start + count):
    forqapp.send("mp", f"m{i}")
"""

CONSUMER = """
import django; django.setup()
import forqapp
idle = 0
while idle < 3:
    message = forqapp.receive("mp", wait=1)
    if message is None:
        idle += 1
        continue
    idle = 0
    forqapp.ack(message)
    print(message.content, flush=True)
"""


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_four_producers_four_consumers_exactly_once():
    env = subprocess_env()
    per_producer, producers = 1250, 4

    def spawn(code, *args):
        return subprocess.Popen([sys.executable, "-c", code, *args], env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    consumers = [spawn(CONSUMER) for _ in range(4)]
    makers = [spawn(PRODUCER, str(i * per_producer), str(per_producer)) for i in range(producers)]
    for proc in makers:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
    seen: Counter[str] = Counter()
    for proc in consumers:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        assert "locked" not in err
        seen.update(out.split())
    expected = {f"m{i}" for i in range(per_producer * producers)}
    assert set(seen) == expected
    assert max(seen.values()) == 1
    assert not Message.objects.filter(queue="mp").exists()


SETTLER = """
import django; django.setup()
import random, sys, forqapp
from forqapp.errors import ForqError
order, seed = sys.argv[1], int(sys.argv[2])
rng, idle = random.Random(seed), 0
while idle < 4:
    batch = forqapp.receive_many("mpo", 5, wait=0.5, visibility_timeout=0.4, random=order == "random")
    if not batch:
        idle += 1
        continue
    idle = 0
    for m in batch:
        if rng.random() < 0.2:  # this consumer "dies": its lease ends, the message comes back
            print("die", m.id, m.attempts, flush=True)
            continue
        try:
            forqapp.ack(m)
            print("ack", m.id, m.attempts, flush=True)
        except ForqError:
            print("stale", m.id, m.attempts, flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("order", ["fifo", "lifo", "random"])
@pytest.mark.django_db(transaction=True)
def test_consumers_that_die_lose_nothing_and_nothing_runs_twice(order):
    """Three processes receive batches (FIFO, LIFO or random) with 0.4 s leases and let a fifth of
    their deliveries lapse; ended leases come back at once. Every message is acked once or is a dead
    letter (2 attempts); no attempt is delivered twice, and a dead letter is never delivered again
    (the claim rechecks a row another claim has just taken or moved)."""
    import forqapp

    forqapp.configure_queue("mpo", ordering="lifo" if order == "lifo" else "fifo", max_attempts=2)
    sent = set(forqapp.send_many("mpo", [{"content": f"m{i}", "priority": i % 3} for i in range(600)]))
    procs = [subprocess.Popen([sys.executable, "-c", SETTLER, order, str(seed)], env=subprocess_env(), cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in range(3)]
    events = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        events += [line.split() for line in out.splitlines()]
    deliveries = Counter((mid, int(attempts)) for _, mid, attempts in events)
    assert max(deliveries.values()) == 1  # no attempt delivered twice
    assert all(attempts in (1, 2) for _, attempts in deliveries)
    acked = Counter(mid for kind, mid, _ in events if kind == "ack")
    dead = set(Message.objects.filter(queue="mpo-dlq").values_list("id", flat=True))
    assert max(acked.values()) == 1 and not set(acked) & dead
    assert set(acked) | dead == sent and not Message.objects.filter(queue="mpo").exists()
