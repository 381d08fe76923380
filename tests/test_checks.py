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
