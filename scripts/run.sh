#!/usr/bin/env bash
# `make run`: everything a first-time user needs, then the server (API + admin UI) on SQLite (or on
# the PostgreSQL of DATABASE_URL=postgres://… make run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
mkdir -p var
# Local secrets: made once, kept in var/local.env (git-ignored), reused on every run.
if [ ! -f var/local.env ]; then
  gen() { .venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(32))'; }
  umask 077
  {
    echo "FORQ_AUTH_SECRET=$(gen)"
    echo "FORQ_METRICS_AUTH_SECRET=$(gen)"
    echo "DJANGO_SECRET_KEY=$(gen)$(gen)"
    echo "FORQ_KEYS_SECRET=$(gen)"  # seals scoped API keys' secrets (kept: changing it voids every key)
    echo "FORQ_ADMIN_PASSWORD=$(gen | cut -c1-16)"
  } > var/local.env
  echo "==> generated local secrets in var/local.env"
fi
# Values already in the environment win over the generated ones.
secrets="FORQ_AUTH_SECRET FORQ_METRICS_AUTH_SECRET DJANGO_SECRET_KEY FORQ_ADMIN_PASSWORD FORQ_KEYS_SECRET"
for name in $secrets; do [ -n "${!name:-}" ] && declare "given_$name=${!name}"; done
set -a
# shellcheck disable=SC1091
. var/local.env
for name in $secrets; do given="given_$name"; [ -n "${!given:-}" ] && declare "$name=${!given}"; done
set +a
export FORQ_DB_PATH=${FORQ_DB_PATH:-$PWD/var/forq.sqlite3}
export FORQ_API_ADDR=${FORQ_API_ADDR:-localhost:8080}
export FORQ_UI_ADDR=${FORQ_UI_ADDR:-localhost:8081}
export DJANGO_SETTINGS_MODULE=project.settings
PY=.venv/bin/python
$PY manage.py migrate --noinput -v0
$PY manage.py collectstatic --noinput -v0
# The staff user: made on the first run; a FORQ_ADMIN_PASSWORD given in the environment also sets it.
FORQ_ADMIN_PASSWORD_GIVEN=${given_FORQ_ADMIN_PASSWORD:+1} $PY manage.py shell -v 0 -c "
import os
from django.contrib.auth import get_user_model
User = get_user_model()
password = os.environ['FORQ_ADMIN_PASSWORD']
user = User.objects.filter(username='admin').first()
if user is None:
    User.objects.create_superuser('admin', '', password)
    print('==> created staff user admin')
elif os.environ.get('FORQ_ADMIN_PASSWORD_GIVEN') and not user.check_password(password):
    user.set_password(password)
    user.save(update_fields=['password'])
    print('==> set the password of staff user admin (FORQ_ADMIN_PASSWORD)')
"
# A password given in the environment is now the user's: var/local.env keeps it, so the next plain
# `make run` prints the password that works.
if [ -n "${given_FORQ_ADMIN_PASSWORD:-}" ]; then
  (umask 077
   { grep -v '^FORQ_ADMIN_PASSWORD=' var/local.env || true
     printf 'FORQ_ADMIN_PASSWORD=%q\n' "$FORQ_ADMIN_PASSWORD"; } > var/local.env.new
   mv var/local.env.new var/local.env)
fi
# A URL to reach a listener from this machine: "localhost", an empty host (":8080") or 0.0.0.0 → 127.0.0.1.
url() {
  local host=${1%:*} port=${1##*:}
  case "$host" in ""|localhost|0.0.0.0|"[::]") host=127.0.0.1 ;; esac
  echo "http://$host:$port"
}
api=$(url "$FORQ_API_ADDR")
# The database this server uses, as Django sees it (DATABASE_URL, else the SQLite file): its password never printed.
database=$($PY -c '
import django
django.setup()
from django.db import connection
s = connection.settings_dict
if connection.vendor == "sqlite":
    print("SQLite database:", s["NAME"])
else:
    print("%s database: %s on %s:%s (user %s)" % (connection.display_name, s["NAME"], s["HOST"] or "localhost",
                                                   s["PORT"] or 5432, s["USER"]))
')
# forq_keys must use the server's database and seal with its FORQ_KEYS_SECRET: the file's, or the one
# exported (which wins). Any DATABASE_URL given to make run is carried as it is (quoted for the shell).
where="FORQ_DB_PATH=$(printf %q "$FORQ_DB_PATH")"
[ -n "${DATABASE_URL:-}" ] && where="DATABASE_URL=$(printf %q "$DATABASE_URL")"
keys_cmd="(set -a; . var/local.env; $where $PY manage.py forq_keys create demo-producer --grant orders:produce)"
if [ -n "${given_FORQ_KEYS_SECRET:-}" ]; then
  keys_cmd="(s=\$FORQ_KEYS_SECRET; set -a; . var/local.env; FORQ_KEYS_SECRET=\$s $where $PY manage.py forq_keys create demo-producer --grant orders:produce)
    # in a shell with the FORQ_KEYS_SECRET you exported for the server"
fi
demo_cmd="(set -a; . var/local.env; $where $PY manage.py forq_demo)"
cat <<MSG

  forqapp is starting — $database

  API      $api        (X-API-Key: $FORQ_AUTH_SECRET)
  Admin    $(url "$FORQ_UI_ADDR")/   (user admin, password $FORQ_ADMIN_PASSWORD; Django admin at /admin/)
  Jobs     run inside the server: unacked messages come back after 5 min, failed and expired
           ones move to their DLQ, the dashboard's 24-hour charts fill in
           (one scheduler per database; FORQ_SERVE_JOBS=false leaves them to forq_jobs or cron)
  Ports    FORQ_API_ADDR and FORQ_UI_ADDR, e.g. FORQ_API_ADDR=localhost:9080 FORQ_UI_ADDR=localhost:9081 make run

  Try it from another terminal once the server has printed its API "listening on" line below, pasting the
  lines as they are: send, receive, then ack with the id and receipt the receive answered.
    KEY='$FORQ_AUTH_SECRET'; Q=$api/api/v1/queues/demo/messages
    curl -i -X POST -H "X-API-Key: \$KEY" -d '{"content":"hello"}' \$Q
    MSG=\$(curl -s -H "X-API-Key: \$KEY" \$Q); echo "\$MSG"
    ID=\$(echo "\$MSG" | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
    RECEIPT=\$(echo "\$MSG" | python3 -c 'import json, sys; print(json.load(sys.stdin)["receipt"])')
    curl -i -X POST -H "X-API-Key: \$KEY" -H "X-Forq-Receipt: \$RECEIPT" \$Q/\$ID/ack

  Pages to look at: fill them with demo queues, messages, a DLQ and a schedule (idempotent):
    $demo_cmd

  Scoped API keys (one queue, some actions; the secret shown once): the admin's "API keys" page, or
    $keys_cmd

  Secrets live in var/local.env (variables set in the environment win). Ctrl-C stops the server.

MSG
exec $PY manage.py forq_serve
