"""The UI listener's routes (``FORQ_UI_ADDR``): the HTMX pages at the root, login, and Django's
admin; none of the API's. ``forq_serve`` serves this: the demo
project sets ``FORQ_UI_URLCONF = "project.urls_ui"``.

Static files (htmx, the CSS) are served here too, from the app directories through the
staticfiles finders: a handful of small files for staff, on a listener that is not the API.
"""

from django.contrib import admin
from django.contrib.staticfiles.views import serve
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic.base import RedirectView

from . import admin_site  # noqa: F401 - names the admin site (forqapp)

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("forqapp.ui.urls")),
    re_path(r"^static/(?P<path>.*)$", serve, {"insecure": True}),
    # Browsers ask for /favicon.ico on pages that name none (Django's bare 403/404/CSRF pages).
    path("favicon.ico", RedirectView.as_view(url=static("forqapp/favicon.svg"), permanent=True)),
]

# A database that cannot serve (a full disk, a lock held too long) is a 503 page saying so, in the
# admin too, instead of Django's bare 500 (forqapp's own pages do this without it).
handler500 = "forqapp.ui.views.server_error"
