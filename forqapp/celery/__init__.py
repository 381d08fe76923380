"""Celery on forqapp: the ``forq://`` broker (a kombu transport, :mod:`forqapp.celery.transport`).

``broker_url = "forq://"`` (in a Django project, ``CELERY_BROKER_URL = "forq://"``) runs Celery on
forqapp's queues, on the project's own database: ``forq://ALIAS`` names another database alias.
forqapp registers the ``forq`` scheme with kombu when Django loads it, if kombu is installed (Celery
and kombu are optional: ``pip install forqapp[celery]``).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import Any

TRANSPORT = "forqapp.celery.transport:Transport"
_ALIASES_MODULE = "kombu.transport"  # kombu's TRANSPORT_ALIASES: every transport name is looked up there


def register() -> bool:
    """Make ``forq://`` a kombu transport; False when kombu is not installed.

    kombu is not imported for it (~11 MB of memory in every process that loads forqapp, Celery or
    not: ``forq_serve``'s never use it): when ``kombu.transport`` is imported later, the alias is added
    as it loads, before anyone can look a name up in it."""
    loaded = sys.modules.get(_ALIASES_MODULE, ModuleType)
    if loaded is None:  # import of it blocked: as where kombu is not installed
        return False
    if loaded is not ModuleType:
        _add_alias(loaded)
        return True
    try:
        if importlib.util.find_spec("kombu") is None:  # (finds it without importing it)
            return False
    except ValueError:  # "kombu" in sys.modules without a spec: imported some odd way; import as before
        return _import_now()
    if not any(isinstance(finder, _AliasOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AliasOnImport())
    return True


def _add_alias(module: Any) -> None:
    module.TRANSPORT_ALIASES.setdefault("forq", TRANSPORT)


def _import_now() -> bool:
    try:
        import kombu.transport  # (optional: forqapp runs without it)
    except ImportError:
        return False
    _add_alias(kombu.transport)
    return True


class _AliasOnImport(importlib.abc.MetaPathFinder):
    """Adds the alias once ``kombu.transport`` is executed (then leaves ``sys.meta_path``)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != _ALIASES_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)  # the other finders' answer
        if spec is not None and spec.loader is not None:
            spec.loader = _AliasingLoader(spec.loader)
        return spec


class _AliasingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        _add_alias(module)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, …: the real loader's
        return getattr(self.loader, name)
