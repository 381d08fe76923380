# Phases of a run that goes on past a failure and says at the end what passed: sourced by
# scripts/test.sh (and by tests/test_scripts.py, with phases of its own).
#
#   phase "ruff" .venv/bin/ruff check .     # one line per phase: its name, then its command
#   phases_summary                          # the summary; returns 1 if any phase failed
#
# A phase passes on exit status 0 and fails on any other, except PHASE_SKIP (75): "not available
# here" (no PostgreSQL, no Java, no Python 3.12): "skipped" (the command says why), and a
# failure under CI=true, where everything must run. Ctrl-C stops the run: the
# phases not started yet are listed as not run. A phase's output is shown as it comes (and kept,
# so that the summary can repeat pytest's closing line under its phase).

PHASE_SKIP=75
_phase_results=()
_phase_interrupted=
_phase_logs=$(mktemp -d)
trap '_phase_interrupted=1' INT
trap 'rm -rf "$_phase_logs"' EXIT
if [ -t 1 ]; then  # colours on the terminal, though the output also goes through tee
  export PY_COLORS=1 FORCE_COLOR=1 MYPY_FORCE_COLOR=1
fi

_phase_time() {
  local s=$1
  if [ "$s" -ge 60 ]; then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}

phase() {  # phase NAME COMMAND [ARGS...]
  local name=$1 rc=0 start=$SECONDS status
  shift
  if [ -n "$_phase_interrupted" ]; then
    _phase_results+=("not run|$name|")
    return 0
  fi
  echo "==> $name"
  local log="$_phase_logs/${#_phase_results[@]}"
  "$@" 2>&1 | tee -i "$log"
  rc=${PIPESTATUS[0]}
  if [ -n "$_phase_interrupted" ]; then
    status=interrupted
  elif [ "$rc" -eq 0 ]; then
    status=passed
  elif [ "$rc" -eq "$PHASE_SKIP" ] && [ "${CI:-}" != "true" ]; then
    status=skipped
  else
    status=failed
    [ "$rc" -eq "$PHASE_SKIP" ] && echo "==> $name: required on CI (CI=true)" >&2
  fi
  _phase_results+=("$status|$name|$(_phase_time $((SECONDS - start)))|$(_pytest_line "$log")")
  return 0
}

_pytest_line() {  # pytest's closing line ("12 passed, 1 skipped in 3.05s"), without its colours and rules
  sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -E '^=* ?[0-9]+ (passed|failed|errors?|skipped|deselected)|^=* ?no tests ran' \
    | tail -1 | sed -E 's/^=+ //; s/ =+$//'
}

phases_summary() {
  local entry status name took pytest_line failed=()
  echo
  echo "==> summary"
  for entry in "${_phase_results[@]}"; do
    IFS='|' read -r status name took pytest_line <<<"$entry"
    printf '  %-12s %-44s %s\n' "$status" "$name" "$took"
    [ -z "$pytest_line" ] || printf '  %-12s   %s\n' "" "$pytest_line"
    case $status in failed|interrupted) failed+=("$name") ;; esac
  done
  if [ ${#failed[@]} -gt 0 ]; then
    echo "==> FAILED: $(IFS=,; echo "${failed[*]}" | sed 's/,/, /g')"
    return 1
  fi
  echo "==> all phases passed or skipped"
}
