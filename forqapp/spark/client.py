"""A small HTTP client of forqapp's API for Spark executors: stdlib only (``http.client``), one
keep-alive connection per client, Nagle off (small requests would otherwise wait ~40 ms for a
delayed ACK). No Django here: this runs on executors that have no Django settings."""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any
from urllib.parse import quote, urlencode, urlsplit


class ForqClientError(Exception):
    """The server refused a request (``status`` and Forq's error ``code``) or could not be reached."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


class _NoDelayHTTPConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _NoDelayHTTPSConnection(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class ForqClient:
    """forqapp's bulk API over one keep-alive connection. Not thread-safe (one per task)."""

    def __init__(self, url: str, api_key: str, timeout: float = 300.0, retries: int = 3):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must be http(s)://host[:port][/prefix], not {url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._api_key = api_key
        self._timeout = timeout
        self._retries = retries
        self._conn: http.client.HTTPConnection | None = None

    # --- plumbing ----------------------------------------------------------------------------

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> ForqClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = _NoDelayHTTPSConnection if self._https else _NoDelayHTTPConnection
            self._conn = cls(self._host, self._port, timeout=self._timeout)
        return self._conn

    def request(self, method: str, path: str, body: Any = None, *, idempotent: bool = True) -> Any:
        """Send one request; JSON in and out. Connection failures are retried (with a fresh
        connection) only for idempotent requests: a write that may have landed is never sent twice."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        return self._send(method, path, data, idempotent)

    def _send(self, method: str, path: str, data: bytes | None, idempotent: bool) -> Any:
        headers = {"X-API-Key": self._api_key, "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        attempt = 0
        while True:
            attempt += 1
            reused = self._conn is not None
            try:
                conn = self._connection()
                try:
                    conn.request(method, self._prefix + path, body=data, headers=headers)
                except (BrokenPipeError, ConnectionResetError):
                    # The server may have answered before the body was all sent (a 413 on the
                    # Content-Length) and closed: that answer is still readable. If there is none,
                    # the failure below is raised (the body was not all sent: nothing was written).
                    if data is None:
                        raise
                response = conn.getresponse()
                payload = response.read()
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                # A keep-alive connection the server closed (it drops idle ones after ~30 s: a
                # writer whose input paused) fails on reuse before anything was processed: sent
                # again once on a fresh one. Other failures are retried for idempotent requests only.
                stale = reused and isinstance(exc, http.client.RemoteDisconnected | BrokenPipeError |
                                              ConnectionResetError)
                if (idempotent and attempt <= self._retries) or (stale and attempt == 1):
                    time.sleep(min(0.1 * 2 ** attempt, 2.0))
                    continue
                raise ForqClientError(f"{method} {path}: cannot reach forqapp at {self._host}: {exc}") from exc
            if response.will_close:
                self.close()
            if response.status >= 400:
                code = None
                try:
                    code = json.loads(payload).get("code")
                except (ValueError, AttributeError):
                    pass
                raise ForqClientError(f"{method} {path}: HTTP {response.status} {code or ''}".strip(),
                                      response.status, code)
            if response.status == 204 or not payload:
                return None
            return json.loads(payload)

    @staticmethod
    def _q(queue: str) -> str:
        return quote(queue, safe="")

    # --- the API -------------------------------------------------------------------------------

    def healthcheck(self) -> bool:
        try:
            self.request("GET", "/healthcheck")
            return True
        except ForqClientError:
            return False

    def send_batch(self, queue: str, messages: list[dict]) -> list[str]:
        return self.request("POST", f"/api/v1/queues/{self._q(queue)}/messages/batch",
                            {"messages": messages}, idempotent=False)["ids"]

    def stage(self, queue: str, token: str, messages: list[dict]) -> int:
        return self.request("POST", f"/api/v1/queues/{self._q(queue)}/staged/{token}",
                            {"messages": messages}, idempotent=False)["staged"]

    def stage_raw(self, queue: str, token: str, body: bytes) -> int:
        """Like :meth:`stage`, with the JSON body already encoded (the writer's hot path)."""
        return self._raw("POST", f"/api/v1/queues/{self._q(queue)}/staged/{token}", body)["staged"]

    def send_batch_raw(self, queue: str, body: bytes) -> int:
        """Like :meth:`send_batch`, with the JSON body already encoded; returns how many."""
        return len(self._raw("POST", f"/api/v1/queues/{self._q(queue)}/messages/batch", body)["ids"])

    def _raw(self, method: str, path: str, data: bytes) -> Any:
        """A write with its JSON body already encoded: not retried, but on a stale connection."""
        return self._send(method, path, data, idempotent=False)

    def publish(self, staged: list[tuple[str, str]]) -> int:
        # Publishing twice publishes nothing more: safe to retry.
        body = {"staged": [{"token": t, "queue": q} for t, q in staged]}
        return self.request("POST", "/api/v1/staged/publish", body)["published"]

    def publish_batch(self, staged: list[tuple[str, str]], queue: str, sink: str, batch_id: int) -> int | None:
        """Publish a streaming query's micro-batch ``batch_id`` (query ``sink``, into ``queue``):
        how many rows, or None when that query published this batch (or a later one) before (a
        replay: nothing is published, the staged rows are dropped). Safe to retry."""
        body = {"staged": [{"token": t, "queue": q} for t, q in staged],
                "sink": {"queue": queue, "id": sink, "batch": batch_id}}
        answer = self.request("POST", "/api/v1/staged/publish", body)
        return None if answer.get("replayed") else answer["published"]

    def discard(self, staged: list[tuple[str, str]]) -> int:
        body = {"staged": [{"token": t, "queue": q} for t, q in staged]}
        return self.request("POST", "/api/v1/staged/discard", body)["discarded"]

    def claim(self, queue: str, max_messages: int, wait: float = 0) -> list[dict]:
        return self.claim_throttled(queue, max_messages, wait)[0]

    def claim_throttled(self, queue: str, max_messages: int, wait: float = 0) -> tuple[list[dict], str | None]:
        """Claimed messages, and why the queue's policy held the claim back (``"concurrency"``:
        its max_in_flight; ``"rate"``), or None (a server from before says None)."""
        # Not retried: a claim that landed but whose answer was lost would hide messages until
        # their lease runs out (they come back then; nothing is lost).
        body = {"max": max_messages, "wait": wait}
        answer = self.request("POST", f"/api/v1/queues/{self._q(queue)}/messages/claim", body, idempotent=False)
        return answer["messages"], answer.get("throttled")

    def ack(self, queue: str, deliveries: list[tuple[str, str]]) -> int:
        body = {"deliveries": [{"id": i, "receipt": r} for i, r in deliveries]}
        return self.request("POST", f"/api/v1/queues/{self._q(queue)}/messages/ack", body)["acked"]

    def release(self, queue: str, deliveries: list[tuple[str, str]]) -> int:
        body = {"deliveries": [{"id": i, "receipt": r} for i, r in deliveries]}
        return self.request("POST", f"/api/v1/queues/{self._q(queue)}/messages/release", body)["released"]

    def end_leases(self, queue: str, deliveries: list[tuple[str, str]]) -> int:
        """End the leases of [(id, receipt)] now, keeping their receipts (v2's change-visibility to
        0, 10 a request): the messages can be received at once, and their receipts still ack or
        release them until someone does. Ending a lease twice ends it once: retried."""
        ended = 0
        for i in range(0, len(deliveries), 10):
            body = {"entries": [{"id": m, "receipt": str(r)} for m, r in deliveries[i:i + 10]], "visibility_timeout": 0}
            ended += len(self.request("POST", f"/api/v2/queues/{self._q(queue)}/messages/change-visibility",
                                      body)["successful"])
        return ended

    def snapshot_bounds(self, queue: str) -> dict:
        return self.request("GET", f"/api/v1/queues/{self._q(queue)}/snapshot/bounds")

    def snapshot_page(self, queue: str, after: str = "", upto: str | None = None,
                      limit: int = 1000) -> tuple[list[dict], str | None]:
        params: dict[str, int | str] = {"limit": limit}
        if after:
            params["after"] = after
        if upto:
            params["upto"] = upto
        page = self.request("GET", f"/api/v1/queues/{self._q(queue)}/snapshot?{urlencode(params)}")
        return page["messages"], page["next"]

    def snapshot_columns(self, queue: str, after: str = "", upto: str | None = None,
                         limit: int = 1000) -> tuple[dict[str, list], str | None]:
        """One snapshot page as columns ``{name: [values]}`` (the reader's hot path)."""
        params = {"limit": limit, "format": "columns"}
        if after:
            params["after"] = after
        if upto:
            params["upto"] = upto
        page = self.request("GET", f"/api/v1/queues/{self._q(queue)}/snapshot?{urlencode(params)}")
        return page["columns"], page["next"]
