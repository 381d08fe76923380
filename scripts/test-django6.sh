#!/usr/bin/env bash
# The tests under Django 6.0, whose `django.tasks` the Django Tasks backend (forqapp.tasks) also
# serves. Django 6 needs Python >= 3.12: this builds a second venv, .venv312, from python3.12 (on
# PATH, or pyenv's), with Django 6.0, the rest of requirements.txt and the test tools, then runs
# pytest in it with the arguments given (default: the tasks tests but the browser's).
#
#     scripts/test-django6.sh [-q]                 # tests/test_tasks*.py (not the browser's)
#     scripts/test-django6.sh tests/test_api.py -q  # anything else
set -euo pipefail
cd "$(dirname "$0")/.."
DJANGO6=${DJANGO6:-Django==6.0.10}
VENV=.venv312

find_python312() {
  if [ -n "${PYTHON312:-}" ]; then echo "$PYTHON312"; return; fi
  if command -v python3.12 >/dev/null 2>&1 && python3.12 -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    command -v python3.12; return
  fi
  if command -v pyenv >/dev/null 2>&1; then
    for v in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.12(\.[0-9]+)?$' | sort -V -r); do
      echo "$(pyenv root)/versions/$v/bin/python3.12"; return
    done
  fi
  return 1
}

if [ ! -x "$VENV/bin/python" ]; then
  # 75: not available here (scripts/test.sh says "skipped", or failed under CI=true)
  py=$(find_python312) || { echo "test-django6: no Python 3.12 found (set PYTHON312)" >&2; exit 75; }
  echo "==> creating $VENV with $py"
  "$py" -m venv "$VENV"
fi
# The app's requirements with Django 6 instead of 5.2, and the test tools at requirements-dev.txt's pins.
want=$( { echo "$DJANGO6"; grep -v -i -E '^django==' requirements.txt;
          grep -E '^(pytest|pytest-django|pytest-timeout|hypothesis|httpx)==' requirements-dev.txt; } |
        grep -v -E '^\s*(#|$)' | sed 's/ *#.*//')
stamp="$VENV/.django6.sha"
if [ "$(cat "$stamp" 2>/dev/null)" != "$(echo "$want" | sha256sum | cut -d' ' -f1)" ]; then
  echo "==> installing Django 6 and the test tools into $VENV"
  echo "$want" > "$VENV/requirements-django6.txt"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$VENV/requirements-django6.txt"
  echo "$want" | sha256sum | cut -d' ' -f1 > "$stamp"
fi
"$VENV/bin/python" -c 'import django, django.tasks; print("==> Django", django.get_version(), "(django.tasks)")'
paths=0
for arg in "$@"; do [ -e "${arg%%::*}" ] && paths=1; done
if [ "$paths" = 0 ]; then  # no test named: the tasks tests, less the browser's (it runs in the main venv)
  set -- $(ls tests/test_tasks*.py | grep -v _browser) "$@"
fi
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
