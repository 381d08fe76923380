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
