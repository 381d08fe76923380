"""System checks (``manage.py check``): configuration that would make forqapp misbehave.

Every id, so it can be looked up and silenced (``SILENCED_SYSTEM_CHECKS``):

* ``forqapp.E001`` ``FORQ_AUTH_SECRET`` missing or shorter than 32 characters, ``forqapp.E002``
  the same for ``FORQ_METRICS_AUTH_SECRET`` with metrics on. Deploy checks (``manage.py check
  --deploy``): a development project migrates and runs its tests without them, while
  ``forq_serve`` refuses to start without them.
* ``forqapp.E003`` a TTL (``FORQ_QUEUE_TTL_HOURS``, ``FORQ_DLQ_TTL_HOURS``) that is not an
  integer >= 1; ``forqapp.E004`` ``FORQ_ENV`` neither ``local`` nor ``pro``.
* ``forqapp.E005`` SQLite older than 3.35 (no ``RETURNING``; the store's own check);
  ``forqapp.E006`` a database forqapp has no store for.
* ``forqapp.E010`` any other ``FORQ_*`` setting with a value of the wrong type or range (each
  setting's check is declared with it in :mod:`forqapp.conf`).
* ``forqapp.E020`` an environment variable the demo project could not read
  (:mod:`forqapp.envconfig`).
* ``forqapp.E030`` / ``E031`` django-htmx's app / middleware missing (the UI needs them);
  ``forqapp.E032`` a ``FORQ_UI_URLCONF`` that does not import.
* ``forqapp.E040`` a ``FORQ_CONSUMERS`` entry that does not import (one per entry);
  ``forqapp.E041`` a ``@forqapp.consumer`` that cannot run (a bad queue name, two for one queue,
  one on a task queue).
* ``forqapp.E050`` / ``E051`` a ``FORQ_QUEUES`` / ``FORQ_SCHEDULES`` entry that is not a valid
  policy / schedule.
* ``forqapp.W010`` ``SECURE_REFERRER_POLICY = "no-referrer"``, which breaks the admin's forms.
* ``forqapp.W011`` a ``FORQ_*`` setting forqapp does not know, close to one it does (a typo).

``forq_serve`` runs the same checks as one-line reasons not to start (:func:`serve_problems`).
"""

from __future__ import annotations

from importlib import import_module
from importlib.util import find_spec

from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured

from . import conf, store
from .conf import SETTINGS, parse_addr
from .envconfig import ERRORS
from .errors import ForqError
from .tasks.discovery import backend_problems, with_consumers
from .worker.consumers import registry, settings_consumers

__all__ = ["parse_addr", "serve_problems"]  # parse_addr: forq_serve's, from forqapp.conf

MIN_SECRET = 32


@register(Tags.security, deploy=False)
def check_configuration(app_configs=None, **kwargs):
    """Every setting's declared check (E003, E004, E010), the environment's errors (E020) and the
    database's (E005, E006)."""
    problems = [Error(msg, id="forqapp.E020") for msg in ERRORS]
    problems += [Error(msg, id=check_id) for check_id, msg in conf.problems()]
    problems.extend(database_problems())
    return problems


def database_problems() -> list[CheckMessage]:
    """The configured database's own checks (its store's :meth:`~forqapp.store.Store.check`:
    e.g. SQLite older than 3.35 has no RETURNING, forqapp.E005), or forqapp.E006 when forqapp has
    no store for it. Connects to nothing."""
    try:
        st = store.for_alias(SETTINGS["FORQ_DATABASE"].raw())
    except NotImplementedError as exc:
        return [Error(str(exc), id="forqapp.E006")]
    return list(st.check())


def _secret_problem(name: str) -> str | None:
    """What is wrong with the secret ``name`` ("not set", "too short: …"), or None when it is fine."""
    secret = SETTINGS[name].raw()
    if not secret:
        return f"not set (at least {MIN_SECRET} characters)"
    if not isinstance(secret, str):
        return f"not a string (got {type(secret).__name__})"
    if len(secret) < MIN_SECRET:
        return f"too short ({len(secret)} characters; at least {MIN_SECRET})"
    return None


def _where(name: str) -> str:
    """Where to set ``name``: a value in the settings wins over the environment's (forqapp.conf
    reads the environment only for a setting the settings leave unset or empty)."""
    from django.conf import settings

    if getattr(settings, name, None):
        return f"change {name} in your settings (a value there wins over the environment's)"
    return f"set {name} in settings.py or export it in the environment"


@register(Tags.security, deploy=True)
def check_secrets(app_configs=None, **kwargs):
    """The API key (E001) and, with metrics on, the metrics key (E002)."""
    problems = []
    if reason := _secret_problem("FORQ_AUTH_SECRET"):
        problems.append(Error(
            f"FORQ_AUTH_SECRET is {reason}: {_where('FORQ_AUTH_SECRET')} (the API key clients send in "
            "X-API-Key)", id="forqapp.E001"))
    if SETTINGS["FORQ_METRICS_ENABLED"].raw() and (reason := _secret_problem("FORQ_METRICS_AUTH_SECRET")):
        problems.append(Error(
            f"FORQ_METRICS_AUTH_SECRET must be set when FORQ_METRICS_ENABLED is true; it is {reason}: "
            + _where("FORQ_METRICS_AUTH_SECRET"), id="forqapp.E002"))
    return problems


@register()
def check_setting_names(app_configs=None, **kwargs):
    """A ``FORQ_*`` setting forqapp does not know, close to one it does (a typo, which would
    otherwise be ignored without a word): forqapp.W011 with the name meant. Names far from every
    setting are left alone (a project's own, such as the demo's ``FORQ_DB_PATH``)."""
    from difflib import get_close_matches

    from django.conf import settings

    problems = []
    for name in dir(settings):
        if name.startswith("FORQ_") and name not in SETTINGS:
            meant = get_close_matches(name, SETTINGS, n=1, cutoff=0.8)
            if meant:
                problems.append(Warning(f"{name} is not a forqapp setting: it is ignored",
                                        hint=f"did you mean {meant[0]}?", id="forqapp.W011"))
    return problems


@register()
def check_consumers(app_configs=None, **kwargs):
    """FORQ_CONSUMERS: every dotted path imports (one error per bad entry, forqapp.E040). Then the
    apps' ``consumers`` modules, as ``forq_worker`` loads them: a ``@forqapp.consumer`` with a bad
    queue name, two for one queue, one on a task queue (forqapp.E041) — ``forq_worker`` alone
    said so before, when it started."""
    problems = [Error(message, id="forqapp.E040") for message in settings_consumers()[1]]
    if problems:
        return problems  # loading the consumers would only say the same again
    try:
        with_consumers(registry())
    except ImproperlyConfigured as exc:
        problems.append(Error(str(exc), id="forqapp.E041"))
    except ForqError:
        pass  # a TASKS backend's queue: its own check says so (forqapp.E060)
    return problems


# Django 6 registers its check of every task backend when django.tasks is first imported, which
# may be in the middle of `manage.py check` (a URLconf importing a module with @task): too late for
# that run, whose list of checks is already made. Imported here, while apps load, it is in the list.
if find_spec("django.tasks") is not None:
    import_module("django.tasks")


@register()
def check_task_backends(app_configs=None, **kwargs):
    """TASKS: each forqapp.tasks.ForqBackend's check() (forqapp.E060–E064, W065) where no one else runs it
    (Django 5.2 without the django_tasks app; see forqapp/tasks/discovery.py)."""
    return backend_problems()


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


def ui_urlconf_problems() -> list[CheckMessage]:
    """``FORQ_UI_URLCONF`` names a module that imports (forqapp.E032): the UI listener serves it."""
    name = conf.forq_settings.FORQ_UI_URLCONF
    if not name:
        return []
    try:
        import_module(name)
    except Exception as exc:  # noqa: BLE001 - whatever stops the import, reported in one line
        return [Error(f"FORQ_UI_URLCONF {name!r} does not import ({type(exc).__name__}: {exc})",
                      hint="name the module of the UI listener's URLconf (admin and UI pages), e.g. "
                           "'mysite.urls_ui', or leave it unset to serve ROOT_URLCONF", id="forqapp.E032")]
    return []


@register()
def check_ui_urlconf(app_configs=None, **kwargs):
    return ui_urlconf_problems()


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
    """What stops the server from starting, one line each (checked by ``forq_serve``): the same
    checks as ``manage.py check --deploy`` reports for forqapp's settings, secrets and the UI's
    URLconf."""
    return ([e.msg for e in check_configuration()] + [e.msg for e in check_secrets()]
            + [e.msg for e in ui_urlconf_problems()])
