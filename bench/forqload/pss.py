"""PSS of a process tree: ``python bench/forqload/pss.py PID [--watch SECONDS]``.

Sums ``Pss`` of ``/proc/<pid>/smaps_rollup`` over ``PID`` and all its descendants (the server's
supervisor, its granian processes and workers, the jobs child): what the server holds in memory,
shared pages divided among the processes that share them. With ``--watch``, samples every 0.5 s
for that long and prints the largest total seen.
"""

from __future__ import annotations

import argparse
import os
import time


def children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return found


def tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            todo += children(p)
        except OSError:
            pass
    return pids


def pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def total_mb(pid: int) -> tuple[float, int]:
    pids = tree(pid)
    return sum(pss_kib(p) for p in pids) / 1024, len(pids)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("pid", type=int)
    parser.add_argument("--watch", type=float, default=0)
    args = parser.parse_args()
    mb, n = total_mb(args.pid)
    end = time.monotonic() + args.watch
    while time.monotonic() < end:
        time.sleep(0.5)
        mb2, n2 = total_mb(args.pid)
        if mb2 > mb:
            mb, n = mb2, n2
    print(f"{mb:.1f} MB PSS in {n} processes")


if __name__ == "__main__":
    main()
