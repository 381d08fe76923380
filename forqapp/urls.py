"""Everything forqapp serves, for ``path("", include("forqapp.urls"))`` in a project's urls.

``forq_serve`` splits it: the API listener serves :mod:`forqapp.api.urls`, the UI listener the rest.
"""

from django.urls import include, path

urlpatterns = [
    path("", include("forqapp.api.urls")),
]
