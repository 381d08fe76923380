"""forqapp's settings: one declaration (forqapp/conf.py), read on access, checked with ids. (The
docs' settings reference is generated from the same declaration: tests/test_docs.py.)"""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ImproperlyConfigured

from forqapp import conf
from forqapp.checks import check_configuration, serve_problems
from forqapp.conf import SETTINGS, forq_settings

from .conftest import ROOT


def test_every_forq_setting_read_in_forqapp_is_declared():
    names = set()
    for path in (ROOT / "forqapp").rglob("*.py"):
        if "spark" not in path.parts:
            names |= set(re.findall(r"forq_settings\.(FORQ_[A-Z0-9_]+)", path.read_text()))
    assert names <= set(SETTINGS)
    with pytest.raises(AttributeError, match="unknown forqapp setting"):
        forq_settings.FORQ_NO_SUCH_THING  # noqa: B018


def test_values_are_read_on_access_and_given_as_their_type(settings):
    assert forq_settings.FORQ_LONG_POLL_SECONDS == 30.0
    settings.FORQ_LONG_POLL_SECONDS = 2
    assert forq_settings.FORQ_LONG_POLL_SECONDS == 2.0 and isinstance(forq_settings.FORQ_LONG_POLL_SECONDS, float)
    settings.FORQ_BACKOFF_MS = [0, 10]
    assert forq_settings.FORQ_BACKOFF_MS == (0, 10)
    del settings.FORQ_UI_URLCONF
    assert forq_settings.FORQ_UI_URLCONF is None
    settings.FORQ_JOB_INTERVALS = None
    assert forq_settings.FORQ_JOB_INTERVALS == {}


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("FORQ_BACKOFF_MS", (), "FORQ_BACKOFF_MS must be a non-empty list of integers >= 0"),
        ("FORQ_MAX_ATTEMPTS", 0, "FORQ_MAX_ATTEMPTS must be an integer >= 1 (got 0)"),
        ("FORQ_UI_ENABLED", "yes", "FORQ_UI_ENABLED must be True or False"),
        ("FORQ_JOB_INTERVALS", {"nope": 1}, "FORQ_JOB_INTERVALS: no job 'nope'"),
        ("FORQ_JOB_INTERVALS", {"stale": 0}, "FORQ_JOB_INTERVALS['stale'] must be a number of seconds > 0"),
        ("FORQ_UI_COLD_WAIT_MS", "fast", "FORQ_UI_COLD_WAIT_MS must be a number >= 0 or None"),
        ("FORQ_API_ADDR", "nowhere", "FORQ_API_ADDR: 'nowhere' is not host:port"),
        ("FORQ_DB_THREADS", 0, "FORQ_DB_THREADS must be an integer >= 1 or None (got 0)"),
    ],
)
def test_a_bad_value_is_a_check_with_an_id_a_reason_not_to_serve_and_an_error_on_access(
        settings, name, value, expected):
    setattr(settings, name, value)
    (error,) = [e for e in check_configuration() if e.id == "forqapp.E010"]
    assert error.msg.startswith(expected), error.msg
    assert any(p.startswith(expected) for p in serve_problems())
    with pytest.raises(ImproperlyConfigured, match=re.escape(expected)):
        getattr(forq_settings, name)


def test_empty_backoff_no_longer_crashes_a_nack_late(settings):
    """FORQ_BACKOFF_MS = () once raised IndexError at the first nack; now the checks name it."""
    settings.FORQ_BACKOFF_MS = ()
    assert ("forqapp.E010", "FORQ_BACKOFF_MS must be a non-empty list of integers >= 0 (milliseconds; got ())") \
        in conf.problems()


def test_serve_jobs_falls_back_to_the_environment(settings, monkeypatch):
    if hasattr(settings, "FORQ_SERVE_JOBS"):
        del settings.FORQ_SERVE_JOBS
    monkeypatch.delenv("FORQ_SERVE_JOBS", raising=False)
    assert forq_settings.FORQ_SERVE_JOBS is True
    monkeypatch.setenv("FORQ_SERVE_JOBS", "false")
    assert forq_settings.FORQ_SERVE_JOBS is False
    monkeypatch.setenv("FORQ_SERVE_JOBS", "maybe")
    assert "FORQ_SERVE_JOBS='maybe' is not a boolean (use true or false)" in serve_problems()
    settings.FORQ_SERVE_JOBS = True  # settings win
    assert forq_settings.FORQ_SERVE_JOBS is True


def test_listener_addresses_fall_back_to_the_environment(settings, monkeypatch):
    """In a user's own project (no mapping of the environment in settings.py), Forq's variables
    still choose forq_serve's ports."""
    for name in ("FORQ_API_ADDR", "FORQ_UI_ADDR"):
        if hasattr(settings, name):
            delattr(settings, name)
    monkeypatch.setenv("FORQ_API_ADDR", "127.0.0.1:8090")
    monkeypatch.setenv("FORQ_UI_ADDR", ":8091")
    assert (forq_settings.FORQ_API_ADDR, forq_settings.FORQ_UI_ADDR) == ("127.0.0.1:8090", ":8091")
    settings.FORQ_API_ADDR = "localhost:9000"  # settings win
    assert forq_settings.FORQ_API_ADDR == "localhost:9000"


def test_the_demo_project_reads_the_api_key_throttle_from_the_environment():
    """A client test suite run against ``make run`` checks wrong keys on purpose: the throttle's
    settings come from the environment there as the other demo-project settings do."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORQ_", "DJANGO_", "DATABASE_URL"))}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", FORQ_AUTH_SECRET="x" * 32, FORQ_AUTH_MAX_FAILURES="50",
               FORQ_AUTH_FAILURE_WINDOW_S="10", FORQ_AUTH_BLOCK_S="5", FORQ_DB_PATH=":memory:")
    code = ("import django; django.setup(); from forqapp.conf import forq_settings as s; "
            "print(s.FORQ_AUTH_MAX_FAILURES, s.FORQ_AUTH_FAILURE_WINDOW_S, s.FORQ_AUTH_BLOCK_S)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout.split()) == (0, ["50", "10", "5"]), out.stderr
