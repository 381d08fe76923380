"""forqapp.server.process's signal handling: the stops run on a thread of their own, never inside the
signal handler, so a signal that lands while the main thread holds a lock a stop needs (a worker's
``threading.Event``) cannot deadlock the process (python/cpython#126434 is the same trap)."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT

# The main thread holds the lock that the stop takes when the signal comes: a handler that called
# the stop itself would wait forever for its own thread (an idle forq_worker that never stopped).
HOLDS_THE_LOCK = """
import os, signal, threading
from forqapp.server import process

lock, stopped = threading.Lock(), threading.Event()

def stop():
    with lock:
        stopped.set()

process.on_stop(stop)
process.install_signal_handlers("demo")
with lock:
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):  # Python calls: the handler runs here, the lock still held
        len(str(_))
print("stopped" if stopped.wait(10) else "deadlocked", flush=True)
"""


def test_a_signal_while_the_main_thread_holds_a_stops_lock_still_stops():
    run = subprocess.run([sys.executable, "-c", HOLDS_THE_LOCK], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert run.stdout.strip() == "stopped", run.stdout + run.stderr


# The kernel gives a process's signal to any of its threads that does not block it. Here only the
# signals thread may take it; the main thread waits on an event, as an idle worker does. A handler
# that ran in Python would run only once that wait ended (the main thread's own); the wakeup fd
# tells the signals thread at once.
MAIN_THREAD_IN_A_LONG_WAIT = """
import os, signal, threading, time
from forqapp.server import process

stopped = threading.Event()
process.on_stop(stopped.set)
process.install_signal_handlers("demo")  # starts the signals thread, SIGTERM not blocked in it
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the main thread's alone, from here
started = time.monotonic()
os.kill(os.getpid(), signal.SIGTERM)
woke = stopped.wait(30)
print(f"stopped after {time.monotonic() - started:.1f} s" if woke else "not stopped", flush=True)
"""


def test_a_signal_given_to_another_thread_ends_the_main_threads_wait_at_once():
    run = subprocess.run([sys.executable, "-c", MAIN_THREAD_IN_A_LONG_WAIT], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    out = run.stdout.strip()
    assert out.startswith("stopped after"), out + run.stderr
    assert float(out.split()[2]) < 5, out


# forq_serve's supervisor between a start and a stop: it sleeps until a child exits or a signal
# comes (SIGCHLD and the stop signals reach it through the wakeup descriptor), not on a timer.
SUPERVISOR_PAUSES = """
import os, signal, sys, time
from forqapp.server import process

supervisor = process.Supervisor()
supervisor.install_signal_handlers()
supervisor.start("long", [sys.executable, "-c", "import time; time.sleep(30)"])
started = time.monotonic()
supervisor.pause(0.6)  # nothing happens: the whole timeout
print(f"idle {time.monotonic() - started:.2f}", flush=True)
supervisor.start("short", [sys.executable, "-c", "import time; time.sleep(0.3)"])
started = time.monotonic()
while not supervisor.any_exited():
    supervisor.pause(20)
print(f"exited {time.monotonic() - started:.2f}", flush=True)
started = time.monotonic()
signal.setitimer(signal.ITIMER_REAL, 0.3)
signal.signal(signal.SIGALRM, lambda *a: None)
supervisor.pause(20)  # (a signal with a Python handler ends it too)
print(f"signalled {time.monotonic() - started:.2f}", flush=True)
os.kill(os.getpid(), signal.SIGTERM)  # the supervisor's stop: SIGTERM to its children
print("long", supervisor.wait(10)["long"], flush=True)
"""


def test_the_supervisor_sleeps_until_a_child_exits_or_a_signal_comes():
    run = subprocess.run([sys.executable, "-c", SUPERVISOR_PAUSES], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    lines = dict(line.split(" ", 1) for line in run.stdout.split("\n") if line)
    assert set(lines) == {"idle", "exited", "signalled", "long"}, run.stdout + run.stderr
    assert float(lines["idle"]) >= 0.55  # not woken by nothing
    assert float(lines["exited"]) < 10  # woken by the child's exit (SIGCHLD), not its 20 s
    assert float(lines["signalled"]) < 10
    assert lines["long"] == "-15"  # stopped by the SIGTERM passed on
