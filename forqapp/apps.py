from django.apps import AppConfig


class ForqConfig(AppConfig):
    name = "forqapp"
    verbose_name = "Forq queues"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
