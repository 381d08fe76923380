#!/usr/bin/env bash
# Installs the AWS SDKs for JavaScript that tests/test_sqs_js.py runs (tests/js/package-lock.json,
# `npm ci` into tests/js/node_modules) when they are missing or the lock changed. Needs Node.js and
# npm (Debian's nodejs and npm, or the machine's); without them it says so and exits 75 ("skipped":
# the tests skip with the reason), and under CI=true it fails.
set -uo pipefail
cd "$(dirname "$0")/../tests/js"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "no Node.js and npm here: the JavaScript SDK tests (tests/test_sqs_js.py) will skip" >&2
  [ "${CI:-}" = "true" ] && exit 1
  exit 75
fi
stamp=node_modules/.forq-lock.sha
want=$(sha256sum package-lock.json | cut -d' ' -f1)
[ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && exit 0
echo "==> npm ci in tests/js (the AWS SDKs for JavaScript, $(node --version))"
npm ci --no-audit --no-fund --loglevel=error || exit 1
echo "$want" > "$stamp"
