"""MkDocs hooks (``hooks:`` in mkdocs.yml): the reference pages' tables generated from the code at
every build, so they cannot drift from it.

A page holds each generated part between two markers, each on a line of its own,
``<!-- generated:NAME -->`` and ``<!-- /generated:NAME -->``; the part is written there (so the page
reads whole in the repository too: ``python scripts/docs_hooks.py write`` rewrites every part, and
``tests/test_docs.py`` fails when one is not what the code gives), and every build puts the code's
own in its place. The parts:

* ``<!-- generated:settings -->``: every ``FORQ_*`` setting of ``forqapp/conf.py`` (name, meaning,
  default, environment fallback), in declaration order. A setting added there shows up here.
* ``<!-- generated:commands -->``: each management command's ``--help``, from its argparse parser,
  and each of its subcommands' (``forq_keys create --help``).
* ``<!-- generated:openapi -->``: every operation of the served OpenAPI document
  (``forqapp.api.meta.openapi_document()``: v1, the bulk endpoints and v2), with its parameters,
  request body fields and responses.

``tests/test_docs.py`` builds the tables with the same functions.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _importable() -> None:
    """The checkout on sys.path (MkDocs loads a hook without it), for forqapp and project."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


# forq_serve first, then the others by name; a command added to forqapp shows up by itself.
COMMANDS = sorted((p.stem for p in (ROOT / "forqapp" / "management" / "commands").glob("forq_*.py")),
                  key=lambda name: (name != "forq_serve", name))


def _django() -> None:
    """Django set up with the demo project's settings (the commands' parsers need the app registry;
    nothing here opens a database)."""
    _importable()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ.setdefault("FORQ_DB_PATH", ":memory:")
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


# --- settings ------------------------------------------------------------------------------------

def settings_rows() -> list[tuple[str, str, str, str]]:
    """(name, default, environment, meaning) of every declared setting, in declaration order.

    environment: "any project" when the setting falls back to the environment variable of its name
    in any project; "demo project" when only this repository's ``project/settings.py`` reads it
    from the environment; empty otherwise."""
    _importable()
    from forqapp.conf import SETTINGS

    demo = (ROOT / "project" / "settings.py").read_text()
    rows = []
    for name, setting in SETTINGS.items():
        if setting.env is not None:
            env = "any project"
        elif re.search(rf"env_\w+\(\s*\"{name}\"", demo):
            env = "demo project"
        else:
            env = ""
        rows.append((name, setting.shown_default, env, setting.doc))
    return rows


def settings_page() -> str:
    """One heading per setting (so each has its anchor and a line in the page's contents), with its
    meaning, default and environment fallback."""
    parts = []
    lead = ""
    for name, default, env, doc in settings_rows():
        if doc.startswith("… "):  # continues the setting before it ("… within this many seconds")
            doc = f"with `{lead}`: {doc[2:]}"
        else:
            lead = name
        where = f" · environment: {env}" if env else ""
        parts.append(f"### `{name}`\n\n{doc[:1].upper()}{doc[1:]}.\n\nDefault: {default}{where}\n")
    return "\n".join(parts)


# --- management commands -------------------------------------------------------------------------

def command_help(name: str) -> str:
    """``manage.py <name> --help`` as argparse prints it (80 columns)."""
    _django()
    from django.core.management import load_command_class

    os.environ["COLUMNS"] = "100"
    command = load_command_class("forqapp", name)
    parser = command.create_parser("manage.py", name)
    out = io.StringIO()
    with redirect_stdout(out):
        parser.print_help()
    return out.getvalue().rstrip()


def subcommand_helps(name: str) -> list[tuple[str, str]]:
    """(subcommand, its ``--help``) of each subcommand of ``manage.py <name>`` (``forq_keys create``)."""
    _django()
    import argparse

    from django.core.management import load_command_class

    os.environ["COLUMNS"] = "100"
    parser = load_command_class("forqapp", name).create_parser("manage.py", name)
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                text = io.StringIO()
                with redirect_stdout(text):
                    subparser.print_help()
                out.append((sub, text.getvalue().rstrip()))
    return out


def commands_page() -> str:
    parts = []
    for name in COMMANDS:
        parts.append(f"## `{name}`\n\n```text\n{command_help(name)}\n```\n")
        for sub, text in subcommand_helps(name):
            parts.append(f"### `{name} {sub}`\n\n```text\n{text}\n```\n")
    return "\n".join(parts)


# --- the HTTP APIs from the OpenAPI document -----------------------------------------------------

def _resolve(document: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in item:
        node: Any = document
        for part in item["$ref"].lstrip("#/").split("/"):
            node = node[part]
        item = node
    return item


def _type(document: dict[str, Any], schema: dict[str, Any]) -> str:
    schema = _resolve(document, schema)
    if "oneOf" in schema or "anyOf" in schema:
        return " or ".join(_type(document, s) for s in schema.get("oneOf") or schema["anyOf"])
    kind = schema.get("type", "object" if "properties" in schema else "")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array" and "items" in schema:
        return f"array of {_type(document, schema['items'])}"
    return kind or "any"


def _fields(document: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    schema = _resolve(document, schema)
    required = set(schema.get("required", ()))
    rows = []
    for field, spec in schema.get("properties", {}).items():
        spec_resolved = _resolve(document, spec)
        text = spec.get("description") or spec_resolved.get("description", "")
        rows.append(f"| `{field}`{' (required)' if field in required else ''} | {_cell(_type(document, spec))} "
                    f"| {_cell(text)} |")
    return rows


# The parts of the served document (forqapp.api.meta merges them), each a section of the page.
PARTS = {
    "openapi.json": "API v1 (Forq-compatible)",
    "openapi_bulk.json": "Bulk endpoints (the Spark connector's)",
    "openapi_v2.json": "API v2",
}


def openapi_page() -> str:
    _django()
    from forqapp.api.meta import HERE, openapi_document

    document = openapi_document()
    part_of = {}
    for name, title in PARTS.items():
        for path in json.loads((HERE / name).read_text())["paths"]:
            part_of.setdefault(path, title)
    by_tag: dict[str, list[str]] = {title: [] for title in PARTS.values()}
    for path, operations in document["paths"].items():
        for method, op in operations.items():
            if method == "parameters":
                continue
            tag = part_of.get(path, "API v1 (Forq-compatible)")
            out = [f"### `{method.upper()} {path}`", "", op.get("summary", "")]
            if op.get("description"):
                out += ["", op["description"]]
            params = [_resolve(document, p) for p in operations.get("parameters", []) + op.get("parameters", [])]
            if params:
                out += ["", "| parameter | in | type | meaning |", "| --- | --- | --- | --- |"]
                out += [f"| `{p['name']}`{' (required)' if p.get('required') else ''} | {p['in']} "
                        f"| {_cell(_type(document, p.get('schema', {})))} | {_cell(p.get('description', ''))} |"
                        for p in params]
            body = op.get("requestBody")
            if body:
                content = _resolve(document, body).get("content", {})
                schema = next(iter(content.values()), {}).get("schema", {})
                rows = _fields(document, schema)
                if rows:
                    out += ["", "| body field | type | meaning |", "| --- | --- | --- |", *rows]
            out += ["", "| status | meaning |", "| --- | --- |"]
            for status, response in op.get("responses", {}).items():
                out.append(f"| {status} | {_cell(_resolve(document, response).get('description', ''))} |")
            by_tag.setdefault(tag, []).append("\n".join(out) + "\n")
    return "\n".join(f"## {tag}\n\n" + "\n".join(ops) for tag, ops in by_tag.items() if ops)


# --- the hook ------------------------------------------------------------------------------------

GENERATORS = {
    "settings": settings_page,
    "commands": commands_page,
    "openapi": openapi_page,
}


# A generated part: its opening marker, what was written there, its closing marker.
PART = re.compile(r"^<!-- generated:(\w+) -->\n(.*?)^<!-- /generated:\1 -->$", flags=re.M | re.S)


def part(name: str) -> str:
    """The generated part ``name`` between its markers, as a page holds it."""
    return f"<!-- generated:{name} -->\n{GENERATORS[name]().rstrip()}\n\n<!-- /generated:{name} -->"


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return PART.sub(lambda match: part(match.group(1)), markdown)


def write(docs: Path = ROOT / "docs") -> list[Path]:
    """Rewrite every generated part of the pages under ``docs`` with the code's own; the pages changed."""
    changed = []
    for page in sorted(docs.rglob("*.md")):
        text = page.read_text()
        new = PART.sub(lambda match: part(match.group(1)), text)
        if new != text:
            page.write_text(new)
            changed.append(page)
    return changed


def on_page_content(html: str, **kwargs: Any) -> str:
    """Docstrings are written for Sphinx: drop the role of a ``:class:`Name``` rendered by mkdocstrings
    (``:class:<code>Name</code>``), keeping the name."""
    return re.sub(r":(?:func|class|mod|meth|attr|data|exc|obj):(?=<code>)", "", html)


def openapi_json() -> str:  # for a quick look: python scripts/docs_hooks.py
    _django()
    from forqapp.api.meta import openapi_document

    return json.dumps(openapi_document(), indent=2)


if __name__ == "__main__":  # `write`: rewrite the pages' generated parts; a part's name: print it
    if sys.argv[1:] == ["write"]:
        for page in write():
            print("rewrote", page.relative_to(ROOT))
    else:
        print(GENERATORS[sys.argv[1]]() if len(sys.argv) > 1 else openapi_json())
