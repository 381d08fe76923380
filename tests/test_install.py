"""The docs' tutorial (docs/tutorial.md), followed literally on a fresh ``startproject``.

The settings and urls lines, the view and the consumer come from the tutorial's code blocks (so the
page cannot drift from the code), forqapp from a wheel built the tutorial's way, and every step runs
in a subprocess with the test venv's python, as a user would run it: startproject, the tutorial's
lines, its view that sends inside ``transaction.atomic()``, its consumer, migrate,
``forq_worker --burst``, the failed job, the admin's dead-letter list as a staff user.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from .conftest import free_port

pytestmark = pytest.mark.slow  # a wheel build and about 15 Django start-ups: 20-45 s
# The tutorial and make run start their own processes on SQLite (clean_env drops DATABASE_URL): the
# PostgreSQL phase leaves them out (sqlite_only); make run on PostgreSQL runs in that phase alone.

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = (ROOT / "docs" / "tutorial.md").read_text()
SECRET = "fresh-project-secret-0123456789abcdef"


def section(name: str) -> str:
    return TUTORIAL.split(f"<!-- section:{name} -->", 1)[1].split(f"<!-- /section:{name} -->", 1)[0]


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def block_for(text: str, first_line: str) -> str:
    """The python block of ``text`` whose first line is ``first_line`` (e.g. ``# settings.py``)."""
    (block,) = [b for b in code_blocks(text, "python") if b.splitlines()[0].strip() == first_line]
    return block


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: none of the test suite's FORQ_*/DJANGO_* variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FORQ_", "DJANGO_", "PROMETHEUS_")) and k not in ("DATABASE_URL", "PYTHONPATH")}
    return {**env, **extra}


def run(args: list[str], cwd: Path, env: dict[str, str], ok: bool = True, timeout: float = 120):
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if ok:
        assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
    return result


def build_wheel(tmp: Path) -> Path:
    """``pip wheel --no-deps <checkout> -w dist`` on a copy of the sources (a build writes build/ and
    *.egg-info next to them; the working tree stays untouched)."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "forqapp", src / "forqapp", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(src), "-w", str(tmp / "dist")],
        tmp, clean_env())
    (wheel,) = (tmp / "dist").glob("forqapp-*.whl")
    return wheel


# Appended to the tutorial's views.py: its view inside a larger transaction whose later step fails,
# so neither the user nor the message stays.
ROLLED_BACK_VIEW = '''
from django.views.decorators.csrf import csrf_exempt  # noqa: E402 - this test's own view, as curl reaches it


@csrf_exempt
def sign_up_rolled_back(request):
    with transaction.atomic():
        response = sign_up(request)
        transaction.set_rollback(True)
    return response
'''

DRIVE = '''"""Steps run as a user's code would, through Django's test client; prints JSON."""
import json
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
import django

django.setup()
from django.contrib.auth.models import User
from django.test import Client
from django.test.utils import setup_test_environment

import forqapp
from forqapp.models import Message

setup_test_environment()  # the test client's "testserver" host
client = Client(enforce_csrf_checks=True)  # as curl: no CSRF cookie, no token
out = {"forqapp_file": forqapp.__file__}
if sys.argv[1] == "post":  # drive.py post PATH NAME=VALUE...: a form POST, as the tutorial's curl sends it
    response = client.post(sys.argv[2], dict(arg.split("=", 1) for arg in sys.argv[3:]))
    out["post"] = [response.status_code, response.content.decode()]
elif sys.argv[1] == "state":
    out["users"] = sorted(User.objects.values_list("username", flat=True))
    out["messages"] = sorted(json.loads(c)["to"] for c in Message.objects.filter(queue="emails").values_list("content", flat=True))
    out["api"] = client.post("/api/v1/queues/other/messages", '{"content": "x"}', content_type="application/json",
                             headers={"X-API-Key": os.environ.get("FORQ_AUTH_SECRET", "")}).status_code
elif sys.argv[1] == "admin":
    staff = User.objects.create_superuser("staff", "staff@example.com", "pw-staff-12345")
    client.force_login(staff)
    (dead,) = Message.objects.filter(queue="emails-dlq")
    out["dead"] = [dead.failure_reason, dead.last_error]
    for name, url in (("dead_letters", "/admin/forqapp/deadletter/"), ("messages", "/admin/forqapp/message/"),
                      ("change", f"/admin/forqapp/deadletter/{dead.id}/change/"),
                      ("ui", f"/ui/queues/emails-dlq/messages/{dead.id}/")):
        response = client.get(url)
        out[name] = [response.status_code, response.content.decode()]
print(json.dumps(out))
'''


@pytest.mark.sqlite_only
def test_the_tutorial_on_a_fresh_startproject(tmp_path):
    install = section("install")

    # The wheel, built and installed the tutorial's way (--no-deps: the test venv has the dependencies).
    shell = "\n".join(code_blocks(install, "sh"))
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert "pip wheel --no-deps /path/to/forqapp -w dist" in shell
    assert f'pip install "dist/forqapp-{version}-py3-none-any.whl[server,postgres]"' in shell
    assert 'pip install "/path/to/forqapp[server,postgres]"' in shell
    wheel = build_wheel(tmp_path)
    assert wheel.name == f"forqapp-{version}-py3-none-any.whl"
    metadata = zipfile.ZipFile(wheel).read(f"forqapp-{version}.dist-info/METADATA").decode()
    assert {"server", "postgres", "spark"} <= set(re.findall(r"^Provides-Extra: (\S+)$", metadata, flags=re.M))
    site = tmp_path / "site"
    run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        tmp_path, clean_env())
    data = {p.relative_to(ROOT) for p in (ROOT / "forqapp").rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts}
    assert {Path("forqapp/api/openapi.json"), Path("forqapp/templates/forqapp/base.html"),
            Path("forqapp/static/forqapp/forq.css")} <= data
    assert sorted(p for p in data if not (site / p).is_file()) == []  # templates, static, OpenAPI: all there

    # A fresh project, with the tutorial's lines appended as they are.
    env = clean_env(PYTHONPATH=str(site))  # forqapp from the wheel, not from this checkout
    project = tmp_path / "proj"
    project.mkdir()
    run([sys.executable, "-m", "django", "startproject", "mysite", str(project)], tmp_path, env)
    manage = [sys.executable, "manage.py"]
    run([*manage, "startapp", "myapp"], project, env)
    settings_py, urls_py = project / "mysite" / "settings.py", project / "mysite" / "urls.py"
    tutorial = section("tutorial")
    settings_py.write_text(settings_py.read_text() + "\n" + block_for(install, "# settings.py")
                           + "\n" + block_for(tutorial, "# settings.py: your app"))
    urls_py.write_text(urls_py.read_text() + "\n" + block_for(install, "# urls.py")
                       + "\n" + block_for(tutorial, "# urls.py: the view")
                       + '\nfrom myapp.views import sign_up_rolled_back\n\n'
                       + 'urlpatterns += [path("signup-rolled-back/", sign_up_rolled_back)]\n')
    # The tutorial's view and consumer, as they are.
    (project / "myapp" / "views.py").write_text(block_for(tutorial, "# myapp/views.py") + ROLLED_BACK_VIEW)
    consumer = block_for(section("worker"), "# myapp/consumers.py")
    assert 'raise forqapp.FatalError("no recipient")' in consumer
    (project / "myapp" / "consumers.py").write_text(consumer)
    (project / "drive.py").write_text(DRIVE)

    # Before migrate: one line, exit 1, for the worker and the jobs.
    for command in (["forq_worker", "--burst"], ["forq_jobs", "run", "failed"]):
        result = run([*manage, *command], project, env, ok=False)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip().splitlines() == [
            "CommandError: the database has no forqapp tables: run manage.py migrate"]

    # Checks: clean; the missing key is a deploy check that says where to set it; the exported key counts.
    run([*manage, "check"], project, env)
    result = run([*manage, "check", "--deploy"], project, env, ok=False)
    assert result.returncode == 1 and "(forqapp.E001) FORQ_AUTH_SECRET is not set" in result.stderr
    assert "set FORQ_AUTH_SECRET in settings.py or export it in the environment" in result.stderr
    env["FORQ_AUTH_SECRET"] = SECRET
    result = run([*manage, "check", "--deploy"], project, env)
    assert "forqapp." not in result.stdout + result.stderr

    # A bad FORQ_CONSUMERS path: a check with an id, and the worker stops in one line.
    (project / "mysite" / "bad_settings.py").write_text(
        'from mysite.settings import *  # noqa\nFORQ_CONSUMERS = {"reports": "myapp.jobs.send_report"}\n')
    bad = {**env, "DJANGO_SETTINGS_MODULE": "mysite.bad_settings"}
    result = run([*manage, "check"], project, bad, ok=False)
    assert result.returncode == 1
    assert "(forqapp.E040) FORQ_CONSUMERS['reports']: cannot import 'myapp.jobs.send_report'" in result.stderr
    result = run([*manage, "forq_worker", "--burst"], project, bad, ok=False)
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1 and "forqapp.E040" in result.stderr

    run([*manage, "migrate", "-v0"], project, env)

    # The tutorial's curl commands, as form POSTs without a CSRF token (what curl sends).
    curls = {}
    for line in "\n".join(code_blocks(section("tutorial") + section("worker"), "sh")).splitlines():
        if line.startswith("curl "):
            args = shlex.split(line)
            fields = [args[i + 1] for i, arg in enumerate(args) if arg == "-d"]
            curls[fields[0].split("=", 1)[1]] = [urlsplit(args[-1]).path, *fields]
    assert curls == {"ada": ["/signup/", "username=ada", "email=ada@example.com"],
                     "bob": ["/signup/", "username=bob", "email="]}

    def drive(*args: str) -> dict:
        out = json.loads(run([sys.executable, "drive.py", *args], project, env).stdout)
        assert out["forqapp_file"].startswith(str(site))
        return out

    def worker_burst(last_line: str) -> subprocess.CompletedProcess:
        """``forq_worker --burst``, whose last line of output the tutorial quotes."""
        assert "python manage.py forq_worker --burst\n" in section("worker") and f"`{last_line}`" in section("worker")
        result = run([*manage, "forq_worker", "--burst"], project, env)
        assert result.stdout.strip().splitlines()[-1] == last_line
        return result

    # A view that sends inside transaction.atomic(): committed with the user, or rolled back with it.
    assert drive("post", *curls["ada"])["post"] == [200, "ok"]
    assert drive("post", "/signup-rolled-back/", "username=eve", "email=eve@example.com")["post"][0] == 200
    state = drive("state")
    assert state["users"] == ["ada"] and state["messages"] == ["ada@example.com"]
    (shown,) = re.findall(r"^python manage\.py forq_queues\n# (.+)$", section("tutorial"), flags=re.M)
    listed = run([*manage, "forq_queues"], project, env).stdout.splitlines()
    assert [line for line in listed if line.startswith("emails ")] == [shown]
    assert state["api"] == 204  # FORQ_AUTH_SECRET exported, not in settings.py: the API takes it

    # The worker runs the tutorial's consumer: ada is mailed (the console backend prints the email).
    result = worker_burst("forq_worker: done, ack 1")
    assert "To: ada@example.com" in result.stdout and "Subject: Welcome" in result.stdout
    assert result.stdout.count("To: ") == 1
    # Bob has no email address: his message fails for good.
    assert drive("post", *curls["bob"])["post"] == [200, "ok"]
    assert drive("state")["users"] == ["ada", "bob"]
    result = worker_burst("forq_worker: done, fail 1")
    assert "To: " not in result.stdout and "on emails failed for good: no recipient" in result.stderr
    assert "`failed: handled 1`" in TUTORIAL
    assert run([*manage, "forq_jobs", "run", "failed"], project, env).stdout.strip() == "failed: handled 1"

    # The admin, as staff: the dead letter with its reason and the consumer's own error.
    pages = json.loads(run([sys.executable, "drive.py", "admin"], project, env).stdout)
    error = "forqapp.errors.FatalError: no recipient"
    assert pages["dead"] == ["fatal_error", error]
    for name in ("dead_letters", "messages", "change", "ui"):
        status, html = pages[name]
        assert status == 200 and error in html, name
    assert "fatal_error" in pages["dead_letters"][1]


# --- make run's banner, pasted as it is -----------------------------------------------------------------

RUN_FILES = ("manage.py", "project", "forqapp", "scripts", "templates", "requirements.txt", "requirements-dev.txt",
             "bench/requirements.txt")


def checkout(tmp: Path) -> Path:
    """A copy of what ``make run`` uses (it writes var/ beside the sources), with this test venv as
    its .venv, already installed (scripts/bootstrap.sh finds its stamp: no pip run)."""
    root = tmp / "checkout"
    for name in RUN_FILES:
        source, target = ROOT / name, root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(source, target)
    venv = root / ".venv"
    (venv / "bin").mkdir(parents=True)
    shutil.copy(Path(sys.prefix) / "pyvenv.cfg", venv / "pyvenv.cfg")
    (venv / "lib").symlink_to(Path(sys.prefix) / "lib")
    (venv / "bin" / "python").symlink_to(Path(sys.prefix) / "bin" / "python")
    requirements = b"".join((ROOT / n).read_bytes() for n in ("requirements.txt", "requirements-dev.txt",
                                                              "bench/requirements.txt"))
    (venv / ".requirements.sha").write_text(hashlib.sha256(requirements).hexdigest() + "\n")
    return root


def indented_block(banner: str, heading: str) -> str:
    """The lines to paste under ``heading`` in the banner: the 4-space indented ones that follow it."""
    lines = banner.split(heading, 1)[1].splitlines()[1:]
    block = []
    for line in lines:
        if line.startswith("    "):
            block.append(line[4:])
        elif block or not line.startswith("  "):
            break
    return "\n".join(block)


class MakeRun:
    """``scripts/run.sh`` in a copy of the checkout, on free ports, as a user starts it."""

    def __init__(self, tmp: Path, root: Path | None = None, **env: str):
        self.root = root or checkout(tmp)  # (root: a checkout an earlier run used, var/ and all)
        self.api = f"127.0.0.1:{free_port()}"
        self.log = tmp / f"run-{time.monotonic_ns()}.log"
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                ["scripts/run.sh"], cwd=self.root, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env=clean_env(FORQ_API_ADDR=self.api, FORQ_UI_ADDR=f"127.0.0.1:{free_port()}", PYTHONUNBUFFERED="1",
                              **env))
        deadline = time.monotonic() + 120
        while "forqapp API listening on" not in self.output():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.output()
            time.sleep(0.1)

    def output(self) -> str:
        return self.log.read_text()

    def paste(self, heading: str) -> subprocess.CompletedProcess[str]:
        """The banner's lines under ``heading``, pasted into a user's bash in the checkout (an
        environment without the server's variables)."""
        block = indented_block(self.output(), heading)
        assert block, self.output()
        return subprocess.run(["bash", "-c", block], cwd=self.root, env=clean_env(), capture_output=True, text=True,
                              timeout=120)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGINT)  # Ctrl-C
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def send_with(api: str, token: str) -> int:
    request = urllib.request.Request(f"http://{api}/api/v1/queues/orders/messages", data=b'{"content": "x"}',
                                     headers={"X-API-Key": token}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - a local test server
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def check_banner(run: MakeRun) -> None:
    """The round trip, the demo and the scoped key, each pasted as the banner prints it."""
    banner = run.output()
    assert "FORQ_API_ADDR=localhost:9080 FORQ_UI_ADDR=localhost:9081 make run" in banner  # how to change the ports
    trip = run.paste("Try it from another terminal")
    assert trip.returncode == 0, trip.stderr
    assert trip.stdout.count("HTTP/1.1 204") == 2, trip.stdout  # the send, then the ack
    assert '"content": "hello"' in trip.stdout.replace('":"', '": "')
    demo = run.paste("Pages to look at")
    assert demo.returncode == 0 and "forq_demo: queues demo-orders" in demo.stdout, demo.stdout + demo.stderr
    made = run.paste("Scoped API keys")
    assert made.returncode == 0, made.stderr
    assert send_with(run.api, made.stdout.strip().splitlines()[-1]) == 204  # sealed and stored as the server's


@pytest.mark.sqlite_only
def test_make_runs_banner_pasted_as_it_is(tmp_path):
    run = MakeRun(tmp_path)
    try:
        first = run.output().split("forqapp is starting — ", 1)[1].splitlines()[0]
        assert first == f"SQLite database: {run.root / 'var' / 'forq.sqlite3'}"
        check_banner(run)
    finally:
        run.stop()


def admin_password(banner: str) -> str:
    return re.search(r"\(user admin, password (.*); Django admin at /admin/\)", banner)[1]


def can_log_in(run: MakeRun, password: str) -> bool:
    env = clean_env(FORQ_DB_PATH=str(run.root / "var" / "forq.sqlite3"), DJANGO_SETTINGS_MODULE="project.settings")
    code = ("import os, django; django.setup(); from django.contrib.auth import authenticate; "
            "print(authenticate(username='admin', password=os.environ['TRY']) is not None)")
    out = subprocess.run([".venv/bin/python", "-c", code], cwd=run.root, env={**env, "TRY": password},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() == "True"


@pytest.mark.sqlite_only
def test_a_password_given_to_make_run_is_the_one_the_next_plain_run_prints(tmp_path):
    """``FORQ_ADMIN_PASSWORD=… make run`` set the admin's password, and the next plain ``make run``
    printed var/local.env's old one, which no longer logged in."""
    first = MakeRun(tmp_path)
    first.stop()
    generated = admin_password(first.output())
    given = "my pass 'word\"$x"  # (spaces, quotes and a dollar: var/local.env is sourced by shells)
    second = MakeRun(tmp_path, root=first.root, FORQ_ADMIN_PASSWORD=given)
    second.stop()
    assert "==> set the password of staff user admin" in second.output()
    assert admin_password(second.output()) == given
    third = MakeRun(tmp_path, root=first.root)
    third.stop()
    assert admin_password(third.output()) == given != generated
    assert can_log_in(third, given) and not can_log_in(third, generated)


@pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                    reason="runs with the PostgreSQL tests (DATABASE_URL=postgres://…)")
def test_make_run_on_postgresql_names_it_and_its_keys_line_uses_it(tmp_path):
    """Under DATABASE_URL=… make run, the banner said "SQLite database: var/forq.sqlite3" and its
    forq_keys line wrote the key into SQLite: the server answered 401."""
    psycopg = pytest.importorskip("psycopg")
    base = os.environ["DATABASE_URL"]  # the PostgreSQL tests' server: a database of its own there
    name = f"forq_make_run_{os.getpid()}"
    try:
        admin = psycopg.connect(base.rsplit("/", 1)[0] + "/postgres", autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as error:
        pytest.skip(f"no PostgreSQL to run on: {error}")
    with admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
        url = re.sub(r"//([^:@/]+)@", r"//\1:not-shown-pw@", base.rsplit("/", 1)[0]) + f"/{name}"  # (trust: unused)
        try:
            run = MakeRun(tmp_path, DATABASE_URL=url)
            try:
                first = run.output().split("forqapp is starting — ", 1)[1].splitlines()[0]
                assert re.fullmatch(rf"PostgreSQL database: {name} on [\w.]+:\d+ \(user \w+\)", first), first
                assert "not-shown-pw" not in first
                check_banner(run)
                assert not (run.root / "var" / "forq.sqlite3").exists()
            finally:
                run.stop()
        finally:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
