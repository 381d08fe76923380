"""A project's own backend: a subclass of ``ForqBackend`` in a module of its own."""

from forqapp.tasks import ForqBackend


class OwnBackend(ForqBackend):
    pass
