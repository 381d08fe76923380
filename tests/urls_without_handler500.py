"""The demo project's URLs without its ``handler500``: forqapp's own pages must answer a database
that cannot serve with a 503 all the same (the tutorial calls the handler optional)."""

from project.urls import urlpatterns  # noqa: F401
