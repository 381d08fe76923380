"""The demo project's admin site is named after the product, as forqapp's own pages are: the word is
"forqapp" everywhere (the header, each page's title, the index). Imported by both URL confs (the API
listener's and the UI listener's); a project of one's own names its admin as it likes."""

from django.contrib import admin

admin.site.site_header = "forqapp admin"
admin.site.site_title = "forqapp admin"
admin.site.index_title = "forqapp"
