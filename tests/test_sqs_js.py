"""The AWS SDKs for JavaScript against the SQS endpoint, as their users call them: v3
(``@aws-sdk/client-sqs``, the JSON protocol), today's v2 (``aws-sdk`` 2.1693, JSON) and an older v2
(2.1450, the query protocol with XML answers). Each script (``tests/js``) creates standard, FIFO and
dead-letter queues, sends with attributes and delays, long-polls, changes visibilities, deletes,
purges, tags, and checks the SDK's own error classes, codes and statuses and every MD5 it is given;
it prints ``ok`` when every assertion holds. ``scripts/ensure-js-deps.sh`` installs the SDKs
(``npm ci``); without Node.js these tests skip."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import SECRET, sqs_listener

JS = Path(__file__).parent / "js"

pytestmark = pytest.mark.django_db(transaction=True)

CLIENTS = {
    "v3, JSON protocol": ("sqs-v3.mjs", {}),
    "v2, JSON protocol": ("sqs-v2.js", {"AWS_SDK_MODULE": "aws-sdk"}),
    "v2 2.1450, query protocol": ("sqs-v2.js", {"AWS_SDK_MODULE": "aws-sdk-query"}),
}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_the_javascript_sdks_work_as_against_aws(client, django_db_blocker):
    node = shutil.which("node")
    if node is None or not (JS / "node_modules" / ".forq-lock.sha").exists():
        pytest.skip("the AWS SDKs for JavaScript are not installed (scripts/ensure-js-deps.sh: Node.js and npm)")
    script, extra = CLIENTS[client]
    # A server each: every script checks a wrong secret and an unknown key, which count toward the
    # address's failed-authentication throttle (5 a minute).
    with sqs_listener(django_db_blocker) as (url, _api):
        env = {**os.environ, **extra, "FORQ_AUTH_SECRET": SECRET, "NODE_NO_WARNINGS": "1",
               "AWS_REGION": "eu-west-3", "SQS_ACCOUNT_ID": "000000000000"}
        run = subprocess.run([node, script, url], cwd=JS, env=env, capture_output=True, text=True, timeout=180)
    failed = [line for line in run.stdout.splitlines() if "FAIL" in line]
    assert (run.returncode, failed) == (0, []), run.stdout[-4000:] + run.stderr[-2000:]
    assert run.stdout.splitlines()[-1] == "ok"
    assert run.stdout.count("pass:") > 100  # (it ran its assertions, not an early exit)
