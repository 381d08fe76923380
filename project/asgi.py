"""The whole demo project (API and UI) under Django's own ASGI handler, for any ASGI server.
``forq_serve`` serves the API faster through ``forqapp.api.asgi:api_application`` instead."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
application = get_asgi_application()
