"""What ``forq_serve``'s UI listener serves, decided once for the supervisor and the UI processes:
where the static files come from, and the URLs that work (to announce them).

Static files: when ``collectstatic`` has filled ``STATIC_ROOT``, granian serves them from disk. In
a project that never collected them (a fresh ``startproject`` has no ``STATIC_ROOT``), the UI
application serves them itself through Django's staticfiles finders
(``ASGIStaticFilesHandler``, the same lookup ``runserver`` does): forqapp's CSS, htmx from
django-htmx and the admin's files, without a collect step or another dependency. A few small files
for staff on the UI listener, answered with ``Last-Modified`` (browsers revalidate with 304).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from django.apps import apps
from django.conf import settings
from django.urls import NoReverseMatch, reverse


def collected_static_root() -> Path | None:
    """``STATIC_ROOT`` if ``collectstatic`` put forqapp's files there, else None."""
    root = getattr(settings, "STATIC_ROOT", None)
    if root and (Path(root) / "forqapp" / "forq.css").is_file():
        return Path(root)
    return None


def static_from_finders() -> bool:
    """Whether the UI application serves the static files itself (not collected, staticfiles
    installed, and ``STATIC_URL`` a path of this server rather than another host's URL)."""
    return (
        collected_static_root() is None
        and apps.is_installed("django.contrib.staticfiles")
        and bool(settings.STATIC_URL)
        and not urlparse(str(settings.STATIC_URL)).netloc
    )


def ui_urlconf() -> str:
    """The urlconf the UI listener serves: ``FORQ_UI_URLCONF`` (the demo project's
    ``project.urls_ui``: pages at ``/``), else the project's own (``forqapp.urls``: pages under ``/ui/``)."""
    return getattr(settings, "FORQ_UI_URLCONF", None) or settings.ROOT_URLCONF


def ui_paths() -> tuple[str, str | None]:
    """(the dashboard's path, the Django admin's path or None) on the UI listener."""
    urlconf = ui_urlconf()
    try:
        pages = reverse("forqapp-ui:dashboard", urlconf=urlconf)
    except NoReverseMatch:  # forqapp's pages are not in the urlconf: nothing better to point at
        pages = "/"
    try:
        admin = reverse("admin:index", urlconf=urlconf)
    except NoReverseMatch:
        admin = None
    return pages, admin
