"""SQS-compatible endpoint benchmark (issue 17): boto3 against forqapp's SQS listener and against
moto's server (``moto_server``, the usual stand-in for SQS in tests), in the same run.

    .venv/bin/python bench/sqs_bench.py [--rounds 3] [--messages 1000] [--clients 4]

forqapp: ``forq_serve --no-ui --no-jobs`` with ``FORQ_SQS_ADDR`` (2 granian workers, SQLite file in
a temporary directory, migrated first). moto: ``moto_server`` on another port (in memory). Each
round, for each target in alternating order, on a fresh queue:

* ``SendMessageBatch``: ``--messages`` messages of 100 bytes in batches of 10, by ``--clients``
  threads, each with its own boto3 client;
* ``ReceiveMessage`` (10 at a time, ``WaitTimeSeconds=1``) + ``DeleteMessageBatch`` of what came,
  by the same number of threads, until every message was received: messages per second, and the
  deliveries of a message already received while its lease (``VisibilityTimeout`` 300 s) ran
  (duplicates: there should be none).

moto's per-request cost grows with the queue's depth (it scans its messages), so its figures fall
quickly with ``--messages``; the default keeps a round of moto within a minute or two.

The table shows each figure's median over the rounds and forqapp's ratio to moto.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import httpx
from botocore.config import Config

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench-secret-0123456789abcdef-0123456789"  # noqa: S105 - a throwaway server's key
BODY = "x" * 100
LEASE_S = 300  # the queues' VisibilityTimeout: longer than any round, so a redelivery is a duplicate


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited: {proc.stdout.read() if proc.stdout else ''}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.2)
    raise SystemExit(f"{what} did not start")


def start_forqapp(tmp: Path) -> tuple[str, subprocess.Popen]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", "FORQ_AUTH_SECRET": SECRET,
           "FORQ_DB_PATH": str(tmp / "forq.sqlite3"), "PYTHONPATH": str(ROOT),
           "FORQ_API_ADDR": f"127.0.0.1:{free_port()}", "PROMETHEUS_MULTIPROC_DIR": str(tmp / "metrics")}
    (tmp / "metrics").mkdir()
    port = free_port()
    env["FORQ_SQS_ADDR"] = f"127.0.0.1:{port}"
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v0"], env=env, cwd=ROOT, check=True)
    proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "forq_serve", "--no-ui", "--no-jobs"],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wait_up(url, proc, "forq_serve")
    return url, proc


def start_moto() -> tuple[str, subprocess.Popen]:
    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wait_up(url, proc, "moto_server")
    return url, proc


def make_client(url: str, key_id: str, secret: str):
    return boto3.session.Session().client(
        "sqs", endpoint_url=url, region_name="us-east-1", aws_access_key_id=key_id, aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 2, "mode": "standard"}, max_pool_connections=4))


def run_round(url: str, key_id: str, secret: str, name: str, messages: int, clients: int) -> dict[str, float]:
    admin = make_client(url, key_id, secret)
    queue_url = admin.create_queue(QueueName=name, Attributes={"VisibilityTimeout": str(LEASE_S)})["QueueUrl"]
    per_thread = [make_client(url, key_id, secret) for _ in range(clients)]
    batches = [[{"Id": str(i), "MessageBody": BODY} for i in range(10)] for _ in range(messages // 10)]
    sent = 0
    lock = threading.Lock()

    def send(index: int) -> None:
        nonlocal sent
        client = per_thread[index % clients]
        answer = client.send_message_batch(QueueUrl=queue_url, Entries=batches[index])
        if answer.get("Failed"):
            raise RuntimeError(answer["Failed"])
        with lock:
            sent += len(answer["Successful"])

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(send, range(len(batches))))
    send_s = time.perf_counter() - start

    seen: dict[str, float] = {}  # message id -> when it was first received
    duplicates = 0

    def drain(index: int) -> None:
        nonlocal duplicates
        client = per_thread[index]
        while True:
            with lock:
                if len(seen) >= sent:
                    return
            got = client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                         MessageSystemAttributeNames=["ApproximateReceiveCount"])
            batch = got.get("Messages", [])
            if not batch:
                continue
            now = time.monotonic()
            with lock:
                for m in batch:
                    first = seen.setdefault(m["MessageId"], now)
                    if first != now and now - first < LEASE_S:  # again while its lease ran: a duplicate
                        duplicates += 1
                        print(f"  {m['MessageId']} received again {now - first:.1f} s after its first "
                              f"delivery, within its {LEASE_S} s lease ({m.get('Attributes')})", flush=True)
            answer = client.delete_message_batch(QueueUrl=queue_url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)])
            if answer.get("Failed"):
                raise RuntimeError(answer["Failed"])

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(drain, range(clients)))
    drain_s = time.perf_counter() - start
    admin.delete_queue(QueueUrl=queue_url)
    if len(seen) != sent:
        raise RuntimeError(f"{name}: sent {sent}, received {len(seen)} distinct")
    return {"send": sent / send_s, "receive+delete": sent / drain_s, "duplicates": duplicates}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sqs-bench-"))
    procs = []
    try:
        forq_url, proc = start_forqapp(tmp)
        procs.append(proc)
        moto_url, proc = start_moto()
        procs.append(proc)
        targets = {"forqapp": (forq_url, "forq-root", SECRET), "moto": (moto_url, "testing", "testing")}
        results: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
        for r in range(args.rounds):
            order = list(targets) if r % 2 == 0 else list(reversed(targets))
            for name in order:
                url, key_id, secret = targets[name]
                figures = run_round(url, key_id, secret, f"bench-{r}", args.messages, args.clients)
                results[name].append(figures)
                print(f"round {r + 1} {name}: send {figures['send']:,.0f}/s, receive+delete "
                      f"{figures['receive+delete']:,.0f}/s, {figures['duplicates']} duplicate deliveries", flush=True)
        print(f"\n{args.messages} messages of 100 B, {args.clients} boto3 clients, median of {args.rounds} rounds\n")
        print("| workload | forqapp (msg/s) | moto server (msg/s) | forqapp / moto |")
        print("| --- | --- | --- | --- |")
        for workload, label in (("send", "SendMessageBatch (10 a call)"),
                                ("receive+delete", "ReceiveMessage (10) + DeleteMessageBatch")):
            forq = statistics.median(f[workload] for f in results["forqapp"])
            moto = statistics.median(f[workload] for f in results["moto"])
            print(f"| {label} | {forq:,.0f} | {moto:,.0f} | {forq / moto:.2f} |")
        print("| duplicate deliveries (all rounds) | "
              f"{sum(f['duplicates'] for f in results['forqapp']):.0f} | "
              f"{sum(f['duplicates'] for f in results['moto']):.0f} | |")
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
            if proc.stdout:
                proc.stdout.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
