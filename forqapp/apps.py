from django.apps import AppConfig, apps
from django.contrib.auth.signals import user_login_failed
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate

from . import checks  # noqa: F401 - registers the system checks
from .celery import register as register_celery_transport
from .store import configure_connection
from .tasks.discovery import uses_forq_backend


class ForqConfig(AppConfig):
    name = "forqapp"
    verbose_name = "forqapp"  # the product's one name, in the admin too
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib import admin

        from . import login_throttle  # (it imports the auth models: not while apps load)
        from .services import clock  # (the services import the models: not while apps load)

        # FORQ_QUEUES is applied after every migrate of forqapp's database.
        post_migrate.connect(_apply_declared_queues, sender=self, dispatch_uid="forqapp.declared_queues")
        # SQLite's synchronous on the queue's connections (FORQ_SYNCHRONOUS).
        connection_created.connect(configure_connection, dispatch_uid="forqapp.synchronous")
        # The queue clock follows PostgreSQL's (FORQ_CLOCK): measured as a connection opens.
        connection_created.connect(clock.on_connection_created, dispatch_uid="forqapp.clock")
        # Failed logins count towards the login throttle, wherever they happen.
        user_login_failed.connect(login_throttle.record_failure, dispatch_uid="forqapp.login_throttle")
        # The admin's login page refuses a throttled login with its message (a project's own form wins).
        # A schedule of a task sends task_enqueued for each tick (where TASKS has a ForqBackend).
        if uses_forq_backend():
            from .tasks import scheduling  # noqa: F401 - its receiver (it imports the Tasks framework)
        if apps.is_installed("django.contrib.admin") and admin.site.login_form is None:
            admin.site.login_form = login_throttle.AdminLoginThrottleForm
        # Celery's broker_url = "forq://" (where kombu is installed; nothing is imported otherwise).
        register_celery_transport()


def _apply_declared_queues(sender, using: str, **kwargs) -> None:
    from .management.commands.forq_queues import after_migrate  # (it imports models: not while apps load)

    after_migrate(using)
