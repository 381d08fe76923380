"""Everything forqapp serves, for ``path("", include("forqapp.urls"))`` in a project's urls.

``forq_serve`` splits it: the API listener serves :mod:`forqapp.api.urls`, the UI listener the rest.
The UI (namespace ``forqapp-ui``) lives under ``ui/`` here, clear of the API's paths.
"""

from django.urls import include, path

urlpatterns = [
    path("", include("forqapp.api.urls")),
    path("ui/", include("forqapp.ui.urls")),
]
