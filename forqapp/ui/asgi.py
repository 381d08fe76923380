"""The ASGI application of the UI listener (``forq_serve``: ``forqapp.ui.asgi:ui_application``)."""

from __future__ import annotations

import django


def ui_application():
    """The UI listener: Django's ASGI handler on ``FORQ_UI_URLCONF`` (admin and UI pages, no API).

    Static files that were not collected into ``STATIC_ROOT`` are served here through Django's
    staticfiles finders, so the pages have their CSS and htmx in any project (see
    :mod:`forqapp.serving`)."""
    django.setup(set_prefix=False)
    from django.conf import settings
    from django.core.asgi import get_asgi_application

    from ..serving import static_from_finders, ui_urlconf

    settings.ROOT_URLCONF = ui_urlconf()  # FORQ_UI_URLCONF, if set: this process serves the UI only
    from .flow import pages_only

    pages_only()  # no claim is made here: the throttled-claims counts come from the other processes
    application = get_asgi_application()
    if static_from_finders():
        from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

        application = ASGIStaticFilesHandler(application)
    return application
