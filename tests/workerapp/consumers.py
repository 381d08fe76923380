"""Test consumers. Each appends ``event pid id attempts content`` lines to ``$FORQ_TEST_LOG``.

Queue ``work`` acts on its content: ``ok``, ``boom`` (raises), ``fatal`` (FatalError),
``slow:S`` (sleeps S seconds), ``poison`` (kills the process)."""

from __future__ import annotations

import os
import time

import forqapp


def log(event: str, message) -> None:
    path = os.environ.get("FORQ_TEST_LOG")
    if path:
        line = f"{event} {os.getpid()} {message.id} {message.attempts} {message.content}\n"
        with open(path, "a") as f:
            f.write(line)
            f.flush()


@forqapp.consumer("work")
def work(message):
    log("start", message)
    content = message.content
    if content == "boom":
        raise ValueError("boom")
    if content == "fatal":
        raise forqapp.FatalError("no way")
    if content == "poison":
        os._exit(3)
    if content.startswith("slow:"):
        time.sleep(float(content.split(":", 1)[1]))
    log("done", message)


@forqapp.consumer("jsonq", decode="json")
def json_consumer(message):
    log("json", type("M", (), {"id": message.id, "attempts": message.attempts,
                               "content": repr(message.content["n"])})())


@forqapp.consumer("grouped")
def grouped(message):
    """Content ``<group>:<n>``: the n-th message of its group; every fifth fails once (a nack)."""
    log("start", message)
    n = int(message.content.rsplit(":", 1)[1])
    if n % 5 == 0 and message.attempts == 1:
        log("nack", message)
        raise ValueError("once")
    log("done", message)
