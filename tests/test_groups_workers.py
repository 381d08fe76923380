"""Message groups under real workers: several ``forq_worker`` processes, each with several threads,
on a queue with ``group_concurrency=1``: per group, processing never overlaps and follows send order,
through nacks and their backoff (the handlers' log is appended line by line: its order is the order
in which the handlers ran; a handler logs before its settle, so a group's next claim comes after)."""

from __future__ import annotations

import os
import signal
from collections import defaultdict

import pytest

import forqapp

from .workerproc import WorkerProc

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# The size: 4 processes x 8 threads, 200 groups x 20 messages, one in five nacked once.
PROCESSES, THREADS = 4, 8
GROUPS, PER_GROUP = 200, 20


def test_strict_order_per_group_across_processes_and_threads(tmp_path):
    forqapp.configure_queue("grouped", group_concurrency=1, backoff=[20], max_attempts="unlimited")
    # interleaved: one message of each group, then the next of each
    forqapp.send_many("grouped", [{"content": f"g{g}:{n}", "group": f"g{g}"}
                                  for n in range(PER_GROUP) for g in range(GROUPS)])
    w = WorkerProc(tmp_path)
    # (a process group of its own: the supervisor's worker processes end with it, whatever happens)
    supervisor = w.start("grouped", "--processes", str(PROCESSES), "--concurrency", str(THREADS), own_group=True)
    try:
        total = GROUPS * PER_GROUP
        w.wait_for(lambda: sum(e[0] == "done" for e in w.events()) >= total, timeout=240,
                   what=f"{total} messages handled")
    finally:
        os.killpg(supervisor.pid, signal.SIGKILL)
        w.stop_all()
    events = w.events()
    by_group: dict[str, list[tuple[str, int, int, str]]] = defaultdict(list)
    for event, pid, _id, attempts, content in events:
        group, n = content.rsplit(":", 1)
        by_group[group].append((event, int(n), attempts, pid))
    assert len(by_group) == GROUPS
    pids = {e[1] for e in events}
    assert len(pids) == PROCESSES, pids  # every process took part
    for group, seq in by_group.items():
        expected = []
        for n in range(PER_GROUP):
            if n % 5 == 0:
                expected += [("start", n, 1), ("nack", n, 1), ("start", n, 2), ("done", n, 2)]
            else:
                expected += [("start", n, 1), ("done", n, 1)]
        # never two at once (a start always follows its predecessor's end), in send order, each once
        assert [(e, n, a) for e, n, a, _ in seq] == expected, (group, seq)
    assert os.path.exists(w.log)
    assert forqapp.queue_info("grouped").counts["ready"] == 0
