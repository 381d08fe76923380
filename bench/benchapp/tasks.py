"""The django-tasks no-op task of the comparison."""

from django_tasks import task


@task()
def noop(payload: str) -> None:
    pass
