"""scripts/phases.sh, the phases of ``make test`` (scripts/test.sh): every phase runs whatever failed
before it, and one summary at the end says which passed, failed or were skipped."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _as_at_a_terminal() -> None:
    """SIGINT at its default in the child, as a shell started from a terminal has it: a shell that
    starts with SIGINT ignored cannot trap it (POSIX), and the process running the tests may have it
    ignored (a pytest-xdist worker of a full run did once; the Ctrl-C test then saw no Ctrl-C).
    Only the Ctrl-C test needs it (``preexec_fn`` runs between fork and exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def run_phases(body: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = f"set -uo pipefail\n. scripts/phases.sh\n{body}\nphases_summary\n"
    return subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", **env})


def summary(out: str) -> list[tuple[str, str]]:
    lines = out.split("==> summary\n", 1)[1].splitlines()
    return [(line[2:14].strip(), line[15:59].strip()) for line in lines
            if not line.startswith(("==>", " " * 14))]  # (not pytest's closing line, under its phase)


FAKE = """
unavailable() { echo "no such service here" >&2; return "$PHASE_SKIP"; }
phase "ok first" true
phase "a failing phase" false
phase "runs after the failure" bash -c 'echo ran-after'
phase "not available here" unavailable
"""


def test_every_phase_runs_and_one_summary_says_which_failed():
    result = run_phases(FAKE)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ran-after" in result.stdout  # the failure did not stop the run
    assert summary(result.stdout) == [("passed", "ok first"), ("failed", "a failing phase"),
                                      ("passed", "runs after the failure"), ("skipped", "not available here")]
    assert result.stdout.rstrip().splitlines()[-1] == "==> FAILED: a failing phase"
    assert "no such service here" in result.stdout  # the reason of the skip, as the command said it


def test_on_ci_a_missing_service_is_a_failure():
    result = run_phases('phase "ok" true\nphase "no postgres" bash -c "exit 75"', CI="true")
    assert result.returncode == 1
    assert summary(result.stdout) == [("passed", "ok"), ("failed", "no postgres")]
    assert "no postgres: required on CI (CI=true)" in result.stderr


def test_all_passed_or_skipped_exits_0_with_the_time_of_each():
    result = run_phases('phase "one" true\nphase "two" bash -c "exit 75"')
    assert result.returncode == 0, result.stdout
    lines = result.stdout.split("==> summary\n", 1)[1].splitlines()
    assert re.fullmatch(r"  passed +one +\d+s", lines[0]) and re.fullmatch(r"  skipped +two +\d+s", lines[1])
    assert lines[-1] == "==> all phases passed or skipped"


def test_make_test_runs_its_phases_through_the_summary():
    script = (ROOT / "scripts" / "test.sh").read_text()
    names = re.findall(r'^phase "([^"]+)"', script, flags=re.M)
    assert names == ["install requirements-dev.txt", "system packages (Java, Chromium)",
                     "JavaScript SDKs (npm ci in tests/js)", "ruff", "mypy",
                     "docs (mkdocs build --strict)", "migrations match the models", "tests on SQLite", "tests under Django 6",
                     "SQS on the query protocol (boto3 1.28.80)", "tests on PostgreSQL",
                     "network rehearsal (tests/test_rehearsal.py)"]
    assert script.rstrip().endswith("phases_summary")
    assert not re.search(r"^set -\w*e", script, flags=re.M)  # no failing command may end the run


def test_ctrl_c_stops_the_run_and_still_says_what_ran():
    """Ctrl-C as a terminal sends it: SIGINT to the run's whole process group while a phase runs."""
    script = ('set -uo pipefail\n. scripts/phases.sh\nphase "ok" true\nphase "stopped by Ctrl-C" sleep 60\n'
              'phase "later" true\nphases_summary\n')
    run = subprocess.Popen(["bash", "-c", script], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env={"PATH": "/usr/bin:/bin"}, preexec_fn=_as_at_a_terminal,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not subprocess.run(["pgrep", "-g", str(run.pid), "-x", "sleep"], capture_output=True).stdout:
            assert time.monotonic() < deadline and run.poll() is None, "the phase's command never started"
            time.sleep(0.05)
        os.killpg(run.pid, signal.SIGINT)
        out, _ = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == 1
    assert summary(out) == [("passed", "ok"), ("interrupted", "stopped by Ctrl-C"), ("not run", "later")]


def test_the_summary_repeats_pytests_closing_line_under_its_phase():
    pytest_like = r"""printf '..F\n\033[31m===== \033[1m1 failed\033[0m, 2 passed in 0.12s =====\033[0m\n'; exit 1"""
    result = run_phases(f"phase \"tests on SQLite\" bash -c {shlex.quote(pytest_like)}\nphase \"ruff\" true")
    lines = result.stdout.split("==> summary\n", 1)[1].splitlines()
    assert re.fullmatch(r"  failed +tests on SQLite +\d+s", lines[0])
    assert lines[1] == " " * 17 + "1 failed, 2 passed in 0.12s"  # pytest's line, without its colours
    assert re.fullmatch(r"  passed +ruff +\d+s", lines[2])
    assert "===== " in result.stdout.split("==> summary", 1)[0]  # and shown in full as it ran
