#!/usr/bin/env bash
# Creates .venv and installs requirements.txt into it (again only when requirements.txt changed).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements.sha
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "==> installing requirements.txt into .venv (first time: a few minutes)"
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
  echo "$want" > "$stamp"
fi
