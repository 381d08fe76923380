from django.apps import AppConfig


class ForqConfig(AppConfig):
    name = "forqapp"
    verbose_name = "Forq queues"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed

        from . import checks, login_throttle  # noqa: F401  (checks: registers the system checks)

        # Failed logins count towards the login throttle, wherever they happen.
        user_login_failed.connect(login_throttle.record_failure, dispatch_uid="forqapp.login_throttle")
        # The admin's login page refuses a throttled login with its message (a project's own form wins).
        from django.apps import apps
        from django.contrib import admin

        if apps.is_installed("django.contrib.admin") and admin.site.login_form is None:
            admin.site.login_form = login_throttle.AdminLoginThrottleForm
