"""Factories for ASGI servers, kept at their old paths for servers configured with them: the API's
lives in :mod:`forqapp.api.asgi`, the UI's in :mod:`forqapp.ui.asgi`."""

from .api.asgi import api_application  # noqa: F401
from .ui.asgi import ui_application  # noqa: F401
