"""The docs (docs/, README.md): every Python block names only what it imports, the blocks a user
runs as they are do run, the README's links lead to pages that exist, and the settings reference is
the one conf.py declares. (The tutorial's blocks are run end to end by tests/test_install.py; the
site's strict build, every link and anchor checked, is a phase of scripts/test.sh.)"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from forqapp.conf import SETTINGS

from .conftest import ROOT, SECRET, start_server, stop_server, subprocess_env

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
README = (ROOT / "README.md").read_text()

# What a block that is appended to a file Django generated may use without importing it.
FRAGMENT_PRELUDES = {
    "# settings.py": 'BASE_DIR = None\nINSTALLED_APPS = []\nMIDDLEWARE = []\nDATABASES = {"default": {}}\n',
    "# urls.py": "from django.urls import path\nurlpatterns = []\n",
}


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def section(text: str, name: str) -> str:
    return text.split(f"<!-- section:{name} -->", 1)[1].split(f"<!-- /section:{name} -->", 1)[0]


def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "scripts" / "docs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_python_block_imports_what_it_uses(tmp_path):
    """ruff's undefined-name check (F821) over every Python block of the docs and the README: a
    snippet a user pastes carries its imports. A block that starts ``# settings.py`` or
    ``# urls.py`` is appended to the file startproject made, and may use the names defined there."""
    sources = {"README.md": README} | {str(p.relative_to(ROOT)): p.read_text() for p in PAGES}
    where = {}
    for name, text in sources.items():
        for i, block in enumerate(python_blocks(text)):
            prelude = next((p for first, p in FRAGMENT_PRELUDES.items() if block.startswith(first)), "")
            path = tmp_path / f"block_{len(where)}.py"
            path.write_text(prelude + block)
            where[path.name] = f"{name}, Python block {i + 1}"
    assert len(where) > 20  # the docs' blocks were found
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821", "--output-format", "json",
         str(tmp_path)], capture_output=True, text=True, check=False)
    found = json.loads(result.stdout)
    assert [f"{where[Path(f['filename']).name]}: {f['message']}" for f in found] == []


@pytest.mark.django_db(transaction=True)
def test_the_readme_taste_runs_as_it_is(capsys):
    exec(compile(section(README, "taste").split("```python\n", 1)[1].split("```", 1)[0], "README", "exec"), {})  # noqa: S102 - the docs' own code
    assert capsys.readouterr().out == '{"to": "ada@example.com"} 1\n'
    import forqapp

    info = forqapp.queue_info("emails")
    assert info.policy["max_attempts"] == 3 and sum(info.counts.values()) == 0  # acked: gone


@pytest.mark.django_db(transaction=True)
def test_the_python_api_tour_runs_as_it_is():
    (block,) = python_blocks(section((DOCS / "how-to" / "python-api.md").read_text(), "python-api"))
    namespace: dict = {}
    exec(compile(block, "python-api.md", "exec"), namespace)  # noqa: S102 - the docs' own code
    assert namespace["message"].content == '{"to": "ada@example.com"}'
    assert [m.content for m in namespace["batch"]] == ["a"]  # the others are delayed
    import forqapp

    assert "emails" not in [q.name for q in forqapp.list_queues()]  # the tour ends by deleting it


def test_the_readme_is_a_front_door_whose_links_lead_somewhere():
    assert len(README.splitlines()) <= 300
    targets = re.findall(r"\]\(((?!https?:)[^)#]+)", README)
    assert "docs/tutorial.md" in targets and "docs/screenshot-dashboard.png" in targets
    assert [t for t in targets if not (ROOT / t).exists()] == []


def test_every_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    assert [str(p.relative_to(DOCS)) for p in PAGES if str(p.relative_to(DOCS)) not in nav] == []


def test_the_settings_reference_is_generated_from_conf():
    assert "<!-- generated:settings -->" in (DOCS / "reference" / "settings.md").read_text()
    assert "<!-- /generated:settings -->" in (DOCS / "reference" / "settings.md").read_text()
    page = hooks().settings_page()
    shown = dict(re.findall(r"^### `(FORQ_\w+)`\n\n.+\n\nDefault: (.+?)(?: · environment: .+)?$", page, flags=re.M))
    assert shown == {name: setting.shown_default for name, setting in SETTINGS.items()}
    assert "Default: `'localhost:8080'` · environment: any project" in page  # FORQ_API_ADDR: any project
    assert "Default: `5.0` · environment: demo project" in page  # FORQ_KEYS_CACHE_SECONDS: the demo's


def test_the_commands_and_the_http_apis_are_generated_from_the_code():
    module = hooks()
    assert "--max-messages" in module.command_help("forq_worker")
    page = module.openapi_page()
    assert "### `POST /api/v2/queues/{queue}/messages`" in page and "### `GET /healthcheck`" in page
    assert "| `content` (required) | string |" in page


def test_the_generated_parts_written_in_the_pages_are_the_codes():
    """The reference pages hold their generated parts (read whole in the repository, not only on
    the built site), and each is what the code gives now: ``python scripts/docs_hooks.py write``."""
    module = hooks()
    found = {}
    for page in PAGES:
        for match in module.PART.finditer(page.read_text()):
            found[match.group(1)] = match.group(0)
    assert set(found) == set(module.GENERATORS)
    stale = [name for name, text in found.items() if text != module.part(name)]
    assert stale == [], f"run `python scripts/docs_hooks.py write`: {stale} differ from the code"
    assert "### `forq_keys create`" in found["commands"] and "--expires" in found["commands"]


@pytest.mark.django_db(transaction=True)
def test_the_quick_start_commands_run_as_they_are(live_api, tmp_path):
    """docs/quick-start.md's "try it" block, pasted into bash as it is (only the API's address is
    this test server's): send, receive, then ack with the id and receipt the receive answered."""
    (block,) = re.findall(r"^```sh\n(.*?)^```",
                          section((DOCS / "quick-start.md").read_text(), "try-it"), flags=re.S | re.M)
    again = 'curl -s -X POST -H "X-API-Key: $KEY" -H "X-Forq-Receipt: $RECEIPT" http://127.0.0.1:8080/api/v1/queues/demo/messages/$ID/ack\n'
    script = (block + again).replace("http://127.0.0.1:8080", live_api.url)
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60, env={"PATH": os.environ["PATH"], "FORQ_AUTH_SECRET": SECRET})
    assert result.returncode == 0, result.stderr
    assert re.findall(r"^HTTP/1.1 (\d+)", result.stdout, flags=re.M) == ["204", "204"]  # the send, the ack
    received = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("{")))
    assert received["content"] == "hello" and set(received) == {"id", "content", "receipt"}
    assert result.stdout.rstrip().endswith('{"code": "not_found.message"}')  # acked: gone
    import forqapp

    assert sum(forqapp.queue_info("demo").counts.values()) == 0


def console_sessions(text: str) -> list[tuple[str, list[str]]]:
    """The ``$ command`` lines of a page's ``console`` blocks, each with the output lines shown under it."""
    sessions: list[tuple[str, list[str]]] = []
    for block in re.findall(r"^```console\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.splitlines():
            if line.startswith("$ "):
                sessions.append((line[2:], []))
            elif sessions and sessions[-1][0].endswith("\\") and not sessions[-1][1]:  # the command goes on
                sessions[-1] = (sessions[-1][0] + "\n" + line, [])
            else:
                sessions[-1][1].append(line)
    return sessions


SHOWN_VALUES = (  # what stands for a value of the page's run in its shown output, and what it matches
    (r"[\w-]*…\(40 characters\)", r"\S{40}"),  # a secret
    (r"[\w-]*…", r"\S+?"),  # the rest of a value, cut short
    (r"FQK[A-Z0-9]{17}", r"FQK[A-Z0-9]{17}"),  # an access key id
    (r"\b\d{13}\b", r"\d{13}"),  # a receipt
    (r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"),  # a date
)


def shown_as_pattern(line: str) -> str:
    """A line of shown output as a regex: the key ids, secrets, message ids, receipts and dates of the
    page's own run match any of their kind, the rest matches as it is."""
    shown = re.compile("|".join(f"({value})" for value, _ in SHOWN_VALUES))
    pattern, at = "", 0
    for found in shown.finditer(line):
        kind = next(SHOWN_VALUES[i][1] for i, group in enumerate(found.groups()) if group is not None)
        pattern += re.escape(line[at:found.start()]) + kind
        at = found.end()
    return pattern + re.escape(line[at:])


@pytest.mark.django_db(transaction=True)
def test_the_keys_how_to_runs_as_shown(live_api, tmp_path):
    """docs/how-to/keys.md's console sessions, each ``$`` line run in one bash session as it is (only
    the API's address is this test server's), print what the page shows under it."""
    sessions = console_sessions((DOCS / "how-to" / "keys.md").read_text())
    assert len(sessions) >= 10
    script = "".join(f"echo '@@@ {i}'\n{command}\n" for i, (command, _) in enumerate(sessions))
    env = subprocess_env(PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    result = subprocess.run(["bash", "-c", script.replace("http://localhost:8080", live_api.url)], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    outputs = re.split(r"^@@@ \d+\n", result.stdout, flags=re.M)[1:]
    assert len(outputs) == len(sessions)
    for (command, shown), output in zip(sessions, outputs, strict=True):
        lines = output.splitlines()
        assert len(lines) == len(shown), (command, output)
        for want, got in zip(shown, lines, strict=True):
            assert re.fullmatch(shown_as_pattern(want), got), (command, want, got)


@pytest.mark.django_db(transaction=True)
def test_the_django_tasks_how_to_runs_as_it_is(settings, tmp_path, monkeypatch):
    """docs/how-to/django-tasks.md: its TASKS setting, its myapp/tasks.py (as it is: its import
    works on Django 5.2 and 6), the enqueue of its "anywhere" block, and its worker command's options."""

    from forqapp.management.commands.forq_worker import Command
    from forqapp.tasks.discovery import with_consumers
    from forqapp.worker.runner import Worker

    blocks = re.findall(r"^```(?:python|sh)\n(.*?)^```", (DOCS / "how-to" / "django-tasks.md").read_text(),
                        flags=re.S | re.M)
    setting = next(b for b in blocks if b.startswith("# settings.py"))  # (the first: the page's own)
    (tasks_py,) = [b for b in blocks if b.startswith("# myapp/tasks.py")]
    (anywhere,) = [b for b in blocks if b.startswith("# anywhere")]
    (command,) = [b for b in blocks if b.startswith("python manage.py forq_worker")]
    namespace: dict = {}
    exec(compile(setting, "django-tasks.md", "exec"), namespace)  # noqa: S102 - the docs' own code
    settings.TASKS = namespace["TASKS"]
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "tasks.py").write_text(tasks_py)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        namespace = {}
        exec(compile(anywhere, "django-tasks.md", "exec"), namespace)  # noqa: S102 - the docs' own code
        result = namespace["result"]
        assert namespace["send_welcome"].get_result(result.id).status == "READY"
        import forqapp

        assert forqapp.queue_info("tasks-emails").counts["ready"] == 1  # one message on "tasks-emails"
        Worker(with_consumers({}), burst=True, start_jitter=0).run()
        done = namespace["send_welcome"].get_result(result.id)
        assert (done.status, done.return_value) == ("SUCCESSFUL", "welcomed 42")
    finally:
        for name in ("myapp.tasks", "myapp"):
            sys.modules.pop(name, None)
    options = Command().create_parser("manage.py", "forq_worker").parse_args(command.split("#")[0].split()[3:])
    assert (options.concurrency, options.prefetch) == (4, 200)


@pytest.mark.django_db(transaction=True)
def test_the_django_tasks_how_tos_own_backend_class_runs_as_it_is(settings, tmp_path, monkeypatch, capsys):
    """docs/how-to/django-tasks.md's "Your own backend class": its module, in the tutorial's project
    package (``mysite``), named by its TASKS line; a task enqueued through it prints its id."""
    blocks = re.findall(r"^```python\n(.*?)^```", (DOCS / "how-to" / "django-tasks.md").read_text(),
                        flags=re.S | re.M)
    (at,) = [i for i, b in enumerate(blocks) if b.startswith("# mysite/tasks_backend.py")]
    module, setting = blocks[at], blocks[at + 1]  # the module, then the settings line that names it
    assert setting.startswith("# settings.py\n") and "AuditedBackend" in setting
    (tmp_path / "mysite").mkdir()
    (tmp_path / "mysite" / "__init__.py").write_text("")
    (tmp_path / "mysite" / "tasks_backend.py").write_text(module)
    (tmp_path / "mysite" / "jobs.py").write_text(
        "try:\n    from django.tasks import task\nexcept ImportError:\n    from django_tasks import task\n\n\n"
        "@task\ndef hello(name):\n    return name\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace: dict = {}
    exec(compile(setting, "django-tasks.md", "exec"), namespace)  # noqa: S102 - the docs' own code
    settings.TASKS = namespace["TASKS"]
    try:
        from mysite.jobs import hello  # type: ignore[import-not-found]

        result = hello.enqueue("ada")
        assert capsys.readouterr().out == f"enqueued {result.id}\n"
        assert hello.get_result(result.id).status == "READY"
    finally:
        for name in ("mysite.jobs", "mysite.tasks_backend", "mysite"):
            sys.modules.pop(name, None)


@pytest.mark.django_db(transaction=True)
def test_the_worker_how_to_consumers_run_as_they_are(settings, tmp_path, monkeypatch, capsys):
    """docs/how-to/worker.md: its ``@forqapp.consumer`` (in myapp/consumers.py) and its
    ``FORQ_CONSUMERS`` with the myapp/jobs.py it names, run by a worker; and its command line's options."""
    from django.core import mail

    import forqapp
    from forqapp.management.commands.forq_worker import Command
    from forqapp.worker import consumers
    from forqapp.worker.consumers import Consumer, settings_consumers
    from forqapp.worker.runner import Worker

    page = (DOCS / "how-to" / "worker.md").read_text()
    blocks = {b.splitlines()[0]: b for b in python_blocks(page)}
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "consumers.py").write_text(blocks["# myapp/consumers.py"])
    (tmp_path / "myapp" / "jobs.py").write_text(blocks["# myapp/jobs.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace: dict = {}
    exec(compile(blocks["# settings.py"], "worker.md", "exec"), namespace)  # noqa: S102 - the docs' own code
    settings.FORQ_CONSUMERS = namespace["FORQ_CONSUMERS"]
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    try:
        importlib.import_module("myapp.consumers")  # registers send_welcome, as autodiscovery would
        welcome = consumers._registry["emails"]  # (not registry(): it would load FORQ_CONSUMERS too)
        (entry,) = settings_consumers()[0]
        assert entry[0] == "emails" and entry[1].__module__ == "myapp.jobs"
        forqapp.send("emails", json.dumps({"to": "ada@example.com"}))
        forqapp.send("emails", json.dumps({"to": ""}))
        counts = Worker({"emails": welcome}, burst=True, start_jitter=0).run()
        assert counts == {"ack": 1, "fail": 1} and [m.to for m in mail.outbox] == [["ada@example.com"]]
        forqapp.send("emails", "hello")
        assert Worker({"emails": Consumer(*entry)}, burst=True, start_jitter=0).run() == {"ack": 1}
        assert capsys.readouterr().out == "mail hello\n"
    finally:
        consumers.unregister("emails")
        for name in ("myapp.consumers", "myapp.jobs", "myapp"):
            sys.modules.pop(name, None)
    (usage,) = [b for b in re.findall(r"^```sh\n(.*?)^```", page, flags=re.S | re.M) if "forq_worker" in b]
    options = re.findall(r"\[(--?[\w-]+)", usage)
    parser = Command().create_parser("manage.py", "forq_worker")
    known = {o for action in parser._actions for o in action.option_strings}
    assert options and [o for o in options if o not in known] == []


def test_the_install_how_to_queue_database_block_runs(tmp_path, settings):
    """docs/how-to/install.md's "queue in a database of its own", appended to a startproject
    settings.py (BASE_DIR a Path, DATABASES with its default): a second SQLite alias, the router."""
    from django.utils.module_loading import import_string

    (block,) = [b for b in python_blocks((DOCS / "how-to" / "install.md").read_text())
                if b.startswith("# settings.py: the queue in a database of its own")]
    namespace: dict = {"BASE_DIR": tmp_path, "DATABASES": {"default": {"ENGINE": "django.db.backends.sqlite3"}}}
    exec(compile(block, "install.md", "exec"), namespace)  # noqa: S102 - the docs' own code
    queue = namespace["DATABASES"]["queue"]
    assert queue["ENGINE"] == "django.db.backends.sqlite3" and str(queue["NAME"]) == str(tmp_path / "queue.sqlite3")
    settings.FORQ_DATABASE = namespace["FORQ_DATABASE"]
    (router,) = namespace["DATABASE_ROUTERS"]
    assert import_string(router)().allow_migrate("queue", "forqapp") is True
    assert import_string(router)().allow_migrate("default", "forqapp") is False


def test_the_install_how_to_ui_urlconf_serves_pages_only(tmp_path, settings, monkeypatch):
    """docs/how-to/install.md's pages-only URLconf, saved as mysite/urls_ui.py and named by
    FORQ_UI_URLCONF: the admin and the UI resolve, the API does not; a name that does not import
    is forqapp.E032."""
    from django.urls import Resolver404, resolve

    from forqapp.checks import serve_problems, ui_urlconf_problems

    (block,) = [b for b in python_blocks((DOCS / "how-to" / "install.md").read_text())
                if b.startswith("# mysite/urls_ui.py")]
    (tmp_path / "mysite").mkdir()
    (tmp_path / "mysite" / "__init__.py").write_text("")
    (tmp_path / "mysite" / "urls_ui.py").write_text(block)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        settings.FORQ_UI_URLCONF = "mysite.urls_ui"
        assert ui_urlconf_problems() == []
        assert resolve("/admin/", urlconf="mysite.urls_ui").url_name == "index"
        assert resolve("/", urlconf="mysite.urls_ui").namespace == "forqapp-ui"
        with pytest.raises(Resolver404):
            resolve("/api/v1/queues/orders/messages", urlconf="mysite.urls_ui")
        settings.FORQ_UI_URLCONF = "mysite.nope"
        (problem,) = ui_urlconf_problems()
        assert problem.id == "forqapp.E032" and "No module named 'mysite.nope'" in problem.msg, problem
        assert problem.msg in serve_problems()  # forq_serve refuses to start, in one line
    finally:
        for name in ("mysite.urls_ui", "mysite"):
            sys.modules.pop(name, None)


def test_the_postgresql_how_to_settings_block_gives_a_postgresql_entry(monkeypatch):
    """docs/how-to/postgresql.md's settings for your own project, appended to a startproject
    settings.py with DATABASE_URL exported: the default alias on PostgreSQL, connections kept and
    checked (its use against a live PostgreSQL is the whole suite's PostgreSQL run)."""
    (block,) = [b for b in python_blocks((DOCS / "how-to" / "postgresql.md").read_text())
                if b.startswith("# settings.py: PostgreSQL from DATABASE_URL")]
    monkeypatch.setenv("DATABASE_URL", "postgres://forq:SECRET@db.internal:5432/forq")
    namespace: dict = {"DATABASES": {"default": {"ENGINE": "django.db.backends.sqlite3"}}}
    exec(compile(block, "postgresql.md", "exec"), namespace)  # noqa: S102 - the docs' own code
    entry = namespace["DATABASES"]["default"]
    assert (entry["ENGINE"], entry["HOST"], entry["NAME"]) == ("django.db.backends.postgresql", "db.internal", "forq")
    assert entry["CONN_MAX_AGE"] == 600 and entry["CONN_HEALTH_CHECKS"] is True
    assert entry["OPTIONS"]["prepare_threshold"] == 5
    (pgbouncer,) = [b for b in python_blocks((DOCS / "how-to" / "postgresql.md").read_text())
                    if b.startswith("# settings.py: behind a pgbouncer")]
    exec(compile(pgbouncer, "postgresql.md", "exec"), namespace)  # noqa: S102 - the docs' own code
    assert namespace["DATABASES"]["default"]["OPTIONS"]["prepare_threshold"] is None


@pytest.mark.django_db(transaction=True)
def test_the_queue_and_schedule_settings_of_the_how_tos_apply(settings):
    """Every FORQ_QUEUES and FORQ_SCHEDULES block of docs/how-to/queues.md and flow-control.md is
    accepted by ``forq_queues apply``, and flow-control's schedule block runs as it is."""
    from django.core.management import call_command

    import forqapp

    applied = []
    for page in ("queues.md", "flow-control.md"):
        for block in python_blocks((DOCS / "how-to" / page).read_text()):
            namespace: dict = {}
            if block.startswith("# settings.py"):
                exec(compile(block, page, "exec"), namespace)  # noqa: S102 - the docs' own code
                settings.FORQ_QUEUES = namespace.get("FORQ_QUEUES", {})
                settings.FORQ_SCHEDULES = namespace.get("FORQ_SCHEDULES", {})
                call_command("forq_queues", "apply", verbosity=0)
                applied += [*settings.FORQ_QUEUES, *settings.FORQ_SCHEDULES]
            elif "forqapp.schedule(" in block:
                exec(compile(block, page, "exec"), namespace)  # noqa: S102 - the docs' own code
    assert {"emails", "thumbnails", "imports", "nightly-report"} <= set(applied)
    assert forqapp.queue_info("emails").policy["rate"] is not None  # flow-control's, the last applied
    assert [s.name for s in forqapp.list_schedules()] == ["nightly-report"]  # heartbeat was unscheduled


def test_a_setting_only_the_demo_project_reads_from_the_environment_is_not_shown_as_a_variable_alone():
    """A ``FORQ_X=value`` on a page, for a setting only the demo project reads from the environment,
    says so in the same paragraph: in a project of one's own it goes in settings.py."""
    scope = dict(re.findall(r"^### `(FORQ_\w+)`\n\n.+\n\nDefault: .+? · environment: (.+)$", hooks().settings_page(),
                            flags=re.M))
    assert scope["FORQ_TRUST_PROXY_HEADERS"] == "demo project" and scope["FORQ_API_ADDR"] == "any project"
    alone = []
    for page in PAGES:
        if page.name in ("quick-start.md", "settings.md", "development.md", "benchmarks.md"):  # the demo's own pages
            continue
        for paragraph in page.read_text().split("\n\n"):
            for name in re.findall(r"\b(FORQ_\w+)=", paragraph):
                if scope.get(name) == "demo project" and "demo project" not in " ".join(paragraph.split()):
                    alone.append(f"{page.relative_to(DOCS)}: {name}")
    assert alone == []


def shown_json(lines: list[str]):
    """The JSON a page shows as a command's output (its ``# …`` remarks after the JSON dropped),
    with ``"…"``-cut ids as they are."""
    return json.loads(" ".join(re.sub(r"\s+#\s.*$", "", line) for line in lines))


def same_shape(shown, got) -> bool:
    """The same keys all the way down, and the same values but for ids, receipts, sequences and
    times (those of the page's own run)."""
    if isinstance(shown, dict):
        return isinstance(got, dict) and shown.keys() == got.keys() and all(
            key in ("id", "receipt", "sequence", "last_sequence", "counts", "created_at") or key.endswith("_at")
            or same_shape(shown[key], got[key]) for key in shown)
    if isinstance(shown, list):
        return isinstance(got, list) and len(shown) == len(got) and all(map(same_shape, shown, got))
    return shown == got


@pytest.fixture
def api_with_default_long_polls(django_db_blocker):
    """A server as the demo's: long polls up to 30 s (``live_api``'s stop at 2)."""
    with django_db_blocker.unblock():
        api = start_server({"FORQ_LONG_POLL_SECONDS": "30"})
    yield api
    stop_server(api)


@pytest.mark.django_db(transaction=True)
def test_the_http_api_how_to_examples_answer_as_shown(api_with_default_long_polls):
    """docs/how-to/http-api.md's v2 examples, pasted into bash in order with KEY set as the quick
    start sets it (only the address is this test server's): send twice (deduplicated), receive, a
    batch ack (the page's ids and receipt replaced by the received ones), the queue's policy; each
    answer has the shape and the values the page shows (but for ids, sequences, receipts and times)."""
    sessions = [(command, shown) for command, shown in console_sessions((DOCS / "how-to" / "http-api.md").read_text())
                if "/requeue" not in command and "-X DELETE" not in command]  # the DLQ's: need dead letters
    send, again, receive, ack, patch = sessions
    assert again[0].startswith("# the same request again")
    received: dict = {}

    def paste(command: str) -> dict:
        script = command.replace("http://127.0.0.1:8080", api_with_default_long_polls.url)
        result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                                env={"PATH": os.environ["PATH"], "KEY": SECRET})
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    for command, shown in (send, (send[0], again[1]), receive, ack, patch):
        if command is ack[0]:
            command = command.replace('"0193a5d4-…"', json.dumps(received["id"]), 1)
            command = command.replace('"1795321374745"', json.dumps(received["receipt"]), 1)
            command = command.replace('"0193a5d5-…"', '"0193a5d5-0000-7000-8000-000000000000"')  # none such
        got = paste(command)
        assert same_shape(shown_json(shown), got), (command, got)
        if command is receive[0]:
            (received,) = got["messages"]


@pytest.mark.django_db(transaction=True)
def test_the_groups_how_to_runs_as_it_is(settings, tmp_path, monkeypatch, capsys):
    """docs/how-to/groups.md: its tour prints what its comments say; its FORQ_QUEUES blocks apply;
    its myapp/consumers.py, run by a worker, sends every tenant's emails in order; its Tasks block's
    group_by puts a call in the group it names."""
    from django.core import mail
    from django.core.management import call_command

    import forqapp
    from forqapp.worker import consumers
    from forqapp.worker.runner import Worker

    page = (DOCS / "how-to" / "groups.md").read_text()
    (tour,) = python_blocks(section(page, "groups-tour"))
    exec(compile(tour, "groups.md", "exec"), {})  # noqa: S102 - the docs' own code
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "['busy 0', 'quiet a', 'quiet b']" and out[1] == "[]"
    assert out[2].startswith("GroupInfo(group='tenant-1', ready=2, in_flight=1, ") and out[3] == "1"
    forqapp.delete_queue("emails")

    blocks = python_blocks(page)
    for block in [b for b in blocks if b.startswith("# settings.py")]:
        namespace: dict = {}
        exec(compile(block, "groups.md", "exec"), namespace)  # noqa: S102 - the docs' own code
        settings.FORQ_QUEUES = namespace["FORQ_QUEUES"]
        call_command("forq_queues", "apply", verbosity=0)
    assert forqapp.queue_info("emails").overrides["group_rate"] == "5/s"
    assert forqapp.queue_info("tasks-emails").overrides["group_concurrency"] == 1

    by_file = {b.splitlines()[0]: b for b in blocks}
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "consumers.py").write_text(by_file["# myapp/consumers.py"])
    tasks_py = by_file["# myapp/tasks.py"]
    (tmp_path / "myapp" / "tasks.py").write_text(tasks_py)
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.TASKS = {"default": {"BACKEND": "forqapp.tasks.ForqBackend", "QUEUES": ["default", "emails"],
                                  "OPTIONS": {"queue_prefix": "tasks-"}}}  # (django-tasks.md's, in short)
    forqapp.configure_queue("emails", group_rate=None)  # (the worker need not wait out 5/s here)
    try:
        module = importlib.import_module("myapp.consumers")
        for n in range(3):
            for tenant in (1, 2):
                module.queue_email(tenant, f"t{tenant}@example.com", f"{tenant}-{n}")
        assert Worker({"emails": consumers._registry["emails"]}, concurrency=4, burst=True, start_jitter=0).run() == {
            "ack": 6}
        for tenant in (1, 2):
            assert [m.subject for m in mail.outbox if m.to == [f"t{tenant}@example.com"]] == [
                f"{tenant}-{n}" for n in range(3)]
        send_invoice = importlib.import_module("myapp.tasks").send_invoice
        result = send_invoice.enqueue(42, 7)
        assert forqapp.peek("tasks-emails", result.id).group == "42"
    finally:
        consumers.unregister("emails")
        for name in ("myapp.consumers", "myapp.tasks", "myapp"):
            sys.modules.pop(name, None)
