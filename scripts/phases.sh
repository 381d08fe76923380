# Phases of a run that goes on past a failure and says at the end what passed: sourced by
# scripts/test.sh (and by tests/test_scripts.py, with phases of its own).
#
#   phase "ruff" .venv/bin/ruff check .     # one line per phase: its name, then its command
#   phases_summary                          # the summary; returns 1 if any phase failed
#
# A phase passes on exit status 0 and fails on any other, except PHASE_SKIP (75): "not available
# here" (no PostgreSQL, no Java, no Python 3.12): "skipped" (the command says why), and a
# failure under CI=true, where everything must run. Ctrl-C stops the run: the
# phases not started yet are listed as not run.

PHASE_SKIP=75
_phase_results=()
_phase_interrupted=
trap '_phase_interrupted=1' INT

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
  "$@" || rc=$?
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
  _phase_results+=("$status|$name|$(_phase_time $((SECONDS - start)))")
  return 0
}

phases_summary() {
  local entry status name took failed=()
  echo
  echo "==> summary"
  for entry in "${_phase_results[@]}"; do
    IFS='|' read -r status name took <<<"$entry"
    printf '  %-12s %-44s %s\n' "$status" "$name" "$took"
    case $status in failed|interrupted) failed+=("$name") ;; esac
  done
  if [ ${#failed[@]} -gt 0 ]; then
    echo "==> FAILED: $(IFS=,; echo "${failed[*]}" | sed 's/,/, /g')"
    return 1
  fi
  echo "==> all phases passed or skipped"
}
