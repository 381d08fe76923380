"""The scaling measure's producer, in the client host: v2 sends to ``bench-sink`` over keep-alive
connections, ``connections`` per API host, for ``seconds``; prints {"sent", "errors", "seconds"}.

    python -m bench.rehearsal.blast '{"apis": ["10.89.1.1"], "secret": "…", "seconds": 10, "connections": 4}'
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time


def main(config: dict) -> dict:
    sent, errors = [0], [0]
    lock = threading.Lock()
    stop = time.monotonic() + config["seconds"]
    body = json.dumps({"content": "x" * 100}).encode()
    headers = {"X-API-Key": config["secret"], "Content-Type": "application/json"}

    def run(host: str) -> None:
        conn = http.client.HTTPConnection(host, 8080, timeout=10)
        n = e = 0
        while time.monotonic() < stop:
            try:
                conn.request("POST", "/api/v2/queues/bench-sink/messages", body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                if response.status == 201:
                    n += 1
                else:
                    e += 1
            except OSError:
                e += 1
                conn.close()
                conn = http.client.HTTPConnection(host, 8080, timeout=10)
        with lock:
            sent[0] += n
            errors[0] += e

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(h,)) for h in config["apis"] for _ in range(config["connections"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"sent": sent[0], "errors": errors[0], "seconds": time.monotonic() - started}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
