"""The layers, read from the imports (module-level and function-local alike), as
``tests/test_store_contract.py`` holds the stores to their contract:

    words (settings, vocabulary, errors, ids, clock, typed inputs) → store → services
    → server machinery and the worker → faces (HTTP APIs, SQS, UI, admin, Tasks, Spark, keys, commands)

The words import nothing of the app but other words; the store only the words; the services no face
and no server machinery; the faces never the store. And nothing imports in a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "forqapp"

WORDS = {"forqapp.conf", "forqapp.errors", "forqapp.vocab", "forqapp.ids", "forqapp.utils", "forqapp.validation"}
SERVER = ("forqapp.server",)
FACES = ("forqapp.api", "forqapp.sqs", "forqapp.ui", "forqapp.admin", "forqapp.tasks", "forqapp.spark",
         "forqapp.keys", "forqapp.management", "forqapp.demo", "forqapp.worker", "forqapp.celery")


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """{module: the forqapp modules it imports}, every import statement counted but those under
    ``if TYPE_CHECKING:`` (they never run)."""
    files = {_name(p): p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                for child in node.body for n in ast.walk(child)}
        found: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                if node.level:
                    base = base[: len(base) - node.level + 1]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                targets = [f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in files else prefix
                           for alias in node.names]
            else:
                continue
            for target in targets:
                while target not in files and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in files and target != module:
                    found.add(target)
        graph[module] = found
    return graph


GRAPH = _imports()


def _in(module: str, layer: tuple[str, ...] | set[str]) -> bool:
    return any(module == top or module.startswith(top + ".") for top in layer)


def _offences(importers: tuple[str, ...] | set[str], forbidden) -> list[str]:
    return sorted(f"{m} imports {t}" for m, targets in GRAPH.items() if _in(m, importers)
                  for t in targets if forbidden(t))


def test_the_words_import_only_words():
    assert _offences(WORDS, lambda t: not _in(t, WORDS)) == []


def test_the_store_imports_only_the_words():
    assert _offences(("forqapp.store",), lambda t: not _in(t, WORDS | {"forqapp.store"})) == []


def test_the_services_import_no_face_and_no_server_machinery():
    assert _offences(("forqapp.services",), lambda t: _in(t, FACES + SERVER)) == []


def test_the_faces_never_import_the_store():
    assert _offences(FACES, lambda t: _in(t, ("forqapp.store",))) == []


def test_no_import_cycle():
    """Tarjan's strongly connected components over every import, function-local ones included
    (a cycle held apart at import time by a local import is still a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert cycles == []


@pytest.mark.parametrize("layer", [WORDS, ("forqapp.store",), ("forqapp.services",), SERVER, FACES])
def test_every_layer_has_modules(layer):
    """(The layers above name real modules: a rename does not empty a rule.)"""
    assert any(_in(m, layer) for m in GRAPH)
