"""forq_serve: refuses bad configuration in one line, drains long polls on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from django.db import connection

from .conftest import ROOT, start_server, stop_server, subprocess_env


def _serve_fails(**env) -> str:
    result = subprocess.run([sys.executable, str(ROOT / "manage.py"), "forq_serve"], cwd=ROOT, timeout=60,
                            env=subprocess_env(**env), capture_output=True, text=True)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "listening" not in result.stdout  # nothing announced that is not serving
    return result.stderr


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
        ({"FORQ_API_WORKERS": "0"}, "FORQ_API_WORKERS must be an integer >= 1"),
    ],
)
@pytest.mark.django_db(transaction=True)
def test_bad_configuration_stops_start_up_in_one_line(env, expected):
    assert expected in _serve_fails(**env)


@pytest.mark.parametrize("busy", ["FORQ_API_ADDR", "FORQ_UI_ADDR"])
@pytest.mark.django_db(transaction=True)
def test_a_port_in_use_stops_start_up_in_one_line(busy):
    with socket.socket() as taken, socket.socket() as free:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        free.bind(("127.0.0.1", 0))
        ports = {busy: taken.getsockname()[1]}
        ports["FORQ_UI_ADDR" if busy == "FORQ_API_ADDR" else "FORQ_API_ADDR"] = free.getsockname()[1]
        free.close()
        stderr = _serve_fails(**{name: f"127.0.0.1:{port}" for name, port in ports.items()})
    assert f"{busy} 127.0.0.1:{ports[busy]} cannot be listened on (Address already in use)" in stderr


@pytest.mark.django_db(transaction=True)
def test_a_database_directory_that_cannot_exist_stops_start_up_in_one_line():
    if connection.vendor != "sqlite":
        pytest.skip("FORQ_DB_PATH is the SQLite file")
    stderr = _serve_fails(FORQ_DB_PATH="/proc/forq-none/queue.sqlite3")
    assert "the SQLite file's directory /proc/forq-none does not exist (FORQ_DB_PATH)" in stderr


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
