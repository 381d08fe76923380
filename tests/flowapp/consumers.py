"""Consumers of the flow-control and defer tests. Each appends one JSON line per event to
``$FORQ_TEST_LOG``: ``{"event", "t" (time.time()), "pid", "id", "receipt", "attempts", "state"}``.

* ``flow-cap`` and ``flow-rate``: log ``start``, sleep ``float(content)`` seconds, log ``end``.
* ``flow-defer`` (``decode="json"``): content ``{"steps": N}``; each delivery logs ``run`` with its
  saved state and, until ``N`` deliveries are done, raises ``Defer(0, state={"done": k})``.
"""

from __future__ import annotations

import json
import os
import time

import forqapp


def log(event: str, message, **extra) -> None:
    path = os.environ.get("FORQ_TEST_LOG")
    if not path:
        return
    line = json.dumps({"event": event, "t": time.time(), "pid": os.getpid(), "id": message.id,
                       "receipt": message.receipt, "attempts": message.attempts, **extra})
    with open(path, "a") as f:  # one short write in append mode: lines from processes never mix
        f.write(line + "\n")


def timed(message) -> None:
    log("start", message)
    time.sleep(float(message.content))
    log("end", message)


forqapp.consumer("flow-cap")(timed)
forqapp.consumer("flow-rate")(timed)


@forqapp.consumer("flow-defer", decode="json")
def resumable(message) -> None:
    log("run", message, state=message.state)
    done = (message.state or {}).get("done", 0) + 1
    if done < message.content["steps"]:
        raise forqapp.Defer(0, state={"done": done})
