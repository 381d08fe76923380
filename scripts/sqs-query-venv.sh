#!/usr/bin/env bash
# The SQS tests with a boto3 from before SQS moved to its JSON protocol: botocore 1.31.80 (boto3
# 1.28.80, AWS CLI 1.29.80) is the last release whose SQS model says "protocol":"query" (1.31.81
# switched it to JSON), so these clients send SQS's query protocol (form-encoded POSTs, XML answers).
# This builds a venv of its own, .venv-sqs-query, from PyPI: requirements.txt, the test tools at
# requirements-dev.txt's pins, and those old clients; then runs pytest in it with the arguments given
# (default: tests/test_sqs.py).
#
#     scripts/sqs-query-venv.sh                          # tests/test_sqs.py
#     scripts/sqs-query-venv.sh tests/test_sqs.py -q -x  # anything else
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=.venv-sqs-query
QUERY_CLIENTS="boto3==1.28.80 botocore==1.31.80 awscli==1.29.80"

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
want=$( { cat requirements.txt; grep -E "^django-tasks==" bench/requirements.txt;
          grep -E '^(pytest|pytest-django|pytest-timeout|pytest-xdist|hypothesis|httpx)==' requirements-dev.txt;
          echo "$QUERY_CLIENTS" | tr ' ' '\n'; } |
        grep -v -E '^\s*(#|$)' | sed 's/ *#.*//')
stamp="$VENV/.sqs-query.sha"
if [ "$(cat "$stamp" 2>/dev/null)" != "$(echo "$want" | sha256sum | cut -d' ' -f1)" ]; then
  echo "==> installing requirements.txt, the test tools and $QUERY_CLIENTS into $VENV"
  echo "$want" > "$VENV/requirements-sqs-query.txt"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$VENV/requirements-sqs-query.txt"
  echo "$want" | sha256sum | cut -d' ' -f1 > "$stamp"
fi
"$VENV/bin/python" -c '
import json, botocore, boto3, botocore.loaders
model = botocore.loaders.Loader().load_service_model("sqs", "service-2")
assert model["metadata"]["protocol"] == "query", model["metadata"]["protocol"]
print("==> boto3", boto3.__version__, "botocore", botocore.__version__, "(SQS on the query protocol)")'
paths=0
for arg in "$@"; do [ -e "${arg%%::*}" ] && paths=1; done
[ "$paths" = 0 ] && set -- tests/test_sqs.py "$@"
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
