"""What keeps ``forq_serve``'s memory down (bench/memory_bench.py measures it): a server on SQLite
loads no PostgreSQL driver, no kombu and no cryptography; the UI served inside the API worker closes
the database connections of each request's thread (the API's threads keep theirs); the supervisor
gives its children ``MALLOC_ARENA_MAX=2``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from django.db import connections
from django.http import HttpResponse
from django.urls import path

from forqapp.server import embedded, serving
from forqapp.ui.asgi import BoundedASGIHandler

from .conftest import ROOT, subprocess_env

HEAVY = ("psycopg", "kombu", "cryptography")


@pytest.mark.sqlite_only  # (its own processes on SQLite, DATABASE_URL dropped)
def test_a_server_process_on_sqlite_loads_no_postgresql_driver_kombu_or_cryptography(tmp_path):
    """psycopg (~19 MB PSS per process), kombu (~11 MB) and cryptography (~6 MB) were imported by
    every process that loaded forqapp: by its checks, its Celery alias and its key sealing."""
    code = ("import json, sys, django; django.setup(); "
            "from forqapp.api.asgi import api_application; from forqapp.ui.asgi import embedded_ui_application; "
            "api_application(); embedded_ui_application(); import forqapp.celery; "
            f"print(json.dumps([[m for m in {HEAVY!r} if m in sys.modules], forqapp.celery.register()]))")
    env = subprocess_env(DATABASE_URL="", FORQ_DB_PATH=str(tmp_path / "memory.sqlite3"))
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    loaded, registered = json.loads(result.stdout)
    assert loaded == [] and registered is True, result.stdout


def test_the_forq_alias_is_there_once_kombu_transport_is_imported_later():
    """Registered before kombu was imported (as ``forq_serve``'s processes do), the alias is added
    as ``kombu.transport`` loads: Celery finds ``forq://``."""
    code = ("import sys, django; django.setup(); import forqapp.celery; assert 'kombu.transport' not in sys.modules; "
            "assert forqapp.celery.register() is True; assert 'kombu' not in sys.modules; "
            "from kombu.transport import TRANSPORT_ALIASES, resolve_transport; "
            "print(TRANSPORT_ALIASES['forq'], resolve_transport('forq').__module__)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=subprocess_env(), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["forqapp.celery.transport:Transport", "forqapp.celery.transport"]


# --- the UI's connections, when it shares the API worker ---------------------------------------------

opened: list = []


def _a_page(request):
    connections["default"].ensure_connection()
    opened.append(connections["default"])  # this thread's connection object
    return HttpResponse("ok")


urlpatterns = [path("page/", _a_page)]


async def _get(application) -> int:
    scope = {"type": "http", "method": "GET", "path": "/page/", "raw_path": b"/page/", "query_string": b"",
             "headers": [(b"host", b"testserver")], "client": ("127.0.0.1", 1), "server": ("testserver", 80),
             "scheme": "http", "root_path": "", "http_version": "1.1", "asgi": {"version": "3.0"}}
    sent: list[dict] = []
    inbox = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive():
        if inbox:
            return inbox.pop()
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    await application(scope, receive, send)
    return sent[0]["status"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("close", [True, False])
def test_the_ui_in_the_api_worker_closes_each_requests_connections(close, settings):
    """Django's ASGI handler runs each request's code in a thread of its own: a connection left
    open there stays open (on PostgreSQL, one more slot per request). The UI process of its own sets
    CONN_MAX_AGE to 0 for that; inside the API worker, whose threads keep theirs, the handler closes
    the request thread's connections once it has answered."""
    settings.DATABASES["default"]["CONN_MAX_AGE"] = None  # persistent, as the API's
    opened.clear()
    application = BoundedASGIHandler(2, urlconf=__name__, close_connections=close)
    assert asyncio.run(_get(application)) == 200
    assert len(opened) == 1 and opened[0] is not connections["default"]  # another thread's
    assert (opened[0].connection is None) is close
    if not close:
        opened[0].inc_thread_sharing()  # (closed from this thread)
        opened[0].close()


def test_the_default_server_serves_the_ui_in_its_api_worker_and_limits_malloc_arenas(monkeypatch, settings):
    """One API worker and one UI worker (SQLite's defaults): no UI process of its own, its listener
    announced once the API worker serves it; more workers: the UI in its own granian as before."""
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    settings.FORQ_METRICS_ENABLED = False  # (no var/prometheus lock taken by this test process)
    where = {"API": ("FORQ_API_ADDR", ("127.0.0.1", 8080)), "UI": ("FORQ_UI_ADDR", ("127.0.0.1", 8081))}
    spec, env = serving.Server(where, api_workers=1, ui_workers=1).spec(ROOT / "var" / "draining")
    assert [c["name"] for c in spec["children"]] == ["API"]
    (listener,) = json.loads(spec["children"][0]["env"][embedded.EMBEDDED_ENV])
    assert listener["target"] == "forqapp.ui.asgi:embedded_ui_application" and listener["port"] == 8081
    assert {(li["name"], li["child"]) for li in spec["listeners"]} == {("API", "API"), ("UI", "API")}
    assert env["MALLOC_ARENA_MAX"] == "2"
    spec, _ = serving.Server(where, api_workers=2, ui_workers=1).spec(ROOT / "var" / "draining")
    assert [c["name"] for c in spec["children"]] == ["API", "UI"]
    assert embedded.EMBEDDED_ENV not in spec["children"][0]["env"]
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert serving.server_environment()["MALLOC_ARENA_MAX"] == "8"  # a value given wins
