"""The demo project behind a proxy that terminates TLS: ``DJANGO_SECURE_PROXY_SSL_HEADER`` and
``DJANGO_USE_X_FORWARDED_HOST`` map onto Django's settings (README, "Deploying behind a proxy")."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT, subprocess_env

PROBE = """
import json
import django
django.setup()
from django.conf import settings
from django.test import RequestFactory
from forqapp.envconfig import ERRORS
request = RequestFactory().get("/", HTTP_X_FORWARDED_PROTO="https", HTTP_X_FORWARDED_HOST="queue.example.com")
print(json.dumps({"header": settings.SECURE_PROXY_SSL_HEADER, "secure": request.is_secure(),
                  "host": request.get_host() if settings.USE_X_FORWARDED_HOST else None, "errors": ERRORS}))
"""


def _probe(**env: str) -> dict:
    env = subprocess_env(DJANGO_ALLOWED_HOSTS="*", **env)
    result = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_proxy_header_makes_forwarded_https_requests_secure():
    assert _probe() == {"header": None, "secure": False, "host": None, "errors": []}  # by default: not trusted
    behind = _probe(DJANGO_SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto: https", DJANGO_USE_X_FORWARDED_HOST="true")
    assert behind == {"header": ["HTTP_X_FORWARDED_PROTO", "https"], "secure": True, "host": "queue.example.com",
                      "errors": []}


def test_a_malformed_proxy_header_is_a_configuration_error():
    found = _probe(DJANGO_SECURE_PROXY_SSL_HEADER="https")
    assert found["header"] is None and found["errors"] == [
        "DJANGO_SECURE_PROXY_SSL_HEADER='https' is not 'Header-Name: value' (e.g. 'X-Forwarded-Proto: https')"]
