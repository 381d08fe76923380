"""What the files of processes gone cost a ``GET /metrics`` scrape in multiprocess mode, before and
after the scrape compacts them (forqapp.metrics.compaction), in one run:

* N processes gone (default 4,000: a cron ``forq_jobs run`` each minute for ~3 days), each leaving
  what such a process leaves: a counter file, a most-recent gauge file (the clock offset, queue
  depths) and, one in four (a ``forq_worker --burst``), a histogram file;
* the reference: scrapes of them uncompacted (compaction held off), then the scrape that compacts
  them (once), then scrapes of the archives. Every scrape's samples are checked the same.

    .venv/bin/python bench/metrics_bench.py [--processes 4000] [--queues 20] [--rounds 5]

Prints the files, each scrape's median time and the ratio uncompacted / compacted. The machine is
shared and noisy: compare the ratio, not the absolute figures, with another run.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEAD = 5_000_000  # above any pid_max: never a live process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4000)
    parser.add_argument("--queues", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "prometheus"
        directory.mkdir()
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)  # (this process writes there too: the server's)
        os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        run(directory, args)


def write_dead(directory: Path, processes: int, queues: int) -> None:
    from prometheus_client.mmap_dict import MmapedDict, mmap_key

    rnd = random.Random(1)
    names = [f"queue-{i}" for i in range(queues)]

    def key(metric: str, sample: str, labels: dict[str, str]) -> str:
        return mmap_key(metric, sample, list(labels), list(labels.values()), f"{metric} help")

    for n in range(processes):
        pid = DEAD + n
        counters = MmapedDict(str(directory / f"counter_{pid}.db"))
        counters.write_value(key("forq_job_runs", "forq_job_runs_total", {"job": "cleanup", "result": "ok"}), 1, 0)
        counters.write_value(key("forq_messages_stale_recovered", "forq_messages_stale_recovered_total", {}), 0, 0)
        for queue in rnd.sample(names, 3):
            counters.write_value(key("forq_messages_cleanup", "forq_messages_cleanup_total", {"reason": "expired"}),
                                 rnd.randint(0, 9), 0)
            counters.write_value(key("forq_messages_produced", "forq_messages_produced_total",
                                     {"queue_name": queue, "queue_type": "regular"}), rnd.randint(0, 9), 0)
        counters.close()
        gauges = MmapedDict(str(directory / f"gauge_mostrecent_{pid}.db"))
        now = 1.7e9 + n * 60
        gauges.write_value(key("forq_clock_offset_seconds", "forq_clock_offset_seconds", {}), 0.0, now)
        for queue in names:
            gauges.write_value(key("forq_queue_depth", "forq_queue_depth", {"queue_name": queue, "queue_type": "regular"}),
                               rnd.randint(0, 500), now)
        gauges.close()
        if n % 4 == 0:
            histogram = MmapedDict(str(directory / f"histogram_{pid}.db"))
            metric = "forq_worker_handler_duration_seconds"
            for queue in rnd.sample(names, 2):
                for le in ("0.005", "0.05", "0.5", "5.0", "+Inf"):
                    histogram.write_value(key(metric, metric + "_bucket", {"le": le, "queue_name": queue}),
                                          rnd.randint(0, 5), 0)
                histogram.write_value(key(metric, metric + "_sum", {"queue_name": queue}), rnd.randint(0, 80) / 8, 0)
            histogram.close()


def run(directory: Path, args: argparse.Namespace) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from forqapp import metrics
    from forqapp.metrics import compaction

    def scrape() -> tuple[float, dict]:
        started = time.perf_counter()
        text = metrics.exposition()[0].decode()
        elapsed = time.perf_counter() - started
        return elapsed, {(s.name, tuple(sorted(s.labels.items()))): s.value
                         for f in text_string_to_metric_families(text) for s in f.samples}

    write_dead(directory, args.processes, args.queues)
    files = len(list(directory.glob("*.db")))
    held, compaction.MINIMUM_DEAD_FILES = compaction.MINIMUM_DEAD_FILES, 10**9
    scrape()  # (the folding state settles)
    uncompacted = [scrape() for _ in range(args.rounds)]
    compaction.MINIMUM_DEAD_FILES = held
    compacting = scrape()
    left = sorted(p.name for p in directory.glob("*.db"))
    compacted = [scrape() for _ in range(args.rounds)]
    reference = uncompacted[0][1]
    assert all(samples == reference for _, samples in uncompacted + [compacting] + compacted), "samples differ"

    def ms(seconds: float) -> str:
        return f"{seconds * 1000:9.1f} ms"

    before = statistics.median(t for t, _ in uncompacted)
    after = statistics.median(t for t, _ in compacted)
    print(f"{args.processes} processes gone, {files} files; {len(reference)} samples per scrape (the same in every scrape)")
    print(f"uncompacted scrape (reference), median of {args.rounds}: {ms(before)}")
    print(f"the scrape that compacts them (once):            {ms(compacting[0])}")
    print(f"compacted scrape, median of {args.rounds}:               {ms(after)}   ({len(left)} files: {', '.join(left)})")
    print(f"uncompacted / compacted: {before / after:.1f}x")


if __name__ == "__main__":
    main()
