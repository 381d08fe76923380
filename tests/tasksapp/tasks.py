"""Tasks for the Django Tasks backend's tests (``tests/test_tasks*.py``). Each records what it
saw in ``FORQ_TEST_LOG`` (a file, so worker subprocesses can report too) when that is set."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from forqapp.tasks import retries
from forqapp.tasks import task as forq_task
from forqapp.tasks.compat import task

CALLS: list = []  # in-process runs (threads of a Worker in the test process)


def _log(event: str, **fields) -> None:
    CALLS.append((event, fields))
    path = os.environ.get("FORQ_TEST_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n")


@task
def add(a, b):
    _log("add", a=a, b=b)
    return a + b


@task
def echo(*args, **kwargs):
    _log("echo", args=args, kwargs=kwargs)
    return {"args": list(args), "kwargs": kwargs}


@task(priority=10, queue_name="other")
def urgent(n):
    _log("urgent", n=n)
    return n


@task
def noop():
    return None


@task
async def async_double(n):
    await asyncio.sleep(0.01)
    _log("async_double", n=n)
    return n * 2


@task(takes_context=True)
def with_context(context, label):
    _log("with_context", label=label, attempt=context.attempt, id=context.task_result.id)
    return {"attempt": context.attempt, "label": label}


@task
def unencodable():
    return {1, 2}  # a set: no JSON


@task
@retries(max_attempts=3, backoff=0)
def flaky(key, fail_times):
    """Fails the first ``fail_times`` attempts (counted in a file named by ``key`` under the log's
    folder, or in memory)."""
    n = _bump(key)
    _log("flaky", key=key, attempt=n)
    if n <= fail_times:
        raise ValueError(f"attempt {n} of {key} fails")
    return n


@task
@retries(max_attempts=3, backoff=[0.2, 0.4])
def always_fails(key):
    n = _bump(key)
    _log("always_fails", key=key, attempt=n)
    raise RuntimeError(f"boom {n}")


@task
def slow(seconds, key="slow"):
    _log("slow-start", key=key)
    time.sleep(seconds)
    _log("slow-end", key=key)
    return key


_counts: dict[str, int] = {}


def _bump(key: str) -> int:
    path = os.environ.get("FORQ_TEST_LOG")
    if not path:
        _counts[key] = _counts.get(key, 0) + 1
        return _counts[key]
    counter = os.path.join(os.path.dirname(path), f"count-{key}")
    n = int(open(counter).read()) + 1 if os.path.exists(counter) else 1  # noqa: SIM115
    with open(counter, "w") as f:
        f.write(str(n))
    return n


@task(takes_context=True)
def sleepy(context, seconds):
    """Sleeps ``seconds`` on its first attempt only (the one a test kills), then returns the attempt."""
    _log("sleepy-start", attempt=context.attempt, worker=context.task_result.worker_ids[-1])
    if context.attempt == 1:
        time.sleep(seconds)
    return context.attempt


BACKOFF_SEEN: list = []


def _upstream_backoff(exception, task_result):
    """The upstream proposal's shape: (exception, task_result) -> seconds."""
    BACKOFF_SEEN.append((type(exception).__name__, task_result.attempts, len(task_result.errors)))
    return 0.5 * task_result.attempts


@forq_task(queue_name="other", priority=5, max_attempts=3, backoff=_upstream_backoff)
def upstream_shaped(key):
    """Retry options on the decorator itself (forqapp.tasks.task), as proposed upstream."""
    n = _bump(key)
    _log("upstream_shaped", key=key, attempt=n)
    raise KeyError(f"attempt {n}")


@task
@retries(max_attempts=1)
def leaves(how):
    """Tries to leave the process, as a task may: ``sys.exit``, the ``exit()`` of the REPL (site's),
    a ``KeyboardInterrupt`` of its own."""
    _log("leaves", how=how)
    if how == "sys.exit":
        sys.exit(3)
    if how == "exit()":
        exit(4)  # noqa: PLR1722 - the builtin on purpose: what a careless task calls
    raise KeyboardInterrupt


@task
@retries(max_attempts=1)
async def leaves_async():
    _log("leaves_async")
    raise SystemExit(5)


# --- message groups (forqapp.tasks.group_by) ---------------------------------------------------

from forqapp.tasks import group_by  # noqa: E402


@task(queue_name="other")
@group_by("customer_id")
def bill(customer_id, invoice, note=None):
    _log("bill", customer_id=customer_id, invoice=invoice)


@forq_task(queue_name="other", group_by=lambda tenant, **kwargs: f"tenant:{tenant}")
def mail_tenant(tenant, subject=""):
    _log("mail_tenant", tenant=tenant, subject=subject)


# The docs' form: a function of every argument, positional or named, as the task is called.
@forq_task(queue_name="other", group_by=lambda customer_id, *args, **kwargs: f"customer-{customer_id}")
def send_invoice(customer_id, invoice_id):
    _log("send_invoice", customer_id=customer_id, invoice_id=invoice_id)


@task(takes_context=True)
@group_by("account")
def with_context_grouped(context, account=None):
    _log("with_context_grouped", account=account)
