#!/usr/bin/env bash
# Installs the Debian packages the tests use when they are missing: Java (Spark), Chromium
# (browser tests). Needs root and Debian's package servers; says why when it can't.
set -uo pipefail
need=()
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
[ -x /usr/bin/chromium ] || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "cannot install ${need[*]} (needs root and apt-get); the tests that need them will skip" >&2
  exit 1
fi
echo "==> installing ${need[*]} (Debian packages)"
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
