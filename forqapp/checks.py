"""System checks (``manage.py check``): configuration that would make forqapp misbehave.

Ids: forqapp.E001 … (errors stop ``forq_serve``), forqapp.W001 … (warnings).
"""

from __future__ import annotations

from django.core.checks import CheckMessage, Error, Tags, register

from .conf import forq_settings

MIN_SECRET = 32


@register(Tags.security, deploy=False)
def check_configuration(app_configs=None, **kwargs):
    from .envconfig import ERRORS

    problems = [Error(msg, id="forqapp.E020") for msg in ERRORS]
    ttl_names = ("FORQ_QUEUE_TTL_HOURS", "FORQ_DLQ_TTL_HOURS")
    for name in ttl_names:
        value = getattr(forq_settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(Error(f"{name} must be an integer >= 1 (got {value!r})", id="forqapp.E003"))
    if forq_settings.FORQ_ENV not in ("local", "pro"):
        problems.append(Error(f"FORQ_ENV must be 'local' or 'pro' (got {forq_settings.FORQ_ENV!r})",
                              id="forqapp.E004"))
    problems.extend(database_problems())
    return problems


def database_problems() -> list[CheckMessage]:
    """The configured database's own checks (its store's :meth:`~forqapp.store.Store.check`:
    e.g. SQLite older than 3.35 has no RETURNING, forqapp.E005), or forqapp.E006 when forqapp has
    no store for it. Connects to nothing."""
    from . import store

    try:
        st = store.for_alias(forq_settings.FORQ_DATABASE)
    except NotImplementedError as exc:
        return [Error(str(exc), id="forqapp.E006")]
    return list(st.check())


@register()
def check_ui_requirements(app_configs=None, **kwargs):
    """The UI pages use django-htmx: its app (template tags, the htmx script) and middleware."""
    from django.conf import settings

    problems = []
    if "django_htmx" not in settings.INSTALLED_APPS:
        problems.append(Error("forqapp's UI needs django-htmx: add 'django_htmx' to INSTALLED_APPS",
                              id="forqapp.E030"))
    if "django_htmx.middleware.HtmxMiddleware" not in settings.MIDDLEWARE:
        problems.append(Error("forqapp's UI needs 'django_htmx.middleware.HtmxMiddleware' in MIDDLEWARE "
                              "(after AuthenticationMiddleware)", id="forqapp.E031"))
    return problems


def serve_problems() -> list[str]:
    """What stops the server from starting, one line each (checked by ``forq_serve``)."""
    problems = [e.msg for e in check_configuration()]
    secret = forq_settings.FORQ_AUTH_SECRET
    if not secret:
        problems.append("FORQ_AUTH_SECRET is not set (the API key clients send in X-API-Key; 32+ characters)")
    elif len(secret) < MIN_SECRET:
        problems.append(f"FORQ_AUTH_SECRET is too short ({len(secret)} characters; at least {MIN_SECRET})")
    if forq_settings.FORQ_METRICS_ENABLED:
        msecret = forq_settings.FORQ_METRICS_AUTH_SECRET
        if len(msecret or "") < MIN_SECRET:
            problems.append(f"FORQ_METRICS_AUTH_SECRET must be set, at least {MIN_SECRET} characters, "
                            "when FORQ_METRICS_ENABLED is true")
    for name in ("FORQ_API_ADDR", "FORQ_UI_ADDR"):
        try:
            parse_addr(getattr(forq_settings, name))
        except ValueError as exc:
            problems.append(f"{name}: {exc}")
    for name in ("FORQ_API_WORKERS", "FORQ_UI_WORKERS"):
        value = getattr(forq_settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{name} must be an integer >= 1 (got {value!r})")
    return problems


def parse_addr(value: str) -> tuple[str, int]:
    """``host:port`` (Forq's form; ``:8080`` means every interface) → (host, port)."""
    host, sep, port = str(value).rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not host:port")
    host = host.strip("[]") or "0.0.0.0"  # noqa: S104 - Forq's ":8080" means every interface
    return ("127.0.0.1" if host == "localhost" else host), int(port)
