"""URLs of the UI listener (FORQ_UI_ADDR): the admin and forqapp's pages — never the API."""

from django.contrib import admin
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
]
