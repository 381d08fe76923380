from django.contrib import admin
from django.urls import include, path

from . import admin_site  # noqa: F401 - names the admin site (forqapp)

urlpatterns = [
    path("", include("forqapp.urls")),
    path("admin/", admin.site.urls),
]

# A database that cannot serve (a full disk, a lock held too long) is a 503 page saying so, in the
# admin too, instead of Django's bare 500 (forqapp's own pages do this without it).
handler500 = "forqapp.ui.views.server_error"
