import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from forqapp.checks import (
    check_configuration,
    check_consumers,
    check_secrets,
    check_setting_names,
    check_ui_requirements,
    serve_problems,
)
from forqapp.conf import forq_settings


def test_ui_requirements_are_checked(settings):
    assert check_ui_requirements() == []
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "django_htmx"]
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if "htmx" not in m]
    assert [e.id for e in check_ui_requirements()] == ["forqapp.E030", "forqapp.E031"]


def test_configuration_errors_have_ids(settings):
    settings.FORQ_QUEUE_TTL_HOURS = 0
    settings.FORQ_ENV = "prod"
    assert {e.id for e in check_configuration()} >= {"forqapp.E003", "forqapp.E004"}


def test_the_database_checks_come_from_its_store(monkeypatch):
    from forqapp import store
    from forqapp.store import sqlite

    monkeypatch.setattr(sqlite.sqlite3, "sqlite_version_info", (3, 31, 1))
    ids = {e.id for e in check_configuration()}
    assert ("forqapp.E005" in ids) == (store.for_alias("default").vendor == "sqlite")
    monkeypatch.setattr(store, "_stores", {})
    monkeypatch.setattr(store, "CLASSES", {})
    assert "forqapp.E006" in {e.id for e in check_configuration()}  # no store for this database


def test_connection_options_are_given_to_their_engine_only():
    from forqapp.envconfig import url_database

    assert url_database("postgres://u@h/db", prepare_threshold=None)["OPTIONS"] == {"prepare_threshold": None,
                                                                                   "connect_timeout": 10}
    assert url_database("postgres://u@h/db")["OPTIONS"] == {"prepare_threshold": 5, "connect_timeout": 10}
    assert "prepare_threshold" not in url_database("mysql://u@h/db").get("OPTIONS", {})
    assert url_database("sqlite:////tmp/x.sqlite3")["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


# --- secrets: settings first, then the environment; deploy checks that say where to set them ---

SECRET = "s" * 32


@pytest.fixture
def no_secrets(settings, monkeypatch):
    """A user's project: neither settings.py nor the environment holds a secret."""
    for name in ("FORQ_AUTH_SECRET", "FORQ_METRICS_AUTH_SECRET"):
        if hasattr(settings, name):
            delattr(settings, name)
        monkeypatch.delenv(name, raising=False)
    return settings


def test_secrets_fall_back_to_the_environment_and_settings_win(no_secrets, monkeypatch):
    assert forq_settings.FORQ_AUTH_SECRET == ""
    monkeypatch.setenv("FORQ_AUTH_SECRET", "from-env-" + SECRET)
    monkeypatch.setenv("FORQ_METRICS_AUTH_SECRET", "metrics-env-" + SECRET)
    assert forq_settings.FORQ_AUTH_SECRET == "from-env-" + SECRET
    assert forq_settings.FORQ_METRICS_AUTH_SECRET == "metrics-env-" + SECRET
    no_secrets.FORQ_AUTH_SECRET = "from-settings-" + SECRET
    assert forq_settings.FORQ_AUTH_SECRET == "from-settings-" + SECRET
    assert forq_settings.FORQ_METRICS_AUTH_SECRET == "metrics-env-" + SECRET
    no_secrets.FORQ_AUTH_SECRET = ""  # the demo project's "unset": the environment still counts
    assert forq_settings.FORQ_AUTH_SECRET == "from-env-" + SECRET


@pytest.mark.django_db(transaction=True)
def test_the_api_accepts_a_key_exported_only_in_the_environment(no_secrets, monkeypatch, client):
    def produce():
        return client.post("/api/v1/queues/q/messages", '{"content": "x"}', content_type="application/json",
                           headers={"X-API-Key": SECRET}).status_code

    assert produce() == 401
    monkeypatch.setenv("FORQ_AUTH_SECRET", SECRET)
    assert produce() == 204


def test_missing_or_short_secrets_are_deploy_checks_that_say_where_to_set_them(no_secrets, monkeypatch):
    assert not [e for e in run_checks() if e.id in ("forqapp.E001", "forqapp.E002")]  # not without --deploy
    (missing,) = [e for e in run_checks(include_deployment_checks=True) if e.id.startswith("forqapp.E00")]
    assert missing.id == "forqapp.E001"
    assert "FORQ_AUTH_SECRET is not set" in missing.msg
    assert "settings.py" in missing.msg and "environment" in missing.msg
    with pytest.raises(SystemCheckError, match=r"forqapp\.E001"):
        call_command("check", "--deploy")
    monkeypatch.setenv("FORQ_AUTH_SECRET", "short")
    no_secrets.FORQ_METRICS_ENABLED = True
    assert [(e.id, e.msg.split(":")[0]) for e in check_secrets()] == [
        ("forqapp.E001", "FORQ_AUTH_SECRET is too short (5 characters; at least 32)"),
        ("forqapp.E002", "FORQ_METRICS_AUTH_SECRET must be set when FORQ_METRICS_ENABLED is true; it is not set "
                         "(at least 32 characters)"),
    ]
    assert any("FORQ_AUTH_SECRET is too short" in p for p in serve_problems())  # forq_serve refuses
    monkeypatch.setenv("FORQ_AUTH_SECRET", SECRET)
    monkeypatch.setenv("FORQ_METRICS_AUTH_SECRET", SECRET)
    assert check_secrets() == []
    # A short value in the settings wins over the environment's: exporting another would not help.
    no_secrets.FORQ_AUTH_SECRET = "short"
    (short,) = check_secrets()
    assert short.msg.startswith("FORQ_AUTH_SECRET is too short (5 characters; at least 32): change "
                                "FORQ_AUTH_SECRET in your settings (a value there wins over the environment's)"), short.msg


# --- FORQ_CONSUMERS: every dotted path is imported by the check --------------------------------

def test_bad_consumer_paths_are_a_check_one_line_each(settings):
    settings.FORQ_CONSUMERS = {
        "good": "tests.test_consumers.handler_from_settings",
        "emails": "myapp.jobs.send_email",
        "typo": {"handler": "tests.test_consumers.no_such_handler", "decode": "json"},
        "bad name!": "tests.test_consumers.handler_from_settings",
        "xml": {"handler": "tests.test_consumers.handler_from_settings", "decode": "xml"},
    }
    problems = check_consumers()
    assert {e.id for e in problems} == {"forqapp.E040"}
    assert [e.msg.split(":")[0] for e in problems] == [
        "FORQ_CONSUMERS['emails']", "FORQ_CONSUMERS['typo']", "FORQ_CONSUMERS['bad name!']",
        "FORQ_CONSUMERS['xml']",
    ]
    assert "cannot import 'myapp.jobs.send_email'" in problems[0].msg and "\n" not in problems[0].msg
    with pytest.raises(SystemCheckError, match=r"forqapp\.E040"):
        call_command("check")
    settings.FORQ_CONSUMERS = {"good": "tests.test_consumers.handler_from_settings"}
    assert check_consumers() == []


def test_a_misspelt_forq_setting_is_a_warning_naming_the_one_meant(settings):
    settings.FORQ_MAX_ATTEMPT = 3
    settings.FORQ_VISIBLITY_TIMEOUT_MS = 1000
    settings.FORQ_DB_PATH = "var/x.sqlite3"  # a project's own name, far from every setting: left alone
    warnings = {w.msg: w.hint for w in check_setting_names()}
    assert warnings == {"FORQ_MAX_ATTEMPT is not a forqapp setting: it is ignored": "did you mean FORQ_MAX_ATTEMPTS?",
                        "FORQ_VISIBLITY_TIMEOUT_MS is not a forqapp setting: it is ignored":
                            "did you mean FORQ_VISIBILITY_TIMEOUT_MS?"}
    assert {w.id for w in run_checks()} >= {"forqapp.W011"}
    del settings.FORQ_MAX_ATTEMPT, settings.FORQ_VISIBLITY_TIMEOUT_MS
    assert check_setting_names() == []


def test_a_consumer_that_cannot_run_is_a_check(monkeypatch, settings):
    """forq_worker's own refusals, reported by manage.py check before any worker starts (E041)."""
    from forqapp.worker import consumers

    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["default"],
                                  "OPTIONS": {"queue_prefix": "tasks-"}}}
    consumers.register("tasks-default", lambda message: None)
    try:
        problems = [(p.id, p.msg) for p in check_consumers()]
        assert len(problems) == 1 and problems[0][0] == "forqapp.E041" and "tasks-default" in problems[0][1]
    finally:
        consumers.unregister("tasks-default")
    assert check_consumers() == []

    def bad_module(name):  # an app's consumers.py with @forqapp.consumer("bad name!")
        consumers.consumer("bad name!")(lambda message: None)

    monkeypatch.setattr(consumers, "_discovered", False)
    monkeypatch.setattr(consumers, "autodiscover_modules", bad_module)
    assert [(p.id, p.msg) for p in check_consumers()] == [
        ("forqapp.E041", "forqapp consumer: invalid queue name 'bad name!'")]


# --- the migrate to run, named for the queue's database ------------------------------------------

@pytest.mark.sqlite_only
def test_an_unmigrated_queue_database_of_its_own_names_the_migrate_that_fills_it(settings, tmp_path, django_db_blocker):
    """FORQ_DATABASE = "queue": a plain ``migrate`` leaves that database alone, so the one-line
    reason forq_worker, forq_jobs and forq_serve give names ``--database queue``."""
    from django.db import connections

    from forqapp.server.schema import database_problem, migrate_command

    connections.settings["queue"] = {**connections.settings["default"], "NAME": str(tmp_path / "queue.sqlite3")}
    try:
        django_db_blocker.unblock()
        assert migrate_command() == "manage.py migrate"  # the default alias
        settings.FORQ_DATABASE = "queue"
        assert migrate_command() == "manage.py migrate --database queue"
        assert database_problem() == "the database has no forqapp tables: run manage.py migrate --database queue"
        with connections["queue"].cursor() as cursor:  # tables from an older forqapp
            cursor.execute("CREATE TABLE messages (id TEXT)")
        assert database_problem() is not None and database_problem().endswith(
            "): run manage.py migrate --database queue")
    finally:
        connections["queue"].close()
        django_db_blocker.restore()
        del connections.settings["queue"]
        if hasattr(connections._connections, "queue"):
            delattr(connections._connections, "queue")
