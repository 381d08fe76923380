"""Several processes consume a queue mixing plain, delayed and backed-off messages (FIFO, LIFO,
random), some nacking, deferring, releasing, letting leases lapse, while a producer sends (written
for the audit of migration 0013). Every message is acked exactly once; no delivery overlaps a live
lease; no first delivery comes before its due time, none before its backoff or its defer's delay."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

import pytest

from forqapp.models import Message

from .conftest import ROOT, subprocess_env

Q = "mix"
BACKOFF = [40, 120, 200]

PRODUCER = """
import django; django.setup()
import random, sys, time, forqapp
seed, start, count = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
for i in range(start, start + count):
    delay = rng.choice([0, 0, 0, 0.05, 0.3, 0.8]) if rng.random() < 0.6 else 0
    t0 = int(time.time() * 1000)
    if delay:
        forqapp.send("mix", f"m{i}:{t0 + int(delay * 1000)}", delay=delay, priority=rng.randrange(3))
    else:
        forqapp.send("mix", f"m{i}:{t0}", priority=rng.randrange(3))
    if rng.random() < 0.3:
        time.sleep(0.005)
"""

CONSUMER = """
import django; django.setup()
import json, random, sys, time, forqapp
from forqapp import services
from forqapp.errors import ForqError
order, seed = sys.argv[1], int(sys.argv[2])
rng, idle = random.Random(seed), 0
def out(kind, m, **kw):
    print(json.dumps({"k": kind, "id": m.id, "c": m.content, "a": m.attempts, "r": m.receipt,
                      "l": m.lease_expires_at, "t": int(time.time() * 1000), **kw}), flush=True)
while idle < 8:
    n = rng.choice([1, 1, 3, 7])
    if n == 1:
        m = forqapp.receive("mix", wait=0.5, visibility_timeout=1.5, random=order == "random")
        batch = [m] if m else []
    else:
        batch = forqapp.receive_many("mix", n, wait=0.5, visibility_timeout=1.5, random=order == "random")
    if not batch:
        idle += 1
        continue
    idle = 0
    for m in batch:
        out("got", m)
        x = rng.random()
        t0 = int(time.time() * 1000)
        try:
            if m.attempts >= 5 or x < 0.55:
                forqapp.ack(m); out("ack", m, t0=t0)
            elif x < 0.70:
                forqapp.nack(m, "boom"); out("nack", m, t0=t0)
            elif x < 0.80:
                out("die", m, t0=t0)  # the lease lapses (1.5 s)
            elif x < 0.86:
                services.defer(m, 0.1); out("defer", m, t0=t0)
            elif x < 0.93:
                services.change_visibility(m, 0); out("cv0", m, t0=t0)
            else:
                services.release(m); out("release", m, t0=t0)
        except ForqError as e:
            out("stale", m, t0=t0, err=str(e))
"""


@pytest.mark.slow
@pytest.mark.parametrize("order", ["fifo", "lifo", "random"])
@pytest.mark.django_db(transaction=True)
def test_mixed_consumers_exactly_once(order):
    import forqapp

    forqapp.configure_queue(Q, ordering="lifo" if order == "lifo" else "fifo", max_attempts="unlimited",
                            backoff=BACKOFF)
    env = subprocess_env()
    files = {}

    def spawn(code, *args):  # output to files: a full pipe would stall a consumer holding leases
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        proc = subprocess.Popen([sys.executable, "-c", code, *args], env=env, cwd=ROOT, stdout=out, stderr=err)
        files[proc.pid] = (out, err)
        return proc

    def finish(proc):
        proc.wait(timeout=300)
        out, err = files[proc.pid]
        out.seek(0), err.seek(0)
        return out.read(), err.read()

    # some already there, delayed or plain, before consumers start
    n_pre = 300
    for i in range(n_pre):
        t0 = int(time.time() * 1000)
        delay = [0, 0, 0.2, 0.6][i % 4]
        forqapp.send(Q, f"p{i}:{t0 + int(delay * 1000)}", delay=delay or None, priority=i % 3)
    consumers = [spawn(CONSUMER, order, str(s)) for s in range(4)]
    producer = spawn(PRODUCER, "7", "0", "700")
    try:
        _, err = finish(producer)
        assert producer.returncode == 0, err
        events = []
        for proc in consumers:
            out, err = finish(proc)
            assert proc.returncode == 0, err
            events += [json.loads(line) for line in out.splitlines()]
    finally:
        for proc in (producer, *consumers):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for out, err in files.values():
            out.close()
            err.close()
    left = list(Message.objects.filter(queue=Q).values("id", "content", "status", "process_after",
                                                         "received_at", "attempts"))
    assert not left, f"left in the queue: {left[:5]} ({len(left)})"

    by_id = defaultdict(list)
    for e in events:
        by_id[e["id"]].append(e)
    contents = {e["c"] for e in events}
    assert len(contents) == n_pre + 700
    problems = []
    for mid, evs in by_id.items():
        gots = sorted((e for e in evs if e["k"] == "got"), key=lambda e: e["r"])
        outcomes = {e["r"]: e for e in evs if e["k"] != "got"}
        acks = [e for e in evs if e["k"] == "ack"]
        if len(acks) != 1:
            problems.append(("acks", mid, len(acks)))
        due = int(gots[0]["c"].split(":")[1])
        if gots[0]["r"] < due:
            problems.append(("early", mid, gots[0]["r"], due))
        for d1, d2 in itertools.pairwise(gots):
            o = outcomes[d1["r"]]
            if o["k"] == "ack":
                problems.append(("after-ack", mid, d1, d2))
            elif o["k"] == "die" and d2["r"] < d1["l"]:
                problems.append(("overlap-live-lease", mid, d1, d2))
            elif o["k"] == "nack" and d2["r"] < o["t0"] + BACKOFF[min(d1["a"], len(BACKOFF)) - 1]:
                problems.append(("before-backoff", mid, d1, d2, o))
            elif o["k"] == "defer" and d2["r"] < o["t0"] + 100:
                problems.append(("before-defer", mid, d1, d2))
            elif o["k"] == "stale":
                problems.append(("stale", mid, d1, d2, o))
    assert not problems, problems[:10]
