from django.apps import AppConfig


class ForqConfig(AppConfig):
    name = "forqapp"
    verbose_name = "forqapp"  # the product's one name, in the admin too
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed

        # FORQ_QUEUES is applied after every migrate of forqapp's database.
        from django.db.models.signals import post_migrate

        from . import checks, login_throttle  # noqa: F401  (checks: registers the system checks)

        post_migrate.connect(_apply_declared_queues, sender=self, dispatch_uid="forqapp.declared_queues")
        # SQLite's synchronous on the queue's connections (FORQ_SYNCHRONOUS).
        from django.db.backends.signals import connection_created

        from .store import configure_connection

        connection_created.connect(configure_connection, dispatch_uid="forqapp.synchronous")
        # Failed logins count towards the login throttle, wherever they happen.
        user_login_failed.connect(login_throttle.record_failure, dispatch_uid="forqapp.login_throttle")
        # The admin's login page refuses a throttled login with its message (a project's own form wins).
        from django.apps import apps
        from django.contrib import admin

        if apps.is_installed("django.contrib.admin") and admin.site.login_form is None:
            admin.site.login_form = login_throttle.AdminLoginThrottleForm


def _apply_declared_queues(sender, using: str, **kwargs) -> None:
    from .conf import forq_settings
    from .management.commands.forq_queues import apply_declared_queues

    if using != forq_settings.FORQ_DATABASE or not (forq_settings.FORQ_QUEUES or forq_settings.FORQ_SCHEDULES):
        return
    from .server.schema import database_problem
    from .services import schedules

    if database_problem(using) is None:  # not after a partial or backwards migrate of forqapp
        apply_declared_queues(using)
        schedules.declare(using)
