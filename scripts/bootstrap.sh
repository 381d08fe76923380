#!/usr/bin/env bash
# Creates .venv and installs a requirements file into it: requirements.txt (what `make run` needs)
# by default, requirements-dev.txt for `make test`. It installs again only when one of the
# requirements files changed: the stamp is a hash of all of them, one stamp per file installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
file=${1:-requirements.txt}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.$(basename "$file" .txt).sha
want=$(cat requirements.txt requirements-dev.txt bench/requirements.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "==> installing $file into .venv"
  .venv/bin/pip install --quiet --disable-pip-version-check -r "$file"
  echo "$want" > "$stamp"
fi
