"""The rehearsal's client host: producers and consumers over HTTP v1, v2 and SQS, against every API
host it is given (each thread starts on one and moves to the next on a failure), a health checker
per API host, then a drain. Run inside the client's network namespace by :mod:`bench.rehearsal.run`:

    python -m bench.rehearsal.client CONFIG.json RESULT.json

CONFIG: {"apis": ["10.89.1.1", …], "secret": …, "seconds": 40, "producers": 2, "consumers": 1,
"drain_s": 30, "stop_file": path}. RESULT: per protocol, what was acknowledged and delivered (with
times), the client errors, and the health checks' answers (time, host, status, seconds taken).
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import sys
import threading
import time
from collections import defaultdict
from typing import Any

TIMEOUT_S = 10.0
PROTOCOLS = ("v1", "v2", "sqs", "work")


class Api:
    """A keep-alive HTTP connection to one API host at a time; ``move()`` goes to the next."""

    def __init__(self, hosts: list[str], start: int, secret: str, port: int = 8080):
        self.hosts, self.i, self.secret, self.port = hosts, start % len(hosts), secret, port
        self.conn: http.client.HTTPConnection | None = None

    def move(self) -> None:
        self.close()
        self.i = (self.i + 1) % len(self.hosts)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.hosts[self.i], self.port, timeout=TIMEOUT_S)
        data = None if body is None else json.dumps(body).encode()
        all_headers = {"X-API-Key": self.secret, "Content-Type": "application/json", **(headers or {})}
        try:
            self.conn.request(method, path, body=data, headers=all_headers)
            response = self.conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        except BaseException:
            self.close()
            raise


class Run:
    def __init__(self, config: dict[str, Any]):
        self.config = config
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.lock = threading.Lock()
        self.acked: dict[str, dict[str, float]] = defaultdict(dict)      # protocol → content → time
        self.delivered: dict[str, list[tuple[str, float]]] = defaultdict(list)
        self.consumed_acked: dict[str, dict[str, float]] = defaultdict(dict)  # ack answered 204/ok
        self.after_ack: dict[str, list[str]] = defaultdict(list)
        self.errors: dict[str, list[tuple[float, str]]] = defaultdict(list)
        self.health: list[tuple[float, str, int, float]] = []
        self.due: dict[str, float] = {}  # delayed v2 messages: when they were meant to be due

    def error(self, protocol: str, what: str) -> None:
        with self.lock:
            self.errors[protocol].append((time.time(), what[:200]))

    def got(self, protocol: str, content: str) -> None:
        now = time.time()
        with self.lock:
            if content in self.consumed_acked[protocol]:
                self.after_ack[protocol].append(content)
            self.delivered[protocol].append((content, now))

    def settled(self, protocol: str, content: str) -> None:
        with self.lock:
            self.consumed_acked[protocol][content] = time.time()

    # -- producers ----------------------------------------------------------------------------

    def produce(self, protocol: str, n: int) -> None:
        api = Api(self.config["apis"], n, self.config["secret"])
        sqs = None
        for seq in itertools.count():
            if self.stop_producing.is_set():
                break
            content = f"{protocol}-{n}-{seq}"
            try:
                if protocol == "sqs":
                    sqs = sqs or self.sqs_client(api.hosts[api.i])
                    sqs.send_message(QueueUrl=self.queue_url(api.hosts[api.i]), MessageBody=content)
                    ok = True
                elif protocol == "v1":
                    status, _, answer = api.request("POST", "/api/v1/queues/rh-v1/messages", {"content": content})
                    ok = status == 204
                else:
                    queue = "rh-v2" if protocol == "v2" else "rh-work"
                    body: dict[str, Any] = {"content": content}
                    delayed = protocol == "v2" and seq % 10 == 0  # due 2 s after it is sent
                    if delayed:
                        body["delay"] = 2
                        due = time.time() + 2
                    status, _, answer = api.request("POST", f"/api/v2/queues/{queue}/messages", body)
                    ok = status == 201
                    if ok and delayed:
                        with self.lock:
                            self.due[content] = due
                if not ok:
                    self.error(protocol, f"produce {status} {answer[:80]!r}")
            except Exception as exc:  # noqa: BLE001 - every failure is counted, then the next host
                self.error(protocol, f"produce {type(exc).__name__}: {exc}")
                ok = False
            if ok:
                with self.lock:
                    self.acked[protocol][content] = time.time()
            else:
                api.move()
                sqs = None
                time.sleep(0.2)

    # -- consumers ----------------------------------------------------------------------------

    def consume_v1(self, n: int) -> None:
        api = Api(self.config["apis"], n, self.config["secret"])
        while not self.stop_consuming.is_set():
            try:
                status, headers, body = api.request("GET", "/api/v1/queues/rh-v1/messages")
                if status == 204:
                    continue
                if status != 200:
                    raise RuntimeError(f"receive {status} {body[:80]!r}")
                message = json.loads(body)
                self.got("v1", message["content"])
                status, _, body = api.request("POST", f"/api/v1/queues/rh-v1/messages/{message['id']}/ack",
                                              headers={"X-Forq-Receipt": headers["x-forq-receipt"]})
                if status == 204:
                    self.settled("v1", message["content"])
                else:
                    raise RuntimeError(f"ack {status} {body[:80]!r}")
            except Exception as exc:  # noqa: BLE001
                self.error("v1", f"consume {type(exc).__name__}: {exc}")
                api.move()
                time.sleep(0.2)

    def consume_v2(self, n: int) -> None:
        api = Api(self.config["apis"], n, self.config["secret"])
        while not self.stop_consuming.is_set():
            try:
                status, _, body = api.request("POST", "/api/v2/queues/rh-v2/receive", {"max_messages": 10, "wait": 1})
                if status != 200:
                    raise RuntimeError(f"receive {status} {body[:80]!r}")
                messages = json.loads(body)["messages"]
                if not messages:
                    continue
                for m in messages:
                    self.got("v2", m["content"])
                status, _, body = api.request("POST", "/api/v2/queues/rh-v2/messages/ack", {
                    "entries": [{"id": m["id"], "receipt": m["receipt"]} for m in messages]})
                if status != 200:
                    raise RuntimeError(f"ack {status} {body[:80]!r}")
                for entry in json.loads(body)["successful"]:
                    self.settled("v2", messages[entry["index"]]["content"])
            except Exception as exc:  # noqa: BLE001
                self.error("v2", f"consume {type(exc).__name__}: {exc}")
                api.move()
                time.sleep(0.2)

    def sqs_client(self, host: str) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client("sqs", endpoint_url=f"http://{host}:9324", region_name="us-east-1",
                            aws_access_key_id="forq-root", aws_secret_access_key=self.config["secret"],
                            config=Config(retries={"max_attempts": 0}, connect_timeout=TIMEOUT_S,
                                          read_timeout=TIMEOUT_S))

    @staticmethod
    def queue_url(host: str) -> str:
        return f"http://{host}:9324/000000000000/rh-sqs"

    def consume_sqs(self, n: int) -> None:
        hosts = self.config["apis"]
        i = n % len(hosts)
        client = None
        while not self.stop_consuming.is_set():
            try:
                client = client or self.sqs_client(hosts[i])
                url = self.queue_url(hosts[i])
                answer = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
                for m in answer.get("Messages", []):
                    self.got("sqs", m["Body"])
                    client.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
                    self.settled("sqs", m["Body"])
            except Exception as exc:  # noqa: BLE001
                self.error("sqs", f"consume {type(exc).__name__}: {exc}")
                i, client = (i + 1) % len(hosts), None
                time.sleep(0.2)

    # -- health -------------------------------------------------------------------------------

    def check_health(self, host: str) -> None:
        while not self.stop_consuming.is_set():
            started = time.time()
            try:
                conn = http.client.HTTPConnection(host, 8080, timeout=TIMEOUT_S)
                conn.request("GET", "/healthcheck")
                status = conn.getresponse().status
                conn.close()
            except Exception:  # noqa: BLE001 - no answer at all (0)
                status = 0
            took = time.time() - started
            with self.lock:
                self.health.append((started, host, status, round(took, 3)))
            time.sleep(max(0.0, 0.5 - took))

    # -- the run ------------------------------------------------------------------------------

    def setup(self) -> None:
        api = Api(self.config["apis"], 0, self.config["secret"])
        for queue in ("rh-v1", "rh-v2", "rh-sqs", "rh-work", "rh-tasks-default"):
            for _ in range(60):  # the hosts may still be starting
                try:
                    status, _, body = api.request("PATCH", f"/api/v2/queues/{queue}",
                                                  {"visibility_timeout": self.config.get("visibility_s", 5)})
                    if status == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.5)
            else:
                raise SystemExit(f"could not set up the queue {queue}")

    def main(self) -> dict[str, Any]:
        self.setup()
        started = time.time()
        c = self.config
        producers = [threading.Thread(target=self.produce, args=(p, n), daemon=True)
                     for p in PROTOCOLS for n in range(c.get("producers", 2))]
        consumers = [threading.Thread(target=fn, args=(n,), daemon=True)
                     for fn in (self.consume_v1, self.consume_v2, self.consume_sqs) for n in range(c.get("consumers", 1))]
        health = [threading.Thread(target=self.check_health, args=(h,), daemon=True) for h in c["apis"]]
        for t in producers + consumers + health:
            t.start()
        ready = c.get("ready_file")
        if ready:
            open(ready, "w").close()
        deadline = started + c["seconds"]
        while time.time() < deadline and not os.path.exists(c.get("stop_file", "/nonexistent")):
            time.sleep(0.1)
        self.stop_producing.set()
        produced_until = time.time()
        for t in producers:
            t.join(TIMEOUT_S * 2)
        drain_until = time.time() + c.get("drain_s", 30)
        while time.time() < drain_until:  # until every acknowledged produce was consumed
            with self.lock:
                missing = sum(len(set(self.acked[p]) - {m for m, _ in self.delivered[p]}) for p in ("v1", "v2", "sqs"))
            if not missing:
                break
            time.sleep(0.2)
        self.stop_consuming.set()
        for t in consumers + health:
            t.join(TIMEOUT_S * 2)
        return {"started": started, "produced_until": produced_until, "acked": self.acked,
                "delivered": self.delivered, "after_ack": self.after_ack, "errors": self.errors,
                "health": self.health, "due": self.due}


if __name__ == "__main__":
    config = json.loads(open(sys.argv[1]).read())
    result = Run(config).main()
    with open(sys.argv[2], "w") as f:
        json.dump(result, f)
