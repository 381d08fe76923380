"""Shared fixtures. Tests that need a live server use ``live_api`` (a real ``forq_serve`` API
listener in a subprocess, on a file database shared with the test process)."""

from __future__ import annotations

import pytest

from forqapp.api.auth import throttle


@pytest.fixture(autouse=True)
def _reset_throttle():
    throttle.reset()
    yield
    throttle.reset()
