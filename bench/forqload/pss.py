"""PSS of a process tree: ``python bench/forqload/pss.py PID [--watch SECONDS]``; or the CPU
seconds it has used so far: ``python bench/forqload/pss.py PID --cpu-seconds``.

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


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of ``pids`` (each process's threads included), in seconds; a process that
    ended in between no longer counts, so read a tree whose processes live through the window."""
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        except (OSError, IndexError, ValueError):
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


def total_mb(pid: int) -> tuple[float, int]:
    pids = tree(pid)
    return sum(pss_kib(p) for p in pids) / 1024, len(pids)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("pid", type=int)
    parser.add_argument("--watch", type=float, default=0)
    parser.add_argument("--cpu-seconds", action="store_true", help="print the tree's CPU seconds so far instead")
    args = parser.parse_args()
    if args.cpu_seconds:
        print(f"{cpu_seconds(tree(args.pid)):.2f}")
        return
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
