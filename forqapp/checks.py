"""System checks (``manage.py check``): configuration that would make forqapp misbehave.

Ids: forqapp.E001 … (errors stop ``forq_serve``), forqapp.W001 … (warnings). The secrets
(forqapp.E001, E002) are deploy checks (``manage.py check --deploy``): a development project
migrates and runs its tests without one, while ``forq_serve`` refuses to start without it.
"""

from __future__ import annotations

from django.core.checks import CheckMessage, Error, Tags, Warning, register

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


def _secret_problem(name: str) -> str | None:
    """What is wrong with the secret ``name`` ("not set", "too short: …"), or None when it is fine."""
    secret = getattr(forq_settings, name)
    if not secret:
        return f"not set (at least {MIN_SECRET} characters)"
    if not isinstance(secret, str):
        return f"not a string (got {type(secret).__name__})"
    if len(secret) < MIN_SECRET:
        return f"too short ({len(secret)} characters; at least {MIN_SECRET})"
    return None


def _where(name: str) -> str:
    # A user's project has no envconfig mapping: both places work (forqapp.conf reads the environment).
    return f"set {name} in settings.py or export it in the environment"


@register(Tags.security, deploy=True)
def check_secrets(app_configs=None, **kwargs):
    """The API key (E001) and, with metrics on, the metrics key (E002)."""
    problems = []
    if reason := _secret_problem("FORQ_AUTH_SECRET"):
        problems.append(Error(
            f"FORQ_AUTH_SECRET is {reason}: {_where('FORQ_AUTH_SECRET')} (the API key clients send in "
            "X-API-Key)", id="forqapp.E001"))
    if forq_settings.FORQ_METRICS_ENABLED and (reason := _secret_problem("FORQ_METRICS_AUTH_SECRET")):
        problems.append(Error(
            f"FORQ_METRICS_AUTH_SECRET must be set when FORQ_METRICS_ENABLED is true; it is {reason}: "
            + _where("FORQ_METRICS_AUTH_SECRET"), id="forqapp.E002"))
    return problems


@register()
def check_consumers(app_configs=None, **kwargs):
    """FORQ_CONSUMERS: every dotted path imports (one error per bad entry, forqapp.E040)."""
    from .consumers import settings_consumers

    return [Error(message, id="forqapp.E040") for message in settings_consumers()[1]]


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


@register(Tags.security)
def check_referrer_policy(app_configs=None, **kwargs):
    """``SECURE_REFERRER_POLICY = "no-referrer"`` breaks the admin and the UI's login in browsers:
    their form posts then carry ``Origin: null``, which Django's CSRF check refuses (403). The HTMX
    pages set ``same-origin`` themselves; Django's admin cannot."""
    from django.conf import settings

    if "django.middleware.security.SecurityMiddleware" not in settings.MIDDLEWARE:
        return []  # the setting is not applied
    policy = settings.SECURE_REFERRER_POLICY or ""
    tokens = [t.strip() for t in policy.split(",")] if isinstance(policy, str) else list(policy)
    if tokens and tokens[-1] == "no-referrer":  # browsers apply the last policy they know
        return [Warning(
            'SECURE_REFERRER_POLICY "no-referrer" makes browsers send "Origin: null" on form posts, so '
            "Django's CSRF check refuses the admin's login and actions (403)",
            hint='Use "same-origin" (Django\'s default): the URL still never leaves the site.',
            id="forqapp.W010",
        )]
    return []


def serve_problems() -> list[str]:
    """What stops the server from starting, one line each (checked by ``forq_serve``)."""
    problems = [e.msg for e in check_configuration()] + [e.msg for e in check_secrets()]
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
