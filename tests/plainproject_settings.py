"""Settings like a user's own project (the docs' tutorial): forqapp's URLs
included in the project's urlconf (``project.urls``: the pages under ``/ui/``), no
``FORQ_UI_URLCONF`` and no ``STATIC_ROOT`` (so no ``collectstatic``)."""

from project.settings import *  # noqa: F403

del FORQ_UI_URLCONF, STATIC_ROOT  # noqa: F821
ROOT_URLCONF = "project.urls"
