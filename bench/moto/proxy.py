"""A proxy that lets moto's own SQS tests (server mode) run against forqapp's SQS endpoint.

moto's tests, run with ``TEST_SERVER_MODE=true``, send every boto3 call to one endpoint and expect
two things of it that are not SQS: ``POST /moto-api/reset`` before each test (a fresh account) and
an STS ``GetCallerIdentity`` (their ``account_id`` fixture). They sign with moto's dummy
credentials. This proxy, listening on the endpoint moto's tests are given:

- answers ``POST /moto-api/reset`` by deleting every queue on forqapp (ListQueues, then DeleteQueue
  each), and ``/moto-api/reset-auth`` with moto's answer;
- answers STS ``GetCallerIdentity`` itself, with the account id forqapp is configured with
  (``FORQ_SQS_ACCOUNT_ID``, which the harness sets to moto's ``123456789012``);
- re-signs every other request with SigV4 for forqapp's root key (``forq-root`` and
  ``FORQ_AUTH_SECRET``), for the region and service the client signed for, keeping the client's
  ``Host`` header (so that queue URLs are built on the proxy's address, as moto's server builds
  them on its own), and forwards it to forqapp's SQS listener unchanged otherwise.

Usage: ``python bench/moto/proxy.py LISTEN_PORT FORQAPP_SQS_URL`` with ``FORQ_AUTH_SECRET`` set.
It needs botocore (the moto venv's). ``bench/moto/run.sh`` starts it; see there.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ACCOUNT = os.environ.get("FORQ_SQS_ACCOUNT_ID", "123456789012")
CREDENTIALS = Credentials("forq-root", os.environ["FORQ_AUTH_SECRET"])
SCOPE = re.compile(r"Credential=[^/]+/\d{8}/([^/]+)/([^/]+)/aws4_request")
DROPPED = {"authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256",
           "connection", "keep-alive", "transfer-encoding", "proxy-connection"}
STS_ANSWER = f"""<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <GetCallerIdentityResult>
    <Arn>arn:aws:sts::{ACCOUNT}:user/moto</Arn><UserId>AKIAIOSFODNN7EXAMPLE</UserId><Account>{ACCOUNT}</Account>
  </GetCallerIdentityResult>
  <ResponseMetadata><RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId></ResponseMetadata>
</GetCallerIdentityResponse>""".encode()


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: urllib.parse.SplitResult

    def log_message(self, format, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self):
        self._handle()

    def do_POST(self):
        self._handle()

    def _handle(self) -> None:
        body = self._body()
        if self.path.startswith("/moto-api/reset-auth"):
            return self._answer(200, json.dumps({"PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT": float("inf")}).encode(),
                                "application/json")
        if self.path.startswith("/moto-api/reset"):
            reset(self.headers.get("Host") or "localhost")
            return self._answer(200, b'{"status": "ok"}', "application/json")
        scope = SCOPE.search(self.headers.get("Authorization") or "")
        region, service = scope.groups() if scope else ("us-east-1", "sqs")
        if service == "sts" or b"Action=GetCallerIdentity" in body:
            return self._answer(200, STS_ANSWER, "text/xml")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in DROPPED}
        status, answer_headers, answer = forward(self.command, self.path, headers, body, region, service)
        self.send_response(status)
        for name, value in answer_headers:
            if name.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


def forward(method: str, path: str, headers: dict[str, str], body: bytes, region: str, service: str = "sqs"):
    url = f"{Proxy.upstream.scheme}://{Proxy.upstream.netloc}{path}"
    headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
    headers["Content-Length"] = str(len(body))
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(CREDENTIALS, service, region).add_auth(request)
    connection = http.client.HTTPConnection(Proxy.upstream.hostname, Proxy.upstream.port, timeout=60)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in request.headers.items():
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, response.getheaders(), response.read()
    finally:
        connection.close()


def call(host: str, action: str, params: dict) -> dict:
    headers = {"Host": host, "Content-Type": "application/x-amz-json-1.0",
               "X-Amz-Target": f"AmazonSQS.{action}"}
    status, _, answer = forward("POST", "/", headers, json.dumps(params).encode(), "us-east-1")
    if status != 200 and b"QueueDoesNotExist" not in answer:
        raise RuntimeError(f"{action}: {status} {answer!r}")
    return json.loads(answer or b"{}")


def reset(host: str) -> None:
    """Every queue on forqapp deleted (moto's reset: a fresh account for the next test)."""
    token = None
    while True:
        page = call(host, "ListQueues", {"MaxResults": 1000, **({"NextToken": token} if token else {})})
        for url in page.get("QueueUrls", []):
            call(host, "DeleteQueue", {"QueueUrl": url})
        token = page.get("NextToken")
        if not token:
            break


def main() -> None:
    port, upstream = int(sys.argv[1]), sys.argv[2]
    Proxy.upstream = urllib.parse.urlsplit(upstream)
    server = ThreadingHTTPServer(("127.0.0.1", port), Proxy)
    server.daemon_threads = True
    print(f"moto proxy on http://127.0.0.1:{port} -> {upstream}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
