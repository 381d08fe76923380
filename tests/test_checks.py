from forqapp.checks import check_configuration, check_ui_requirements


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

    assert url_database("postgres://u@h/db", prepare_threshold=None)["OPTIONS"] == {"prepare_threshold": None}
    assert url_database("postgres://u@h/db")["OPTIONS"] == {"prepare_threshold": 5}
    assert "prepare_threshold" not in url_database("mysql://u@h/db").get("OPTIONS", {})
    assert url_database("sqlite:////tmp/x.sqlite3")["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
