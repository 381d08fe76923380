"""forq_serve: refuses bad configuration in one line, drains long polls on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from .conftest import ROOT, start_server, stop_server, subprocess_env


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"FORQ_AUTH_SECRET": ""}, "FORQ_AUTH_SECRET is not set"),
        ({"FORQ_AUTH_SECRET": "short"}, "FORQ_AUTH_SECRET is too short"),
        ({"FORQ_QUEUE_TTL_HOURS": "abc"}, "FORQ_QUEUE_TTL_HOURS='abc' is not an integer"),
        ({"FORQ_DLQ_TTL_HOURS": "0"}, "FORQ_DLQ_TTL_HOURS must be an integer >= 1"),
        ({"FORQ_METRICS_ENABLED": "maybe"}, "FORQ_METRICS_ENABLED='maybe' is not a boolean"),
        ({"FORQ_METRICS_ENABLED": "true", "FORQ_METRICS_AUTH_SECRET": ""}, "FORQ_METRICS_AUTH_SECRET must be set"),
        ({"FORQ_API_ADDR": "nowhere"}, "FORQ_API_ADDR: 'nowhere' is not host:port"),
        ({"FORQ_ENV": "staging"}, "FORQ_ENV must be 'local' or 'pro'"),
    ],
)
@pytest.mark.django_db(transaction=True)
def test_bad_configuration_stops_start_up_in_one_line(env, expected):
    result = subprocess.run([sys.executable, str(ROOT / "manage.py"), "forq_serve"], cwd=ROOT, timeout=60,
                            env=subprocess_env(**env), capture_output=True, text=True)
    assert result.returncode != 0
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.django_db(transaction=True)
def test_sigterm_ends_waiting_long_polls_and_exits_cleanly():
    api = start_server({"FORQ_LONG_POLL_SECONDS": "30"})
    try:
        result = {}

        def poll():
            result["status"] = api.consume("idle").status_code

        thread = threading.Thread(target=poll)
        thread.start()
        time.sleep(0.5)
        start = time.monotonic()
        api.proc.send_signal(signal.SIGTERM)
        api.proc.wait(20)
        thread.join(5)
        assert time.monotonic() - start < 5
        assert result["status"] == 204
        assert api.proc.returncode == 0
    finally:
        stop_server(api)
