"""Bench consumers: ``bench-noop`` does nothing; ``bench-latency`` records send → start latency."""

from __future__ import annotations

import os
import time

import forqapp


@forqapp.consumer("bench-noop")
def noop(message):
    pass


@forqapp.consumer("bench-latency")
def latency(message):
    started = time.time()
    path = os.environ.get("FORQ_BENCH_LATENCY_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{started - float(message.content[:20])}\n")
