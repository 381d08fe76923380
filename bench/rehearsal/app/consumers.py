"""``rh-work``: a consumer that records each delivery and enqueues a Django task for it (so a worker
host runs both forqapp's consumers and its Django Tasks backend); the task records its run."""

from __future__ import annotations

import os
import socket
import time

import forqapp

from .tasks import record_task


def record(kind: str, content: str) -> None:
    """One line per run, appended to the host's file in ``RH_LOG_DIR`` (O_APPEND: whole lines)."""
    path = os.path.join(os.environ["RH_LOG_DIR"], f"runs-{os.environ.get('RH_HOST', socket.gethostname())}.log")
    with open(path, "a") as f:
        f.write(f"{kind} {content} {time.time():.3f}\n")


@forqapp.consumer("rh-work")
def work(message):
    record("work", message.content)
    record_task.enqueue(message.content)


@forqapp.consumer("bench-sink")
def sink(message):
    """The scaling measure's consumer: nothing, so the drain measures forqapp and the database."""
