"""What flow control costs a queue without limits (issue 13): claim+ack and send, in-process, on
this checkout and on the design before flow control (commit 8326fff), in alternating rounds of one
run; plus the same workload on a queue with a limit high enough never to hold back (the limited
path's own cost).

    .venv/bin/python bench/flow_bench.py [--rounds 3] [--messages 5000]

Each round runs in a fresh subprocess on a fresh SQLite file; figures are per wall-clock second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "8326fff"  # the last commit before issue 13's flow control

WORKLOAD = r'''
import os, sys, time
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
sys.path.insert(0, os.getcwd())
import django; django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
import forqapp
from forqapp import services
n, limited = int(sys.argv[1]), sys.argv[2] == "limited"
if limited:
    forqapp.configure_queue("b", max_in_flight=10**6)
t = time.perf_counter()
for _ in range(n):
    forqapp.send("b", "x")
send = n / (time.perf_counter() - t)
t = time.perf_counter()
for _ in range(n):
    services.ack(services.claim("b"))
claim = n / (time.perf_counter() - t)
print(send, claim)
'''


def run(checkout: Path, n: int, mode: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "FORQ_DB_PATH": str(Path(tmp) / "b.sqlite3")}
        out = subprocess.run([sys.executable, "-c", WORKLOAD, str(n), mode], cwd=checkout, env=env,
                             capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=5000)
    args = parser.parse_args()
    before = Path(tempfile.mkdtemp(prefix="forq-flow-before-"))
    subprocess.run(["git", "worktree", "add", "--detach", str(before), BEFORE], cwd=ROOT, check=True,
                   capture_output=True)
    (before / ".venv").symlink_to(ROOT / ".venv")
    results: dict[str, list[tuple[float, float]]] = {"before (no flow control)": [], "now, no limits": [],
                                                      "now, a limit never reached": []}
    try:
        for _ in range(args.rounds):
            results["before (no flow control)"].append(run(before, args.messages, "plain"))
            results["now, no limits"].append(run(ROOT, args.messages, "plain"))
            results["now, a limit never reached"].append(run(ROOT, args.messages, "limited"))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=False)
    base_send = statistics.median(r[0] for r in results["before (no flow control)"])
    base_claim = statistics.median(r[1] for r in results["before (no flow control)"])
    print(f"{'(medians of ' + str(args.rounds) + ' rounds, per second)':32} {'send':>8} {'ratio':>6} "
          f"{'claim+ack':>10} {'ratio':>6}")
    for name, rows in results.items():
        send = statistics.median(r[0] for r in rows)
        claim = statistics.median(r[1] for r in rows)
        print(f"{name:32} {send:8,.0f} {send / base_send:6.2f} {claim:10,.0f} {claim / base_claim:6.2f}")


if __name__ == "__main__":
    main()
